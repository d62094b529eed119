"""GP evaluator kernels (custom_ops/gp_eval.cc) against the pure-TF reference on edge inputs:
every built-in function on infinities, NaN, float32 extremes and the protection thresholds in
each argument, and mean squared errors whose squares leave float32."""

import itertools

import numpy as np
import pytest
import tensorflow as tf

from tfevo import kernels
from tfevo.gp import evaluate, mse, mse_reference
from tfevo.gp.functions import PROTECT_EPS, builtin_functions
from tfevo.gp.trees import from_prefix, get_function

SPECIAL = np.array([0.0, -0.0, PROTECT_EPS, -PROTECT_EPS, 1.0, -1.0, 2.5, -3.0, 88.0, 89.0, 100.0, -100.0, 1e30,
                    -1e30, 3.4e38, -3.4e38, np.inf, -np.inf, np.nan], np.float32)


def test_mse_reference_squares_in_float64():
    """An error of 2e19 squares to 4e38 (> float32 max); the mean over 10 points, 4e37, is finite."""
    tr = from_prefix([["x0"], ["sub", "x0", "x1"], ["mul", "x0", "x0"]], 8)
    x = np.zeros([10, 2], np.float32)
    x[0] = [2e19, 1.0]
    y = np.zeros([10], np.float32)
    pred = np.stack([x[:, 0], x[:, 0] - x[:, 1], x[:, 0] * x[:, 0]]).astype(np.float64)
    want = np.mean(np.square(pred - y), axis=1).astype(np.float32)
    want[~np.isfinite(want)] = np.inf
    got = mse_reference(tr, x, y).numpy()
    np.testing.assert_array_equal(got, want)
    assert np.isfinite(got[:2]).all() and got[2] == np.inf  # 4e38 itself is not a float32
    if kernels.built("GpMse"):
        np.testing.assert_array_equal(mse(tr, x, y, use_op=True).numpy(), got)


@pytest.mark.skipif(not kernels.built("GpEval"), reason="gp_eval custom op not built")
@pytest.mark.parametrize("fn", builtin_functions())
def test_each_function_on_special_values(fn):
    """Every pair of special values in the first two arguments: the same NaN and inf pattern, and
    the same values to float rounding."""
    a = get_function(fn).arity
    x = np.array(list(itertools.product(SPECIAL, repeat=min(a, 2))), np.float32)
    if a > 2:
        x = np.concatenate([x, np.tile(np.array([[5.0, -7.0]], np.float32), (len(x), 1))], 1)
    tr = from_prefix([[fn] + [f"x{i}" for i in range(a)]], 8)
    got = evaluate(tr, x, use_op=True).numpy()[0]
    ref = evaluate(tr, x, use_op=False).numpy()[0]
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
    np.testing.assert_array_equal(np.isposinf(got), np.isposinf(ref))
    np.testing.assert_array_equal(np.isneginf(got), np.isneginf(ref))
    fin = np.isfinite(ref)
    np.testing.assert_allclose(got[fin], ref[fin], rtol=2e-6, atol=1e-30)
    y = np.zeros([len(x)], np.float32)
    np.testing.assert_array_equal(np.isfinite(mse(tr, x[fin], y[fin], use_op=True).numpy()),
                                  np.isfinite(mse_reference(tr, x[fin], y[fin]).numpy()))
