"""TfevoPopulationConv2D (custom_ops/pop_conv.cc) against its pure-TF reference, the im2col path."""

import os
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfevo import nn, ops
from tfevo.core import ConfigError
from tfevo import kernels
from tfevo.nn.layers import population_conv2d

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
needs_op = pytest.mark.skipif(not kernels.built("TfevoPopulationConv2D"), reason="pop_conv op not built (no compiler)")

# (n, B, H, W, C, kh, kw, F, strides, padding, M): the Nature-DQN layers, odd channel counts (masked
# vector tails, several 64-channel chunks), rectangular kernels/strides, 1x1 kernels, VALID and SAME.
CASES = [
    (3, 1, 84, 84, 4, 8, 8, 32, (4, 4), "same", 5),
    (2, 1, 21, 21, 32, 4, 4, 64, (2, 2), "same", 4),
    (2, 2, 11, 11, 64, 3, 3, 64, (1, 1), "same", 3),
    (2, 3, 9, 10, 3, 3, 5, 5, (2, 1), "same", 3),
    (2, 2, 30, 33, 4, 8, 8, 20, (4, 4), "valid", 3),
    (1, 1, 7, 7, 2, 1, 1, 100, (2, 2), "valid", 2),
    (2, 1, 12, 12, 2, 3, 3, 17, (1, 1), "valid", 2),
    (3, 1, 13, 6, 1, 2, 2, 150, (3, 2), "same", 4),
    (1, 2, 5, 5, 7, 5, 5, 48, (1, 1), "same", 1),
    (0, 1, 8, 8, 2, 3, 3, 4, (1, 1), "same", 2),
]


def _op(x, k, b, idx, strides, padding, relu):
    mod = ops.op_module("pop_conv", "tfevo_population_conv2d")
    return mod.tfevo_population_conv2d(x, k, b if b is not None else tf.zeros([0, 0]), idx, strides=list(strides),
                                       padding=padding.upper(), activation="relu" if relu else "none",
                                       use_bias=b is not None)


