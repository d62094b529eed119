"""The import graph of tfevo, read from every module's ``import`` statements
with ``ast``: tfevo has no import cycle, and the graph reader finds the cycles
it should.

Every import of one tfevo module by another counts, at module level and inside
functions alike: a cycle of module-level imports fails at import time, and a
lazy import inside a function that only exists to break such a cycle is the
same tangle hidden.  Lazy imports of optional heavy dependencies (matplotlib,
gymnasium, MuJoCo, sympy...) are imports of other packages and never enter the
graph, which holds tfevo's modules only."""

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


def test_tfevo_has_no_import_cycle():
    mods = modules()
    assert "tfevo.neat.neat" in mods and "tfevo.core" in mods and "tfevo.training.builders" in mods
    found = cycles(import_graph(mods))
    assert found == [], f"import cycles in tfevo: {found}"


def test_the_graph_reader_sees_the_layers_below():
    graph = import_graph(modules())
    assert "tfevo.core" in graph["tfevo.kernels.dispatch"]
    assert "tfevo.nn.layers" in graph["tfevo.nn.gradients"]
    assert "tfevo.training.parts" in graph["tfevo.training.families"]
    assert "tfevo.training.families" in graph["tfevo.training.builders"]


def test_the_graph_reader_finds_a_longer_cycle_through_a_package_init(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from pkg.sub import x\n")
    (pkg / "sub" / "__init__.py").write_text("from .x import f\n")
    (pkg / "sub" / "x.py").write_text("def f():\n    from .. import low\n")
    (pkg / "low.py").write_text("import pkg.sub\n")
    (pkg / "free.py").write_text("from pkg import low\n")
    found = cycles(import_graph(modules(str(pkg))))
    assert found == [["pkg.low", "pkg.sub", "pkg.sub.x"]]


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
