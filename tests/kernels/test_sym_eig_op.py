"""The LAPACK eigendecomposition op (custom_ops/sym_eig.cc, issue #2) against its pure-TF reference.

Tolerances (stated, from LAPACK's backward-error bounds): with eps the dtype's
machine epsilon and ||x|| the spectral norm,
* eigenvalues of both paths within ``4 n eps ||x||`` of the float64 NumPy values;
* ``|V diag(e) V^T - x| <= 4 n eps ||x||`` and ``|V^T V - I| <= 4 n eps`` (max entry);
* for a spectrum with gaps >= 1 and ||x|| = n, the two paths' eigenvectors agree
  entry by entry within ``4 n^2 eps`` (the perturbation bound eps ||x|| / gap,
  times n for accumulated rounding), which includes the same canonical sign.
"""

import ctypes
import glob
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from tfevo import kernels, linalg, ops
from tfevo.core import ShapeError
from tfevo.linalg import canonical_sign, eigh, eigh_reference

needs_op = pytest.mark.skipif(not (kernels.built("TfevoSymEig") and linalg.lapack_library() is not None), reason="sym_eig op not built or no LAPACK")

SIZES = [1, 2, 3, 17, 64, 300]
DTYPES = [np.float32, np.float64]


def _matrix(kind, n, dtype, seed=0):
    rng = np.random.default_rng(seed + 1000 * n)
    q, _ = np.linalg.qr(rng.normal(size=(n, n)))
    if kind == "spd":
        a = rng.normal(size=(n, n))
        x = a @ a.T / n + 0.1 * np.eye(n)
    elif kind == "indefinite":
        a = rng.normal(size=(n, n))
        x = (a + a.T) / 2
    elif kind == "repeated":  # eigenvalues 3 (half) and -1 (half): large degenerate eigenspaces
        e = np.where(np.arange(n) % 2 == 0, 3.0, -1.0)
        x = (q * e) @ q.T
    else:  # "separated": eigenvalues 1..n, gaps of 1
        x = (q * np.arange(1.0, n + 1)) @ q.T
    x = (x + x.T) / 2
    return x.astype(dtype)


def _eps(dtype):
    return float(np.finfo(dtype).eps)


def _check_decomposition(x, e, v):
    n, dt = x.shape[0], x.dtype
    norm = max(np.abs(np.linalg.eigvalsh(x.astype(np.float64))).max(), 1e-30)
    tol = 4 * n * _eps(dt) * norm
    assert e.dtype == dt and v.dtype == dt and e.shape == (n,) and v.shape == (n, n)
    assert np.all(np.diff(e) >= 0), "eigenvalues not ascending"
    np.testing.assert_allclose(e, np.linalg.eigvalsh(x.astype(np.float64)), rtol=0, atol=tol)
    v64, e64 = v.astype(np.float64), e.astype(np.float64)
    np.testing.assert_allclose((v64 * e64) @ v64.T, x, rtol=0, atol=tol)
    np.testing.assert_allclose(v64.T @ v64, np.eye(n), rtol=0, atol=4 * n * _eps(dt))
    # canonical sign: each column's largest-|.| entry (first on ties) is positive
    piv = v[np.argmax(np.abs(v), axis=0), np.arange(n)]
    assert np.all(piv > 0)


@needs_op
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", ["spd", "indefinite", "repeated"])
def test_op_and_reference_decompose(kind, dtype):
    for n in SIZES:
        x = _matrix(kind, n, dtype)
        e, v = (t.numpy() for t in eigh(x, use_op=True))
        _check_decomposition(x, e, v)
        er, vr = (t.numpy() for t in eigh(x, use_op=False))
        _check_decomposition(x, er, vr)


@needs_op
@pytest.mark.parametrize("dtype", DTYPES)
def test_separated_spectrum_same_vectors_and_signs(dtype):
    for n in SIZES:
        x = _matrix("separated", n, dtype, seed=3)
        e, v = (t.numpy() for t in eigh(x, use_op=True))
        er, vr = (t.numpy() for t in eigh(x, use_op=False))
        tol = 4 * n * n * _eps(dtype)
        np.testing.assert_allclose(e, er, rtol=0, atol=tol)
        np.testing.assert_allclose(v, vr, rtol=0, atol=tol)
        # signs: each op eigenvector points the same way as the reference's
        assert np.all(np.sum(v.astype(np.float64) * vr, axis=0) > 0.99)


