"""GP evaluation contract: NaN propagation through the protected operators
(C++ op, TF reference and NumPy interpreter agree), bitwise reproducibility
(repeated evaluation, repeated fits, other thread counts) and a bounded
sympy export."""

import itertools
import os
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

from tfevo import kernels
from tfevo.gp import (
    FunctionSet, SymbolicRegressor, TerminalSet, builtin_functions, evaluate, from_prefix, generate, interpret,
    mse, to_sympy,
)
from tfevo.gp.trees import get_function, to_prefix

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SPECIAL = np.array([0.0, 1e-4, -1e-4, 0.5, -2.0, 3.0, 90.0, -90.0, np.inf, -np.inf, np.nan], np.float32)
USE_OPS = [False, True] if kernels.built("GpEval") else [False]


def _grid(arity):
    pts = np.array(list(itertools.product(SPECIAL, repeat=min(arity, 2))), np.float32)
    if arity == 4:  # iflt: the special values in the condition, then NaN in each branch
        pts = np.concatenate([pts, np.tile(np.float32([[1.0, 2.0]]), (len(pts), 1))], 1)
        pts = np.concatenate([pts, np.float32([[1, 2, np.nan, 3], [2, 1, np.nan, 3], [1, 2, 3, np.nan],
                                               [2, 1, 3, np.nan]])])
    return pts


@pytest.mark.parametrize("fn", builtin_functions())
def test_every_operator_agrees_on_nan_and_inf_inputs(fn):
    a = get_function(fn).arity
    x = _grid(a)
    tr = from_prefix([[fn] + [f"x{i}" for i in range(a)]], 8)
    ref = interpret(tr, x, 0)
    # a NaN argument always gives NaN (iflt: a NaN in the condition or the chosen branch)
    nan_in = np.isnan(x).any(1) if fn != "iflt" else (
        np.isnan(x[:, :2]).any(1) | np.where(x[:, 0] < x[:, 1], np.isnan(x[:, 2]), np.isnan(x[:, 3])))
    np.testing.assert_array_equal(np.isnan(ref) & nan_in, nan_in)
    for use_op in USE_OPS:
        y = evaluate(tr, x, use_op=use_op).numpy()[0]
        np.testing.assert_array_equal(np.isnan(y), np.isnan(ref), err_msg=f"{fn} {use_op}")
        same = (y == ref) | np.isnan(ref) | np.isclose(y, ref, rtol=2e-6, atol=1e-6)
        assert same.all(), (fn, use_op, x[~same][:4], y[~same][:4], ref[~same][:4])


def test_protection_guards_the_domain_only():
    trees = from_prefix([["div", "x0", "x1"], ["div", "x1", "x2"], ["log", "x1"], ["pow", "x1", 2.0],
                         ["pow", 1.0, "x1"], ["min", "x1", 0.5], ["max", 0.5, "x1"], ["inv", "x1"],
                         ["iflt", "x1", 0.0, 1.0, 2.0], ["div", "x0", "x2"], ["log", "x2"], ["inv", "x2"],
                         ["pow", "x2", 2.0]], 8)
    x = np.float32([[0.5, np.nan, 0.0]])
    want = [np.nan] * 9 + [1.0, 0.0, 0.0, 0.0]
    for use_op in USE_OPS:
        np.testing.assert_array_equal(evaluate(trees, x, use_op=use_op).numpy()[:, 0], np.float32(want))
    np.testing.assert_array_equal(np.array([interpret(trees, x, p)[0] for p in range(13)]), np.float32(want))
    # a tree that meets NaN gets the worst fitness
    loss = mse(trees, np.float32([[0.5, np.nan, 0.0], [1.0, 2.0, 0.0]]), np.float32([0.0, 0.0])).numpy()
    assert np.all(np.isinf(loss[:9])) and np.all(np.isfinite(loss[9:]))


# -- reproducibility -----------------------------------------------------------
def _random_population(P=1000, seed=(4, 2)):
    fs = FunctionSet(builtin_functions())
    return generate(tf.constant(seed), P, 64, fs, TerminalSet(3, 0.3, (-3.0, 3.0)), (2, 7)), fs


