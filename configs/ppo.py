"""PPO with a critic (copy of the policy trunk) and GAE; value clipping and critic warm-up.

    python launch.py --config=configs/ppo.py --workdir=/tmp/rlvr_ppo
"""

from rlvr.configs import quickstart


def get_config():
    c = quickstart.get_config()
    c.algorithm.name = "ppo"
    c.algorithm.group_size = 1
    c.algorithm.gamma = 1.0
    c.algorithm.gae_lambda = 0.95
    c.algorithm.value_coef = 1.0
    c.algorithm.value_clip = 0.2
    c.algorithm.critic_warmup_steps = 5
    c.algorithm.critic_learning_rate = 1e-3
    c.sampling.prompts_per_step = 64
    c.train.epochs = 2
    c.train.num_minibatches = 2
    c.kl.mode = "reward"
    c.kl.estimator = "k1"
    c.kl.coef = 0.02
    return c
