"""One run per workdir: the workdir lock, the launch history of configs, and the resume checks.

**Lock.** A training run holds an exclusive `fcntl.flock` on `<workdir>/.lock` for its whole
life; the file says who holds it (pid, host, start time, command line). A second launch in the
same workdir fails at once with `WorkdirBusy` naming the holder. The OS releases a flock when
its process ends however it ends (crash, SIGKILL, power loss of the host), so a lock file left
by a dead process never blocks: the next launch takes it over. Multi-host runs: process 0 takes
the lock (the workdir is shared). flock on network file systems depends on the file system
(NFSv4 and most cluster file systems honour it; a file system that does not makes the lock
advisory only).

**Launch history.** Each launch of a run writes its config as `config.<n>.json` (n = 1, 2, …
the launch number in this workdir) and `config.json` (the latest, for tools that read one
file). Nothing is written before the checks below passed.

**What a resume may change.** A checkpoint keeps the config it was trained with. A resume
compares the new config with it: fields that alter the run (seed, model, tokenizer, task,
algorithm, rollout, sampling, optimiser, KL, reward, most of train and eval) must be equal,
unless named in `checkpoint.allow_changes` (a field or a whole section, e.g.
`("optimizer.learning_rate",)` or `("optimizer",)`). `RUN_NEUTRAL` lists the fields that never
alter the run and may change freely (total steps and token budget, logging, evaluation
frequency, checkpoint cadence, progress bar, verification executor, mesh, remat). With a
cosine learning-rate schedule `train.num_steps` sets the decay, so it alters the run there.

**Used workdirs.** A workdir that holds checkpoints or metrics of an earlier run is "used": a
launch that would not resume from it (`checkpoint.resume=False`, checkpoints off, or no
checkpoint to resume from) is refused unless `checkpoint.overwrite=True`, which then deletes the
earlier run's checkpoints, metrics, samples and results before starting.
"""

from __future__ import annotations

import datetime
import errno
import fcntl
import glob
import json
import os
import re
import shutil
import socket
import sys
import threading
from typing import Any, Optional

from rlvr.train.config import ConfigError
from rlvr.train.saved_config import saved_config_path

LOCK_FILE = ".lock"

# fields that never change what the run computes (module docstring); a name ending in "."
# covers a whole section
RUN_NEUTRAL = (
    "train.num_steps", "train.token_budget", "train.progress", "train.num_microbatches",
    "logging.", "eval.every", "eval.dense_steps", "eval.dense_every", "checkpoint.", "reward.executor", "reward.num_workers",
    "reward.cache", "mesh.", "model.remat",
)


class WorkdirBusy(ConfigError):
    """Another live process holds the workdir's lock (the message names it). A user error, so
    the command line reports it like an invalid config: one message, exit status 2."""


class WorkdirError(ConfigError):
    """The launch would mix with or delete another run (the message names the fields or the
    flag); reported like an invalid config."""


def _is_neutral(field: str) -> bool:
    return any(field == n or (n.endswith(".") and field.startswith(n)) for n in RUN_NEUTRAL)


# ------------------------------------------------------------------------------ the lock
_HELD: dict[str, list] = {}  # realpath of the lock file -> [fd, count] (re-entrant in a process)
_HELD_GUARD = threading.Lock()


