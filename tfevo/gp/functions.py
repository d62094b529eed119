"""The GP function table: protected built-ins, user functions, function sets.

Every function node stores an id from one global table (:func:`get_function`).
Built-ins have protected versions (no NaN from a division by zero, a log of a
negative, ...) that the TensorFlow evaluator, the C++ op and the NumPy
interpreter implement identically.  Protection covers only the domain: a NaN
argument gives NaN (also through ``max``/``min``, ``pow(1, NaN)`` and the
condition of ``iflt``).  :func:`register_function` adds user functions
(evaluated by the TensorFlow reference only).
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Sequence

import numpy as np
import tensorflow as tf

from tfevo.core import ConfigError

__all__ = ["GPFunction", "FunctionSet", "register_function", "get_function", "builtin_functions",
           "arity_table", "PROTECT_EPS", "EXP_CLIP", "MAX_ARITY"]

#: threshold below which protected div/log/inv/pow treat a value as zero.
PROTECT_EPS = 1e-3
#: protected exp clamps its argument to at most this value.
EXP_CLIP = 80.0


@dataclasses.dataclass(frozen=True)
class GPFunction:
    """One entry of the function table.

    Attributes:
      name: the name used in function sets (``"add"``).
      arity: number of children (1..4).
      fid: the id stored in ``values`` of function nodes.
      tf_fn: TensorFlow implementation on same-shaped float32 tensors.
      np_fn: NumPy implementation (float32 arrays), used by the interpreter.
      infix: format string for :func:`to_infix` (``"({0} + {1})"``) or None
        for ``name(args)``.
      sympy_fn: callable on sympy expressions, or None (then an undefined
        sympy Function of that name is used).
      builtin: True if the C++ op implements it.
    """

    name: str
    arity: int
    fid: int
    tf_fn: Callable
    np_fn: Callable
    infix: str | None = None
    sympy_fn: Callable | None = None
    builtin: bool = True


_TABLE: dict[str, GPFunction] = {}
_BY_ID: dict[int, GPFunction] = {}


def _f32(x):
    return np.asarray(x, np.float32)


def _np_where(c, a, b):
    return _f32(np.where(c, a, b))


# Protection covers only the domain (a near-zero divisor, a near-zero base or
# log argument): a NaN argument always gives NaN, so a tree that meets NaN
# gets the worst fitness instead of a silently finite value.
def _tf_nan_if(cond, x):
    return tf.where(cond, tf.constant(np.nan, x.dtype), x)


def _np_nan_if(cond, x):
    return _f32(np.where(cond, np.float32(np.nan), x))


def _tf_div(a, b):
    near0 = tf.abs(b) <= PROTECT_EPS  # False for NaN
    return _tf_nan_if(tf.math.is_nan(a), tf.where(near0, 1.0, a / tf.where(near0, 1.0, b)))


def _np_div(a, b):
    with np.errstate(all="ignore"):
        near0 = np.abs(b) <= PROTECT_EPS
        return _np_nan_if(np.isnan(a), np.where(near0, np.float32(1), a / np.where(near0, np.float32(1), b)))


def _tf_pow(a, b):
    x = tf.abs(a)
    near0 = x <= PROTECT_EPS
    y = tf.where(near0, 0.0, tf.pow(tf.where(near0, 1.0, x), b))
    return _tf_nan_if(tf.math.is_nan(a) | tf.math.is_nan(b), y)  # IEEE pow(1, NaN) would be 1


def _np_pow(a, b):
    with np.errstate(all="ignore"):
        x = np.abs(a)
        near0 = x <= PROTECT_EPS
        y = np.where(near0, np.float32(0), np.power(np.where(near0, np.float32(1), x), b))
        return _np_nan_if(np.isnan(a) | np.isnan(b), y)


def _tf_log(a):
    x = tf.abs(a)
    near0 = x <= PROTECT_EPS
    return tf.where(near0, 0.0, tf.math.log(tf.where(near0, 1.0, x)))


def _np_log(a):
    with np.errstate(all="ignore"):
        x = np.abs(a)
        near0 = x <= PROTECT_EPS
        return _f32(np.where(near0, np.float32(0), np.log(np.where(near0, np.float32(1), x))))


def _tf_inv(a):
    near0 = tf.abs(a) <= PROTECT_EPS
    return tf.where(near0, 0.0, 1.0 / tf.where(near0, 1.0, a))


def _np_inv(a):
    with np.errstate(all="ignore"):
        near0 = np.abs(a) <= PROTECT_EPS
        return _f32(np.where(near0, np.float32(0), np.float32(1) / np.where(near0, np.float32(1), a)))


def _tf_max(a, b):
    return _tf_nan_if(tf.math.is_nan(a) | tf.math.is_nan(b), tf.where(a > b, a, b))


def _np_max(a, b):
    return _np_nan_if(np.isnan(a) | np.isnan(b), np.where(a > b, a, b))


def _tf_min(a, b):
    return _tf_nan_if(tf.math.is_nan(a) | tf.math.is_nan(b), tf.where(a < b, a, b))


def _np_min(a, b):
    return _np_nan_if(np.isnan(a) | np.isnan(b), np.where(a < b, a, b))


def _tf_iflt(a, b, c, d):
    return _tf_nan_if(tf.math.is_nan(a) | tf.math.is_nan(b), tf.where(a < b, c, d))


def _np_iflt(a, b, c, d):
    return _np_nan_if(np.isnan(a) | np.isnan(b), np.where(a < b, c, d))


def _np(fn):
    def inner(*args):
        with np.errstate(all="ignore"):
            return _f32(fn(*args))

    return inner


def _sympy_table():
    import sympy as sp

    def div(a, b):
        return a / b

    def iflt(a, b, c, d):
        # a Piecewise whose condition holds a Piecewise makes sympy fold
        # conditions (costly, and it fails on strict inequalities): then the
        # same function as a step
        if a.has(sp.Piecewise) or b.has(sp.Piecewise):
            return d + (c - d) * sp.Heaviside(b - a, 0)
        return sp.Piecewise((c, sp.StrictLessThan(a, b)), (d, True))

    return {
        "add": lambda a, b: a + b,
        "sub": lambda a, b: a - b,
        "mul": lambda a, b: a * b,
        "div": div,
        "pow": lambda a, b: sp.Abs(a) ** b,
        "max": sp.Max,
        "min": sp.Min,
        "neg": lambda a: -a,
        "abs": sp.Abs,
        "sqrt": lambda a: sp.sqrt(sp.Abs(a)),
        "log": lambda a: sp.log(sp.Abs(a)),
        "exp": sp.exp,
        "sin": sp.sin,
        "cos": sp.cos,
        "tan": sp.tan,
        "tanh": sp.tanh,
        "sigmoid": lambda a: 1 / (1 + sp.exp(-a)),
        "inv": lambda a: 1 / a,
        "iflt": iflt,
        "square": lambda a: a**2,
        "cube": lambda a: a**3,
    }


# (name, arity, tf_fn, np_fn, infix) in the order of their C++ op codes.
_BUILTINS = [
    ("add", 2, lambda a, b: a + b, _np(lambda a, b: a + b), "({0} + {1})"),
    ("sub", 2, lambda a, b: a - b, _np(lambda a, b: a - b), "({0} - {1})"),
    ("mul", 2, lambda a, b: a * b, _np(lambda a, b: a * b), "({0} * {1})"),
    ("div", 2, _tf_div, _np_div, "({0} / {1})"),
    ("pow", 2, _tf_pow, _np_pow, "(|{0}| ** {1})"),
    ("max", 2, _tf_max, _np_max, None),
    ("min", 2, _tf_min, _np_min, None),
    ("neg", 1, lambda a: -a, _np(lambda a: -a), "(-{0})"),
    ("abs", 1, tf.abs, _np(np.abs), None),
    ("sqrt", 1, lambda a: tf.sqrt(tf.abs(a)), _np(lambda a: np.sqrt(np.abs(a))), None),
    ("log", 1, _tf_log, _np_log, None),
    ("exp", 1, lambda a: tf.exp(tf.where(a > EXP_CLIP, EXP_CLIP, a)),
     _np(lambda a: np.exp(np.where(a > EXP_CLIP, EXP_CLIP, a))), None),
    ("sin", 1, tf.sin, _np(np.sin), None),
    ("cos", 1, tf.cos, _np(np.cos), None),
    ("tan", 1, tf.tan, _np(np.tan), None),
    ("tanh", 1, tf.tanh, _np(np.tanh), None),
    ("sigmoid", 1, lambda a: 1.0 / (1.0 + tf.exp(-a)), _np(lambda a: 1.0 / (1.0 + np.exp(-a))), None),
    ("inv", 1, _tf_inv, _np_inv, None),
    ("iflt", 4, _tf_iflt, _np_iflt, None),
    ("square", 1, lambda a: a * a, _np(lambda a: a * a), None),
    ("cube", 1, lambda a: a * a * a, _np(lambda a: a * a * a), None),
]

for _i, (_n, _a, _t, _p, _fmt) in enumerate(_BUILTINS):
    _fn = GPFunction(_n, _a, _i, _t, _p, _fmt, None, True)
    _TABLE[_n] = _fn
    _BY_ID[_i] = _fn

#: user functions get ids from here on (the C++ op rejects them).
_USER_ID0 = 1000
MAX_ARITY = 4


def builtin_functions() -> list[str]:
    """Names of the built-in (C++-accelerated) functions, in id order."""
    return [n for n, *_ in _BUILTINS]


def register_function(name: str, arity: int, tf_fn: Callable, np_fn: Callable | None = None,
                      infix: str | None = None, sympy_fn: Callable | None = None) -> GPFunction:
    """Adds a user function to the global table and returns it.

    ``tf_fn`` takes ``arity`` float32 tensors of equal shape and returns one;
    ``np_fn`` (optional, defaults to running ``tf_fn`` eagerly) is used by the
    NumPy interpreter.  Trees that use a user function are evaluated with the
    TensorFlow reference (the C++ op knows only built-ins).

    Example:

    >>> import tensorflow as tf
    >>> f = register_function("hypot", 2, lambda a, b: tf.sqrt(a * a + b * b))
    >>> FunctionSet(["add", "mul", "hypot"]).arities
    [2, 2, 2]
    """
    if not isinstance(name, str) or not name.isidentifier():
        raise ConfigError(f"function name must be an identifier, got {name!r}")
    if not (1 <= int(arity) <= MAX_ARITY):
        raise ConfigError(f"function arity must be in 1..{MAX_ARITY}, got {arity}")
    if name in _TABLE and _TABLE[name].builtin:
        raise ConfigError(f"{name!r} is a built-in function and cannot be redefined")
    if not callable(tf_fn):
        raise ConfigError("tf_fn must be callable")
    fid = _TABLE[name].fid if name in _TABLE else _USER_ID0 + sum(1 for f in _TABLE.values() if not f.builtin)
    if np_fn is None:
        def np_fn(*args, _f=tf_fn):  # noqa: E306
            return np.asarray(_f(*[tf.constant(a, tf.float32) for a in args]), np.float32)
    fn = GPFunction(name, int(arity), fid, tf_fn, np_fn, infix, sympy_fn, False)
    _TABLE[name] = fn
    _BY_ID[fid] = fn
    return fn


def get_function(key) -> GPFunction:
    """Looks a function up by name or id."""
    if isinstance(key, str):
        if key not in _TABLE:
            raise ConfigError(f"unknown GP function {key!r}; known: {', '.join(sorted(_TABLE))}")
        return _TABLE[key]
    k = int(key)
    if k not in _BY_ID:
        raise ConfigError(f"unknown GP function id {k}")
    return _BY_ID[k]


class FunctionSet:
    """The functions a run may use (a subset of the global table).

    Args:
      names: function names (or :class:`GPFunction` objects), e.g.
        ``["add", "sub", "mul", "div"]``.

    Attributes:
      functions: the :class:`GPFunction` entries.
      ids, arities: parallel lists.
      max_arity: the largest arity present.
      builtin_only: True if the C++ op can evaluate every function.
    """

    def __init__(self, names: Sequence):
        if isinstance(names, FunctionSet):
            names = [f.name for f in names.functions]
        if isinstance(names, str):
            names = [n.strip() for n in names.split(",") if n.strip()]
        names = list(names)
        if not names:
            raise ConfigError("function set must not be empty")
        fns = [n if isinstance(n, GPFunction) else get_function(n) for n in names]
        seen = set()
        self.functions = []
        for f in fns:
            if f.name not in seen:
                seen.add(f.name)
                self.functions.append(f)
        self.ids = [f.fid for f in self.functions]
        self.arities = [f.arity for f in self.functions]
        self.names = [f.name for f in self.functions]
        self.max_arity = max(self.arities)
        self.builtin_only = all(f.builtin for f in self.functions)

    def __len__(self):
        return len(self.functions)

    def __repr__(self):
        return f"FunctionSet({self.names})"


def arity_table(extra_ids: Sequence[int] = ()) -> tuple[np.ndarray, np.ndarray]:
    """(ids, arities) of every known function, as int32 arrays."""
    ids = np.array(sorted(_BY_ID), np.int32)
    ar = np.array([_BY_ID[i].arity for i in ids], np.int32)
    return ids, ar
