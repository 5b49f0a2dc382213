"""rlvr.algorithms: GRPO, RLOO, REINFORCE, PPO as compositions of core pieces (DESIGN.md).

`get_algorithm(name)` returns the class; `build_algorithm(config, ...)` an instance.
"""

from rlvr.algorithms.base import Algorithm, AlgorithmSettings
from rlvr.algorithms.grpo import GRPO
from rlvr.algorithms.ppo import PPO
from rlvr.algorithms.reinforce import REINFORCE
from rlvr.algorithms.rloo import RLOO

_REGISTRY = {"grpo": GRPO, "rloo": RLOO, "reinforce": REINFORCE, "ppo": PPO}


def register_algorithm(name: str, cls) -> None:
    """Adds an algorithm class (e.g. PivotRL, SAO) to the registry."""
    _REGISTRY[name] = cls


def registered_algorithms() -> tuple[str, ...]:
    """Names `get_algorithm` accepts (built-ins plus everything registered)."""
    return tuple(sorted(_REGISTRY))


def get_algorithm(name: str):
    """The Algorithm subclass registered under `name`."""
    if name not in _REGISTRY:
        raise ValueError(f"unknown algorithm {name!r}; known: {sorted(_REGISTRY)}")
    return _REGISTRY[name]


__all__ = ["Algorithm", "AlgorithmSettings", "GRPO", "RLOO", "REINFORCE", "PPO", "get_algorithm",
           "register_algorithm", "registered_algorithms"]
