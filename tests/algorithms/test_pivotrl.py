"""PivotRL: candidates, probe + filter through the reward path on a scripted policy, the docs/algorithms.md (A.18)
worked example, masks, env_error probes left out of the filter."""

import collections

import jax
import jax.numpy as jnp
import numpy as np

from rlvr.core.advantages import grpo_advantages
from rlvr.core.kl import kl_estimate
from rlvr.core.losses import sequence_clip_loss
from rlvr.envs.kv_store import ALPHABET, KVStoreEnv, parse_action
from rlvr.models.tokenizer import CharTokenizer
from rlvr.records.batch import TrainingBatch
from rlvr.records.verdict import Verdict, env_error
from rlvr.rollout.agent_loop import restore_env, turn_samples_from_texts
from rlvr.tasks import kv_agent
from rlvr.train.collectors import TurnEngine
from rlvr.train.judge import Judge
from rlvr.train.pivots import demo_candidates, probe_pivots
from rlvr.verifiers.compose import RewardConfig
from rlvr.verifiers.kv_agent import KVFunctionalVerifier


def _scripted(cands, succ, m, calls, tok):
    """A policy that answers candidate c correctly on its first succ[c] calls, then `del a`."""
    by_prefix = {c.prefix_tokens: c for c in cands}

    def policy(prefixes, keys, sampling, *, tokenizer, terminator_id, prompt_bucket):
        texts = []
        for p in prefixes:
            c = by_prefix[tuple(p)]
            k = calls[c.prefix_tokens]
            calls[c.prefix_tokens] += 1
            good = c.reference_action.rstrip("\n")
            texts.append(good if k < succ[c.prefix_tokens] else "del a")  # minefield: wrong
        return turn_samples_from_texts(prefixes, texts, tokenizer=tokenizer,
                                       terminator_id=terminator_id, max_new_tokens=10)
    return policy


def _engine(policy, tok, verifier=None):
    judge = Judge(verifier or KVFunctionalVerifier(), RewardConfig(max_env_retries=1), executor="inline")
    return TurnEngine(model_of=lambda p: None, tokenizer=tok, judge=judge, terminator="\n",
                      max_tokens=256, prompt_bucket=32, policy=policy)


def _probe(engine, cands, m, lam, chunk=256):
    from rlvr.rollout.sampler import SamplingParams

    run = lambda prefixes, tasks, keys: engine.run(None, prefixes, tasks, keys,  # noqa: E731
                                                   SamplingParams(max_new_tokens=10), 0, 1)
    return probe_pivots(cands, run, jax.random.PRNGKey(0), m=m, lambda_diff=lam, chunk=chunk)


def test_probe_keeps_exactly_the_expected_states():
    tok = CharTokenizer(ALPHABET)
    tasks = kv_agent.generate(4, seed=5)
    cands = demo_candidates(tasks, tokenizer=tok, demonstrations=kv_agent.demonstrations,
                            render_episode=kv_agent.render_episode)
    assert len(cands) == sum(len(kv_agent.demonstrations(t)) for t in tasks)
    m = 4
    # known success counts per candidate, cycling through 0..4 successes out of m
    succ = {c.prefix_tokens: i % (m + 1) for i, c in enumerate(cands)}
    calls = collections.Counter()
    engine = _engine(_scripted(cands, succ, m, calls, tok), tok)
    for lam, ok in ((0.5, {1}), (0.8, {1, 2, 3}), (1.0, {1, 2, 3})):
        calls.clear()
        ps = _probe(engine, cands, m, lam, chunk=7)
        expect = np.array([succ[c.prefix_tokens] in ok for c in cands])
        np.testing.assert_array_equal(ps.keep, expect)
        np.testing.assert_allclose(ps.mean, [succ[c.prefix_tokens] / m for c in cands])
        np.testing.assert_allclose(ps.var, ps.mean * (1 - ps.mean), atol=1e-6)
        st = ps.stats()
        assert st["pivot/kept_fraction"] == expect.mean()
        assert sum(st["pivot/hist_mean"]) == len(cands)
        assert ps.cost.turns == m * len(cands)
    engine.judge.close()


class _FlakyFunctional:
    """The functional verifier, except that every verdict on one chosen state is an env_error."""

    version = "flaky_functional/1"

    def __init__(self, bad_key):
        self.inner, self.bad_key = KVFunctionalVerifier(), bad_key

    def verify(self, task, output):
        if task.task_id == self.bad_key:
            return env_error("tool service down")
        return self.inner.verify(task, output)


def test_env_error_probes_are_masked_never_scored_zero():
    """docs/verifiers.md (V.1) in PivotRL: a state whose probes all end in env_error is not an all-fail state — its
    probes are masked (valid False), so the filter drops it for lack of valid probes, and one
    whose probes were mixed but partly env_error keeps only the valid ones in μ̂, σ̂²."""
    tok = CharTokenizer(ALPHABET)
    cands = demo_candidates(kv_agent.generate(2, seed=5), tokenizer=tok,
                            demonstrations=kv_agent.demonstrations, render_episode=kv_agent.render_episode)
    m = 4
    succ = {c.prefix_tokens: 2 for c in cands}  # every state: 2 of 4 probes correct
    engine = _engine(_scripted(cands, succ, m, collections.Counter(), tok), tok,
                     _FlakyFunctional(cands[0].key))
    ps = _probe(engine, cands, m, 1.0)
    assert not ps.valid[0].any() and ps.valid[1:].all()
    assert not ps.keep[0] and ps.keep[1:].all()  # masked, not an all-fail (μ̂ = 0) state
    np.testing.assert_allclose(ps.mean[1:], 0.5)
    engine.judge.close()


