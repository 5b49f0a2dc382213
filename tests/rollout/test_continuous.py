"""Continuous episode scheduling: ready episodes step while others wait for slow tool calls,
ended episodes are handed over one by one, and without latency the episodes equal the
lockstep loop's."""

import time

import jax
import numpy as np
import pytest

from rlvr.envs.base import StepResult
from rlvr.rollout.agent_loop import run_episodes, turn_samples_from_texts
from rlvr.rollout.continuous import run_continuous
from rlvr.rollout.sampler import SamplingParams
from tests.rollout.test_agent_loop import ECHO_TOK, EchoEnv, _echo_starts, echo_model  # noqa: F401


def _continuous(model, starts, make_env, *, slots, policy=None, greedy=False, **kw):
    arrivals = []
    stats = run_continuous(
        model_of=lambda p: model, current_params=lambda: (None, 7),
        next_start=lambda i: starts[i] if i < len(starts) else None,
        on_arrival=arrivals.append, make_env=make_env, key=jax.random.PRNGKey(0),
        tokenizer=ECHO_TOK, sampling=SamplingParams(max_new_tokens=10, greedy=greedy),
        slots=slots, max_turns=8, max_tokens=128, prompt_bucket=32, wall_time_s=3600.0,
        policy=policy, **kw)
    return arrivals, stats


@pytest.mark.parametrize("greedy", [False, True])
def test_without_latency_and_enough_slots_the_episodes_equal_the_lockstep_loops(echo_model, greedy):
    starts = _echo_starts()
    ref = run_episodes(echo_model, starts, EchoEnv, jax.random.PRNGKey(0), tokenizer=ECHO_TOK,
                       sampling=SamplingParams(max_new_tokens=10, greedy=greedy), max_turns=8,
                       max_tokens=128, prompt_bucket=32, wall_time_s=3600.0)
    arrivals, stats = _continuous(echo_model, starts, EchoEnv, slots=len(starts), greedy=greedy)
    assert sorted(a.index for a in arrivals) == list(range(len(starts)))
    assert stats["rollout/episodes"] == len(starts)
    got = {a.index: a.episode for a in arrivals}
    for i, want in enumerate(ref.episodes):
        e = got[i]
        assert e.tokens == want.tokens and e.loss_mask == want.loss_mask
        assert e.turn_ids == want.turn_ids and e.stop_reason == want.stop_reason
        assert e.state_hashes == want.state_hashes and e.turn_starts == want.turn_starts
        np.testing.assert_allclose(e.behavior_logprobs, want.behavior_logprobs, atol=1e-6, rtol=0)
    assert all(a.policy_version == a.last_policy_version == 7 for a in arrivals)


def test_one_slot_runs_each_episode_alone_with_the_same_greedy_tokens(echo_model):
    starts = _echo_starts()
    ref = run_episodes(echo_model, starts, EchoEnv, jax.random.PRNGKey(0), tokenizer=ECHO_TOK,
                       sampling=SamplingParams(max_new_tokens=10, greedy=True), max_turns=8,
                       max_tokens=128, prompt_bucket=32, wall_time_s=3600.0)
    arrivals, stats = _continuous(echo_model, starts, EchoEnv, slots=1, greedy=True)
    assert [a.index for a in arrivals] == list(range(len(starts)))  # one at a time, in order
    assert stats["rollout/mean_round_rows"] == 1.0
    for a, want in zip(arrivals, ref.episodes):
        assert a.episode.tokens == want.tokens


class SlowEnv(EchoEnv):
    """EchoEnv whose every call keeps it busy for `task[1]` seconds (the call returns at once,
    as against a tool server); records when each call was made."""

    def reset(self, task, seed=0):
        self.delay, self.calls, self.busy_until = task[1], [], 0.0
        return super().reset(task[0], seed)

    def step(self, action):
        assert time.monotonic() >= self.busy_until, "stepped while its last call still runs"
        self.calls.append(time.monotonic())
        self.busy_until = time.monotonic() + self.delay
        return super().step(action)


def _say_a(prefixes, key, sampling, *, tokenizer, terminator_id, prompt_bucket):
    return turn_samples_from_texts(prefixes, ["a"] * len(prefixes), tokenizer=tokenizer,
                                   terminator_id=terminator_id,
                                   max_new_tokens=sampling.max_new_tokens,
                                   prompt_bucket=prompt_bucket)


def _slow_starts():
    from rlvr.rollout.agent_loop import EpisodeStart

    prefix = tuple([ECHO_TOK.bos_id] + ECHO_TOK.encode("ab\n"))
    # episode 0: 3 calls of 0.5 s; episodes 1-5: 2 instant calls each
    return [EpisodeStart(task=(3, 0.5) if i == 0 else (2, 0.0), prefix_tokens=prefix)
            for i in range(6)]


def test_a_slow_tool_call_holds_neither_the_other_episodes_nor_their_arrival():
    envs = []

    def make_env():
        envs.append(SlowEnv())
        return envs[-1]

    arrivals, _ = _continuous(None, _slow_starts(), make_env, slots=2, policy=_say_a)
    order = [a.index for a in arrivals]
    assert sorted(order) == list(range(6))
    assert order[-1] == 0, order  # the slow episode arrives last, the others did not wait for it
    slow = next(a for a in arrivals if a.index == 0)
    assert all(a.arrived_s < slow.arrived_s for a in arrivals if a.index != 0)
    # the others went through the other slot while its calls ran: some arrived before its
    # second call was even made
    calls = envs[0].calls
    assert sum(a.arrived_s < calls[1] for a in arrivals) >= 1
    # its own calls waited for each other: spaced by the call's duration at least
    assert len(calls) == 3 and min(np.diff(calls)) >= 0.5
    # it is handed over only once its last call has completed
    assert slow.arrived_s >= calls[-1] + 0.5


def test_the_lockstep_loop_would_hold_every_episode_for_the_slow_call():
    """The contrast the scheduler exists for: in run_episodes the fast episodes of the batch come
    back only with the slow one (the episode list is returned when the batch ends)."""
    starts = _slow_starts()
    t0 = time.monotonic()
    out = run_episodes(None, starts, _WaitingSlowEnv, jax.random.PRNGKey(0), tokenizer=ECHO_TOK,
                       sampling=SamplingParams(max_new_tokens=10), policy=_say_a, max_turns=8,
                       max_tokens=128, wall_time_s=3600.0)
    assert len(out.episodes) == 6 and time.monotonic() - t0 >= 1.0


class _WaitingSlowEnv(SlowEnv):
    """A slow environment whose next call waits for its last one (as ShopEnv's does)."""

    def step(self, action):
        left = self.busy_until - time.monotonic()
        if left > 0:
            time.sleep(left)
        return super().step(action)


def test_should_stop_returns_at_once_dropping_the_episodes_in_flight():
    calls = {"n": 0}

    def stop():
        calls["n"] += 1
        return calls["n"] > 3

    arrivals, stats = _continuous(None, [_slow_starts()[0]] * 100, SlowEnv, slots=4,
                                  policy=_say_a, should_stop=stop, stop_when_idle=False)
    assert stats["rollout/episodes"] == len(arrivals) < 100