@needs_op
def test_reads_lower_triangle_only():
    """Like tf.linalg.eigh, the upper triangle is ignored (LAPACK is asked for the transposed view's 'U')."""
    rng = np.random.default_rng(5)
    for dtype in DTYPES:
        x = _matrix("separated", 40, dtype, seed=5)
        junk = x + np.triu(rng.normal(size=x.shape) * 100, k=1).astype(dtype)
        e, v = (t.numpy() for t in eigh(junk, use_op=True))
        er, vr = (t.numpy() for t in eigh(x, use_op=True))
        np.testing.assert_array_equal(e, er)
        np.testing.assert_array_equal(v, vr)
        e2, _ = eigh(junk, use_op=False)
        np.testing.assert_allclose(e, e2.numpy(), rtol=0, atol=4 * 40 * _eps(dtype) * 40)


@needs_op
def test_batched_equals_single_and_deterministic():
    """A [2, 3, n, n] batch (split over the intra-op pool) gives each matrix's single-call result bit for bit."""
    n = 48
    xs = np.stack([_matrix(k, n, np.float32, seed=s) for s in range(2) for k in ("spd", "indefinite", "repeated")])
    xs = xs.reshape(2, 3, n, n)
    e, v = (t.numpy() for t in eigh(xs, use_op=True))
    assert e.shape == (2, 3, n) and v.shape == (2, 3, n, n)
    for i in range(2):
        for j in range(3):
            e1, v1 = (t.numpy() for t in eigh(xs[i, j], use_op=True))
            np.testing.assert_array_equal(e[i, j], e1)
            np.testing.assert_array_equal(v[i, j], v1)
    e_again, v_again = (t.numpy() for t in eigh(xs, use_op=True))
    np.testing.assert_array_equal(e, e_again)
    np.testing.assert_array_equal(v, v_again)
    er, vr = (t.numpy() for t in eigh(xs, use_op=False))
    assert er.shape == e.shape and vr.shape == v.shape


@needs_op
def test_inside_tf_function_and_xla():
    """Graph mode uses the op; under jit_compile the dispatcher falls back to tf.linalg.eigh (same results)."""
    x = tf.constant(_matrix("separated", 30, np.float32, seed=7))
    graph = tf.function(lambda m: eigh(m))
    xla = tf.function(lambda m: eigh(m), jit_compile=True)
    ops_in_graph = {op.type for op in graph.get_concrete_function(x).graph.get_operations()}
    assert "TfevoSymEig" in ops_in_graph
    e, v = graph(x)
    ex, vx = xla(x)
    er, vr = eigh_reference(x)
    np.testing.assert_allclose(ex.numpy(), er.numpy(), rtol=0, atol=1e-4)
    np.testing.assert_allclose(vx.numpy(), vr.numpy(), rtol=0, atol=1e-4)
    np.testing.assert_allclose(v.numpy(), vr.numpy(), rtol=0, atol=4 * 30 * 30 * _eps(np.float32))


def test_canonical_sign_reference():
    v = tf.constant([[0.6, -0.8, 0.0], [-0.8, -0.6, 0.0], [0.0, 0.0, -1.0]])
    got = canonical_sign(v).numpy()
    np.testing.assert_array_equal(got, np.float32([[-0.6, 0.8, 0.0], [0.8, 0.6, 0.0], [0.0, 0.0, 1.0]]))
    # ties: the first largest-|.| entry decides
    t = tf.constant([[-1.0, 1.0], [1.0, 1.0]]) / np.sqrt(2.0)
    np.testing.assert_allclose(canonical_sign(t).numpy(), [[1, 1], [-1, 1]] / np.sqrt(2.0), rtol=1e-6)


def test_bad_input_is_a_clear_error():
    with pytest.raises(ShapeError, match="square"):
        eigh(np.zeros((3, 4), np.float32))
    with pytest.raises(ShapeError, match="square"):
        eigh(np.zeros((4,), np.float32))
    with pytest.raises(ShapeError, match="float32 or float64"):
        eigh(np.eye(3, dtype=np.int32))
    bad = np.eye(4, dtype=np.float32)
    bad[2, 1] = np.nan
    for use_op in ([True, False] if (kernels.built("TfevoSymEig") and linalg.lapack_library() is not None) else [False]):
        with pytest.raises(tf.errors.InvalidArgumentError):
            eigh(bad, use_op=use_op)


