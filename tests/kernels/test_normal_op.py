"""The Gaussian sampler op (custom_ops/normal.cc, issue #2) against its pure-TF reference."""

import math
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from tfevo import kernels, ops
from tfevo.strategies import shaping
from tfevo.strategies.shaping import _gaussian_population, _normal, _normal_reference

needs_op = pytest.mark.skipif(not kernels.built("TfevoGaussianPopulation"), reason="normal custom op not built (no compiler)")

SHAPES = [(1, 1), (2, 3), (7, 5), (33, 129), (64, 1000), (5, 4099)]


def _ulp_close(got, ref, ulps=8):
    """|got - ref| within a few float32 ulp of the larger of |ref| and 1 (Box-Muller of the same uniforms)."""
    got, ref = np.asarray(got), np.asarray(ref)
    tol = ulps * np.spacing(np.maximum(np.abs(ref), 1.0).astype(np.float32))
    bad = np.abs(got - ref) > tol
    assert not bad.any(), f"{bad.sum()} elements differ by more than {ulps} ulp; max {np.abs(got - ref).max()}"


@needs_op
@pytest.mark.parametrize("n,d", SHAPES)
def test_op_matches_reference(n, d):
    seed = tf.constant([12345, -678], tf.int32)
    ref = _normal_reference([n, d], seed).numpy()
    got = _normal([n, d], seed, use_op=True).numpy()
    assert got.shape == (n, d) and got.dtype == np.float32
    _ulp_close(got, ref)


@needs_op
@pytest.mark.parametrize("seed", [(7, 99), (-1, 2**31 - 1), (0, 0), (-(2**31), 5)])
def test_uniforms_bit_identical(seed):
    """The library's Philox stream (TfevoStatelessUniform) equals tf.random.stateless_uniform bit for bit,
    including odd lengths and offsets that are not multiples of 4 or of the chunk size."""
    mod = ops.load("normal")
    s = tf.constant(seed, tf.int32)
    for n in (1, 3, 4, 17, 2048, 2049, 100003):
        ref = tf.random.stateless_uniform([n], seed=s).numpy()
        got = mod.tfevo_stateless_uniform(shape=tf.constant([n], tf.int32), seed=s).numpy()
        np.testing.assert_array_equal(got.view(np.uint32), ref.view(np.uint32))


@needs_op
def test_normals_built_from_the_same_uniforms():
    """Radius and angle of each (cos, sin) pair give back the reference's uniforms (to rounding)."""
    seed = tf.constant([7, 99], tf.int32)
    n, d = 64, 257
    h = n // 2
    u = tf.random.stateless_uniform([2, h, d], seed=seed).numpy().astype(np.float64)
    z = _normal([n, d], seed, use_op=True).numpy().astype(np.float64)
    r, t = np.hypot(z[:h], z[h:]), np.arctan2(z[h:], z[:h])
    np.testing.assert_allclose(-np.expm1(-0.5 * r**2), u[0], atol=1e-6)
    du = np.abs(np.mod(t, 2 * math.pi) / (2 * math.pi) - u[1])
    ok = r > 1e-3
    assert np.all(np.minimum(du, 1 - du)[ok] < 1e-6)