@pytest.mark.skipif(not kernels.built("GpEval"), reason="gp_eval custom op not built")
def test_compiled_evaluator_is_bitwise_repeatable_and_batch_independent():
    tr, fs = _random_population()
    x = np.random.RandomState(0).uniform(-3, 3, (1000, 3)).astype(np.float32)  # 1000 = 15 chunks + 40
    y = np.sin(x[:, 0]) * x[:, 1] + np.exp(x[:, 2] / 3)
    first = evaluate(tr, x, 1, fs, use_op=True).numpy()
    loss = mse(tr, x, y, fs, use_op=True).numpy()
    for _ in range(5):
        np.testing.assert_array_equal(evaluate(tr, x, 1, fs, use_op=True).numpy(), first)
        np.testing.assert_array_equal(mse(tr, x, y, fs, use_op=True).numpy(), loss)
    # a point's value does not depend on the other points of the batch
    for lo, hi in ((0, 37), (5, 700), (960, 1000)):
        np.testing.assert_array_equal(evaluate(tr, x[lo:hi], 1, fs, use_op=True).numpy(), first[:, lo:hi])


FIT = dict(population_size=300, generations=6, max_len=48, tournament_size=7,
           function_set=("add", "sub", "mul", "div", "sin", "exp", "log"), random_state=3)


def _fit_signature():
    x = np.random.RandomState(1).uniform(-2, 2, (300, 2))
    y = np.sin(x[:, 0]) * x[:, 1] ** 2 + np.log(1 + x[:, 0] ** 2)
    est = SymbolicRegressor(**FIT).fit(x, y)
    return (np.asarray(est.program_.types).tobytes().hex() + np.asarray(est.program_.values).tobytes().hex(),
            np.float64(est.best_mse_).tobytes().hex(), np.float64(est.history_).tobytes().hex())


def test_same_seed_same_program_and_best_mse_bit_for_bit():
    a = _fit_signature()
    b = _fit_signature()
    assert a == b


_SCRIPT = """
import sys, tensorflow as tf
n, root, tests, fit = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4] == "1"
tf.config.threading.set_intra_op_parallelism_threads(n)
sys.path[:0] = [tests, root]
import numpy as np
from test_gp_contract import _fit_signature, _random_population
from tfevo.gp import mse
tr, fs = _random_population(300)
x = np.random.RandomState(0).uniform(-3, 3, (1000, 3)).astype(np.float32)
y = np.sin(x[:, 0]) * x[:, 1]
print(np.asarray(mse(tr, x, y, fs)).tobytes().hex(), *(_fit_signature() if fit else ()))
"""


def _in_subprocess(threads, fit):
    env = dict(os.environ, TF_NUM_INTRAOP_THREADS=str(threads), OMP_NUM_THREADS=str(threads),
               TF_CPP_MIN_LOG_LEVEL="3")
    r = subprocess.run([sys.executable, "-c", _SCRIPT, str(threads), ROOT, os.path.join(ROOT, "tests", "gp"),
                        "1" if fit else "0"], capture_output=True, text=True, env=env, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout.split()


def test_same_mse_bits_with_one_intra_op_thread():
    """This process uses one intra-op thread per core; the subprocess one."""
    tr, fs = _random_population(300)
    x = np.random.RandomState(0).uniform(-3, 3, (1000, 3)).astype(np.float32)
    y = np.sin(x[:, 0]) * x[:, 1]
    assert _in_subprocess(1, False) == [np.asarray(mse(tr, x, y, fs)).tobytes().hex()]


@pytest.mark.slow
def test_same_bits_for_other_intra_op_thread_counts():
    a, b = _in_subprocess(1, True), _in_subprocess(5, True)
    assert a == b
    assert a[1:] == list(_fit_signature())


# -- sympy export ------------------------------------------------------------------
def test_to_sympy_is_bounded_on_a_large_tree():
    import sympy as sp

    fs = FunctionSet(["add", "sub", "mul", "div", "pow", "log", "exp", "sin", "max", "iflt"])
    tr = generate(tf.constant([1, 2]), 20, 128, fs, TerminalSet(3, 0.3, (-2.0, 2.0)), (6, 8), "full")
    p = int(np.argmax(tr.sizes.numpy()[:, 0]))
    assert int(tr.sizes[p, 0]) >= 50
    to_sympy(from_prefix([["add", "x0", 1.0]], 4))  # sympy import outside the timing
    t0 = time.perf_counter()
    lit = to_sympy(tr, p, simplify=False)
    t1 = time.perf_counter()
    to_sympy(tr, p)  # default: too large to simplify -> the literal form
    t2 = time.perf_counter()
    to_sympy(tr, p, max_simplify_nodes=10_000, simplify_timeout=1.0)  # time-bounded simplify
    t3 = time.perf_counter()
    assert t1 - t0 < 1.0 and t2 - t1 < 1.0 and t3 - t2 < 4.0, (t1 - t0, t2 - t1, t3 - t2)
    # the literal export computes the tree where no protection is active
    small = from_prefix([["add", "mul", "x0", "sin", "x1", "div", "x2", 2.0]], 8)
    xs = np.random.RandomState(0).uniform(-2, 2, (20, 3)).astype(np.float32)
    f = sp.lambdify(sp.symbols("x0 x1 x2"), to_sympy(small, simplify=False), "numpy")
    np.testing.assert_allclose(f(*xs.T), interpret(small, xs, 0), rtol=1e-5)
    assert isinstance(lit, sp.Expr)


def test_exact_sympy_export_keeps_the_protection_and_full_constants():
    """``exact=True``: the expression computes what the evaluators compute,
    also where a protection is active (``x0 / (x1 - x1)`` is 1 in the tree,
    inf in the plain export) and with constants a 6-digit print would round."""
    import sympy as sp

    tr = from_prefix([["add", "div", "x0", "sub", "x1", "x1", "mul", 0.123456789, "log", "sub", "x0", "x0"],
                      ["add", "inv", "sub", "x0", "x0", "pow", "x1", "div", "x0", 0.5],
                      ["add", "exp", "mul", 50.0, "x0", "div", "x0", "div", "x1", "sub", "x0", 0.3333333]], 16)
    xs = np.random.RandomState(0).uniform(-2, 2, (50, 2)).astype(np.float32)
    xs[0] = [0.3333333, 1.0]  # the last tree's inner divisor is 0 there
    for i in range(3):
        want = interpret(tr, xs, i)
        f = sp.lambdify(sp.symbols("x0 x1"), to_sympy(tr, i, simplify=False, exact=True), "numpy")
        with np.errstate(all="ignore"):
            got = f(*xs.astype(np.float64).T) * np.ones(len(xs))
            plain = sp.lambdify(sp.symbols("x0 x1"), to_sympy(tr, i, simplify=False), "numpy")(
                *xs.astype(np.float64).T) * np.ones(len(xs))
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)  # exp(~80): float32 rounding x 80
        assert not np.allclose(plain, want, rtol=1e-4, atol=1e-4, equal_nan=True)  # the reading form differs
    e = to_sympy(tr, 0, simplify=False, exact=True)
    assert "0.123456791" in str(e)  # float32(0.123456789), 9 digits
    assert not e.rewrite(sp.Piecewise).has(sp.Function("pdiv"))
    assert "pdiv" not in str(to_sympy(from_prefix([["div", "x0", 1.0]], 4), exact=True))  # a decided guard folds


