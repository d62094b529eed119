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


#: Keras model internals tfevo reads (a built model's layer graph); only tfevo._tf_private may use them
KERAS_PRIVATE = {"_functional", "_nodes_by_depth", "_inputs_struct", "_outputs_struct", "_flatten_layers"}


def private_tensorflow_uses(path):
    """``[(line, what)]``: TensorFlow's private API used in the module at ``path`` -- imports of
    ``tensorflow.<submodule>``, ``tf._x`` / ``tf.__x__`` attributes, a distribution
    strategy's private ``extended._x`` members (by attribute or by ``getattr``), and the Keras
    model internals of :data:`KERAS_PRIVATE` (by attribute, ``getattr`` or ``hasattr``)."""
    with open(path) as f:
        tree = ast.parse(f.read())
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.startswith("tensorflow.")]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tensorflow."):
            found.append((node.lineno, node.module))
        elif isinstance(node, ast.Attribute) and node.attr.startswith("_") and node.attr != "__version__":
            chain, v = [node.attr], node.value
            while isinstance(v, ast.Attribute):
                chain.append(v.attr)
                v = v.value
            if (isinstance(v, ast.Name) and v.id == "tf") or chain[1:2] == ["extended"] or node.attr in KERAS_PRIVATE:
                found.append((node.lineno, ".".join(reversed(chain))))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr")
              and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and node.args[1].value in KERAS_PRIVATE):
            found.append((node.lineno, f"{node.func.id}(..., {node.args[1].value!r})"))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
              and len(node.args) >= 2 and isinstance(node.args[0], ast.Attribute) and node.args[0].attr == "extended"
              and isinstance(node.args[1], ast.Constant) and str(node.args[1].value).startswith("_")):
            found.append((node.lineno, f"extended.{node.args[1].value}"))
    return sorted(found)


def test_private_tensorflow_api_lives_in_one_module():
    """Only ``tfevo/_tf_private.py`` touches TensorFlow's private API (when a release moves it, that
    module is the one to change, and its helpers fall back to public equivalents)."""
    bad = {name: uses for name, path in modules().items() if name != "tfevo._tf_private"
           for uses in [private_tensorflow_uses(path)] if uses}
    assert not bad, f"private TensorFlow API outside tfevo._tf_private: {bad}"
    assert private_tensorflow_uses(modules()["tfevo._tf_private"])  # the reader sees what is there


def test_the_private_api_reader_finds_each_kind(tmp_path):
    p = tmp_path / "m.py"
    p.write_text("import tensorflow as tf\nfrom tensorflow.python.framework import ops\nimport tensorflow.core.util\n"
                 "x = tf.__internal__.tracking.Trackable\ny = s.extended._in_multi_worker_mode()\n"
                 "z = getattr(s.extended, '_in_multi_worker_mode', None)\nok = tf.compat.v1.Event\n"
                 "g = model._nodes_by_depth\nh = hasattr(m, '_functional')\nk = getattr(m, '_inputs_struct', None)\n"
                 "fine = getattr(m, 'layers', [])\n")
    assert [line for line, _ in private_tensorflow_uses(str(p))] == [2, 3, 4, 5, 6, 8, 9, 10]
