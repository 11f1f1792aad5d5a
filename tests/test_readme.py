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


def test_readme_report_lines_are_in_the_report():
    index = (ROOT / "report" / "index.md").read_text().splitlines()
    readme = (ROOT / "README.md").read_text().splitlines()
    rows = [line for line in readme if re.match(r"\| `\w+\.\w+` \|", line)]
    assert rows
    for row in rows:
        assert row in index, f"README shows a report line the report does not have: {row}"
