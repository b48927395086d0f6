"""No import circle among the package's modules.

Both kinds of import are edges: a module-level one and one inside a function (deferred to
keep ``count`` fast, it still means the two modules need each other, and a circle of them
is one layer split in two files). The graph is read from the source with ``ast``, without
importing anything.
"""

from __future__ import annotations

import ast
from pathlib import Path

import wgradcache

PACKAGE = Path(wgradcache.__file__).parent

# (importer, imported) edges that close a circle today and are left to their owners; each
# must still exist (see the second test), so the list only shrinks. Empty: no known circle.
KNOWN_CYCLE_EDGES: frozenset[tuple[str, str]] = frozenset()


def modules(root: Path) -> dict[str, Path]:
    """Dotted name -> file of every module under the package directory ``root``."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = (root.name, *path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _nearest(name: str, known: dict[str, Path]) -> str | None:
    """``name`` itself when it is a module, else the closest package above it."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def import_edges(root: Path) -> dict[str, set[str]]:
    """Module -> the package's modules it imports anywhere in its body (functions too).

    ``from pkg import name`` is an edge to ``pkg.name`` when that is a module, else to
    ``pkg``; relative imports are resolved against the importer's package.
    """
    known = modules(root)
    edges: dict[str, set[str]] = {m: set() for m in known}
    for mod, path in known.items():
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(up + ([base] if base else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base
                           for a in node.names]
            for t in targets:
                hit = _nearest(t, known)
                if hit is not None and hit != mod:
                    edges[mod].add(hit)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while not comp or comp[-1] != v:
                comp.append(stack.pop())
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return sorted(out)


def _describe(comp: list[str], edges: dict[str, set[str]]) -> str:
    inner = [f"{a} -> {b}" for a in comp for b in sorted(edges[a]) if b in comp]
    return "; ".join(inner)


def test_no_import_cycle_in_the_package():
    edges = import_edges(PACKAGE)
    for a, b in KNOWN_CYCLE_EDGES:
        edges[a].discard(b)
    found = cycles(edges)
    assert not found, "import circles: " + " | ".join(_describe(c, edges) for c in found)


def test_known_exceptions_still_close_a_circle():
    """An exception that no longer closes a circle is removed from the list."""
    edges = import_edges(PACKAGE)
    for a, b in KNOWN_CYCLE_EDGES:
        assert b in edges.get(a, ()), f"{a} no longer imports {b}: drop it from the list"
        assert any(a in c and b in c for c in cycles(edges)), f"{a} -> {b} closes no circle"


def test_the_graph_sees_imports_inside_functions(tmp_path):
    """A circle closed only by a deferred import is still a circle; relative imports and
    ``from pkg import module`` resolve to the module."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg.sub import b\n")
    (pkg / "sub" / "b.py").write_text("def f():\n    from .. import a\n    return a\n")
    (pkg / "c.py").write_text("import pkg.a\nfrom pkg.sub.b import f\n")
    edges = import_edges(pkg)
    assert edges["pkg.a"] == {"pkg.sub.b"} and edges["pkg.sub.b"] == {"pkg.a"}
    assert edges["pkg.c"] == {"pkg.a", "pkg.sub.b"}
    assert cycles(edges) == [["pkg.a", "pkg.sub.b"]]
    (pkg / "sub" / "b.py").write_text("def f():\n    return 1\n")
    assert cycles(import_edges(pkg)) == []


def test_compile_layers_point_one_way():
    """``discovery`` is the bottom of the compile layer and ``toolchain`` sits above the
    modules it reports on: the split that removed libllvm <-> toolchain <-> lldlink <->
    native."""
    edges = import_edges(PACKAGE)
    assert not edges["wgradcache.compile.discovery"]
    below = {"wgradcache.compile.libllvm", "wgradcache.compile.lldlink",
             "wgradcache.compile.native"}
    assert below <= edges["wgradcache.compile.toolchain"]
    assert all("wgradcache.compile.toolchain" not in edges[m] for m in below)
