"""Agent loop: one token stream, loss_mask on actions only, turn ids, stop reasons, restore;
batch-size buckets bound the sampler's shapes without changing samples."""

import jax
import numpy as np
import pytest
from flax import nnx

import rlvr.rollout.sampler as sampler_mod
from rlvr.envs.base import StepResult
from rlvr.envs.kv_store import ALPHABET, KVStoreEnv
from rlvr.models import ModelConfig, Transformer
from rlvr.rollout.agent_loop import (EpisodeStart, batch_size_bucket, restore_env, run_episodes,
                                     turn_samples_from_texts)
from rlvr.tasks import kv_agent

from rlvr.models.tokenizer import CharTokenizer
from rlvr.rollout.sampler import SamplingParams


def _sampling():
    return SamplingParams(max_new_tokens=12)


def _tok():
    return CharTokenizer(ALPHABET)


def _oracle_policy(tasks, tok, wrong_at=None):
    """Replays the demonstration: maps the decoded history text to the next demo action."""
    table = {}
    for t in tasks:
        turns = kv_agent.demonstrations(t)
        for i, turn in enumerate(turns):
            act = turn.action.rstrip("\n")
            if wrong_at is not None and i == wrong_at:
                act = "del a"
            table[kv_agent.render_episode(t, turns[:i])] = act

    def policy(prefixes, key, sampling, *, tokenizer, terminator_id, prompt_bucket):
        texts = [table.get(tokenizer.decode([x for x in p if x > 2]), "del a") for p in prefixes]
        lps = [[-0.5] * 20 for _ in texts]
        return turn_samples_from_texts(prefixes, texts, tokenizer=tokenizer,
                                       terminator_id=terminator_id,
                                       max_new_tokens=sampling.max_new_tokens,
                                       prompt_bucket=prompt_bucket, logprobs=lps)
    return policy


def _starts(tasks, tok):
    return [EpisodeStart(task=t, prefix_tokens=tuple([tok.bos_id] + tok.encode(t.prompt)),
                         seed=t.random_seed) for t in tasks]


def test_stream_masks_turns_and_stop_reasons():
    tok = _tok()
    tasks = kv_agent.generate(3, seed=1)
    out = run_episodes(None, _starts(tasks, tok), lambda: KVStoreEnv(fault_prob=0.0),
                       jax.random.PRNGKey(0), tokenizer=tok, sampling=_sampling(),
                       policy=_oracle_policy(tasks, tok), max_turns=8, max_tokens=128)
    b = out.to_batch()
    for i, (t, e) in enumerate(zip(tasks, out.episodes)):
        turns = kv_agent.demonstrations(t)
        text = kv_agent.render_episode(t, turns)
        n = len(e.tokens)
        assert tok.decode([x for x in np.asarray(b.tokens[i, 1:n])]) == text
        # loss_mask is 1 exactly on action characters (incl. newline), turn ids count actions
        expect_mask, expect_tid = [0] * (1 + len(t.prompt)), [-1] * (1 + len(t.prompt))
        for k, turn in enumerate(turns):
            expect_mask += [1] * len(turn.action) + [0] * len(turn.observation)
            expect_tid += [k] * len(turn.action) + [-1] * len(turn.observation)
        np.testing.assert_array_equal(np.asarray(b.loss_mask[i, :n]), expect_mask)
        np.testing.assert_array_equal(np.asarray(b.turn_ids[i, :n]), expect_tid)
        assert np.all(np.asarray(b.loss_mask[i, n:]) == 0)
        blp = np.asarray(b.behavior_logprobs[i])
        assert np.all(blp[np.asarray(b.loss_mask[i]) == 0] == 0)
        assert np.all(blp[np.asarray(b.loss_mask[i]) == 1] == -0.5)
        assert e.stop_reason == "eos" and e.num_turns == len(turns)
    # a max_turns bound cuts episodes
    out2 = run_episodes(None, _starts(tasks, tok), lambda: KVStoreEnv(fault_prob=0.0),
                        jax.random.PRNGKey(0), tokenizer=tok, sampling=_sampling(),
                        policy=_oracle_policy(tasks, tok), max_turns=1, max_tokens=128)
    assert all(e.stop_reason == "max_turns" for e in out2.episodes)
    assert np.all(np.asarray(out2.to_batch().truncated))


