"""shared_prefix_attention: the log-sum-exp merge of a group's shared prefix and each row's
suffix equals one softmax attention over the prefix repeated per row followed by the suffix;
rows given at their places in the group-major layout (`PrefixRows`) get the whole batch's rows."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlvr.models.transformer import shared_prefix_attention, softcapped_attention


def _case(u, g, t, p, s, n, k, h, seed=0):
    ks = jax.random.split(jax.random.PRNGKey(seed), 6)
    b = u * g
    q = jax.random.normal(ks[0], (b, t, n, h))
    pk = jax.random.normal(ks[1], (u, p, k, h))
    pv = jax.random.normal(ks[2], (u, p, k, h))
    sk = jax.random.normal(ks[3], (b, s, k, h))
    sv = jax.random.normal(ks[4], (b, s, k, h))
    # left-padded prefixes of different lengths (at least one real slot)
    lens = 1 + jax.random.randint(ks[5], (u,), 0, p)
    pmask = jnp.arange(p)[None, :] >= (p - lens)[:, None]
    # each query sees a random subset of its suffix, always its own slot t
    smask = jax.random.bernoulli(jax.random.PRNGKey(seed + 1), 0.5, (b, t, s))
    smask = smask.at[:, jnp.arange(t), jnp.arange(t)].set(True)
    return q, pk, pv, pmask, sk, sv, smask


def _reference(q, pk, pv, pmask, sk, sv, smask, scale, cap):
    b, t = q.shape[:2]
    g = b // pk.shape[0]
    k = jnp.concatenate([jnp.repeat(pk, g, 0), sk], axis=1)
    v = jnp.concatenate([jnp.repeat(pv, g, 0), sv], axis=1)
    pm = jnp.broadcast_to(jnp.repeat(pmask, g, 0)[:, None, :], (b, t, pk.shape[1]))
    mask = jnp.concatenate([pm, smask], axis=2)[:, None]
    return softcapped_attention(q, k, v, mask, scale=scale, cap=cap)


@pytest.mark.parametrize("g,n,k,cap", [(2, 4, 4, None), (4, 4, 2, None), (4, 6, 2, 5.0),
                                       (1, 2, 1, None)])
def test_matches_attention_over_repeated_prefix(g, n, k, cap):
    args = _case(u=3, g=g, t=2, p=7, s=5, n=n, k=k, h=8)
    scale = 8 ** -0.5
    got = shared_prefix_attention(*args, scale=scale, cap=cap)
    want = _reference(*args, scale=scale, cap=cap)
    assert got.shape == want.shape == args[0].shape
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-5)


def test_masked_prefix_slots_are_ignored():
    q, pk, pv, pmask, sk, sv, smask = _case(u=2, g=2, t=1, p=6, s=3, n=2, k=2, h=4)
    pmask = pmask.at[:, :3].set(False)
    got = shared_prefix_attention(q, pk, pv, pmask, sk, sv, smask, scale=0.5)
    junk = pv.at[:, :3].set(1e4)  # values behind masked slots must not leak
    got2 = shared_prefix_attention(q, pk, junk, pmask, sk, sv, smask, scale=0.5)
    np.testing.assert_allclose(got, got2, atol=1e-6)


def test_jit_and_rows_not_multiple_of_groups_refused():
    args = _case(u=2, g=2, t=1, p=4, s=3, n=2, k=1, h=4)
    out = jax.jit(lambda *a: shared_prefix_attention(*a, scale=0.5))(*args)
    assert bool(jnp.all(jnp.isfinite(out)))
    q = args[0][:3]
    with pytest.raises(ValueError, match="multiple of the prefix groups"):
        shared_prefix_attention(q, *args[1:4], args[4][:3], args[5][:3], args[6][:3], scale=0.5)


@pytest.mark.parametrize("cap", [None, 5.0])
def test_rows_at_their_places_get_the_whole_batch_rows(cap):
    """PrefixRows: B' rows in any order at distinct places u*G + j of the group-major layout
    get bitwise the outputs of those rows in the whole batch (each reads its own group's
    prefix; the other places do not matter)."""
    from rlvr.models.transformer import PrefixRows

    q, pk, pv, pmask, sk, sv, smask = _case(u=3, g=4, t=1, p=7, s=5, n=4, k=2, h=8)
    full = shared_prefix_attention(q, pk, pv, pmask, sk, sv, smask, scale=0.4, cap=cap)
    idx = jnp.array([9, 2, 3, 11, 4])  # groups 2, 0, 0, 2, 1
    rows = PrefixRows(index=idx, group_size=4)
    got = jax.jit(lambda *a: shared_prefix_attention(*a, scale=0.4, cap=cap, rows=rows))(
        q[idx], pk, pv, pmask, sk[idx], sv[idx], smask[idx])
    np.testing.assert_array_equal(np.asarray(got), np.asarray(jax.jit(
        lambda *a: shared_prefix_attention(*a, scale=0.4, cap=cap))(
            q, pk, pv, pmask, sk, sv, smask))[np.asarray(idx)])
    np.testing.assert_allclose(got, full[idx], atol=1e-6)
    with pytest.raises(ValueError, match="rows.index"):
        shared_prefix_attention(q[:2], pk, pv, pmask, sk[:2], sv[:2], smask[:2], scale=0.4,
                                rows=rows)
