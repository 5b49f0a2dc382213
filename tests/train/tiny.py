"""Tiny configs for loop tests (seconds, not minutes) and a helper that runs one."""

import importlib

from configs import quickstart
from rlvr.train import loop
from rlvr.train.config import validate_config
from rlvr.train.setup import build_run


def _override(c, over):
    for k, v in over.items():
        sec, name = k.split("__")
        setattr(c[sec], name, v)
    return c


def tiny_config(**over):
    c = quickstart.get_config()
    c.model.num_layers = 1
    c.model.d_model = 16
    c.model.num_heads = 2
    c.model.num_kv_heads = 2
    c.model.d_ff = 32
    c.algorithm.group_size = 4
    c.sampling.prompts_per_step = 2
    c.train.num_steps = 4
    c.train.num_minibatches = 2
    c.train.sft_steps = 2
    c.train.sft_batch_size = 8
    c.train.progress = False
    c.eval.every = 2
    c.eval.num_tasks = 4
    c.eval.samples_per_task = 2
    c.eval.pass_k = (1, 2)
    c.checkpoint.every = 2
    c.logging.tensorboard = False
    c.logging.plot = False
    return _override(c, over)


def tiny_agent_config(name: str, **over):
    """configs/<name>.py (pivotrl | agent_grpo | sao) at test size: 1 tiny layer, 8 pool tasks,
    2 SFT steps, 2 eval tasks."""
    c = importlib.import_module(f"configs.{name}").get_config()
    c.model.num_layers = 1
    c.model.d_model = 16
    c.model.num_heads = 2
    c.model.num_kv_heads = 2
    c.model.d_ff = 32
    c.train.num_steps = 3
    c.train.sft_steps = 2
    c.train.sft_batch_size = 8
    c.train.sft_pool = 8
    c.train.progress = False
    c.task.pool_size = 8
    c.eval.every = 3
    c.eval.num_tasks = 2
    c.eval.samples_per_task = 2
    c.checkpoint.every = 1
    c.logging.plot = False
    c.sampling.prompts_per_step = 2
    if name == "pivotrl":
        c.pivot.selection = "all"
    if name == "sao":
        c.sampling.prompts_per_step = 4
        c.rollout.producer_batch = 4
        c.rollout.queue_size = 4
        c.rollout.max_staleness = 1
        c.algorithm.critic_warmup_steps = 1
    return _override(c, over)


def run_tiny(config, workdir, **kw):
    """Validates, builds and trains `config` in `workdir`; returns (Run, result)."""
    validate_config(config)
    r = build_run(config, str(workdir))
    try:
        return r, loop.train(r, **kw)
    finally:
        r.close()