@needs_op
@pytest.mark.parametrize("mirrored", [True, False])
@pytest.mark.parametrize("per_dim", [True, False])
def test_population_matches_reference(mirrored, per_dim):
    d, p = 301, 24
    rng = np.random.default_rng(0)
    center = tf.constant(rng.normal(size=d), tf.float32)
    sigma = tf.constant(rng.uniform(0.1, 2.0, size=d), tf.float32) if per_dim else tf.constant(0.3)
    seed = tf.constant([5, 6], tf.int32)
    ref = _gaussian_population(center, sigma, p, mirrored, seed, use_op=False).numpy()
    got = _gaussian_population(center, sigma, p, mirrored, seed, use_op=True).numpy()
    assert got.shape == (p, d)
    np.testing.assert_allclose(got, ref, rtol=0, atol=4e-6 * 8)
    if mirrored:
        c = center.numpy()
        np.testing.assert_allclose(got[: p // 2] - c, c - got[p // 2:], atol=1e-5)


@needs_op
def test_reproducible_and_thread_independent():
    seed = tf.constant([1, 2], tf.int32)
    a = _normal([200, 1000], seed, use_op=True).numpy()
    b = _normal([200, 1000], seed, use_op=True).numpy()
    np.testing.assert_array_equal(a, b)
    c = _normal([200, 1000], tf.constant([1, 3], tf.int32), use_op=True).numpy()
    assert np.mean(a == c) < 0.01
    # the same draw with one intra-op thread (fresh process) is bit-identical
    code = (
        "import tensorflow as tf, numpy as np, sys;"
        "tf.config.threading.set_intra_op_parallelism_threads(1);"
        "from tfevo.strategies.shaping import _normal;"
        "np.save(sys.argv[1], _normal([200, 1000], tf.constant([1, 2], tf.int32), use_op=True).numpy())"
    )
    out = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"tfevo_normal_{os.getpid()}.npy")
    subprocess.run([sys.executable, "-c", code, out], check=True, capture_output=True, timeout=120)
    try:
        np.testing.assert_array_equal(np.load(out), a)
    finally:
        os.unlink(out)


@needs_op
def test_inside_tf_function_and_xla_falls_back():
    seed = tf.constant([3, 4], tf.int32)
    eager = _normal([10, 50], seed).numpy()
    graph = tf.function(lambda s: _normal([10, 50], s))(seed).numpy()
    np.testing.assert_array_equal(graph, eager)
    # under XLA the op (no XLA kernel) is skipped: the result is the reference's, compiled by XLA
    # (XLA's own stateless RNG: a different stream from TF's kernels, with or without this op)
    xla = tf.function(lambda s: _normal([10, 50], s), jit_compile=True)(seed).numpy()
    xla_ref = tf.function(lambda s: _normal_reference([10, 50], s), jit_compile=True)(seed).numpy()
    np.testing.assert_array_equal(xla, xla_ref)
    with pytest.raises(RuntimeError, match="not available"):
        tf.function(lambda s: _normal([10, 50], s, use_op=True), jit_compile=True, autograph=False)(seed)


def test_normal_statistics():
    z = _normal([4000, 250], tf.constant([11, 12], tf.int32)).numpy().ravel()
    assert abs(z.mean()) < 0.005 and abs(z.std() - 1.0) < 0.005
    assert abs(np.mean(z < -1.0) - 0.158655) < 0.002


def test_disable_env_forces_reference():
    code = (
        "import tensorflow as tf, numpy as np;"
        "from tfevo.strategies import shaping;"
        "from tfevo import kernels;"
        "assert not kernels.built('TfevoGaussianPopulation');"
        "a = shaping._normal([6, 7], tf.constant([1, 2], tf.int32)).numpy();"
        "b = shaping._normal_reference([6, 7], tf.constant([1, 2], tf.int32)).numpy();"
        "np.testing.assert_array_equal(a, b); print('ok')"
    )
    env = dict(os.environ, TFEVO_DISABLE_CUSTOM_OPS="1")
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "ok" in proc.stdout, proc.stderr[-2000:]


@needs_op
def test_op_input_errors():
    mod = ops.load("normal")
    with pytest.raises(tf.errors.InvalidArgumentError, match="scale must be"):
        mod.tfevo_gaussian_population(tf.constant([1, 2]), tf.ones([3]), tf.zeros([0]), rows=2, dim=4)
    with pytest.raises(tf.errors.InvalidArgumentError, match="center must be"):
        mod.tfevo_gaussian_population(tf.constant([1, 2]), tf.constant(1.0), tf.zeros([3]), rows=2, dim=4)


@needs_op
@pytest.mark.parametrize("name", ["open_es", "snes", "sep_cma_es"])
def test_strategy_ask_op_vs_reference(name, monkeypatch):
    """A strategy's ask with the op equals its ask with the reference up to float rounding."""
    from tfevo.strategies import OpenES, SNES, SepCMAES

    cls = {"open_es": OpenES, "snes": SNES, "sep_cma_es": SepCMAES}[name]
    a = cls(num_dims=500, popsize=32, seed=3, dtype="float32")
    xa = a.ask().numpy()
    monkeypatch.setattr(shaping, "_gaussian_op", lambda use_op, *inputs: None)  # force the TF reference
    b = cls(num_dims=500, popsize=32, seed=3, dtype="float32")
    xb = b.ask().numpy()
    assert xa.shape == xb.shape == (32, 500)
    np.testing.assert_allclose(xa, xb, rtol=1e-5, atol=1e-6)
