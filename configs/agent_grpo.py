"""Full-trajectory GRPO on the multi-turn KV agent task (PivotRL's baseline): `python launch.py --config=configs/agent_grpo.py --workdir=/tmp/agent_grpo`.

G full episodes per task from the initial state, outcome reward on the authoritative final state,
group-normalised advantages, token-level PPO clip on action tokens only (observations get no
loss). Same task kit, policy, SFT warm start and rollout-cost accounting as configs/pivotrl.py,
so the two are comparable at equal rollout budget.
"""

from rlvr.configs import agent_base


def get_config():
    c = agent_base.get_config()     # task kit, tiny policy, SFT warm start, eval (shared)
    c.algorithm.name = "grpo"       # collector: groups of episodes (the kit is multi-turn)
    c.algorithm.group_size = 4      # G full episodes per task (docs/algorithms.md (A.2)).
    c.algorithm.clip_low = 0.2      # token-level PPO clip ε.
    c.algorithm.clip_high = 0.2
    c.algorithm.recompute_old_logprobs = False  # π_old = the sampler's behaviour log-probs.
    c.sampling.prompts_per_step = 8  # tasks per step (batch = G × 8 episodes).
    return c
