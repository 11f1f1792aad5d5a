"""Progress on a terminal: one line on stderr, rewritten in place; nothing in a pipe or a file.

>>> progress = Progress("checking", 2)
>>> [progress.step(label) for label in ("a", "b")] and None  # silent: stderr is not a tty
>>> progress.close()
"""

from __future__ import annotations

import sys
import time


def show(text: str) -> None:
    """Replace the progress line with ``text`` (only on a terminal)."""
    if sys.stderr.isatty():
        print(f"\r\033[K{text}", end="", file=sys.stderr, flush=True)


def clear() -> None:
    """Erase the progress line (only on a terminal)."""
    if sys.stderr.isatty():
        print("\r\033[K", end="", file=sys.stderr, flush=True)


class Progress:
    """``stage [done/total] label (elapsed s)`` for a stage of ``total`` steps."""

    def __init__(self, stage: str, total: int) -> None:
        self.stage, self.total, self.done = stage, total, 0
        self.start = time.perf_counter()

    def step(self, label: str) -> None:
        """Announce the step about to run."""
        self.done += 1
        elapsed = time.perf_counter() - self.start
        show(f"{self.stage} [{self.done}/{self.total}] {label} ({elapsed:.0f} s)")

    def close(self) -> None:
        clear()
