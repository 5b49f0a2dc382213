"""Config fields of Hugging Face runs: tokenizer.kind/path/chat_template/system_prompt/
instruction, eval.greedy, checkpoint.export, rollout.prompt_bucket — validated where they
enter, refused where they do not apply, and start-up errors that name the field."""

import pytest

from configs import base, gsm8k, quickstart
from rlvr.launch import resolve_config_arg, shipped_config
from rlvr.train.config import ConfigError, inapplicable, validate_config
from rlvr.train.setup import build_run


def test_tokenizer_kind_choices_and_char_refuses_hf_fields():
    c = quickstart.get_config()
    c.tokenizer.kind = "sentencepiece"
    with pytest.raises(ConfigError, match=r"tokenizer.kind must be one of \('char', 'hf'\)"):
        validate_config(c)
    for field, value in (("path", "/x"), ("chat_template", True), ("instruction", "Box it."),
                         ("system_prompt", "Be brief.")):
        c = quickstart.get_config()
        setattr(c.tokenizer, field, value)
        with pytest.raises(ConfigError, match=f"tokenizer.{field} .*does not apply: tokenizer.kind is 'char'"):
            validate_config(c)


def test_inapplicable_hf_fields():
    c = gsm8k.get_config()
    na = inapplicable(c)
    assert "tokenizer.path" not in na and "tokenizer.chat_template" not in na
    assert "tokenizer.system_prompt" not in na  # chat_template is on
    assert {"eval.samples_per_task", "eval.pass_k", "eval.temperature"} <= set(na)  # greedy
    c.tokenizer.chat_template = False
    assert "tokenizer.system_prompt" in inapplicable(c)
    assert "tokenizer.path" in inapplicable(base.get_config(), strict_only=True)


def test_greedy_eval_skips_the_pass_k_check():
    c = quickstart.get_config()
    c.eval.greedy, c.eval.samples_per_task = True, 1  # pass_k (1, 4) is not used
    validate_config(c)
    c.eval.greedy = False
    with pytest.raises(ConfigError, match="pass_k"):
        validate_config(c)


def test_hf_start_up_errors_name_the_field(tmp_path, tiny_hf_checkpoint):
    c = gsm8k.get_config()
    validate_config(c)
    with pytest.raises(ConfigError, match="model.init_from to a Hugging Face checkpoint"):
        build_run(c, str(tmp_path))
    c.model.init_from = str(tmp_path / "missing")
    with pytest.raises(ConfigError, match="config.model.init_from="):
        build_run(c, str(tmp_path))
    c.model.init_from = tiny_hf_checkpoint
    c.model.max_seq_len = 4096  # the checkpoint has 1024 positions
    with pytest.raises(ConfigError, match="max_position_embeddings"):
        build_run(c, str(tmp_path))
    c.model.max_seq_len, c.sampling.max_new_tokens = 120, 8  # 112 prompt tokens: some are longer
    with pytest.raises(ConfigError, match=r"prompt\(s\) of 'gsm8k:builtin' have more tokens"):
        build_run(c, str(tmp_path))
    c = gsm8k.get_config()
    c.model.init_from = tiny_hf_checkpoint
    c.train.sft_steps = 2
    c.task.names = ("code:builtin",)
    with pytest.raises(ConfigError, match="has no demonstrations"):
        build_run(c, str(tmp_path))


def test_prompt_bucket_default_keeps_the_quickstart_shape():
    """The default bucket (64) is capped at max_seq_len - max_new_tokens, so the quickstart's
    prompts keep their one padded length (12 - 5 = 7)."""
    c = quickstart.get_config()
    assert c.rollout.prompt_bucket == 64
    step = c.rollout.prompt_bucket
    prompt_len = c.model.max_seq_len - c.sampling.max_new_tokens
    assert tuple(range(step, prompt_len, step)) + (prompt_len,) == (7,)


def test_launch_resolves_shipped_config_names():
    path = shipped_config("gsm8k")
    assert path and path.endswith("configs/gsm8k.py")
    assert resolve_config_arg(["x", "--config=gsm8k", "--workdir=w"]) == ["x", f"--config={path}", "--workdir=w"]
    assert resolve_config_arg(["--config=quickstart.py"])[0].endswith("configs/quickstart.py")
    assert resolve_config_arg(["--config=nope"]) == ["--config=nope"]
