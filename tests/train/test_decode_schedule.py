"""The decode schedule as configuration (`rollout.decode_segments`, `rollout.compact_finished`):
validated at start, refused where it cannot apply, passed by the engines to the sampler; a run
with finished rows compacted out logs the numbers of the same run without compaction."""

import pytest

from rlvr.rollout.sampler import DecodeSchedule
from rlvr.train.config import ConfigError, validate_config
from rlvr.train.metrics import read_metrics
from tests.rollout.test_agent_loop import _assert_same_episodes, _echo_run, echo_model  # noqa: F401
from tests.rollout.test_compaction import gathered  # noqa: F401
from tests.train.tiny import run_tiny, tiny_agent_config, tiny_config


def test_config_fields_are_validated_naming_the_field():
    c = tiny_config(rollout__compact_finished=True)
    with pytest.raises(ConfigError, match="rollout.compact_finished=True needs rollout.decode_segments"):
        validate_config(c)
    with pytest.raises(ConfigError, match="rollout.decode_segments must be >= 1"):
        validate_config(tiny_config(rollout__decode_segments=0))
    validate_config(tiny_config(rollout__decode_segments=4, rollout__compact_finished=True))
    agent = tiny_agent_config("agent_grpo", rollout__kv_reuse=True, rollout__decode_segments=2)
    with pytest.raises(ConfigError, match="rollout.decode_segments=2 .*rollout.kv_reuse=True"):
        validate_config(agent)


def test_decode_schedule_values():
    assert DecodeSchedule().is_default
    assert DecodeSchedule(4, True).sample_kwargs() == dict(decode_segments=4, compact_finished=True)
    for bad in (dict(segments=0), dict(segments=1, compact_finished=True),
                dict(segments=2, compact_finished=1)):
        with pytest.raises(ValueError, match="DecodeSchedule"):
            DecodeSchedule(**bad)


def test_multi_turn_episodes_pass_the_schedule_and_compaction_keeps_them(
        gathered, echo_model):  # noqa: F811
    """run_episodes (re-prefill turns) with compaction: bitwise the episodes of the same
    segments without it; with kv_reuse a non-default schedule is refused."""
    model, sizes = echo_model, gathered
    ref = _echo_run(model, greedy=False, decode=DecodeSchedule(3))
    got = _echo_run(model, greedy=False, decode=DecodeSchedule(3, compact_finished=True))
    assert sizes  # rows were compacted out in some turn
    _assert_same_episodes(ref, got, lp_atol=0)
    with pytest.raises(ValueError, match="kv_reuse"):
        _echo_run(model, decode=DecodeSchedule(3), kv_reuse=True)


def _run(workdir, **over):
    c = tiny_config(train__num_steps=2, train__num_minibatches=1, train__sft_steps=0,
                    eval__every=0, eval__num_tasks=0, checkpoint__every=0, **over)
    run_tiny(c, workdir)
    return {row["step"]: row for row in read_metrics(workdir)}


def test_compacted_run_logs_the_numbers_of_the_uncompacted_run(tmp_path, gathered):  # noqa: F811
    sizes = gathered
    # 16 rows of up to 16 tokens (the untrained policy stops at random steps), 8 decode parts
    over = dict(sampling__prompts_per_step=4, sampling__max_new_tokens=16, model__max_seq_len=24,
                rollout__decode_segments=8)
    ref = _run(tmp_path / "segments", **over)
    assert not sizes
    got = _run(tmp_path / "compact", rollout__compact_finished=True, **over)
    assert sizes  # the engine compacted finished rows out
    assert set(got) == set(ref) and {1, 2} <= set(ref)
    for step in sorted(ref):
        keys = {k for k in ref[step] if k != "time" and not k.startswith(("time/", "throughput/"))}
        assert step == 0 or {"reward/mean", "policy/pg_loss", "length/mean"} <= keys
        for k in sorted(keys):
            assert got[step][k] == ref[step][k], k
