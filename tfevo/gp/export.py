"""Exporting a tree: infix string, sympy expression, Keras layer."""

from __future__ import annotations

import numpy as np

from tfevo.core import ShapeError
from tfevo.gp.trees import CONST, FUNC, OUT, VAR, fold_prefix, get_function, to_infix

__all__ = ["to_infix", "to_sympy", "GPExpression", "to_keras"]


def _one(trees, index):
    t, v, s = (np.asarray(a) for a in trees)
    return t[index], v[index], s[index]


class _SimplifyTimeout(BaseException):
    """Raised by the alarm; a BaseException, so sympy's own ``except Exception`` blocks cannot swallow it."""


def _bounded_simplify(expr, timeout: float | None):
    """``sympy.simplify(expr)``, or ``expr`` itself if that takes longer than
    ``timeout`` seconds.  The time bound uses ``SIGALRM`` and so applies in
    the main thread of a POSIX process (and when no other interval timer is
    running); elsewhere only the size bound of :func:`to_sympy` applies."""
    import signal
    import threading

    import sympy as sp

    usable = (timeout is not None and timeout > 0 and hasattr(signal, "setitimer")
              and threading.current_thread() is threading.main_thread()
              and signal.getitimer(signal.ITIMER_REAL)[0] == 0.0)
    if not usable:
        return sp.simplify(expr)

    def _raise(signum, frame):
        raise _SimplifyTimeout()

    old = signal.signal(signal.SIGALRM, _raise)
    try:
        # repeats every 50 ms after the first alarm, in case one lands where it cannot interrupt
        signal.setitimer(signal.ITIMER_REAL, float(timeout), 0.05)
        try:
            return sp.simplify(expr)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0.0)
    except _SimplifyTimeout:
        return expr
    finally:
        signal.signal(signal.SIGALRM, old)


_GUARDED = {}
_IFLT = []  # the exact iflt (built with sympy, on first use)


def _guarded_functions():
    """Sympy functions for the protected built-ins, exactly as the evaluators
    compute them: ``pdiv(a, b)`` (1 where ``|b| <= PROTECT_EPS``), ``plog(a)``
    (``log|a|``, 0 near 0), ``pinv(a)`` (0 near 0), ``ppow(a, b)``
    (``|a|**b``, 0 near 0).  They print for ``sympy.lambdify(..., "numpy")``
    as ``numpy.where`` expressions, and ``expr.rewrite(sympy.Piecewise)``
    gives sympy's own form.  (A ``Piecewise`` is not built directly: sympy
    rewrites a condition that holds another ``Piecewise``, which recurses
    without end on nested guards.)"""
    if _GUARDED:
        return _GUARDED
    import sympy as sp

    from tfevo.gp.functions import PROTECT_EPS

    eps = repr(float(PROTECT_EPS))

    def make(name, nargs, fallback, value, np_value):
        def eval_(cls, *args):
            guard = args[1] if name == "pdiv" else args[0]
            if guard.is_Number:  # the guard is decided: the plain form or the fallback
                return value(*args) if abs(guard) > PROTECT_EPS else sp.Integer(fallback)
            return None

        def rewrite_piecewise(self, *args, **kw):
            guard = args[1] if name == "pdiv" else args[0]
            return sp.Piecewise((sp.Integer(fallback), sp.Abs(guard) <= sp.Float(PROTECT_EPS)), (value(*args), True))

        def numpycode(self, printer):
            np_ = printer._module_format("numpy")
            args = [printer._print(x) for x in self.args]
            guard = args[1] if name == "pdiv" else args[0]
            near0 = f"({np_}.abs({guard}) <= {eps})"
            out = f"{np_}.where({near0}, {fallback}.0, {np_value(np_, near0, *args)})"
            if len(args) == 2:  # as the evaluators: a NaN argument gives NaN, the guard's fallback included
                out = f"{np_}.where({np_}.isnan({args[0]}) | {np_}.isnan({args[1]}), {np_}.nan, {out})"
            return out

        return type(name, (sp.Function,), dict(nargs=nargs, eval=classmethod(eval_),
                                               _eval_rewrite_as_Piecewise=rewrite_piecewise,
                                               _numpycode=numpycode))

    _GUARDED.update(
        div=make("pdiv", 2, 1, lambda a, b: a / b,
                 lambda np_, near0, a, b: f"({a}) / {np_}.where({near0}, 1.0, {b})"),
        log=make("plog", 1, 0, lambda a: sp.log(sp.Abs(a)),
                 lambda np_, near0, a: f"{np_}.log({np_}.where({near0}, 1.0, {np_}.abs({a})))"),
        inv=make("pinv", 1, 0, lambda a: 1 / a,
                 lambda np_, near0, a: f"1.0 / {np_}.where({near0}, 1.0, {a})"),
        pow=make("ppow", 2, 0, lambda a, b: sp.Abs(a) ** b,
                 lambda np_, near0, a, b: f"{np_}.power({np_}.where({near0}, 1.0, {np_}.abs({a})), {b})"),
    )
    return _GUARDED


