"""SAO on the multi-turn KV agent task (SPEC R5; seed 003 §4-5): `python launch.py --config=configs/sao.py --workdir=/tmp/sao`.

One rollout per prompt through a bounded queue into the learner (staleness bound), critic +
Skip-Observation GAE, trust-region token masking vs behaviour log-probs, 2 critic updates per
policy update, value pre-training, optional frozen-attention critic.
"""

import ml_collections

from configs import agent_base


def get_config():
    c = agent_base.get_config()    # tiny policy, SFT warm-start, eval (shared with PivotRL)
    c.algorithm.name = "sao"       # dispatched by launch.py to rlvr.train.sao_loop.
    c.algorithm.clip_low = 0.2     # ε_low of the token trust region (R3.5).
    c.algorithm.clip_high = 0.2    # ε_high of the token trust region.
    c.algorithm.gamma = 1.0        # γ of GAE.
    c.algorithm.gae_lambda = 0.95  # λ of GAE.
    c.algorithm.critic_learning_rate = 1e-3
    with c.unlocked():
        s = c.sao = ml_collections.ConfigDict()
        s.difficulty = "easy"       # kv_agent difficulty (experiments/results/difficulty.md).
        s.num_tasks = 256           # training task pool (one rollout per sampled prompt).
        s.sft_tasks = 256           # tasks whose demonstrations warm-start the policy.
        s.demo_style = "diverse"    # SFT demonstrations: diverse | canonical (configs/pivotrl.py).
        s.max_turns = 6             # agent-loop turn bound.
        s.rollout_batch = 16        # episodes the rollout thread runs per batched agent-loop call.
        s.learn_batch = 16          # samples per learner step (taken in arrival order).
        s.queue_size = 32           # queue capacity (back-pressure beyond it).
        s.max_staleness = 2         # drop samples whose policy-version lag exceeds this.
        s.staleness_backpressure = True  # rollout thread waits while its next batch would arrive
                                    # with lag > max_staleness (no stale work produced, R5.1).
        s.staleness_decay = 1.0     # weight decay**lag inside the bound (1 = no down-weighting).
        s.critic_updates = 2        # critic steps per policy step (R5.4).
        s.value_pretrain_steps = 5  # critic steps on warm-policy rollouts before RL (0 = cold).
        s.freeze_attention = False  # train only the critic's MLP projections + head (R5.4).
        s.skip_observations = True  # Skip-Observation GAE (False: naive token GAE, ablation).
        s.normalize_advantages = True  # whiten token advantages over the batch.
        s.token_budget = 0          # stop once this many rollout action tokens were spent (0 = off).
    return c
