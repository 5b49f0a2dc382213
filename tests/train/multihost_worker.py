"""Child process of tests/train/test_multihost.py: runs a tiny training run and exits.

    python -m tests.train.multihost_worker WORKDIR [PORT PROCESS_ID NUM_PROCESSES]

The device count comes from XLA_FLAGS in the environment (set by the test). With PORT the
process joins a `jax.distributed` job on 127.0.0.1 through the config's mesh fields.
"""

import sys

import jax

from rlvr.train import loop
from tests.train.tiny import tiny_config


def config(**mesh):
    c = tiny_config(train__num_steps=2, train__num_minibatches=2, eval__every=0, eval__num_tasks=0,
                    checkpoint__every=0, sampling__prompts_per_step=4,
                    **{f"mesh__{k}": v for k, v in mesh.items()})
    c.mesh.data = -1
    return c


def main(argv):
    workdir = argv[1]
    if len(argv) > 2:
        port, pid, n = argv[2], int(argv[3]), int(argv[4])
        c = config(distributed=True, coordinator=f"127.0.0.1:{port}", num_processes=n, process_id=pid)
    else:
        c = config()
    trainer = loop.Trainer(c, workdir)
    loop.train(trainer)
    print("DEVICES", jax.device_count(), "PROCESSES", jax.process_count(), flush=True)
    if len(argv) > 2:
        jax.distributed.shutdown()


if __name__ == "__main__":
    main(sys.argv)