@needs_op
def test_kernel_checks_shape_and_library():
    mod = ops.load("sym_eig")
    # shape unknown at trace time: the kernel itself rejects a non-square matrix
    f = tf.function(lambda m: mod.tfevo_sym_eig(m, lapack=linalg.lapack_library()),
                    input_signature=[tf.TensorSpec([None, None], tf.float32)])
    with pytest.raises(tf.errors.InvalidArgumentError, match="square"):
        f(tf.zeros([2, 3]))
    with pytest.raises(tf.errors.NotFoundError, match="cannot load the LAPACK library /nonexistent/liblapack.so"):
        mod.tfevo_sym_eig(tf.eye(2), lapack="/nonexistent/liblapack.so")
    libm = next((p for p in ("/lib/x86_64-linux-gnu/libm.so.6", "/usr/lib/x86_64-linux-gnu/libm.so.6",
                             "/lib64/libm.so.6") if os.path.exists(p)), None)
    if libm:
        with pytest.raises(tf.errors.NotFoundError, match="exports no ssyevd"):
            mod.tfevo_sym_eig(tf.eye(2), lapack=libm)
    e, v = mod.tfevo_sym_eig(tf.zeros([0, 0]), lapack=linalg.lapack_library())
    assert e.shape == (0,) and v.shape == (0, 0)


@needs_op
def test_private_copy_leaves_numpys_thread_count_alone():
    """The op sets its OpenBLAS copy to 1 thread; numpy's own OpenBLAS keeps its setting."""
    libs = glob.glob(str(Path(np.__file__).resolve().parent.parent / "numpy.libs" / "libscipy_openblas64_*.so"))
    if not libs or Path(linalg.lapack_library()).resolve() == Path(libs[0]).resolve():
        pytest.skip("op is not using a private copy of numpy's OpenBLAS")
    lib = ctypes.CDLL(libs[0])  # the already-loaded instance numpy uses
    get, set_ = lib.scipy_openblas_get_num_threads64_, lib.scipy_openblas_set_num_threads64_
    old = get()
    try:
        set_(3)
        eigh(_matrix("spd", 200, np.float32), use_op=True)
        assert get() == 3
    finally:
        set_(old)


def test_fallback_without_custom_ops():
    """TFEVO_DISABLE_CUSTOM_OPS=1: eigh is tf.linalg.eigh with the canonical sign, and no warning."""
    code = (
        "import logging, numpy as np, tensorflow as tf\n"
        "logging.basicConfig(level=logging.WARNING)\n"
        "from tfevo import linalg\n"
        "from tfevo import kernels\n"
        "assert not kernels.built('TfevoSymEig')\n"
        "rng = np.random.default_rng(0); a = rng.normal(size=(20, 20)).astype(np.float32); x = a + a.T\n"
        "e, v = linalg.eigh(x); e2, v2 = linalg.eigh(x)\n"
        "er, vr = tf.linalg.eigh(x)\n"
        "np.testing.assert_array_equal(e.numpy(), er.numpy())\n"
        "np.testing.assert_array_equal(np.abs(v.numpy()), np.abs(vr.numpy()))\n"
        "piv = v.numpy()[np.argmax(np.abs(v.numpy()), axis=0), np.arange(20)]\n"
        "assert (piv > 0).all()\n"
        "try:\n"
        "    linalg.eigh(x, use_op=True)\n"
        "    raise SystemExit('use_op=True did not raise')\n"
        "except RuntimeError as err:\n"
        "    assert 'not available' in str(err)\n"
        "print('FALLBACK-OK')\n"
    )
    env = dict(os.environ, TFEVO_DISABLE_CUSTOM_OPS="1")
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "FALLBACK-OK" in out.stdout
    # the user switched the kernels off: the reference runs without a warning (the dispatch logs at debug level)
    assert "unavailable" not in out.stderr


