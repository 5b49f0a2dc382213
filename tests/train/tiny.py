"""A tiny quickstart-shaped config for loop tests (seconds, not minutes)."""

from configs import quickstart


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
    for k, v in over.items():
        sec, name = k.split("__")
        setattr(c[sec], name, v)
    return c
