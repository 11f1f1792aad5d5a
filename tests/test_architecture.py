"""The import graph: one way, no cycles, no private names across files, and imports at the
top of the file except where a lazy import keeps a light entry point light.

Layers, bottom to top (SPEC, "Layout"): ``proofs.core`` (with ``proofs.arb``, the ball
arithmetic it screens with, and ``proofs.polynomial``, its ring normal form);
``derive.definitions``; the
family proofs (``proofs.*``); ``derive.check``; then ``derive.report``, ``derive.envelope``
and the command line. ``kernels`` imports no other first-party package at all.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("derive", "kernels", "proofs", "tests")

#: Imports inside functions that are allowed, each with its reason: (importing module,
#: imported module prefix).
LAZY = {
    # ``liptable envelope`` must not import SymPy (the norm path is SymPy-free), and each
    # subcommand loads only what it runs.
    ("derive.cli", "derive."): "each subcommand imports only its own machinery",
    ("derive.cli", "proofs."): "prove-bounds loads its enumeration (and Numba) only when run",
    # The elementwise envelopes need SymPy (their constants come from the proofs); the
    # normalization envelopes must not pay for it.
    ("derive.envelope.modules", "derive.definitions."): "SymPy only for elementwise models",
    ("derive.envelope.modules", "proofs."): "SymPy only for elementwise models",
    ("derive.envelope.modules", "kernels"): "Numba compiles only when a witness is checked",
    ("derive.envelope.block", "kernels"): "Numba compiles only when a witness is built",
    # The report's scheduling process starts the workers without loading what they run.
    ("derive.report.document", "derive.report.tasks"): "the workers import the checkers",
}


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


MODULES = _modules()


def _target(name: str) -> str | None:
    """The first-party module ``name`` refers to (a module, or the package holding it)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _imports(module: str) -> list[tuple[str, list[str], bool]]:
    """(imported module, imported names, inside a function) of each first-party import."""
    tree = ast.parse(MODULES[module].read_text())
    found = []

    def visit(node: ast.AST, inside: bool) -> None:
        for child in ast.iter_child_nodes(node):
            nested = inside or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            if isinstance(child, ast.Import):
                for alias in child.names:
                    if alias.name.split(".")[0] in PACKAGES and (t := _target(alias.name)):
                        found.append((t, [], nested))
            elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
                if child.module.split(".")[0] not in PACKAGES:
                    continue
                for alias in child.names:
                    sub = f"{child.module}.{alias.name}"
                    if sub in MODULES:
                        found.append((sub, [], nested))
                    elif t := _target(child.module):
                        found.append((t, [alias.name], nested))
            visit(child, nested)

    visit(tree, False)
    return found


def _graph() -> dict[str, set[str]]:
    return {m: {t for t, _, _ in _imports(m) if t != m} for m in MODULES}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return found


def test_no_import_cycle():
    assert _cycles(_graph()) == []


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_layers_point_one_way():
    """proofs.core imports only proofs.arb and proofs.polynomial, which, like
    proofs.derivatives, import no first-party module; definitions import only proofs.core,
    proofs.derivatives and each other; proofs import no checker, report or envelope
    (but the envelope's own proofs import the closed forms they prove); kernels import only
    kernels."""
    graph = _graph()
    assert graph["proofs.arb"] == graph["proofs.polynomial"] == graph["proofs.derivatives"]
    assert graph["proofs.arb"] == set()
    assert graph["proofs.core"] <= {"proofs.arb", "proofs.polynomial"}
    for module, targets in graph.items():
        if module.startswith("derive.definitions"):
            assert all(
                t in ("proofs.core", "proofs.derivatives")
                or t.startswith(("derive.definitions", "derive.catalog"))
                for t in targets
            ), (module, targets)
        if module.startswith("proofs"):
            above = ("derive.check", "derive.report", "derive.cli", "derive.envelope")
            if module == "proofs.envelope":  # it proves the envelope's closed forms K(D)
                above = above[:-1]
            assert not any(t.startswith(above) for t in targets), (module, targets)
        if module.startswith("kernels"):
            assert all(t.startswith("kernels") for t in targets), (module, targets)


def test_no_private_name_is_imported_from_another_file():
    offenders = [
        (module, target, names)
        for module in MODULES
        for target, names, _ in _imports(module)
        if any(n.startswith("_") for n in names)
    ]
    assert offenders == []


@pytest.mark.parametrize(
    "package", ["derive", "proofs", "kernels"], ids=["derive", "proofs", "kernels"]
)
def test_first_party_imports_sit_at_the_top(package):
    lazy = [
        (module, target)
        for module in MODULES
        if module.split(".")[0] == package
        for target, _, inside in _imports(module)
        if inside and not any(module == m and target.startswith(prefix) for m, prefix in LAZY)
    ]
    assert lazy == []


def test_every_subpackage_says_what_it_owns():
    for init in ROOT.glob("*/**/__init__.py"):
        folder = init.parent
        if ".venv" in folder.parts:
            continue
        if folder.relative_to(ROOT).parts[0] not in ("derive", "kernels", "proofs"):
            continue
        assert (folder / "README.md").exists(), folder
