"""Runs every ```python block of README.md (the guide's worked examples).

Each block is executed on its own, in a fresh namespace, so every example is self-contained as a
reader copies it. A block fails the test if it raises (its asserts are the checks).
"""

from __future__ import annotations

import pathlib
import re

import pytest

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"
FENCE = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def python_blocks(text: str) -> list[tuple[str, str]]:
    """(id, source) of each ```python block; the id is the nearest preceding '## ' heading."""
    out = []
    for m in FENCE.finditer(text):
        heads = re.findall(r"^## (.+)$", text[: m.start()], re.M)
        title = heads[-1] if heads else "top"
        out.append((re.sub(r"\W+", "_", title.lower()).strip("_"), m.group(1)))
    return out


BLOCKS = python_blocks(README.read_text(encoding="utf-8"))


def test_guide_has_the_three_worked_examples():
    ids = [i for i, _ in BLOCKS]
    for needed in ("add_a_verifier", "add_an_environment", "add_an_algorithm"):
        assert needed in ids, (needed, ids)


def test_extractor_finds_fenced_python_only():
    text = "## A\n```python\nx = 1\n```\n```bash\nls\n```\n## B\n```python\ny = 2\n```\n"
    assert python_blocks(text) == [("a", "x = 1\n"), ("b", "y = 2\n")]


@pytest.mark.parametrize("source", [s for _, s in BLOCKS], ids=[i for i, _ in BLOCKS])
def test_readme_example_runs(source):
    code = compile(source, str(README), "exec")
    exec(code, {"__name__": "readme_example"})
