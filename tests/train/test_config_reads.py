"""One config schema, every field read or refused: each shipped config runs one tiny step
through the loop with a recording config, and every leaf of it must have been read by the run
or be listed by `inapplicable` (not applicable to the algorithm, or inactive)."""

import importlib

import pytest

from rlvr.tasks.kit import build_kit
from rlvr.tasks.tool_agent import TOOL_KITS
from rlvr.train import loop
from rlvr.train.config import ConfigReads, flatten, inapplicable

SHIPPED = ["base", "quickstart", "quickstart_lora", "grpo", "rloo", "reinforce", "ppo", "pivotrl",
           "agent_grpo", "sao", "gsm8k", "shop_grpo", "shop_pivotrl", "shop_sao", "agent_tools_grpo",
           "agent_tools_pivotrl", "agent_tools_sao"]


def _tiny(name, checkpoint=None):
    c = importlib.import_module(f"configs.{name}").get_config()
    if c.tokenizer.kind == "hf":  # a Hugging Face config: the tiny checkpoint, float32, short
        c.model.init_from = checkpoint
        c.model.dtype, c.model.remat, c.model.max_seq_len = "float32", False, 256
        c.sampling.max_new_tokens = 8
        c.rollout.prompt_bucket = 0  # one prompt shape: one compile
        c.train.num_minibatches = c.train.num_microbatches = 1
        if c.task.names[0] in TOOL_KITS:  # the system prompt lists the tools
            c.model.max_seq_len, c.rollout.max_turns = 640, 2
    else:
        c.model.num_layers, c.model.d_model, c.model.num_heads, c.model.num_kv_heads = 1, 16, 2, 2
        c.model.d_ff = 32
    c.train.num_steps = 1
    c.train.progress = False
    if c.train.sft_steps:
        c.train.sft_steps, c.train.sft_batch_size = 1, 4
        c.train.sft_pool = min(c.train.sft_pool, 4)
    if c.task.pool_size:
        c.task.pool_size = 4
    if c.eval.num_tasks:
        c.eval.num_tasks, c.eval.every = 2, 1
    if c.algorithm.name == "pivotrl":
        c.pivot.selection = "all"
    c.sampling.prompts_per_step = 4 if c.algorithm.group_size > 1 else 8
    c.rollout.producer_batch = min(c.rollout.producer_batch, c.sampling.prompts_per_step)
    c.checkpoint.every = 1
    c.logging.samples_every = 1
    c.mesh.data = 1
    return c


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow)
                                  if n.startswith("shop_") or n in ("agent_tools_pivotrl", "agent_tools_sao")
                                  else n for n in SHIPPED])  # the study configs, 2 of 3 tool configs: slow
def test_every_field_read_or_refused(tmp_path, name, request):
    hf = importlib.import_module(f"configs.{name}").get_config().tokenizer.kind == "hf"
    fixture = "tiny_tools_checkpoint" if name.startswith("agent_tools") else "tiny_hf_checkpoint"
    c = _tiny(name, request.getfixturevalue(fixture) if hf else None)
    tracked = ConfigReads(c)
    loop.run(tracked, str(tmp_path))
    kit = build_kit(c.task.names, c.task.weights, c.task.kwargs.to_dict())
    leaves = set(flatten(c))
    na = inapplicable(c, multi_turn=kit.multi_turn)
    unread = sorted(leaves - tracked.reads - set(na))
    assert not unread, f"{name}: fields neither read by the run nor refused: {unread}"
    read_but_refused = sorted(tracked.reads & set(na))
    assert not read_but_refused, f"{name}: refused fields read anyway: {read_but_refused}"
    # the same docs/architecture.md §7 metrics and per-sample records in every algorithm and collector
    from rlvr.train.metrics import read_metrics

    step1 = [r for r in read_metrics(str(tmp_path)) if r["step"] == 1][-1]
    missing = sorted(R72 - set(step1))
    assert not missing, f"{name}: docs/architecture.md §7 metrics missing: {missing}"
    import json

    records = [json.loads(x) for x in open(tmp_path / "samples.jsonl")]
    assert records and all(SAMPLE_FIELDS <= set(r) for r in records)
    assert all(r["stop_reason"] in ("eos", "max_length", "max_turns", "timeout", "env_error", "gate",
                                    "stop_token") for r in records)


R72 = {"reward/mean", "reward/std", "advantage/mean", "advantage/var", "length/mean",
       "length/truncation_rate", "verify/pass_rate", "verify/unknown_rate", "verify/env_error_rate",
       "verify/masked_frac", "verify/retries", "verify/timeouts", "sampling/unique_ratio",
       "policy/entropy", "policy/version", "cost/sampled_tokens", "time/generate_s",
       "time/verify_s", "time/learn_s", "throughput/tokens_per_s"}
SAMPLE_FIELDS = {"step", "task_id", "policy_version", "verifier_version", "environment_version",
                 "reward_config_hash", "sampling_params", "stop_reason", "decision", "trial",
                 "evidence", "text", "prompt", "reward", "valid"}


def test_before_after_table_names_its_metrics_or_says_none_ran():
    from rlvr.train.loop import format_before_after

    table = format_before_after({"eval/success": 0.25}, {"eval/success": 0.5, "eval/cost": 3.0})
    assert table.splitlines()[2] == "| success | 0.250 | 0.500 | +0.250 |" and "cost" not in table
    assert format_before_after({}, {}).startswith("no held-out evaluation ran")
