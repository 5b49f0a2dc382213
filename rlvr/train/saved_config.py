"""The config a run saved (`<workdir>/config.json`), read back as a config.

`launch.py --mode=eval` / `--mode=export` without `--config` load the run's own config through
this file: it is also an ml_collections config file (`get_config(path)`), so `--config.a.b=v`
overrides apply on top of the saved values exactly as they do on top of a config file.

The JSON holds every field of the schema (`configs/base.py`); lists become tuples where the
schema has a tuple, and a field the schema does not know (a config saved by another version of
rlvr) is refused by name.
"""

from __future__ import annotations

import json
import os

import ml_collections

from rlvr.train.config import FREE_FORM, ConfigError

FILENAME = "config.json"


def saved_config_path(workdir: str) -> str:
    """`<workdir>/config.json`, where a training run saves its resolved config."""
    return os.path.join(workdir, FILENAME)


def _tuples(value):
    """JSON lists as tuples, at every depth."""
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


def _as_schema(value, default):
    """`value` read from JSON, in the type the schema's `default` has (tuples for lists)."""
    return _tuples(value) if isinstance(default, tuple) else value


def _fill(target: ml_collections.ConfigDict, data: dict, path: str, prefix: str) -> None:
    for k, v in data.items():
        key = prefix + k
        if k not in target:
            raise ConfigError(f"{path}: field {key!r} is not a field of this version's config "
                              f"schema (configs/base.py); evaluate with --config=<config file> instead")
        cur = target[k]
        if key in FREE_FORM:
            if not isinstance(v, dict):
                raise ConfigError(f"{path}: field {key!r} must be a JSON object, got {v!r}")
            with target.ignore_type():
                target[k] = ml_collections.ConfigDict(v)
        elif isinstance(cur, ml_collections.ConfigDict):
            if not isinstance(v, dict):
                raise ConfigError(f"{path}: field {key!r} must be a JSON object, got {v!r}")
            _fill(cur, v, path, key + ".")
        else:
            try:
                target[k] = _as_schema(v, cur)
            except (TypeError, ValueError) as e:
                raise ConfigError(f"{path}: field {key!r} = {v!r}: {e}") from None


def load_saved_config(path: str) -> ml_collections.ConfigDict:
    """The config saved at `path` (a run's config.json) on the schema of `configs/base.py`.

    Raises:
        ConfigError: the file is missing or not JSON, or a field is unknown or of the wrong type.
    """
    from rlvr.configs import base

    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except OSError as e:
        raise ConfigError(f"cannot read the saved config {path}: {e.strerror}") from None
    except ValueError as e:
        raise ConfigError(f"the saved config {path} is not valid JSON: {e}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"the saved config {path} must hold a JSON object")
    config = base.get_config()
    _fill(config, data, path, "")
    return config


def get_config(path: str) -> ml_collections.ConfigDict:
    """Config-file entry point (`--config=<this file>:<workdir>/config.json`)."""
    return load_saved_config(path)
