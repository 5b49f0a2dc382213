"""Multi-turn GRPO, PivotRL and SAO of a tool-calling agent on a tiny random Qwen2 checkpoint
(BPE tokenizer trained here, the shipped tool-aware chat template), each trained by the run
that `python launch.py --config=configs/agent_tools_*.py` starts, then `--mode=eval` and
`--mode=export`. The default suite runs one step of each in-process; the slow test runs the
launch.py commands the README shows."""
import json
import os
import subprocess
import sys

import pytest

from rlvr.train import loop, modes
from rlvr.train.config import validate_config

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY = {  # test size: short turns, few tasks, one prompt shape
    "model.dtype": "float32", "model.remat": False, "model.max_seq_len": 640,
    "sampling.max_new_tokens": 16, "sampling.prompts_per_step": 2, "rollout.max_turns": 2,
    "rollout.prompt_bucket": 0, "task.pool_size": 2, "train.num_steps": 1,
    "train.num_minibatches": 1, "train.num_microbatches": 1, "train.progress": False,
    "eval.num_tasks": 1, "eval.every": 0, "eval.samples_per_task": 1, "eval.pass_k": (1,),
    "checkpoint.every": 1, "logging.plot": False, "mesh.data": 1,
    "logging.samples_every": 1,
}
EXTRA = {
    "agent_tools_grpo": {"algorithm.group_size": 2},
    "agent_tools_pivotrl": {"pivot.selection": "all", "algorithm.group_size": 2},
    "agent_tools_sao": {"rollout.producer_batch": 2, "rollout.queue_size": 2,
                        "algorithm.critic_warmup_steps": 1},
}


@pytest.fixture
def tools_checkpoint(tiny_tools_checkpoint):
    return tiny_tools_checkpoint


def tiny_config(name, checkpoint, **over):
    import importlib

    c = importlib.import_module(f"configs.{name}").get_config()
    c.model.init_from = checkpoint
    for k, v in {**TINY, **EXTRA[name], **over}.items():
        sec, field = k.split(".")
        setattr(c[sec], field, v)
    return c


@pytest.mark.parametrize("name", sorted(EXTRA))
def test_tool_agent_trains_evaluates_and_exports(tmp_path, tools_checkpoint, name):
    c = tiny_config(name, tools_checkpoint)
    validate_config(c)
    work = str(tmp_path / "run")
    loop.run(c, work)
    rows = [json.loads(x) for x in open(os.path.join(work, "metrics.jsonl"))]
    last = [r for r in rows if r["step"] == 1][-1]
    assert "reward/mean" in last and "policy/entropy" in last
    if name != "agent_tools_pivotrl":  # episodes: the outcome verifier's counts are metrics
        assert "reward/component_malformed_calls_mean" in last
        assert "reward/component_rejected_calls_mean" in last
    else:
        assert "reward/component_malformed_calls_mean" in last  # per turn
        pivots = json.load(open(os.path.join(work, "pivots.json")))
        assert pivots["stats"]["pivot/candidates"] > 0
        assert all(k["task_id"].startswith("kv_tools-kv_trajectories.jsonl-")
                   for k in pivots["candidates"])
    records = [json.loads(x) for x in open(os.path.join(work, "samples.jsonl"))]
    # prompts are the chat template's render with the tool list (PivotRL's records show the
    # decoded prefix, special tokens dropped)
    assert records and all("<tools>" in r["prompt"] and "What is" in r["prompt"] for r in records)
    ev = modes.evaluate(c, work)
    assert ev["num_tasks"] == 1
    out = modes.export(c, work)
    assert os.path.exists(os.path.join(out, "config.json"))
    assert os.path.exists(os.path.join(out, "tokenizer_config.json"))


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(EXTRA))
def test_launch_commands_train_eval_export(tmp_path, tools_checkpoint, name):
    over = [f"--config.model.init_from={tools_checkpoint}"] + [
        f"--config.{k}={v}" for k, v in {**TINY, **EXTRA[name], "train.num_steps": 2,
                                         "eval.num_tasks": 2}.items()
        if k != "eval.pass_k"] + ["--config.eval.pass_k=(1,)"]
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    work = str(tmp_path / "run")
    for args in ([f"--config=configs/{name}.py"] + over, ["--mode=eval"], ["--mode=export"]):
        p = subprocess.run([sys.executable, "launch.py", f"--workdir={work}"] + args, cwd=ROOT,
                           env=env, capture_output=True, text=True, timeout=900)
        assert p.returncode == 0, p.stderr[-3000:]
    rows = [json.loads(x) for x in open(os.path.join(work, "metrics.jsonl"))]
    assert max(r["step"] for r in rows) == 2
    assert json.load(open(os.path.join(work, "eval.json")))["num_tasks"] == 2
    assert json.load(open(os.path.join(work, "export", "rlvr_export.json")))["origin"][
        "checkpoint_step"] == 2


