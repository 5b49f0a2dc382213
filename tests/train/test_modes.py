"""The eval / export modes' pieces: the saved config read back, the eval files, and the refusal
of a workdir without a policy."""

import importlib
import json
import os
import pathlib

import pytest

from rlvr.train import modes
from rlvr.train.config import ConfigError, flatten
from rlvr.train.saved_config import load_saved_config

CONFIGS = sorted(p.stem for p in (pathlib.Path(__file__).resolve().parents[2] / "configs").glob("*.py")
                 if not p.stem.startswith("_"))


@pytest.mark.parametrize("name", CONFIGS)
def test_saved_config_reads_back_equal(tmp_path, name):
    """Every shipped config, saved as a run saves it, reads back field for field with the
    schema's types (tuples stay tuples, the free-form task.kwargs a mapping)."""
    c = importlib.import_module(f"rlvr.configs.{name}").get_config()
    path = tmp_path / "config.json"
    path.write_text(c.to_json_best_effort(indent=2))
    back = load_saved_config(str(path))
    a, b = flatten(c), flatten(back)
    assert set(a) == set(b)
    for k, v in a.items():
        got = b[k]
        if hasattr(v, "to_dict"):
            v, got = v.to_dict(), got.to_dict()
        assert got == v and type(got) is type(v), (k, v, got)


def test_saved_config_refuses_unknown_fields_and_bad_files(tmp_path):
    from rlvr.configs import base

    data = json.loads(base.get_config().to_json_best_effort())
    data["algorithm"]["clip_hihg"] = 0.3
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ConfigError, match="'algorithm.clip_hihg' is not a field"):
        load_saved_config(str(path))
    path.write_text("{not json")
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_saved_config(str(path))
    with pytest.raises(ConfigError, match="cannot read the saved config"):
        load_saved_config(str(tmp_path / "missing.json"))


def test_eval_files_hold_outputs_with_lone_surrogates(tmp_path):
    """eval_samples.jsonl takes any model output: a lone surrogate in the output or the
    verdict evidence is written and reads back unchanged."""
    rows = [{"task_id": "t0", "output": "x \ud800 y", "evidence": {"raw": "\udfff"},
             "decision": "fail"},
            {"task_id": "t1", "output": "été", "evidence": {}, "decision": "pass"}]
    modes.write_eval(str(tmp_path / "wd"), {"metrics": {"eval/success": 0.5}}, rows)
    back = [json.loads(x) for x in open(tmp_path / "wd" / "eval_samples.jsonl", encoding="utf-8")]
    assert back == rows
    assert json.load(open(tmp_path / "wd" / "eval.json"))["metrics"]["eval/success"] == 0.5


def test_eval_and_export_refuse_a_workdir_without_a_policy(tmp_path):
    from rlvr.configs import quickstart

    c = quickstart.get_config()
    wd = str(tmp_path / "typo")
    for mode in ("eval", "export"):
        with pytest.raises(ConfigError, match=f"--mode={mode}: no checkpoint found in {wd}"):
            modes.require_policy(c, wd, mode)
    os.makedirs(os.path.join(wd, "checkpoints", "4"))
    modes.require_policy(c, wd, "eval")  # a saved step: fine
    c.model.init_from = "/some/checkpoint"
    modes.require_policy(c, str(tmp_path / "empty"), "eval")  # init_from stands in


def test_init_from_stands_in_for_a_missing_checkpoint_and_says_so(tmp_path, capsys):
    from types import SimpleNamespace

    def run(init_from):
        return SimpleNamespace(workdir=str(tmp_path), is_main=True, init_params="start",
                               config=SimpleNamespace(model=SimpleNamespace(init_from=init_from)))

    params, origin = modes._loaded_policy(run("/models/tiny"), "eval")
    assert params == "start" and origin == {"init_from": "/models/tiny"}
    assert (f"no checkpoint in {tmp_path / 'checkpoints'}: using model.init_from=/models/tiny"
            in capsys.readouterr().err)
    with pytest.raises(ConfigError, match="no loadable checkpoint"):
        modes._loaded_policy(run(""), "export")
