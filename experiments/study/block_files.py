"""What a local block keeps beside its run records, so that a sitting or a diagnostic on another
machine (a fresh clone, a new session) continues it without what only the first machine had.

    <records>/warm/<key>/                        a warm start its runs start from (the Hugging Face
                                                 folder and warm.json, as `<cache>/warm/<key>` holds it)
    <records>/<arm>.w<W>s<S>.pivots.json.gz      a PivotRL-family run's selection (its pivots.json)

Warm starts. A warm start that passes the block's check is stored (`store_warm`, a few MB at the
full scale) and restored into a cache that lacks it (`restore_warm_starts`) before a sitting
looks for it: a sitting on a new machine then starts its runs at once instead of training the
warm start again (1–2 CPU-hours each at the full scale). A stored folder is refused unless its
warm.json's spec hashes to its folder name (`runner.content_key`), the key the runs' configs name.
Since that name is the warm start's identity, a block also restores what its sibling blocks (the
other folders beside `<records>`) stored, and stores no second copy of it.

Selections. A PivotRL-family run writes the candidates it probed and the ones it kept to
`<workdir>/<key>/pivots.json` (the last selection of a run that re-profiles); a sitting stores it
with the run's record (`store_selection`). `selection` reads a run's selection from its work
folder, else from the stored copy, else recomputes it: the run's config is rebuilt from the
block's arm and seeds (refused unless it gives the record's run key), and the loop's start is
repeated on the stored warm start (π_ref's probe with the run's key, or the "all" selection),
checked against the selection statistics the record logged at step 0 (`pivot/candidates`,
`pivot/kept`, `pivot/mean_mu`, ...) and stored. Only a selection made at the start can be
recomputed; a re-profiling run's last one cannot.

Diagnostics' rows. A diagnostic whose policy folder is not on this machine reads that policy's
row back from its own previous numbers file (`previous_rows`) and marks it, rather than dropping
it: the file is the committed result of the same runs (their records, keyed by code version and
config, are the same).
"""

from __future__ import annotations

import gzip
import json
import math
import os
import shutil
from typing import Callable, Optional

SELECTION_SUFFIX = ".pivots.json.gz"
# the step-0 selection statistics a recomputed selection must repeat (relative tolerance: the
# record keeps 6 significant digits)
CHECKED_STATS = ("pivot/candidates", "pivot/kept", "pivot/mean_mu", "pivot/frac_all_fail",
                 "pivot/frac_all_pass")
STATS_RTOL = 1e-5
# a diagnostic's footnote to the rows it read back (`previous_rows`), marked †
READ_BACK_NOTE = ("† read back from this report's previous numbers file: what the row reads (a "
                  "policy's folder, a run's selection) is not on the machine that regenerated it "
                  "(the same policy or run: its key, which hashes code version and config, is the "
                  "one the file names).")


class WarmStartMissing(FileNotFoundError):
    """A run's warm start is not in the cache: its selection cannot be recomputed here."""


# ----------------------------------------------------------------------------- warm starts
def warm_store(records: str) -> str:
    """`<records>/warm`: the block's stored warm starts."""
    return os.path.join(records, "warm")


def _check_warm(folder: str) -> None:
    """Raises ValueError unless `folder` holds a whole warm start whose warm.json spec hashes to
    its folder name."""
    from experiments.study import runner

    key = os.path.basename(os.path.normpath(folder))
    path = os.path.join(folder, "warm.json")
    if not os.path.exists(path) or not os.path.exists(os.path.join(folder, "model.safetensors")):
        raise ValueError(f"{folder}: not a whole warm start (warm.json and model.safetensors)")
    with open(path) as f:
        spec = json.load(f).get("spec")
    if runner.content_key(spec) != key:
        raise ValueError(f"{folder}: its warm.json spec hashes to {runner.content_key(spec)}, "
                         f"not to its folder name {key}")


def _copy_folder(src: str, dst: str) -> None:
    """Copies folder `src` to `dst` whole or not at all (a temporary folder, then a rename);
    an existing `dst` is left as it is."""
    if os.path.exists(dst):
        return
    tmp = f"{dst}.tmp{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(src, tmp)
    try:
        os.replace(tmp, dst)
    except OSError:  # another process finished first
        shutil.rmtree(tmp, ignore_errors=True)