def test_a_slow_batch_runs_to_its_end_unless_an_episode_timeout_is_set():
    """No wall-clock bound by default: a batch whose turns take long (a large evaluation on a
    slow machine) runs every episode to its end. With `wall_time_s` set, episodes still active
    past it stop as "timeout", truncated."""
    import time

    tok = _tok()
    tasks = kv_agent.generate(3, seed=1)
    oracle = _oracle_policy(tasks, tok)

    def slow(*a, **k):
        time.sleep(0.05)
        return oracle(*a, **k)

    def go(**kw):
        return run_episodes(None, _starts(tasks, tok), lambda: KVStoreEnv(fault_prob=0.0),
                            jax.random.PRNGKey(0), tokenizer=tok, sampling=_sampling(), policy=slow,
                            max_turns=8, max_tokens=128, **kw)

    done = go()
    assert all(e.stop_reason == "eos" and not e.truncated for e in done.episodes)
    assert [e.num_turns for e in done.episodes] == [len(kv_agent.demonstrations(t)) for t in tasks]
    cut = go(wall_time_s=0.08)
    assert all(e.stop_reason == "timeout" and e.truncated for e in cut.episodes)
    assert all(e.num_turns < len(kv_agent.demonstrations(t)) for e, t in zip(cut.episodes, tasks))


def test_config_episode_timeout_reaches_the_engine_and_is_validated():
    from configs import agent_grpo, base
    from rlvr.tasks.kit import build_kit
    from rlvr.train.config import ConfigError, check_applicability, validate_config
    from rlvr.train.setup import _Engines

    c = agent_grpo.get_config()
    assert c.rollout.episode_timeout_s == 0.0
    c.rollout.episode_timeout_s = 120.0
    validate_config(c)
    kit = build_kit(c.task.names, c.task.weights, c.task.kwargs.to_dict())
    assert _Engines(c, kit, _tok(), None, None)(None).episode_timeout_s == 120.0
    c.rollout.episode_timeout_s = -1.0
    with pytest.raises(ConfigError, match="rollout.episode_timeout_s"):
        validate_config(c)
    c = base.get_config()  # single-turn: not applicable
    c.rollout.episode_timeout_s = 5.0
    assert any(e.startswith("config.rollout.episode_timeout_s = 5.0 does not apply")
               for e in check_applicability(c, multi_turn=False))


def test_env_error_is_invalid_not_zero_reward():
    tok = _tok()
    tasks = kv_agent.generate(4, seed=2)
    out = run_episodes(None, _starts(tasks, tok), lambda: KVStoreEnv(fault_prob=1.0),
                       jax.random.PRNGKey(0), tokenizer=tok, sampling=_sampling(),
                       policy=_oracle_policy(tasks, tok), max_turns=8, max_tokens=128)
    assert all(e.stop_reason == "env_error" and e.env_error for e in out.episodes)
    assert not np.any(np.asarray(out.to_batch().valid))


def test_restore_continuation_sees_the_original_state():
    tok = _tok()
    tasks = kv_agent.generate(2, seed=3)
    pol = _oracle_policy(tasks, tok)
    mk = lambda: KVStoreEnv(fault_prob=0.0)  # noqa: E731
    full = run_episodes(None, _starts(tasks, tok), mk, jax.random.PRNGKey(0), tokenizer=tok,
                        sampling=_sampling(), policy=pol, max_turns=8, max_tokens=128)
    for t, e in zip(tasks, full.episodes):
        demo = kv_agent.demonstrations(t)
        assert e.state_hashes == [d.state_before.state_hash for d in demo]
        for i in range(e.num_turns):
            env = mk()
            assert restore_env(env, e.snapshots[i], e.state_hashes[i]) == e.state_hashes[i]
            cont = run_episodes(None, [EpisodeStart(task=t, prefix_tokens=tuple(e.tokens[:e.turn_starts[i]]),
                                                    snapshot=e.snapshots[i], state_hash=e.state_hashes[i],
                                                    turn_index=i)],
                                mk, jax.random.PRNGKey(1), tokenizer=tok, sampling=_sampling(),
                                policy=pol, max_turns=8, max_tokens=128)
            c = cont.episodes[0]
            assert c.state_hashes[0] == e.state_hashes[i]
            assert c.tokens == e.tokens and c.observations == e.observations[i:]
            assert c.env.state_hash() == e.env.state_hash()
        with pytest.raises(RuntimeError, match="hash"):
            restore_env(mk(), e.snapshots[0], e.state_hashes[-1])


# ------------------------------------------------------------------ a tiny random policy and env
ECHO_TOK = CharTokenizer("abcd:\n")


