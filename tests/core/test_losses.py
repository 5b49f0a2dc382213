"""rlvr.core.losses against numpy loops (docs/algorithms.md (A.5)-(A.7), (A.8)-(A.9), (A.10), (A.11)-(A.12), (A.18))."""

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from rlvr.core.losses import (
    aggregate,
    entropy_from_logits,
    explained_variance,
    gspo_sequence_loss,
    ppo_token_loss,
    sequence_clip_loss,
    trust_region_token_loss,
    value_loss,
)
from tests.core._gen import multiturn_mask

MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum")


def ref_aggregate(x, m, mode):
    B, T = x.shape
    if mode == "token-mean":
        n = sum(1 for b in range(B) for t in range(T) if m[b, t])
        s = sum(x[b, t] for b in range(B) for t in range(T) if m[b, t])
        return s / n if n else 0.0
    rows = []
    for b in range(B):
        toks = [x[b, t] for t in range(T) if m[b, t]]
        if toks:
            rows.append(sum(toks) / len(toks) if mode == "seq-mean-token-mean" else sum(toks))
    return sum(rows) / len(rows) if rows else 0.0


def ref_ppo(lp, old, adv, m, cl, ch, dual, mode):
    B, T = lp.shape
    per = np.zeros((B, T))
    clipped = 0
    n = 0
    for b in range(B):
        for t in range(T):
            if not m[b, t]:
                continue
            a = adv[b] if adv.ndim == 1 else adv[b, t]
            rho = math.exp(lp[b, t] - old[b, t])
            l1 = -a * rho
            l2 = -a * min(max(rho, 1 - cl), 1 + ch)
            loss = max(l1, l2)
            if dual is not None and a < 0:
                loss = min(loss, -a * dual)
            per[b, t] = loss
            clipped += l2 > l1
            n += 1
    return ref_aggregate(per, m, mode), (clipped / n if n else 0.0)


def ref_trust_region(lp, old, adv, m, cl, ch, mode):
    B, T = lp.shape
    per = np.zeros((B, T))
    for b in range(B):
        for t in range(T):
            if m[b, t]:
                a = adv[b] if adv.ndim == 1 else adv[b, t]
                rho = math.exp(lp[b, t] - old[b, t])
                per[b, t] = -a * rho if 1 - cl <= rho <= 1 + ch else 0.0
    return ref_aggregate(per, m, mode)


def ref_sequence(lp, old, adv, m, lo, hi, geometric, valid):
    objs = []
    for b in range(lp.shape[0]):
        toks = [lp[b, t] - old[b, t] for t in range(lp.shape[1]) if m[b, t]]
        if not toks or not valid[b]:
            continue
        s = sum(toks) / len(toks) if geometric else sum(toks)
        r = math.exp(s)
        objs.append(min(r * adv[b], min(max(r, lo), hi) * adv[b]))
    return -(sum(objs) / len(objs)) if objs else 0.0


def _token_inputs(seed, B=5, T=24, scale=0.3):
    rng = np.random.default_rng(seed)
    m = multiturn_mask(rng, B, T, empty_rows=(1,))
    old = (-rng.random((B, T)) * 3).astype(np.float32)
    lp = (old + rng.normal(size=(B, T)) * scale).astype(np.float32)
    lp = np.where(m > 0, lp, 123.0).astype(np.float32)  # garbage off the mask must not matter
    return rng, m, lp, old


@functools.partial(jax.jit, static_argnames=("mode", "dual"))
def _jppo(lp, old, adv, m, cl, ch, dual, mode):
    return ppo_token_loss(lp, old, adv, m, clip_low=cl, clip_high=ch, dual_clip=dual, aggregation=mode)


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), mode=st.sampled_from(MODES), dual=st.sampled_from([None, 3.0]),
       per_token_adv=st.booleans(), clips=st.sampled_from([(0.2, 0.2), (0.2, 0.28), (0.1, 0.5)]))
