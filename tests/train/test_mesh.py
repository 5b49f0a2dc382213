"""The same run on 8 simulated CPU devices (data 4 × fsdp 2) and on one device: same metrics."""

import jax
import numpy as np

from rlvr.train.metrics import read_metrics
from tests.train.tiny import run_tiny, tiny_agent_config, tiny_config


def _run(workdir, **mesh):
    # No SFT and no held-out eval: only the sharded learner + sampler are compared (each extra
    # stage is one more jit compile per mesh on the 2-core CPU).
    c = tiny_config(train__num_steps=2, train__num_minibatches=1, train__sft_steps=0, eval__every=0,
                    eval__num_tasks=0, checkpoint__every=0, **{f"mesh__{k}": v for k, v in mesh.items()})
    r, _ = run_tiny(c, workdir)
    return r, {row["step"]: row for row in read_metrics(workdir)}


def test_eight_devices_match_one(tmp_path):
    assert jax.device_count() >= 8
    t1, m1 = _run(tmp_path / "one", data=1, fsdp=1)
    t8, m8 = _run(tmp_path / "eight", data=4, fsdp=2)
    assert t8.mesh.devices.size == 8 and t1.mesh.devices.size == 1
    for step in (1, 2):
        for k in ("reward/mean", "policy/pg_loss", "policy/entropy", "policy/grad_norm", "length/mean"):
            np.testing.assert_allclose(m1[step][k], m8[step][k], rtol=1e-4, atol=1e-5, err_msg=k)
    for a, b in zip(jax.tree.leaves(t1.state.params), jax.tree.leaves(t8.state.params)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-5)


def test_agent_grpo_eight_devices_match_one(tmp_path):
    """Full-trajectory GRPO on the multi-turn kit: a (data 4 × fsdp 2) mesh gives the metrics and
    parameters of one device."""
    assert jax.device_count() >= 8
    runs = {}
    for name, mesh in (("one", dict(data=1, fsdp=1)), ("eight", dict(data=4, fsdp=2))):
        c = tiny_agent_config("agent_grpo", train__num_steps=2, train__sft_steps=0, eval__num_tasks=0,
                              checkpoint__every=-1, sampling__prompts_per_step=2,
                              **{f"mesh__{k}": v for k, v in mesh.items()})
        r, _ = run_tiny(c, tmp_path / name)
        runs[name] = (r, {row["step"]: row for row in read_metrics(tmp_path / name)})
    (r1, m1), (r8, m8) = runs["one"], runs["eight"]
    assert r8.mesh.devices.size == 8 and r1.mesh.devices.size == 1
    for step in (1, 2):
        for k in ("reward/mean", "policy/pg_loss", "policy/entropy", "policy/grad_norm",
                  "length/mean", "cost/sampled_tokens", "sample/turns"):
            np.testing.assert_allclose(m1[step][k], m8[step][k], rtol=1e-4, atol=1e-5, err_msg=k)
    for a, b in zip(jax.tree.leaves(r1.state.params), jax.tree.leaves(r8.state.params)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-5)
