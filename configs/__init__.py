"""The experiment configs, one `get_config()` per module, sharing `base` (the schema).

In a checkout this is the top-level `configs/` folder (`python launch.py
--config=configs/quickstart.py`); the package installs it as `rlvr.configs` (`rlvr
--config=quickstart`, `from rlvr.configs import quickstart`). The configs import each other as
`rlvr.configs`, which works in both.
"""