def test_probe_states_restore_to_the_demo_state():
    tasks = kv_agent.generate(2, seed=6)
    tok = CharTokenizer(ALPHABET)
    for c in demo_candidates(tasks, tokenizer=tok, demonstrations=kv_agent.demonstrations,
                             render_episode=kv_agent.render_episode):
        env = KVStoreEnv(fault_prob=0.0)
        assert restore_env(env, c.snapshot, c.state_hash) == c.state_hash
        assert parse_action(c.reference_action) is not None
        v = KVFunctionalVerifier().verify(c.turn_task, c.reference_action)  # the turn task
        assert isinstance(v, Verdict) and v.passed


def test_worked_example_r44():
    # probe: m = 4, λ = 0.5, [1,0,0,0] kept with σ̂² = 0.1875 (checked in core); training:
    adv = grpo_advantages(jnp.array([[1, 1, 0, 0]], jnp.float32), eps=1e-9).reshape(-1)
    np.testing.assert_allclose(np.asarray(adv), [1, 1, -1, -1], atol=1e-6)
    ratios = np.array([1.1, 1.3, 0.9, 0.7], np.float32)
    # one action of two tokens per row: the whole-action ratio is the product of token ratios
    lp = np.zeros((4, 3), np.float32)
    lp[:, 1] = np.log(ratios) / 2
    lp[:, 2] = np.log(ratios) / 2
    mask = np.array([[0, 1, 1]] * 4, np.float32)
    loss, met = sequence_clip_loss(jnp.asarray(lp), jnp.zeros((4, 3)), adv, mask, clip_eps=0.2)
    np.testing.assert_allclose(float(loss), -0.15, atol=1e-5)


def test_prefix_and_observation_tokens_get_no_gradient():
    from tests.algorithms.helpers import build

    algo, _ = build("pivotrl", kl_mode="loss", kl_coef=0.1)
    rng = np.random.default_rng(0)
    mask = np.array([[0, 0, 1, 1, 0, 0, 0], [0, 1, 1, 1, 1, 0, 0]], np.float32)  # prefix|action|pad
    old = rng.normal(size=mask.shape).astype(np.float32) * mask
    ref = rng.normal(size=mask.shape).astype(np.float32) * mask
    mb = TrainingBatch(loss_mask=mask, valid=np.ones(2, bool), old_logprobs=old,
                       advantages=jnp.array([1.0, -1.0]), ref_logprobs=ref)
    aux = {"num_tokens": jnp.float32(mask.sum()), "num_seqs": jnp.float32(2), "kl_coef": 0.1}

    def f(lp):
        return algo.policy_objective(lp, jnp.zeros_like(lp), mb, aux)[0]

    g = np.asarray(jax.grad(f)(jnp.asarray(old + 0.01)))
    assert np.all(g[mask == 0] == 0)
    assert np.all(g[mask == 1] != 0)
    # the KL term is the per-action sum of k3 estimates, averaged over actions (docs/algorithms.md (A.10))
    _, met = algo.policy_objective(jnp.asarray(old + 0.01), jnp.zeros_like(old), mb, aux)
    kl = np.asarray(kl_estimate(jnp.asarray(old + 0.01), jnp.asarray(ref), "k3")) * mask
    np.testing.assert_allclose(float(met["kl_loss"]), kl.sum(1).mean(), rtol=1e-5)


def test_asymmetric_clip_bounds_reach_the_turn_level_objective():
    """clip_low and clip_high keep their sides in PivotRL's objective: a ratio of 1.25 is inside
    [1 − 0.1, 1 + 0.3] (no clip, J = r·Â), one of 0.85 is below 0.9 (clipped to 0.9 for Â < 0)."""
    from tests.algorithms.helpers import build

    algo, _ = build("pivotrl", clip_low=0.1, clip_high=0.3)
    mask = np.array([[0, 1, 1], [0, 1, 1]], np.float32)
    ratios = np.array([1.25, 0.85], np.float32)
    lp = np.zeros((2, 3), np.float32)
    lp[:, 1] = lp[:, 2] = np.log(ratios) / 2
    adv = jnp.array([1.0, -1.0])
    mb = TrainingBatch(loss_mask=mask, valid=np.ones(2, bool),
                       old_logprobs=np.zeros((2, 3), np.float32), advantages=adv)
    aux = {"num_tokens": jnp.float32(mask.sum()), "num_seqs": jnp.float32(2), "kl_coef": 0.0}
    loss, _ = algo.policy_objective(jnp.asarray(lp), jnp.zeros((2, 3)), mb, aux)
    # J = mean(min(r Â, clip(r) Â)) = (1.25 + min(-0.85, -0.9)) / 2
    np.testing.assert_allclose(float(loss), -(1.25 - 0.9) / 2, atol=1e-5)
