"""Run ``liptable`` (``derive.cli.main``) in a child process under a time and memory limit.

A command that hangs, or grows past the memory limit, fails the test instead of the machine:
the child's address space is capped with ``resource.setrlimit`` (an allocation past it
raises ``MemoryError`` in the child, exit code 1) and the call is killed after
:data:`SECONDS`.
"""

from __future__ import annotations

import resource
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

#: Wall-clock limit of one command (the envelope answers in about a second).
SECONDS = 30
#: Address-space limit of the child process, bytes.
MEMORY = 2 * 1024**3
#: The repository root (the child's working directory, so that ``derive`` imports).
ROOT = Path(__file__).resolve().parents[2]
_PROGRAM = "import sys; from derive import cli; sys.exit(cli.main(sys.argv[1:]))"


@dataclass(frozen=True)
class Outcome:
    argv: tuple[str, ...]
    status: int
    out: str
    err: str

    def describe(self) -> str:
        return (
            f"liptable {' '.join(self.argv)}: exit {self.status}\n"
            f"stdout (end): {self.out[-1500:]}\nstderr (end): {self.err[-1500:]}"
        )


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))


def run(argv: list[str]) -> Outcome:
    """``liptable *argv`` in a child process; ``subprocess.TimeoutExpired`` past the limit."""
    done = subprocess.run(
        [sys.executable, "-c", _PROGRAM, *argv],
        capture_output=True,
        text=True,
        timeout=SECONDS,
        cwd=ROOT,
        preexec_fn=_limit_memory,
        check=False,
    )
    return Outcome(tuple(argv), done.returncode, done.stdout, done.stderr)


def assert_answers_or_refuses(outcome: Outcome) -> None:
    """A clean answer (exit 0, nothing on stderr) or the one-line refusal of a bad option
    (exit 2, ``liptable envelope: <message>`` alone on stderr): never a traceback."""
    if outcome.status == 0:
        assert outcome.err == "", outcome.describe()
        assert outcome.out.strip(), outcome.describe()
        return
    lines = outcome.err.strip().splitlines()
    assert outcome.status == 2, outcome.describe()
    assert len(lines) == 1 and lines[0].startswith("liptable envelope: "), outcome.describe()
