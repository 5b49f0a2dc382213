"""rlvr.core.gae against independent numpy loops (docs/algorithms.md (A.6))."""

import functools
import importlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from rlvr.core.gae import gae

gae_mod = importlib.import_module("rlvr.core.gae")
from tests.core._gen import multiturn_mask


def ref_textbook_gae(r, v, gamma, lam, bootstrap):
    """Textbook GAE (docs/algorithms.md (A.5)) on one contiguous episode."""
    n = len(r)
    adv = np.zeros(n, np.float64)
    next_adv, next_v = 0.0, bootstrap
    for t in reversed(range(n)):
        delta = r[t] + gamma * next_v - v[t]
        next_adv = delta + gamma * lam * next_adv
        adv[t] = next_adv
        next_v = v[t]
    return adv


def ref_gae(rewards, values, mask, gamma, lam, skip, bootstrap):
    """Delete non-steps, run textbook GAE, scatter back; report on policy tokens only."""
    B, T = mask.shape
    adv = np.zeros((B, T))
    ret = np.zeros((B, T))
    for b in range(B):
        pol = np.nonzero(mask[b] > 0)[0]
        if len(pol) == 0:
            continue
        steps = pol if skip else np.arange(pol[-1] + 1)
        a = ref_textbook_gae(rewards[b, steps], values[b, steps], gamma, lam, bootstrap[b])
        full = np.zeros(T)
        full[steps] = a
        adv[b, pol] = full[pol]
        ret[b, pol] = full[pol] + values[b, pol]
    return adv, ret


METHODS = ["scan", "associative", "blocked"]


# gamma and lam are static: "blocked" needs them at trace time (traced ones: see
# test_traced_gamma_lam_match_numpy_and_blocked_falls_back).
@functools.partial(jax.jit, static_argnames=("skip", "method", "gamma", "lam", "block_size"))
def _jgae(r, v, m, boot, gamma, lam, skip, method, block_size=None):
    return gae(r, v, m, gamma=gamma, lam=lam, skip_observations=skip, bootstrap_value=boot, method=method,
               block_size=block_size)


def _inputs(seed, B, T, empty_rows=(0,)):
    rng = np.random.default_rng(seed)
    m = multiturn_mask(rng, B, T, empty_rows=empty_rows)
    r = rng.normal(size=(B, T)).astype(np.float32)
    v = rng.normal(size=(B, T)).astype(np.float32)
    boot = rng.normal(size=(B,)).astype(np.float32)
    return r, v, m, boot


