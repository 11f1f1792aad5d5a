"""Generated code is never edited by hand: regenerating it in memory gives the committed
files byte for byte, and every generated file says how to regenerate it.

The files are generated once, by a module fixture, when the first test here runs (not at
collection, where every xdist worker would pay the seconds of SymPy work);
:func:`generated_paths` names them without generating them, from the same table of
writers as :func:`generated_files`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from derive.cli import main
from derive.codegen.generate import GENERATED_DIR, generated_files, generated_paths

PATHS = generated_paths()


@pytest.fixture(scope="module")
def files() -> dict[Path, str]:
    return generated_files()


@pytest.mark.parametrize("path", sorted(PATHS), ids=lambda p: p.name)
def test_generated_file_matches_its_source(path, files):
    committed = path.read_text()
    assert committed == files[path], (
        f"{path} differs from what `liptable generate` writes: run `liptable generate`"
    )


def test_no_stray_generated_files():
    present = {p for p in GENERATED_DIR.glob("*.py") if p.name != "__init__.py"}
    assert present == set(PATHS), f"unexpected: {sorted(present ^ set(PATHS))}"


@pytest.mark.parametrize("path", sorted(PATHS), ids=lambda p: p.name)
def test_header_names_the_regeneration_command(path, files):
    head = files[path].splitlines()[:3]
    assert "DO NOT EDIT BY HAND" in head[1] and "`liptable generate`" in head[1], head


def test_cli_generate_check_reports_nothing_stale(capsys):
    assert main(["generate", "--check"]) == 0
    assert capsys.readouterr().out == ""
