"""Command line of rlvr: train, evaluate or export the run of a config.

    python launch.py --config=configs/quickstart.py --workdir=DIR            # from a checkout
    python -m rlvr.launch --config=gsm8k --workdir=DIR                       # installed package
    rlvr --workdir=DIR --mode=eval                                           # console script

Flags:
  --config=configs/<experiment>.py   an ml_collections config file (one get_config() each);
                                     `FILE:ARG` passes ARG to get_config. A bare name (`gsm8k`,
                                     `quickstart.py`) that is not a file is looked up among the
                                     shipped configs (`rlvr.configs`). Required to train;
                                     --mode=eval / export without it use the run's saved config,
                                     <workdir>/config.json.
  --config.a.b=value                 override any field of the config (or of the saved config),
                                     typed; an unknown key fails, naming it.
  --workdir=DIR                      metrics (JSONL, TensorBoard), checkpoints, plots, export.
                                     Relaunching the same command resumes from the latest
                                     checkpoint there.
  --mode=train|eval|export           train (default; ends with DIR/export/ when
                                     checkpoint.export), eval (DIR/eval.json and
                                     DIR/eval_samples.jsonl for the latest checkpoint in DIR, or
                                     model.init_from when there is none; rlvr.train.modes) or
                                     export (DIR/export/, a Hugging Face folder). eval and export
                                     refuse a DIR without a checkpoint when model.init_from is
                                     empty (there would be only a random policy).

Errors in what the command asks for (a missing or unreadable file, an unknown config key, a bad
value, an invalid config: rlvr.train.config.ConfigError) print one message naming the flag, field
or file and exit with status 2; set RLVR_TRACEBACK=1 to see the traceback instead. Anything else
is a bug and prints its traceback (status 1).

Every algorithm and task kit runs through the one loop (`rlvr.train.loop.run`). Multi-host (TPU
pod slice, GPU cluster): run the same command on every host with `--config.mesh.distributed=True`
(plus coordinator / num_processes / process_id where the platform does not provide them); see
README.
"""

from __future__ import annotations

import os
import sys
from typing import Optional

from absl import app, flags, logging
from ml_collections import config_flags

from rlvr.configs_lookup import add_working_dir, shipped_config, shipped_names

_CONFIG = config_flags.DEFINE_config_file(
    "config", None,
    "Experiment config file (configs/<name>.py, FILE:ARG passes ARG to get_config, or a shipped "
    "config's name). Override any field with --config.a.b=value. Optional with --mode=eval / "
    "export: the run's saved <workdir>/config.json is used.", lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None,
                               "Run directory: metrics, checkpoints, plots, export (required).")
_MODE = flags.DEFINE_enum("mode", "train", ["train", "eval", "export"],
                          "train | eval (held-out evaluation of the latest checkpoint) | export "
                          "(Hugging Face folder).")
flags.mark_flag_as_required("workdir")

EXIT_USER_ERROR = 2
TRACEBACK_ENV = "RLVR_TRACEBACK"
HELP_FLAGS = ("-h", "-?", "--help", "--helpshort", "--helpfull", "--helpxml")
# exceptions of the command-line parsing (loading the config file, applying overrides) that mean
# a bad file, key or value; any other (a NameError in a config file) is code and keeps its traceback
_PARSE_ERRORS = (KeyError, ValueError, TypeError, AttributeError, OSError)


class UsageProblem(Exception):
    """A mistake in the command line itself (a missing flag, a stray argument, a config that is
    no file): reported as a message, like a ConfigError."""


def flag_value(argv: list[str], name: str) -> Optional[str]:
    """The value of `--name=V` or `--name V` in argv (the last one), or None."""
    value = None
    for i, a in enumerate(argv[1:], 1):
        if a.startswith(f"--{name}="):
            value = a[len(name) + 3:]
        elif a == f"--{name}" and i + 1 < len(argv):
            value = argv[i + 1]
    return value


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


def check_config_file(argv: list[str]) -> None:
    """UsageProblem when `--config=` names neither a file nor a shipped config."""
    value = flag_value(argv, "config")
    path = (value or "").partition(":")[0]
    if value is None or os.path.exists(path) or shipped_config(os.path.basename(path)):
        return
    raise UsageProblem(f"--config={value}: no such file {path!r}, and no "
                       f"shipped config of that name (shipped: {', '.join(shipped_names())})")


