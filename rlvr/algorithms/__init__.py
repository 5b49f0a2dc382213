"""rlvr.algorithms: GRPO, RLOO, REINFORCE, PPO, PivotRL and SAO as compositions of core pieces
(docs/architecture.md §2). An algorithm is its pure pieces (advantages, policy objective, critic loss); how its
batches are gathered is a collector (`rlvr.train.collectors`), and the learner is shared.

`get_algorithm(name)` returns the class; `register_algorithm(name, cls)` adds one.
"""

from rlvr.algorithms.base import Algorithm, AlgorithmSettings
from rlvr.algorithms.grpo import GRPO
from rlvr.algorithms.pivotrl import PivotRL
from rlvr.algorithms.ppo import PPO
from rlvr.algorithms.reinforce import REINFORCE
from rlvr.algorithms.rloo import RLOO
from rlvr.algorithms.sao import SAO

_REGISTRY = {"grpo": GRPO, "rloo": RLOO, "reinforce": REINFORCE, "ppo": PPO, "pivotrl": PivotRL,
             "sao": SAO}


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


__all__ = ["Algorithm", "AlgorithmSettings", "GRPO", "RLOO", "REINFORCE", "PPO", "PivotRL", "SAO",
           "get_algorithm",
           "register_algorithm", "registered_algorithms"]
