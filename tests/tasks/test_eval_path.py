"""`config.task.eval_path`: a declared field, so the command line the README gives
(`--config.task.eval_path=FILE`) parses, and the held-out set is that file's records; it serves
the dataset-file kits (jsonl: included) and is refused at start, by name, for any other task."""

import json
import os
import re
import shlex
import subprocess
import sys

import pytest
from absl import flags
from ml_collections import config_flags

from rlvr.tasks import files
from rlvr.tasks.kit import get_kit
from rlvr.tasks.loader import TaskFileError
from rlvr.tasks.registry import JsonlSource
from tests._xla_flags import flags_for

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TRAIN = [{"question": "Ann has 3 apples and buys 4. How many?", "answer": "3+4=7\n#### 7"},
         {"question": "Tom had 10 pens and lost 2. How many are left?", "answer": "10-2=8\n#### 8"}]
EVAL = [{"question": "Sue has 2 cats and gets 1 more. How many?", "answer": "#### 3"},
        {"question": "Bo has 9 eggs and eats 4. How many are left?", "answer": "#### 5"}]


def write_jsonl(path, rows):
    with open(path, "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    return str(path)


def parse_command_line(args):
    """The config launch.py builds from `args` (absl flags + ml_collections config_flags, as
    `rlvr.launch` defines them; config_flags reads the overrides from sys.argv)."""
    argv = ["launch.py"] + list(args)
    fv = flags.FlagValues()
    config_flags.DEFINE_config_file("config", None, "config", flag_values=fv, lock_config=True)
    saved = sys.argv
    sys.argv = argv
    try:
        fv(argv)
    finally:
        sys.argv = saved
    return fv.config


def test_the_flag_parses_and_the_eval_split_is_that_file(tmp_path):
    from rlvr.train.setup import build_kit_checked

    train, test = write_jsonl(tmp_path / "train.jsonl", TRAIN), write_jsonl(tmp_path / "t.jsonl", EVAL)
    c = parse_command_line(["--config=configs/gsm8k.py", f"--config.task.names=('gsm8k:{train}',)",
                            f"--config.task.eval_path={test}"])
    assert c.task.eval_path == test
    kit = build_kit_checked(c)
    assert [t.prompt for t in kit.source.eval_set("eval", 8)] == [r["question"] for r in EVAL]
    assert {t.prompt for t in kit.source.sample(8, 0)} == {r["question"] for r in TRAIN}
    # without it the file has no eval records, and the message names the field to set
    kit = build_kit_checked(parse_command_line(["--config=configs/gsm8k.py",
                                                f"--config.task.names=('gsm8k:{train}',)"]))
    with pytest.raises(ValueError, match=r"config\.task\.eval_path"):
        kit.source.eval_set("eval", 8)


def test_the_readme_command_parses():
    """The train command of README's "Train your own checkpoint on your data" section: every
    --config flag is accepted by the command-line parser (the files need not exist to parse)."""
    readme = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    section = readme.split("## Train your own checkpoint on your data", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1).replace("\\\n", " ")
    command = next(line for line in block.splitlines() if line.startswith("python launch.py"))
    args = [a for a in shlex.split(command) if a.startswith("--config")]
    assert any(a.startswith("--config.task.eval_path=") for a in args)
    c = parse_command_line(args)
    assert c.task.eval_path == "/data/gsm8k/test.parquet"
    assert tuple(c.task.names) == ("gsm8k:/data/gsm8k/train.parquet",)


def test_no_document_points_to_the_undeclared_kwarg():
    from rlvr.tasks import registry

    for rel in ("README.md", "configs/gsm8k.py", "configs/base.py", "rlvr/tasks/registry.py"):
        text = open(os.path.join(ROOT, rel), encoding="utf-8").read()
        assert "kwargs.eval_path" not in text, rel
    for doc in (files.__doc__, registry.JsonlSource.__doc__, files.FileSource.__doc__):
        assert "kwargs.eval_path" not in doc
    assert "config.task.eval_path" in files.__doc__
    assert "--config.task.eval_path=" in open(os.path.join(ROOT, "configs/gsm8k.py")).read()


@pytest.mark.parametrize("names", [("arithmetic",), ("countdown",), ("kv_agent",),
                                   ("gsm8k:builtin", "math:builtin")])
def test_eval_path_is_refused_at_start_for_other_tasks(tmp_path, names):
    from rlvr.train.config import ConfigError
    from rlvr.train.setup import build_kit_checked

    test = write_jsonl(tmp_path / "t.jsonl", EVAL)
    c = parse_command_line(["--config=configs/quickstart.py", f"--config.task.names={names!r}",
                            f"--config.task.weights={(1.0,) * len(names)!r}",
                            f"--config.task.eval_path={test}"])
    with pytest.raises(ConfigError, match=r"config\.task\.eval_path=.* applies to one "
                                          r"dataset-file kit") as e:
        build_kit_checked(c)
    assert str(names[0]) in str(e.value)


def test_eval_path_in_task_kwargs_points_to_the_field():
    with pytest.raises(ValueError, match=r"set config\.task\.eval_path instead"):
        files.kit_kwargs(("gsm8k:builtin",), {"eval_path": "x.jsonl"}, "")
    assert files.kit_kwargs(("arithmetic",), {"difficulty": "easy"}, "") == {"difficulty": "easy"}
    with pytest.raises(ValueError, match=r"config\.task\.eval_path='nope.jsonl': no such file"):
        files.kit_kwargs(("gsm8k:builtin",), {}, "nope.jsonl")


def test_jsonl_kit_takes_an_eval_file(tmp_path):
    from rlvr.tasks import builtin

    tasks = [t.to_json() for t in builtin.structured_tasks()[:4]]
    for t in tasks:
        t["public_metadata"] = {k: v for k, v in t["public_metadata"].items() if k != "split"}
    train = write_jsonl(tmp_path / "train.jsonl", tasks[:2])
    test = write_jsonl(tmp_path / "test.jsonl", tasks[2:])
    kit = get_kit(f"jsonl:{train}", eval_path=test)
    assert [t.task_id for t in kit.source.eval_set("eval")] == [t["task_id"] for t in tasks[2:]]
    assert {t.task_id for t in kit.source.sample(6, 0)} == {t["task_id"] for t in tasks[:2]}
    with pytest.raises(ValueError, match=r"config\.task\.eval_path"):
        JsonlSource(train).eval_set("eval")
    # a train task repeated in the eval file is a leak, reported at its line there
    leak = write_jsonl(tmp_path / "leak.jsonl", [tasks[3], tasks[0]])
    with pytest.raises(TaskFileError, match="duplicate") as e:
        JsonlSource(train, eval_path=leak)
    assert e.value.path == leak and [(x.line, x.field) for x in e.value.errors] == [(2, "task_id")]
    # a task in the eval file that names another split is refused
    other = dict(tasks[2], public_metadata={"split": "train"})
    with pytest.raises(TaskFileError, match="split"):
        JsonlSource(train, eval_path=write_jsonl(tmp_path / "o.jsonl", [other]))


@pytest.mark.slow
def test_launch_eval_mode_reads_the_eval_file(tmp_path, tiny_hf_checkpoint):
    """`python launch.py --mode=eval ... --config.task.eval_path=FILE` end to end: the held-out
    samples are the eval file's tasks."""
    train, test = write_jsonl(tmp_path / "train.jsonl", TRAIN), write_jsonl(tmp_path / "t.jsonl", EVAL)
    over = ["--config.model.init_from=" + tiny_hf_checkpoint, "--config.model.dtype=float32",
            "--config.model.remat=False", "--config.model.max_seq_len=160",
            "--config.rollout.prompt_bucket=0", f"--config.task.names=('gsm8k:{train}',)",
            f"--config.task.eval_path={test}", "--config.sampling.max_new_tokens=4",
            "--config.eval.num_tasks=2", "--config.train.progress=False"]
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS=flags_for(1))
    p = subprocess.run([sys.executable, "launch.py", "--config=configs/gsm8k.py",
                        f"--workdir={tmp_path}/run", "--mode=eval"] + over, cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    samples = [json.loads(x) for x in open(tmp_path / "run" / "eval_samples.jsonl")]
    assert [s["prompt"].count(EVAL[i]["question"]) for i, s in enumerate(samples)] == [1, 1]
    assert {s["split"] for s in samples} == {"eval"}