def _exact_iflt():
    """``iflt(a, b, c, d)`` as the evaluators compute it: ``c`` where ``a < b``, ``d`` where not,
    NaN where ``a`` or ``b`` is NaN (a ``Piecewise`` would pick ``d`` there)."""
    if _IFLT:
        return _IFLT[0]
    import sympy as sp

    def eval_(cls, a, b, c, d):
        if a.is_Number and b.is_Number:
            return sp.nan if sp.nan in (a, b) else (c if a < b else d)
        return None

    def rewrite_piecewise(self, a, b, c, d, **kw):
        return sp.Piecewise((c, sp.StrictLessThan(a, b)), (d, True))

    def numpycode(self, printer):
        np_ = printer._module_format("numpy")
        a, b, c, d = (printer._print(x) for x in self.args)
        return (f"{np_}.where({np_}.isnan({a}) | {np_}.isnan({b}), {np_}.nan, "
                f"{np_}.where(({a}) < ({b}), {c}, {d}))")

    _IFLT.append(type("piflt", (sp.Function,), dict(nargs=4, eval=classmethod(eval_),
                                                    _eval_rewrite_as_Piecewise=rewrite_piecewise,
                                                    _numpycode=numpycode)))
    return _IFLT[0]


def _exact_table():
    """The exact forms of the guarded built-ins and of ``exp``'s clamp."""
    import sympy as sp

    from tfevo.gp.functions import EXP_CLIP

    table = dict(_guarded_functions())
    table["iflt"] = _exact_iflt()
    table["exp"] = lambda a: sp.exp(sp.Min(a, sp.Float(EXP_CLIP), evaluate=False))
    return table


