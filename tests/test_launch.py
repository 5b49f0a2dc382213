"""End-to-end smoke test of launch.py with the quickstart config at a tiny size."""

import json
import os
import shutil
import subprocess
import sys

from tests._xla_flags import flags_for

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_launch_quickstart_tiny(tmp_path):
    over = ["--config.model.num_layers=1", "--config.model.d_model=16", "--config.model.num_heads=2",
            "--config.model.num_kv_heads=2", "--config.model.d_ff=32", "--config.train.num_steps=2",
            "--config.train.sft_steps=2", "--config.sampling.prompts_per_step=2",
            "--config.eval.num_tasks=4", "--config.eval.every=1", "--config.checkpoint.every=1",
            "--config.train.progress=False"]
    env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS=flags_for(1))
    cmd = [sys.executable, "launch.py", "--config=configs/quickstart.py", f"--workdir={tmp_path}"] + over
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "| success |" in p.stdout
    rows = [json.loads(l) for l in open(tmp_path / "metrics.jsonl")]
    assert {r["step"] for r in rows} >= {0, 1, 2}
    last = [r for r in rows if r["step"] == 2][-1]
    for k in ("reward/mean", "policy/pg_loss", "policy/entropy", "eval/success",
              "time/generate_s", "time/verify_s", "time/learn_s", "throughput/tokens_per_s",
              "groups/mixed_frac", "length/mean"):
        assert k in last, k
    assert (tmp_path / "curves.png").exists() and (tmp_path / "before_after.md").exists()
    assert os.path.isdir(tmp_path / "tb")
    # unknown override fails at start, naming the key
    bad = subprocess.run(cmd[:4] + ["--config.algorithm.clip_hihg=0.3"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode != 0 and "clip_hihg" in bad.stderr

    # eval and export from the run's saved config (no --config); overrides apply on top of it
    ev = subprocess.run([sys.executable, "launch.py", f"--workdir={tmp_path}", "--mode=eval",
                         "--config.eval.num_tasks=3"], cwd=ROOT, env=env, capture_output=True,
                        text=True, timeout=300)
    assert ev.returncode == 0, ev.stderr[-3000:]
    assert f"using the saved config {tmp_path / 'config.json'}" in ev.stderr
    saved = json.load(open(tmp_path / "eval.json"))
    assert saved["origin"]["checkpoint_step"] == 2 and saved["num_tasks"] == 3
    assert saved["num_samples"] == 3 * 8  # the run's own eval.samples_per_task
    shutil.rmtree(tmp_path / "export", ignore_errors=True)  # the training run's own export
    ex = subprocess.run([sys.executable, "launch.py", f"--workdir={tmp_path}", "--mode=export"],
                        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert ex.returncode == 0, ex.stderr[-3000:]
    assert json.load(open(tmp_path / "export" / "rlvr_export.json"))["origin"]["checkpoint_step"] == 2

    # a mistyped workdir: no saved config, or (with --config) no checkpoint and no init_from
    typo = tmp_path / "typo"
    for args in ([], ["--config=configs/quickstart.py"]):
        for mode in ("eval", "export"):
            p = subprocess.run([sys.executable, "launch.py", f"--workdir={typo}", f"--mode={mode}"]
                               + args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
            assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr[-3000:]
            assert str(typo) in p.stderr
            assert ("config.json does not exist" if not args else "no checkpoint found") in p.stderr
    assert not typo.exists()


def _launch(args, env=None, timeout=300):
    base = {k: v for k, v in os.environ.items() if k != "RLVR_TRACEBACK"}
    return subprocess.run([sys.executable, "launch.py"] + args, cwd=ROOT,
                          env=dict(base, JAX_PLATFORMS="cpu", **(env or {})),
                          capture_output=True, text=True, timeout=timeout)


def test_help_lists_the_flags_and_the_override_syntax():
    p = _launch(["--help"])
    assert p.returncode == 0, p.stderr
    for text in ("--config:", "--workdir:", "--mode: <train|eval|export>", "--config.a.b=value",
                 "RLVR_TRACEBACK", "config.json"):
        assert text in p.stdout, text


# (extra args, text the message must hold); every case is a mistake in the command, not a bug
USER_ERRORS = {
    "unknown key": (["--config=configs/quickstart.py", "--config.algorithm.clip_hihg=0.3"],
                    ["--config.algorithm.clip_hihg=0.3", "unknown config key 'clip_hihg'",
                     "clip_high"]),
    "bad value type": (["--config=configs/quickstart.py", "--config.train.num_steps=abc"],
                       ["--config.train.num_steps=abc", "abc"]),
    "invalid value": (["--config=configs/quickstart.py", "--config.train.num_steps=-1"],
                      ["config.train.num_steps must be >= 0, got -1"]),
    "missing config file": (["--config=configs/no_such_config.py"],
                            ["--config=configs/no_such_config.py", "no such file", "quickstart"]),
    "missing workdir": (["--config=configs/quickstart.py", "--no-workdir"], ["--workdir"]),
    "missing config": ([], ["--config is required to train"]),
    "stray arguments": (["--config=configs/quickstart.py", "<same", "overrides>"],
                        ["unexpected arguments ['<same', 'overrides>']"]),
    "missing checkpoint folder": (["--config=configs/gsm8k.py",
                                   "--config.model.init_from=/no/such/model"],
                                  ["config.model.init_from='/no/such/model'"]),
    "missing task file": (["--config=configs/quickstart.py", "--config.task.kwargs={}",
                           "--config.task.names=('gsm8k:/no/such/train.jsonl',)"],
                          ["/no/such/train.jsonl"]),
}


def test_user_errors_print_a_message_and_exit_2(tmp_path):
    """Each mistake prints one short message naming the flag, field or file, without a
    traceback, and exits with status 2; RLVR_TRACEBACK=1 brings the traceback back."""
    for name, (args, texts) in USER_ERRORS.items():
        args = [a for a in args if a != "--no-workdir"] + (
            [] if "--no-workdir" in args else [f"--workdir={tmp_path / 'wd'}"])
        p = _launch(args)
        assert p.returncode == 2, (name, p.returncode, p.stderr[-2000:])
        assert "Traceback" not in p.stderr, (name, p.stderr[-2000:])
        assert len(p.stderr.strip().splitlines()) <= 4, (name, p.stderr)
        for text in texts:
            assert text in p.stderr, (name, text, p.stderr)
    args, _ = USER_ERRORS["invalid value"]
    p = _launch(args + [f"--workdir={tmp_path / 'wd'}"], env={"RLVR_TRACEBACK": "1"})
    assert p.returncode != 0 and "Traceback" in p.stderr and "ConfigError" in p.stderr


def test_bugs_keep_their_traceback():
    """Only mistakes in the command are reported as messages: an error raised while running
    (other than a ConfigError) or code failing in a config file is a bug, shown in full."""
    from rlvr import launch
    from rlvr.train.config import ConfigError

    assert launch.user_error(ConfigError("config.x must be > 0"), parsing=False, argv=[]) \
        == "config.x must be > 0"
    assert launch.user_error(ValueError("shape mismatch"), parsing=False, argv=[]) is None
    assert launch.user_error(KeyError("k"), parsing=False, argv=[]) is None
    assert launch.user_error(NameError("undefined"), parsing=True, argv=[]) is None
    assert "/run/dir" in launch.user_error(PermissionError(13, "Permission denied", "/run/dir"),
                                           parsing=False, argv=[])
    assert "bad" in launch.user_error(ValueError("bad"), parsing=True, argv=["x", "--config=c.py"])


def test_bug_in_a_config_file_shows_its_traceback(tmp_path):
    cfg = tmp_path / "broken.py"
    cfg.write_text("def get_config():\n    return undefined_name\n")
    p = _launch([f"--config={cfg}", f"--workdir={tmp_path / 'wd'}"])
    assert p.returncode == 1 and "Traceback" in p.stderr and "undefined_name" in p.stderr
