"""SAO on the multi-turn KV agent task (docs/algorithms.md §7): `python launch.py --config=configs/sao.py --workdir=/tmp/sao`.

One rollout per prompt from a rollout thread through a bounded queue into the learner (staleness
bound, back-pressure), critic + Skip-Observation GAE, trust-region token masking against the
behaviour log-probs, 2 critic updates per policy update, critic warm-up on the warm policy's
rollouts (value pre-training), optional frozen-attention critic.
"""

from rlvr.configs import agent_base


def get_config():
    c = agent_base.get_config()     # task kit, tiny policy, SFT warm start, eval (shared)
    c.algorithm.name = "sao"        # PPO pipeline + trust-region objective
    c.algorithm.group_size = 1      # one rollout per prompt (docs/algorithms.md §7).
    c.algorithm.clip_low = 0.2      # ε_low of the token trust region (docs/algorithms.md (A.8)-(A.9)).
    c.algorithm.clip_high = 0.2     # ε_high of the token trust region.
    c.algorithm.gamma = 1.0         # γ of GAE.
    c.algorithm.gae_lambda = 0.95   # λ of GAE.
    c.algorithm.skip_observations = True  # Skip-Observation GAE (False: naive token GAE, ablation).
    c.algorithm.normalize_advantages = True  # whiten token advantages over the batch.
    c.algorithm.critic_updates = 2  # critic steps per policy step (docs/algorithms.md §7).
    c.algorithm.critic_warmup_steps = 5  # value pre-training on the warm policy's rollouts (docs/algorithms.md §7).
    c.algorithm.critic_learning_rate = 1e-3
    c.algorithm.critic_freeze_attention = False  # train only the critic's MLP + head (docs/algorithms.md §7).
    c.algorithm.recompute_old_logprobs = False   # ratios against the behaviour log-probs (docs/algorithms.md (A.19)).
    c.sampling.prompts_per_step = 16  # samples per learner step (taken in arrival order).
    c.rollout.asynchronous = True   # rollout thread + bounded queue (docs/algorithms.md §7, docs/architecture.md §1).
    c.rollout.arrival = "episode"   # each episode queued as it ends (docs/algorithms.md §7).
    c.rollout.episode_slots = 16    # episodes in flight.
    c.rollout.queue_size = 32       # back-pressure beyond it.
    c.rollout.max_staleness = 2     # drop samples whose policy-version lag exceeds this.
    c.rollout.staleness_backpressure = True  # the thread waits rather than produce stale work.
    c.rollout.staleness_decay = 1.0  # weight decay**lag inside the bound (1 = no down-weighting).
    return c
