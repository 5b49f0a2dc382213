"""What a local block keeps beside its records (experiments/study/block_files.py): warm starts and
PivotRL selections that a sitting or a diagnostic on another machine reads back."""

import gzip
import json
import os
import shutil

import pytest

from experiments.study import block_files, runner, shop_local
from tests.experiments.blocks import warm_folder


def test_a_stored_warm_start_is_restored_into_a_cache_that_lacks_it_and_a_renamed_one_refused(tmp_path):
    spec = {"code": "v", "seed": 3}
    key = runner.content_key(spec)
    first = warm_folder(tmp_path / "cache1" / "warm" / key, spec)
    records = tmp_path / "records"
    stored = block_files.store_warm(str(records), first)
    assert stored == str(records / "warm" / key)
    assert sorted(os.listdir(stored)) == sorted(os.listdir(first))
    # another machine's cache: restored whole, byte for byte
    assert block_files.restore_warm_starts(str(records), str(tmp_path / "cache2")) == [key]
    for name in os.listdir(first):
        assert (tmp_path / "cache2" / "warm" / key / name).read_bytes() == (
            tmp_path / "cache1" / "warm" / key / name).read_bytes()
    assert block_files.restore_warm_starts(str(records), str(tmp_path / "cache2")) == []  # there now
    assert block_files.restore_warm_starts(str(tmp_path / "none"), str(tmp_path / "cache2")) == []
    # a folder whose spec does not hash to its name is neither stored nor restored
    shutil.copytree(stored, records / "warm" / "0123456789abcdef")
    with pytest.raises(ValueError, match="hashes to .* not to its folder name 0123456789abcdef"):
        block_files.restore_warm_starts(str(records), str(tmp_path / "cache3"))
    os.remove(tmp_path / "cache1" / "warm" / key / "model.safetensors")
    with pytest.raises(ValueError, match="not a whole warm start"):
        block_files.store_warm(str(tmp_path / "records2"), first)


def test_a_block_restores_a_warm_start_its_sibling_block_stored_and_keeps_no_second_copy(tmp_path):
    spec = {"code": "v", "seed": 1}
    key = runner.content_key(spec)
    first = warm_folder(tmp_path / "cache1" / "warm" / key, spec)
    declared, other_lr = tmp_path / "records" / "block", tmp_path / "records" / "block_lr1e-05"
    stored = block_files.store_warm(str(declared), first)
    assert block_files.stored_warm_starts(str(other_lr)) == {}  # a sibling is a block: block.json
    (declared / "block.json").write_text("{}")
    # the other block's sitting finds it beside its own records folder, and stores no copy
    assert block_files.stored_warm_starts(str(other_lr)) == {key: stored}
    assert block_files.store_warm(str(other_lr), first) == stored
    assert not os.path.exists(other_lr / "warm")
    assert block_files.restore_warm_starts(str(other_lr), str(tmp_path / "cache2")) == [key]
    assert (tmp_path / "cache2" / "warm" / key / "model.safetensors").read_bytes() == (
        tmp_path / "cache1" / "warm" / key / "model.safetensors").read_bytes()
    # the block's own copy comes first where both hold one
    shutil.copytree(stored, other_lr / "warm" / key)
    assert block_files.stored_warm_starts(str(other_lr)) == {key: str(other_lr / "warm" / key)}
    # a sibling's renamed folder is refused like the block's own
    shutil.copytree(stored, declared / "warm" / "0123456789abcdef")
    with pytest.raises(ValueError, match="not to its folder name 0123456789abcdef"):
        block_files.restore_warm_starts(str(other_lr), str(tmp_path / "cache3"))


def test_a_stored_selection_is_deterministic_bytes_and_read_where_the_work_folder_is_gone(tmp_path):
    data = {"selection": "probe", "stats": {"pivot/kept": 1.0},
            "candidates": [{"key": "t/demo/2/ab", "kept": True, "mean": 0.5}]}
    run = tmp_path / "work" / "k1"
    run.mkdir(parents=True)
    (run / "pivots.json").write_text(json.dumps(data))
    rec = {"key": "k1", "rows": [{"step": 0}]}
    records = str(tmp_path / "records")
    os.makedirs(records)
    assert block_files.store_selection(records, "pivotrl", "w0s1", str(tmp_path / "work" / "none")) is None
    path = block_files.store_selection(records, "pivotrl", "w0s1", str(run))
    assert path == os.path.join(records, "pivotrl.w0s1.pivots.json.gz")
    raw = open(path, "rb").read()
    block_files.write_selection(path, data)
    assert open(path, "rb").read() == raw  # writing it again changes nothing in git
    assert json.loads(gzip.decompress(raw)) == data
    # the work folder first, then the stored copy; found nowhere and nothing to rebuild: None
    assert block_files.selection(records, "pivotrl", "w0s1", rec, str(tmp_path / "work")) == data
    shutil.rmtree(run)
    assert block_files.selection(records, "pivotrl", "w0s1", rec, str(tmp_path / "work")) == data
    assert block_files.selection(records, "pivotrl", "w1s1", rec, str(tmp_path / "work")) is None