@needs_op
def test_cma_es_uses_canonical_eigenbasis():
    """CMA-ES's B after a refresh is the op's (canonically signed) eigenbasis of C."""
    from tfevo.strategies import CMAES

    es = CMAES(num_dims=12, sigma=0.5, seed=3, eigen_gap=1)
    for _ in range(6):
        x = es.ask()
        es.tell(x, -tf.reduce_sum(tf.square(x - 1.0), axis=1))
    c, b, d = es.covariance().numpy(), es.B.numpy(), es.D.numpy()
    piv = b[np.argmax(np.abs(b), axis=0), np.arange(12)]
    assert np.all(piv > 0)
    assert not np.allclose(c, np.eye(12), atol=1e-3)  # C did adapt
    np.testing.assert_allclose((b * d**2) @ b.T, c, rtol=0, atol=1e-5 * np.abs(c).max())
    e, v = eigh(c, use_op=True)
    np.testing.assert_array_equal(b, v.numpy())


# ---------------------------------------------------------------------------
# TfevoEigenRefresh: the eigen CMA-ES's update + eigendecomposition in place

needs_eigen_refresh = pytest.mark.skipif(not (kernels.built("TfevoEigenRefresh") and linalg.lapack_library() is not None), reason="refresh op not built")


def _refresh_case(n, k, dtype, seed=0):
    rng = np.random.default_rng(seed + n)
    a = rng.normal(size=(n, n))
    c = np.tril(a @ a.T / n + np.eye(n)).astype(dtype)
    r = rng.normal(size=(k, n)).astype(dtype)
    v = (rng.normal(size=k) * 0.3 / n).astype(dtype)  # mixed signs, as active CMA's weights (C stays PD)
    return c, r, v, dtype(0.93)


def _vars(c):
    n = c.shape[0]
    return tf.Variable(c), tf.Variable(tf.eye(n, dtype=c.dtype)), tf.Variable(tf.ones([n], c.dtype))


@needs_eigen_refresh
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n,k", [(7, 5), (300, 33)])  # 300 > one 128 tile: the tiled update
def test_eigen_refresh_op_is_syrk_update_then_eigh(n, k, dtype):
    """The op equals the two ops it fuses, bit for bit, and the pure-TF reference to rounding."""
    c, r, v, s = _refresh_case(n, k, dtype)
    cv, bv, dv = _vars(c)
    up, ref = linalg.eigen_refresh(cv, bv, dv, r, v, s, use_op=True)
    assert bool(up) and bool(ref)
    c_new = linalg.syrk_update(c, r, v, s, use_op=True).numpy()
    e, vec = linalg.eigh(c_new, use_op=True)
    e = e.numpy()
    lo = max(e.max() * (1e-14 if dtype == np.float64 else 1e-12), np.finfo(dtype).tiny)
    np.testing.assert_array_equal(cv.numpy(), c_new)
    np.testing.assert_array_equal(bv.numpy(), vec.numpy())
    np.testing.assert_array_equal(dv.numpy(), np.sqrt(np.maximum(e, lo)).astype(dtype))
    assert np.all(np.triu(cv.numpy(), 1) == 0)  # C is kept as its lower triangle
    # the reference path on the same start
    cr, br, dr = _vars(c)
    upr, refr = linalg.eigen_refresh_reference(cr, br, dr, r, v, s)
    assert bool(upr) and bool(refr)
    eps = np.finfo(dtype).eps
    scale = np.abs(c_new).max()
    np.testing.assert_allclose(cr.numpy(), c_new, rtol=0, atol=8 * k * eps * scale)
    np.testing.assert_allclose(dr.numpy() ** 2, dv.numpy() ** 2, rtol=0, atol=4 * n * eps * scale)
    full = np.tril(c_new) + np.tril(c_new, -1).T
    assert e.min() > 0.1  # no floored eigenvalue: B D^2 B^T is C
    for b, d in ((bv.numpy(), dv.numpy()), (br.numpy(), dr.numpy())):
        np.testing.assert_allclose((b * d**2) @ b.T, full, rtol=0, atol=4 * n * eps * scale)


@needs_eigen_refresh
def test_eigen_refresh_inside_tf_function_and_without_rows():
    c, r, v, s = _refresh_case(40, 9, np.float32, seed=2)
    cv, bv, dv = _vars(c)
    f = tf.function(lambda flag: linalg.eigen_refresh(cv, bv, dv, r, v, s, refresh=flag, use_op=True))
    up, ref = f(tf.constant(False))  # update only: B, D untouched
    assert bool(up) and not bool(ref)
    np.testing.assert_array_equal(bv.numpy(), np.eye(40, dtype=np.float32))
    c1 = cv.numpy()
    up, ref = tf.function(lambda: linalg.eigen_refresh(cv, bv, dv, use_op=True))()  # decomposition only
    assert not bool(up) and bool(ref)
    np.testing.assert_array_equal(cv.numpy(), c1)
    np.testing.assert_array_equal(bv.numpy(), linalg.eigh(c1, use_op=True)[1].numpy())


