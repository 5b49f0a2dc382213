"""Combination matrix: every algorithm x collector x {sync, async} x {single-turn, multi-turn kit}
x {full, LoRA} either trains one step on the tiny model (a finite policy loss is written) or is
refused at start by validate_config with an error that names config fields. The full matrix is
slow; a representative subset runs in the default suite."""

import itertools
import math

import pytest

from rlvr.train.config import ConfigError, validate_config
from rlvr.train.metrics import read_metrics
from tests.train.tiny import run_tiny, tiny_agent_config, tiny_config

ALGORITHMS = ("grpo", "rloo", "reinforce", "ppo", "pivotrl", "sao")
COLLECTORS = ("groups", "pivots")
KITS = ("single", "multi")

FAST = {("grpo", "groups", False, "single", False), ("grpo", "groups", True, "multi", True),
        ("pivotrl", "pivots", False, "multi", False), ("sao", "groups", True, "multi", False),
        ("ppo", "groups", False, "single", True)}


def _config(algo, collector, asynchronous, kit, lora):
    c = tiny_config() if kit == "single" else tiny_agent_config("agent_grpo")
    c.algorithm.name = algo
    c.rollout.collector = collector
    c.rollout.asynchronous = asynchronous
    c.model.lora.rank = 2 if lora else 0
    c.train.num_steps = 1
    c.eval.every = 0
    c.checkpoint.every = 1
    if collector == "pivots":  # an untrained tiny model rarely has mixed-outcome states to filter
        c.pivot.selection = "all"
    return c


def _matrix():
    for combo in itertools.product(ALGORITHMS, COLLECTORS, (False, True), KITS, (False, True)):
        marks = () if combo in FAST else (pytest.mark.slow,)
        yield pytest.param(*combo, marks=marks, id="-".join(map(str, combo)))


@pytest.mark.parametrize("algo,collector,asynchronous,kit,lora", list(_matrix()))
def test_combination_trains_one_step_or_is_refused_by_name(tmp_path, algo, collector, asynchronous,
                                                           kit, lora):
    c = _config(algo, collector, asynchronous, kit, lora)
    try:
        validate_config(c)
    except ConfigError as e:
        assert "config." in str(e), f"a refusal must name the fields: {e}"
        return
    run_tiny(c, tmp_path)
    rows = read_metrics(tmp_path)
    losses = [r[k] for r in rows for k in r if k.endswith("loss") and isinstance(r[k], float)]
    assert rows and rows[-1]["step"] >= 1
    assert losses and all(math.isfinite(v) for v in losses)