def stored_warm_starts(records: str) -> dict:
    """Every warm start a sitting of the block at `records` can restore, `{key: stored folder}`:
    the block's own (`<records>/warm`), then those its sibling blocks stored
    (`<records>/../<block>/warm`, where `<block>` holds a block.json). A stored folder is named
    by its warm start's spec hash, so one name is one warm start whichever block stored it: a
    block whose runs share another block's warm start (another learning rate on the same warm
    starts) keeps no copy of its own."""
    parent, own = os.path.split(os.path.normpath(records))
    stores = [warm_store(records)]
    if parent and os.path.isdir(parent):
        stores += [warm_store(os.path.join(parent, b)) for b in sorted(os.listdir(parent))
                   if b != own and os.path.exists(os.path.join(parent, b, "block.json"))]
    found = {}
    for store in stores:
        if not os.path.isdir(store):
            continue
        for key in sorted(os.listdir(store)):
            src = os.path.join(store, key)
            if os.path.isdir(src) and ".tmp" not in key:
                found.setdefault(key, src)
    return found


def store_warm(records: str, folder: str) -> str:
    """Stores the warm start in cache folder `folder` as `<records>/warm/<key>/` (once), unless
    the block or a sibling block stores it already (`stored_warm_starts`). Returns the stored
    folder."""
    _check_warm(folder)
    key = os.path.basename(os.path.normpath(folder))
    there = stored_warm_starts(records).get(key)
    if there is not None:
        _check_warm(there)
        return there
    dst = os.path.join(warm_store(records), key)
    os.makedirs(warm_store(records), exist_ok=True)
    _copy_folder(folder, dst)
    return dst


def restore_warm_starts(records: str, cache: str) -> list:
    """Copies each warm start the block at `records` can restore (`stored_warm_starts`) into
    `<cache>/warm/` where the cache lacks it. Returns the keys restored. A stored folder whose
    spec does not hash to its name is refused (ValueError naming it)."""
    restored = []
    for key, src in stored_warm_starts(records).items():
        dst = os.path.join(cache, "warm", key)
        if os.path.exists(os.path.join(dst, "warm.json")):
            continue
        _check_warm(src)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        _copy_folder(src, dst)
        restored.append(key)
    return restored


# ----------------------------------------------------------------------------- selections
def selection_path(records: str, arm: str, label: str) -> str:
    """`<records>/<arm>.<label>.pivots.json.gz`: the stored selection of run `arm` `label`."""
    return os.path.join(records, f"{arm}.{label}{SELECTION_SUFFIX}")


def write_selection(path: str, data: dict) -> None:
    """Writes a selection (a pivots.json's dict) gzip-compressed, byte-for-byte a function of it
    (sorted keys, no time stamp), whole or not at all."""
    raw = json.dumps(data, sort_keys=True, separators=(",", ":"), default=float).encode()
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "wb") as f:
        with gzip.GzipFile(fileobj=f, mode="wb", mtime=0) as gz:
            gz.write(raw)
    os.replace(tmp, path)


def read_selection(path: str) -> dict:
    with gzip.open(path, "rt") as f:
        return json.load(f)


def store_selection(records: str, arm: str, label: str, run_workdir: str) -> Optional[str]:
    """Stores `<run_workdir>/pivots.json` with the run's record; None when the run wrote none."""
    src = os.path.join(run_workdir, "pivots.json")
    if not os.path.exists(src):
        return None
    with open(src) as f:
        data = json.load(f)
    path = selection_path(records, arm, label)
    write_selection(path, data)
    return path


def stats_mismatch(logged: dict, stats: dict) -> list:
    """The `CHECKED_STATS` on which a selection's statistics `stats` differ from the ones a
    record `logged` at step 0 (a statistic the record lacks is not checked)."""
    bad = []
    for k in CHECKED_STATS:
        if k not in logged:
            continue
        a, b = float(logged[k]), float(stats.get(k, float("nan")))
        if not (math.isfinite(b) and math.isclose(a, b, rel_tol=STATS_RTOL, abs_tol=1e-9)):
            bad.append(f"{k}: logged {a}, recomputed {b}")
    return bad