def to_sympy(trees, index: int = 0, num_outputs: int = 1, simplify: bool = True, var_names=None,
             max_simplify_nodes: int = 40, simplify_timeout: float | None = 2.0, exact: bool = False):
    """Sympy expression of one tree (a list of expressions if ``num_outputs > 1``).

    By default the expression is written for reading: constants with 6
    significant digits and the protected operators as their unprotected
    mathematical forms (``div`` -> ``a/b``, ``log`` -> ``log(|a|)``), which
    agree with the tree wherever the protection is inactive (not, say, for
    ``x0 / (x1 - x1)``, where the tree gives 1).  ``exact=True`` writes what
    the evaluators compute: constants at full float32 precision, ``div``,
    ``log``, ``inv`` and ``pow`` as the guarded functions ``pdiv``, ``plog``,
    ``pinv``, ``ppow`` (``pdiv(a, b)`` is 1 where ``|b| <= PROTECT_EPS``, ...;
    ``expr.rewrite(sympy.Piecewise)`` spells them out) and ``exp``'s clamp at
    ``EXP_CLIP``; ``sympy.lambdify(..., "numpy")`` of it reproduces the
    predictions up to float32 vs float64 rounding.

    ``simplify=False`` returns the literal translation (built with sympy's
    automatic evaluation off), in time linear in the tree size.  With ``simplify=True`` the expression goes through
    ``sympy.simplify`` only if the tree has at most ``max_simplify_nodes``
    nodes, and only for up to ``simplify_timeout`` seconds (``None``: no
    time bound); when either bound is hit the unsimplified expression is
    returned, so the call never hangs on a large tree.
    """
    import sympy as sp

    from tfevo.gp.trees import _sympy_table

    table = _sympy_table()
    if exact:
        table.update(_exact_table())
    digits = 9 if exact else 6  # 9 significant digits round-trip every float32
    t, v, s = _one(trees, index)
    n = int(s[0])
    nvars = int(v[:n][t[:n] == VAR].max()) + 1 if np.any(t[:n] == VAR) else 0
    names = list(var_names) if var_names is not None else [f"x{i}" for i in range(nvars)]
    if len(names) < nvars:
        raise ValueError(f"var_names has {len(names)} names, the tree uses {nvars} variables")
    syms = [sp.Symbol(str(nm)) for nm in names]
    outs = [sp.Integer(0) for _ in range(num_outputs)]

    def rec(i):
        ty = t[i]
        if ty == CONST:
            return sp.Float(float(v[i]), digits)
        if ty == VAR:
            return syms[int(v[i])]
        if ty == OUT:
            val = rec(i + 1)
            outs[int(v[i])] = outs[int(v[i])] + val
            return val
        f = get_function(int(v[i]))
        args, c = [], i + 1
        for _ in range(f.arity):
            args.append(rec(c))
            c += int(s[c])
        fn = f.sympy_fn or table.get(f.name) or sp.Function(f.name)
        return fn(*args)

    with sp.core.parameters.evaluate(False):  # literal: no automatic (possibly costly) rewriting
        root = rec(0)
    res = [root] if num_outputs == 1 else outs
    if simplify and n <= int(max_simplify_nodes):
        res = [_bounded_simplify(e, simplify_timeout) for e in res]
    return res[0] if num_outputs == 1 else res


def _keras_layer_cls():
    import keras

    @keras.saving.register_keras_serializable(package="tfevo")
    class GPExpression(keras.layers.Layer):
        """A Keras layer computing one GP tree on inputs ``[batch, F]``.

        Output: ``[batch]`` (one output) or ``[batch, K]``.  Serializable:
        the prefix arrays are the layer's config.

        Example:

        >>> import numpy as np
        >>> from tfevo.gp import GeneticProgramming, GPConfig
        >>> from tfevo.gp.export import to_keras
        >>> trees = GeneticProgramming(GPConfig(popsize=8, num_vars=2), seed=0).ask()
        >>> layer = to_keras(trees, index=0)
        >>> layer(np.zeros((4, 2), np.float32)).shape
        TensorShape([4])
        """

        def __init__(self, types, values, sizes, num_outputs=1, **kw):
            super().__init__(**kw)
            self.tree_types = [int(a) for a in types]
            self.tree_values = [float(a) for a in values]
            self.tree_sizes = [int(a) for a in sizes]
            self.num_outputs = int(num_outputs)

        def call(self, x):
            import tensorflow as tf

            x = tf.convert_to_tensor(x, tf.float32)
            zeros = tf.zeros_like(x[:, 0])

            def leaf(ty, value):
                return zeros + value if ty == CONST else x[:, int(value)]

            root, outs = fold_prefix(self.tree_types, self.tree_values, self.tree_sizes, self.num_outputs, leaf,
                                     lambda f, args: f.tf_fn(*args), lambda a, b: a + b)
            if self.num_outputs == 1:
                return root
            return tf.stack([zeros if o is None else o for o in outs], axis=1)

        def get_config(self):
            cfg = super().get_config()
            cfg.update(types=self.tree_types, values=self.tree_values, sizes=self.tree_sizes,
                       num_outputs=self.num_outputs)
            return cfg

    return GPExpression


_CLS = None


def GPExpression(*args, **kw):  # noqa: N802 - class factory (keras imported lazily)
    """Creates the Keras layer class instance (see :func:`to_keras`)."""
    global _CLS
    if _CLS is None:
        _CLS = _keras_layer_cls()
    return _CLS(*args, **kw)