def _holder_text(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            info = json.loads(f.read() or "{}")
    except (OSError, ValueError):
        info = {}
    if not info:
        return "a process that has not written its name yet"
    return (f"pid {info.get('pid', '?')} on host {info.get('host', '?')} since "
            f"{info.get('since', '?')} ({info.get('command', '?')})")


class WorkdirLock:
    """Exclusive lock of a workdir (module docstring). `with WorkdirLock(workdir): ...`, or
    `acquire()` / `release()`. Re-entrant within one process."""

    def __init__(self, workdir: str):
        self.workdir = os.path.abspath(workdir)
        self.path = os.path.join(self.workdir, LOCK_FILE)
        self._key: Optional[str] = None

    def acquire(self) -> "WorkdirLock":
        if self._key is not None:
            return self
        os.makedirs(self.workdir, exist_ok=True)
        key = os.path.realpath(self.path)
        with _HELD_GUARD:
            if key in _HELD:
                _HELD[key][1] += 1
                self._key = key
                return self
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as e:
                os.close(fd)
                if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise WorkdirBusy(
                        f"workdir {self.workdir} is in use by another run: "
                        f"{_holder_text(self.path)} holds {self.path}. Wait for that run to end "
                        f"or stop it, or launch this one with another --workdir") from None
                raise
            info = {"pid": os.getpid(), "host": socket.gethostname(),
                    "since": datetime.datetime.now(datetime.timezone.utc).isoformat(
                        timespec="seconds"),
                    "command": " ".join(sys.argv)}
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(info).encode(), 0)
            os.fsync(fd)
            _HELD[key] = [fd, 1]
            self._key = key
        return self

    def release(self) -> None:
        if self._key is None:
            return
        with _HELD_GUARD:
            entry = _HELD[self._key]
            entry[1] -= 1
            if entry[1] == 0:
                fd = entry[0]
                try:
                    os.ftruncate(fd, 0)  # not held: the file names nobody
                finally:
                    fcntl.flock(fd, fcntl.LOCK_UN)
                    os.close(fd)
                del _HELD[self._key]
        self._key = None

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc):
        self.release()


# ------------------------------------------------------------------------------ configs
def config_dict(config) -> dict[str, Any]:
    """{dotted field: JSON value} of a config (ConfigDict, or the `ConfigReads` view of one, whose
    reads this does not record); dtypes by name, tuples as lists."""
    from rlvr.models.config import dtype_name
    from rlvr.train.config import DTYPE_FIELDS, _raw

    raw = _raw(config)
    nested = json.loads(raw.to_json_best_effort())
    out: dict[str, Any] = {}

    def walk(d, prefix):
        for k, v in d.items():
            if isinstance(v, dict):
                walk(v, f"{prefix}{k}.")
            else:
                out[prefix + k] = v

    walk(nested, "")
    for key in DTYPE_FIELDS:
        if key in out:
            section, name = key.split(".")
            try:
                out[key] = dtype_name(raw[section][name], f"config.{key}")
            except (ValueError, TypeError):
                pass
    return out


def changed_fields(old: dict, new: dict, allow=()) -> list[tuple[str, Any, Any]]:
    """[(field, old value, new value)] of the fields that alter the run and differ between the
    config a checkpoint was trained with (`old`, from `config_dict`) and the new one. Fields
    only one side has (a field added or removed by a code change) are not compared; `allow`
    names fields or sections (`"optimizer"`) whose change the user accepts."""
    allow = tuple(allow)
    cosine = new.get("optimizer.schedule") == "cosine" or old.get("optimizer.schedule") == "cosine"
    out = []
    for key in sorted(set(old) & set(new)):
        if old[key] == new[key]:
            continue
        if _is_neutral(key) and not (key == "train.num_steps" and cosine):
            continue
        if any(key == a or key.startswith(a + ".") for a in allow):
            continue
        out.append((key, old[key], new[key]))
    return out


def refuse_changes(workdir: str, step: int, changes) -> None:
    """Raises WorkdirError naming each changed field with its old and new value."""
    if not changes:
        return
    lines = "\n  ".join(f"{k}: {o!r} -> {n!r}" for k, o, n in changes)
    names = ", ".join(repr(k) for k, _, _ in changes)
    raise WorkdirError(
        f"workdir {workdir} holds a run checkpointed at step {step} with another config; these "
        f"fields alter the run and differ from it:\n  {lines}\nResume with the run's values; or "
        f"accept the change with --config.checkpoint.allow_changes=\"({names},)\"; or start a "
        f"new run in another --workdir (or here with --config.checkpoint.resume=False "
        f"--config.checkpoint.overwrite=True, which deletes this run)")


