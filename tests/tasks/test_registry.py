"""Task sources by name and weighted mixtures (docs/architecture.md (B.1), docs/algorithms.md (A.20))."""

import collections

import pytest

from rlvr.tasks import shipped
from rlvr.tasks.registry import (
    JsonlSource, MixtureSource, ProceduralSource, ReasoningGymSource, RoutingVerifier, TaskSource,
    get_task_source)
from rlvr.records.task import TaskSpec


def test_names_map_to_sources():
    assert isinstance(get_task_source("arithmetic", difficulty="hard"), ProceduralSource)
    assert isinstance(get_task_source("countdown"), ProceduralSource)
    rg = get_task_source("reasoning_gym:chain_sum", min_terms=2, max_terms=3)
    assert isinstance(rg, ReasoningGymSource) and rg.config == {"min_terms": 2, "max_terms": 3}
    js = get_task_source("jsonl:" + shipped.path("examples.jsonl"))
    assert isinstance(js, JsonlSource)
    for s in (rg, js, get_task_source("arithmetic")):
        assert isinstance(s, TaskSource)


@pytest.mark.parametrize("name", ["nope", "jsonl:", "reasoning_gym:", "Arithmetic"])
def test_unknown_names_list_the_allowed_ones(name):
    with pytest.raises(ValueError, match="arithmetic, countdown, reasoning_gym:<generator>, jsonl:<path>"):
        get_task_source(name)


def test_unknown_generator_and_bad_difficulty():
    with pytest.raises(ValueError, match="chain_sum"):  # the allowed list is given
        get_task_source("reasoning_gym:chain_summ")
    with pytest.raises(ValueError, match="difficulty"):
        get_task_source("arithmetic", difficulty="ultra")


@pytest.mark.parametrize("name", ["arithmetic", "countdown"])
def test_procedural_source_contract(name):
    src = get_task_source(name, difficulty="medium")
    batch = src.sample(16, seed=3)
    assert batch == src.sample(16, seed=3) and batch != src.sample(16, seed=4)
    assert all(t.public_metadata["split"] == "train" for t in batch)
    ev, un = src.eval_set("eval", 20), src.eval_set("unseen", 20)
    assert ev == src.eval_set("eval", 20)  # fixed
    assert not {t.task_id for t in ev} & {t.task_id for t in un}
    assert not {t.task_id for t in ev + un} & {t.task_id for s in range(5) for t in src.sample(50, s)}
    for t in batch + ev:
        assert src.verifier.verify(t, src.demonstration(t)).passed
        assert set(t.prompt + src.demonstration(t)) <= set(src.alphabet)


def test_default_eval_set_takes_what_a_small_split_has():
    small = get_task_source("arithmetic", difficulty="easy").eval_set("eval")
    # independent count: the easy space is all a op b with 1-digit a, b and op in +-*
    from rlvr.tasks.splits import split_of
    expect = {f"{a}{op}{b}=" for a in range(10) for b in range(10) for op in "+-*"
              if split_of(f"{a}{op}{b}=") == "eval"}
    assert {t.prompt for t in small} == expect
    assert len(get_task_source("arithmetic", difficulty="hard").eval_set("eval")) == 100
    with pytest.raises(ValueError, match="too few distinct"):
        get_task_source("arithmetic", difficulty="easy").eval_set("eval", 50)


def test_mixture_weights_routing_and_alphabet():
    easy = get_task_source("arithmetic", difficulty="easy")
    cd = get_task_source("countdown", difficulty="easy")
    mix = MixtureSource([(easy, 3), (cd, 1)])
    tasks = [t for seed in range(10) for t in mix.sample(100, seed)]
    frac = collections.Counter(t.public_metadata["source"] for t in tasks)["arithmetic"] / len(tasks)
    assert abs(frac - 0.75) < 0.05
    assert mix.sample(40, 1) == mix.sample(40, 1)
    for t in tasks[:200]:
        assert mix.verifier.verify(t, mix.demonstration(t)).passed
    # an arithmetic answer checked by the router goes to the integer verifier, not countdown's
    a = next(t for t in tasks if t.public_metadata["source"] == "arithmetic")
    assert mix.verifier.verify(a, mix.demonstration(a)).verifier_version == easy.verifier.version
    assert set(mix.alphabet) == set(easy.alphabet) | set(cd.alphabet)
    ev = mix.eval_set("eval", 21)
    assert len(ev) == 21
    assert collections.Counter(t.public_metadata["source"] for t in ev) == {"arithmetic": 16, "countdown": 5}
    with pytest.raises(ValueError, match="weights"):
        MixtureSource([(easy, 0)])


