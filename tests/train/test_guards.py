"""Guards against one-line bugs the rest of the default suite would let through."""

import dataclasses

import jax
import numpy as np
import pytest

from rlvr.envs.kv_store import ALPHABET, KVStoreEnv
from rlvr.models.tokenizer import CharTokenizer
from rlvr.records.verdict import Verdict
from rlvr.rollout.agent_loop import run_episodes
from rlvr.rollout.sampler import SamplingParams
from rlvr.tasks import kv_agent
from rlvr.train.collectors import EpisodeEngine, GroupCollector, TaskSampler
from rlvr.train.evaluate import Evaluator, exact_hidden_check
from rlvr.train.judge import Judge, reward_config_from
from rlvr.train.metrics import read_metrics
from rlvr.verifiers.base import Verifier
from rlvr.verifiers.compose import RewardConfig, compose_reward
from tests.train.tiny import tiny_config


def test_reward_clip_is_symmetric_and_keeps_negative_rewards():
    """reward.clip = c clips the composed reward to [-c, c]: a cost-weighted fail keeps its
    negative reward (floored at -c, not at 0) and a large pass is capped at c."""
    rc = reward_config_from(tiny_config(reward__clip=0.5))
    assert rc.clip == (-0.5, 0.5)
    costs = dataclasses.replace(rc, kind="weighted", pass_weight=3.0, weights={"time_cost": -2.0})
    fail = Verdict("fail", components={"time_cost": 0.1})
    assert compose_reward(fail, costs) == pytest.approx((-0.2, True))
    slow_fail = Verdict("fail", components={"time_cost": 1.0})
    assert compose_reward(slow_fail, costs) == (-0.5, True)
    assert compose_reward(Verdict("pass", components={"time_cost": 0.0}), costs) == (0.5, True)
    assert reward_config_from(tiny_config(reward__clip=0.0)).clip is None  # 0 turns clipping off


class _AlwaysFails(Verifier):
    """An outcome verifier that cannot see environment faults: every output is a plain fail."""

    def _verify(self, task, output):
        return Verdict("fail", components={"correct": 0.0})


def test_an_episode_that_ended_in_an_environment_fault_is_masked_not_a_fail():
    """Every tool call faults (fault_prob 1) and retries fault again: the engine marks those
    episodes env_error itself (masked: valid False, reward 0), whatever the outcome verifier
    would say about the final state."""
    from tests.rollout.test_agent_loop import _oracle_policy

    kit = dataclasses.replace(kv_agent.kit(difficulty="easy"),
                              env_factory=lambda: KVStoreEnv(fault_prob=1.0))
    tok = CharTokenizer(ALPHABET)
    tasks = kv_agent.generate(2, seed=2)

    class Scripted(EpisodeEngine):
        def episodes(self, params, starts, keys, sampling):
            return run_episodes(None, starts, self.kit.env_factory, keys, tokenizer=tok,
                                sampling=sampling, policy=_oracle_policy(tasks, tok),
                                max_turns=self.max_turns, max_tokens=self.max_tokens)

    judge = Judge(_AlwaysFails(), RewardConfig(), executor="inline")
    engine = Scripted(model_of=lambda p: None, tokenizer=tok, judge=judge, kit=kit, max_turns=8,
                      max_tokens=128, max_env_retries=1)
    got = engine.run(None, tasks, 2, jax.random.PRNGKey(0), SamplingParams(max_new_tokens=12), 0)
    judge.close()
    assert not np.any(np.asarray(got.batch.valid))
    assert [s.trial for s in got.samples] == ["env_error"] * 4
    assert [s.stop_reason for s in got.samples] == ["env_error"] * 4


