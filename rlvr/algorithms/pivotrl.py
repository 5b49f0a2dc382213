"""PivotRL's update: local GRPO on pivot states with the turn-level ratio (docs/algorithms.md (A.10), §6).

docs/algorithms.md §6 On each kept pivot state s, K fresh actions are sampled from π_old and scored by
the functional verifier; their rewards are group-normalised within the state,
Â_i = (R_i − R̄)/(σ_R + δ) (the GRPO estimator over groups of K), and the objective is

    J = 1/K Σ_i min(r_i Â_i, clip(r_i, 1−ε, 1+ε) Â_i) − β KL(π_θ(·|s) ‖ π_ref(·|s)),
    r_i = π_θ(a_i|s) / π_old(a_i|s)   (product of the action's token probabilities, no T-th root)

(`rlvr.core.losses.sequence_clip_loss`; the KL term is the per-action sum of token estimates
`rlvr.core.kl.kl_estimate`, averaged over actions, with β the run's KL coefficient). ε is
`clip_low` (and `clip_high` for an asymmetric upper bound).

This class is only those pure pieces. Where the states come from — candidates from
demonstrations or the policy's own rollouts, the π_ref probe and `pivot_filter`, K samples from
the restored states, optional corrective hints — is the pivot collector
(`rlvr.train.pivots`), chosen by `default_collector`.
"""

from __future__ import annotations

from rlvr.algorithms.grpo import GRPO


class PivotRL(GRPO):
    name = "pivotrl"
    default_advantage = "grpo"
    default_policy_loss = "sequence_clip"
    default_collector = "pivots"
