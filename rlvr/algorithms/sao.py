"""SAO: single-rollout optimisation with token-level credit (docs/algorithms.md §7, (A.6), (A.8)-(A.9)).

One rollout per prompt (no group baseline, docs/algorithms.md §7): a critic V gives token values and
Skip-Observation GAE gives token advantages that flow between actions across observations
(docs/algorithms.md (A.6), `rlvr.core.gae.gae(..., skip_observations=True)`):

    δ = r_t + γ V(a_{i+1,0}) − V(a_{i,N}),   Â(a_{i,N}) = δ + γλ Â(a_{i+1,0});

the outcome reward sits on the last policy token. The policy loss is the strict double-sided
token trust region against the behaviour log-probs saved at sampling time (docs/algorithms.md (A.19),
`rlvr.core.losses.trust_region_token_loss`): tokens whose ratio leaves [1−ε_low, 1+ε_high] give
neither loss nor gradient. The critic is trained more often than the actor (`critic_updates`),
can be warmed up before the policy moves (`critic_warmup_steps`) and trained with attention
frozen (docs/algorithms.md §7; `critic_freeze_attention`).

SAO is PPO's pipeline (critic, token-aligned values, GAE, value clipping) with the trust-region
objective; its other parts are settings any algorithm can use: whitened advantages
(`normalize_advantages`), behaviour log-probs as π_old (`recompute_old_logprobs = False`) and
the asynchronous collector (a rollout thread and a bounded queue with a staleness bound and
back-pressure, `rollout.asynchronous`; stale samples may be down-weighted by `sample_weights`).
"""

from __future__ import annotations

from rlvr.algorithms.ppo import PPO


class SAO(PPO):
    name = "sao"
    default_policy_loss = "trust_region"
