"""Generated code is never edited by hand: regenerating it in memory gives the committed
files byte for byte, and every generated file says how to regenerate it."""

from __future__ import annotations

import pytest

from derive.cli import main
from derive.codegen.generate import GENERATED_DIR, generated_files

FILES = generated_files()


@pytest.mark.parametrize("path", sorted(FILES), ids=lambda p: p.name)
def test_generated_file_matches_its_source(path):
    committed = path.read_text()
    assert committed == FILES[path], (
        f"{path} differs from what `liptable generate` writes: run `liptable generate`"
    )


def test_no_stray_generated_files():
    present = {p for p in GENERATED_DIR.glob("*.py") if p.name != "__init__.py"}
    assert present == set(FILES), f"unexpected: {sorted(present ^ set(FILES))}"


@pytest.mark.parametrize("path", sorted(FILES), ids=lambda p: p.name)
def test_header_names_the_regeneration_command(path):
    head = FILES[path].splitlines()[:3]
    assert "DO NOT EDIT BY HAND" in head[1] and "`liptable generate`" in head[1], head


def test_cli_generate_check_reports_nothing_stale(capsys):
    assert main(["generate", "--check"]) == 0
    assert capsys.readouterr().out == ""
