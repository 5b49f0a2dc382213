"""Measuring the system model M (experiments/study/time_model.py): the estimates' arithmetic, the
exact conversion of the checkout testbed's tool latency, the measurements on a tiny model, and
the file it writes (read back by the time model and its calibration reader)."""

import dataclasses
import json
import os

import numpy as np
import pytest

from experiments.study import time_model as tm
from rlvr.envs.shop import latency_draw
from rlvr.train import clock


def test_estimates_reproduce_fake_timings_and_decode_grows_with_n():
    """With fake timings t(k) = a + k·s of a k-new-token sample (the 1-token sample runs one
    decode step), prefill · P + decode · N gives back t(N) exactly, and the modelled decode time
    decode · N grows with N."""
    a, s, p = 0.004, 5e-5, 40
    t = lambda k: a + k * s  # noqa: E731
    pre = tm.prefill_estimate(t(1), p)
    assert pre == pytest.approx(t(1) / p)
    decode_time = []
    for n in (2, 8, 61, 120):
        d = tm.decode_estimate(t(n), t(1), n)
        assert pre * p + d * n == pytest.approx(t(n), rel=1e-12)
        decode_time.append(d * n)
    assert np.all(np.diff(decode_time) > 0)
    with pytest.raises(ValueError, match="new_tokens"):
        tm.decode_estimate(t(1), t(1), 1)
    with pytest.raises(ValueError, match="prompt_tokens"):
        tm.prefill_estimate(t(1), 0)


def test_measured_parameter_is_the_median_and_refuses_a_non_positive_median():
    m = tm.Measured("decode_s_per_token", (3.0, -1.0, 2.0, 5.0, 4.0), "fake")
    assert m.median == 3.0 and m.spread()["min"] == -1.0 and m.spread()["repeats"] == 5
    with pytest.raises(ValueError, match="decode_s_per_token"):
        tm.Measured("decode_s_per_token", (-1.0, -2.0, 1.0), "fake")
    with pytest.raises(ValueError, match="env_setup_s"):
        tm.Measured("env_setup_s", (1.0, float("nan")), "fake")


@pytest.mark.parametrize("latency_s,alpha,cap", [(0.01, 1.5, 30.0), (0.2, 1.2, 5.0)])
def test_tool_latency_conversion_is_the_testbeds_law(latency_s, alpha, cap):
    """The time model's Pareto (median, tail index, cap) built by `tool_model` draws the law of
    the checkout environment's latency_s · latency_draw: same median, same cap, the same share
    of capped calls and the same quantiles (numpy, 20000 draws of each)."""
    f = tm.tool_model(latency_s, alpha, cap)
    assert f["tool_median_s"] == pytest.approx(latency_s * 2 ** (1 / alpha))
    assert f["tool_tail_index"] == alpha and f["tool_cap_s"] == pytest.approx(latency_s * cap)
    n = 20000
    shop = latency_s * np.array([latency_draw(7, i, "get a", alpha, cap) for i in range(n)])
    model = clock.TimeModel(prefill_s_per_token=0.0, decode_s_per_token=0.0,
                            learner_s_per_sample=0.0, env_setup_s=0.0, topology="colocated",
                            slots=1, **f)
    ours = np.array([clock.tool_latency(model, s, 1) for s in range(n)])
    capped = cap ** -alpha  # P(u^(-1/α) > cap)
    for draws in (shop, ours):
        assert np.median(draws) == pytest.approx(f["tool_median_s"], rel=0.03)
        assert draws.max() == pytest.approx(f["tool_cap_s"])
        assert np.mean(draws >= f["tool_cap_s"] * (1 - 1e-12)) == pytest.approx(capped, abs=0.006)
    q = (0.1, 0.25, 0.5, 0.75, 0.9)
    np.testing.assert_allclose(np.quantile(ours, q), np.quantile(shop, q), rtol=0.05)


def test_tool_latency_conversion_off_and_inexpressible():
    assert tm.tool_model(0.0, 1.5, 30.0) is None
    with pytest.raises(ValueError, match="exceeds the cap"):
        tm.tool_model(0.01, 0.5, 3.0)  # median multiplier 2^2 = 4 > cap 3


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """The quick scale's testbed (a 1-layer, 32-wide model) timed once, 2 repeats."""
    return tm.measure("quick", 2, episodes=8, setups=4,
                      workdir=str(tmp_path_factory.mktemp("time_model")), log=lambda *_: None)


def test_measure_on_a_tiny_model_gives_finite_positive_times(tiny):
    config, t = tiny
    assert t.prompt_tokens > 0 and t.generated_tokens > 1
    assert t.prompt_tokens + t.generated_tokens <= config.model.max_seq_len
    assert t.rows == config.sampling.prompts_per_step * config.algorithm.group_size
    for name in ("t_1", "t_n", "learner_step_s", "env_setup_s"):
        v = np.asarray(getattr(t, name))
        assert v.shape == (2,) and np.all(np.isfinite(v)) and np.all(v > 0), name


def test_written_file_loads_with_its_calibration(tiny, tmp_path):
    config, t = tiny
    # the tiny model's decode step is within timing noise: give the N-token sample a margin
    t = dataclasses.replace(t, t_n=tuple(x + 1e-3 for x in t.t_1))
    with open(tm.OUT) as f:
        base = json.load(f)
    obj, measured = tm.model_file(config, t, base, scale="quick", command="pytest")
    path = str(tmp_path / "m.json")
    tm.write_model_file(path, obj)
    model = clock.TimeModel.from_json(path)
    assert model.decode_s_per_token == pytest.approx(1e-3 / t.generated_tokens)
    assert model.learner_s_per_sample == pytest.approx(float(np.median(t.learner_step_s)) / t.rows)
    assert (model.topology, model.slots) == (base["topology"], base["slots"])
    lat = config.task.kwargs
    assert model.tool_cap_s == pytest.approx(lat.latency_s * lat.latency_cap)
    cal = clock.read_calibration(path)
    assert cal["scale"] == "quick" and cal["command"] == "pytest" and cal["jax"]
    assert set(cal["parameters"]) == {f.name for f in dataclasses.fields(clock.TimeModel)}
    assert cal["parameters"]["env_setup_s"]["median"] == model.env_setup_s
    assert "design choice" in cal["parameters"]["slots"]["method"]
    assert "| decode_s_per_token |" in tm.table(measured)


def test_an_interrupted_write_leaves_the_previous_model_file_whole(tmp_path):
    path = str(tmp_path / "system_model.json")
    tm.write_model_file(path, {"slots": 8})
    with pytest.raises(TypeError):  # fails half-way through json.dump
        tm.write_model_file(path, {"slots": 4, "calibration": {"bad": object()}})
    assert json.load(open(path)) == {"slots": 8}
    assert os.listdir(tmp_path) == ["system_model.json"]  # no temporary file left behind
