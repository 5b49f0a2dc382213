"""Shared settings of the checkout-task experiments (PivotRL, full-trajectory GRPO, SAO).

The checkout kit (`rlvr.tasks.shop`: 7-11 turn episodes, one decisive turn, heavy-tailed tool
latency), one task pool, one char-level policy shape, SFT warm start, KL to the reference,
epochs × minibatches and a 512-episode held-out evaluation shared by every method, so their
results are comparable; each method's config sets its algorithm. experiments/STUDY.md explains
the choices.
"""

from rlvr.configs import base


def get_config():
    c = base.get_config()
    c.task.names = ("shop",)
    c.task.kwargs.difficulty = "standard"  # 3-5 ordered items: 7-11 actions, the payment decides.
    c.task.kwargs.demo_style = "diverse"   # seeded order patterns and payment forms (docs/algorithms.md §6).
    c.task.kwargs.latency_s = 0.01         # tool latency scale (s): Pareto(1.5) multiplier ≥ 1.
    c.task.kwargs.latency_alpha = 1.5
    c.task.kwargs.latency_cap = 30.0
    c.task.pool_size = 128                 # one fixed pool of training tasks for every method.
    c.model.num_layers = 2
    c.model.d_model = 128
    c.model.num_heads = 4
    c.model.num_kv_heads = 4
    c.model.d_ff = 512
    c.model.max_seq_len = 160              # the longest episode is ~133 characters.
    c.rollout.max_turns = 12               # 2·5 + 1 actions + 1 spare turn.
    c.rollout.prompt_bucket = 32           # histories padded to multiples of 32 (few jit shapes).
    c.sampling.max_new_tokens = 20         # the longest action ("pay 27+27+27+27+27") + newline.
    c.sampling.temperature = 1.0
    c.optimizer.learning_rate = 1e-4
    c.optimizer.max_grad_norm = 1.0
    c.train.epochs = 2                     # 2 epochs × 2 minibatches: the ratio moves, clipping acts.
    c.train.num_minibatches = 2
    c.train.num_steps = 200
    c.train.sft_steps = 1000               # demonstration warm start (decisive turn: sometimes right).
    c.train.sft_batch_size = 32
    c.train.sft_learning_rate = 3e-3
    c.train.sft_pool = 1024
    c.kl.mode = "loss"                     # β·KL(π_θ‖π_ref) for every method.
    c.kl.coef = 0.02
    c.kl.estimator = "k3"
    c.eval.num_tasks = 512                 # held-out tasks, one episode each.
    c.eval.samples_per_task = 1
    c.eval.pass_k = (1,)
    c.eval.every = 10
    c.checkpoint.every = 10
    c.checkpoint.max_to_keep = 1
    c.logging.tensorboard = False
    c.logging.plot = False
    c.mesh.data = 1                        # CPU-sized: one device.
    return c