def test_stats_mismatch_names_each_statistic_that_differs_beyond_the_records_rounding():
    logged = {"pivot/candidates": 3478.0, "pivot/kept": 126.0, "pivot/mean_mu": 0.951265}
    assert block_files.stats_mismatch(logged, {"pivot/candidates": 3478, "pivot/kept": 126,
                                               "pivot/mean_mu": 0.95126549}) == []
    bad = block_files.stats_mismatch(logged, {"pivot/candidates": 3478, "pivot/kept": 125,
                                              "pivot/mean_mu": float("nan")})
    assert [b.split(":")[0] for b in bad] == ["pivot/kept", "pivot/mean_mu"]
    assert block_files.stats_mismatch({}, {"pivot/kept": 1}) == []  # nothing logged: nothing checked


def _quick_run(tmp_path, arm: str, warm: str):
    """A one-step quick-scale run of block arm `arm` from `warm`: (its config, its record)."""
    sc = shop_local.local_scale("quick", "local")
    c = shop_local.arm_config(arm, 0, sc, warm=warm, lr=1e-4)
    c.train.num_steps = 1
    rec = runner.run_config(c, workdir_root=str(tmp_path / "work"), cache=str(tmp_path / "cache"))
    return c, rec


def _lost_selection_is_recomputed(tmp_path, monkeypatch, arm: str, warm: str):
    c, rec = _quick_run(tmp_path, arm, warm)
    made = json.loads((tmp_path / "work" / rec["key"] / "pivots.json").read_text())
    shutil.rmtree(tmp_path / "work" / rec["key"])  # another machine: the work folder is gone
    records = tmp_path / "records"
    records.mkdir()
    got = block_files.selection(str(records), arm, "w0s0", rec, str(tmp_path / "work"),
                                rebuild=lambda: c, cache=str(tmp_path / "cache"))
    assert got == made
    assert block_files.read_selection(block_files.selection_path(str(records), arm, "w0s0")) == made
    assert not os.path.exists(tmp_path / "work" / f"selection_{rec['key']}")  # cleaned up
    # stored now: read back, not recomputed
    from rlvr.train import setup

    with monkeypatch.context() as m:
        m.setattr(setup, "build_run", lambda *a, **k: pytest.fail("recomputed"))
        assert block_files.selection(str(records), arm, "w0s0", rec, str(tmp_path / "work"),
                                     rebuild=lambda: c, cache=str(tmp_path / "cache")) == made
    # a record whose statistics the recomputation does not repeat, or whose key another config
    # gives, is refused, naming why
    first = next(r for r in rec["rows"] if r["step"] == 0)
    wrong = {**rec, "rows": [{**first, "pivot/candidates": first["pivot/candidates"] + 1}]}
    with pytest.raises(ValueError, match="pivot/candidates: logged"):
        block_files.recompute_selection(c, wrong, str(tmp_path / "cache"), str(tmp_path / "work"))
    with pytest.raises(ValueError, match="is not the record's"):
        block_files.recompute_selection(c, {**rec, "key": "other"}, str(tmp_path / "cache"),
                                        str(tmp_path / "work"))
    return c, rec


def test_a_lost_all_turns_selection_is_recomputed_as_the_run_made_it_and_checked(tmp_path, monkeypatch):
    warm = warm_folder(tmp_path / "cache" / "warm" / "w", {"code": "v"})
    c, rec = _lost_selection_is_recomputed(tmp_path, monkeypatch, "pivot_all_equal", warm)
    # a run that re-profiles keeps its last selection: it cannot be recomputed
    c.pivot.reprofile_every = 1
    with pytest.raises(ValueError, match="re-profiles"):
        block_files.recompute_selection(c, {**rec, "key": runner.run_key(
            runner.with_batch_bucket(c, 32), 32, str(tmp_path / "cache"))},
            str(tmp_path / "cache"), str(tmp_path / "work"))
    # no warm start to recompute it on: not found (None), not guessed
    shutil.rmtree(tmp_path / "cache" / "warm" / "w")
    assert block_files.selection(str(tmp_path / "records"), "pivot_all_equal", "w1s0", rec,
                                 str(tmp_path / "work"), rebuild=lambda: c,
                                 cache=str(tmp_path / "cache")) is None


@pytest.mark.slow
def test_a_lost_probed_selection_is_recomputed_as_the_run_made_it(tmp_path, monkeypatch):
    """PivotRL's probe (π_ref sampled at every candidate state) repeats on the same warm start
    and key: the recomputed selection equals the run's, μ̂ and σ̂² included."""
    from experiments.study import arms

    sc = shop_local.local_scale("quick", "local")
    warm = runner.warm_folder(arms.base_config("grpo", 0, sc), 0, str(tmp_path / "cache"))
    _lost_selection_is_recomputed(tmp_path, monkeypatch, "pivotrl", warm)
