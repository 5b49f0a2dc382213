"""Agent loop: one token stream, loss_mask on actions only, turn ids, stop reasons, restore."""

import jax
import numpy as np
import pytest

from rlvr.envs.kv_store import ALPHABET, KVStoreEnv
from rlvr.rollout.agent_loop import (EpisodeStart, restore_env, run_episodes,
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
