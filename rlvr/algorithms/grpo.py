"""GRPO: group-normalised (or no-std) advantages + token clipped surrogate (docs/algorithms.md (A.2), (A.8)-(A.9)).

Asymmetric clip (clip_low / clip_high) and optional dual clip come from the shared policy loss
(`Algorithm.policy_loss`); aggregation (docs/algorithms.md (A.11)-(A.12)) is a setting. All-equal groups get exactly 0.
"""

from __future__ import annotations

from rlvr.algorithms.base import Algorithm
from rlvr.core.advantages import grpo_advantages, reinforce_advantages, rloo_advantages


def sequence_advantages(kind: str, rewards, valid, settings, baseline=None):
    """[B] advantages of estimator `kind` (grpo | rloo | reinforce) from [B] rewards (group-major)."""
    g = settings.group_size
    if kind == "grpo":
        adv = grpo_advantages(rewards.reshape(-1, g), valid.reshape(-1, g),
                              scale_by_std=settings.scale_rewards == "group", eps=settings.adv_eps)
    elif kind == "rloo":
        adv = rloo_advantages(rewards.reshape(-1, g), valid.reshape(-1, g))
    elif kind == "reinforce":
        adv = reinforce_advantages(rewards, baseline, valid)
    else:
        raise ValueError(f"sequence_advantages: kind must be one of ('grpo', 'rloo', 'reinforce'), got {kind!r}")
    return adv.reshape(-1)


class GRPO(Algorithm):
    name = "grpo"
    default_advantage = "grpo"

    def compute_advantages(self, state, tb):
        kind = self.settings.advantage or self.default_advantage
        tb = tb.replace(advantages=sequence_advantages(kind, tb.rewards, tb.valid, self.settings,
                                                       baseline=state.extras.get("baseline")))
        return state, tb, {}
