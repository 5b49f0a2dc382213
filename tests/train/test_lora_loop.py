"""LoRA / QLoRA policies through the one loop: config rules, bit-for-bit resume, a sharded mesh,
PivotRL's probe on the base and a full critic for SAO."""

import jax
import numpy as np
import pytest
from flax import nnx
from jax.sharding import PartitionSpec as P

from configs import base
from rlvr.train.config import ConfigError, inapplicable, validate_config
from rlvr.train.metrics import read_metrics
from rlvr.train.pivots import PivotCollector
from tests.train.tiny import run_tiny, tiny_agent_config, tiny_config


def _lora(c, **kw):
    c.model.lora.rank = kw.pop("rank", 2)
    for k, v in kw.items():
        setattr(c.model.lora, k, v)
    return c


def test_lora_fields_are_inactive_when_off_and_checked_when_on():
    c = base.get_config()
    na = inapplicable(c)
    for f in ("alpha", "dropout", "targets", "quantize"):
        assert f"model.lora.{f}" in na
    c.model.lora.alpha = 3.0  # an inactive refinement may hold any value
    validate_config(c)
    c.model.lora.quantize = "nf4"
    with pytest.raises(ConfigError, match="model.lora.quantize='nf4' needs adapters"):
        validate_config(c)
    c = _lora(base.get_config(), targets=("q_proj", "lm_head"))
    with pytest.raises(ConfigError, match="model.lora.targets must be distinct names"):
        validate_config(c)
    for field, value, msg in (("rank", -1, "model.lora.rank must be >= 0"),
                              ("dropout", 1.0, "model.lora.dropout must be < 1.0"),
                              ("alpha", 0.0, "model.lora.alpha must be > 0.0"),
                              ("quantize", "int4", "model.lora.quantize must be one of")):
        c = _lora(base.get_config())
        setattr(c.model.lora, field, value)
        with pytest.raises(ConfigError, match=msg):
            validate_config(c)
    assert not any(k.startswith("model.lora") for k in inapplicable(_lora(base.get_config())))


def _run(workdir, steps, **over):
    c = _lora(tiny_config(train__num_steps=steps, **over), quantize="nf4", dropout=0.1)
    c.kl.mode, c.kl.coef = "loss", 0.05
    r, _ = run_tiny(c, workdir)
    return r


def test_lora_resume_is_bit_for_bit(tmp_path):
    """QLoRA (nf4) + adapter dropout + KL to the base: 4 steps straight == 2, relaunch, 2 more."""
    straight = _run(tmp_path / "a", 4)
    _run(tmp_path / "b", 2)
    resumed = _run(tmp_path / "b", 4)
    s, t = straight.state, resumed.state
    assert int(t.step) == 4 and s.ref_params is None and t.ref_params is None
    for a, b in zip(jax.tree.leaves(s), jax.tree.leaves(t)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    ra = {r["step"]: r for r in read_metrics(tmp_path / "a")}
    rb = {r["step"]: r for r in read_metrics(tmp_path / "b")}
    for step in (3, 4):
        for k in ("reward/mean", "policy/loss", "kl/token_mean", "eval/success"):
            if k in ra[step]:
                np.testing.assert_allclose(ra[step][k], rb[step][k], rtol=1e-5, atol=1e-7)
    assert ra[4]["kl/token_mean"] > 0  # the adapters moved away from the base reference


def test_lora_eight_devices_match_one(tmp_path):
    """int8 QLoRA on a (data 2 × fsdp 2 × tensor 2) mesh: adapters shard like the projection they
    adapt; metrics and parameters equal one device's."""
    assert jax.device_count() >= 8
    runs = {}
    for name, mesh in (("one", dict(data=1, fsdp=1, tensor=1)), ("eight", dict(data=2, fsdp=2, tensor=2))):
        c = tiny_config(train__num_steps=2, train__num_minibatches=1, train__sft_steps=0,
                        eval__every=0, eval__num_tasks=0, checkpoint__every=0,
                        **{f"mesh__{k}": v for k, v in mesh.items()})
        r, _ = run_tiny(_lora(c, quantize="int8"), tmp_path / name)
        runs[name] = (r, {row["step"]: row for row in read_metrics(tmp_path / name)})
    (r1, m1), (r8, m8) = runs["one"], runs["eight"]
    flat = dict(nnx.to_flat_state(r8.state.params))
    q = ("model", "layers", 0, "self_attn", "q_proj")
    assert flat[q + ("lora", "lora_a")].get_value().sharding.spec == P("fsdp", None)
    assert flat[q + ("lora", "lora_b")].get_value().sharding.spec == P(None, "tensor")
    assert flat[q + ("kernel", "codes")].get_value().sharding.spec == P("fsdp", "tensor")
    for step in (1, 2):
        for k in ("reward/mean", "policy/pg_loss", "policy/grad_norm", "length/mean"):
            np.testing.assert_allclose(m1[step][k], m8[step][k], rtol=1e-4, atol=1e-5, err_msg=k)
    for a, b in zip(jax.tree.leaves(r1.state.params), jax.tree.leaves(r8.state.params)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-5)


@pytest.mark.slow  # two agent runs with warm starts, ~60 s on 2 shared cores
def test_pivotrl_probes_the_base_and_sao_keeps_a_full_critic(tmp_path, monkeypatch):
    seen = []
    prepare = PivotCollector.prepare

    def spy(self, ref_params, restored=None):
        seen.append(ref_params)
        return prepare(self, ref_params, restored=restored)

    monkeypatch.setattr(PivotCollector, "prepare", spy)
    c = _lora(tiny_agent_config("pivotrl"))
    c.pivot.selection = "all"
    r, _ = run_tiny(c, tmp_path / "pivotrl")
    assert r.state.ref_params is None and len(seen) == 1
    adapters, _ = nnx.split_state(seen[0], nnx.LoRAParam, ...)
    assert jax.tree.leaves(adapters) and all(not np.any(np.asarray(x)) for x in jax.tree.leaves(adapters))

    c = _lora(tiny_agent_config("sao"))
    r, res = run_tiny(c, tmp_path / "sao")
    critic = dict(nnx.to_flat_state(r.state.critic_params))
    assert not any("lora" in p for p in critic) and "critic/value_loss" in res["last"]