def launch_number(workdir: str) -> int:
    """The number of the next launch in `workdir` (1 for the first)."""
    nums = [int(m.group(1)) for p in glob.glob(os.path.join(workdir, "config.*.json"))
            if (m := re.fullmatch(r"config\.(\d+)\.json", os.path.basename(p)))]
    return max(nums, default=0) + 1


def write_launch_config(workdir: str, config) -> str:
    """Writes `config.<n>.json` (this launch) and `config.json` (the latest); returns the former.
    A `config.json` from before numbered launches is kept as `config.0.json`."""
    n = launch_number(workdir)
    legacy = saved_config_path(workdir)
    if n == 1 and os.path.exists(legacy):
        shutil.copyfile(legacy, os.path.join(workdir, "config.0.json"))
    from rlvr.train.config import _raw

    text = _raw(config).to_json_best_effort(indent=2)
    path = os.path.join(workdir, f"config.{n}.json")
    for p in (path, legacy):
        tmp = f"{p}.tmp{os.getpid()}"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, p)
    return path


def last_launch_config(workdir: str) -> Optional[dict]:
    """`config_dict`-style dict of the latest launch's config file in `workdir`, or None."""
    path = os.path.join(workdir, f"config.{launch_number(workdir) - 1}.json")
    if not os.path.exists(path):  # no numbered launch yet: a config.json from before them
        path = saved_config_path(workdir)
    if not os.path.exists(path):
        return None
    import ml_collections

    with open(path) as f:
        return config_dict(ml_collections.ConfigDict(json.load(f)))


# ------------------------------------------------------------------------------ used workdirs
RUN_FILES = ("metrics.jsonl", "samples.jsonl", "result.json", "before_after.md", "curves.png",
             "pivots.json")
RUN_DIRS = ("checkpoints", "tb", "export")


def checkpoint_steps(workdir: str) -> list[int]:
    """The steps saved in `<workdir>/checkpoints` (its folders named by their step), sorted."""
    ck = os.path.join(workdir, "checkpoints")
    return sorted(int(d) for d in os.listdir(ck) if d.isdigit()) if os.path.isdir(ck) else []


def earlier_run(workdir: str) -> Optional[str]:
    """What in `workdir` belongs to an earlier run ("checkpoints at steps [0, 2], 3 metrics rows
    after step 0"), or None. A launch killed before its first checkpoint (during the warm start)
    leaves at most the step-0 row: that is no run yet."""
    parts = []
    steps = checkpoint_steps(workdir)
    if steps:
        parts.append(f"checkpoints at steps {steps}")
    from rlvr.train.metrics import read_metrics

    try:
        rows = [r for r in read_metrics(workdir) if r.get("step", 0) > 0]
    except ValueError:  # not a metrics file this code can read: someone's data all the same
        rows = [None]
    if rows:
        parts.append(f"{len(rows)} metrics rows after step 0")
    return ", ".join(parts) or None


def refuse_start_over(workdir: str, why: str, overwrite: bool) -> None:
    """A launch that starts over (`why`) in a `workdir` holding an earlier run: refused (naming
    the workdir and the flag) unless `overwrite`."""
    found = earlier_run(workdir)
    if found and not overwrite:
        raise WorkdirError(
            f"workdir {workdir} holds an earlier run ({found}) and this launch would start over "
            f"({why}), mixing with or deleting it. Relaunch with checkpoint.resume=True to "
            f"continue it, use another --workdir, or pass --config.checkpoint.overwrite=True to "
            f"delete the earlier run and start over")


def clear_run(workdir: str) -> None:
    """Deletes an earlier run's files in `workdir` (`checkpoint.overwrite`)."""
    for name in RUN_FILES:
        p = os.path.join(workdir, name)
        if os.path.exists(p):
            os.remove(p)
    for name in RUN_DIRS:
        p = os.path.join(workdir, name)
        if os.path.isdir(p):
            shutil.rmtree(p)
