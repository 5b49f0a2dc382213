"""Quickstart: a tiny char-level policy learns arithmetic with GRPO on a 2-core CPU in < 10 min.

    python launch.py --config=configs/quickstart.py --workdir=/tmp/rlvr_quickstart

SFT warm-start on demonstrations from the task generator (short, so the warm-started policy is
right only part of the time), then GRPO with group size 8. Prints a before/after table of
held-out sampled success and writes curves.png to the workdir.
"""

from configs import base


def get_config():
    c = base.get_config()
    c.seed = 0
    c.model.num_layers = 2
    c.model.d_model = 64
    c.model.num_heads = 4
    c.model.num_kv_heads = 4
    c.model.d_ff = 128
    c.model.max_seq_len = 12          # prompt "<bos>a+b-c=" (≤ 7) + answer ≤ 3 chars + eos (≤ 5 new)
    c.task.names = ("arithmetic",)
    # 2-3 one-digit operands, + and -: ~4k distinct instances, answers up to 3 chars.
    c.task.kwargs.difficulty = {"num_operands": (2, 3), "num_digits": 1, "operators": "+-"}
    c.algorithm.name = "grpo"
    c.algorithm.group_size = 8
    c.algorithm.clip_low = 0.2
    c.algorithm.clip_high = 0.28
    c.sampling.prompts_per_step = 32
    c.sampling.max_new_tokens = 5
    c.sampling.temperature = 1.0
    c.optimizer.learning_rate = 1e-3
    c.optimizer.max_grad_norm = 1.0
    c.train.num_steps = 300
    c.train.epochs = 1
    c.train.num_minibatches = 1
    c.train.sft_steps = 300
    c.train.sft_batch_size = 64
    c.train.sft_learning_rate = 3e-3
    c.eval.every = 50
    c.eval.num_tasks = 100
    c.eval.samples_per_task = 4
    c.eval.pass_k = (1, 4)
    c.checkpoint.every = 50
    c.mesh.data = 1
    return c
