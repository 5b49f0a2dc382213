"""Block folders for the study's tests: the smallest records folder a report script reads."""

from experiments.study import shop_local
from experiments.study.records import write_record


def one_run_block(folder: str, arm: str) -> str:
    """A full-scale local block's records folder holding one run of ``arm`` (warm start 0, RL
    seed 0) whose record has a key and one row, nothing in any cache. Returns ``folder``."""
    shop_local.write_block_meta(folder, {"scale": "full", "difficulty": "local"}, {})
    write_record(shop_local.record_path(folder, arm, shop_local.BlockSeeds(0, 0)),
                 {"key": "k0", "config": {}, "rows": [{"step": 0}]})
    return folder