@pytest.mark.parametrize("use_op", [pytest.param(True, marks=needs_eigen_refresh), False])
def test_eigen_refresh_failures_keep_the_state(use_op):
    """not ok, a NaN weight or a non-finite C: nothing non-finite is ever committed."""
    c, r, v, s = _refresh_case(12, 4, np.float32, seed=3)
    cv, bv, dv = _vars(c)
    linalg.eigen_refresh(cv, bv, dv, use_op=use_op)
    b0, d0 = bv.numpy(), dv.numpy()
    up, ref = linalg.eigen_refresh(cv, bv, dv, r, v, s, ok=False, use_op=use_op)  # ok=False: C kept
    assert not bool(up) and bool(ref)
    np.testing.assert_array_equal(cv.numpy(), c)
    v_bad = v.copy()
    v_bad[1] = np.nan
    up, ref = linalg.eigen_refresh(cv, bv, dv, r, v_bad, s, use_op=use_op)
    assert not bool(up) and bool(ref)
    np.testing.assert_array_equal(cv.numpy(), c)
    np.testing.assert_array_equal(bv.numpy(), b0)
    bad = c.copy()
    bad[5, 2] = np.inf
    cv.assign(bad)
    up, ref = linalg.eigen_refresh(cv, bv, dv, refresh=True, use_op=use_op)
    assert not bool(ref)
    np.testing.assert_array_equal(bv.numpy(), b0)
    np.testing.assert_array_equal(dv.numpy(), d0)


@needs_eigen_refresh
def test_eigen_refresh_never_writes_a_shared_buffer():
    """Tensors read before the call keep their values (copy-on-write as an assignment)."""
    c, r, v, s = _refresh_case(200, 16, np.float32, seed=4)
    cv, bv, dv = _vars(c)
    linalg.eigen_refresh(cv, bv, dv, r, v, s, use_op=True)
    held = [t.read_value() for t in (cv, bv, dv)]
    copies = [t.numpy().copy() for t in held]
    for _ in range(2):  # the second call would reuse the spare buffer that the first swapped out
        linalg.eigen_refresh(cv, bv, dv, r, v, s, use_op=True)
    for t, want in zip(held, copies):
        np.testing.assert_array_equal(t.numpy(), want)
    assert not np.array_equal(cv.numpy(), copies[0])


def test_eigen_refresh_bad_input_is_a_clear_error():
    c, r, v, s = _refresh_case(6, 3, np.float32)
    cv, bv, dv = _vars(c)
    with pytest.raises(ShapeError, match="rows"):
        linalg.eigen_refresh(cv, bv, dv, r[:, :5], v, s)
    with pytest.raises(ShapeError, match="tf.Variable"):
        linalg.eigen_refresh(c, bv, dv, r, v, s)
    with pytest.raises(ShapeError, match="d \\[n\\]"):
        linalg.eigen_refresh(cv, bv, tf.Variable(tf.ones([5])), r, v, s)


@needs_eigen_refresh
def test_cma_es_tell_runs_the_fused_op():
    """CMAES's traced tell holds one TfevoEigenRefresh and no separate eigh."""
    from tfevo.strategies import CMAES

    es = CMAES(num_dims=8, seed=1)
    x = es.ask()
    es.tell(x, -tf.reduce_sum(x * x, axis=1))
    graph = es._tell_fn.get_concrete_function().graph
    types = [op.type for op in graph.get_operations()]
    for fn in graph._functions.values():
        types += [n.op for n in fn.definition.node_def]
    assert types.count("TfevoEigenRefresh") == 1
    assert "TfevoSymEig" not in types and "SelfAdjointEigV2" not in types


