import pytest


@pytest.fixture(scope="session")
def chat_tokenizer(tmp_path_factory):
    """The tiny byte-level BPE tokenizer with the shipped Qwen2.5-style tool template."""
    from rlvr.agents import qwen_tools_template
    from rlvr.testing import build_tokenizer

    tok = build_tokenizer(str(tmp_path_factory.mktemp("tok")), vocab_size=512)
    tok.chat_template = qwen_tools_template()
    return tok
