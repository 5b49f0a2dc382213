"""Each family end to end: a tiny checkpoint with the family's chat template in miniature runs
one GRPO step through launch.py and exports a folder transformers loads with the same logits;
LoRA adapts the family's targets (a MoE layer: attention only)."""

import json
import os
import subprocess
import sys

import jax
import numpy as np
import pytest
from flax import nnx

from rlvr.models import Transformer, from_pretrained
from rlvr.models.lora import LoRAConfig, apply_lora, lora_targets, merge
from tests.models.helpers import (FAMILIES, build_family_run_checkpoint, jit_forward,
                                  tiny_family_config, torch_logits)
from tests.train.test_hf_run import gsm8k_file
from tests._xla_flags import flags_for

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _launch(workdir, checkpoint, mode, data, devices=1, extra=()):
    over = ["--config.model.init_from=" + checkpoint, f"--config.task.names=('gsm8k:{data}',)",
            "--config.model.dtype=float32",
            "--config.model.remat=False", "--config.model.max_seq_len=160",
            "--config.rollout.prompt_bucket=0", "--config.sampling.max_new_tokens=8",
            "--config.sampling.prompts_per_step=2", "--config.algorithm.group_size=2",
            "--config.algorithm.entropy_coef=0.01", "--config.optimizer.learning_rate=1e-3",
            "--config.optimizer.warmup_steps=0", "--config.train.num_steps=1",
            "--config.train.num_minibatches=1", "--config.train.num_microbatches=1",
            "--config.eval.every=0", "--config.eval.num_tasks=2", "--config.checkpoint.every=1",
            "--config.train.progress=False", "--config.logging.plot=False",
            "--config.logging.tensorboard=False", "--config.logging.samples_every=0", *extra]
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS=flags_for(devices))
    p = subprocess.run([sys.executable, "launch.py", "--config=configs/gsm8k.py",
                        f"--workdir={workdir}", f"--mode={mode}"] + over, cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, (mode, p.stderr[-3000:])


@pytest.mark.parametrize("family", [
    f if f == "qwen3_moe" else pytest.param(f, marks=pytest.mark.slow)
    for f in FAMILIES])
def test_grpo_step_through_launch_and_export(family, tmp_path):
    """One GRPO step of the family's checkpoint under its chat template (the prompts carry its
    turn markers, its end-of-turn token stops generation), then --mode=export: transformers
    loads the trained policy with our logits. A MoE run logs its load-balancing loss; Qwen3-MoE
    trains on a (data 1, expert 2) mesh of 2 simulated devices (`mesh.expert`)."""
    from transformers import AutoModelForCausalLM

    ckpt = build_family_run_checkpoint(tmp_path / "ckpt", family)
    data = gsm8k_file(tmp_path / "gsm8k.jsonl", n_train=4, n_eval=2)
    ep = family == "qwen3_moe"
    _launch(tmp_path / "run", ckpt, "train", data, devices=2 if ep else 1,
            extra=("--config.mesh.expert=2",) if ep else ())
    rows = [json.loads(x) for x in open(tmp_path / "run" / "metrics.jsonl")]
    last = rows[-1]
    assert last["step"] == 1
    if family in ("qwen3_moe", "mixtral"):
        assert last["policy/router_aux_loss"] >= 0.99  # E·Σ f·P >= 1 up to rounding
    _launch(tmp_path / "run", ckpt, "export", data)
    out = str(tmp_path / "run" / "export")
    meta = json.load(open(os.path.join(out, "rlvr_export.json")))
    assert meta["prompt"]["chat_template"]
    trained = from_pretrained(out)
    assert trained.config.architecture == family
    before = from_pretrained(ckpt)
    toks = np.random.RandomState(0).randint(0, 200, (2, 12)).astype(np.int32)
    ours = np.asarray(jit_forward(trained, toks))
    assert np.abs(ours - np.asarray(jit_forward(before, toks))).max() > 1e-6  # it trained
    ref = torch_logits(AutoModelForCausalLM.from_pretrained(out).eval(), toks)
    assert np.abs(ours - ref).max() <= 1e-4


@pytest.mark.parametrize("family", FAMILIES)
def test_lora_targets_per_family(family):
    """The targets a family's LoRA may name (`lora_targets`); adapters on every one of them,
    merged back, give the adapted model's logits; a MoE layer's experts are never adapted.
    (Also: `ModelConfig.num_params` counts the family's parameters.)"""
    cfg = tiny_family_config(family, 64)
    targets = lora_targets(cfg)
    moe = cfg.num_experts > 0
    assert set(targets) == ({"q_proj", "k_proj", "v_proj", "o_proj"} if moe else
                            {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                             "down_proj"})
    model = Transformer(cfg, rngs=nnx.Rngs(0))
    sizes = [x.size for x in jax.tree.leaves(nnx.state(model, nnx.Param))]
    assert sum(sizes) == cfg.num_params()  # the config's count matches the module's
    toks = np.random.RandomState(0).randint(0, 64, (2, 10)).astype(np.int32)
    base = np.asarray(jit_forward(model, toks))
    policy = apply_lora(model, LoRAConfig(rank=2, targets=targets, seed=1))
    state = nnx.state(policy.model, nnx.LoRAParam)
    nnx.update(policy.model, jax.tree.map(lambda x: x + 0.01, state))
    adapted = np.asarray(jit_forward(policy.model, toks))
    assert np.abs(adapted - base).max() > 1e-3
    np.testing.assert_allclose(np.asarray(jit_forward(merge(policy.model), toks)), adapted,
                               atol=1e-5)
    if moe:
        with pytest.raises(ValueError, match="LoRAConfig.targets"):
            apply_lora(Transformer(cfg, rngs=nnx.Rngs(0)), LoRAConfig(rank=2))
