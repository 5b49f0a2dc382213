"""Command line of rlvr: train, evaluate or export the run of a config.

    python launch.py --config=configs/quickstart.py --workdir=DIR            # from a checkout
    python -m rlvr.launch --config=gsm8k --workdir=DIR                       # installed package
    rlvr --config=gsm8k --workdir=DIR --mode=eval                            # console script

Flags:
  --config=configs/<experiment>.py   an ml_collections config file (one get_config() each); a
                                     bare name (`gsm8k`, `quickstart.py`) that is not a file is
                                     looked up among the shipped configs (the `configs` package).
  --config.a.b=value                 override any field (typed; unknown keys fail).
  --workdir=DIR                      metrics (JSONL, TensorBoard), checkpoints, plots, export.
                                     Relaunching the same command resumes from the latest
                                     checkpoint there.
  --mode=train|eval|export           train (default; ends with DIR/export/ when
                                     checkpoint.export), eval (DIR/eval.json and
                                     DIR/eval_samples.jsonl for the latest checkpoint in DIR, or
                                     model.init_from when there is none; rlvr.train.modes) or
                                     export (DIR/export/, a Hugging Face folder).

Every algorithm and task kit runs through the one loop (`rlvr.train.loop.run`). Multi-host (TPU
pod slice, GPU cluster): run the same command on every host with `--config.mesh.distributed=True`
(plus coordinator / num_processes / process_id where the platform does not provide them); see
README.
"""

from __future__ import annotations

import os
import sys

from absl import app, flags, logging
from ml_collections import config_flags

_CONFIG = config_flags.DEFINE_config_file("config", None, "Experiment config file.", lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Output directory (metrics, checkpoints, plots).")
_MODE = flags.DEFINE_enum("mode", "train", ["train", "eval", "export"],
                          "train | eval (held-out evaluation) | export (Hugging Face folder).")
flags.mark_flags_as_required(["config", "workdir"])


def shipped_config(name: str) -> str | None:
    """The file of the shipped config `name` ("gsm8k" or "gsm8k.py"), or None."""
    import configs

    stem = name[:-3] if name.endswith(".py") else name
    if not stem.replace("_", "").isalnum():
        return None
    path = os.path.join(os.path.dirname(os.path.abspath(configs.__file__)), stem + ".py")
    return path if os.path.exists(path) else None


def resolve_config_arg(argv: list[str]) -> list[str]:
    """Rewrites `--config=NAME` to the shipped config's file when NAME is not a file."""
    out = []
    for a in argv:
        if a.startswith("--config="):
            value = a[len("--config="):]
            path, sep, arg = value.partition(":")
            if not os.path.exists(path) and (found := shipped_config(os.path.basename(path))):
                a = f"--config={found}{sep}{arg}"
        out.append(a)
    return out


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    if not flags.FLAGS["verbosity"].present:  # orbax logs every checkpoint step at INFO
        logging.set_verbosity(logging.WARNING)
    if _MODE.value == "eval":
        from rlvr.train import modes

        modes.evaluate(_CONFIG.value, _WORKDIR.value)
    elif _MODE.value == "export":
        from rlvr.train import modes

        modes.export(_CONFIG.value, _WORKDIR.value)
    else:
        from rlvr.train import loop

        loop.run(_CONFIG.value, _WORKDIR.value)


def run() -> None:
    """Entry point (`python launch.py`, `python -m rlvr.launch`, the `rlvr` console script)."""
    app.run(main, argv=resolve_config_arg(sys.argv))


if __name__ == "__main__":
    run()
