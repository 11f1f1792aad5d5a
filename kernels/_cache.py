"""Numba's on-disk cache, kept in step with the kernels' sources.

Numba keys a cached function by the modification time and size of the file that defines
it, and by nothing it calls or inlines from other files. A kernel in
``kernels/_generated/sigmoid.py`` inlines ``kernels._vmath.exp_bounded``; after a change to
``_vmath.py`` alone, its cache would keep serving the old machine code. So before any
kernel loads, :func:`invalidate_if_stale` hashes the source of every ``kernels`` file and,
when the digest differs from the one stamped at the last check, deletes the package's
cache files (``__pycache__/*.nbi`` and ``*.nbc``); they are rebuilt on first use. A fresh
install has no cache and only writes the stamp. Concurrent processes agree: deleting a
file already gone is not an error and the stamp is replaced atomically.

Being the first module ``kernels/__init__.py`` imports, it also settles, before Numba builds
any code, the vector width the kernels are compiled for (``kernels/_target.py``).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from pathlib import Path

from kernels import _target

_target.prefer_wide_vectors()

__all__ = ["PACKAGE", "STAMP", "invalidate_if_stale", "sources_digest"]

PACKAGE = Path(__file__).resolve().parent
#: Where the digest of the last check is kept.
STAMP = PACKAGE / "__pycache__" / "liptable-kernels-sources.sha256"


def sources_digest(package: Path = PACKAGE) -> str:
    """SHA-256 over the relative path and bytes of every ``.py`` file of the package."""
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        digest.update(str(path.relative_to(package)).encode())
        digest.update(b"\0")
        digest.update(path.read_bytes())
    return digest.hexdigest()


def invalidate_if_stale(package: Path = PACKAGE, stamp: Path = STAMP) -> bool:
    """Delete the package's Numba cache files if its sources changed since the last
    stamp; returns whether it deleted (or would have had to delete) anything.

    Any OS error (a read-only install) leaves the cache as it is: Numba then uses its own
    per-user cache directory, keyed the same way.
    """
    digest = sources_digest(package)
    try:
        if stamp.read_text() == digest:
            return False
    except OSError:
        pass
    try:
        for cached in [*package.rglob("*.nbi"), *package.rglob("*.nbc")]:
            with contextlib.suppress(FileNotFoundError):
                cached.unlink()
        stamp.parent.mkdir(exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=stamp.parent, prefix=".stamp-")
        with os.fdopen(handle, "w") as out:
            out.write(digest)
        os.replace(temporary, stamp)
    except OSError:
        return True
    return True
