"""Digests of the project's sources, to tie a result to the code that produced it.

>>> len(kernel_digest()), kernel_digest() == kernel_digest()
(64, True)
"""

from __future__ import annotations

import hashlib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _digest(*folders: str) -> str:
    digest = hashlib.sha256()
    for folder in folders:
        for path in sorted((ROOT / folder).rglob("*.py")):
            digest.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def kernel_digest() -> str:
    """SHA-256 of the kernels' sources (``kernels/``)."""
    return _digest("kernels")


def reference_digest() -> str:
    """SHA-256 of the references' sources (``derive/reference/``, ``proofs/arb.py``'s folder
    and the definitions)."""
    return _digest("derive/reference", "derive/definitions", "proofs")
