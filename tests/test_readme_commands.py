"""Every command of README.md's shell blocks (```bash, ```sh, ```shell) runs, at a tiny size.

Each block is one test; its commands run in order in one process each (a later command of a
block may use what an earlier one wrote, e.g. --mode=eval on the run just trained):

  * `python launch.py ...`, `python -m rlvr.launch ...`, `rlvr ...`: run with the tiny overrides
    of their config (TINY) appended, so a documented command takes seconds;
  * `python -m rlvr.testing tiny-checkpoint PATH`: run as written;
  * the README's placeholder files are replaced by stand-ins built here (the `stand_ins` fixture): a tiny
    random Qwen2 checkpoint saved by transformers with a BPE tokenizer trained by `tokenizers`
    (`rlvr.testing`), small GSM8K parquet files, the README's own counter kit and config; every
    workdir goes under the test's temporary folder;
  * `pip install ...` lines are not run (CI has run them) but the files they name must exist;
  * NOT_RUNNABLE lists each command this test cannot run, with the reason; where such a command
    holds a launch.py command (a TPU pod or Slurm wrapper), its config file must exist and each
    `--config.` key must be a field of the config schema.

A command no rule covers fails the test: a new README command needs a rule here.
"""

from __future__ import annotations

import os
import pathlib
import re
import shlex
import subprocess
import sys

import pytest

from tests._xla_flags import flags_for

ROOT = pathlib.Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
SHELLS = ("bash", "sh", "shell")

# command prefix (argv after `python` is read as the interpreter) -> why this test cannot run it
NOT_RUNNABLE = {
    ("pip", "install"): "installs packages; CI has installed them before the tests run (the "
                        "files it names are checked)",
    ("python", "-m", "pytest"): "the test suite itself: CI runs it (.ci/run)",
    ("python", "-m", "rlvr.verifiers.sandbox"): "installs bubblewrap with apt-get as root; CI "
                                                "runs it before the tests (.ci/run)",
    ("gcloud",): "needs a Cloud TPU pod slice (its launch.py command's config and keys are checked)",
    ("srun",): "needs a Slurm GPU cluster (its launch.py command's config and keys are checked)",
}

LAUNCHERS = (("python", "launch.py"), ("python", "-m", "rlvr.launch"), ("rlvr",))

_SMALL_CHAR_MODEL = ["--config.model.num_layers=1", "--config.model.d_model=16",
                     "--config.model.num_heads=2", "--config.model.num_kv_heads=2",
                     "--config.model.d_ff=32"]
_SHORT = ["--config.train.num_steps=1", "--config.train.progress=False",
          "--config.logging.plot=False", "--config.logging.tensorboard=False",
          "--config.eval.num_tasks=2", "--config.eval.every=0"]
_SMALL_HF = ["--config.model.dtype=float32", "--config.model.remat=False",
             "--config.model.max_seq_len=320", "--config.rollout.prompt_bucket=0",
             "--config.sampling.max_new_tokens=8", "--config.sampling.prompts_per_step=2",
             "--config.algorithm.group_size=2", "--config.train.num_minibatches=1",
             "--config.train.num_microbatches=1"]
_TOOLS = _SHORT + ["--config.model.max_seq_len=640", "--config.rollout.prompt_bucket=0",
                   "--config.sampling.max_new_tokens=16", "--config.sampling.prompts_per_step=2",
                   "--config.rollout.max_turns=2", "--config.task.pool_size=2",
                   "--config.train.num_minibatches=1", "--config.train.num_microbatches=1"]
# tiny overrides appended to a launch command, by its config file (and `:arg`); a command
# without --config (eval / export from the saved config) gets none: the run was already tiny
TINY = {
    "configs/quickstart.py": _SMALL_CHAR_MODEL + _SHORT + [
        "--config.train.sft_steps=0", "--config.sampling.prompts_per_step=2"],
    "configs/gsm8k.py": _SMALL_HF + _SHORT,
    "configs/my_counter.py:pivotrl": _SHORT + ["--config.train.sft_steps=20"],
    "configs/my_counter.py:sao": _SHORT + [
        "--config.train.sft_steps=0", "--config.sampling.prompts_per_step=4",
        "--config.rollout.producer_batch=4", "--config.algorithm.critic_warmup_steps=1"],
    "configs/agent_tools_grpo.py": _TOOLS + ["--config.algorithm.group_size=2"],
    "configs/agent_tools_pivotrl.py": _TOOLS + ["--config.pivot.selection=all",
                                                "--config.algorithm.group_size=2"],
}


# ------------------------------------------------------------------------------ reading README
def _sections(text: str) -> list[tuple[int, str]]:
    return [(m.start(), m.group(1).strip()) for m in re.finditer(r"^##+ (.*)$", text, re.M)]


def shell_blocks(text: str) -> list[tuple[str, str]]:
    """(id, body) of every shell block: id = the section title's slug and the block's number in
    its section."""
    sections = _sections(text)
    out, seen = [], {}
    for m in re.finditer(r"^```(\w+)[ \t]*\n(.*?)^```", text, re.S | re.M):
        if m.group(1) not in SHELLS:
            continue
        title = ([t for pos, t in sections if pos < m.start()] or ["top"])[-1]
        slug = re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")
        seen[slug] = seen.get(slug, 0) + 1
        out.append((f"{slug}-{seen[slug]}", m.group(2)))
    return out


