"""PivotRL on the multi-turn KV agent task (docs/algorithms.md §6): `python launch.py --config=configs/pivotrl.py --workdir=/tmp/pivotrl`.

CPU-sized: tiny char-level policy, SFT warm start on demonstrations (then frozen as π_ref), probe
m samples per demonstration turn of 32 pool tasks, keep σ̂² > 0 and μ̂ < λ_diff, local GRPO with
K = 4 samples per kept state, turn-level ratio and β·KL to π_ref.
"""

from rlvr.configs import agent_base


def get_config():
    c = agent_base.get_config()     # task kit, tiny policy, SFT warm start, eval (shared)
    c.algorithm.name = "pivotrl"    # collector: pivots (probe → filter → K local samples)
    c.algorithm.group_size = 4      # K fresh samples from π_old per kept state (docs/algorithms.md §6).
    c.algorithm.clip_low = 0.2      # ε of the turn-level clipped objective (docs/algorithms.md (A.10)).
    c.algorithm.clip_high = 0.2
    c.algorithm.recompute_old_logprobs = False  # π_old = the sampler's behaviour log-probs.
    c.kl.mode = "loss"              # β·KL(π_θ‖π_ref) over the action (docs/algorithms.md (A.10)).
    c.kl.coef = 0.02
    c.task.pool_size = 32           # tasks whose demonstration turns are the candidates.
    c.sampling.prompts_per_step = 8  # kept states per training step.
    c.pivot.candidates = "demo"     # demo | demo+rollout (docs/algorithms.md §6: also the policy's own turns).
    c.pivot.selection = "filter"    # filter | variance | all | random (pivot-selection ablation).
    c.pivot.m = 4                   # probe samples per candidate from π_ref (docs/algorithms.md (A.17)).
    c.pivot.lambda_diff = 0.75      # keep iff σ̂² > 0 and μ̂ < λ_diff.
    c.pivot.reward = "functional"   # functional (docs/algorithms.md §6) | exact (match the demonstration; ablation).
    return c
