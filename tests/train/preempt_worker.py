"""Child process of tests/train/test_run_safety.py: one process of a 2-process tiny run that
runs until a signal stops it.

    python -m tests.train.preempt_worker WORKDIR PORT PROCESS_ID NUM_PROCESSES
"""

import sys

from tests.train.tiny import run_tiny, tiny_config


def main(argv):
    workdir, port, pid, n = argv[1], argv[2], int(argv[3]), int(argv[4])
    c = tiny_config(train__num_steps=500, train__sft_steps=0, eval__num_tasks=0,
                    checkpoint__every=400, checkpoint__export=False, sampling__prompts_per_step=4,
                    mesh__distributed=True, mesh__coordinator=f"127.0.0.1:{port}",
                    mesh__num_processes=n, mesh__process_id=pid)
    c.mesh.data = -1
    run_tiny(c, workdir)


if __name__ == "__main__":
    main(sys.argv)
