"""The suite's XLA flags, in one place: conftest sets them for the test processes, and the tests
that launch a process (launch.py, a notebook kernel, a multi-host worker) pass them on with the
device count that process should see.

LLVM optimisation level 0 for the CPU executables: the suite's models are tiny, so compiling
dominates its time (a third less per compile) and running them barely slows. It also keeps a
launched process's compiled programs in the session's compilation cache's key space (the flags
are part of the key), so processes that build the same program share it.
"""

import os

OPT_LEVEL = "--xla_backend_optimization_level=0"
DEVICE_COUNT = "--xla_force_host_platform_device_count"
SUITE_DEVICES = 8  # mesh tests simulate 8 CPU devices (docs/architecture.md §8)


def flags_for(devices: int = 1) -> str:
    """This process's XLA_FLAGS without its device count, with the suite's optimisation level,
    and `devices` simulated CPU devices when more than one (a user's machine has one)."""
    kept = [f for f in os.environ.get("XLA_FLAGS", "").split() if not f.startswith(DEVICE_COUNT)]
    if not any(f.split("=")[0] == OPT_LEVEL.split("=")[0] for f in kept):
        kept.append(OPT_LEVEL)
    if devices > 1:
        kept.append(f"{DEVICE_COUNT}={devices}")
    return " ".join(kept)
