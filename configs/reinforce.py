"""REINFORCE with a running baseline (docs/algorithms.md (A.4)): one sample per prompt, Σ_t log π aggregation.

    python launch.py --config=configs/reinforce.py --workdir=/tmp/rlvr_reinforce
"""

from rlvr.configs import quickstart


def get_config():
    c = quickstart.get_config()
    c.algorithm.name = "reinforce"
    c.algorithm.group_size = 1
    c.algorithm.baseline_momentum = 0.9
    c.algorithm.aggregation = "seq-mean-token-sum"
    c.sampling.prompts_per_step = 128
    c.train.num_minibatches = 1
    c.task.curriculum = "variance"        # docs/algorithms.md (A.20) over a fixed pool of training prompts
    c.task.pool_size = 128              # fixed pool (the quickstart task has 162 train instances)
    return c
