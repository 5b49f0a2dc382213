"""Shared settings of the multi-turn KV agent experiments (PivotRL, SAO, full-trajectory GRPO).

The same task kit, tiny char-level policy, action length, SFT warm start and evaluation for every
multi-turn method, so their results are comparable; each experiment config sets its algorithm.
"""

from rlvr.configs import base


def get_config():
    c = base.get_config()
    c.task.names = ("kv_agent",)
    c.task.kwargs.difficulty = "easy"     # kv_agent difficulty.
    c.task.kwargs.demo_style = "diverse"  # demonstrations: per-task seeded read order and answer
                                          # form (docs/algorithms.md §6).
    c.task.pool_size = 256                # fixed pool of training tasks.
    c.model.num_layers = 2
    c.model.d_model = 64
    c.model.num_heads = 4
    c.model.num_kv_heads = 4
    c.model.d_ff = 128
    c.model.max_seq_len = 64       # episodes of the "easy"/"medium" task fit in 64 characters.
    c.rollout.max_turns = 6        # actions per episode.
    c.sampling.max_new_tokens = 8  # one action ("get a", "ans 17") + newline.
    c.sampling.temperature = 1.0
    c.optimizer.learning_rate = 3e-4
    c.optimizer.max_grad_norm = 1.0
    c.train.num_steps = 30
    c.train.sft_steps = 100        # demonstration warm-start steps (held-out success 0.2-0.4 on easy).
    c.train.sft_batch_size = 32
    c.train.sft_learning_rate = 3e-3
    c.train.sft_pool = 256         # demonstrations of a fixed pool of 256 tasks.
    c.eval.every = 10
    c.eval.num_tasks = 32
    c.eval.samples_per_task = 2
    c.eval.pass_k = (1, 2)
    c.logging.tensorboard = False
    c.mesh.data = 1                # CPU-sized: one device (-1 takes every device).
    return c