def recompute_selection(config, record: dict, cache: str, workdir: str) -> dict:
    """The selection a PivotRL-family run made at its start, made again: the loop's start (its
    warm start as π_ref, the run's probe key) on a run built from `config` (the run's own config,
    which must give the record's run key), checked against the record's step-0 statistics.
    Raises ValueError when the config is not the record's, when the run re-profiles, or when the
    statistics differ; WarmStartMissing when its warm start is not in the cache."""
    from experiments.study import runner
    from rlvr.train.config import validate_config
    from rlvr.train.setup import build_run

    c = runner.with_batch_bucket(config, 32)
    if not os.path.exists(os.path.join(c.model.init_from, "model.safetensors")):
        raise WarmStartMissing(f"run {record.get('key')}'s warm start {c.model.init_from} is not "
                                f"in the cache")
    key = runner.run_key(c, 32, cache)
    if key != record.get("key"):
        raise ValueError(f"the rebuilt config's run key {key} is not the record's {record.get('key')}: "
                         f"the record was run with another config")
    if c.pivot.get("reprofile_every", 0):
        raise ValueError(f"run {key} re-profiles every {c.pivot.reprofile_every} steps: its last "
                         f"selection is not the start's and cannot be recomputed")
    c.checkpoint.export = False
    validate_config(c)
    wd = os.path.join(workdir, f"selection_{key}")
    shutil.rmtree(wd, ignore_errors=True)
    os.makedirs(wd)
    r = build_run(c, wd)
    try:
        state = r.init_state(r.init_params)
        r.collector.prepare(r.reference_params(state))
        with open(os.path.join(wd, "pivots.json")) as f:
            data = json.load(f)
    finally:
        r.close()
        shutil.rmtree(wd, ignore_errors=True)
    first = next((row for row in record.get("rows", []) if int(row.get("step", -1)) == 0), {})
    bad = stats_mismatch(first, data.get("stats", {}))
    if bad:
        raise ValueError(f"run {key}: the recomputed selection differs from the one its record "
                         f"logged ({'; '.join(bad)})")
    return data


def selection(records: str, arm: str, label: str, record: dict, workdir: str,
              rebuild: Optional[Callable[[], object]] = None, cache: str = "") -> Optional[dict]:
    """The selection (a pivots.json's dict) of run `arm` `label` whose record is `record`: its
    work folder's `<workdir>/<key>/pivots.json`, else the copy stored in `records`, else, with
    `rebuild` (returning the run's config) and `cache`, recomputed (`recompute_selection`) and
    stored. None when none of these has it (no rebuild given, or its warm start is not in the
    cache)."""
    path = os.path.join(workdir, record["key"], "pivots.json")
    if os.path.exists(path):
        with open(path) as f:
            return json.load(f)
    stored = selection_path(records, arm, label)
    if os.path.exists(stored):
        return read_selection(stored)
    if rebuild is None:
        return None
    try:
        data = recompute_selection(rebuild(), record, cache, workdir)
    except WarmStartMissing:
        return None
    write_selection(stored, data)
    return data


# ----------------------------------------------------------------------------- diagnostics' rows
def folder_key(folder: str) -> str:
    """A policy folder's cache key, which a diagnostic's row is filed under: the warm start's
    (`<cache>/warm/<key>`), or the run's for `<workdir>/<key>/export`."""
    head, tail = os.path.split(os.path.normpath(folder))
    return os.path.basename(head) if tail == "export" else tail


def previous_rows(out: str, name: str, by: tuple, having: str) -> dict:
    """The rows of `<out>/<name>.json`, the numbers a diagnostic wrote last, that carry a value
    under `having`, indexed by the tuple of their `by` fields ({} when there is no such file or
    it is not a list of rows)."""
    path = os.path.join(out, f"{name}.json")
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        rows = json.load(f)
    if not isinstance(rows, list):
        return {}
    return {tuple(r[k] for k in by): r for r in rows if r.get(having) is not None}
