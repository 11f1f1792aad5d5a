"""Digests of the project's sources, to tie a result to the code that produced it.

>>> len(kernel_digest()), kernel_digest() == kernel_digest()
(64, True)
"""

from __future__ import annotations

import ast
import hashlib
from functools import cache
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


def files_digest(names: list[str], prefix: str = "") -> str:
    """SHA-256 of ``prefix`` and the files ``names`` (paths from the project root), each with
    its name."""
    digest = hashlib.sha256(prefix.encode())
    for name in names:
        digest.update(name.encode() + b"\0" + (ROOT / name).read_bytes())
    return digest.hexdigest()


def kernel_digest(module: str | None = None) -> str:
    """SHA-256 of the kernels' sources: of ``kernels/`` but :data:`NOT_KERNELS`, or, for a
    public kernel ``module`` (``"sigmoid"``, ``"gelu"``), of the files it runs
    (:func:`kernel_files`), so that a change elsewhere in ``kernels/`` leaves its
    certificates current."""
    if module is None:
        return _digest("kernels", skip=NOT_KERNELS)
    return files_digest(kernel_files(module))


def kernel_files(module: str) -> list[str]:
    """``kernels/<module>.py`` and every file of ``kernels/`` it imports, directly or through
    another, sorted; with the packages' ``__init__.py`` files, which run first, counted by
    their own text (the other public modules they import compute nothing for this one).

    >>> files = kernel_files("sigmoid")
    >>> "kernels/_generated/sigmoid.py" in files, "kernels/batchnorm.py" in files
    (True, False)
    """
    start = f"kernels/{module}.py"
    if not (ROOT / start).is_file():
        raise ValueError(f"no kernel module kernels/{module}.py")
    return import_closure(start)


def import_closure(start: str) -> list[str]:
    """The file ``start`` of ``kernels/`` and every file of ``kernels/`` it imports, directly
    or through another, sorted, with the packages' ``__init__.py`` files (see
    :func:`kernel_files`).

    >>> "kernels/_f16.py" in import_closure("kernels/_vmath.py")
    True
    """
    seen, todo = {"kernels/__init__.py", "kernels/_generated/__init__.py"}, [start]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        todo.extend(_first_party_imports((ROOT / name).read_text()))
    return sorted(seen)


@cache
def _first_party_imports(text: str) -> tuple[str, ...]:
    """The files of ``kernels/`` that ``text``, a file's source, imports (parsed once per
    content: the report asks for the closures of 38 certificates)."""
    found = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            parts = node.module.split(".")
            targets = [*([*parts, alias.name] for alias in node.names), parts]
        elif isinstance(node, ast.Import):
            targets = [alias.name.split(".") for alias in node.names]
        else:
            continue
        for target in targets:
            if target[0] != "kernels":
                continue
            path = "/".join(target) + ".py"
            if (ROOT / path).is_file():
                found.append(path)
    return tuple(found)


def reference_digest() -> str:
    """SHA-256 of the references' sources (``derive/reference/``, ``proofs/arb.py``'s folder
    and the definitions)."""
    return _digest("derive/reference", "derive/definitions", "proofs")
