"""Generates docs/config.md, the config reference, from the schema.

    python -m rlvr.train.config_doc > docs/config.md

The schema is `configs/base.py` (every field, its default and type, documented by the comments
where it is set) plus the rules of `rlvr.train.config` (allowed values `CHOICES`, ranges
`BOUNDS`). A test checks that the committed docs/config.md equals this module's output, so a new
or changed field fails the suite until the page is regenerated.
"""

from __future__ import annotations

import ast
import inspect
import io
import re
import tokenize
from typing import Any

import ml_collections

HEADER = """# Config reference

Generated from the config schema (`configs/base.py` and `rlvr/train/config.py`) by
`python -m rlvr.train.config_doc > docs/config.md`; do not edit by hand. Every run starts from
`configs/base.py`'s `get_config()` and overrides fields (in an experiment config or on the command
line, `--config.algorithm.clip_low=0.3`). `validate_config` refuses, at start and naming the
field, unknown keys, wrong types, values outside "allowed", inconsistent combinations, and fields
that do not apply to the chosen algorithm, collector or task kit but were changed from their
default. Equation and section citations point into [algorithms.md](algorithms.md),
[architecture.md](architecture.md) and [verifiers.md](verifiers.md).
"""


def _comments(source: str) -> dict[int, tuple[int, int, str]]:
    """{line number: (column of the `#`, column of the text, text)} of every comment in
    `source` (an empty comment's text column is the one after its `#`s)."""
    out = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            body = tok.string.lstrip("#")
            text = body.strip()
            indent = len(body) - len(body.lstrip()) if text else 0
            out[tok.start[0]] = (tok.start[1], tok.end[1] - len(body) + indent, text)
    return out


def _key(target) -> str | None:
    parts = []
    while isinstance(target, ast.Attribute):
        parts.append(target.attr)
        target = target.value
    if isinstance(target, ast.Name) and target.id == "c" and parts:
        return ".".join(reversed(parts))
    return None


def field_comments(source: str) -> tuple[dict[str, str], dict[str, str], dict[str, int]]:
    """({field: description}, {section: heading text}, {field: line}) parsed from the schema.

    A field's description is, in this order:
      * above: the comment lines right above its assignment, `#` at the assignment's column;
      * inline: the comments on the assignment's lines;
      * below: the continuation comments right below it (no blank line between), each indented
        past an ordinary comment at the assignment's column: its `#` right of that column, or
        its text right of where `# text` there would start (`#` at the column, the text aligned
        with the inline comment's). Continuations are the field's even when the next field
        follows at once; an ordinary `# text` line below a field starts the next field's above
        block.
    A section heading is a `# ---- name (text)` comment line.
    """
    lines = source.splitlines()
    comments = _comments(source)
    code_lines = {i + 1 for i, l in enumerate(lines) if l.strip() and not l.strip().startswith("#")}
    fields, sections, order = {}, {}, {}
    for _, _, text in comments.values():
        m = re.match(r"-{4,}\s*(\w+)\s*(.*)$", text)
        if m:
            sections[m.group(1)] = m.group(2).strip()
    nodes = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            key = _key(node.targets[0])
            if key is not None:
                nodes.append((key, node))

    def own_line(ln):  # a comment-only line (not a section heading)
        return (ln in comments and ln not in code_lines
                and not comments[ln][2].startswith("---"))

    below, continued = {}, set()
    for key, node in nodes:
        col, ln, got = node.col_offset, node.end_lineno + 1, []
        while own_line(ln) and (comments[ln][0] > col or comments[ln][1] > col + 2):
            got.append(comments[ln][2])
            continued.add(ln)
            ln += 1
        below[id(node)] = got
    for key, node in nodes:
        above = []
        ln = node.lineno - 1
        while own_line(ln) and ln not in continued \
                and comments[ln][0] == node.col_offset:
            above.insert(0, comments[ln][2])
            ln -= 1
        inline = [comments[i][2] for i in range(node.lineno, node.end_lineno + 1)
                  if i in comments and i in code_lines]
        fields[key] = " ".join(t for t in above + inline + below[id(node)] if t)
        order.setdefault(key, node.lineno)
    return fields, sections, order


def _fmt(value: Any) -> str:
    if isinstance(value, ml_collections.FieldReference):
        value = value.get()
    if hasattr(value, "dtype") or type(value).__name__ in ("dtype", "_ScalarMeta"):
        from rlvr.models.config import dtype_name
        value = dtype_name(value)
    return f"`{value!r}`"


def _bounds(b) -> str:
    lo, lo_inc, hi, hi_inc = b
    left = "(−∞" if lo is None else ("[" if lo_inc else "(") + repr(lo)
    right = "∞)" if hi is None else repr(hi) + ("]" if hi_inc else ")")
    return f"{left}, {right}"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render() -> str:
    """The markdown of docs/config.md."""
    from rlvr.configs import base
    from rlvr.train.config import BOUNDS, CHOICES, flatten

    descriptions, sections, order = field_comments(inspect.getsource(base))
    flat = flatten(base.get_config())
    # source order: a field's own line, else (set in a nested literal) its parent's line
    def line(key):
        while key not in order and "." in key:
            key = key.rsplit(".", 1)[0]
        return order.get(key, 0)
    flat = dict(sorted(flat.items(), key=lambda kv: line(kv[0])))
    out = [HEADER]
    current, current_parent = None, None
    for key, value in flat.items():
        section = key.split(".")[0] if "." in key else "(top level)"
        if section != current:
            current = section
            out.append(f"\n## `{section}`" if section != "(top level)" else "\n## Top level")
            note = sections.get(section, "")
            intro = descriptions.get(section, "")
            text = " ".join(t for t in (note, intro) if t)
            if text:
                out.append(f"\n{text}")
            out.append("\n| field | default | allowed | description |\n|---|---|---|---|")
        parent = key.rsplit(".", 1)[0] if "." in key else ""
        if parent != current_parent:
            current_parent = parent
            if parent != section and descriptions.get(parent):
                out.append(f"| `{parent}` (section) | | | {_cell(descriptions[parent])} |")
        allowed = ""
        if key in CHOICES:
            allowed = " | ".join(f"`{c!r}`" for c in CHOICES[key])
        elif key in BOUNDS:
            allowed = _bounds(BOUNDS[key])
        desc = descriptions.get(key, "")
        out.append(f"| `{key}` | {_cell(_fmt(value))} | {_cell(allowed)} | {_cell(desc)} |")
    return "\n".join(out) + "\n"


def main():
    print(render(), end="")


if __name__ == "__main__":
    main()
