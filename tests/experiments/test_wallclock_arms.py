"""The study's wall-clock arms: GRPO-sync, GRPO-async, SAO and SAO-sync under the modelled clock
and the committed system model; each validates, resolves to its clock mode, turns the
environment's own latency off, and runs with every config field read or refused."""

import pytest

from experiments.study import arms
from rlvr.train import clock
from rlvr.train.config import ConfigReads, check_applicability, flatten, inapplicable, validate_config

MODES = tuple(arms.WALLCLOCK_ARMS)


def _config(mode, warm="/nonexistent/warm"):
    return arms.arm_config(arms.WALLCLOCK_ARMS[mode], 0, arms.scale("quick"), warm=warm, lr=1e-4)


@pytest.mark.parametrize("mode", MODES)
def test_wallclock_arm_validates_in_its_clock_mode(mode):
    c = _config(mode)
    validate_config(c)
    assert check_applicability(c, multi_turn=True) == []
    assert c.rollout.clock == "modelled" and c.rollout.time_model == arms.SYSTEM_MODEL
    assert clock.TimeModel.from_json(c.rollout.time_model)  # the committed system model reads
    assert c.task.kwargs.latency_s == 0.0  # no real sleeps: the model times the tools
    assert clock.clock_mode(c.algorithm.group_size, c.rollout.asynchronous) == mode
    method = arms.ARMS[arms.WALLCLOCK_ARMS[mode]].method
    assert c.algorithm.name == arms.base_config(method, 0, arms.scale("quick")).algorithm.name


def test_wallclock_arms_differ_from_their_method_only_in_clock_and_synchrony():
    sc = arms.scale("quick")
    for mode in MODES:
        arm = arms.ARMS[arms.WALLCLOCK_ARMS[mode]]
        main = flatten(arms.arm_config(arm.method, 0, sc, warm="/w", lr=1e-4))
        got = flatten(_config(mode, warm="/w"))
        kw, main_kw = got.pop("task.kwargs").to_dict(), main.pop("task.kwargs").to_dict()
        assert {k for k in kw if kw[k] != main_kw[k]} == {"latency_s"}
        changed = {k for k in got if got[k] != main.get(k)}
        allowed = {"rollout.clock", "rollout.time_model", "rollout.asynchronous"} | {f"rollout.{k}" for k in arms._ASYNC_FIELDS}
        assert changed and changed <= allowed, (mode, changed - allowed)


# Two real loop steps per arm (about 20 s each). The default suite covers the modelled clock's
# loop in both synchrony modes (tests/train/test_clock.py
# test_modelled_clock_reads_every_field_it_does_not_refuse) and each arm's config here
# (the validation test above).
@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
def test_wallclock_arm_reads_every_field(tmp_path, mode):
    from rlvr.tasks.kit import build_kit
    from rlvr.train import loop

    arm = arms.ARMS[arms.WALLCLOCK_ARMS[mode]]
    sc = arms.scale("quick")
    c = arm.change(arms.base_config(arm.method, 0, sc), sc)  # random init: no warm-start folder
    c = arms.schedule(c, budget=10**9, tokens_per_step=1, eval_points=1, lr=1e-4)
    c.train.num_steps, c.train.sft_steps, c.train.sft_batch_size, c.train.sft_pool = 2, 1, 4, 4
    c.eval.num_tasks, c.eval.every, c.checkpoint.every = 2, 1, 1
    c.sampling.prompts_per_step = 4 if c.algorithm.group_size > 1 else 8
    c.rollout.max_turns, c.sampling.max_new_tokens = 3, 6
    tracked = ConfigReads(c)
    loop.run(tracked, str(tmp_path))
    kit = build_kit(c.task.names, c.task.weights, c.task.kwargs.to_dict())
    na = inapplicable(c, multi_turn=kit.multi_turn)
    unread = sorted(set(flatten(c)) - tracked.reads - set(na))
    assert not unread, f"{mode}: fields neither read by the run nor refused: {unread}"
    assert not sorted(tracked.reads & set(na)), f"{mode}: refused fields read anyway"
    from rlvr.train.metrics import read_metrics

    rows = [r for r in read_metrics(str(tmp_path)) if "time/modelled_s" in r]
    assert [r["step"] for r in rows][-1] == 2 and rows[-1]["time/modelled_s"] > 0


def test_runner_starts_an_interrupted_streaming_modelled_run_over(tmp_path):
    """A streaming run under the modelled clock cannot resume after step 0: the runner deletes
    the interrupted attempt and starts over (counted in `restarts`); synchronous modes resume."""
    import json

    from experiments.study import runner

    sc = arms.scale("quick")
    cache, work = str(tmp_path / "cache"), str(tmp_path / "work")
    warm = runner.warm_folder(arms.base_config("grpo", 0, sc), 0, cache, log=lambda *a: None)
    config = arms.arm_config("sao_modelled", 0, sc, warm=warm, lr=1e-4)
    key = runner.run_key(runner.with_batch_bucket(config, 32), 32, cache)
    wd = tmp_path / "work" / key  # an interrupted attempt: checkpoints after step 0, rows to 3
    (wd / "checkpoints" / "3").mkdir(parents=True)
    (wd / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "interrupted": 1}) + "\n"
                                              for s in range(4)))
    assert runner.must_start_over(config, str(wd))
    sync = arms.arm_config("sao_sync", 0, sc, warm=warm, lr=1e-4)
    assert not runner.must_start_over(sync, str(wd))  # a synchronous mode resumes
    assert not runner.must_start_over(config, str(tmp_path / "empty"))
    rec = runner.run_config(config, workdir_root=work, cache=cache, log=lambda *a: None)
    assert rec["restarts"] == 1 and rec["result"]
    assert not any("interrupted" in r for r in rec["rows"]) and rec["rows"][0]["step"] == 0
    assert not (wd / "checkpoints" / "3").exists()
    assert rec["config"]["checkpoint.overwrite"] is False  # the record keeps the config as given
    assert any("time/modelled_s" in r for r in rec["rows"])


def test_run_key_follows_the_time_models_parameters_not_its_calibration(tmp_path):
    """A modelled-clock run's cache key changes with the numbers of the time model it names (a
    re-measured file must not reuse records of the old one), not with its calibration entry;
    a run on the real clock does not read the file."""
    import json

    from experiments.study import runner

    with open(arms.SYSTEM_MODEL) as f:
        m = json.load(f)
    path = tmp_path / "m.json"

    def key(model, clock_mode="modelled"):
        path.write_text(json.dumps(model))
        c = _config("grpo_sync")
        c.rollout.clock, c.rollout.time_model = clock_mode, str(path)
        return runner.run_key(c, 32)

    ref = key(m)
    assert key(dict(m, calibration={"date": "another day"})) == ref
    assert key(dict(m, learner_s_per_sample=m["learner_s_per_sample"] * 2)) != ref
    path.write_text("not json")
    c = _config("grpo_sync")
    c.rollout.clock, c.rollout.time_model = "real", str(path)
    runner.run_key(c, 32)  # the real clock's key does not open the file