def test_hidden_check_judges_each_row_against_its_own_task():
    """eval/hidden_success and eval/gap: 3 held-out tasks × 2 samples, every sample the exact
    reference of its own task; the hidden check (exact match) passes all of them, so the gap is
    0 — judging a row against another task's reference would fail most of them."""
    from tests.train.test_collectors import ScriptedEngine, Tasks, _judge

    engine = ScriptedEngine(_judge(), lambda t, i: str(t.reference_answer))
    ev = Evaluator(engine, Tasks().all[:3], samples_per_task=2, sampling=SamplingParams(),
                   pass_k=(1,), seed=0, hidden=exact_hidden_check)
    m = ev.evaluate(None)
    assert m["eval/success"] == 1.0
    assert m["eval/hidden_success"] == 1.0 and m["eval/gap"] == 0.0
    # a visible pass the hidden check rejects shows up as a positive gap
    loose = Evaluator(engine, Tasks().all[:3], samples_per_task=2, sampling=SamplingParams(),
                      pass_k=(1,), seed=0, hidden=lambda t, x: float(t.task_id != "t1"))
    m = loose.evaluate(None)
    np.testing.assert_allclose([m["eval/hidden_success"], m["eval/gap"]], [2 / 3, 1 / 3])


def test_learning_progress_curriculum_weights_the_improving_tasks_through_the_sampler():
    """curriculum "learning_progress" on the pool: after one observed step, the tasks whose
    success rose (even answers, always solved: p 0.5 → 0.75 with ema 0.5) carry the weight
    (A.20); tasks that got worse or were not drawn keep the floor; the next step's draw comes
    from the improving tasks."""
    from tests.train.test_collectors import ScriptedEngine, Tasks, _judge

    answers = lambda t, i: str(t.reference_answer) if t.reference_answer % 2 == 0 else "x"  # noqa: E731
    sampler = TaskSampler(Tasks(8), seed=0, pool_size=8, curriculum="learning_progress", ema=0.5,
                          floor=0.001)
    np.testing.assert_allclose(sampler.weights(), np.full(8, 1 / 8))  # no progress yet: uniform
    col = GroupCollector(ScriptedEngine(_judge(), answers), sampler, group_size=2,
                         prompts_per_step=4, sampling=SamplingParams(), seed=0)
    got = col.collect(None, 0, 0)
    col.observe(got)
    ref = {t.task_id: t.reference_answer for t in sampler.pool}
    drawn = {t.task_id for t in got.tasks}
    improving = {tid for tid in drawn if ref[tid] % 2 == 0}
    assert improving and improving != drawn  # both kinds were drawn
    p = dict(zip(ref, sampler.p))
    for tid in ref:
        assert p[tid] > 0.5 if tid in improving else p[tid] <= 0.5, (tid, p[tid])
    score = np.array([max(p[tid] - 0.5, 0.001) for tid in ref])  # Δp = p − p_prev, p_prev = 0.5
    w = dict(zip(ref, sampler.weights()))
    np.testing.assert_allclose([w[tid] for tid in ref], score / score.sum(), rtol=1e-6)
    assert all(w[tid] < 0.01 for tid in ref if tid not in improving)
    nxt = sampler.draw(1, 64)
    assert sum(t.task_id in improving for t in nxt) >= 60


def test_adaptive_kl_coefficient_follows_the_controller_inside_a_step(tmp_path):
    """kl.adaptive: every step's kl/coef is the previous β times exp((1/horizon)(D̂ − target))
    with D̂ that step's kl/seq_mean (docs/algorithms.md (A.15)), starting from kl.coef; the
    run's final controller state holds the last logged β."""
    from tests.train.tiny import run_tiny, tiny_config

    c = tiny_config(train__num_steps=3, train__sft_steps=0, eval__num_tasks=0,
                    checkpoint__every=0, checkpoint__export=False, kl__mode="loss", kl__adaptive=True,
                    kl__coef=0.1, kl__target=0.5,
                    kl__horizon=2.0)
    r, _ = run_tiny(c, tmp_path)
    rows = [m for m in read_metrics(tmp_path) if m["step"] >= 1]
    assert len(rows) == 3
    beta = 0.1
    for m in rows:
        beta = beta * np.exp((m["kl/seq_mean"] - 0.5) / 2.0)
        np.testing.assert_allclose(m["kl/coef"], beta, rtol=1e-5)
    assert rows[-1]["kl/coef"] < 0.1  # D̂ below target: β shrank
    np.testing.assert_allclose(float(r.state.kl_controller.coef), rows[-1]["kl/coef"], rtol=1e-6)
