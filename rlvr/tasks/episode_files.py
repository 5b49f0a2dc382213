"""Multi-turn tasks from a file: `episodes:PATH` (`config.task.names`).

Each line of PATH (JSONL, or Parquet with the same columns) is a task record
(`rlvr.records.task`, as `jsonl:PATH` reads) whose `environment_snapshot` is an initial state of
a registered multi-turn kit's environment (`{"env", "env_version", "state", "sha256"}`), and
whose `prompt` is what that environment renders for it. Every record of a file runs the same
environment; the kit is the registered multi-turn kit running it (`kv_agent`: "kv_store",
`shop`: "shop", or a user's kit registered with `register_kit`), built with `task.kwargs`. That
kit supplies the environment, the outcome and turn verifiers and the demonstrations (its oracle
on each file task, for the SFT warm start and PivotRL); the file supplies the tasks.

Every record is reset in the kit's environment when the file is read: a record whose snapshot
hash, version or prompt does not match is reported with its line, with every other bad line, in
one `TaskFileError`. Splits are the records' `public_metadata.split` ("train" by default);
`config.task.eval_path` adds a file of eval records, as for the other dataset files.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from rlvr.records.task import TaskSpec
from rlvr.tasks.loader import MAX_RECORD_BYTES


def environment_kits() -> dict[str, str]:
    """{environment name: registered multi-turn kit name} of the kits that build without
    arguments and without a tokenizer (the first kit wins an environment)."""
    from rlvr.tasks.kit import get_kit, registered_kits

    out: dict[str, str] = {}
    for name in registered_kits():
        if name.endswith(":"):
            continue
        try:
            kit = get_kit(name)
            if kit.multi_turn and kit.bind_tokenizer is None:
                out.setdefault(kit.env_factory().name, name)
        except Exception:  # noqa: BLE001 — a kit that needs arguments is not a candidate
            continue
    return out


def _env_of_file(path: str, max_record_bytes: int) -> str:
    from rlvr.tasks.files import read_rows
    from rlvr.tasks.loader import LineError, TaskFileError

    rows, _, unit = read_rows(path, max_record_bytes)
    for n, record in rows:
        snap = record.get("environment_snapshot") if isinstance(record, dict) else None
        if isinstance(snap, dict) and snap.get("env"):
            return str(snap["env"])
    raise TaskFileError(path, [LineError(0, "environment_snapshot", "no record names its "
                                         "environment (environment_snapshot.env)",
                                         whole_file=True)], unit=unit)


def episodes_kit(path: str, *, eval_path: str = "", max_record_bytes: int = MAX_RECORD_BYTES,
                 **kit_kwargs: Any):
    """The kit of `episodes:PATH` (module docstring)."""
    from rlvr.tasks.files import FileSource, check_record_bound, r65_task, resolve_path
    from rlvr.tasks.kit import get_kit

    path = resolve_path("episodes", path)
    env_name = _env_of_file(path, check_record_bound(max_record_bytes))
    kits = environment_kits()
    if env_name not in kits:
        raise ValueError(f"episodes:{path}: no registered multi-turn kit runs environment "
                         f"{env_name!r} (environments: {', '.join(sorted(kits))})")
    base = get_kit(kits[env_name], **kit_kwargs)
    record = r65_task(None)

    def convert(rec):
        task, problems = record(rec)
        if task is None:
            return None, problems
        return _checked(task, base, env_name)

    source = FileSource("episodes", path, eval_path=eval_path, verifier=base.verifier,
                        max_record_bytes=max_record_bytes, convert=convert)
    return dataclasses.replace(base, name=source.name, source=source)


def _checked(task: TaskSpec, kit, env_name: str):
    """(task, []) when the kit's environment resets to it, else (None, [(field, problem)])."""
    snap = task.environment_snapshot or {}
    if snap.get("env") != env_name:
        return None, [("environment_snapshot.env", f"is {snap.get('env')!r}; every record of the "
                                                   f"file must run {env_name!r}")]
    try:
        kit.env_factory().reset(task, seed=task.random_seed)
    except Exception as e:  # noqa: BLE001 — reported with the line
        return None, [("environment_snapshot", f"{type(e).__name__}: {e}")]
    return task, []


def _register() -> None:
    from rlvr.tasks.kit import register_kit

    register_kit("episodes:", episodes_kit)


_register()
