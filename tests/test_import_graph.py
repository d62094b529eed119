"""The import graph of tfevo, read from every module's ``import`` statements
(module level and inside functions alike, with ``ast``): the NEAT package has
no import cycle, and the graph reader finds the cycles it should."""

import ast
import os

import pytest

ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tfevo")


def modules(root=ROOT):
    """{dotted name: path} of every module under ``root`` (a package directory)."""
    base = os.path.dirname(root)
    out = {}
    for d, _, files in os.walk(root):
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(d, f)
                name = os.path.relpath(path, base)[:-3].replace(os.sep, ".")
                out[name[:-len(".__init__")] if name.endswith(".__init__") else name] = path
    return out


def import_graph(mods):
    """{module: modules of ``mods`` it imports}; ``from p import x`` counts as
    importing the submodule ``p.x`` when there is one, else ``p``."""
    graph = {}
    for name, path in mods.items():
        is_pkg = path.endswith("__init__.py")
        edges = set()
        with open(path) as f:
            tree = ast.parse(f.read(), path)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                edges |= {a.name for a in node.names if a.name in mods}
            elif isinstance(node, ast.ImportFrom):
                mod = node.module or ""
                if node.level:
                    parts = name.split(".") if is_pkg else name.split(".")[:-1]
                    parts = parts[:len(parts) - (node.level - 1)]
                    mod = ".".join(parts + ([node.module] if node.module else []))
                for a in node.names:
                    sub = f"{mod}.{a.name}"
                    edges.add(sub if sub in mods else mod)
        graph[name] = {m for m in edges if m in mods and m != name}
    return graph


def cycles(graph):
    """The strongly connected components with more than one module (sorted lists)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_neat_has_no_import_cycle():
    mods = modules()
    assert "tfevo.neat.neat" in mods and "tfevo.neat._breed_op" in mods
    found = [c for c in cycles(import_graph(mods)) if any(m.startswith("tfevo.neat") for m in c)]
    assert found == [], f"import cycles through tfevo.neat: {found}"


@pytest.mark.parametrize("where", ["module level", "inside a function"])
def test_the_graph_reader_finds_a_cycle(tmp_path, where):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg import b\n")
    late = "def f():\n    from . import a\n" if where != "module level" else "import pkg.a\n"
    (pkg / "b.py").write_text(late)
    (pkg / "c.py").write_text("from pkg.a import thing\n")
    graph = import_graph(modules(str(pkg)))
    assert graph["pkg.c"] == {"pkg.a"}
    assert cycles(graph) == [["pkg.a", "pkg.b"]]
