"""Full-trajectory GRPO on the checkout task (PivotRL's and SAO's baseline):
`python launch.py --config=configs/shop_grpo.py --workdir=/tmp/shop_grpo`.

G = 4 whole episodes per task from the initial state, outcome reward on the authoritative final
state, group-normalised advantages, token-level PPO clip on action tokens; group-synchronous (a
step waits for its slowest episode, tool latency included).
"""

from rlvr.configs import shop_base


def get_config():
    c = shop_base.get_config()
    c.algorithm.name = "grpo"
    c.algorithm.group_size = 4       # G episodes per task.
    c.sampling.prompts_per_step = 8  # 8 tasks × 4 = 32 episodes per step.
    c.algorithm.recompute_old_logprobs = False  # π_old = the sampler's behaviour log-probs.
    return c