def split_commands(body: str) -> list[str]:
    """The commands of a shell block: continuation lines joined, comments dropped, split at
    newlines, `;` and `&&` outside quotes (a quoted argument may span lines)."""
    body = body.replace("\\\n", " ")
    commands, cur, quote, i = [], [], None, 0
    while i < len(body):
        ch = body[i]
        if quote:
            cur.append(ch)
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
            cur.append(ch)
        elif ch == "#" and (not cur or cur[-1] in " \t\n"):
            while i < len(body) and body[i] != "\n":
                i += 1
            continue
        elif ch == "\n" or ch == ";" or body.startswith("&&", i):
            commands.append("".join(cur))
            cur = []
            i += 2 if ch == "&" else 1
            continue
        else:
            cur.append(ch)
        i += 1
    commands.append("".join(cur))
    return [c.strip() for c in commands if c.strip()]


def _starts(argv: list[str], prefix: tuple[str, ...]) -> bool:
    return tuple(argv[:len(prefix)]) == prefix


def classify(argv: list[str]) -> str:
    """"launch", "tiny-checkpoint", or "not-runnable"; AssertionError for a command no rule
    covers."""
    if any(_starts(argv, p) for p in LAUNCHERS):
        return "launch"
    if _starts(argv, ("python", "-m", "rlvr.testing", "tiny-checkpoint")):
        return "tiny-checkpoint"
    if any(_starts(argv, p) for p in NOT_RUNNABLE):
        return "not-runnable"
    raise AssertionError(f"README command {shlex.join(argv)!r} has no rule in "
                         f"tests/test_readme_commands.py: run it there, or list it in NOT_RUNNABLE "
                         f"with the reason")


def test_the_reader_sees_every_command_and_refuses_unknown_ones():
    """The block reader keeps quoted multi-line arguments whole and drops comments, and a
    command without a rule fails."""
    body = ("# a comment\npython launch.py --config=a.py \\\n  --workdir=runs/x  # note\n"
            "gcloud ssh --command='\n  cd rlvr && python launch.py --config=b.py'\n"
            "pip install -r requirements.txt && python -m pytest -q\n")
    got = split_commands(body)
    assert got == ["python launch.py --config=a.py    --workdir=runs/x",
                   "gcloud ssh --command='\n  cd rlvr && python launch.py --config=b.py'",
                   "pip install -r requirements.txt", "python -m pytest -q"]
    assert [classify(shlex.split(c)) for c in got] == ["launch", "not-runnable", "not-runnable",
                                                       "not-runnable"]
    with pytest.raises(AssertionError, match="has no rule"):
        classify(["curl", "https://example.com"])
    text = "## A\n```bash\necho 1\n```\n```python\nx = 1\n```\n## B\n```sh\necho 2\n```\n"
    assert shell_blocks(text) == [("a-1", "echo 1\n"), ("b-1", "echo 2\n")]


# ------------------------------------------------------------------------------ stand-ins
def _section(text: str, title: str) -> str:
    start = text.index(f"## {title}")
    end = text.index("\n## ", start + 1)
    return text[start:end]


def _gsm8k_parquet(path: pathlib.Path, n: int, offset: int) -> str:
    import pyarrow as pa
    import pyarrow.parquet as pq

    questions = [f"Tom has {a} apples and buys {b} more. How many apples does he have?"
                 for a, b in ((3 + i + offset, 2 + i) for i in range(n))]
    answers = [f"{3 + i + offset}+{2 + i}={5 + 2 * i + offset}\n#### {5 + 2 * i + offset}"
               for i in range(n)]
    pq.write_table(pa.table({"question": questions, "answer": answers}), str(path))
    return str(path)


@pytest.fixture(scope="module")
def stand_ins(tmp_path_factory, tiny_hf_checkpoint):
    """{placeholder regex: replacement} for the README's paths, and the extra PYTHONPATH. The
    checkpoint is the session's tiny transformers-saved Qwen2 (rlvr.testing.build_checkpoint)."""
    d = tmp_path_factory.mktemp("readme")
    checkpoint = tiny_hf_checkpoint
    data = d / "data"
    data.mkdir()
    train = _gsm8k_parquet(data / "train.parquet", 8, 0)
    test = _gsm8k_parquet(data / "test.parquet", 4, 100)
    # the README's counter kit (a module) and its config file
    text = _section(README.read_text(encoding="utf-8"), "Add an environment")
    (d / "my_counter.py").write_text(re.search(r"^```python\n(.*?)^```", text, re.S | re.M).group(1))
    (d / "my_counter_config.py").write_text(
        re.search(r"`configs/my_counter\.py`:\n\n```\n(.*?)^```", text, re.S | re.M).group(1))
    subs = {r"/models/[\w.\-]+": checkpoint,
            r"/data/gsm8k/train\.parquet": train, r"/data/gsm8k/test\.parquet": test,
            r"/tmp/tiny-qwen": str(d / "tiny-qwen"),
            r"(?<![\w/.])configs/my_counter\.py": str(d / "my_counter_config.py"),
            r"(?<![\w/.])runs/": str(d / "runs") + "/"}
    return {"subs": subs, "root": d, "pythonpath": str(d)}