def saved_config_arg(argv: list[str]) -> list[str]:
    """Without `--config`: for --mode=eval / export, argv with `--config=` set to the run's saved
    config (rlvr.train.saved_config); for training, UsageProblem."""
    if flag_value(argv, "config") is not None or any(a in HELP_FLAGS for a in argv[1:]):
        return argv
    mode, workdir = flag_value(argv, "mode") or "train", flag_value(argv, "workdir")
    if mode not in ("eval", "export") or not workdir:
        if mode == "train":
            raise UsageProblem("--config is required to train (e.g. --config=configs/quickstart.py); "
                               "--mode=eval / export can use the run's saved config instead")
        return argv
    from rlvr.train import saved_config

    path = os.path.abspath(saved_config.saved_config_path(workdir))
    if not os.path.exists(path):
        raise UsageProblem(f"--mode={mode} without --config reads the run's saved config, and "
                           f"{path} does not exist (no run was trained in --workdir={workdir}); "
                           f"check --workdir, or pass --config=<config file>")
    print(f"using the saved config {path}", file=sys.stderr)
    return argv[:1] + [f"--config={os.path.abspath(saved_config.__file__)}:{path}"] + argv[1:]


def parse_flags(argv: list[str]) -> list[str]:
    """absl's flag parsing, a flag error (`--config.train.num_steps=abc`, no --workdir) raised as
    a UsageProblem so that it is reported like every other user error."""
    try:
        return flags.FLAGS(argv)
    except flags.Error as e:
        raise UsageProblem(f"{e} (--help lists the flags)") from None


def _message(e: BaseException) -> str:
    if isinstance(e, KeyError) and e.args:  # str(KeyError) is the repr of its message
        return str(e.args[0])
    return str(e) or type(e).__name__


def _unknown_key(e: BaseException) -> Optional[str]:
    """The message of the KeyError an unknown override key raised (ml_collections chains it
    into an AttributeError), or None."""
    seen = 0
    while e is not None and seen < 5:
        if isinstance(e, KeyError) and e.args:
            return str(e.args[0])
        e, seen = e.__cause__ or e.__context__, seen + 1
    return None


def _override_named(key_message: str, argv: list[str]) -> str:
    """The `--config.` override whose path holds the unknown key, when exactly one does."""
    key = key_message.split("\n")[0].strip("'\"")
    hits = [a for a in argv if a.startswith("--config.")
            and key in a.split("=")[0][len("--config."):].split(".")]
    return hits[0] if len(hits) == 1 else "--config.<override>"


def user_error(e: BaseException, *, parsing: bool, argv: list[str]) -> Optional[str]:
    """The message to print for an error the user can fix, or None for a bug (traceback)."""
    from rlvr.train.config import ConfigError

    if isinstance(e, (UsageProblem, ConfigError)):
        return _message(e)
    if isinstance(e, PermissionError):  # a workdir or file the user may not write or read
        return str(e)
    if parsing and isinstance(e, _PARSE_ERRORS):
        unknown = _unknown_key(e)
        if unknown is not None:
            lines = unknown.split("\n")
            return (f"{_override_named(unknown, argv)}: unknown config key {lines[0]}"
                    + "".join(f"; {x}" for x in lines[1:]))
        config = flag_value(argv, "config")
        return f"--config={config}: {type(e).__name__}: {_message(e)}"
    return None


_parsed = False


def main(argv):
    global _parsed
    _parsed = True
    if len(argv) > 1:
        raise UsageProblem(f"unexpected arguments {argv[1:]}: every argument is a flag, "
                           f"--name=value (--help lists them)")
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


def _help_lists_flags(argv0: str) -> None:
    """`--help` prints this module's docstring and the key flags of the program it ran as (absl
    lists the flags of the module named by argv[0], which is launch.py or a console script)."""
    main_module = sys.modules.get("__main__")
    if main_module is not None:
        main_module.__doc__ = __doc__
    for name in ("config", "workdir", "mode"):
        flags.FLAGS.register_key_flag_for_module(argv0, flags.FLAGS[name])


def run(argv: Optional[list[str]] = None) -> None:
    """Entry point (`python launch.py`, `python -m rlvr.launch`, the `rlvr` console script)."""
    argv = list(sys.argv if argv is None else argv)
    add_working_dir()  # a config file's own imports (`import my_task`), also from the console script
    _help_lists_flags(argv[0])
    try:
        argv = resolve_config_arg(argv)
        check_config_file(argv)
        argv = saved_config_arg(argv)
        app.run(main, argv=argv, flags_parser=parse_flags)
    except SystemExit as e:
        if e.code == 1 and any(a in HELP_FLAGS for a in argv[1:]):
            sys.exit(0)  # absl exits 1 after printing the help that was asked for
        raise
    except Exception as e:  # noqa: BLE001 - sorted into user errors and bugs below
        message = user_error(e, parsing=not _parsed, argv=argv)
        if message is None or os.environ.get(TRACEBACK_ENV, "") not in ("", "0"):
            raise
        print(f"error: {message}\n(set {TRACEBACK_ENV}=1 for the traceback)", file=sys.stderr)
        sys.exit(EXIT_USER_ERROR)


if __name__ == "__main__":
    run()
