"""The benchmark scripts' common ending: the table printed, and written to --out when given."""

from benchmarks.output import emit


def test_emit_prints_and_writes_the_table_once_with_one_final_newline(tmp_path, capsys):
    out = tmp_path / "new" / "folder" / "table.md"
    for text in ("| a |\n|---|", "| a |\n|---|\n"):
        assert emit(text, str(out)) == text
        assert out.read_text() == "| a |\n|---|\n"
        assert capsys.readouterr().out == text + "\n"
    emit("| b |")  # no --out: printed only
    assert capsys.readouterr().out == "| b |\n" and out.read_text() == "| a |\n|---|\n"
