"""A user's checkpoint on a user's data, end to end on real loading code: a tiny random Qwen2
saved by transformers with a BPE tokenizer and chat template → GRPO on a GSM8K-format file →
Hugging Face export → transformers reload with the trained policy's logits → `--mode=eval`.
The same for code tasks through the bubblewrap sandbox. Both are slow (compiles); the default
suite runs a one-step variant of the first (train, export, reload), the HF config one step with its
export (tests/train/test_config_reads.py), the export and reload (tests/models/test_prompts_export.py)
and the eval mode (below)."""

import json
import os
import subprocess
import sys

import jax
import numpy as np
import pytest

from configs import gsm8k
from rlvr.models import from_pretrained
from rlvr.tasks import builtin
from rlvr.train import modes
from tests.models.helpers import jit_forward
from tests.train.tiny import run_tiny
from tests._xla_flags import flags_for

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
QUESTIONS = [("Ann has {a} apples and buys {b} more. How many apples does she have?", "+"),
             ("Tom had {a} pens and gave away {b}. How many pens are left?", "-")]


def gsm8k_file(path, n_train=6, n_eval=3):
    rows = []
    for i in range(n_train + n_eval):
        q, op = QUESTIONS[i % 2]
        a, b = 10 + i, 1 + i % 5
        ans = a + b if op == "+" else a - b
        rows.append({"question": q.format(a=a, b=b), "answer": f"{a}{op}{b}={ans}\n#### {ans}",
                     "split": "train" if i < n_train else "eval"})
    with open(path, "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    return str(path)


def tiny_hf_config(checkpoint, task, **over):
    c = gsm8k.get_config()
    c.model.init_from = checkpoint
    c.model.dtype, c.model.remat = "float32", False
    c.model.max_seq_len = 192
    c.rollout.prompt_bucket = 0       # one prompt shape: one compile
    c.task.names = (task,)
    c.sampling.max_new_tokens = 12
    c.sampling.prompts_per_step = 2
    c.algorithm.group_size = 4
    # a random policy earns no reward (all-equal groups: zero advantage); the entropy bonus and a
    # large step make sure the trained policy differs from the start
    c.algorithm.entropy_coef = 0.01
    c.optimizer.learning_rate = 1e-3
    c.optimizer.warmup_steps = 0
    c.train.num_steps = 2
    c.train.num_minibatches = c.train.num_microbatches = 1
    c.train.progress = False
    c.eval.num_tasks, c.eval.every = 3, 0
    c.checkpoint.every = 2
    c.logging.samples_every = 0
    c.logging.tensorboard = c.logging.plot = False
    for k, v in over.items():
        sec, name = k.split("__")
        setattr(c[sec], name, v)
    return c


@pytest.mark.slow
def test_gsm8k_file_train_export_reload_eval(tmp_path, tiny_hf_checkpoint):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    data = gsm8k_file(tmp_path / "gsm8k.jsonl")
    c = tiny_hf_config(tiny_hf_checkpoint, f"gsm8k:{data}")
    r, result = run_tiny(c, tmp_path / "run")
    assert result["step"] == 2 and "eval/success" in result["after"]
    rows = [json.loads(x) for x in open(tmp_path / "run" / "metrics.jsonl")]
    assert rows[-1]["step"] == 2 and rows[-1]["length/mean"] > 0
    # the engines read chat-template prompts and stop on eos or the template's end of turn
    hf_tok = AutoTokenizer.from_pretrained(tiny_hf_checkpoint)
    eot = hf_tok.convert_tokens_to_ids("<|im_end|>")
    assert eot in r.renderer.stop_ids and r.tokenizer.eos_id in r.renderer.stop_ids

    export = tmp_path / "run" / "export"
    for fn in ("config.json", "model.safetensors", "tokenizer.json", "generation_config.json",
               "rlvr_export.json"):
        assert (export / fn).exists(), fn
    tok = AutoTokenizer.from_pretrained(str(export))
    hf = AutoModelForCausalLM.from_pretrained(str(export), dtype=torch.float32).eval()
    task = r.kit.source.tasks[0]
    ids = tok.apply_chat_template([{"role": "user", "content": r.renderer.user_text(task.prompt)}],
                                  add_generation_prompt=True, tokenize=True)
    ids = list(ids["input_ids"] if hasattr(ids, "keys") else ids)
    assert ids == r.renderer.encode(task.prompt)
    with torch.no_grad():
        ref = hf(torch.tensor([ids])).logits.numpy()[0]
    ours = np.asarray(jit_forward(r.model_of(jax.device_get(r.state.params)), [ids]))[0]
    assert np.abs(ours - ref).max() < 1e-4
    before = np.asarray(jit_forward(from_pretrained(tiny_hf_checkpoint), [ids]))[0]
    assert np.abs(before - ref).max() > 1e-3  # the export is the trained policy, not the start
    assert hf.generation_config.eos_token_id == list(r.renderer.stop_ids)

    # --mode=eval on the run's latest checkpoint, greedy
    out = modes.evaluate(c, str(tmp_path / "run"))
    assert out["origin"] == {"checkpoint_step": 2,
                             "checkpoint_dir": str(tmp_path / "run" / "checkpoints")}
    saved = json.load(open(tmp_path / "run" / "eval.json"))
    assert saved["mode"] == "greedy" and saved["num_tasks"] == 3 and saved["num_samples"] == 3
    for k in ("eval/success", "eval/pass@1", "eval/tokens", "eval/unknown_rate",
              "eval/env_error_rate", "eval/success_ci95"):
        assert k in saved["metrics"], k
    assert set(saved["by_verifier"]) == {"math-2"}
    samples = [json.loads(x) for x in open(tmp_path / "run" / "eval_samples.jsonl")]
    assert len(samples) == 3 and {s["split"] for s in samples} == {"eval"}
    assert all(s["verifier"] == "math-2" and s["decision"] in ("pass", "fail", "unknown")
               for s in samples)


def test_gsm8k_file_one_step_export_reload_fast(tmp_path, tiny_hf_checkpoint):
    """The default-suite variant of the run above (one step, no held-out evaluation): GRPO on
    the GSM8K-format file from the transformers checkpoint, then the Hugging Face export
    reloads in transformers with the trained policy's logits, not the start's."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    data = gsm8k_file(tmp_path / "gsm8k.jsonl")
    c = tiny_hf_config(tiny_hf_checkpoint, f"gsm8k:{data}", train__num_steps=1,
                       checkpoint__every=1, eval__num_tasks=0, sampling__max_new_tokens=6)
    r, result = run_tiny(c, tmp_path / "run")
    assert result["step"] == 1
    rows = [json.loads(x) for x in open(tmp_path / "run" / "metrics.jsonl")]
    assert rows[-1]["step"] == 1 and rows[-1]["length/mean"] > 0
    export = tmp_path / "run" / "export"
    assert json.load(open(export / "rlvr_export.json"))["origin"] == {"trained_steps": 1}
    tok = AutoTokenizer.from_pretrained(str(export))
    hf = AutoModelForCausalLM.from_pretrained(str(export), dtype=torch.float32).eval()
    task = r.kit.source.tasks[0]
    ids = tok.apply_chat_template([{"role": "user", "content": r.renderer.user_text(task.prompt)}],
                                  add_generation_prompt=True, tokenize=True)
    ids = list(ids["input_ids"] if hasattr(ids, "keys") else ids)
    assert ids == r.renderer.encode(task.prompt)
    with torch.no_grad():
        ref = hf(torch.tensor([ids])).logits.numpy()[0]
    ours = np.asarray(jit_forward(r.model_of(jax.device_get(r.state.params)), [ids]))[0]
    assert np.abs(ours - ref).max() < 1e-4
    before = np.asarray(jit_forward(from_pretrained(tiny_hf_checkpoint), [ids]))[0]
    assert np.abs(before - ref).max() > 1e-3  # the export is the trained policy, not the start


def test_eval_mode_sampled_without_checkpoint_uses_init_from(tmp_path, tiny_hf_checkpoint):
    data = gsm8k_file(tmp_path / "gsm8k.jsonl")
    c = tiny_hf_config(tiny_hf_checkpoint, f"gsm8k:{data}", eval__greedy=False,
                       eval__samples_per_task=2, eval__pass_k=(1, 2))
    out = modes.evaluate(c, str(tmp_path / "fresh"))
    assert out["origin"] == {"init_from": tiny_hf_checkpoint}
    assert out["mode"] == "sampled" and out["num_samples"] == 6
    assert {"eval/pass@1", "eval/pass@2"} <= set(out["metrics"])


@pytest.mark.slow
def test_code_file_through_the_sandbox_and_launch_modes(tmp_path, tiny_hf_checkpoint):
    """Code tasks from a file (docs/architecture.md §3, hidden tests) train, export and evaluate through
    launch.py; every verdict comes from the sandboxed CodeVerifier."""
    tasks = builtin.code_tasks()
    path = tmp_path / "code.jsonl"
    with open(path, "w") as f:
        for t in tasks[:4] + tasks[24:26]:
            f.write(json.dumps(t.to_json()) + "\n")
    over = ["--config.model.init_from=" + tiny_hf_checkpoint, "--config.model.dtype=float32",
            "--config.model.remat=False", "--config.model.max_seq_len=160",
            "--config.rollout.prompt_bucket=0", f"--config.task.names=('code:{path}',)",
            "--config.sampling.max_new_tokens=12", "--config.sampling.prompts_per_step=2",
            "--config.algorithm.group_size=2", "--config.train.num_steps=2",
            "--config.train.num_minibatches=1", "--config.train.num_microbatches=1",
            "--config.eval.num_tasks=2", "--config.eval.every=0", "--config.checkpoint.every=2",
            "--config.train.progress=False", "--config.logging.plot=False",
            "--config.reward.executor=thread", "--config.reward.timeout_s=30"]
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS=flags_for(1))
    base = [sys.executable, "launch.py", "--config=configs/gsm8k.py", f"--workdir={tmp_path}/run"]
    for mode in ("train", "eval", "export"):
        p = subprocess.run(base + [f"--mode={mode}"] + over, cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=900)
        assert p.returncode == 0, (mode, p.stderr[-3000:])
    ev = json.load(open(tmp_path / "run" / "eval.json"))
    assert ev["origin"]["checkpoint_step"] == 2 and set(ev["by_verifier"]) == {"code-4"}
    assert ev["by_verifier"]["code-4"]["env_error_rate"] == 0.0
    samples = [json.loads(x) for x in open(tmp_path / "run" / "eval_samples.jsonl")]
    assert {s["task_id"] for s in samples} == {t.task_id for t in tasks[24:26]}
    assert all("hidden" in s["components"] or s["evidence"].get("reason") for s in samples)
    meta = json.load(open(tmp_path / "run" / "export" / "rlvr_export.json"))
    assert meta["origin"]["checkpoint_step"] == 2 and meta["prompt"]["chat_template"]