@needs_eigen_refresh
def test_split_decomposition_bits_do_not_depend_on_the_thread_count():
    """n >= 257: the back-transformation runs in column blocks fixed by n over the intra-op pool;
    a one-thread pool (subprocess) gives the same bits as this process's pool (eigh and eigen_refresh)."""
    code = (
        "import sys, hashlib, numpy as np, tensorflow as tf\n"
        "tf.config.threading.set_intra_op_parallelism_threads(int(sys.argv[1]))\n"
        "from tfevo import linalg\n"
        "rng = np.random.default_rng(5)\n"
        "a = rng.normal(size=(600, 600)); c = (a @ a.T / 600 + np.eye(600)).astype(np.float32)\n"
        "e, v = linalg.eigh(c, use_op=True)\n"
        "cv, bv, dv = tf.Variable(np.tril(c)), tf.Variable(tf.eye(600)), tf.Variable(tf.ones([600]))\n"
        "linalg.eigen_refresh(cv, bv, dv, use_op=True)\n"
        "np.testing.assert_array_equal(bv.numpy(), v.numpy())\n"
        "h = hashlib.sha256(e.numpy().tobytes() + v.numpy().tobytes() + dv.numpy().tobytes()).hexdigest()\n"
        "print('HASH', h)\n"
    )
    root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ)
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run([sys.executable, "-c", code, "1"], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    theirs = [l for l in out.stdout.splitlines() if l.startswith("HASH")][0]
    import hashlib

    rng = np.random.default_rng(5)
    a = rng.normal(size=(600, 600))
    c = (a @ a.T / 600 + np.eye(600)).astype(np.float32)
    e, v = linalg.eigh(c, use_op=True)
    cv, bv, dv = tf.Variable(np.tril(c)), tf.Variable(tf.eye(600)), tf.Variable(tf.ones([600]))
    linalg.eigen_refresh(cv, bv, dv, use_op=True)
    np.testing.assert_array_equal(bv.numpy(), v.numpy())
    mine = "HASH " + hashlib.sha256(e.numpy().tobytes() + v.numpy().tobytes() + dv.numpy().tobytes()).hexdigest()
    assert tf.config.threading.get_intra_op_parallelism_threads() != 1  # (0 = one per core: 2 here)
    assert mine == theirs


def test_in_place_ops_leave_gpu_variables_to_the_reference():
    """The in-place ops have CPU kernels only: variables on another device take the reference path."""
    class FakeVar:
        def __init__(self, device):
            self.device = device

    cpu, gpu = FakeVar("/job:localhost/replica:0/task:0/device:CPU:0"), FakeVar("/job:localhost/device:GPU:0")
    assert kernels.on_host(cpu, FakeVar(""), gpu)  # no GPU present: everything is on the host
    kernels.gpu_present()
    saved = list(kernels.device._VISIBLE)
    kernels.device._VISIBLE[:] = [True]  # as on a machine with a GPU: the placement decides
    try:
        assert kernels.on_host(cpu, cpu)
        assert not kernels.on_host(cpu, FakeVar(""), cpu)  # unplaced: goes to the GPU
        assert not kernels.on_host(cpu, gpu, cpu)
        assert not kernels.on_host(FakeVar("/device:TPU:0"))
        assert not kernels.on_host()
    finally:
        kernels.device._VISIBLE[:] = saved
    with kernels.assume_gpu():  # an assumed GPU: every tensor is where it would be on a GPU machine
        c, b, d = tf.Variable(tf.eye(3)), tf.Variable(tf.eye(3)), tf.Variable(tf.ones([3]))
        assert kernels.kernel("TfevoEigenRefresh", None, [c, b, d]) is None


def test_eigh_reads_only_the_lower_triangle_on_both_paths():
    """A NaN or inf above the diagonal is never read (as tf.linalg.eigh): both paths decompose the
    lower triangle's symmetric matrix; below the diagonal it raises."""
    x = np.array([[2.0, np.nan, np.inf], [1.0, 3.0, -np.inf], [0.5, -1.0, 4.0]], np.float32)
    sym = np.tril(x) + np.tril(x, -1).T
    want = np.linalg.eigvalsh(sym.astype(np.float64))
    paths = [True, False] if (kernels.built("TfevoSymEig") and linalg.lapack_library() is not None) else [False]
    for use_op in paths:
        e, v = eigh(x, use_op=use_op)
        np.testing.assert_allclose(e.numpy(), want, rtol=1e-5, err_msg=f"use_op={use_op}")
        with pytest.raises(tf.errors.InvalidArgumentError):
            eigh(x.T, use_op=use_op)
