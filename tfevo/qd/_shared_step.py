"""One traced ``MAPElites.step`` program shared by instances of the same configuration.

Tracing the step (ask graph, task, insertion, emitter updates) and
instantiating it costs far more than many iterations of it.  All run state
lives in variables and a few eager tensors that the program captures, and the
configuration (shapes, rates, rules, bounds) is baked into the graph.  So two
instances whose configuration is equal can run one program: the second
instance calls the first one's concrete function with its own captured inputs,
located by their attribute path in the module tree.

The key is every plain attribute of every module in the tree (class, ints,
floats, strings, tuples, arrays, eager tensor values) plus the shape and dtype
of every variable, the task and the compile flags; attributes a class declares
in ``_untraced_attrs`` are left out (they reach the graph only through a
captured tensor).  An attribute of another kind, or a captured input that
cannot be located by path, makes the configuration unshareable: that instance
traces its own program.
"""

from __future__ import annotations

import collections

import numpy as np
import tensorflow as tf

from tfevo._holder import Untracked
from tfevo._tf_private import capture_substituting_caller, module_items

_MAX_ENTRIES = 8
_cache: collections.OrderedDict = collections.OrderedDict()


class _Unshareable(Exception):
    pass


def _value_key(v):
    if v is None or isinstance(v, (bool, int, float, str, tf.dtypes.DType, np.generic)):
        return (type(v).__name__, v)
    if isinstance(v, (tuple, list)) or type(v).__name__ == "ListWrapper":
        return ("seq", tuple(_value_key(x) for x in v))
    if isinstance(v, np.ndarray):
        return ("array", v.dtype.str, v.shape, v.tobytes())
    if isinstance(v, tf.Tensor) and hasattr(v, "numpy"):
        a = v.numpy()
        return ("tensor", a.dtype.str, a.shape, a.tobytes())
    if isinstance(v, tf.Variable):
        return ("variable", v.dtype.name, tuple(v.shape.as_list()))
    raise _Unshareable(type(v).__name__)


def _module_key(module: tf.Module):
    skip = set(getattr(type(module), "_untraced_attrs", ()))
    items = []
    for name, v in sorted(vars(module).items()):
        if name in skip or name.startswith("_self_") or name in ("_name", "_name_scope"):
            continue
        if isinstance(v, (Untracked, tf.Module)):
            continue  # caches / trace-time flags; submodules are keyed on their own
        if isinstance(v, (tuple, list)) or type(v).__name__ == "ListWrapper":
            if any(isinstance(x, tf.Module) for x in v):
                items.append((name, ("modules", tuple(type(x).__qualname__ for x in v))))
                continue
        items.append((name, _value_key(v)))
    return (type(module).__module__, type(module).__qualname__, tuple(items))


def _task_key(task_fn):
    python_fn = getattr(task_fn, "python_function", None)
    if python_fn is not None:  # a tf.function: the wrapped function, its signature and compile flag
        return ("tf.function", python_fn, repr(getattr(task_fn, "input_signature", None)),
                getattr(task_fn, "_jit_compile", None))
    return ("callable", task_fn)


def config_key(me: tf.Module, task_fn, flags) -> tuple | None:
    """The sharing key of ``me`` running ``task_fn``, or None when it cannot be shared."""
    try:
        modules = [me] + list(module_items(me, lambda x: isinstance(x, tf.Module)))
        key = (tuple(_module_key(m) for m in modules), _task_key(task_fn), tuple(flags))
        hash(key)
        return key
    except (_Unshareable, TypeError):
        return None


def _captures(me: tf.Module):
    """Path -> object for every variable and eager tensor reachable from ``me``."""
    found = {}
    for path, obj in module_items(me, lambda x: isinstance(x, (tf.Variable, tf.Tensor)), with_path=True):
        found.setdefault(path, obj)
    return found


def _handle(obj):
    return obj.handle if isinstance(obj, tf.Variable) else obj


def remember(key, me: tf.Module, fn) -> None:
    """Stores the program ``fn`` traced on ``me`` under ``key`` if all its captures have a path."""
    if key is None:
        return
    by_id = {id(_handle(obj)): path for path, obj in _captures(me).items()}
    paths, dtypes = [], []
    for c in fn.captured_inputs:
        path = by_id.get(id(c))
        if path is None:
            return  # a captured input outside the module tree: this program stays private
        paths.append(path)
        dtypes.append(c.dtype)
    _cache[key] = (fn, tuple(paths), tuple(dtypes))
    _cache.move_to_end(key)
    while len(_cache) > _MAX_ENTRIES:
        _cache.popitem(last=False)


def lookup(key, me: tf.Module):
    """A callable running the shared program on ``me``'s state, or None."""
    if key is None or key not in _cache:
        return None
    fn, paths, dtypes = _cache[key]
    own = _captures(me)
    try:
        inputs = [_handle(own[p]) for p in paths]
    except KeyError:
        return None
    if any(t != mine.dtype for t, mine in zip(dtypes, inputs)):
        return None
    _cache.move_to_end(key)
    return capture_substituting_caller(fn, inputs)