def test_ppo_token_loss_matches_reference(seed, mode, dual, per_token_adv, clips):
    rng, m, lp, old = _token_inputs(seed, scale=0.8)
    adv = rng.normal(size=(5, 24) if per_token_adv else (5,)).astype(np.float32) * 2
    loss, metrics = _jppo(lp, old, adv, m, clips[0], clips[1], dual, mode)
    ref_loss, ref_cf = ref_ppo(lp, old, adv, m, clips[0], clips[1], dual, mode)
    np.testing.assert_allclose(loss, ref_loss, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(metrics["clip_fraction"], ref_cf, rtol=1e-5, atol=1e-6)
    lr = (lp - old)[m > 0]
    np.testing.assert_allclose(metrics["approx_kl"], np.mean(np.exp(lr) - 1 - lr), rtol=1e-4)
    np.testing.assert_allclose(metrics["ratio_mean"], np.mean(np.exp(lr)), rtol=1e-5)
    assert set(metrics) >= {"clip_fraction", "approx_kl", "ratio_mean", "pg_loss", "dual_clip_fraction"}


@pytest.mark.parametrize("mode", MODES)
def test_aggregate_and_trust_region_match_reference(mode):
    for seed in range(3):
        rng, m, lp, old = _token_inputs(seed, scale=0.3)
        x = rng.normal(size=m.shape).astype(np.float32)
        np.testing.assert_allclose(aggregate(x, m, mode), ref_aggregate(x, m, mode), rtol=1e-5, atol=1e-6)
        adv = rng.normal(size=(5,)).astype(np.float32)
        loss, metrics = trust_region_token_loss(lp, old, adv, m, clip_low=0.2, clip_high=0.28, aggregation=mode)
        np.testing.assert_allclose(loss, ref_trust_region(lp, old, adv, m, 0.2, 0.28, mode), rtol=1e-4, atol=1e-6)
        rho = np.exp((lp - old)[m > 0])
        np.testing.assert_allclose(metrics["masked_fraction"], np.mean((rho < 0.8) | (rho > 1.28)), rtol=1e-5)


def test_aggregation_modes_differ_on_ragged_lengths():
    m = np.array([[1, 0, 0, 0], [1, 1, 1, 1]], np.float32)
    x = np.array([[4.0, 0, 0, 0], [1.0, 1.0, 1.0, 1.0]], np.float32)
    np.testing.assert_allclose(aggregate(x, m, "token-mean"), 8 / 5)
    np.testing.assert_allclose(aggregate(x, m, "seq-mean-token-mean"), (4 + 1) / 2)
    np.testing.assert_allclose(aggregate(x, m, "seq-mean-token-sum"), (4 + 4) / 2)


def test_sequence_clip_loss_worked_example_r44():
    # docs/algorithms.md (A.18) (docs/algorithms.md §6): Â = [1,1,−1,−1], ε = 0.2, ratios [1.1,1.3,0.9,0.7] → J = 0.15.
    ratios = np.array([1.1, 1.3, 0.9, 0.7])
    T = 3  # each action has 3 tokens whose log-ratios sum to log r_i
    lp = np.repeat((np.log(ratios) / T)[:, None], T, axis=1).astype(np.float32)
    lp = np.concatenate([lp, np.full((4, 2), 9.0, np.float32)], axis=1)  # masked garbage
    m = np.concatenate([np.ones((4, T)), np.zeros((4, 2))], axis=1).astype(np.float32)
    loss, metrics = sequence_clip_loss(lp, np.zeros_like(lp), np.array([1.0, 1.0, -1.0, -1.0]), m, clip_eps=0.2)
    np.testing.assert_allclose(metrics["objective"], 0.15, atol=1e-6)
    np.testing.assert_allclose(loss, -0.15, atol=1e-6)
    np.testing.assert_allclose(metrics["clip_fraction"], 0.5)  # actions 2 and 4
    # Gradient: actions 2 and 4 sit in the clipped branch (no incentive), 1 and 3 do not.
    g = jax.grad(lambda x: sequence_clip_loss(x, jnp.zeros_like(x), jnp.array([1.0, 1, -1, -1]), m,
                                              clip_eps=0.2)[0])(jnp.asarray(lp))
    # d(−J)/d logp_{i,t} = −Â_i r_i / K for every token of an unclipped action.
    np.testing.assert_allclose(np.asarray(g)[:, :T], np.repeat([[-1.1 / 4], [0.0], [0.9 / 4], [0.0]], T, 1),
                               rtol=1e-5, atol=1e-7)
    assert np.all(np.asarray(g)[:, T:] == 0)


def test_sequence_losses_match_reference():
    for seed in range(4):
        rng, m, lp, old = _token_inputs(seed, B=6, T=10, scale=0.05)
        adv = rng.normal(size=(6,)).astype(np.float32)
        valid = rng.random(6) < 0.8
        loss, _ = sequence_clip_loss(lp, old, adv, m, clip_eps=0.2, valid=valid)
        np.testing.assert_allclose(loss, ref_sequence(lp, old, adv, m, 0.8, 1.2, False, valid), rtol=1e-4, atol=1e-6)
        loss, _ = gspo_sequence_loss(lp, old, adv, m, clip_low=0.01, clip_high=0.02, valid=valid)
        np.testing.assert_allclose(loss, ref_sequence(lp, old, adv, m, 0.99, 1.02, True, valid), rtol=1e-4, atol=1e-6)


def test_value_clip_fraction_counts_only_values_outside_the_range():
    """Values inside [old − ε, old + ε] are not clipped, even where old + (v − old) rounds to a
    neighbouring float; values outside are counted exactly where the clipped term is larger."""
    rng = np.random.default_rng(0)
    B, T, eps = 16, 64, 0.2
    old = (rng.normal(size=(B, T)) * 3).astype(np.float32)
    v = (old + rng.uniform(-0.19, 0.19, size=(B, T))).astype(np.float32)
    ret = rng.normal(size=(B, T)).astype(np.float32)
    m = np.ones((B, T), np.float32)
    rounded = old + np.clip(v - old, -eps, eps)  # the difference form, in float32
    assert np.any((rounded - ret) ** 2 > (v - ret) ** 2)  # the inputs do exercise the rounding
    loss, metrics = value_loss(v, old, ret, m, clip_eps=eps)
    assert float(metrics["value_clip_fraction"]) == 0.0
    np.testing.assert_allclose(loss, 0.5 * np.mean((v - ret) ** 2), rtol=1e-6)
    # now push a known set of values out of range, half of them away from the return
    out = rng.random((B, T)) < 0.3
    v2 = np.where(out, old + np.sign(rng.normal(size=(B, T))) * 0.5, v).astype(np.float32)
    vc = np.clip(v2, old - eps, old + eps)
    expect = np.mean(((vc - ret) ** 2 > (v2 - ret) ** 2))
    assert expect > 0
    _, metrics = value_loss(v2, old, ret, m, clip_eps=eps)
    np.testing.assert_allclose(float(metrics["value_clip_fraction"]), expect, rtol=1e-6)


def test_value_loss_entropy_explained_variance():
    rng = np.random.default_rng(0)
    B, T = 4, 9
    m = multiturn_mask(rng, B, T, empty_rows=(2,))
    v, old, ret = (rng.normal(size=(B, T)).astype(np.float32) for _ in range(3))
    for clip in (None, 0.2):
        for mode in MODES:
            loss, metrics = value_loss(v, old, ret, m, clip_eps=clip, aggregation=mode)
            err = (v - ret) ** 2
            if clip is not None:
                vc = old + np.clip(v - old, -clip, clip)
                err = np.maximum(err, (vc - ret) ** 2)
            np.testing.assert_allclose(loss, 0.5 * ref_aggregate(err, m, mode), rtol=1e-5)
    sel = m > 0
    ev_ref = 1 - np.var(ret[sel] - v[sel]) / np.var(ret[sel])
    np.testing.assert_allclose(explained_variance(v, ret, m), ev_ref, rtol=1e-4)
    np.testing.assert_allclose(explained_variance(ret, ret, m), 1.0)
    assert float(explained_variance(v, ret, np.zeros_like(m))) == 0.0
    assert float(explained_variance(v, np.ones_like(ret), m)) == 0.0

    logits = rng.normal(size=(3, 5, 7)).astype(np.float32)
    logits[0, 0, :3] = -np.inf
    p = np.exp(logits - logits.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    h_ref = -np.sum(np.where(p > 0, p * np.log(np.where(p > 0, p, 1)), 0), axis=-1)
    h = entropy_from_logits(logits)
    np.testing.assert_allclose(h, h_ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(entropy_from_logits(np.zeros(8)), np.log(8), rtol=1e-6)
    g = jax.grad(lambda x: jnp.sum(entropy_from_logits(x)))(jnp.asarray(logits))
    assert np.all(np.isfinite(g))


def test_trust_region_masks_both_sides_and_ppo_clips_one_side():
    # Ratios e^{±0.5}: outside [0.8, 1.28] on both sides.
    lp = np.array([[0.5, -0.5, 0.1]], np.float32)
    m = np.ones((1, 3), np.float32)
    for a in (1.0, -1.0):
        adv = np.array([a], np.float32)
        g = jax.grad(lambda x: trust_region_token_loss(x, jnp.zeros_like(x), adv, m, clip_low=0.2, clip_high=0.28)[0])(lp)
        assert g[0, 0] == 0 and g[0, 1] == 0 and g[0, 2] != 0
        gp = jax.grad(lambda x: ppo_token_loss(x, jnp.zeros_like(x), adv, m)[0])(lp)
        # PPO keeps the un-clipped side: for Â>0 the low-ratio token, for Â<0 the high-ratio one.
        assert (gp[0, 1] != 0) if a > 0 else (gp[0, 0] != 0)
        assert (gp[0, 0] == 0) if a > 0 else (gp[0, 1] == 0)


def test_fully_masked_input_gives_zero_loss_and_finite_grads():
    z = jnp.zeros((3, 6))
    lp = jnp.full((3, 6), 50.0)  # would overflow exp if not masked
    adv = jnp.ones((3,))
    fns = [
        lambda x: ppo_token_loss(x, z, adv, z, dual_clip=2.0)[0],
        lambda x: trust_region_token_loss(x, z, adv, z, clip_low=0.2, clip_high=0.2)[0],
        lambda x: sequence_clip_loss(x, z, adv, z, clip_eps=0.2)[0],
        lambda x: gspo_sequence_loss(x, z, adv, z)[0],
        lambda x: value_loss(x, z, z, z, clip_eps=0.2)[0],
    ]
    for mode in MODES:
        fns.append(lambda x, mode=mode: ppo_token_loss(x, z, adv, z, aggregation=mode)[0])

    @jax.jit
    def losses_and_grads(x):
        return [(f(x), jax.grad(f)(x)) for f in fns]

    for loss, g in losses_and_grads(lp):
        assert float(loss) == 0.0
        assert np.all(np.isfinite(g))
    _, metrics = ppo_token_loss(lp, z, adv, z)
    assert all(np.isfinite(float(v)) for v in metrics.values())


def test_jit_vmap_grad_all_losses():
    rng, m, lp, old = _token_inputs(0, B=3, T=8, scale=0.1)
    adv = rng.normal(size=(3,)).astype(np.float32)
    fns = {
        "ppo": lambda x: ppo_token_loss(x, old, adv, m, dual_clip=3.0),
        "tr": lambda x: trust_region_token_loss(x, old, adv, m, clip_low=0.2, clip_high=0.2),
        "seq": lambda x: sequence_clip_loss(x, old, adv, m, clip_eps=0.2),
        "gspo": lambda x: gspo_sequence_loss(x, old, adv, m, clip_low=0.2, clip_high=0.2),
        "value": lambda x: value_loss(x, old, old + 1, m, clip_eps=0.5),
    }

    @jax.jit
    def run_all(x):
        out = {}
        for name, f in fns.items():
            loss, metrics = f(x)
            g = jax.grad(lambda y: f(y)[0])(x)
            batched = jax.vmap(lambda y: f(y)[0])(jnp.stack([x, x]))
            out[name] = (loss, metrics, g, batched)
        return out

    refs = {
        "ppo": ref_ppo(lp, old, adv, m, 0.2, 0.2, 3.0, "token-mean")[0],
        "tr": ref_trust_region(lp, old, adv, m, 0.2, 0.2, "token-mean"),
        "seq": ref_sequence(lp, old, adv, m, 0.8, 1.2, False, np.ones(3, bool)),
        "gspo": ref_sequence(lp, old, adv, m, 0.8, 1.2, True, np.ones(3, bool)),
    }
    for name, (loss, metrics, g, batched) in run_all(jnp.asarray(lp)).items():
        if name in refs:
            np.testing.assert_allclose(loss, refs[name], rtol=1e-4, atol=1e-6, err_msg=name)
        assert np.all(np.isfinite(g)) and np.any(g != 0), name
        assert np.all(np.asarray(g)[m == 0] == 0), name
        np.testing.assert_allclose(batched, [loss, loss], rtol=1e-5, err_msg=name)
        assert all(jnp.ndim(v) == 0 for v in metrics.values()), name
    # Finite-difference check of the PPO gradient on one unclipped coordinate.
    f = jax.jit(lambda x: ppo_token_loss(x, old, adv, m)[0])
    b, t = np.argwhere(m > 0)[0]
    e = np.zeros_like(lp)
    e[b, t] = 1e-3
    fd = (f(lp + e) - f(lp - e)) / 2e-3
    np.testing.assert_allclose(jax.jit(jax.grad(f))(jnp.asarray(lp))[b, t], fd, rtol=5e-2, atol=1e-3)


def test_bad_inputs_raise():
    x = np.zeros((2, 4), np.float32)
    with pytest.raises(ValueError, match="aggregation"):
        ppo_token_loss(x, x, np.zeros(2), x, aggregation="sum")
    with pytest.raises(ValueError, match="aggregation"):
        aggregate(x, x, "mean")
    with pytest.raises(ValueError, match="old_logprobs"):
        ppo_token_loss(x, np.zeros((2, 5)), np.zeros(2), x)
    with pytest.raises(ValueError, match="advantages"):
        ppo_token_loss(x, x, np.zeros(3), x)
    with pytest.raises(ValueError, match="loss_mask"):
        trust_region_token_loss(x, x, np.zeros(2), np.zeros((4, 2)), clip_low=0.2, clip_high=0.2)
    with pytest.raises(ValueError, match="advantages"):
        sequence_clip_loss(x, x, np.zeros((2, 4)), x, clip_eps=0.2)
    with pytest.raises(ValueError, match="clip_eps"):
        sequence_clip_loss(x, x, np.zeros(2), x, clip_eps=1.5)
    with pytest.raises(ValueError, match="valid"):
        sequence_clip_loss(x, x, np.zeros(2), x, clip_eps=0.2, valid=np.ones(3, bool))
    with pytest.raises(ValueError, match="dual_clip"):
        ppo_token_loss(x, x, np.zeros(2), x, dual_clip=0.5)
    with pytest.raises(ValueError, match="clip_low"):
        ppo_token_loss(x, x, np.zeros(2), x, clip_low=1.0)
    with pytest.raises(ValueError, match="returns"):
        value_loss(x, x, np.zeros((2, 3)), x)
    with pytest.raises(ValueError, match="mask"):
        explained_variance(x, x, np.zeros(3))


def test_jit_vmap_grad_helpers():
    rng = np.random.default_rng(5)
    m = multiturn_mask(rng, 3, 7, empty_rows=(0,))
    x = jnp.asarray(rng.normal(size=(3, 7)), jnp.float32)
    logits = jnp.asarray(rng.normal(size=(2, 3, 7, 5)), jnp.float32)

    @jax.jit
    def run(x, logits):
        aggs = [(aggregate(x, m, mode), jax.grad(lambda y: aggregate(y, m, mode))(x)) for mode in MODES]
        ev = jax.vmap(lambda y: explained_variance(y, 2 * y + 1, m))(jnp.stack([x, -x]))
        ev_grad = jax.grad(lambda y: explained_variance(y, x, m))(x + 0.5)
        h = jax.vmap(entropy_from_logits)(logits)
        return aggs, ev, ev_grad, h

    aggs, ev, ev_grad, h = run(x, logits)
    for (val, g), mode in zip(aggs, MODES):
        np.testing.assert_allclose(val, ref_aggregate(np.asarray(x), m, mode), rtol=1e-5, atol=1e-6)
        assert np.all(np.asarray(g)[m == 0] == 0) and np.all(np.isfinite(g))
    # values that are an affine function of returns: 1 − Var[R − V]/Var[R] with R = 2V + 1 → 1 − 1/4.
    np.testing.assert_allclose(ev, [0.75, 0.75], rtol=1e-5)
    assert np.all(np.isfinite(ev_grad))
    np.testing.assert_allclose(h, entropy_from_logits(logits), rtol=1e-6)
