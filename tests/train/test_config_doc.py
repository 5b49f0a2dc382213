"""docs/config.md is generated from the config schema and is current."""

import pathlib

from rlvr.train import config_doc

ROOT = pathlib.Path(__file__).resolve().parents[2]
REGEN = "python -m rlvr.train.config_doc > docs/config.md"


def test_committed_config_reference_is_current():
    committed = (ROOT / "docs" / "config.md").read_text(encoding="utf-8")
    assert committed == config_doc.render(), (
        f"docs/config.md is out of date with configs/base.py / rlvr/train/config.py; run `{REGEN}`")


def test_every_schema_field_is_documented_with_its_comment():
    from rlvr.configs import base
    from rlvr.train.config import flatten

    text = config_doc.render()
    for key in flatten(base.get_config()):
        assert f"| `{key}` |" in text, key
    # a field's comment from configs/base.py is its description, allowed values come from CHOICES
    assert "| `algorithm.clip_low` | `0.2` | [0.0, 1.0) | ε_low: ratio lower bound" in text
    assert "`'xla'` \\| `'cudnn'`" in text


def test_comments_are_parsed_per_field():
    src = (
        "def get_config():\n"
        "    c = X()\n"
        "    # block above a\n"
        "    c.a = 1   # inline a\n"
        "              # continued a\n"
        "    c.b = (1,\n"
        "           2)  # inline b\n")
    fields, _, order = config_doc.field_comments(src)
    assert fields == {"a": "block above a inline a continued a", "b": "inline b"}
    assert order == {"a": 4, "b": 6}


def test_continuation_comments_belong_to_the_field_above_them():
    """A comment line right below a field continues it when indented past an ordinary comment
    at the field's column: by its `#`, or by its text with the `#` at the column (aligned with
    the inline comment); an ordinary `# text` line there starts the next field's block."""
    src = (
        "def get_config():\n"
        "    c = X()\n"
        "    c.a = 1   # inline a\n"
        "    #         text-aligned continuation of a\n"
        "    c.b = 2   # inline b\n"
        "              # hash-indented continuation of b\n"
        "    #         text-aligned, after a hash-indented one\n"
        "    # block above c\n"
        "    c.c = 3\n"
        "    c.d = 4   # inline d\n"
        "    #\n"
        "    # block above e (an empty comment line first)\n"
        "    c.e = 5\n"
        "    # ------------------------------------- f (a section heading)\n"
        "    c.f = 6   # inline f\n")
    fields, sections, _ = config_doc.field_comments(src)
    assert fields == {
        "a": "inline a text-aligned continuation of a",
        "b": "inline b hash-indented continuation of b text-aligned, after a hash-indented one",
        "c": "block above c",
        "d": "inline d",
        "e": "block above e (an empty comment line first)",
        "f": "inline f",
    }
    assert sections == {"f": "(a section heading)"}