@settings(max_examples=12, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    shape=st.sampled_from([(5, 33), (2, 8)]),
    skip=st.booleans(),
    method=st.sampled_from(METHODS),
    gamma=st.sampled_from([1.0, 0.97]),
    lam=st.sampled_from([1.0, 0.9, 0.0]),
)
def test_gae_matches_numpy_reference(seed, shape, skip, method, gamma, lam):
    r, v, m, boot = _inputs(seed, *shape)
    adv, ret = _jgae(r, v, m, boot, gamma, lam, skip, method)
    ref_adv, ref_ret = ref_gae(r, v, m, gamma, lam, skip, boot)
    np.testing.assert_allclose(adv, ref_adv, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(ret, ref_ret, rtol=1e-4, atol=1e-4)
    assert np.all(np.asarray(adv)[m == 0] == 0) and np.all(np.asarray(ret)[m == 0] == 0)


@settings(max_examples=12, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    shape=st.sampled_from([(5, 33), (3, 64)]),
    skip=st.booleans(),
    block_size=st.sampled_from([1, 3, 8, 16]),
    gamma=st.sampled_from([1.0, 0.97]),
    lam=st.sampled_from([1.0, 0.9, 0.5, 0.0]),
)
def test_blocked_matches_numpy_reference_across_many_blocks(seed, shape, skip, block_size, gamma, lam):
    # Small blocks (one that does not divide T) make the cross-block carry do the work.
    r, v, m, boot = _inputs(seed, *shape)
    adv, ret = _jgae(r, v, m, boot, gamma, lam, skip, "blocked", block_size)
    ref_adv, ref_ret = ref_gae(r, v, m, gamma, lam, skip, boot)
    np.testing.assert_allclose(adv, ref_adv, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(ret, ref_ret, rtol=1e-4, atol=1e-4)
    assert np.all(np.asarray(adv)[m == 0] == 0) and np.all(np.asarray(ret)[m == 0] == 0)


@pytest.mark.parametrize(
    "method, lam",
    # The other forms once (compiling "associative" at T = 4096 takes ~30 s on 2 cores).
    [("blocked", 0.95), ("blocked", 0.99), ("blocked", 1.0), ("scan", 1.0), ("associative", 1.0)],
)
def test_long_rows_float32_error_stays_small(method, lam):
    # [8, 4096] in float32 against a float64 reference: the error is float32 rounding of sums of
    # O(100) terms, nothing grows with T (the blocked rescaling included).
    r, v, m, boot = _inputs(1, 8, 4096, empty_rows=(2,))
    for skip in (True, False):
        adv, ret = _jgae(r, v, m, boot, 1.0, lam, skip, method)
        ref_adv, ref_ret = ref_gae(r.astype(np.float64), v.astype(np.float64), m, 1.0, lam, skip,
                                   boot.astype(np.float64))
        assert np.max(np.abs(ref_adv)) > 10  # long-horizon sums, not a trivial case
        np.testing.assert_allclose(adv, ref_adv, rtol=5e-5, atol=5e-5)
        np.testing.assert_allclose(ret, ref_ret, rtol=5e-5, atol=5e-5)


def test_blocked_rescaling_at_its_bound_stays_finite_and_accurate():
    # gamma*lam = 0.5 with C = 64: factors up to 0.5^-64 = 2^64, TD errors of size ~1e3.
    r, v, m, boot = _inputs(4, 4, 300)
    r, v = 1e3 * r, 1e3 * v
    assert gae_mod._blocked_plan("gae", 1.0, 0.5, 300, None) == (0.5, 64)
    adv, ret = _jgae(r, v, m, boot, 1.0, 0.5, True, "blocked")
    ref_adv, ref_ret = ref_gae(r.astype(np.float64), v.astype(np.float64), m, 1.0, 0.5, True,
                               boot.astype(np.float64))
    assert np.all(np.isfinite(adv))
    np.testing.assert_allclose(adv, ref_adv, rtol=1e-5, atol=1e-2)
    np.testing.assert_allclose(ret, ref_ret, rtol=1e-5, atol=1e-2)


def test_blocked_plan_block_lengths_and_fallbacks():
    plan = gae_mod._blocked_plan
    assert plan("gae", 1.0, 0.95, 8192, None) == (0.95, 256)  # 0.95^-256 ≈ 2^19
    assert plan("gae", 1.0, 1.0, 8192, None) == (1.0, 256)
    assert plan("gae", 0.9, 0.0, 8192, None) == (0.0, 256)
    assert plan("gae", 1.0, 0.5, 8192, None) == (0.5, 64)  # 0.5^-64 = 2^64
    assert plan("gae", 1.0, 0.95, 33, None) == (0.95, 64)  # one block of at least T
    assert plan("gae", 1.0, 0.1, 8192, None) is None  # C = 16 → 512 blocks: associative
    assert plan("gae", 1.0, 0.1, 1024, None) == (0.1, 16)
    assert plan("gae", 1.0, 0.95, 8192, 7) == (0.95, 7)
    with pytest.raises(ValueError, match="block_size"):
        plan("gae", 1.0, 0.5, 8192, 65)  # 0.5^-65 > 2^64
    seen = []
    jax.jit(lambda g: seen.append(plan("gae", g, 0.95, 8192, None)) or g)(1.0)
    assert seen == [None]  # traced gamma: no block length can be chosen


def _primitives(fn, *args):
    return {str(e.primitive) for e in jax.make_jaxpr(fn)(*args).jaxpr.eqns}


def test_traced_gamma_lam_match_numpy_and_blocked_falls_back():
    r, v, m, boot = _inputs(8, 4, 40)
    ref_adv, ref_ret = ref_gae(r, v, m, 0.97, 0.9, True, boot)
    f = jax.jit(lambda g, l, method: gae(r, v, m, gamma=g, lam=l, bootstrap_value=boot, method=method),
                static_argnames="method")
    for method in METHODS:
        adv, ret = f(0.97, 0.9, method=method)
        np.testing.assert_allclose(adv, ref_adv, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(ret, ref_ret, rtol=1e-4, atol=1e-4)
    # Traced gamma/lam: "blocked" runs the associative form (bit-identical); concrete: closed form.
    np.testing.assert_array_equal(f(0.97, 0.9, method="blocked")[0], f(0.97, 0.9, method="associative")[0])
    traced = _primitives(lambda g: gae(r, v, m, gamma=g, lam=0.9, method="blocked")[0], 0.97)
    concrete = _primitives(lambda r_: gae(r_, v, m, gamma=0.97, lam=0.9, method="blocked")[0], r)
    assert "cummin" not in traced and "cumsum" not in traced
    assert {"cummin", "cumsum"} <= concrete and "scan" not in concrete


@pytest.mark.parametrize("method", METHODS)
def test_skip_observation_links_actions_across_observation(method):
    # [prompt, a0, a0, o, o, o, a1, pad]: rewards on policy tokens only.
    m = np.array([[0, 1, 1, 0, 0, 0, 1, 0]], np.float32)
    v = np.array([[9, 1.0, 2.0, 7, 7, 7, 3.0, 9]], np.float32)
    r = np.array([[0, 0.0, 0.5, 0, 0, 0, 1.0, 0]], np.float32)
    g, l = 0.9, 0.8
    adv, _ = gae(r, v, m, gamma=g, lam=l, method=method)
    d_a1 = 1.0 + g * 0.0 - 3.0  # last action, terminal
    d_a0_last = 0.5 + g * 3.0 - 2.0  # links to V(a_{1,0}) across the observation (docs/algorithms.md (A.6))
    d_a0_first = 0.0 + g * 2.0 - 1.0
    a_a1 = d_a1
    a_a0_last = d_a0_last + g * l * a_a1
    a_a0_first = d_a0_first + g * l * a_a0_last
    np.testing.assert_allclose(adv[0], [0, a_a0_first, a_a0_last, 0, 0, 0, a_a1, 0], rtol=1e-6, atol=1e-6)
    # The naive form differs: the observation values (7) enter the TD errors.
    adv_naive, _ = gae(r, v, m, gamma=g, lam=l, skip_observations=False, method=method)
    assert not np.allclose(adv_naive, adv)


@pytest.mark.parametrize("method", ["associative", "blocked"])
def test_scan_equals_parallel_forms_large(method):
    r, v, m, boot = _inputs(7, 8, 200, empty_rows=(3,))
    for skip in (True, False):
        a1, r1 = _jgae(r, v, m, boot, 0.99, 0.95, skip, "scan")
        a2, r2 = _jgae(r, v, m, boot, 0.99, 0.95, skip, method)
        np.testing.assert_allclose(a1, a2, rtol=1e-4, atol=2e-4)
        np.testing.assert_allclose(r1, r2, rtol=1e-4, atol=2e-4)


@pytest.mark.parametrize("method", METHODS)
def test_skip_equals_naive_without_observations(method):
    rng = np.random.default_rng(3)
    B, T = 4, 12
    m = np.zeros((B, T), np.float32)
    for b in range(B):
        m[b, 2 : 2 + 3 + 2 * b] = 1  # prompt, one action, padding: no observation inside
    r = rng.normal(size=(B, T)).astype(np.float32)
    v = rng.normal(size=(B, T)).astype(np.float32)
    boot = np.zeros(B, np.float32)
    a1, _ = _jgae(r, v, m, boot, 0.99, 0.95, True, method)
    a2, _ = _jgae(r, v, m, boot, 0.99, 0.95, False, method)
    # Prompt tokens are steps in the naive form but come before the action: no effect.
    np.testing.assert_allclose(a1, a2, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("method", METHODS)
def test_fully_masked_rows_and_garbage_give_no_nan(method):
    r, v, m, boot = _inputs(11, 4, 20, empty_rows=(1,))
    v = np.where(m > 0, v, np.nan).astype(np.float32)  # garbage off the policy tokens
    r = np.where(m > 0, r, np.inf).astype(np.float32)
    adv, ret = _jgae(r, v, m, boot, 0.99, 0.95, True, method)
    assert np.all(np.isfinite(adv)) and np.all(np.isfinite(ret))
    assert np.all(np.asarray(adv)[1] == 0)
    adv0, ret0 = _jgae(np.zeros((2, 5), np.float32), np.zeros((2, 5), np.float32),
                       np.zeros((2, 5), np.float32), np.zeros(2, np.float32), 0.99, 0.95, True, method)
    assert np.all(np.asarray(adv0) == 0) and np.all(np.asarray(ret0) == 0)


@pytest.mark.parametrize("method", METHODS)
def test_default_bootstrap_is_terminal_and_scalar_bootstrap_broadcasts(method):
    r, v, m, _ = _inputs(5, 3, 10, empty_rows=())
    a_none, _ = gae(r, v, m, gamma=0.9, lam=0.9, method=method)
    a_zero, _ = gae(r, v, m, gamma=0.9, lam=0.9, method=method, bootstrap_value=0.0)
    a_two, _ = gae(r, v, m, gamma=0.9, lam=0.9, method=method, bootstrap_value=2.0)
    np.testing.assert_allclose(a_none, a_zero)
    ref, _ = ref_gae(r, v, m, 0.9, 0.9, True, np.full(3, 2.0))
    np.testing.assert_allclose(a_two, ref, rtol=1e-5, atol=1e-5)


def test_auto_method_picks_scan_on_cpu():
    assert jax.default_backend() == "cpu"
    assert gae_mod._resolve_method("auto") == "scan"
    assert gae_mod._resolve_method("associative") == "associative"
    assert gae_mod._resolve_method("blocked") == "blocked"


@pytest.mark.parametrize("backend,expected", [("cpu", "scan"), ("gpu", "blocked"),
                                              ("tpu", "associative")])
def test_auto_method_picks_the_form_measured_fastest_per_backend(monkeypatch, backend, expected):
    monkeypatch.setattr(gae_mod.jax, "default_backend", lambda: backend)
    assert gae_mod._resolve_method("auto") == expected
    assert gae_mod._resolve_method("scan") == "scan"


@pytest.mark.parametrize("method", METHODS)
def test_jit_vmap_grad(method):
    r, v, m, boot = _inputs(2, 3, 9, empty_rows=(2,))

    def f(vals):
        adv, ret = gae(r, vals, m, gamma=0.99, lam=0.95, method=method, bootstrap_value=boot)
        return jnp.sum(adv**2) + jnp.sum(ret)

    b, t = np.argwhere(m > 0)[0]
    e = np.zeros_like(v)
    e[b, t] = 1e-2
    stack = lambda x: jnp.stack([x, 2 * x])  # noqa: E731

    @jax.jit
    def run(vals):
        g = jax.grad(f)(vals)
        fd = (f(vals + e) - f(vals - e)) / 2e-2
        batched = jax.vmap(lambda rr, vv, mm: gae(rr, vv, mm, gamma=0.9, lam=0.9, method=method)[0])(
            stack(jnp.asarray(r)), stack(vals), jnp.stack([m, m]))
        single = gae(2 * r, 2 * vals, m, gamma=0.9, lam=0.9, method=method)[0]
        return g, fd, batched, single

    g, fd, batched, single = run(jnp.asarray(v))
    assert np.all(np.isfinite(g))
    # Gradient is zero at non-policy tokens in skip mode (their values never enter).
    assert np.all(np.asarray(g)[m == 0] == 0)
    np.testing.assert_allclose(g[b, t], fd, rtol=2e-2, atol=2e-2)  # finite difference
    np.testing.assert_allclose(batched[1], single, rtol=1e-5, atol=1e-5)  # vmap equals a direct call


def test_bad_inputs_raise():
    r = np.zeros((2, 4), np.float32)
    with pytest.raises(ValueError, match="rewards"):
        gae(np.zeros((2, 5)), r, r, gamma=0.9, lam=0.9)
    with pytest.raises(ValueError, match="loss_mask"):
        gae(r, r, np.zeros((3, 4)), gamma=0.9, lam=0.9)
    with pytest.raises(ValueError, match="method"):
        gae(r, r, r, gamma=0.9, lam=0.9, method="fast")
    with pytest.raises(ValueError, match="gamma"):
        gae(r, r, r, gamma=1.5, lam=0.9)
    with pytest.raises(ValueError, match="lam"):
        gae(r, r, r, gamma=0.9, lam=-0.1)
    with pytest.raises(ValueError, match="bootstrap_value"):
        gae(r, r, r, gamma=0.9, lam=0.9, bootstrap_value=np.zeros(3))
    with pytest.raises(ValueError, match="block_size"):
        gae(r, r, r, gamma=0.9, lam=0.9, method="scan", block_size=4)
    with pytest.raises(ValueError, match="block_size"):
        gae(r, r, r, gamma=0.9, lam=0.9, method="blocked", block_size=0)
    with pytest.raises(ValueError, match="block_size"):
        gae(r, r, r, gamma=0.9, lam=0.9, method="blocked", block_size=2.0)
    with pytest.raises(ValueError, match="block_size"):
        gae(r, r, r, gamma=1.0, lam=0.5, method="blocked", block_size=65)
    with pytest.raises(ValueError, match=r"\[B, T\]"):
        gae(np.zeros(4), np.zeros(4), np.zeros(4), gamma=0.9, lam=0.9)


def test_core_gae_is_the_module_and_its_function_is_gae():
    import types

    import rlvr.core
    from rlvr.core import gae as gae_module

    assert isinstance(rlvr.core.gae, types.ModuleType) and gae_module is gae_mod
    assert rlvr.core.gae.gae is gae