def test_mixture_with_reasoning_gym_has_no_alphabet():
    mix = MixtureSource([(get_task_source("arithmetic"), 1), (get_task_source("reasoning_gym:chain_sum"), 1)])
    assert mix.alphabet is None
    for t in mix.sample(10, 0):
        assert mix.verifier.verify(t, mix.demonstration(t)).passed


def test_jsonl_source_splits_and_verifier(tmp_path):
    src = get_task_source("jsonl:" + shipped.path("examples.jsonl"))
    batch = src.sample(10, seed=0)  # more than the train pool: cycles through permutations
    assert len(batch) == 10 and all(t.public_metadata.get("split", "train") == "train" for t in batch)
    assert batch == src.sample(10, seed=0)
    for t in batch:
        assert src.verifier.verify(t, src.demonstration(t)).passed
    assert all(t.public_metadata["split"] == "eval" for t in src.eval_set("eval"))
    with pytest.raises(ValueError, match="splits present"):
        src.eval_set("unseen")
    shipped_eval = get_task_source("jsonl:" + shipped.path("countdown_easy_eval.jsonl"))
    assert len(shipped_eval.eval_set("eval")) == 20


def test_routing_verifier_rejects_unroutable_tasks():
    t = TaskSpec("x", "p", "text", reference_answer="a", public_metadata={"source": "mystery"})
    with pytest.raises(ValueError, match="mystery"):
        RoutingVerifier({}).verify(t, "a")
    with pytest.raises(ValueError, match="mystery"):
        RoutingVerifier.for_tasks([t]).verify(t, "a")


def test_routing_version_names_every_route():
    mix = MixtureSource([(get_task_source("arithmetic"), 1), (get_task_source("countdown"), 1)])
    assert mix.verifier.version == "routing/1(arithmetic=integer_answer/1;countdown=countdown/1)"


def test_routing_math_tasks_use_math_verifier():
    pytest.importorskip("rlvr.verifiers.math")
    src = get_task_source("jsonl:" + shipped.path("examples.jsonl"))
    t = next(t for t in src.eval_set("eval") if t.task_id == "ex-math-1")
    assert "type:math=" in src.verifier.version
    assert src.verifier.verify(t, r"so the answer is \boxed{0.75}").passed
    assert not src.verifier.verify(t, r"\boxed{2/3}").passed


def test_default_verifier_per_task_type():
    from rlvr.verifiers.code import CodeVerifier
    from rlvr.verifiers.math import MathVerifier
    from rlvr.verifiers.routing import default_verifier_for_task_type
    from rlvr.verifiers.structured import StructuredVerifier

    assert type(default_verifier_for_task_type("code")) is CodeVerifier
    assert type(default_verifier_for_task_type("math")) is MathVerifier
    assert type(default_verifier_for_task_type("structured")) is StructuredVerifier
    for no_default in ("agent", "text", "poem"):
        with pytest.raises(ValueError, match="code, math, structured"):
            default_verifier_for_task_type(no_default)


def test_jsonl_code_tasks_get_the_code_verifier(tmp_path):
    import json

    ref = {"entry_point": "add", "public_tests": [{"args": [1, 2], "expected": 3}],
           "hidden_tests": [{"args": [5, 5], "expected": 10}]}
    records = [{"task_id": "add", "prompt": "write add(a, b)", "task_type": "code",
                "reference_answer": ref},
               {"task_id": "cfg", "prompt": "emit {\"a\": 1}", "task_type": "structured",
                "reference_answer": {"expected": {"a": 1}}, "public_metadata": {"source": "mine"}}]
    path = tmp_path / "code.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    src = get_task_source(f"jsonl:{path}")
    assert "type:code=code-4" in src.verifier.version
    tasks = {t.task_id: t for t in src.tasks}
    add, cfg = tasks["add"], tasks["cfg"]
    good = src.verifier.verify(add, "def add(a, b):\n    return a + b\n")
    bad = src.verifier.verify(add, "def add(a, b):\n    return a - b\n")
    assert (good.trial, good.decision) == ("valid", "pass"), good.evidence
    assert (bad.trial, bad.decision) == ("valid", "fail"), bad.evidence
    assert src.verifier.verify(cfg, '{"a": 1}').decision == "pass"  # unknown source → by type
