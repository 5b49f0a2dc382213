"""Reward composition: verdict → (reward, valid) (docs/architecture.md §4, docs/verifiers.md (V.1)).

Kinds (`RewardConfig.kind`):
  * "binary"   — r = 1[d = pass] (docs/algorithms.md (A.1)).
  * "partial"  — r = Σ_j w_j c_j / Σ_j w_j over the weighted components (docs/architecture.md §4).
  * "weighted" — R = w_pass·1[d = pass] + Σ_j w_j c̃_j (docs/architecture.md §4; costs take negative weights), each
                 component first saturated as c̃ = min(c / c_max, 1) when `scale` names a c_max
                 for it (docs/architecture.md §4); `pass_weight` w_pass weighs the decision itself (0 by default).
  * "tiered"   — R = success_reward − Σ λ_j c̃_j if the task succeeded, − Σ μ_j c̃_j otherwise
                 (docs/architecture.md §4): efficiency only counts once the task is solved, so a large cost weight
                 can never make "do nothing" optimal.
Then `clip` = (lo, hi) clips the scalar. Gates (docs/verifiers.md §2, §3.3 "hard constraints are gates, not
penalties") are components that must be > 0; a closed gate sets the reward to 0, it does not
subtract a penalty. A component the verdict lacks counts 0 (a lacking gate is closed).

Validity (docs/verifiers.md (V.1)): an env_error verdict → valid False (the caller retries within
`max_env_retries`, then masks). decision "unknown" → `unknown_policy`: "fail" scores it as a
failure, "mask" drops it (valid False). Masked samples get reward 0.0 *and* valid False; the
loss must use `valid`, never the 0.

`shaped_rewards` is potential-based shaping r'_t = r_t + γ Φ(s_{t+1}) − Φ(s_t) (docs/algorithms.md (A.23)).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from typing import Any, Mapping, Optional, Sequence, Tuple

import numpy as np

from rlvr.records.verdict import Verdict

REWARD_KINDS = ("binary", "partial", "weighted", "tiered")
UNKNOWN_POLICIES = ("fail", "mask")
TIER_KEYS = ("success_reward", "success_costs", "failure_penalties")


def _float_map(name: str, value: Any) -> dict:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValueError(f"RewardConfig.{name} must be a mapping name → number, got {value!r}")
    out = {}
    for k, v in value.items():
        if not isinstance(k, str) or isinstance(v, bool) or not isinstance(v, (int, float)) \
                or not math.isfinite(v):
            raise ValueError(f"RewardConfig.{name}[{k!r}] must be a finite number, got {v!r}")
        out[k] = float(v)
    return out


@dataclasses.dataclass(frozen=True)
class RewardConfig:
    """How verdicts become scalar rewards (docs/architecture.md §4). Frozen; `hash()` pins it in caches and samples.

    Attributes:
      kind: one of REWARD_KINDS.
      weights: component → weight (partial: w_j ≥ 0; weighted: costs negative).
      scale: component → c_max for the saturation c̃ = min(c / c_max, 1) (docs/architecture.md §4); c_max > 0.
      clip: optional (lo, hi) bounds for the final reward.
      gates: components that must be > 0, else the reward is 0 (not a penalty).
      tiers: for kind "tiered": {"success_reward": 1.0, "success_costs": {name: λ},
        "failure_penalties": {name: μ}} (docs/architecture.md §4).
      shaping_gamma: γ of potential-based shaping (docs/algorithms.md (A.23)), used by `shaped_rewards` callers.
      pass_weight: for kind "weighted": the weight of the decision 1[d = pass] (a verifier's
        correctness without naming a component).
      unknown_policy: "fail" | "mask" — what a decision "unknown" becomes.
      max_env_retries: how many times an env_error sample is re-verified before it is masked.
    """

    kind: str = "binary"
    weights: Mapping[str, float] = dataclasses.field(default_factory=dict)
    scale: Mapping[str, float] = dataclasses.field(default_factory=dict)
    clip: Optional[Tuple[float, float]] = None
    gates: Tuple[str, ...] = ()
    tiers: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    shaping_gamma: float = 1.0
    pass_weight: float = 0.0
    unknown_policy: str = "fail"
    max_env_retries: int = 2

    def __post_init__(self):
        if self.kind not in REWARD_KINDS:
            raise ValueError(f"RewardConfig.kind must be one of {REWARD_KINDS}, got {self.kind!r}")
        if self.unknown_policy not in UNKNOWN_POLICIES:
            raise ValueError(f"RewardConfig.unknown_policy must be one of {UNKNOWN_POLICIES}, "
                             f"got {self.unknown_policy!r}")
        object.__setattr__(self, "weights", _float_map("weights", self.weights))
        scale = _float_map("scale", self.scale)
        for k, v in scale.items():
            if v <= 0:
                raise ValueError(f"RewardConfig.scale[{k!r}] (c_max) must be > 0, got {v}")
        object.__setattr__(self, "scale", scale)
        if self.kind == "partial":
            if not self.weights:
                raise ValueError("RewardConfig.weights must be non-empty for kind 'partial'")
            if any(w < 0 for w in self.weights.values()) or sum(self.weights.values()) <= 0:
                raise ValueError("RewardConfig.weights for kind 'partial' must be ≥ 0 with a "
                                 f"positive sum, got {self.weights}")
        if not (isinstance(self.pass_weight, (int, float)) and not isinstance(self.pass_weight, bool)
                and math.isfinite(self.pass_weight)):
            raise ValueError(f"RewardConfig.pass_weight must be a finite number, got {self.pass_weight!r}")
        object.__setattr__(self, "pass_weight", float(self.pass_weight))
        if self.pass_weight and self.kind != "weighted":
            raise ValueError(f"RewardConfig.pass_weight applies to kind 'weighted' only, got kind {self.kind!r}")
        if self.kind == "weighted" and not self.weights and not self.pass_weight:
            raise ValueError("RewardConfig.weights (or pass_weight) must be non-empty for kind 'weighted'")
        if self.clip is not None:
            if (not isinstance(self.clip, (tuple, list)) or len(self.clip) != 2
                    or not float(self.clip[0]) <= float(self.clip[1])):
                raise ValueError(f"RewardConfig.clip must be (lo, hi) with lo ≤ hi, got "
                                 f"{self.clip!r}")
            object.__setattr__(self, "clip", (float(self.clip[0]), float(self.clip[1])))
        if isinstance(self.gates, str) or not all(isinstance(g, str) for g in self.gates):
            raise ValueError(f"RewardConfig.gates must be a sequence of component names, got "
                             f"{self.gates!r}")
        object.__setattr__(self, "gates", tuple(self.gates))
        tiers = dict(self.tiers or {})
        bad = set(tiers) - set(TIER_KEYS)
        if bad:
            raise ValueError(f"RewardConfig.tiers keys must be among {TIER_KEYS}, got {sorted(bad)}")
        tiers["success_reward"] = float(tiers.get("success_reward", 1.0))
        tiers["success_costs"] = _float_map("tiers.success_costs", tiers.get("success_costs"))
        tiers["failure_penalties"] = _float_map("tiers.failure_penalties",
                                                tiers.get("failure_penalties"))
        object.__setattr__(self, "tiers", tiers)
        if not (isinstance(self.shaping_gamma, (int, float)) and 0.0 <= self.shaping_gamma <= 1.0):
            raise ValueError(f"RewardConfig.shaping_gamma must be in [0, 1], got "
                             f"{self.shaping_gamma!r}")
        if not isinstance(self.max_env_retries, int) or self.max_env_retries < 0:
            raise ValueError(f"RewardConfig.max_env_retries must be an int ≥ 0, got "
                             f"{self.max_env_retries!r}")

    def to_dict(self) -> dict:
        return {
            "kind": self.kind,
            "weights": dict(sorted(self.weights.items())),
            "scale": dict(sorted(self.scale.items())),
            "clip": list(self.clip) if self.clip is not None else None,
            "gates": list(self.gates),
            "tiers": {k: (dict(sorted(v.items())) if isinstance(v, Mapping) else v)
                      for k, v in sorted(self.tiers.items())},
            "shaping_gamma": float(self.shaping_gamma),
            **({"pass_weight": self.pass_weight} if self.pass_weight else {}),
            "unknown_policy": self.unknown_policy,
            "max_env_retries": self.max_env_retries,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "RewardConfig":
        """Builds a config from JSON data (e.g. `TaskSpec.reward_config`); unknown keys raise."""
        fields = {f.name for f in dataclasses.fields(cls)}
        bad = set(d) - fields
        if bad:
            raise ValueError(f"RewardConfig: unknown field(s) {sorted(bad)}; allowed {sorted(fields)}")
        d = dict(d)
        if d.get("clip") is not None:
            d["clip"] = tuple(d["clip"])
        if "gates" in d:
            d["gates"] = tuple(d["gates"])
        return cls(**d)

    def hash(self) -> str:
        """sha256 of the canonical JSON form: stable across processes and runs (docs/verifiers.md §4)."""
        blob = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()


def _component(verdict: Verdict, name: str, config: RewardConfig) -> float:
    c = float(verdict.components.get(name, 0.0))
    c_max = config.scale.get(name)
    return min(c / c_max, 1.0) if c_max is not None else c  # docs/architecture.md §4


def compose_reward(verdict: Verdict, config: RewardConfig) -> Tuple[float, bool]:
    """Scalar reward and validity for one verdict (docs/architecture.md §4, docs/verifiers.md (V.1)).

    Returns:
      (reward, valid). valid False means "do not train on this sample" (env_error, or unknown
      under unknown_policy "mask"); its reward is 0.0 and must be ignored.
    """
    if verdict.trial == "env_error":
        return 0.0, False
    decision = verdict.decision
    if decision == "unknown":
        if config.unknown_policy == "mask":
            return 0.0, False
        decision = "fail"
    for g in config.gates:
        if not float(verdict.components.get(g, 0.0)) > 0.0:
            return 0.0, True  # a closed gate zeroes the reward (docs/verifiers.md §2); it is not a penalty
    success = decision == "pass"
    if config.kind == "binary":
        r = 1.0 if success else 0.0  # docs/algorithms.md (A.1)
    elif config.kind == "partial":
        total = sum(config.weights.values())
        r = sum(w * _component(verdict, k, config) for k, w in config.weights.items()) / total
    elif config.kind == "weighted":
        r = config.pass_weight * float(success) + sum(
            w * _component(verdict, k, config) for k, w in config.weights.items())  # docs/architecture.md §4
    else:  # tiered, docs/architecture.md §4
        if success:
            r = config.tiers["success_reward"] - sum(
                lam * _component(verdict, k, config)
                for k, lam in config.tiers["success_costs"].items())
        else:
            r = -sum(mu * _component(verdict, k, config)
                     for k, mu in config.tiers["failure_penalties"].items())
    if config.clip is not None:
        r = min(max(r, config.clip[0]), config.clip[1])
    return float(r), True


def compose_rewards(verdicts: Sequence[Verdict], config: RewardConfig):
    """Batch form: returns (rewards float32 [B], valid bool [B]) as numpy arrays."""
    pairs = [compose_reward(v, config) for v in verdicts]
    rewards = np.asarray([p[0] for p in pairs], dtype=np.float32).reshape(len(pairs))
    valid = np.asarray([p[1] for p in pairs], dtype=bool).reshape(len(pairs))
    return rewards, valid


def shaped_rewards(rewards, potentials, gamma: float):
    """Potential-based shaping r'_t = r_t + γ Φ(s_{t+1}) − Φ(s_t) (docs/algorithms.md (A.23)).

    Args:
      rewards: [..., T] per-step rewards r_t.
      potentials: [..., T+1] Φ(s_0) … Φ(s_T). For the optimal-policy invariance of shaping,
        Φ of a terminal state must be 0 (set it so; this function does not guess).
      gamma: discount γ ∈ [0, 1].
    Returns:
      [..., T] shaped rewards. Pure, jit- and vmap-safe.
    """
    import chex  # lazy: keeps `rlvr.verifiers` light for verifier worker processes
    import jax.numpy as jnp

    rewards = jnp.asarray(rewards)
    potentials = jnp.asarray(potentials)
    chex.assert_rank(potentials, rewards.ndim)
    chex.assert_equal(potentials.shape[:-1], rewards.shape[:-1])
    chex.assert_equal(potentials.shape[-1], rewards.shape[-1] + 1)
    return rewards + gamma * potentials[..., 1:] - potentials[..., :-1]
