"""Full-trajectory GRPO on the multi-turn KV agent task (issue 6 baseline): `python launch.py --config=configs/agent_grpo.py --workdir=/tmp/agent_grpo`.

G full episodes per task from the initial state, outcome reward (KVOutcomeVerifier), group-
normalised, token-level PPO clip on action tokens only. Same policy, SFT warm-start and rollout
cost accounting as configs/pivotrl.py, so the two are comparable at equal rollout budget.
"""

import ml_collections

from configs import pivotrl


def get_config():
    c = pivotrl.get_config()  # same model / sampling / SFT / eval settings as PivotRL
    c.algorithm.name = "agent_grpo"  # dispatched by launch.py to rlvr.train.agent_grpo_loop.
    with c.unlocked():
        p = c.pivot
        g = c.grpo = ml_collections.ConfigDict()
        g.difficulty = p.difficulty
        g.num_tasks = 256          # training task pool.
        g.sft_tasks = p.sft_tasks  # tasks whose demonstrations warm-start the policy.
        g.demo_style = p.demo_style  # demonstration style of the SFT warm-start (as PivotRL).
        g.max_turns = p.max_turns  # agent-loop turn bound.
        g.group_size = 4           # G full episodes per task (R3.1).
        g.tasks_per_step = 8       # tasks per step (batch = G × tasks_per_step episodes).
        g.clip_eps = 0.2           # token-level PPO clip ε.
        g.kl_coef = 0.0            # β of the KL to the warm-start reference (0 = off).
        g.token_budget = 0         # stop once this many rollout action tokens were spent (0 = off).
        del c["pivot"]
    return c
