"""The README's two commands are the contract: CI runs the test command verbatim."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    return re.findall(r"```sh\n(.+?)\n```", text)


def test_readme_gives_exactly_two_commands():
    commands = readme_commands()
    assert len(commands) == 2, commands
    report, tests = commands
    assert "liptable report" in report and "pip install" in report, report
    assert "pytest" in tests and "pip install" in tests, tests


def test_ci_runs_the_readme_test_command():
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert readme_commands()[1] in ci, f"{readme_commands()[1]!r} not a line of .ci/run"
