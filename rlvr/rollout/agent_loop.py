"""Multi-turn agent loop: policy actions and environment observations in one token stream.

docs/architecture.md §3 (docs/algorithms.md §7). An episode is

    prompt · a_0 · o_1 · a_1 · o_2 · ... · a_{H-1} · o_H

as ONE token stream. `loss_mask` is 1 on action tokens a_i only (the policy's tokens, including
the action terminator), 0 on the prompt and on every observation o_i; `turn_ids[t] = i` on the
tokens of action a_i and -1 elsewhere, so Skip-Observation GAE (docs/algorithms.md (A.6)) and turn-level losses
(docs/algorithms.md (A.10)) can find the action boundaries. `behavior_logprobs` are the sampler's log-probs of the
action tokens, aligned with `tokens` (see rlvr/records/batch.py).

Batched: every turn, all still-active episodes step together — one sampler call with prompt =
each episode's whole history so far (left-padded, bucketed lengths so the jitted sampler compiles
a few shapes only), stopping at the action terminator (newline) or EOS. The active episodes are
padded to a bucketed batch size (`batch_size_bucket`: powers of two by default), so the sampler
compiles a bounded set of batch shapes as episodes finish. With `kv_reuse` each episode keeps its
KV cache across turns (`rlvr.rollout.session.KVSession`) and only the tokens appended since its
last action are prefilled. Environments step on the host, never inside jit.

Bounds and stop reasons (docs/architecture.md §3): the environment ends the episode (`eos`: natural end, also when
the policy emits EOS), `max_turns`, `max_length` (an action that hits the per-action token cap
without a terminator, or a history with no room left for one more action within `max_tokens`), `timeout` (wall time),
`env_error` (the environment reported a fault: the sample is marked invalid, never reward 0).

Before each action the loop records the environment snapshot, its state hash and the prefix
length: these are the pivot candidates of PivotRL (docs/algorithms.md §6) — a continuation
restored from them sees exactly the state the original episode saw.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable, Optional, Sequence

import jax
import numpy as np

from rlvr.records.batch import RolloutBatch
from rlvr.records.faults import EnvironmentLost


def _bucket(n: int, bucket: int) -> int:
    return max(bucket, -(-n // bucket) * bucket)


def batch_size_bucket(n: int, bucket: int) -> int:
    """The padded batch size for `n` rows: the next power of two >= n when `bucket` is 0, else
    the next multiple of `bucket` (1: n itself, no padding).

    A batch that shrinks from B rows to 1 then reaches at most floor(log2 B) + 2 distinct sizes
    (bucket 0) or ceil(B / bucket) (bucket k), so the jitted sampler compiles that many shapes.
    """
    if isinstance(bucket, bool) or not isinstance(bucket, int) or bucket < 0:
        raise ValueError(f"batch_bucket must be an int >= 0 (0 = powers of two), got {bucket!r}")
    if n < 1:
        raise ValueError(f"batch_size_bucket: n must be >= 1, got {n}")
    if bucket == 0:
        return 1 << (n - 1).bit_length()
    return _bucket(n, bucket)


# ------------------------------------------------------------------------------------- one turn
@dataclasses.dataclass(frozen=True)
class TurnSamples:
    """One sampled action per prefix (host arrays; the PivotRL training/probe unit).

    Attributes:
      tokens: int32 [B, P+N]: the prefix left-padded to P, then the action (and padding).
      attention_mask: bool [B, P+N]; positions: int32 [B, P+N].
      loss_mask: float32 [B, P+N]: 1 on the action tokens (incl. terminator) only.
      behavior_logprobs: float32 [B, P+N]: sampler log-probs on the action tokens, 0 elsewhere.
      action_ids: list of B lists of action token ids (terminator included when emitted).
      texts: list of B decoded action texts (terminator stripped).
      stopped: bool [B]: the action ended with the terminator; eos: bool [B]: it ended with EOS.
      truncated: bool [B]: hit `max_new_tokens` with neither.
    """

    tokens: np.ndarray
    attention_mask: np.ndarray
    positions: np.ndarray
    loss_mask: np.ndarray
    behavior_logprobs: np.ndarray
    action_ids: list
    texts: list
    stopped: np.ndarray
    eos: np.ndarray
    truncated: np.ndarray

    @property
    def batch_size(self) -> int:
        return self.tokens.shape[0]


def left_pad(prefixes: Sequence[Sequence[int]], pad_id: int, bucket: int,
             max_len: Optional[int] = None) -> tuple[np.ndarray, np.ndarray]:
    """Left-pads token lists to a common length rounded up to a multiple of `bucket`, capped at
    `max_len` (bucket 0: exactly `max_len`, one shape).

    Returns (tokens int32 [B, P], mask bool [B, P]). Raises ValueError when a prefix is longer
    than `max_len`.
    """
    if not prefixes or any(len(p) == 0 for p in prefixes):
        raise ValueError("left_pad: every prefix must be a non-empty token list")
    longest = max(len(x) for x in prefixes)
    if max_len is not None and longest > max_len:
        raise ValueError(f"left_pad: a prefix has {longest} tokens > the longest allowed {max_len}")
    if bucket <= 0:
        if max_len is None:
            raise ValueError("left_pad: bucket 0 needs max_len")
        p = max_len
    else:
        p = _bucket(longest, bucket)
        p = p if max_len is None else min(p, max_len)
    toks = np.full((len(prefixes), p), pad_id, np.int32)
    mask = np.zeros((len(prefixes), p), bool)
    for i, x in enumerate(prefixes):
        toks[i, p - len(x):] = x
        mask[i, p - len(x):] = True
    return toks, mask


def split_actions(action_ids: Sequence[Sequence[int]], *, tokenizer, terminator_id: int):
    """(texts, stopped bool [B], eos bool [B]) of generated id lists: an action that ends with
    the terminator is `stopped`, one that ends with EOS is `eos`; texts drop that last token."""
    n = len(action_ids)
    texts, stopped, eos = [], np.zeros(n, bool), np.zeros(n, bool)
    for i, ids in enumerate(action_ids):
        ids = list(ids)
        if ids and ids[-1] == terminator_id:
            stopped[i] = True
            ids = ids[:-1]
        elif ids and ids[-1] == tokenizer.eos_id:
            eos[i] = True
            ids = ids[:-1]
        texts.append(tokenizer.decode(ids))
    return texts, stopped, eos


def sample_turn(
    model,
    prefixes: Sequence[Sequence[int]],
    key: jax.Array,
    params,
    *,
    tokenizer,
    terminator_id: int,
    prompt_bucket: int = 32,
    batch_bucket: int = 1,
    max_prompt_len: Optional[int] = None,
    num_samples: int = 1,
    sharding=None,
    decode=None,
) -> TurnSamples:
    """Samples `num_samples` actions per prefix with the batched sampler (prompt = history so far).

    Rows are prefix-major: row u*G + j is action j of prefix u (G = num_samples); each prefix is
    prefilled once for its G actions (the sampler's `num_samples`), with the same tokens and
    distribution as passing each prefix G times.
    `key`: one PRNG key (row b uses fold_in(key, b)) or one typed key per output row.
    `params.stop_token_ids` should contain `terminator_id` and the tokenizer's EOS. The prefixes
    are padded to `batch_size_bucket(len(prefixes), batch_bucket)` (0: the next power of two,
    k: a multiple of k) with copies of the first prefix and key (then dropped) so the jitted
    sampler sees few distinct shapes; prompts are left-padded to a multiple of
    `prompt_bucket` (capped at `max_prompt_len` when given; 0 = exactly `max_prompt_len`).
    `sharding`: an optional `rlvr.parallel.GenerationSharding` the sampler splits the batch with.
    `decode`: an optional `rlvr.rollout.sampler.DecodeSchedule` (decode segments, compaction of
    finished rows); None: one decode part.
    """
    from rlvr.rollout.sampler import sample  # noqa: PLC0415 (keeps host-only users light)

    g = int(num_samples)
    u = len(prefixes)
    n = u * g
    extra = batch_size_bucket(u, batch_bucket) - u
    padded = list(prefixes) + [prefixes[0]] * extra
    ptoks, pmask = left_pad(padded, tokenizer.pad_id, prompt_bucket, max_len=max_prompt_len)
    if getattr(key, "ndim", 0) == 1 and jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        if key.shape[0] != n:
            raise ValueError(f"sample_turn: got {key.shape[0]} keys for {u} prefixes × {g} samples")
        key = jax.numpy.concatenate([key, jax.numpy.repeat(key[:1], extra * g)]) if extra else key
    out = sample(model, ptoks, pmask, key, params, pad_id=tokenizer.pad_id, num_samples=g,
                 sharding=sharding, **(decode.sample_kwargs() if decode is not None else {}))
    tokens = np.asarray(out.tokens)[:n]
    loss_mask = np.asarray(out.loss_mask, np.float32)[:n]
    blp = np.asarray(out.behavior_logprobs, np.float32)[:n] * loss_mask
    lengths = np.asarray(out.lengths)[:n]
    p = ptoks.shape[1]
    action_ids = [[int(t) for t in tokens[i, p:p + int(lengths[i])]] for i in range(n)]
    texts, stopped, eos = split_actions(action_ids, tokenizer=tokenizer, terminator_id=terminator_id)
    return TurnSamples(
        tokens=tokens.astype(np.int32),
        attention_mask=np.asarray(out.attention_mask, bool)[:n],
        positions=np.asarray(out.positions, np.int32)[:n],
        loss_mask=loss_mask,
        behavior_logprobs=blp,
        action_ids=action_ids,
        texts=texts,
        stopped=stopped,
        eos=eos,
        truncated=~(stopped | eos),
    )


# ----------------------------------------------------------------------------------- episodes
@dataclasses.dataclass
class Episode:
    """Host record of one multi-turn episode (mutable while the loop runs).

    `tokens/loss_mask/behavior_logprobs/turn_ids` are the unpadded stream; `turn_starts[i]` is
    the stream length before action i (the pivot prefix is `tokens[:turn_starts[i]]`);
    `snapshots[i]` / `state_hashes[i]` the environment state before action i. `prompt_tokens`:
    the history tokens its actions were conditioned on (one count per action); `prefill_tokens`:
    those actually run through prefill (with a KV cache kept across turns, only the new part).
    """

    task: Any
    env: Any
    tokens: list
    loss_mask: list
    behavior_logprobs: list
    turn_ids: list
    actions: list = dataclasses.field(default_factory=list)
    observations: list = dataclasses.field(default_factory=list)
    snapshots: list = dataclasses.field(default_factory=list)
    state_hashes: list = dataclasses.field(default_factory=list)
    turn_starts: list = dataclasses.field(default_factory=list)
    first_turn: int = 0
    done: bool = False
    stop_reason: str = ""
    truncated: bool = False
    env_error: Optional[str] = None
    prompt_tokens: int = 0
    prefill_tokens: int = 0

    @property
    def num_turns(self) -> int:
        return len(self.actions)

    @property
    def num_action_tokens(self) -> int:
        return int(sum(self.loss_mask))


@dataclasses.dataclass(frozen=True)
class EpisodeStart:
    """Where an episode starts: a fresh task (snapshot None) or a restored pivot state.

    Attributes:
      task: the TaskSpec.
      prefix_tokens: token ids of the history so far (prompt [+ earlier turns]).
      snapshot: environment snapshot to restore (None: `env.reset(task, seed)`).
      state_hash: expected `env.state_hash()` after restore (checked; docs/architecture.md §4, docs/algorithms.md §6).
      turn_index: index of the next action (turn_ids continue from it).
      seed: environment seed for reset.
    """

    task: Any
    prefix_tokens: tuple
    snapshot: Any = None
    state_hash: Optional[str] = None
    turn_index: int = 0
    seed: int = 0


def restore_env(env, snapshot, expected_hash: Optional[str]) -> str:
    """Restores `env` to `snapshot` and checks the state hash equals `expected_hash`.

    Raises RuntimeError naming both hashes if the restored state differs (a continuation from a
    pivot must see exactly the original state, docs/algorithms.md §6). Returns the hash.
    """
    env.restore(snapshot)
    h = env.state_hash()
    if expected_hash is not None and h != expected_hash:
        raise RuntimeError(
            f"restore_env: restored state hash {h} != expected pivot state hash {expected_hash}"
        )
    return h


@dataclasses.dataclass(frozen=True)
class AgentRollout:
    """Output of `run_episodes`: the host episodes (in start order) and rollout statistics.

    The episodes carry no reward: the caller judges each one (its outcome verifier on the
    environment's authoritative final state) and builds the batch with `to_batch`.
    """

    episodes: list
    stats: dict
    pad_id: int = 0
    seq_bucket: int = 64

    def to_batch(self, rewards=None, valid=None, policy_version=0) -> RolloutBatch:
        """`episodes_to_batch` of these episodes (rewards 0 and valid = no env_error by default)."""
        return episodes_to_batch(self.episodes, pad_id=self.pad_id, seq_bucket=self.seq_bucket,
                                 rewards=rewards, valid=valid, policy_version=policy_version)


def action_sampling(sampling, tokenizer, terminator: str):
    """(sampling with the action terminator and EOS among its stop tokens, the terminator's
    id); ValueError when the terminator is not one token."""
    term_ids = tokenizer.encode(terminator)
    if len(term_ids) != 1:
        raise ValueError(f"run_episodes: terminator {terminator!r} must be one token, got {term_ids}")
    term_id = term_ids[0]
    stops = tuple(sorted(set(tuple(sampling.stop_token_ids)) | {term_id, tokenizer.eos_id}))
    return dataclasses.replace(sampling, stop_token_ids=stops), term_id


def sample_actions(model, prefixes, keys, sampling, *, tokenizer, terminator_id: int,
                   prompt_bucket: int, batch_bucket: int, max_tokens: int,
                   policy: Optional[Callable] = None, sharding=None, decode=None):
    """One action per prefix (`sample_turn`, or the scripted `policy`): (action ids, their
    behaviour log-probs, texts, eos flags, truncated flags), one entry per prefix."""
    if policy is None:
        ts = sample_turn(model, prefixes, keys, sampling, tokenizer=tokenizer,
                         terminator_id=terminator_id, prompt_bucket=prompt_bucket,
                         batch_bucket=batch_bucket, max_prompt_len=max_tokens - sampling.max_new_tokens,
                         sharding=sharding, decode=decode)
    else:
        ts = policy(prefixes, keys, sampling, tokenizer=tokenizer, terminator_id=terminator_id,
                    prompt_bucket=prompt_bucket)
    p = ts.tokens.shape[1] - sampling.max_new_tokens
    lps = [ts.behavior_logprobs[i, p:p + len(ids)] for i, ids in enumerate(ts.action_ids)]
    return ts.action_ids, lps, ts.texts, ts.eos, ts.truncated


def start_episode(s: EpisodeStart, make_env: Callable[[], Any], *, max_new_tokens: int,
                  max_tokens: int) -> Episode:
    """A new Episode at `s`: a fresh environment reset from the task (or restored to the pivot
    snapshot, its state hash checked); done at once with `max_length` when the prefix leaves no
    room for one action of `max_new_tokens` within `max_tokens`."""
    env = make_env()
    lost = None
    try:
        if s.snapshot is None:
            env.reset(s.task, seed=s.seed)
            if s.state_hash is not None and env.state_hash() != s.state_hash:
                raise RuntimeError(f"run_episodes: reset hash {env.state_hash()} != {s.state_hash}")
        else:
            restore_env(env, s.snapshot, s.state_hash)
    except EnvironmentLost as err:  # the environment's fault: env_error, masked
        lost = str(err)
    n = len(s.prefix_tokens)
    e = Episode(task=s.task, env=env, tokens=list(s.prefix_tokens), loss_mask=[0.0] * n,
                behavior_logprobs=[0.0] * n, turn_ids=[-1] * n, first_turn=s.turn_index)
    if lost is not None:
        e.done, e.stop_reason, e.env_error = True, "env_error", lost
    elif n + max_new_tokens > max_tokens:  # no room for a single action
        e.done, e.stop_reason, e.truncated = True, "max_length", True
    return e


def record_turn_start(e: Episode) -> bool:
    """The pivot candidate before the episode's next action: environment snapshot, state hash
    and stream length. False (the episode ended as env_error) when the environment is lost."""
    try:
        snap, h = e.env.snapshot(), e.env.state_hash()
    except EnvironmentLost as err:
        e.done, e.stop_reason, e.env_error = True, "env_error", str(err)
        return False
    e.snapshots.append(snap)
    e.state_hashes.append(h)
    e.turn_starts.append(len(e.tokens))
    return True


def apply_action(e: Episode, ids, logprobs, text: str, *, eos: bool, truncated: bool,
                 turn_id: int, tokenizer, max_new_tokens: int, max_tokens: int) -> float:
    """Appends one sampled action to the episode's stream (loss_mask 1, its behaviour
    log-probs, `turn_id`), steps the environment with its text and appends the observation
    (loss_mask 0), setting the stop reason when the episode ends (module docstring). Returns
    the seconds the environment step took."""
    e.tokens += ids
    e.loss_mask += [1.0] * len(ids)
    e.behavior_logprobs += [float(x) for x in logprobs]
    e.turn_ids += [turn_id] * len(ids)
    e.actions.append(text)
    if truncated:
        e.done, e.stop_reason, e.truncated = True, "max_length", True
        return 0.0
    if eos:
        e.done, e.stop_reason = True, "eos"
        return 0.0
    te = time.monotonic()
    res = e.env.step(text)
    spent = time.monotonic() - te
    if res.error is not None:
        e.done, e.stop_reason, e.env_error = True, "env_error", str(res.error)
        return spent
    obs = tokenizer.encode(res.observation)
    e.observations.append(res.observation)
    if len(e.tokens) + len(obs) > max_tokens:
        e.done, e.stop_reason, e.truncated = True, "max_length", True
        return spent
    e.tokens += obs
    e.loss_mask += [0.0] * len(obs)
    e.behavior_logprobs += [0.0] * len(obs)
    e.turn_ids += [-1] * len(obs)
    if res.done:
        e.done, e.stop_reason = True, "eos"
    elif len(e.tokens) + max_new_tokens > max_tokens:  # no room for an action
        e.done, e.stop_reason, e.truncated = True, "max_length", True
    return spent


def run_episodes(
    model,
    starts: Sequence[EpisodeStart],
    make_env: Callable[[], Any],
    key: jax.Array,
    *,
    tokenizer,
    sampling,
    terminator: str = "\n",
    max_turns: int = 8,
    max_tokens: int = 256,
    wall_time_s: float = 0.0,
    seq_bucket: int = 64,
    prompt_bucket: int = 32,
    batch_bucket: int = 0,
    kv_reuse: bool = False,
    policy: Optional[Callable] = None,
    sharding=None,
    decode=None,
) -> AgentRollout:
    """Runs a batch of episodes to completion, all active episodes stepping together.

    Args:
      model: the policy (rlvr.models.Transformer) passed to the sampler.
      starts: one EpisodeStart per episode (fresh tasks or restored pivot states).
      make_env: factory of a fresh Environment (one per episode).
      key: one PRNG key (episode i uses fold_in(key, i)) or one typed key per episode; the
        action of turn t uses fold_in(episode key, t), so an episode's samples do not depend on
        the other episodes of the batch.
      tokenizer: rlvr tokenizer (encode/decode/pad_id/eos_id).
      sampling: SamplingParams for each action; `max_new_tokens` bounds one action. The
        terminator and EOS are added to its stop tokens.
      max_turns: most actions per episode (counted from the episode's first turn).
      max_tokens: most stream tokens per episode (prompt + actions + observations).
      wall_time_s: wall-clock bound on the batch's episodes, which start together (0: none);
        past it the active episodes stop with `timeout` (truncated, judged as they are).
      prompt_bucket: histories are left-padded to a multiple of it (0: always to
        max_tokens − max_new_tokens, one shape).
      batch_bucket: the active episodes are padded to `batch_size_bucket(n_active, batch_bucket)`
        rows (0: the next power of two, k: a multiple of k, 1: no padding), so the sampler
        compiles a bounded number of batch shapes as episodes finish.
      kv_reuse: keep each episode's KV cache across turns (`rlvr.rollout.session.KVSession`):
        every turn prefills only the tokens appended since the episode's last action (the
        observation; the prompt on the first turn) instead of the whole history; the new chunks
        are right-padded to a multiple of `prompt_bucket` (a power of two when it is 0). Same
        keys, same sampling rule: equal to re-prefilling up to floating-point rounding.
        Ignored when `policy` is given.
      policy: optional replacement for `sample_turn` (same signature minus model), e.g. a
        scripted policy in tests.
      sharding: optional `rlvr.parallel.GenerationSharding`: each turn's sampler call (or, with
        `kv_reuse`, the session's cache and rows) splits its batch over that mesh.
      decode: optional `rlvr.rollout.sampler.DecodeSchedule` of each turn's sampler call (the
        re-prefill path; refused with `kv_reuse`, whose session runs its own decode loop).
    Returns:
      AgentRollout: the episodes (streams, actions, observations, per-turn snapshots, stop
      reasons, env errors) and stats (turns, action tokens, prompt tokens = history tokens the
      actions were conditioned on, prefill tokens = tokens actually prefilled (the prompt tokens
      when re-prefilling, the new chunks with `kv_reuse`), time split). No rewards:
      the caller judges the episodes.
    """
    if max_turns < 1 or max_tokens < 2:
        raise ValueError(f"run_episodes: max_turns must be >= 1 and max_tokens >= 2, got "
                         f"{max_turns}, {max_tokens}")
    batch_size_bucket(1, batch_bucket)  # validates batch_bucket
    if kv_reuse and policy is None and decode is not None and not decode.is_default:
        raise ValueError(f"run_episodes: decode={decode} does not apply with kv_reuse=True (the "
                         f"KV session decodes each turn in one part): use the default schedule")
    sampling, term_id = action_sampling(sampling, tokenizer, terminator)
    t0 = time.monotonic()
    t_gen = t_env = 0.0

    from rlvr.rollout.sampler import per_sample_keys  # noqa: PLC0415

    episode_keys = per_sample_keys(key, len(starts))
    episodes: list[Episode] = []
    for s in starts:
        te = time.monotonic()
        episodes.append(start_episode(s, make_env, max_new_tokens=sampling.max_new_tokens,
                                      max_tokens=max_tokens))
        t_env += time.monotonic() - te

    turn = 0
    session = None
    if kv_reuse and policy is None:
        from rlvr.rollout.session import KVSession  # noqa: PLC0415

        session = KVSession(model, max_tokens=max_tokens, pad_id=tokenizer.pad_id,
                            batch_bucket=batch_bucket, chunk_bucket=prompt_bucket,
                            sharding=sharding)
    while True:
        active = [e for e in episodes if not e.done]
        if not active:
            break
        if wall_time_s > 0 and time.monotonic() - t0 > wall_time_s:
            for e in active:
                e.done, e.stop_reason, e.truncated = True, "timeout", True
            break
        if turn >= max_turns:
            for e in active:
                e.done, e.stop_reason, e.truncated = True, "max_turns", True
            break
        active = [e for e in active if record_turn_start(e)]  # pivot candidates: state before
        if not active:  # this action (an episode whose environment is lost ends here)
            continue
        idx = np.array([i for i, e in enumerate(episodes) if not e.done])
        sub = jax.vmap(lambda k: jax.random.fold_in(k, turn))(episode_keys[idx])
        tg = time.monotonic()
        prefixes = [e.tokens for e in active]
        for e, p in zip(active, prefixes):
            e.prompt_tokens += len(p)
        if session is not None:
            st = session.turn([int(i) for i in idx], prefixes, sub, sampling)
            for e, n in zip(active, st.row_prefill_tokens):
                e.prefill_tokens += n
            all_ids, all_lps = st.action_ids, st.logprobs
            texts, _, eos = split_actions(all_ids, tokenizer=tokenizer, terminator_id=term_id)
            truncated = st.truncated
        else:
            all_ids, all_lps, texts, eos, truncated = sample_actions(
                model, prefixes, sub, sampling, tokenizer=tokenizer, terminator_id=term_id,
                prompt_bucket=prompt_bucket, batch_bucket=batch_bucket, max_tokens=max_tokens,
                policy=policy, sharding=sharding, decode=decode)
            for e, p in zip(active, prefixes):
                e.prefill_tokens += len(p)
        t_gen += time.monotonic() - tg
        for i, e in enumerate(active):
            t_env += apply_action(e, all_ids[i], all_lps[i], texts[i], eos=eos[i],
                                  truncated=truncated[i], turn_id=e.first_turn + turn,
                                  tokenizer=tokenizer, max_new_tokens=sampling.max_new_tokens,
                                  max_tokens=max_tokens)
        turn += 1

    n_act = sum(e.num_action_tokens for e in episodes)
    stats = {
        "rollout/episodes": float(len(episodes)),
        "rollout/turns": float(sum(e.num_turns for e in episodes)),
        "rollout/action_tokens": float(n_act),
        "rollout/prompt_tokens": float(sum(e.prompt_tokens for e in episodes)),
        "rollout/prefill_tokens": float(sum(e.prefill_tokens for e in episodes)),
        "rollout/tokens": float(sum(len(e.tokens) for e in episodes)),
        "rollout/truncation_rate": float(np.mean([e.truncated for e in episodes])),
        "rollout/env_error_rate": float(np.mean([e.env_error is not None for e in episodes])),
        "time/generate_s": t_gen,
        "time/env_s": t_env,
    }
    return AgentRollout(episodes=episodes, stats=stats, pad_id=tokenizer.pad_id,
                        seq_bucket=seq_bucket)


def episodes_to_batch(episodes: Sequence[Episode], *, pad_id: int, seq_bucket: int,
                      rewards=None, valid=None, policy_version=0) -> RolloutBatch:
    """Right-pads episode streams into a RolloutBatch [B, T] with turn_ids (T bucketed).

    rewards: [B] (default 0); valid: [B] (default: the episodes without an environment fault);
    policy_version: an int or [B] versions of the policy that sampled each episode.
    """
    t = _bucket(max(len(e.tokens) for e in episodes), seq_bucket)
    b = len(episodes)
    tokens = np.full((b, t), pad_id, np.int32)
    am = np.zeros((b, t), bool)
    lm = np.zeros((b, t), np.float32)
    blp = np.zeros((b, t), np.float32)
    tid = np.full((b, t), -1, np.int32)
    for i, e in enumerate(episodes):
        n = len(e.tokens)
        tokens[i, :n] = e.tokens
        am[i, :n] = True
        lm[i, :n] = e.loss_mask
        blp[i, :n] = e.behavior_logprobs
        tid[i, :n] = e.turn_ids
    return RolloutBatch.create(
        tokens=tokens, attention_mask=am, loss_mask=lm, behavior_logprobs=blp,
        rewards=np.zeros((b,), np.float32) if rewards is None else np.asarray(rewards, np.float32),
        valid=(np.array([e.env_error is None for e in episodes]) if valid is None
               else np.asarray(valid, bool)),
        truncated=np.array([e.truncated for e in episodes]),
        policy_version=np.broadcast_to(np.asarray(policy_version, np.int32), (b,)),
        turn_ids=tid,
    )


def turn_samples_from_texts(prefixes: Sequence[Sequence[int]], texts: Sequence[str], *, tokenizer,
                            terminator_id: int, max_new_tokens: int, prompt_bucket: int = 32,
                            logprobs: Optional[Sequence[Sequence[float]]] = None) -> TurnSamples:
    """Builds TurnSamples from given action texts (scripted policies, replays, tests).

    Same layout as `sample_turn`: prefix left-padded to P, then the action + terminator, padded
    to N = max_new_tokens. Actions longer than N are cut (truncated, no terminator).
    """
    ptoks, pmask = left_pad(prefixes, tokenizer.pad_id, prompt_bucket)
    b, p = ptoks.shape
    n = max_new_tokens
    tokens = np.concatenate([ptoks, np.full((b, n), tokenizer.pad_id, np.int32)], 1)
    am = np.concatenate([pmask, np.zeros((b, n), bool)], 1)
    lm = np.zeros((b, p + n), np.float32)
    blp = np.zeros((b, p + n), np.float32)
    action_ids, out_texts = [], []
    stopped = np.zeros(b, bool)
    for i, text in enumerate(texts):
        ids = list(tokenizer.encode(text)) + [terminator_id]
        if len(ids) > n:
            ids = ids[:n]
        else:
            stopped[i] = True
        tokens[i, p:p + len(ids)] = ids
        am[i, p:p + len(ids)] = True
        lm[i, p:p + len(ids)] = 1.0
        if logprobs is not None:
            blp[i, p:p + len(ids)] = np.asarray(logprobs[i], np.float32)[:len(ids)]
        action_ids.append(ids)
        out_texts.append(text if stopped[i] else tokenizer.decode(ids))
    positions = np.where(am, np.cumsum(am, axis=1) - 1, 0).astype(np.int32)
    return TurnSamples(tokens=tokens, attention_mask=am, positions=positions, loss_mask=lm,
                       behavior_logprobs=blp, action_ids=action_ids, texts=out_texts,
                       stopped=stopped, eos=np.zeros(b, bool), truncated=~stopped)
