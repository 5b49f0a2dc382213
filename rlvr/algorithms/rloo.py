"""RLOO: leave-one-out baseline b_i = mean of the other G−1 rewards (SPEC R3.2; eq.77-78)."""

from __future__ import annotations

from rlvr.algorithms.grpo import GRPO


class RLOO(GRPO):
    name = "rloo"
    default_advantage = "rloo"
