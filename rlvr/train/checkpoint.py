"""Orbax checkpoints that resume a run bit-for-bit and survive faults (docs/architecture.md §5).

A checkpoint is an orbax `Composite` of
  * `state`: the `TrainState` pytree (params, optimiser, reference, critic, step, PRNG,
    policy version, KL coefficient, algorithm extras) — `StandardSave`, sharding-aware;
  * `host`: a JSON dict of host-side state (data/curriculum position, KL controller history,
    anything the loop needs to continue exactly) — `JsonSave`.
Restoring uses the live state as the abstract target, so arrays come back with the current
shardings (a checkpoint written on one mesh restores onto another).

Faults:
  * a save is atomic (orbax writes `<step>.orbax-checkpoint-tmp…` and renames it to `<step>`
    only once every file is written), so a crash or kill during a save leaves the previous
    checkpoints as they were; the unfinished directory is ignored by `latest_step` and removed
    when the next `Checkpointer` opens the directory;
  * `restore_latest` tries the checkpoints newest first: one that fails to load is reported
    in one line (step, path, which part, the underlying error) and skipped; the run continues
    from the newest one that loads, and the unreadable newer ones are renamed to
    `<step>.unreadable-<ns>` (kept for inspection, out of the way of the steps about to be
    saved again). When none loads it raises `CheckpointError` listing every report.
"""

from __future__ import annotations

import os
import time
from typing import Any, List, Optional

import jax
import orbax.checkpoint as ocp


class CheckpointError(RuntimeError):
    """No checkpoint in the directory can be loaded; the message has one line per checkpoint."""


def _one_line(e: BaseException, limit: int = 300) -> str:
    """The innermost cause of `e` as "Type: first line" (TensorStore wraps the useful part —
    which file, what is wrong — under a long spec dump)."""
    seen = set()
    while id(e) not in seen:
        seen.add(id(e))
        inner = e.__cause__ or (None if e.__suppress_context__ else e.__context__)
        if inner is None:
            break
        e = inner
    msg = (str(e).strip().splitlines() or [""])[0]
    text = f"{type(e).__name__}: {msg}" if msg else type(e).__name__
    return text if len(text) <= limit else text[:limit - 1] + "…"


class Checkpointer:
    """Thin wrapper over `ocp.CheckpointManager` for (TrainState, host dict) pairs."""

    def __init__(self, directory: str, *, max_to_keep: int = 2):
        self.directory = os.path.abspath(directory)
        self._mngr = ocp.CheckpointManager(
            self.directory,
            options=ocp.CheckpointManagerOptions(max_to_keep=max_to_keep, create=True,
                                                 cleanup_tmp_directories=True),
        )

    def latest_step(self) -> Optional[int]:
        return self._mngr.latest_step()

    def save(self, step: int, state, host: dict, *, wait: bool = True) -> None:
        self._mngr.save(
            int(step),
            args=ocp.args.Composite(state=ocp.args.StandardSave(state), host=ocp.args.JsonSave(host)),
            force=True,
        )
        if wait:
            self._mngr.wait_until_finished()

    def restore(self, state_like, step: Optional[int] = None) -> tuple[Any, dict, int]:
        """Restores (state, host, step) from `step` (default latest) onto `state_like`'s structure.

        Raises CheckpointError naming the step, the path and the part (host metadata or state
        arrays) that failed, with the underlying error in one line.
        """
        step = self._mngr.latest_step() if step is None else step
        if step is None:
            raise FileNotFoundError(f"no checkpoint in {self.directory}")
        path = os.path.join(self.directory, str(step))
        host = self.read_host(step)
        abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, state_like)
        try:
            out = self._mngr.restore(
                step, args=ocp.args.Composite(state=ocp.args.StandardRestore(abstract)))
        except Exception as e:  # noqa: BLE001
            raise CheckpointError(f"checkpoint step {step} at {path}: state arrays (state/) "
                                  f"unreadable: {_one_line(e)}") from e
        return out["state"], host, step

    def read_host(self, step: int) -> dict:
        """The host dict of checkpoint `step` alone (no arrays are read): cheap, e.g. to
        compare the config a run was trained with before restoring it. Raises CheckpointError
        naming the step and path when it is unreadable or not a JSON object."""
        path = os.path.join(self.directory, str(step))
        try:
            host = self._mngr.restore(step, args=ocp.args.Composite(host=ocp.args.JsonRestore()))
        except Exception as e:  # noqa: BLE001 — reported with step and path
            raise CheckpointError(f"checkpoint step {step} at {path}: host metadata "
                                  f"(host/metadata) unreadable: {_one_line(e)}") from e
        if not isinstance(host["host"], dict):
            raise CheckpointError(f"checkpoint step {step} at {path}: host metadata "
                                  f"(host/metadata) is {type(host['host']).__name__}, not an object")
        return dict(host["host"])

    def restore_latest(self, state_like) -> tuple[Any, dict, int, List[str]]:
        """(state, host, step, problems) from the newest checkpoint that loads.

        `problems` has one line per newer checkpoint that failed to load and was skipped (for
        the run's log); those are renamed to `<step>.unreadable-<ns>`. Raises
        FileNotFoundError when there is no checkpoint, CheckpointError when none loads.
        """
        self._mngr.reload()
        steps = sorted(self._mngr.all_steps(), reverse=True)
        if not steps:
            raise FileNotFoundError(f"no checkpoint in {self.directory}")
        problems: List[str] = []
        for step in steps:
            try:
                state, host, _ = self.restore(state_like, step)
            except CheckpointError as e:
                problems.append(str(e))
                continue
            if problems:
                moved = self._set_aside([s for s in steps if s > step])
                problems = [f"{p} (moved to {moved[s]})" if s in moved else p
                            for s, p in zip(steps, problems)]
            return state, host, step, problems
        raise CheckpointError(f"no checkpoint in {self.directory} can be loaded:\n  " +
                              "\n  ".join(problems))

    def _set_aside(self, steps: List[int]) -> dict:
        """Renames unreadable step directories (process 0; the others wait); → {step: new path}."""
        moved = {}
        if jax.process_index() == 0:
            for s in steps:
                src = os.path.join(self.directory, str(s))
                if os.path.isdir(src):
                    moved[s] = f"{src}.unreadable-{time.time_ns()}"
                    os.rename(src, moved[s])
        if jax.process_count() > 1:
            from jax.experimental import multihost_utils

            multihost_utils.sync_global_devices("rlvr_checkpoint_set_aside")
        self._mngr.reload()
        return moved

    def wait(self):
        self._mngr.wait_until_finished()

    def close(self):
        self._mngr.wait_until_finished()
        self._mngr.close()