def _keras_ops_table():
    """The built-in functions in Keras' own operations, operation for operation as their ``tf_fn``."""
    from keras import ops

    from tfevo.gp.functions import EXP_CLIP, PROTECT_EPS

    eps = float(PROTECT_EPS)

    def nan_if(cond, x):
        return ops.where(cond, float("nan"), x)

    def div(a, b):
        near0 = ops.abs(b) <= eps
        return nan_if(ops.isnan(a), ops.where(near0, 1.0, a / ops.where(near0, 1.0, b)))

    def pw(a, b):
        x = ops.abs(a)
        near0 = x <= eps
        return nan_if(ops.isnan(a) | ops.isnan(b), ops.where(near0, 0.0, ops.power(ops.where(near0, 1.0, x), b)))

    def log(a):
        x = ops.abs(a)
        near0 = x <= eps
        return ops.where(near0, 0.0, ops.log(ops.where(near0, 1.0, x)))

    def inv(a):
        near0 = ops.abs(a) <= eps
        return ops.where(near0, 0.0, 1.0 / ops.where(near0, 1.0, a))

    return {
        "add": lambda a, b: a + b,
        "sub": lambda a, b: a - b,
        "mul": lambda a, b: a * b,
        "div": div,
        "pow": pw,
        "max": lambda a, b: nan_if(ops.isnan(a) | ops.isnan(b), ops.where(a > b, a, b)),
        "min": lambda a, b: nan_if(ops.isnan(a) | ops.isnan(b), ops.where(a < b, a, b)),
        "neg": lambda a: -a,
        "abs": ops.abs,
        "sqrt": lambda a: ops.sqrt(ops.abs(a)),
        "log": log,
        "exp": lambda a: ops.exp(ops.where(a > float(EXP_CLIP), float(EXP_CLIP), a)),
        "sin": ops.sin,
        "cos": ops.cos,
        "tan": ops.tan,
        "tanh": ops.tanh,
        "sigmoid": lambda a: 1.0 / (1.0 + ops.exp(-a)),
        "inv": inv,
        "iflt": lambda a, b, c, d: nan_if(ops.isnan(a) | ops.isnan(b), ops.where(a < b, c, d)),
        "square": lambda a: a * a,
        "cube": lambda a: a * a * a,
    }


def to_keras(trees, index: int = 0, num_outputs: int = 1, num_inputs: int | None = None, model: bool = False):
    """A Keras layer (or, with ``model=True``, a ``keras.Model`` taking
    ``[batch, num_inputs]``) that computes tree ``index``: ``[batch]`` for one
    output, else ``[batch, num_outputs]``.

    The model is built from Keras' own operations (``keras.ops``), node by
    node, so a saved ``.keras`` file loads with plain
    ``keras.models.load_model`` in a process that has never imported tfevo,
    and computes what the TensorFlow evaluator computes.  A tree using a
    user-registered function is exported around a :class:`GPExpression`
    layer instead, as is the layer of ``model=False``: loading those needs
    ``import tfevo.gp`` (and the function registered) first."""
    t, v, s = _one(trees, index)
    n = int(s[0])
    used = int(v[:n][t[:n] == VAR].max()) + 1 if np.any(t[:n] == VAR) else 0
    if num_inputs is None:
        num_inputs = max(used, 1)
    elif int(num_inputs) < used:
        raise ShapeError(f"num_inputs={num_inputs}: tree {index} reads x{used - 1}, so it needs at least {used} inputs")
    table = _keras_ops_table()
    fids = [int(v[i]) for i in range(n) if t[i] not in (CONST, VAR, OUT)]
    if not model or not all(get_function(f).name in table and get_function(f).builtin for f in fids):
        layer = GPExpression(t[:n].tolist(), v[:n].tolist(), s[:n].tolist(), num_outputs)
        if not model:
            return layer
        import keras

        inp = keras.Input((int(num_inputs),))
        return keras.Model(inp, layer(inp))
    import keras
    from keras import ops

    inp = keras.Input((int(num_inputs),), name="inputs")
    zeros = ops.zeros_like(inp[:, 0])

    def leaf(ty, value):
        return zeros + float(np.float32(value)) if ty == CONST else inp[:, int(value)]

    root, outs = fold_prefix(t, v, s, num_outputs, leaf, lambda f, args: table[f.name](*args), lambda a, b: a + b)
    out = root if num_outputs == 1 else ops.stack([zeros if o is None else o for o in outs], axis=1)
    return keras.Model(inp, out, name="gp_program")
