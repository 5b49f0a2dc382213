"""RLOO (leave-one-out baseline, docs/algorithms.md (A.3)) with the KL as a k1 reward penalty and adaptive β (docs/algorithms.md (A.15)).

    python launch.py --config=configs/rloo.py --workdir=/tmp/rlvr_rloo
"""

from rlvr.configs import quickstart


def get_config():
    c = quickstart.get_config()
    c.algorithm.name = "rloo"
    c.algorithm.aggregation = "seq-mean-token-mean"
    c.kl.mode = "reward"
    c.kl.estimator = "k1"
    c.kl.coef = 0.01
    c.kl.adaptive = True
    c.kl.target = 0.05
    return c
