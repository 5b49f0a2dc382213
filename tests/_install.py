"""Installing the package the way a user does, for the tests that run it outside this checkout.

`copy_checkout` copies what a clone of the repository holds (tracked files and new files git does
not ignore) of the packaged folders, so that building never writes into this working tree;
`pip_install` installs a source into a folder of its own (`pip install --target`), without the
dependencies (those of the running interpreter are used) and without a build environment.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGED = ("pyproject.toml", "MANIFEST.in", "requirements.txt", "requirements-test.txt",
            "README.md", "rlvr", "configs", "notebooks")


def copy_checkout(dst: pathlib.Path, paths: tuple[str, ...] = PACKAGED) -> pathlib.Path:
    """Copies `paths` of this checkout (as a clone holds them) into dst; returns dst."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard",
                             "--", *paths], cwd=ROOT, check=True, capture_output=True).stdout
    for rel in filter(None, listed.decode().split("\0")):
        src = ROOT / rel
        if not src.is_file():  # deleted in the working tree, not yet in the index
            continue
        (dst / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dst / rel)
    return dst


def pip_env(target: pathlib.Path) -> dict[str, str]:
    """pip's settings (as environment variables) that make `pip install SOURCE` install into
    target, without dependencies and without an isolated build environment."""
    # PIP_NO_BUILD_ISOLATION is inverted: "0" (false) turns isolation off
    return {"PIP_TARGET": str(target), "PIP_NO_DEPS": "1", "PIP_NO_BUILD_ISOLATION": "0",
            "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_ROOT_USER_ACTION": "ignore",
            "PIP_NO_INDEX": "1"}


def pip_install(source: pathlib.Path, target: pathlib.Path) -> pathlib.Path:
    """`pip install source` into target (see pip_env); returns target."""
    env = dict(os.environ, **pip_env(target))
    p = subprocess.run([sys.executable, "-m", "pip", "install", "-q", str(source)], env=env,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
    return target


def build_sdist(source: pathlib.Path, out: pathlib.Path) -> pathlib.Path:
    """The source distribution of source (setuptools' PEP 517 hook), written into out."""
    p = subprocess.run([sys.executable, "-c", "import sys, setuptools.build_meta as b; "
                        "print(b.build_sdist(sys.argv[1]))", str(out)], cwd=source,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    return out / p.stdout.strip().splitlines()[-1]