class EchoEnv:
    """Scripted environment: the task is the number of turns; each observation echoes the first
    (turn mod 3) + 1 characters of the action (observation lengths vary by row and turn)."""

    def reset(self, task, seed=0):
        self.left, self.t = int(task), 0
        return ""

    def step(self, action):
        self.t += 1
        return StepResult(observation=":" + action[:self.t % 3 + 1] + "\n", done=self.t >= self.left)

    def snapshot(self):
        return (self.left, self.t)

    def restore(self, snap):
        self.left, self.t = snap

    def state_hash(self):
        return f"{self.left}-{self.t}"


@pytest.fixture(scope="module")
def echo_model():
    """Tiny random policy with large weights (context-dependent argmax), no pad/bos/eos logits
    and a boosted newline so actions end with the terminator after a few characters."""
    cfg = ModelConfig(vocab_size=ECHO_TOK.vocab_size, hidden_size=32, intermediate_size=64,
                      num_layers=2, num_heads=4, num_kv_heads=2, head_dim=8, architecture="qwen2",
                      attention_bias=True)
    graphdef, state = nnx.split(Transformer(cfg, rngs=nnx.Rngs(0)))
    model = nnx.merge(graphdef, jax.tree.map(lambda x: x * 20 if x.ndim == 2 else x, state))
    nl = ECHO_TOK.encode("\n")[0]
    model.lm_head.kernel[...] = model.lm_head.kernel[...].at[:, :3].set(0.0).at[:, nl].multiply(3.0)
    model.model.norm.scale[...] = model.model.norm.scale[...] * 0 + 1.0
    return model


def _echo_starts(turns=(1, 2, 3, 4, 5, 6)):
    return [EpisodeStart(task=n, prefix_tokens=tuple([ECHO_TOK.bos_id]
                                                     + ECHO_TOK.encode("ab:c" * (1 + n % 2) + "\n")))
            for n in turns]


def _echo_run(model, greedy=True, **kw):
    kw.setdefault("max_turns", 8)
    return run_episodes(model, _echo_starts(), EchoEnv, jax.random.PRNGKey(0), tokenizer=ECHO_TOK,
                        sampling=SamplingParams(max_new_tokens=10, greedy=greedy),
                        max_tokens=128, prompt_bucket=32, wall_time_s=3600.0, **kw)


def _assert_same_episodes(a, b, lp_atol=1e-5):
    for ea, eb in zip(a.episodes, b.episodes, strict=True):
        assert ea.tokens == eb.tokens
        assert ea.loss_mask == eb.loss_mask and ea.turn_ids == eb.turn_ids
        assert ea.stop_reason == eb.stop_reason and ea.truncated == eb.truncated
        assert ea.snapshots == eb.snapshots and ea.state_hashes == eb.state_hashes
        assert ea.turn_starts == eb.turn_starts and ea.observations == eb.observations
        np.testing.assert_allclose(ea.behavior_logprobs, eb.behavior_logprobs, atol=lp_atol, rtol=0)


def test_batch_size_bucket_values_and_errors():
    assert [batch_size_bucket(n, 0) for n in range(1, 10)] == [1, 2, 4, 4, 8, 8, 8, 8, 16]
    assert [batch_size_bucket(n, 3) for n in range(1, 8)] == [3, 3, 3, 6, 6, 6, 9]
    assert [batch_size_bucket(n, 1) for n in range(1, 5)] == [1, 2, 3, 4]
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="batch_bucket"):
            batch_size_bucket(3, bad)
    with pytest.raises(ValueError, match="batch_bucket"):
        run_episodes(None, _echo_starts(), EchoEnv, jax.random.PRNGKey(0), tokenizer=ECHO_TOK,
                     sampling=SamplingParams(max_new_tokens=4), batch_bucket=-2)


def test_batch_bucket_bounds_sampler_shapes_and_keeps_samples(echo_model, monkeypatch):
    """Episodes end one per turn (6 → 1 active): the sampler sees the bucketed batch sizes only,
    and every episode is the one an unpadded run (batch_bucket=1) produces (same tokens, stop
    reasons and snapshots; log-probs within 1e-5: another batch shape rounds differently)."""
    calls = []
    real = sampler_mod.sample

    def recording(model, prompt_tokens, *a, **kw):
        calls.append(prompt_tokens.shape[0])
        return real(model, prompt_tokens, *a, **kw)

    monkeypatch.setattr(sampler_mod, "sample", recording)
    runs = {}
    for bucket in (1, 0, 4):
        calls.clear()
        runs[bucket] = _echo_run(echo_model, batch_bucket=bucket)
        active = [sum(1 for e in runs[bucket].episodes if e.num_turns > t) for t in range(8)]
        active = [n for n in active if n]
        assert calls == [batch_size_bucket(n, bucket) for n in active]
        runs[bucket] = (runs[bucket], sorted(set(calls)))
    assert runs[1][1] == [1, 2, 3, 4, 5, 6]  # one shape per active count without buckets
    assert runs[0][1] == [1, 2, 4, 8]
    assert runs[4][1] == [4, 8]
    assert [e.num_turns for e in runs[1][0].episodes] == [1, 2, 3, 4, 5, 6]
    for bucket in (0, 4):
        _assert_same_episodes(runs[1][0], runs[bucket][0])


