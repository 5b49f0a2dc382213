"""SAO on the checkout task (docs/algorithms.md §7):
`python launch.py --config=configs/shop_sao.py --workdir=/tmp/shop_sao`.

One episode per task (no group) from a rollout thread (32 in flight, each queued as it ends) into a bounded queue, 32 per
learner step in arrival order, staleness bound 2 with back-pressure, so rollouts (and their tool
latency) overlap the learner's updates; critic +
Skip-Observation GAE; trust-region token masking against the behaviour log-probs; 2 critic updates
per policy update; value pre-training (critic warm-up steps); critic attention frozen.
"""

from rlvr.configs import shop_base


def get_config():
    c = shop_base.get_config()
    c.algorithm.name = "sao"
    c.algorithm.group_size = 1
    c.sampling.prompts_per_step = 32
    c.algorithm.gamma = 1.0
    c.algorithm.gae_lambda = 0.95
    c.algorithm.skip_observations = True
    c.algorithm.normalize_advantages = True
    c.algorithm.critic_updates = 2
    c.algorithm.critic_warmup_steps = 5
    c.algorithm.critic_learning_rate = 1e-3
    c.algorithm.critic_freeze_attention = True
    c.algorithm.recompute_old_logprobs = False
    c.rollout.asynchronous = True
    c.rollout.arrival = "episode"  # each episode queued as it ends, 32 in flight
    c.rollout.episode_slots = 32
    c.rollout.queue_size = 64
    c.rollout.max_staleness = 2
    c.rollout.staleness_backpressure = True
    c.rollout.staleness_decay = 1.0
    return c
