"""The policy seam of a run: full fine-tuning or LoRA adapters, behind one interface.

The loop and the export never ask which kind of policy trains; they ask the `Policy`:

  - `trainable`: the nnx filter of the parameters the learner updates (None: all of them);
  - `warm_start_view(init)` / `after_warm_start(params)`: the whole model the supervised warm start
    trains, and the run's parameters made from its result (LoRA: the merged model is warm-started,
    the adapters attach afterwards at their initial values);
  - `reference_copy(params, needed)` / `reference_params(state)`: π_ref — a frozen copy held in the
    TrainState, or with LoRA the policy's parameters with the adapters off (no copy);
  - `sampling_params(params)`: the parameters this host samples with (multi-host: its own
    replicated copy, so sampling needs no cross-host traffic);
  - `export(...)`: the Hugging Face folder (LoRA: the merged model, the adapters beside it in the
    PEFT layout).

`build_policy_seam` picks the implementation from `model.lora.rank` (docs/architecture.md).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Optional

import jax


@dataclasses.dataclass(frozen=True)
class FullPolicy:
    """Every parameter trains; π_ref is a frozen copy of the warm-started parameters.

    Attributes:
      graphdef, rest: the model's graph and non-Param state (`nnx.split`).
      replicated: the replicated sharding of the mesh (multi-host sampling copies).
      num_processes: jax processes in the run.
    """

    graphdef: Any
    rest: Any
    replicated: Any
    num_processes: int = 1

    trainable = None
    lora = None

    def warm_start_view(self, init):
        """(params, graphdef, rest) of the whole model the warm start trains."""
        return init, self.graphdef, self.rest

    def after_warm_start(self, params):
        """The run's parameters from the warm start's result."""
        return params

    def reference_copy(self, params, needed: bool):
        """The reference copy the TrainState holds: `params` when π_ref is `needed`, else None."""
        return params if needed else None

    def reference_params(self, state):
        """π_ref's parameters of `state` (None when the run has no reference policy)."""
        return state.ref_params

    def sampling_params(self, params):
        """Parameters this process samples with: as they are on one process (the learner's
        shardings, which the sampler's batch-sharded program uses as they are); multi-host, a
        replicated copy whose local shards become a copy replicated over this process's devices
        (`rlvr.parallel.replicate_locally`), so each process samples its own rows on all its
        devices with no cross-host traffic."""
        if self.num_processes == 1:
            return params
        from rlvr.parallel import replicate_locally

        full = jax.jit(lambda x: x, out_shardings=self.replicated)(params)
        return replicate_locally(full)

    def export(self, model, tokenizer, renderer, path: str, metadata: dict,
               init_from: Optional[str]) -> str:
        """Writes the Hugging Face folder of `model` to `path`; returns the folder."""
        from rlvr.models.export import export_hf

        return export_hf(model, tokenizer, renderer, path, metadata=metadata)


@dataclasses.dataclass(frozen=True)
class AdapterPolicy(FullPolicy):
    """LoRA: only the adapters train (`rlvr.models.lora.LoRAPolicy`); π_ref is the base with the
    adapters off, so the TrainState holds no reference copy.

    Attributes (besides FullPolicy's):
      lora: the `rlvr.models.lora.LoRAPolicy` of the model.
    """

    lora: Any = None

    @property
    def trainable(self):
        return self.lora.trainable

    def warm_start_view(self, init):
        return self.lora.merged_params(init), self.lora.base_graphdef, self.lora.base_rest

    def after_warm_start(self, params):
        return self.lora.attach(params)

    def reference_copy(self, params, needed: bool):
        return None

    def reference_params(self, state):
        if state.ref_params is None:
            return self.lora.reference_params(state.params)
        return state.ref_params

    def export(self, model, tokenizer, renderer, path: str, metadata: dict,
               init_from: Optional[str]) -> str:
        """The merged policy (adapters folded in, base dequantised) as the Hugging Face folder,
        and the adapters alone in the PEFT layout beside it (`<path>/adapters`)."""
        from rlvr.models.export import export_hf
        from rlvr.models.lora import merge, save_adapters

        meta = {**metadata, "lora": {**dataclasses.asdict(self.lora.config), "adapters": "adapters"}}
        out = export_hf(merge(model), tokenizer, renderer, path, metadata=meta)
        save_adapters(model, os.path.join(out, "adapters"), base_model_name_or_path=init_from,
                      config=self.lora.config)
        return out


def build_policy_seam(graphdef, rest, replicated, num_processes: int, lora=None) -> FullPolicy:
    """The run's `Policy`: `AdapterPolicy` when `lora` (a `LoRAPolicy`) is given, else
    `FullPolicy`."""
    if lora is None:
        return FullPolicy(graphdef, rest, replicated, num_processes)
    return AdapterPolicy(graphdef, rest, replicated, num_processes, lora=lora)