def _exact(x, k, b, idx, strides, padding):
    """float64 convolution via numpy (zero padding by TensorFlow's rule)."""
    n, B, H, W, C = x.shape
    kh, kw, F = k.shape[1], k.shape[2], k.shape[4]
    sh, sw = strides
    if padding == "same":
        ho, wo = -(-H // sh), -(-W // sw)
        ph, pw = max((ho - 1) * sh + kh - H, 0), max((wo - 1) * sw + kw - W, 0)
        x = np.pad(x, [(0, 0), (0, 0), (ph // 2, ph - ph // 2), (pw // 2, pw - pw // 2), (0, 0)])
    else:
        ho, wo = (H - kh) // sh + 1, (W - kw) // sw + 1
    out = np.zeros((n, B, ho, wo, F))
    for ky in range(kh):
        for kx in range(kw):
            patch = x[:, :, ky:ky + (ho - 1) * sh + 1:sh, kx:kx + (wo - 1) * sw + 1:sw, :]
            out += np.einsum("nbhwc,ncf->nbhwf", patch, k[idx, ky, kx])
    return out if b is None else out + b[idx][:, None, None, None, :]


@needs_op
@pytest.mark.parametrize("case", CASES, ids=[f"c{i}" for i in range(len(CASES))])
def test_op_equals_im2col_reference(case):
    n, B, H, W, C, kh, kw, F, strides, padding, M = case
    rng = np.random.default_rng(sum(case[:8]))
    x = rng.normal(size=(n, B, H, W, C)).astype(np.float32)
    k = rng.normal(size=(M, kh, kw, C, F)).astype(np.float32)
    b = rng.normal(size=(M, F)).astype(np.float32)
    idx = rng.integers(0, M, n).astype(np.int32)
    exact = _exact(x.astype(np.float64), k.astype(np.float64), b.astype(np.float64), idx, strides, padding)
    K = kh * kw * C
    for bias, relu in ((True, True), (False, False), (True, False)):
        bb = b if bias else None
        act = "relu" if relu else None
        got = _op(x, k, bb, idx, strides, padding, relu).numpy()
        ref = population_conv2d(x, k, bb, strides, padding, act, idx, method="im2col").numpy()
        assert got.shape == ref.shape == (n, B) + exact.shape[2:]
        if n == 0:
            continue
        want = exact if bias else exact - b[idx][:, None, None, None, :]
        if relu:
            want = np.maximum(want, 0.0)
        # Same products, summed in im2col's (kh, kw, C) order with FMAs; the reference's GEMM may block
        # the sum differently, so agreement is to float32 rounding of K-term sums.
        err_op, err_ref = np.abs(got - want).max(), np.abs(ref - want).max()
        assert err_op <= 2.0 * err_ref + 4e-7 * np.sqrt(K) * np.abs(want).max(), (err_op, err_ref)
        atol = 4 * np.finfo(np.float32).eps * np.sqrt(K) * np.abs(want).max()
        np.testing.assert_allclose(got, ref, rtol=1e-6, atol=atol)
        if relu:  # identical discrete decisions: the same outputs are clamped to zero
            assert ((got == 0) == (ref == 0)).mean() > 0.999


@needs_op
def test_dispatch_auto_xla_and_disabled(monkeypatch):
    """method="auto" runs the op in graphs, im2col under XLA and with TFEVO_DISABLE_CUSTOM_OPS=1."""
    rng = np.random.default_rng(1)
    x = tf.constant(rng.normal(size=(3, 1, 12, 12, 2)), tf.float32)
    k = tf.constant(rng.normal(size=(5, 3, 3, 2, 8)), tf.float32)
    b = tf.constant(rng.normal(size=(5, 8)), tf.float32)
    idx = tf.constant([4, 0, 4], tf.int32)

    def conv(x, k, b, i):
        return population_conv2d(x, k, b, 2, "same", "relu", i)

    def graph_ops(f):
        return {nd.op for nd in f.get_concrete_function(x, k, b, idx).graph.as_graph_def().node}

    plain = tf.function(conv, autograph=False)
    xla = tf.function(conv, jit_compile=True, autograph=False)
    assert "TfevoPopulationConv2D" in graph_ops(plain)
    assert "TfevoPopulationConv2D" not in graph_ops(xla) and "ExtractImagePatches" in graph_ops(xla)
    ref = population_conv2d(x, k, b, 2, "same", "relu", idx, method="im2col").numpy()
    np.testing.assert_allclose(plain(x, k, b, idx).numpy(), ref, rtol=1e-6, atol=1e-5)
    np.testing.assert_allclose(xla(x, k, b, idx).numpy(), ref, rtol=1e-5, atol=1e-5)
    # a non-fused activation is applied after the op; the full population runs without indices
    y = population_conv2d(x, k[:3], b[:3], 1, "valid", "tanh")
    np.testing.assert_allclose(y.numpy(), population_conv2d(x, k[:3], b[:3], 1, "valid", "tanh", method="im2col").numpy(),
                               rtol=1e-6, atol=1e-6)
    monkeypatch.setenv("TFEVO_DISABLE_CUSTOM_OPS", "1")
    assert "TfevoPopulationConv2D" not in graph_ops(tf.function(conv, autograph=False))
    with pytest.raises(ConfigError, match="method must be one of"):
        population_conv2d(x, k, b, 1, "same", None, idx, method="direct")


@needs_op
def test_non_finite_weights_and_errors():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(2, 1, 6, 6, 3)).astype(np.float32)
    k = rng.normal(size=(3, 3, 3, 3, 4)).astype(np.float32)
    k[1, 0, 0, 0, 2] = np.nan
    k[2, 1, 1, 1, 0] = np.inf
    idx = np.array([1, 2], np.int32)
    got = _op(x, k, None, idx, (1, 1), "same", True).numpy()
    ref = population_conv2d(x, k, None, 1, "same", "relu", idx, method="im2col").numpy()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))  # zero padding times inf/NaN is NaN in both
    assert np.isnan(got[0, ..., 2]).any()
    fin = np.isfinite(ref)
    np.testing.assert_allclose(got[fin], ref[fin], rtol=1e-5, atol=1e-5)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"idx\[1\] = 3 is out of range \[0, 3\)"):
        _op(x, k, None, np.array([0, 3], np.int32), (1, 1), "same", False)
    with pytest.raises((tf.errors.InvalidArgumentError, ValueError)):
        _op(x[..., :2], k, None, idx, (1, 1), "same", False)  # channel mismatch
    with pytest.raises(tf.errors.InvalidArgumentError, match="bias must be"):
        _op(x, k, np.zeros((3, 5), np.float32), idx, (1, 1), "same", False)