def _substitute(command: str, stand_ins: dict) -> str:
    for pattern, value in stand_ins["subs"].items():
        command = re.sub(pattern, lambda _m, v=value: v, command)
    return command


def _check_paths(argv: list[str], stand_ins: dict) -> None:
    """Every absolute path left in the command is a stand-in or exists."""
    root = str(stand_ins["root"])
    for a in argv:
        for path in re.findall(r"(?<![\w.])(/[\w.\-/]+)", a):
            assert path.startswith(root) or os.path.exists(path), (
                f"README path {path!r} in {shlex.join(argv)!r} has no stand-in in "
                f"tests/test_readme_commands.py (the stand_ins fixture)")


# ------------------------------------------------------------------------------ running
def _tiny_overrides(argv: list[str]) -> list[str]:
    configs = [a[len("--config="):] for a in argv if a.startswith("--config=")]
    if not configs:
        return []
    key = configs[-1]
    for pattern, value in ((r"^.*/my_counter_config\.py", "configs/my_counter.py"),):
        key = re.sub(pattern, value, key)
    assert key in TINY, f"no tiny overrides for --config={key} (add them to TINY)"
    return TINY[key]


def _check_pip(argv: list[str]) -> None:
    args = argv[2:]
    for i, a in enumerate(args):
        if a in ("-r", "--requirement"):
            assert (ROOT / args[i + 1]).is_file(), f"{shlex.join(argv)}: no file {args[i + 1]}"
        elif a == ".":
            assert (ROOT / "pyproject.toml").is_file()


def _check_wrapped_launch(argv: list[str]) -> int:
    """A not-runnable command's inner launch.py commands: config file exists, keys are fields.
    Returns how many it checked."""
    from rlvr.configs import base
    from rlvr.train.config import FREE_FORM, flatten

    fields = set(flatten(base.get_config()))
    checked = 0
    for a in argv:
        for inner in split_commands(a) if "launch.py" in a else []:
            words = inner.split()
            if "launch.py" not in words:
                continue
            checked += 1
            for w in words:
                if w.startswith("--config="):
                    assert (ROOT / w[len("--config="):].split(":")[0]).is_file(), w
                elif w.startswith("--config."):
                    key = w[len("--config."):].split("=")[0]
                    assert key in fields or any(key.startswith(f + ".") for f in FREE_FORM), (
                        f"{w}: not a config field (in {inner!r})")
    return checked


def _run(argv: list[str], stand_ins: dict, block: str) -> subprocess.CompletedProcess:
    if argv[0] == "rlvr":
        argv = ["python", "-m", "rlvr.launch"] + argv[1:]
    cmd = [sys.executable] + argv[1:]
    # a user's machine: one CPU device (the suite simulates 8 for its mesh tests)
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS=flags_for(1),
               PYTHONPATH=os.pathsep.join([stand_ins["pythonpath"], str(ROOT)]))
    env.pop("RLVR_TRACEBACK", None)
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, (f"README block {block}: {shlex.join(argv)} exited "
                               f"{p.returncode}\n{p.stderr[-4000:]}")
    return p


BLOCKS = shell_blocks(README.read_text(encoding="utf-8"))


def _check_outputs(argv: list[str]) -> None:
    """A launch command left what README says it writes in its workdir."""
    workdirs = [a[len("--workdir="):] for a in argv if a.startswith("--workdir=")]
    if not workdirs:  # --help
        return
    workdir = pathlib.Path(workdirs[-1])
    mode = ([a[len("--mode="):] for a in argv if a.startswith("--mode=")] or ["train"])[-1]
    expected = {"train": ["config.json", "metrics.jsonl", "result.json"],
                "eval": ["eval.json", "eval_samples.jsonl"],
                "export": ["export/config.json", "export/rlvr_export.json"]}[mode]
    for name in expected:
        assert (workdir / name).is_file(), f"{shlex.join(argv)} did not write {name}"


@pytest.mark.parametrize("block", [b for b, _ in BLOCKS])
def test_readme_shell_block_runs(block, stand_ins):
    for command in split_commands(dict(BLOCKS)[block]):
        argv = shlex.split(_substitute(command, stand_ins))
        kind = classify(argv)
        if kind == "not-runnable":
            if _starts(argv, ("pip", "install")):
                _check_pip(argv)
            elif _starts(argv, ("gcloud",)) or _starts(argv, ("srun",)):
                assert _check_wrapped_launch(argv) == 1, command
            continue
        _check_paths(argv, stand_ins)
        if kind == "launch":
            argv = argv + _tiny_overrides(argv)
        _run(argv, stand_ins, block)
        if kind == "launch":
            _check_outputs(argv)
        else:
            assert (pathlib.Path(argv[-1]) / "config.json").is_file()