def _train_one_step(c, tmp_path):
    """Trains `c` in tmp_path/run; checks step 1 logged a reward. Returns (workdir, samples)."""
    validate_config(c)
    work = str(tmp_path / "run")
    loop.run(c, work)
    rows = [json.loads(x) for x in open(os.path.join(work, "metrics.jsonl"))]
    assert any(r["step"] == 1 and "reward/mean" in r for r in rows)
    return work, [json.loads(x) for x in open(os.path.join(work, "samples.jsonl"))]


def test_a_mixture_of_tool_kits_trains_one_step_and_evaluates_per_kit(tmp_path, tools_checkpoint):
    c = tiny_config("agent_tools_grpo", tools_checkpoint, **{
        "task.names": ("kv_tools", "shop_tools"), "task.weights": (1.0, 1.0),
        "sampling.prompts_per_step": 4, "eval.num_tasks": 2, "rollout.max_turns": 1})
    del c.task.kwargs["difficulty"]  # task.kwargs go to every kit: each kit's default here
    work, records = _train_one_step(c, tmp_path)
    prompts = " ".join(r["prompt"] for r in records)
    assert '"name": "get"' in prompts and '"name": "get_price"' in prompts  # both kits' tools
    ev = modes.evaluate(c, work)
    assert {"eval/success_kv_tools", "eval/success_shop_tools"} <= set(ev["metrics"])


def test_tool_tasks_from_a_file_train_one_step(tmp_path, tools_checkpoint):
    from rlvr.agents import kv_tools
    from rlvr.envs import kv_store

    path = tmp_path / "kv_tasks.jsonl"
    path.write_text("".join(json.dumps({
        "snapshot": kv_store.make_task_snapshot(kv_store.initial_state(*t)),
        "split": "eval" if i == 0 else "train"}) + "\n"
        for i, t in enumerate(kv_tools.SHIPPED_TASKS)))
    c = tiny_config("agent_tools_grpo", tools_checkpoint, **{
        "task.names": (f"kv_tools:{path}",), "rollout.max_turns": 1})
    work, records = _train_one_step(c, tmp_path)
    first = kv_tools.task_message(kv_store.initial_state(*kv_tools.SHIPPED_TASKS[0]))
    assert records and not any(first in r["prompt"] for r in records)  # the eval record
    assert all("What is" in r["prompt"] for r in records)


def test_pivotrl_trains_the_closing_reply_turn(tmp_path, tools_checkpoint):
    import numpy as np

    from rlvr.train.setup import build_run

    c = tiny_config("agent_tools_pivotrl", tools_checkpoint, **{"pivot.reward": "functional"})
    validate_config(c)
    r = build_run(c, str(tmp_path / "run"))
    try:
        col = getattr(r.collector, "inner", r.collector)
        cands = col._candidates(r.init_params, None)
        replies = [x for x in cands if x.reference_action.startswith("The answer is")]
        assert replies  # the closing reply of every record is a candidate state
        col.kept = replies[:1]
        got = col.collect(r.init_params, 1, 0)
        mask = np.asarray(got.batch.loss_mask)
        assert mask.sum(-1).min() > 0  # the sampled reply tokens carry loss
        assert all(t.public_metadata["turn_index"] == replies[0].turn_index for t in got.tasks)
        # a random policy's reply is judged by the reply check: a wrong one scores 0
        assert all(s.decision in ("pass", "fail") for s in got.samples)
        assert all(float(x) == (s.decision == "pass") for x, s in
                   zip(np.asarray(got.batch.rewards), got.samples))
    finally:
        r.close()
