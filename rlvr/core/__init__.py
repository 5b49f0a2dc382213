"""rlvr.core: pure, jitted math every algorithm is built from (docs/algorithms.md, docs/algorithms.md (A.17), (A.20), (A.21), (A.22)).

Every name below is also reachable through its module, and every module stays a module:
`rlvr.core.gae` is the module and `rlvr.core.gae.gae(...)` the function (so is `rlvr.core.kl`,
`rlvr.core.losses`, ...).

Modules: advantages (GRPO, RLOO, REINFORCE), gae ((Skip-Observation) GAE), losses (PPO token loss,
trust-region token loss, PivotRL sequence loss, GSPO, CISPO, value loss, aggregation, entropy),
importance (TIS / MIS off-policy weights), shaping (DAPO overlong penalty and filter), kl
(estimators, reward penalty, coefficient controllers), pivot (pivot selection), curriculum
(task weights), metrics (pass@k, group outcome fractions, docs/algorithms.md (A.22) probabilities).
"""

from rlvr.core.advantages import (
    grpo_advantages,
    reinforce_advantages,
    rloo_advantages,
    update_running_baseline,
)
from rlvr.core.curriculum import (
    difficulty_buckets,
    learning_progress_weights,
    mixture_weights,
    variance_weights,
)
from rlvr.core import advantages, curriculum, gae, importance, kl, losses, metrics, pivot, shaping  # noqa: F401  (modules)
from rlvr.core.importance import importance_weights
from rlvr.core.kl import (
    KLControllerState,
    init_kl_controller,
    kl_estimate,
    kl_penalty_rewards,
    update_kl_controller,
)
from rlvr.core.losses import (
    aggregate,
    cispo_token_loss,
    entropy_from_logits,
    explained_variance,
    gspo_sequence_loss,
    ppo_token_loss,
    sequence_clip_loss,
    trust_region_token_loss,
    value_loss,
)
from rlvr.core.metrics import (
    group_outcome_fractions,
    pass_at_k,
    prob_all_correct,
    prob_all_wrong,
    prob_any_success,
    prob_chain_success,
)
from rlvr.core.pivot import pivot_filter
from rlvr.core.shaping import overlong_filter, overlong_penalty

__all__ = [
    "grpo_advantages",
    "rloo_advantages",
    "reinforce_advantages",
    "update_running_baseline",
    "aggregate",
    "ppo_token_loss",
    "trust_region_token_loss",
    "sequence_clip_loss",
    "gspo_sequence_loss",
    "cispo_token_loss",
    "importance_weights",
    "overlong_penalty",
    "overlong_filter",
    "value_loss",
    "entropy_from_logits",
    "explained_variance",
    "kl_estimate",
    "kl_penalty_rewards",
    "KLControllerState",
    "init_kl_controller",
    "update_kl_controller",
    "pivot_filter",
    "variance_weights",
    "learning_progress_weights",
    "difficulty_buckets",
    "mixture_weights",
    "pass_at_k",
    "group_outcome_fractions",
    "prob_all_wrong",
    "prob_all_correct",
    "prob_any_success",
    "prob_chain_success",
]
