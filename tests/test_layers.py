"""Imports point one way (docs/architecture.md §2): a package imports only packages of lower layers (and
itself); no two packages import each other. Checked statically over every module of rlvr/."""

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1] / "rlvr"
# layer of each top-level part of rlvr (higher layers may import lower ones, never the reverse;
# parts of one layer may not import each other)
LAYERS = {
    "records": 0, "core": 0, "version": 0, "configs": 0,
    "models": 1, "learner": 1, "configs_lookup": 1,
    "rollout": 2, "envs": 2, "parallel": 2,
    "verifiers": 3, "agents": 3,
    "tasks": 4,
    "algorithms": 5,
    "train": 6,
    "testing": 7, "launch": 7,
}


def _part(path: pathlib.Path, root: pathlib.Path = ROOT) -> str:
    rel = path.relative_to(root).parts
    return rel[0][:-3] if rel[0].endswith(".py") else rel[0]


def _imports(path: pathlib.Path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("rlvr."):
            yield node.module.split(".")[1], node.lineno
        elif isinstance(node, ast.ImportFrom) and node.module == "rlvr":
            for a in node.names:
                yield a.name, node.lineno
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("rlvr."):
                    yield a.name.split(".")[1], node.lineno


def violations(root: pathlib.Path = ROOT):
    out = []
    for path in sorted(root.rglob("*.py")):
        if path == root / "__init__.py":
            continue
        src = _part(path, root)
        for dst, line in _imports(path):
            if dst == src:
                continue
            if dst not in LAYERS or src not in LAYERS:
                out.append(f"{path.relative_to(root.parent)}:{line}: unknown part {src if src not in LAYERS else dst!r}")
            elif LAYERS[dst] >= LAYERS[src]:
                out.append(f"{path.relative_to(root.parent)}:{line}: rlvr.{src} (layer {LAYERS[src]}) "
                           f"imports rlvr.{dst} (layer {LAYERS[dst]})")
    return out


def test_every_part_has_a_layer():
    parts = {_part(p) for p in ROOT.rglob("*.py") if p != ROOT / "__init__.py"}
    assert parts <= set(LAYERS), sorted(parts - set(LAYERS))


def test_imports_point_one_way():
    assert not violations(), "\n".join(violations())


def test_the_checker_sees_a_violation(tmp_path):
    """The check can fail: a lower layer importing a higher one is reported (checked on a copy of
    the package, so the live tree, which other test processes read, is never touched)."""
    import shutil

    copy = tmp_path / "rlvr"
    shutil.copytree(ROOT, copy, ignore=shutil.ignore_patterns("__pycache__"))
    assert not violations(copy)
    (copy / "core" / "_layer_probe_tmp.py").write_text("from rlvr.train import loop\n")
    assert any("_layer_probe_tmp" in v for v in violations(copy))
