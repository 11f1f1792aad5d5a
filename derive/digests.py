"""Digests of the project's sources, to tie a result to the code that produced it.

>>> len(kernel_digest()), kernel_digest() == kernel_digest()
(64, True)
"""

from __future__ import annotations

import hashlib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


#: Files of ``kernels/`` that no kernel computes with: the harness for other people's kernels,
#: its pytest plugin and the PyTorch wrappers. A change to them leaves certificates current.
NOT_KERNELS = ("kernels/testing.py", "kernels/pytest_plugin.py", "kernels/torch.py")


def _digest(*folders: str, skip: tuple[str, ...] = ()) -> str:
    digest = hashlib.sha256()
    for folder in folders:
        for path in sorted((ROOT / folder).rglob("*.py")):
            name = str(path.relative_to(ROOT))
            if name not in skip:
                digest.update(name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def kernel_digest() -> str:
    """SHA-256 of the kernels' sources (``kernels/`` but :data:`NOT_KERNELS`)."""
    return _digest("kernels", skip=NOT_KERNELS)


def reference_digest() -> str:
    """SHA-256 of the references' sources (``derive/reference/``, ``proofs/arb.py``'s folder
    and the definitions)."""
    return _digest("derive/reference", "derive/definitions", "proofs")
