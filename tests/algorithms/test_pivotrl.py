"""PivotRL: candidates, probe + filter on a scripted policy, the R4.4 worked example, masks."""

import collections

import jax
import jax.numpy as jnp
import numpy as np

from rlvr.algorithms.pivotrl import (demo_candidates, local_advantages, pivotrl_objective,
                                     probe_pivots)
from rlvr.envs.kv_store import ALPHABET, KVStoreEnv, parse_action
from rlvr.models.tokenizer import CharTokenizer
from rlvr.rollout.agent_loop import restore_env, turn_samples_from_texts
from rlvr.tasks import kv_agent
from rlvr.verifiers.kv_agent import KVFunctionalVerifier


def _score(c, text):
    """Functional verifier at the candidate's exact state (R2.8)."""
    return float(KVFunctionalVerifier().accepts(c.snapshot, text))


def test_probe_keeps_exactly_the_expected_states():
    tok = CharTokenizer(ALPHABET)
    tasks = kv_agent.generate(4, seed=5)
    cands = demo_candidates(tasks, tokenizer=tok, demonstrations=kv_agent.demonstrations,
                            render_episode=kv_agent.render_episode)
    assert len(cands) == sum(len(kv_agent.demonstrations(t)) for t in tasks)
    m = 4
    # known success counts per candidate, cycling through 0..4 successes out of m
    succ = {c.prefix_tokens: i % (m + 1) for i, c in enumerate(cands)}
    by_prefix = {c.prefix_tokens: c for c in cands}
    calls = collections.Counter()

    def act(prefixes, key):
        texts = []
        for p in prefixes:
            c = by_prefix[tuple(p)]
            k = calls[c.prefix_tokens]
            calls[c.prefix_tokens] += 1
            good = c.reference_action.rstrip("\n")
            # functionally wrong but well-formed: a minefield action
            texts.append(good if k < succ[c.prefix_tokens] else "del a")
        return turn_samples_from_texts(prefixes, texts, tokenizer=tok, terminator_id=tok.encode("\n")[0],
                                       max_new_tokens=10)

    for lam, ok in ((0.5, {1}), (0.8, {1, 2, 3}), (1.0, {1, 2, 3})):
        calls.clear()
        ps = probe_pivots(cands, act, _score, jax.random.PRNGKey(0), m=m, lambda_diff=lam, chunk=7)
        expect = np.array([succ[c.prefix_tokens] in ok for c in cands])
        np.testing.assert_array_equal(ps.keep, expect)
        np.testing.assert_allclose(ps.mean, [succ[c.prefix_tokens] / m for c in cands])
        np.testing.assert_allclose(ps.var, ps.mean * (1 - ps.mean), atol=1e-6)
        st = ps.stats()
        assert st["pivot/kept_fraction"] == expect.mean()
        assert sum(st["pivot/hist_mean"]) == len(cands)
        assert ps.probe_turns == m * len(cands)


def test_probe_states_restore_to_the_demo_state():
    tasks = kv_agent.generate(2, seed=6)
    tok = CharTokenizer(ALPHABET)
    for c in demo_candidates(tasks, tokenizer=tok, demonstrations=kv_agent.demonstrations,
                             render_episode=kv_agent.render_episode):
        env = KVStoreEnv(fault_prob=0.0)
        assert restore_env(env, c.snapshot, c.state_hash) == c.state_hash
        assert parse_action(c.reference_action) is not None


def test_worked_example_r44():
    # probe: m = 4, λ = 0.5, [1,0,0,0] kept with σ̂² = 0.1875 (checked in core); training:
    adv = local_advantages(np.array([1, 1, 0, 0], np.float32), 4, eps=1e-9)
    np.testing.assert_allclose(np.asarray(adv), [1, 1, -1, -1], atol=1e-6)
    ratios = np.array([1.1, 1.3, 0.9, 0.7], np.float32)
    # one action of two tokens per row: the whole-action ratio is the product of token ratios
    lp = np.zeros((4, 3), np.float32)
    lp[:, 1] = np.log(ratios) / 2
    lp[:, 2] = np.log(ratios) / 2
    mask = np.array([[0, 1, 1]] * 4, np.float32)
    loss, met = pivotrl_objective(jnp.asarray(lp), jnp.zeros((4, 3)), adv, mask, clip_eps=0.2)
    np.testing.assert_allclose(float(loss), -0.15, atol=1e-5)


def test_prefix_and_observation_tokens_get_no_gradient():
    rng = np.random.default_rng(0)
    mask = np.array([[0, 0, 1, 1, 0, 0, 0], [0, 1, 1, 1, 1, 0, 0]], np.float32)  # prefix|action|pad
    old = rng.normal(size=mask.shape).astype(np.float32) * mask
    ref = rng.normal(size=mask.shape).astype(np.float32) * mask
    adv = jnp.array([1.0, -1.0])

    def f(lp):
        return pivotrl_objective(lp, old, adv, mask, clip_eps=0.2, ref_logprobs=ref, kl_coef=0.1)[0]

    g = np.asarray(jax.grad(f)(jnp.asarray(old + 0.01)))
    assert np.all(g[mask == 0] == 0)
    assert np.all(g[mask == 1] != 0)