@needs_op
def test_nature_dqn_actions_identical_to_im2col_and_keras():
    """The whole Nature-DQN population forward: op path == im2col path (outputs to rounding, same argmax)."""
    template = nn.nature_dqn(18)
    fast, ref = nn.PopulationModel(template), nn.PopulationModel(template, conv_method="im2col")
    P = 6
    params = fast.init_params(P, seed=3)
    params = params + tf.random.stateless_normal(params.shape, [3, 1]) * 0.01
    x = tf.random.stateless_uniform((4, 1, 84, 84, 4), [5, 5])
    idx = tf.constant([5, 1, 1, 3], tf.int32)
    ws = fast.unflatten(params)
    y_fast, y_ref = fast(ws, x, idx).numpy(), ref(ws, x, idx).numpy()
    np.testing.assert_allclose(y_fast, y_ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(y_fast.argmax(-1), y_ref.argmax(-1))
    keras_out = np.stack([np.asarray(fast.to_keras(params[i])(x[j])) for j, i in enumerate(idx.numpy())])
    np.testing.assert_allclose(y_fast, keras_out, rtol=1e-5, atol=1e-5)


THREADS = """
    import sys, numpy as np, tensorflow as tf
    if int(sys.argv[1]) > 0:
        tf.config.threading.set_intra_op_parallelism_threads(int(sys.argv[1]))
    from tfevo import ops
    conv = ops.op_module("pop_conv", "tfevo_population_conv2d").tfevo_population_conv2d
    mm = ops.op_module("indexed_matmul", "tfevo_indexed_matmul").tfevo_indexed_matmul
    rng = np.random.default_rng(0)
    x = tf.constant(rng.normal(size=(5, 2, 21, 21, 32)), tf.float32)
    k = tf.constant(rng.normal(size=(6, 4, 4, 32, 64)), tf.float32)
    b = tf.constant(rng.normal(size=(6, 64)), tf.float32)
    idx = tf.constant([5, 0, 3, 3, 1], tf.int32)
    y = conv(x, k, b, idx, strides=[2, 2], padding="SAME", activation="relu")
    xd = tf.constant(rng.normal(size=(5, 1, 3000)), tf.float32)
    wd = tf.constant(rng.normal(size=(6, 3000, 700)), tf.float32)
    z = mm(xd, wd, idx)
    np.save(sys.argv[2], np.concatenate([y.numpy().ravel(), z.numpy().ravel()]))
"""


@needs_op
def test_results_do_not_depend_on_thread_count(tmp_path):
    """The conv and dense kernels give bit-identical results with 1 intra-op thread (a subprocess) and
    with this process's default pool."""
    env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="3")
    code = textwrap.dedent(THREADS)
    proc = subprocess.run([sys.executable, "-c", code, "1", str(tmp_path / "t1.npy")], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    here = {}
    exec(compile(code.replace("np.save(sys.argv[2], ", "out = (").replace("sys.argv[1]", "'0'"), "threads", "exec"),
         here)
    one = np.load(tmp_path / "t1.npy")
    np.testing.assert_array_equal(here["out"].view(np.uint32), one.view(np.uint32))
    assert tf.config.threading.get_intra_op_parallelism_threads() != 1 or os.cpu_count() == 1


def test_keras_layer_default_and_config():
    layer = nn.PopulationConv2D(4, 3, padding="valid", activation="relu", seed=1)
    assert layer.method == "auto" and layer.get_config()["method"] == "auto"
    x = tf.random.stateless_normal((2, 1, 6, 6, 3), [0, 1])
    y = layer(x)
    ref = keras.layers.Conv2D(4, 3, activation="relu")
    ref.build((None, 6, 6, 3))
    ref.set_weights([layer.kernel[1].numpy(), layer.bias[1].numpy()])
    np.testing.assert_allclose(y[1].numpy(), ref(x[1]).numpy(), rtol=1e-5, atol=1e-6)
    old = nn.PopulationConv2D.from_config(dict(layer.get_config(), method="im2col"))  # configs saved before "auto"
    assert old.method == "im2col"


@needs_op
@pytest.mark.parametrize("case", [(84, 84, 4, 8, 4, 32, "SAME"), (20, 17, 3, 3, 1, 5, "VALID"), (9, 9, 2, 4, 2, 7, "SAME")])
def test_flat_op_uint8_input_with_scale_matches_cast_then_scale(case):
    """TfevoPopulationConv2DFlat on uint8 frames with input_scale == the op on tf.cast(x) * scale, bit for bit
    (and a float input with input_scale == the op on x * scale)."""
    H, W, C, k, s, F, pad = case
    conv = ops.op_module("pop_conv", "tfevo_population_conv2d_flat").tfevo_population_conv2d_flat
    rng = np.random.default_rng(H + W)
    P, n = 5, 3
    D = k * k * C * F + F + 3
    params = tf.constant(rng.normal(0, 0.1, (P, D)).astype(np.float32))
    idx = tf.constant([4, 0, 2], tf.int32)
    kw = dict(kernel_offset=3, kernel_size=[k, k], filters=F, bias_offset=3 + k * k * C * F, strides=[s, s],
              padding=pad, activation="relu")
    xu = tf.constant(rng.integers(0, 256, (n, 1, H, W, C)).astype(np.uint8))
    ref = conv(tf.cast(xu, tf.float32) * (1.0 / 255.0), params, idx, **kw).numpy()
    got = conv(xu, params, idx, input_scale=1.0 / 255.0, **kw).numpy()
    assert np.abs(ref).max() > 0
    np.testing.assert_array_equal(got, ref)
    xf = tf.constant(rng.normal(0, 1, (n, 1, H, W, C)).astype(np.float32))
    np.testing.assert_array_equal(conv(xf, params, idx, input_scale=0.37, **kw).numpy(),
                                  conv(xf * 0.37, params, idx, **kw).numpy())
