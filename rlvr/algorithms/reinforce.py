"""REINFORCE with a running baseline (docs/algorithms.md (A.4), docs/architecture.md §7).

Â_i = R_i − b with b an exponential moving average of *earlier* batches' mean reward (so b is
independent of R_i), kept in `TrainState.extras["baseline"]` and checkpointed with it. With the
default single epoch the clipped surrogate's ratio is 1 and its gradient is −Â ∇log π (docs/algorithms.md (A.4));
`aggregation="seq-mean-token-sum"` gives docs/algorithms.md (A.4)'s Σ_t exactly.
"""

from __future__ import annotations

import jax.numpy as jnp

from rlvr.algorithms.grpo import GRPO, sequence_advantages
from rlvr.core.advantages import update_running_baseline


class REINFORCE(GRPO):
    name = "reinforce"
    default_advantage = "reinforce"

    def init_extras(self) -> dict:
        return {"baseline": jnp.zeros((), jnp.float32)}

    def compute_advantages(self, state, tb):
        baseline = state.extras["baseline"]
        kind = self.settings.advantage or self.default_advantage
        tb = tb.replace(advantages=sequence_advantages(kind, tb.rewards, tb.valid, self.settings,
                                                       baseline=baseline))
        new_baseline = update_running_baseline(baseline, tb.rewards, tb.valid,
                                               decay=self.settings.baseline_momentum)
        extras = dict(state.extras, baseline=new_baseline.astype(jnp.float32))
        return state.replace(extras=extras), tb, {"reward/baseline": baseline}
