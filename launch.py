"""Train a policy with verifiable rewards: `python launch.py --config=configs/quickstart.py --workdir=DIR`.

Flags:
  --config=configs/<experiment>.py   an ml_collections config file (one get_config() each).
  --config.a.b=value                 override any field (typed; unknown keys fail).
  --workdir=DIR                      metrics (JSONL, TensorBoard), checkpoints, plots. Relaunching
                                     the same command resumes from the latest checkpoint there.

Every algorithm and task kit runs through the one loop (`rlvr.train.loop.run`). Multi-host (TPU
pod slice, GPU cluster): run the same command on every host with `--config.mesh.distributed=True`
(plus coordinator / num_processes / process_id where the platform does not provide them); see
README.
"""

from __future__ import annotations

from absl import app, flags, logging
from ml_collections import config_flags

_CONFIG = config_flags.DEFINE_config_file("config", None, "Experiment config file.", lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Output directory (metrics, checkpoints, plots).")
flags.mark_flags_as_required(["config", "workdir"])


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    if not flags.FLAGS["verbosity"].present:  # orbax logs every checkpoint step at INFO
        logging.set_verbosity(logging.WARNING)
    from rlvr.train import loop

    loop.run(_CONFIG.value, _WORKDIR.value)


if __name__ == "__main__":
    app.run(main)
