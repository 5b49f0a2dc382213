"""Test-wide setup: CPU only, 8 simulated devices for mesh tests (see docs/architecture.md §8), compiles made
cheap (LLVM -O0, one persistent compilation cache per session).

The environment variables must be set before JAX is imported anywhere, so they live here.
Single-device code is unaffected: unsharded arrays live on device 0.
"""
import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")
# 8 simulated devices and LLVM optimisation level 0 (tests/_xla_flags.py), each unless set already
from tests._xla_flags import DEVICE_COUNT, OPT_LEVEL, SUITE_DEVICES  # noqa: E402

for _flag in (f"{DEVICE_COUNT}={SUITE_DEVICES}", OPT_LEVEL):
    if _flag.split("=")[0] not in os.environ.get("XLA_FLAGS", ""):
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + _flag).strip()
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# One persistent XLA compilation cache per test session, shared by the xdist workers (they inherit
# the controller's environment) and the processes tests launch (launch.py, notebook kernels): the
# same computation (a tiny model's train step, built again by many tests) compiles once. Every
# compile is cached, however quick; the directory is removed when the session ends, and those of
# killed sessions (their process gone) when the next one starts.
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
    from tests._xla_cache import make_cache_dir, remove_stale_cache_dirs

    remove_stale_cache_dirs()
    os.environ["JAX_COMPILATION_CACHE_DIR"] = make_cache_dir()
    os.environ["RLVR_TESTS_OWN_XLA_CACHE"] = os.environ["JAX_COMPILATION_CACHE_DIR"]
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")


import pytest  # noqa: E402

# xdist workers ignore the SIGINT execnet sends a worker still cleaning up (tests/_quiet_shutdown.py)
from tests._quiet_shutdown import pytest_sessionfinish  # noqa: E402, F401


def pytest_unconfigure(config):
    """The process that made the session's compilation cache (not an xdist worker) removes it."""
    own = os.environ.get("RLVR_TESTS_OWN_XLA_CACHE")
    if own and not hasattr(config, "workerinput") and own == os.environ.get("JAX_COMPILATION_CACHE_DIR"):
        import shutil

        shutil.rmtree(own, ignore_errors=True)


@pytest.fixture(scope="session")
def tiny_hf_checkpoint(tmp_path_factory):
    """A tiny random Qwen2 checkpoint saved by transformers with a BPE tokenizer and chat
    template (rlvr.testing.build_checkpoint), built once per session."""
    from rlvr.testing import build_checkpoint

    return build_checkpoint(str(tmp_path_factory.mktemp("tiny-qwen")), saver="transformers")


@pytest.fixture(scope="session")
def tiny_tools_checkpoint(tmp_path_factory):
    """The tiny random Qwen2 checkpoint with the shipped tool-aware chat template (tool kits),
    built once per session."""
    from rlvr.testing import build_checkpoint

    return build_checkpoint(str(tmp_path_factory.mktemp("tiny-qwen-tools")), saver="rlvr",
                            tools=True)
