"""Child process of tests/train/test_multihost.py: runs a tiny training run and exits.

    python -m tests.train.multihost_worker KIND WORKDIR [PORT PROCESS_ID NUM_PROCESSES]

KIND: "text" (single-turn GRPO, the quickstart task, groups collector), "agent" (full-trajectory
GRPO on the multi-turn KV agent kit, groups collector) or "pivot" (PivotRL on the agent kit, pivots
collector), optionally followed by ":STEPS" (default 2 training steps).

The device count comes from XLA_FLAGS in the environment (set by the test). With PORT the
process joins a `jax.distributed` job on 127.0.0.1 through the config's mesh fields.
"""

import sys

import jax

from tests.train.tiny import run_tiny, tiny_agent_config, tiny_config


def config(kind, **mesh):
    kind, _, steps = kind.partition(":")
    over = dict(train__num_steps=int(steps or 2), train__num_minibatches=2, eval__num_tasks=0,
                checkpoint__every=0, sampling__prompts_per_step=4,
                **{f"mesh__{k}": v for k, v in mesh.items()})
    if kind == "text":
        c = tiny_config(eval__every=0, **over)
    else:
        c = tiny_agent_config({"agent": "agent_grpo", "pivot": "pivotrl"}[kind], **over)
    c.mesh.data = -1
    return c


def main(argv):
    kind, workdir = argv[1], argv[2]
    if len(argv) > 3:
        port, pid, n = argv[3], int(argv[4]), int(argv[5])
        c = config(kind, distributed=True, coordinator=f"127.0.0.1:{port}", num_processes=n,
                   process_id=pid)
    else:
        c = config(kind)
    run_tiny(c, workdir)
    print("DEVICES", jax.device_count(), "PROCESSES", jax.process_count(), flush=True)
    if len(argv) > 3:
        jax.distributed.shutdown()


if __name__ == "__main__":
    main(sys.argv)
