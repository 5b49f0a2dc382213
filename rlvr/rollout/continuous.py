"""Continuous episode scheduling: several episodes in flight, each handed over when it ends.

docs/algorithms.md §7 (single-rollout asynchronous training). `run_episodes` steps a batch of
episodes in lockstep: every turn waits for the slowest environment call of the batch, and the
batch comes back when its longest episode ends. `run_continuous` keeps up to `slots` episodes in
flight instead:

* each round samples the next action of the episodes that are **ready** — their environment is
  not busy with an earlier tool call (`busy_until(env)` has passed) — in one sampler call, and
  steps their environments; an episode waiting for a slow tool call does not hold the others;
* an episode that has ended is handed to `on_arrival` as soon as its environment's last call has
  completed — judged on its own, at once — and its slot takes the next start from `next_start`;
* each round uses the parameters `current_params()` returns then (the latest published ones),
  so a long episode may span several policy versions; its tokens carry the behaviour log-probs
  they were sampled with, and the `Arrival` records the version of its first action and of its
  last.

Keys are those of `run_episodes`: episode i (in start order) uses fold_in(key, i) and its t-th
action fold_in(episode key, t), so an episode's samples do not depend on the others in its
rounds. With no tool latency and `slots` >= the number of starts every round holds every active
episode, and the episodes equal `run_episodes`' exactly (same sampler calls).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable, Optional

import jax

from rlvr.rollout.agent_loop import (Episode, EpisodeStart, action_sampling, apply_action,
                                     batch_size_bucket, record_turn_start, sample_actions,
                                     start_episode)


def busy_until(env) -> float:
    """The monotonic time until which `env` is busy with a tool call (0: never busy)."""
    return float(getattr(env, "busy_until", 0.0) or 0.0)


@dataclasses.dataclass(frozen=True)
class Arrival:
    """One ended episode as `run_continuous` hands it over.

    index: its place in start order (its key is fold_in(key, index)); start: where it began;
    policy_version / last_policy_version: the parameters' versions at its first and its last
    action (-1 when it ended before any action); started_s / arrived_s: monotonic times of its
    start and of its hand-over.
    """

    index: int
    start: EpisodeStart
    episode: Episode
    policy_version: int
    last_policy_version: int
    started_s: float
    arrived_s: float


@dataclasses.dataclass
class _Slot:
    index: int
    start: EpisodeStart
    episode: Episode
    key: Any
    started_s: float
    turn: int = 0
    first_version: int = -1
    last_version: int = -1


def run_continuous(*, model_of: Callable, current_params: Callable[[], tuple],
                   next_start: Callable[[int], Optional[EpisodeStart]],
                   on_arrival: Callable[[Arrival], None], make_env: Callable[[], Any], key,
                   tokenizer, sampling, slots: int, terminator: str = "\n", max_turns: int = 8,
                   max_tokens: int = 256, wall_time_s: float = 0.0, prompt_bucket: int = 32,
                   batch_bucket: int = 0, should_stop: Callable[[], bool] = lambda: False,
                   stop_when_idle: bool = True, policy: Optional[Callable] = None,
                   on_round: Optional[Callable[[float, float], None]] = None,
                   idle_sleep_s: float = 0.002) -> dict:
    """Runs episodes continuously (module docstring) until `should_stop()` or, with
    `stop_when_idle`, until `next_start` has nothing and no episode is in flight.

    Args:
      model_of: params -> the policy model for the sampler.
      current_params: () -> (params, policy version), read once per round.
      next_start: (index) -> the EpisodeStart of the index-th episode, or None when there is
        nothing to start now (the call is repeated later unless `stop_when_idle`).
      on_arrival: called with each ended episode's `Arrival`, in arrival order, on this thread.
      make_env, tokenizer, sampling, terminator, max_turns, max_tokens, prompt_bucket,
        batch_bucket, policy: as in `run_episodes` (`max_turns` and `wall_time_s` count per
        episode, from its start; wall_time_s 0: no bound).
      key: one PRNG key; episode i uses fold_in(key, i).
      slots: most episodes in flight (ended ones waiting for their last call included).
      should_stop: () -> True to return at once; episodes in flight are dropped.
      on_round: optional (seconds sampling, seconds stepping environments) after each round.
    Returns:
      stats: rollout/episodes, rollout/turns, rollout/rounds, rollout/mean_round_rows,
      time/generate_s, time/env_s.
    """
    if slots < 1:
        raise ValueError(f"run_continuous: slots must be >= 1, got {slots}")
    if max_turns < 1 or max_tokens < 2:
        raise ValueError(f"run_continuous: max_turns must be >= 1 and max_tokens >= 2, got "
                         f"{max_turns}, {max_tokens}")
    batch_size_bucket(1, batch_bucket)  # validates batch_bucket
    sampling, term_id = action_sampling(sampling, tokenizer, terminator)
    if not jax.numpy.issubdtype(key.dtype, jax.dtypes.prng_key):
        key = jax.random.wrap_key_data(jax.numpy.asarray(key, jax.numpy.uint32))
    n_new = sampling.max_new_tokens
    flying: list[_Slot] = []
    index = rounds = rows = turns = arrived = 0
    t_gen = t_env = 0.0

    def hand_over(now: float) -> None:
        nonlocal arrived
        for sl in [sl for sl in flying if sl.episode.done and busy_until(sl.episode.env) <= now]:
            flying.remove(sl)
            arrived += 1
            on_arrival(Arrival(sl.index, sl.start, sl.episode, sl.first_version, sl.last_version,
                               sl.started_s, time.monotonic()))

    while not should_stop():
        idle = False
        while len(flying) < slots:
            s = next_start(index)
            if s is None:
                idle = True
                break
            te = time.monotonic()
            e = start_episode(s, make_env, max_new_tokens=n_new, max_tokens=max_tokens)
            t_env += time.monotonic() - te
            flying.append(_Slot(index, s, e, jax.random.fold_in(key, index), time.monotonic()))
            index += 1
        now = time.monotonic()
        for sl in flying:  # per-episode bounds
            e = sl.episode
            if e.done:
                continue
            if sl.turn >= max_turns:
                e.done, e.stop_reason, e.truncated = True, "max_turns", True
            elif wall_time_s > 0 and now - sl.started_s > wall_time_s:
                e.done, e.stop_reason, e.truncated = True, "timeout", True
        hand_over(now)
        ready = [sl for sl in flying if not sl.episode.done and busy_until(sl.episode.env) <= now]
        if not ready:
            if not flying and idle and stop_when_idle:
                break
            waits = [busy_until(sl.episode.env) - now for sl in flying]
            time.sleep(min([idle_sleep_s] + [w for w in waits if w > 0]) if waits else idle_sleep_s)
            continue
        ready = [sl for sl in ready if record_turn_start(sl.episode)]  # lost: env_error, ended
        if not ready:
            hand_over(time.monotonic())
            continue
        params, version = current_params()
        sub = jax.vmap(jax.random.fold_in)(
            jax.numpy.stack([sl.key for sl in ready]), jax.numpy.asarray([sl.turn for sl in ready]))
        tg = time.monotonic()
        ids, lps, texts, eos, truncated = sample_actions(
            model_of(params), [sl.episode.tokens for sl in ready], sub, sampling,
            tokenizer=tokenizer, terminator_id=term_id, prompt_bucket=prompt_bucket,
            batch_bucket=batch_bucket, max_tokens=max_tokens, policy=policy)
        gen_s = time.monotonic() - tg
        t_gen += gen_s
        rounds += 1
        rows += len(ready)
        env_s = 0.0
        for i, sl in enumerate(ready):
            e = sl.episode
            env_s += apply_action(e, ids[i], lps[i], texts[i], eos=eos[i], truncated=truncated[i],
                                  turn_id=e.first_turn + sl.turn, tokenizer=tokenizer,
                                  max_new_tokens=n_new, max_tokens=max_tokens)
            sl.turn += 1
            turns += 1
            sl.last_version = int(version)
            if sl.first_version < 0:
                sl.first_version = int(version)
        t_env += env_s
        if on_round is not None:
            on_round(gen_s, env_s)
        hand_over(time.monotonic())
    return {"rollout/episodes": float(arrived), "rollout/turns": float(turns),
            "rollout/rounds": float(rounds),
            "rollout/mean_round_rows": float(rows / rounds) if rounds else 0.0,
            "time/generate_s": t_gen, "time/env_s": t_env}
