"""The modules of the ``scopecheck`` package import each other without a cycle.

The graph is read from the source, not from ``sys.modules``: every module under ``scopecheck/``
and under the folders pyproject's package-dir installs into it (``scopecheck.models``,
``scopecheck.impl``, ``scopecheck.crashsim``, ``scopecheck.examples``) is parsed, and every
``import`` and ``from ... import`` anywhere in the file is an edge -- a deferred import inside a
function too, since it only moves the cycle to run time. Relative imports are resolved against
the importing module's package. An import of a package is an edge to its ``__init__``; ``from
pkg import name`` is an edge to ``pkg.name`` when that is a module, else to ``pkg``. Parent
packages that Python initialises on the way are not edges (they are initialised first, which
is no cycle). Imports under ``if TYPE_CHECKING:`` are excluded: they never run. Self-edges are
ignored; a cycle is a strongly connected component of more than one module.
"""

from __future__ import annotations

import ast
import tomllib
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "scopecheck"

#: Cycles allowed, each named by every module of its component: none.  A cycle found is
#: allowed only inside one of these, and an entry no cycle falls in any more fails the test.
ALLOWED: tuple[frozenset[str], ...] = ()


def _folders() -> dict[str, Path]:
    """Package name -> folder holding it: ``scopecheck/`` and the package-dir mappings."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    mapped = config["tool"]["setuptools"]["package-dir"]
    folders = {PACKAGE: ROOT / PACKAGE}
    folders.update({name: ROOT / folder for name, folder in mapped.items()})
    return folders


def modules() -> dict[str, tuple[Path, bool]]:
    """Module name -> (file, whether it is a package's ``__init__``)."""
    found: dict[str, tuple[Path, bool]] = {}
    for package, folder in _folders().items():
        for path in sorted(folder.rglob("*.py")):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            is_init = parts[-1] == "__init__"
            if is_init:
                parts.pop()
            found[".".join([package, *parts])] = (path, is_init)
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _import_nodes(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import under ``node``, skipping the bodies of ``if TYPE_CHECKING:``."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child.test):
            for other in child.orelse:
                yield from _import_nodes_of(other)
            continue
        yield from _import_nodes_of(child)


def _import_nodes_of(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        yield node
    yield from _import_nodes(node)


def _resolve(module: str, is_init: bool, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    package = module.split(".") if is_init else module.split(".")[:-1]
    base = package[: len(package) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def graph() -> dict[str, set[str]]:
    """Module -> the modules of the package it imports."""
    known = modules()
    edges: dict[str, set[str]] = {name: set() for name in known}
    for module, (path, is_init) in known.items():
        for node in _import_nodes(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                source = _resolve(module, is_init, node)
                targets = [
                    f"{source}.{alias.name}" if f"{source}.{alias.name}" in known else source
                    for alias in node.names
                ]
            edges[module].update(t for t in targets if t in known and t != module)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component: set[str] = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(frozenset(component))
    return found


def _describe(component: frozenset[str], edges: dict[str, set[str]]) -> str:
    inner = [
        f"    {source} -> {target}"
        for source in sorted(component)
        for target in sorted(edges[source] & component)
    ]
    return "cycle among " + ", ".join(sorted(component)) + ":\n" + "\n".join(inner)


def test_the_graph_covers_the_mapped_folders() -> None:
    names = modules()
    for package in ("models", "impl", "crashsim", "examples"):
        assert any(name.startswith(f"{PACKAGE}.{package}.") for name in names), package


def test_no_import_cycles() -> None:
    edges = graph()
    found = cycles(edges)
    for component in found:
        print(_describe(component, edges))
    unexpected = [c for c in found if not any(c <= allowed for allowed in ALLOWED)]
    stale = [sorted(a) for a in ALLOWED if not any(c <= a for c in found)]
    assert not unexpected, "\n".join(_describe(c, edges) for c in unexpected)
    assert not stale, f"allow-list entries that are no longer cycles: {stale}"
