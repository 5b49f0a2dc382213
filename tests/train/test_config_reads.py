"""One config schema, every field read or refused: each shipped config runs one tiny step
through the loop with a recording config, and every leaf of it must have been read by the run
or be listed by `inapplicable` (not applicable to the algorithm, or inactive)."""

import importlib

import pytest

from rlvr.tasks.kit import build_kit
from rlvr.train import loop
from rlvr.train.config import ConfigReads, flatten, inapplicable

SHIPPED = ["base", "quickstart", "grpo", "rloo", "reinforce", "ppo", "pivotrl", "agent_grpo", "sao",
           "shop_grpo", "shop_pivotrl", "shop_sao"]


def _tiny(name):
    c = importlib.import_module(f"configs.{name}").get_config()
    c.model.num_layers, c.model.d_model, c.model.num_heads, c.model.num_kv_heads = 1, 16, 2, 2
    c.model.d_ff = 32
    c.train.num_steps = 1
    c.train.progress = False
    if c.train.sft_steps:
        c.train.sft_steps, c.train.sft_batch_size = 1, 4
        c.train.sft_pool = min(c.train.sft_pool, 4)
    if c.task.pool_size:
        c.task.pool_size = 4
    if c.eval.num_tasks:
        c.eval.num_tasks, c.eval.every = 2, 1
    if c.algorithm.name == "pivotrl":
        c.pivot.selection = "all"
    c.sampling.prompts_per_step = 4 if c.algorithm.group_size > 1 else 8
    c.rollout.producer_batch = min(c.rollout.producer_batch, c.sampling.prompts_per_step)
    c.checkpoint.every = 1
    c.logging.samples_every = 1
    c.mesh.data = 1
    return c


@pytest.mark.parametrize("name", SHIPPED)
def test_every_field_read_or_refused(tmp_path, name):
    c = _tiny(name)
    tracked = ConfigReads(c)
    loop.run(tracked, str(tmp_path))
    kit = build_kit(c.task.names, c.task.weights, c.task.kwargs.to_dict())
    leaves = set(flatten(c))
    na = inapplicable(c, multi_turn=kit.multi_turn)
    unread = sorted(leaves - tracked.reads - set(na))
    assert not unread, f"{name}: fields neither read by the run nor refused: {unread}"
    read_but_refused = sorted(tracked.reads & set(na))
    assert not read_but_refused, f"{name}: refused fields read anyway: {read_but_refused}"
