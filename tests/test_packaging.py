"""The installed package, used from outside a checkout: the shipped configs live inside `rlvr`
(`rlvr.configs`), so a user's own `configs` package and config files next to their command work
with `rlvr --config=...` and `python -m rlvr.launch`.

One install per test session (tests/_install.py: a copy of the checkout, `pip install --target`);
every command runs from a temporary project folder with only that install on PYTHONPATH.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

from tests._install import ROOT, build_sdist, copy_checkout, pip_install

BAD_KEY = "no_such_field"  # an override that stops the command right after the config loads


@pytest.fixture(scope="session")
def installed(tmp_path_factory) -> pathlib.Path:
    """The folder the package is installed into."""
    src = copy_checkout(tmp_path_factory.mktemp("rlvr-src"))
    return pip_install(src, tmp_path_factory.mktemp("rlvr-installed"))


@pytest.fixture
def project(tmp_path) -> pathlib.Path:
    """A user's project: their own `configs` package (whose base has no get_config), a module of
    theirs and a config file importing both, next to where they run the command."""
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "__init__.py").write_text("")
    (tmp_path / "configs" / "base.py").write_text("SEED = 5\n")
    (tmp_path / "my_task.py").write_text("OFFSET = 2\n")
    (tmp_path / "my_cfg.py").write_text(textwrap.dedent("""\
        import my_task
        from configs import base as my_base
        from rlvr.configs import quickstart


        def get_config():
            c = quickstart.get_config()
            c.seed = my_base.SEED + my_task.OFFSET
            print("user config loaded, seed", c.seed, flush=True)
            return c
        """))
    return tmp_path


def run_outside(installed: pathlib.Path, cwd: pathlib.Path, args: list[str], *,
                console_script: bool) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(PYTHONPATH=str(installed), JAX_PLATFORMS="cpu")
    cmd = ([str(installed / "bin" / "rlvr")] if console_script
           else [sys.executable, "-m", "rlvr.launch"])
    return subprocess.run(cmd + args, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)


def test_wheel_installs_the_configs_inside_the_package(installed):
    assert not (installed / "configs").exists(), "a top-level `configs` shadows the user's own"
    shipped = {p.name for p in (installed / "rlvr" / "configs").glob("*.py")}
    assert {p.name for p in (ROOT / "configs").glob("*.py")} <= shipped
    for init in (ROOT / "rlvr").rglob("__init__.py"):  # every subpackage is in the wheel
        assert (installed / init.relative_to(ROOT)).exists(), init
    record = next(installed.glob("rlvr-*.dist-info")).joinpath("RECORD").read_text()
    assert "rlvr/configs/quickstart.py" in record and "\nconfigs/" not in "\n" + record
    # the package's __init__ is configs/__init__.py, not the checkout's rlvr/configs/__init__.py
    assert (installed / "rlvr" / "configs" / "__init__.py").read_text() == \
        (ROOT / "configs" / "__init__.py").read_text()


def test_wheel_ships_the_agent_template_and_trajectories(installed):
    for rel in ("rlvr/agents/templates/qwen_tools.jinja", "rlvr/agents/data/kv_trajectories.jsonl"):
        assert (installed / rel).read_text() == (ROOT / rel).read_text(), rel


def test_source_distribution_installs_the_configs(tmp_path):
    """pip install of an sdist (a wheel built from it) ships rlvr.configs the same way."""
    sdist = build_sdist(copy_checkout(tmp_path / "src"), tmp_path / "dist")
    installed = pip_install(sdist, tmp_path / "installed")
    assert (installed / "rlvr" / "configs" / "__init__.py").read_text() == \
        (ROOT / "configs" / "__init__.py").read_text()
    assert not (installed / "configs").exists()
    env = dict(os.environ, PYTHONPATH=str(installed))
    p = subprocess.run([sys.executable, "-c", "from rlvr.configs import quickstart, sao; "
                        "print(quickstart.get_config().algorithm.name, sao.get_config().algorithm.name)"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert p.stdout.split() == ["grpo", "sao"], p.stderr[-3000:]


def test_installed_launch_help_outside_a_checkout(installed, project):
    p = run_outside(installed, project, ["--help"], console_script=False)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "--config" in p.stdout + p.stderr
    env = dict(os.environ, PYTHONPATH=str(installed))
    where = subprocess.run([sys.executable, "-c", "import rlvr.configs as c; print(c.__file__)"],
                           cwd=project, env=env, capture_output=True, text=True, timeout=120)
    assert where.stdout.strip().startswith(str(installed)), where.stdout + where.stderr


@pytest.mark.parametrize("console_script", [True, False], ids=["rlvr", "python-m"])
def test_installed_shipped_config_by_name_beside_a_users_configs_package(installed, project,
                                                                         console_script):
    p = run_outside(installed, project, ["--config=quickstart", f"--workdir={project / 'run'}",
                                         f"--config.{BAD_KEY}=1"], console_script=console_script)
    # the shipped quickstart loaded (it imports rlvr.configs.base, not the user's configs.base)
    # and the command stopped at the unknown override
    assert p.returncode != 0 and BAD_KEY in p.stderr, p.stderr[-3000:]
    assert "get_config" not in p.stderr and "no shipped config" not in p.stderr, p.stderr[-3000:]


@pytest.mark.parametrize("console_script", [True, False], ids=["rlvr", "python-m"])
def test_installed_user_config_imports_its_neighbours(installed, project, console_script):
    p = run_outside(installed, project, ["--config=my_cfg.py", f"--workdir={project / 'run'}",
                                         f"--config.{BAD_KEY}=1"], console_script=console_script)
    assert "user config loaded, seed 7" in p.stdout, p.stdout[-2000:] + p.stderr[-3000:]
    assert p.returncode != 0 and BAD_KEY in p.stderr, p.stderr[-3000:]


def test_checkout_config_file_and_name_resolve(tmp_path):
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    for args in (["launch.py", "--config=configs/quickstart.py"],
                 ["-m", "rlvr.launch", "--config=quickstart"]):
        p = subprocess.run([sys.executable, *args, f"--workdir={tmp_path}", f"--config.{BAD_KEY}=1"],
                           cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
        assert p.returncode != 0 and BAD_KEY in p.stderr, (args, p.stderr[-3000:])
        assert "get_config" not in p.stderr and "no shipped config" not in p.stderr, p.stderr[-3000:]


def test_checkout_rlvr_configs_is_the_configs_folder():
    from rlvr import configs, configs_lookup
    from rlvr.configs import quickstart

    assert pathlib.Path(configs.__file__).parent == ROOT / "configs"
    assert pathlib.Path(quickstart.__file__) == ROOT / "configs" / "quickstart.py"
    assert configs_lookup.shipped_config("quickstart") == str(ROOT / "configs" / "quickstart.py")
    assert configs_lookup.shipped_config("gsm8k.py") == str(ROOT / "configs" / "gsm8k.py")
    assert configs_lookup.shipped_config("no_such_config") is None
    assert configs_lookup.shipped_config("../launch") is None
    assert {"base", "quickstart", "gsm8k"} <= set(configs_lookup.shipped_names())
    assert "__init__" not in configs_lookup.shipped_names()


def test_add_working_dir_puts_the_cwd_first_once(tmp_path, monkeypatch):
    from rlvr import configs_lookup

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".", str(tmp_path))])
    assert configs_lookup.add_working_dir() is True
    assert sys.path[0] == str(tmp_path)
    assert configs_lookup.add_working_dir() is False
    assert sys.path.count(str(tmp_path)) == 1