def test_exact_sympy_export_propagates_nan_like_the_evaluators():
    """A NaN argument gives NaN through a guard's fallback (``div(NaN, 0)``, ``pow(NaN, 0)``,
    ``pow(0, NaN)``, ``pow(1, NaN)``) and through ``iflt``'s condition, in the evaluators and
    in the exact export alike."""
    import sympy as sp

    tr = from_prefix([["div", "x0", "x1"], ["pow", "x0", "x1"], ["iflt", "x0", "x1", "x2", "x3"]], 8)
    v = [np.nan, 0.0, 1.0, -2.0]
    xs = np.array([r for r in itertools.product(v, repeat=4)], np.float32)
    syms = sp.symbols("x0:4")
    for i in range(3):
        want = interpret(tr, xs, i)
        f = sp.lambdify(syms, to_sympy(tr, i, simplify=False, exact=True), "numpy")
        with np.errstate(all="ignore"):
            got = f(*xs.astype(np.float64).T) * np.ones(len(xs))
        np.testing.assert_allclose(got, want, rtol=1e-6, equal_nan=True, err_msg=to_prefix(tr, i)[0])
        assert np.isnan(want[np.isnan(xs[:, 0]) | np.isnan(xs[:, 1])]).all()


# -- crossover points ----------------------------------------------------------------
def test_crossover_points_prefer_function_nodes_like_gplearn():
    from tfevo.gp import GPConfig, weighted_node
    tr = generate(tf.constant([3, 3]), 4000, 64, FunctionSet(["add", "mul", "sin"]), TerminalSet(2, 0.3, (-1, 1)),
                  (2, 5))
    t = tr.types.numpy()
    n_func = (t == 3).sum(1).astype(float)
    n_leaf = ((t == 1) | (t == 2)).sum(1).astype(float)
    for p in (0.9, 0.5):
        idx = weighted_node(tf.constant([1, 2]), tr, p).numpy()
        picked_func = t[np.arange(len(t)), idx] == 3
        expect = np.mean(p * n_func / (p * n_func + (1 - p) * n_leaf))
        assert abs(picked_func.mean() - expect) < 0.03, (p, picked_func.mean(), expect)
        assert np.all(idx < tr.sizes.numpy()[:, 0])
    assert GPConfig().crossover_p_func == 0.9
