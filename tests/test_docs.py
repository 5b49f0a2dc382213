"""The repository stands on its own: citations point into docs/, and every docs/ citation resolves.

A citation is `docs/<name>.md` optionally followed by section marks `§N` (a heading `## N.` of that
file) and equation numbers `(A.n)` / `(B.n)` / `(V.n)` (a numbered equation of that file), e.g.
"docs/algorithms.md (A.2), §6". Documents outside the repository may not be cited.
"""

import pathlib
import re
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"

# Citations of documents that are not in the repository (patterns split so this file does not match).
FORBIDDEN = [
    re.compile(r"\bSPEC" + r"(?:\.md|\s+R[1-8])"),
    re.compile(r"\bseeds?" + r"[\s/]+00[0-9]"),
    re.compile(r"\bDESIGN" + r"\.md"),
    re.compile(r"\bFACTS" + r"\.md"),
    re.compile(r"(?<![\w.\-])R[1-8]" + r"\.[0-9](?![\d.]\d)"),
]

CITATION = re.compile(
    r"docs/([\w\-]+)\.md((?:(?:,|;)?\s?(?:§\d+(?:-\d+)?|\([ABV]\.\d+\)(?:-\([ABV]\.\d+\))?))*)")
MARK = re.compile(r"§(\d+)|\(([ABV]\.\d+)\)")
MD_LINK = re.compile(r"\]\(([\w\-]+\.md)(#[\w\-]+)?\)")


def _tracked_text_files():
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True)
    for rel in out.stdout.decode().split("\0"):
        path = ROOT / rel
        if not rel or not path.is_file() or path.suffix in {".png", ".jpg", ".gz", ".npz", ".pkl"}:
            continue
        try:
            yield rel, path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue


def _git_available():
    try:
        subprocess.run(["git", "rev-parse"], cwd=ROOT, capture_output=True, check=True)
        return True
    except (OSError, subprocess.CalledProcessError):
        return False


pytestmark = pytest.mark.skipif(not _git_available(), reason="needs a git checkout")


def forbidden_citations(files):
    """(file, line, text) of every citation of a document outside the repository."""
    hits = []
    for rel, text in files:
        for n, line in enumerate(text.splitlines(), 1):
            if any(p.search(line) for p in FORBIDDEN):
                hits.append((rel, n, line.strip()[:120]))
    return hits


def unresolved_citations(files, docs_dir=DOCS):
    """(file, line, citation, why) of every docs/ citation whose file, section or equation is missing."""
    cache, bad = {}, []
    for rel, text in files:
        for n, line in enumerate(text.splitlines(), 1):
            for m in CITATION.finditer(line):
                name = m.group(1)
                if name not in cache:
                    p = docs_dir / f"{name}.md"
                    cache[name] = p.read_text(encoding="utf-8") if p.is_file() else None
                doc = cache[name]
                if doc is None:
                    bad.append((rel, n, m.group(0), "no such file"))
                    continue
                for mark in MARK.finditer(m.group(2)):
                    sec, eq = mark.groups()
                    if sec and not re.search(rf"^## {sec}\.", doc, re.M):
                        bad.append((rel, n, m.group(0), f"no section {sec}"))
                    if eq and f"({eq})" not in doc:
                        bad.append((rel, n, m.group(0), f"no equation ({eq})"))
    return bad


def test_no_citations_of_documents_outside_the_repository():
    hits = forbidden_citations(_tracked_text_files())
    assert not hits, "cite docs/ instead of documents not in the repository:\n" + "\n".join(
        f"{f}:{n}: {t}" for f, n, t in hits)


def test_every_docs_citation_resolves():
    bad = unresolved_citations(_tracked_text_files())
    assert not bad, "unresolved docs/ citations:\n" + "\n".join(
        f"{f}:{n}: {c} ({why})" for f, n, c, why in bad)


def test_links_between_docs_pages_resolve():
    bad = [(p.name, link) for p in sorted(DOCS.glob("*.md"))
           for link, _ in MD_LINK.findall(p.read_text(encoding="utf-8"))
           if not (DOCS / link).is_file()]
    assert not bad, f"broken links in docs/: {bad}"


def test_the_checks_catch_a_bad_citation():
    d = "docs" + "/"  # built so that this file itself cites nothing
    files = [("x.py", "see SPEC" + " R" + "3.1 and FACTS" + ".md"),
             ("y.md", f"{d}algorithms.md (A.999), {d}nowhere.md, {d}algorithms.md §99")]
    assert len(forbidden_citations(files[:1])) == 1
    whys = sorted(w for *_, w in unresolved_citations(files[1:]))
    assert whys == ["no equation (A.999)", "no section 99", "no such file"]
