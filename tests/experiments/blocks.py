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


def assert_nothing_written(main, tmp_path, arm: str, match: str, *, cache: bool = True) -> None:
    """A report script's `main`, run as on a fresh clone (a one-run block of `arm`, no study cache,
    no work folders), exits with a message matching `match` and writes no report."""
    import pytest

    out = tmp_path / "out"
    argv = ["--records", one_run_block(str(tmp_path / "records"), arm), "--workdir",
            str(tmp_path / "work"), "--out", str(out)]
    with pytest.raises(SystemExit, match=match):
        main(argv + (["--cache", str(tmp_path / "cache")] if cache else []))
    assert not out.exists()


def warm_folder(folder, spec: dict) -> str:
    """A warm-start folder as `runner.sft_to_folder` writes it at `folder` (a ``pathlib.Path``):
    a random quick-scale policy and a warm.json keeping `spec`. Returns its path."""
    import json

    from experiments.study import arms
    from rlvr.models.hf import save_pretrained
    from rlvr.train.setup import build_kit_checked, build_policy, build_tokenizer

    c = arms.base_config("grpo", 0, shop_local.local_scale("quick", "local"))
    tok = build_tokenizer(c, build_kit_checked(c))
    save_pretrained(build_policy(c, tok.vocab_size), str(folder))
    (folder / "warm.json").write_text(json.dumps({"spec": spec, "sft_nll": 0.5}))
    return str(folder)