def test_config_batch_bucket_validated_and_named():
    from configs import base
    from rlvr.train.config import ConfigError, validate_config

    c = base.get_config()
    c.rollout.batch_bucket = -1
    with pytest.raises(ConfigError, match="rollout.batch_bucket"):
        validate_config(c)


# ------------------------------------------------------------------ KV cache across turns
@pytest.mark.parametrize("batch_bucket", [0, 1])
def test_kv_reuse_greedy_equals_reprefill(echo_model, batch_bucket):
    """Greedy episodes with the cache kept across turns: the same token streams, stop reasons,
    per-turn snapshots and prefix lengths as re-prefilling the history every turn, log-probs
    within 1e-5; only the new tokens are prefilled."""
    ref = _echo_run(echo_model, batch_bucket=batch_bucket)
    got = _echo_run(echo_model, batch_bucket=batch_bucket, kv_reuse=True)
    assert sum(e.num_turns for e in ref.episodes) == 21  # the episodes really are multi-turn
    _assert_same_episodes(ref, got)
    assert got.stats["rollout/prompt_tokens"] == ref.stats["rollout/prompt_tokens"]
    # first turn: the prompts; later turns: the observations only
    obs = sum(len(ECHO_TOK.encode(o)) for e in got.episodes for o in e.observations[:e.num_turns - 1])
    prompts = sum(len(s.prefix_tokens) for s in _echo_starts())
    assert got.stats["rollout/prefill_tokens"] == prompts + obs
    assert ref.stats["rollout/prefill_tokens"] == ref.stats["rollout/prompt_tokens"] > prompts + obs
    # each episode's own counts: its prompt and observations prefilled once with the cache kept,
    # its whole history per action without; the stats are their sums
    for e, st in zip(got.episodes, _echo_starts()):
        n_obs = sum(len(ECHO_TOK.encode(o)) for o in e.observations[:e.num_turns - 1])
        assert e.prefill_tokens == len(st.prefix_tokens) + n_obs
        assert e.prompt_tokens == sum(e.turn_starts)
    for run in (ref, got):
        for k in ("prompt_tokens", "prefill_tokens"):
            assert sum(getattr(e, k) for e in run.episodes) == run.stats[f"rollout/{k}"]
    assert all(e.prefill_tokens == e.prompt_tokens for e in ref.episodes)


def test_kv_reuse_sampled_equals_reprefill_for_the_same_keys(echo_model):
    """Sampling (temperature 1) with fixed keys: the action of turn t of episode i uses
    fold_in(fold_in(key, i), t) in both modes, so the episodes are the same."""
    ref = _echo_run(echo_model, greedy=False)
    got = _echo_run(echo_model, greedy=False, kv_reuse=True)
    assert len({e.stop_reason for e in ref.episodes}) > 1 or len({e.num_turns for e in ref.episodes}) > 1
    _assert_same_episodes(ref, got)


def test_config_rollout_fields_reach_the_episode_engine():
    """rollout.batch_bucket / rollout.kv_reuse are given to the multi-turn engine that setup
    builds; on a single-turn kit they are refused, naming the field."""
    from configs import agent_grpo, base
    from rlvr.train.config import check_applicability, validate_config
    from rlvr.tasks.kit import build_kit
    from rlvr.train.setup import _Engines

    for field, value in (("kv_reuse", True), ("batch_bucket", 4)):
        c = base.get_config()
        assert not build_kit(c.task.names, c.task.weights, c.task.kwargs.to_dict()).multi_turn
        setattr(c.rollout, field, value)
        errors = check_applicability(c, multi_turn=False)
        assert any(e.startswith(f"config.rollout.{field} = {value} does not apply") for e in errors)
    c = agent_grpo.get_config()
    c.rollout.kv_reuse, c.rollout.batch_bucket = True, 3
    validate_config(c)
    kit = build_kit(c.task.names, c.task.weights, c.task.kwargs.to_dict())
    engine = _Engines(c, kit, _tok(), None, None)(None)
    assert (engine.kv_reuse, engine.batch_bucket) == (True, 3)
