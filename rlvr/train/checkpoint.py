"""Orbax checkpoints that resume a run bit-for-bit (issue 5; DESIGN.md train/).

A checkpoint is an orbax `Composite` of
  * `state`: the `TrainState` pytree (params, optimiser, reference, critic, step, PRNG,
    policy version, KL coefficient, algorithm extras) — `StandardSave`, sharding-aware;
  * `host`: a JSON dict of host-side state (data/curriculum position, KL controller history,
    anything the loop needs to continue exactly) — `JsonSave`.
Restoring uses the live state as the abstract target, so arrays come back with the current
shardings (a checkpoint written on one mesh restores onto another).
"""

from __future__ import annotations

import os
from typing import Any, Optional

import jax
import orbax.checkpoint as ocp


class Checkpointer:
    """Thin wrapper over `ocp.CheckpointManager` for (TrainState, host dict) pairs."""

    def __init__(self, directory: str, *, max_to_keep: int = 2):
        self.directory = os.path.abspath(directory)
        self._mngr = ocp.CheckpointManager(
            self.directory,
            options=ocp.CheckpointManagerOptions(max_to_keep=max_to_keep, create=True),
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
        """Restores (state, host, step) from `step` (default latest) onto `state_like`'s structure."""
        step = self._mngr.latest_step() if step is None else step
        if step is None:
            raise FileNotFoundError(f"no checkpoint in {self.directory}")
        abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, state_like)
        out = self._mngr.restore(
            step,
            args=ocp.args.Composite(state=ocp.args.StandardRestore(abstract), host=ocp.args.JsonRestore()),
        )
        return out["state"], dict(out["host"]), step

    def wait(self):
        self._mngr.wait_until_finished()

    def close(self):
        self._mngr.wait_until_finished()
        self._mngr.close()
