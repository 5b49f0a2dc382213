"""rollout.shared_prompt_cache: validated at start (refused with group_size 1, kv_reuse, a
non-groups collector, multi-turn kits; allowed with compact_finished), passed by the group
engine to the sampler; a run with it logs the rewards and lengths of the same run without it,
and with compaction the numbers of the compacted run without it."""

import math

import pytest

from rlvr.models import Transformer
from rlvr.rollout.sampler import DecodeSchedule
from rlvr.train.config import ConfigError, check_applicability, validate_config
from rlvr.train.metrics import read_metrics
from tests.rollout.test_compaction import gathered  # noqa: F401
from tests.train.tiny import run_tiny, tiny_agent_config, tiny_config


def _assert_same_samples(got, ref):
    """Per step: rewards and lengths equal, policy numbers within float rounding (the shared
    cache's log-probs are summed in another order)."""
    for step in sorted(ref):
        for k in sorted(ref[step]):
            if k.startswith(("reward/", "length/")):
                assert got[step][k] == ref[step][k], k
            elif k.startswith("policy/") and isinstance(ref[step][k], float):
                assert math.isclose(got[step][k], ref[step][k], rel_tol=1e-3, abs_tol=1e-4), k


def test_config_field_is_validated_naming_the_field():
    validate_config(tiny_config(rollout__shared_prompt_cache=True))
    bad = [
        (dict(algorithm__group_size=1, algorithm__name="reinforce"), "group_size >= 2"),
    ]
    for over, msg in bad:
        with pytest.raises(ConfigError, match=f"rollout.shared_prompt_cache=True.*{msg}"):
            validate_config(tiny_config(rollout__shared_prompt_cache=True, **over))
    agent = tiny_agent_config("agent_grpo", rollout__kv_reuse=True,
                              rollout__shared_prompt_cache=True)
    with pytest.raises(ConfigError, match="rollout.shared_prompt_cache=True.*kv_reuse"):
        validate_config(agent)
    errs = check_applicability(tiny_agent_config("agent_grpo", rollout__shared_prompt_cache=True),
                               multi_turn=True)
    assert any("rollout.shared_prompt_cache" in e for e in errs)
    with pytest.raises(ValueError, match="DecodeSchedule.shared_prefix"):
        DecodeSchedule(2, True, shared_prefix=1)


def _run(workdir, **over):
    c = tiny_config(**{**dict(train__num_steps=2, train__num_minibatches=1, train__sft_steps=0,
                              eval__every=0, eval__num_tasks=0, checkpoint__every=0,
                              sampling__prompts_per_step=4, sampling__max_new_tokens=8,
                              model__max_seq_len=24), **over})
    run_tiny(c, workdir)
    return {row["step"]: row for row in read_metrics(workdir)}


def test_run_with_shared_prompt_cache_logs_the_same_samples(tmp_path, monkeypatch):
    calls = []
    real = Transformer.forward_shared

    def spy(self, *a, **kw):
        calls.append(1)
        return real(self, *a, **kw)

    monkeypatch.setattr(Transformer, "forward_shared", spy)
    ref = _run(tmp_path / "repeated")
    assert not calls
    got = _run(tmp_path / "shared", rollout__shared_prompt_cache=True)
    assert calls  # the engine decoded against the shared prompt cache
    assert set(got) == set(ref) and {1, 2} <= set(ref)
    _assert_same_samples(got, ref)


def test_shared_prompt_cache_with_compaction_logs_the_compacted_run(tmp_path, gathered):  # noqa: F811
    """rollout.shared_prompt_cache + compact_finished (decode_segments=2) validates, and a
    one-step GRPO run (8 decode parts) with both logs the rewards and lengths of the run with compaction alone
    (policy numbers within float rounding: the shared cache's log-probs are rounded
    differently)."""
    over = dict(rollout__decode_segments=2, rollout__compact_finished=True)
    validate_config(tiny_config(rollout__shared_prompt_cache=True, **over))
    # 8 decode parts: the untrained policy's rows end at random steps, some within a part
    over.update(train__num_steps=1, sampling__max_new_tokens=16, rollout__decode_segments=8)
    ref = _run(tmp_path / "compact", **over)
    assert gathered  # finished rows were compacted out
    del gathered[:]
    got = _run(tmp_path / "shared", rollout__shared_prompt_cache=True, **over)
    assert gathered  # ... with the shared prompt cache too
    assert set(got) == set(ref) and 1 in ref
    _assert_same_samples(got, ref)
