"""Executes every notebook in notebooks/ at test sizes, the way a Colab user runs it, and fails on
any cell error.

Each notebook runs from a copy of the checkout (tests/_install.py), in a fresh python3 kernel with
cwd=<copy>/notebooks, RLVR_NOTEBOOK_SMALL=1 (tiny sizes), MPLBACKEND=Agg and JAX on CPU. Its first
code cell installs rlvr (from that copy, the checkout it lies in) with pip; pip's settings put the
install in a folder of its own, without dependencies (the kernel's PYTHONPATH is that folder), so
the notebook imports the installed package, never this checkout. `python tests/test_notebooks.py
[name ...]` runs them outside pytest and prints the time per notebook.
"""

from __future__ import annotations

import os
import pathlib
import re
import sys
import tempfile
import time

import pytest

from tests._xla_flags import flags_for


ROOT = pathlib.Path(__file__).resolve().parents[1]
NB_DIR = ROOT / "notebooks"
NOTEBOOKS = sorted(NB_DIR.glob("*.ipynb"))
CELL_TIMEOUT_S = 600


def execute(path: pathlib.Path, tmp: pathlib.Path | None = None, *, mpl_backend: str = "Agg"):
    """Runs notebook `path` top to bottom from a copy of the checkout in tmp (a new temporary
    folder when None); returns the executed notebook (raises CellExecutionError).

    `mpl_backend="module://matplotlib_inline.backend_inline"` keeps the figures in the outputs.
    """
    import nbformat
    from nbclient import NotebookClient

    from tests._install import copy_checkout, pip_env

    tmp = pathlib.Path(tempfile.mkdtemp(prefix="rlvr-notebook-") if tmp is None else tmp)
    checkout, target = copy_checkout(tmp / "checkout"), tmp / "installed"
    target.mkdir()
    nb_dir = checkout / "notebooks"
    nb = nbformat.read(nb_dir / path.name, as_version=4)
    env = dict(os.environ, RLVR_NOTEBOOK_SMALL="1", MPLBACKEND=mpl_backend, JAX_PLATFORMS="cpu",
               TQDM_DISABLE="1", PYTHONPATH=str(target), **pip_env(target))
    env.pop("RLVR_SOURCE", None)  # the notebook installs the checkout it lies in
    # one CPU device in the kernel (the notebooks' sizes assume it); the suite's other XLA flags stay
    env["XLA_FLAGS"] = flags_for(1)
    client = NotebookClient(nb, kernel_name="python3", timeout=CELL_TIMEOUT_S,
                            resources={"metadata": {"path": str(nb_dir)}})
    client.execute(env=env, cwd=str(nb_dir))
    return nb


def first_cells(nb):
    """The notebook's first markdown cell and its first code cell."""
    return (next(c for c in nb.cells if c.cell_type == "markdown"),
            next(c for c in nb.cells if c.cell_type == "code"))


def cell_text(cell) -> str:
    return "".join(o.get("text", "") for o in cell.get("outputs", []) if o.get("output_type") == "stream")


def test_notebooks_exist():
    names = [p.name for p in NOTEBOOKS]
    assert names == ["01_core_ops.ipynb", "02_grpo_quickstart.ipynb", "03_pivotrl_and_sao.ipynb",
                     "04_lora_grpo.ipynb"], names


def test_notebooks_committed_without_outputs():
    import nbformat

    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        nbformat.validate(nb)
        first = nb.cells[1] if nb.cells[0].cell_type == "markdown" else nb.cells[0]
        assert "RLVR_NOTEBOOK_SMALL" in first.source and "default_backend" in first.source, path.name
        for cell in nb.cells:
            if cell.cell_type == "code":
                assert not cell.outputs and cell.execution_count is None, f"{path.name}: clear outputs"


def test_notebooks_install_rlvr_first_and_state_their_runtime():
    """The first code cell installs rlvr with pip from RLVR_SOURCE (a path, wheel or git URL the
    user sets) or the checkout; the first markdown cell states the runtime and its minutes."""
    import nbformat

    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        intro, setup = first_cells(nb)
        assert nb.cells.index(intro) == 0 and nb.cells.index(setup) == 1, path.name
        assert re.search(r'^RLVR_SOURCE = ""', setup.source, re.M), path.name
        assert '"pip", "install"' in setup.source and 'os.environ.get("RLVR_SOURCE"' in setup.source
        assert setup.source.index('"pip", "install"') < setup.source.index("import rlvr")
        for stale in ("upload the repository", "<org>", "git clone", "REPO_URL"):
            assert stale not in setup.source, (path.name, stale)
        runtime = next((par for par in intro.source.split("\n\n") if par.startswith("**Runtime")), "")
        assert all(k in runtime for k in ("CPU", "GPU", "TPU", "min")), (path.name, runtime)
        code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
        assert "from configs " not in code and "import configs" not in code, path.name


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs(path, tmp_path):
    nb = execute(path, tmp_path)
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if o.get("output_type") == "error"]
    assert not errors, errors
    # the first cell installed the checkout it lies in, and the notebook ran on that install
    installed = cell_text(first_cells(nb)[1])
    assert f"installed rlvr from {tmp_path / 'checkout'} in {tmp_path / 'installed' / 'rlvr'}" in installed, \
        installed
    assert (tmp_path / "installed" / "rlvr" / "configs" / "quickstart.py").is_file()


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    for p in NOTEBOOKS:
        if len(sys.argv) > 1 and not any(a in p.name for a in sys.argv[1:]):
            continue
        t = time.perf_counter()
        execute(p)
        print(f"{p.name}: ok in {time.perf_counter() - t:.1f} s", flush=True)
