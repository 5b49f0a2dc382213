"""The policy seam (rlvr/train/policy.py) and the frozen Run bundle: a full policy keeps a reference
copy and exports one folder; a LoRA policy trains only its adapters, takes π_ref as the base with the
adapters off and exports the adapters beside the merged model; the loop changes only `Run.live`."""

import dataclasses
import os

import jax
import numpy as np
import pytest
from flax import nnx

from rlvr.train.config import validate_config
from rlvr.train.modes import export_run
from rlvr.train.policy import AdapterPolicy, FullPolicy
from rlvr.train.setup import build_run
from tests.train.tiny import tiny_config


def _run(tmp_path, rank):
    c = tiny_config(eval__num_tasks=0, eval__every=0, train__sft_steps=0, kl__mode="loss", kl__coef=0.01)
    c.model.lora.rank = rank
    validate_config(c)
    return build_run(c, str(tmp_path / f"r{rank}"))


def test_full_policy_holds_a_reference_copy_and_exports_one_folder(tmp_path):
    r = _run(tmp_path, 0)
    try:
        assert type(r.policy) is FullPolicy and r.policy.trainable is None
        with pytest.raises(dataclasses.FrozenInstanceError):
            r.collector = None
        assert r.state is None and r.live.step_fn is None
        state = r.init_state(r.init_params)
        assert r.live.step_fn is not None
        ref = r.reference_params(state)
        assert ref is state.ref_params and ref is not None
        assert r.policy.warm_start_view(r.init_params)[0] is r.init_params
        out = export_run(r, state.params, {"origin": "test"}, str(tmp_path / "export"))
        assert os.path.isfile(os.path.join(out, "config.json"))
        assert not os.path.exists(os.path.join(out, "adapters"))
    finally:
        r.close()


def test_lora_policy_references_the_base_and_exports_the_adapters(tmp_path):
    r = _run(tmp_path, 2)
    try:
        assert type(r.policy) is AdapterPolicy and r.policy.trainable is nnx.LoRAParam
        state = r.init_state(r.init_params)
        assert state.ref_params is None  # no reference copy: π_ref is the base, adapters off
        ref = r.reference_params(state)
        lora_leaves = jax.tree.leaves(nnx.split_state(ref, nnx.LoRAParam, ...)[0])
        assert lora_leaves and all(not np.any(np.asarray(x)) for x in lora_leaves)
        # the warm start trains the whole (merged) model; the adapters attach after it
        merged, graphdef, _ = r.policy.warm_start_view(r.init_params)
        assert graphdef is r.policy.lora.base_graphdef
        back = r.policy.after_warm_start(merged)
        assert jax.tree.structure(back) == jax.tree.structure(r.init_params)
        out = export_run(r, state.params, {"origin": "test"}, str(tmp_path / "export"))
        assert os.path.isfile(os.path.join(out, "config.json"))
        assert os.path.isdir(os.path.join(out, "adapters"))
    finally:
        r.close()
