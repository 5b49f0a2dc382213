"""Executes every notebook in notebooks/ at test sizes and fails on any cell error.

Each notebook runs in a fresh python3 kernel with cwd=notebooks/, RLVR_NOTEBOOK_SMALL=1 (tiny
sizes), MPLBACKEND=Agg and JAX on CPU. `python tests/test_notebooks.py [name ...]` runs them
outside pytest and prints the time per notebook.
"""

from __future__ import annotations

import os
import pathlib
import sys
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
NB_DIR = ROOT / "notebooks"
NOTEBOOKS = sorted(NB_DIR.glob("*.ipynb"))
CELL_TIMEOUT_S = 600


def execute(path: pathlib.Path, *, mpl_backend: str = "Agg"):
    """Runs `path` top to bottom; returns the executed notebook (raises CellExecutionError).

    `mpl_backend="module://matplotlib_inline.backend_inline"` keeps the figures in the outputs.
    """
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    env = dict(os.environ, RLVR_NOTEBOOK_SMALL="1", MPLBACKEND=mpl_backend, JAX_PLATFORMS="cpu",
               TQDM_DISABLE="1", PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    # one CPU device in the kernel (the notebooks' sizes assume it); the suite's other XLA flags stay
    flags = [f for f in env.get("XLA_FLAGS", "").split() if "force_host_platform_device_count" not in f]
    env["XLA_FLAGS"] = " ".join(flags)
    client = NotebookClient(nb, kernel_name="python3", timeout=CELL_TIMEOUT_S,
                            resources={"metadata": {"path": str(NB_DIR)}})
    client.execute(env=env, cwd=str(NB_DIR))
    return nb


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


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs(path):
    nb = execute(path)
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if o.get("output_type") == "error"]
    assert not errors, errors


if __name__ == "__main__":
    for p in NOTEBOOKS:
        if len(sys.argv) > 1 and not any(a in p.name for a in sys.argv[1:]):
            continue
        t = time.perf_counter()
        execute(p)
        print(f"{p.name}: ok in {time.perf_counter() - t:.1f} s", flush=True)
