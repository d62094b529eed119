"""Is a graph ready for a GPU?  Every op has a GPU kernel or runs inside XLA.

A hot graph that keeps one CPU-only op (a tfevo C++ kernel, a TensorFlow op
without GPU kernel such as ``UniqueV2``, a ``py_function``) would copy the
population to the host and back each time it runs on a GPU machine.  This
module walks graphs -- a traced ``ConcreteFunction`` with its function
library, or the functions that ran in a block (:func:`record_functions`) --
and lists the ops that have neither a ``GPU`` (or device-agnostic
``DEFAULT``) kernel in TensorFlow's kernel registry nor an enclosing
XLA-compiled function (``jit_compile=True``: XLA compiles the whole body for
the device).  It needs no GPU: the registry is the same in every CUDA build.
"""

from __future__ import annotations

import contextlib

from tfevo import _tf_private

__all__ = ["gpu_ready_device_types", "unready_ops", "record_functions", "unready_ops_in_functions"]

#: kernel device types that serve a GPU (DEFAULT: registered for every device)
_GPU_TYPES = {"GPU", "DEFAULT"}
_CALL_OPS = {"PartitionedCall", "StatefulPartitionedCall"}


def gpu_ready_device_types(op_type: str) -> bool:
    """Whether ``op_type`` has a kernel usable on a GPU in TensorFlow's registry."""
    return bool(_tf_private.registered_kernel_devices(op_type) & _GPU_TYPES)


def _callees(node, known) -> list[str]:
    out = [node.op] if node.op in known else []
    for v in node.attr.values():
        if v.func.name:
            out.append(v.func.name)
        out.extend(f.name for f in v.list.func)
    return out


def _xla(attrs) -> bool:
    a = attrs.get("_XlaMustCompile")
    return bool(a is not None and a.b)


def _walk(nodes, where: str, lookup, seen: set, found: dict, allowed) -> None:
    for node in nodes:
        callees = _callees(node, lookup)
        if _xla(node.attr):
            continue  # the call compiles with XLA: its whole body is XLA's
        if node.op not in lookup and node.op not in allowed and not gpu_ready_device_types(node.op):
            found.setdefault(node.op, set()).add(where)
        for name in callees:
            fdef = lookup(name)
            if fdef is None or name in seen or _xla(fdef.attr):
                continue
            seen.add(name)
            _walk(fdef.node_def, name, lookup, seen, found, allowed)


class _Lookup:
    def __init__(self, library=None):
        self.lib = {f.signature.name: f for f in library} if library is not None else None

    def __contains__(self, name):
        return self(name) is not None

    def __call__(self, name):
        if self.lib is not None and name in self.lib:
            return self.lib[name]
        return _tf_private.function_def(name)


def unready_ops(concrete, allowed=()) -> dict[str, set[str]]:
    """``{op type: {where}}`` of the ops in ``concrete`` (a traced ``ConcreteFunction`` or a
    ``tf.Graph``) and its function library that run outside XLA without a GPU kernel;
    ``allowed``: op types accepted anyway (host simulators).  Empty: GPU-ready."""
    graph = getattr(concrete, "graph", concrete)
    gd = graph.as_graph_def()
    found: dict = {}
    _walk(gd.node, getattr(concrete, "name", "graph"), _Lookup(gd.library.function), set(), found, set(allowed))
    return found


@contextlib.contextmanager
def record_functions():
    """Yields a list that, after the block, holds the names of the functions first run in it
    (traced functions and the wrappers of single eager ops)."""
    before = _tf_private.function_names()
    names: list = []
    try:
        yield names
    finally:
        names.extend(sorted(_tf_private.function_names() - before))


def unready_ops_in_functions(names, allowed=()) -> dict[str, set[str]]:
    """As :func:`unready_ops` for functions registered in the eager context, by name."""
    lookup = _Lookup()
    covered: set = set()  # bodies nested in an XLA-compiled function (loops, branches): XLA's
    stack = [n for n in names if lookup(n) is not None and _xla(lookup(n).attr)]
    while stack:
        fdef = lookup(stack.pop())
        for node in fdef.node_def:
            for c in _callees(node, lookup):
                if c not in covered and lookup(c) is not None:
                    covered.add(c)
                    stack.append(c)
    found: dict = {}
    seen: set = set()
    for name in names:
        fdef = lookup(name)
        if fdef is None or name in covered or name in seen or _xla(fdef.attr):
            continue
        seen.add(name)
        _walk(fdef.node_def, name, lookup, seen, found, set(allowed))
    return found
