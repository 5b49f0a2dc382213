"""Test-wide setup: CPU only, 8 simulated devices for mesh tests (see FACTS.md).

The environment variables must be set before JAX is imported anywhere, so they live here.
Single-device code is unaffected: unsharded arrays live on device 0.
"""
import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")
_flag = "--xla_force_host_platform_device_count=8"
if _flag.split("=")[0] not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + _flag).strip()
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


import pytest  # noqa: E402


@pytest.fixture(scope="session")
def tiny_hf_checkpoint(tmp_path_factory):
    """A tiny random Qwen2 checkpoint saved by transformers with a BPE tokenizer and chat
    template (rlvr.testing.build_checkpoint), built once per session."""
    from rlvr.testing import build_checkpoint

    return build_checkpoint(str(tmp_path_factory.mktemp("tiny-qwen")), saver="transformers")
