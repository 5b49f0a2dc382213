"""GRPO on arithmetic (medium difficulty) with clip-higher, dual clip and a k3 KL loss term.

    python launch.py --config=configs/grpo.py --workdir=/tmp/rlvr_grpo
"""

from rlvr.configs import quickstart


def get_config():
    c = quickstart.get_config()
    c.algorithm.name = "grpo"
    c.algorithm.scale_rewards = "group"   # "none" for the no-std variant
    c.algorithm.clip_low = 0.2
    c.algorithm.clip_high = 0.28
    c.algorithm.dual_clip = 3.0
    c.kl.mode = "loss"
    c.kl.estimator = "k3"
    c.kl.coef = 0.01
    c.algorithm.dynamic_sampling = True   # drop all-equal groups, refill within 3 extra rounds
    return c
