"""The tree is ruff-clean (lint and format), as the project's habits require."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RUFF = shutil.which("ruff") or str(Path(__file__).resolve().parents[1] / ".venv/bin/ruff")


@pytest.mark.parametrize("command", [["check", "."], ["format", "--check", "."]])
def test_ruff(command):
    if not Path(RUFF).exists():
        pytest.skip("ruff is not installed (it is in the test extra)")
    done = subprocess.run([RUFF, *command], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
