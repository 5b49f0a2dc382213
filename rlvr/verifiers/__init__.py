"""rlvr.verifiers: Verdicts, verifiers, reward composition, reward cache, verification pool.

Names are imported lazily (PEP 562) so that a worker process importing one verifier does not
pay for the others (compose pulls in JAX).
"""

import importlib

_EXPORTS = {
    "Verdict": "rlvr.records.verdict", "DECISIONS": "rlvr.records.verdict",
    "TRIALS": "rlvr.records.verdict", "TIMEOUT_CLASSES": "rlvr.records.verdict",
    "env_error": "rlvr.records.verdict",
    "Verifier": "base", "VerifierProtocol": "base",
    "MathVerifier": "math", "extract_final_answers": "math",
    "CodeVerifier": "code", "CodeTestsError": "code", "parse_code_reference": "code",
    "SandboxLimits": "sandbox", "SandboxResult": "sandbox", "run_sandboxed": "sandbox",
    "StructuredVerifier": "structured",
    "AgentVerifier": "agent", "AgentPredicates": "agent", "Goal": "agent",
    "Invariant": "agent", "Minefield": "agent", "PolicyRule": "agent", "Transition": "agent",
    "ResponseCheck": "agent",
    "RewardConfig": "compose", "compose_reward": "compose", "compose_rewards": "compose",
    "shaped_rewards": "compose",
    "RewardCache": "cache", "cache_key": "cache",
    "VerificationPool": "pool", "Executor": "pool", "InlineExecutor": "pool",
    "ThreadExecutor": "pool", "ProcessExecutor": "pool",
    "default_verifier_for_task_type": "routing", "default_verifier_class": "routing",
    "DEFAULT_VERIFIERS": "routing",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    mod = _EXPORTS.get(name)
    if mod is None:
        raise AttributeError(f"module 'rlvr.verifiers' has no attribute {name!r}")
    module = mod if mod.startswith("rlvr.") else f"rlvr.verifiers.{mod}"
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__():
    return __all__
