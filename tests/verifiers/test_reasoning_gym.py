"""reasoning-gym adapter: tasks from generators, scorers as a Verifier."""

import pytest

from rlvr.tasks import reasoning_gym as rg_tasks
from rlvr.tasks.loader import load_jsonl, write_jsonl
from rlvr.records.task import TaskSpec
from rlvr.verifiers.reasoning_gym import ReasoningGymVerifier

GENERATORS = ["basic_arithmetic", "chain_sum", "leg_counting"]
V = ReasoningGymVerifier()


@pytest.mark.parametrize("gen", GENERATORS)
def test_oracle_passes_wrong_fails_and_round_trips(gen, tmp_path):
    tasks = rg_tasks.generate(gen, 8, seed=0)
    assert tasks == rg_tasks.generate(gen, 8, seed=0)
    assert len({t.task_id for t in tasks}) == 8
    for t in tasks:
        assert t.task_type == "text" and t.public_metadata["source"] == f"reasoning_gym:{gen}"
        assert t.reference_answer["answer"] not in ("", None)
        v = V.verify(t, rg_tasks.demonstration(t))
        assert v.passed and v.components == {"correct": 1.0, "partial": 1.0}
        assert V.verify(t, f"<think>hmm</think><answer>{rg_tasks.demonstration(t)}</answer>").passed
        wrong = V.verify(t, "<answer>definitely not it</answer>")
        assert wrong.decision == "fail" and wrong.components["correct"] == 0.0
    path = tmp_path / "rg.jsonl"
    write_jsonl(tasks, path)
    back = load_jsonl(path)
    assert back == tasks
    assert all(V.verify(t, rg_tasks.demonstration(t)).passed for t in back)


def test_splits_disjoint_and_config_knobs():
    sets = {s: {t.prompt for t in rg_tasks.generate("chain_sum", 30, split=s, seed=1,
                                                    min_terms=2, max_terms=2, max_digits=2)}
            for s in ("train", "eval", "unseen")}
    assert not (sets["train"] & sets["eval"] or sets["train"] & sets["unseen"]
                or sets["eval"] & sets["unseen"])
    for t in rg_tasks.generate("chain_sum", 10, seed=1, min_terms=2, max_terms=2):
        assert t.reference_answer["metadata"]["num_terms"] == 2
        assert t.reference_answer["config"] == {"min_terms": 2, "max_terms": 2}


def test_partial_credit_is_fail_with_partial_component():
    t = rg_tasks.generate("spell_backward", 1, seed=0)[0]
    oracle = rg_tasks.demonstration(t)
    assert len(oracle) > 3
    v = V.verify(t, oracle[:-1] + ("z" if oracle[-1] != "z" else "y"))  # last letter wrong
    assert v.decision == "fail" and v.components["correct"] == 0.0
    assert v.components["partial"] == pytest.approx((len(oracle) - 1) / len(oracle))
    # spell_backward's prefix-credit sum overshoots 1.0 by rounding for oracle + junk
    # (1.0000000000000002): a wrong answer, so fail with partial 1, never a pass
    junk = V.verify(t, oracle + "xx")
    assert junk.decision == "fail" and junk.components == {"correct": 0.0, "partial": 1.0}


def test_scorer_exception_is_unknown_not_env_error(monkeypatch):
    t = rg_tasks.generate("basic_arithmetic", 1, seed=0)[0]
    ver = ReasoningGymVerifier()
    ds = ver._dataset(t.reference_answer["generator"], t.reference_answer["config"])

    def boom(answer, entry):
        raise RuntimeError("scorer broke")

    monkeypatch.setattr(ds, "score_answer", boom)
    v = ver.verify(t, "1")
    assert v.decision == "unknown" and v.trial == "valid" and not v.is_env_error
    assert v.evidence["reason"] == "scorer_exception" and "scorer broke" in v.evidence["error"]
    for bad in (float("nan"), 1.5, -0.1, "1.0", None):
        monkeypatch.setattr(ds, "score_answer", lambda a, e, bad=bad: bad)
        assert ver.verify(t, "1").decision == "unknown", bad


def test_bad_inputs():
    with pytest.raises(ValueError, match="allowed"):
        rg_tasks.generate("no_such_generator", 1)
    bad = TaskSpec("x", "q", "text", reference_answer="42")
    assert V.verify(bad, "42").is_env_error
    cfg = TaskSpec("y", "q", "text", reference_answer={
        "generator": "chain_sum", "config": {"min_terms": 5, "max_terms": 2}, "answer": "1"})
    assert V.verify(cfg, "1").is_env_error  # reasoning-gym refuses the config
    t = rg_tasks.generate("chain_sum", 1, seed=0)[0]
    assert V.verify(t, "1" * 50_000).evidence["reason"] == "too_long"
