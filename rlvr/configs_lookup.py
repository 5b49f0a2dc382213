"""Where `--config` finds a config file and the modules that file imports.

* A bare name (`quickstart`, `gsm8k.py`) that is not a file names a shipped config, a module of
  `rlvr.configs` (installed with the package; the `configs/` folder of a checkout).
* A config file of the user's own imports the modules of the working directory (`import my_task`,
  `from configs import base` of the user's own `configs` package): `rlvr` puts the working
  directory first on `sys.path`, as `python -m rlvr.launch` does (a console script's own
  `sys.path` lacks it).
"""

from __future__ import annotations

import os
import sys


def configs_folder() -> str:
    """The folder of the shipped configs (`rlvr.configs`)."""
    from rlvr import configs

    return os.path.dirname(os.path.abspath(configs.__file__))


def shipped_names() -> list[str]:
    """The names of the shipped configs, sorted."""
    return sorted(n[:-3] for n in os.listdir(configs_folder())
                  if n.endswith(".py") and not n.startswith("_"))


def shipped_config(name: str) -> str | None:
    """The file of the shipped config `name` ("gsm8k" or "gsm8k.py"), or None."""
    stem = name[:-3] if name.endswith(".py") else name
    if not stem.replace("_", "").isalnum():
        return None
    path = os.path.join(configs_folder(), stem + ".py")
    return path if os.path.exists(path) else None


def add_working_dir() -> bool:
    """Puts the working directory first on sys.path unless it is there already (as `python -m`
    does); True when it added it."""
    cwd = os.getcwd()
    if any(os.path.abspath(p or ".") == cwd for p in sys.path):
        return False
    sys.path.insert(0, cwd)
    return True
