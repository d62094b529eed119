"""Tests of the Cholesky-factor CMA-ES (CholeskyCMAES) and its Cholesky op.

tests/strategies/test_cma.py runs its seed-reproducibility, checkpoint and trace-once
tests for CholeskyCMAES too (parametrised).  Here: the convergence check
against pycma, checkpoint continuation in the middle of a gap (update buffer
in use), NaN handling, and the Cholesky-specific checks are the distribution of the samples, the buffered
(deferred) covariance update against a NumPy transcription, the factor-based
stop-criteria bounds and the op against its pure-TF reference.
"""

import numpy as np
import pytest
import tensorflow as tf

from tfevo import kernels, linalg
from tfevo.problems.bbob import rosenbrock, sphere
from tfevo.strategies.cma_es import CholeskyCMAES
from tfevo.strategies.restarts import IPOP



def evals_to_target(es, f, target, max_evals):
    fit = tf.function(lambda x: (-f(x), tf.reduce_min(f(x))))
    evals = 0
    while evals < max_evals:
        x = es.ask()
        neg, best = fit(x)
        evals += int(x.shape[0])
        es.tell(x, neg)
        if float(best) < target:
            return evals
    return None


def _pycma_median(f, target, seeds):
    cma = pytest.importorskip("cma")
    out = []
    for s in seeds:
        es = cma.CMAEvolutionStrategy(np.zeros(10), 0.5, {"seed": s + 1, "verbose": -9, "tolfun": 0, "tolx": 0,
                                                          "tolfunhist": 0})
        n = np.inf
        while es.countevals < 50000:
            X = es.ask()
            F = list(f(np.asarray(X)).numpy())
            es.tell(X, F)
            if min(F) < target:
                n = es.countevals
                break
        out.append(n)
    return np.median(out)


# (the pycma-efficiency target is asserted for CMAES in test_cma.py; the Cholesky
# variant's Rosenbrock check, ~13 s, runs with `pytest -m slow`)
@pytest.mark.parametrize("fname,target", [("sphere", 1e-8), pytest.param("rosenbrock", 1e-6, marks=pytest.mark.slow)])
def test_cholesky_cma_matches_pycma_efficiency(fname, target):
    # Median evaluations over 5 runs within 1.5x of pycma's (issue #2's CMA criterion).
    f = {"sphere": sphere, "rosenbrock": rosenbrock}[fname]
    es = CholeskyCMAES(10, sigma=0.5, seed=0)
    ours = []
    for _ in range(5):
        es.reset()  # independent runs continuing one seed stream
        ours.append(evals_to_target(es, f, target, 50000) or np.inf)
    theirs = _pycma_median(f, target, range(5))
    assert np.median(ours) <= 1.5 * theirs, (ours, theirs)


def _run(es, gens, f=rosenbrock):
    out = []
    for _ in range(gens):
        x = es.ask()
        es.tell(x, -f(x))
        out.append(x.numpy())
    return np.stack(out)


def test_checkpoint_mid_gap_continues_exactly(tmp_path):
    # eigen_gap=3 and a save after 4 generations: the Cholesky variant's update
    # buffer holds one generation and the factor is one refactorisation old.
    es = CholeskyCMAES(6, sigma=0.5, seed=2, eigen_gap=3)
    _run(es, 4)
    assert es._buf_gens == 3 and float(tf.reduce_sum(tf.abs(es._vbuf))) > 0  # buffer in use
    path = tf.train.Checkpoint(algo=es).save(str(tmp_path / "ck"))
    ref = _run(es, 5)
    es2 = CholeskyCMAES(6, sigma=0.5, seed=2, eigen_gap=3)
    tf.train.Checkpoint(algo=es2).restore(path).assert_consumed()
    np.testing.assert_array_equal(_run(es2, 5), ref)


def test_nan_fitness_is_worst_and_never_propagates():
    es = CholeskyCMAES(6, sigma=0.5, seed=0, eigen_gap=2)
    for g in range(40):
        x = es.ask()
        f = -sphere(x)
        f = tf.tensor_scatter_nd_update(f, [[0], [3]], [np.nan, -np.inf])
        if g == 7:
            f = tf.fill([es.popsize], np.nan)
        if g == 9:
            x = tf.tensor_scatter_nd_update(x, [[1]], [tf.fill([6], np.nan)])  # a non-finite row
        es.tell(x, f)
    for v in (es._mean, es.sigma, es.C, es.A, es.c_diag, es.p_sigma, es.p_c, es._ybuf, es._vbuf, es._cscale):
        assert np.all(np.isfinite(v.numpy()))
    assert float(sphere(es.mean[None])[0]) < 1e-2
    es = CholeskyCMAES(2, sigma=1.0, seed=0)
    x = tf.constant([[10.0, 10.0]] + [[0.1 * i, 0.0] for i in range(1, es.popsize)], tf.float32)
    f = tf.concat([[np.nan], -tf.range(1, es.popsize, dtype=tf.float32)], 0)
    es.tell(x, f)
    assert float(tf.reduce_max(es.mean)) < 1.0


def test_registry():
    from tfevo.registry import get

    assert get("strategy", "cholesky_cma_es") is CholeskyCMAES


def _ellipsoid(x):
    """A rotated ellipsoid (so the learned C is far from diagonal)."""
    n = x.shape[1]
    q, _ = np.linalg.qr(np.random.default_rng(n).normal(size=(n, n)))
    scales = tf.constant(10.0 ** (np.arange(n) / 2.0), tf.float32)
    return tf.reduce_sum(tf.square(scales * tf.matmul(tf.cast(x, tf.float32) - 0.3, tf.constant(q, tf.float32))), 1)


def test_samples_follow_the_covariance():
    # After C has been shaped by an ill-scaled problem, the asked rows
    # (x - m) / sigma must have covariance C = A A^T: whitened by the current C
    # their sample covariance is I.  (A wrong factor, e.g. A = C or a transposed
    # A, fails this for the non-diagonal C reached here.)
    es = CholeskyCMAES(4, popsize=500, sigma=0.5, seed=3, eigen_gap=1)
    for _ in range(6):
        x = es.ask()
        es.tell(x, -_ellipsoid(x))
    c = es.covariance().numpy().astype(np.float64)
    np.testing.assert_allclose(c, es.A.numpy() @ es.A.numpy().T, rtol=1e-4, atol=1e-6 * np.abs(c).max())
    offdiag = np.abs(c - np.diag(np.diag(c))).max() / np.diag(c).max()
    assert offdiag > 0.05 and np.diag(c).max() / np.diag(c).min() > 3  # not near a multiple of I
    m, s = es._mean.numpy().astype(np.float64), float(es.sigma.numpy())
    y = np.concatenate([(es.ask().numpy() - m) / s for _ in range(40)])  # 20000 draws
    w = np.linalg.cholesky(c)
    zz = np.linalg.solve(w, y.T)
    emp = zz @ zz.T / y.shape[0]
    assert np.abs(emp - np.eye(4)).max() < 0.05, emp  # entries' std ~ 0.007-0.01
    assert np.abs(y.mean(0) @ np.linalg.inv(w).T).max() < 0.05


def _reference_step(es, x, f, A, C, z=None):
    """One generation of the Cholesky-variant CMA-ES in NumPy float64 (z = A^{-1} y, or
    the given z's of the rows of x: those ask drew)."""
    n = es.num_dims
    m, sigma = es._mean.numpy(), float(es.sigma.numpy())
    ps, pc = es.p_sigma.numpy(), es.p_c.numpy()
    w, mu, mueff = es.weights_np, es.mu, es.mueff
    cs, cc, c1, cmu = es.c_sigma, es.c_c, es.c1, es.cmu
    order = np.argsort(-f, kind="stable")
    y = (x[order] - m) / sigma
    z = np.linalg.solve(A, y.T).T if z is None else z[order]
    y_w = w[:mu] @ y[:mu]
    ps = (1 - cs) * ps + np.sqrt(cs * (2 - cs) * mueff) * (w[:mu] @ z[:mu])
    g = int(es.generation.numpy()) + 1
    h = float(np.linalg.norm(ps) / np.sqrt(1 - (1 - cs) ** (2 * g)) < (1.4 + 2 / (n + 1)) * es.chi_n)
    pc = (1 - cc) * pc + h * np.sqrt(cc * (2 - cc) * mueff) * y_w
    w_eff = w.copy()
    w_eff[mu:] *= n / np.sum(z[mu:] ** 2, axis=1)
    C = ((1 + c1 * (1 - h) * cc * (2 - cc) - c1 - cmu * w.sum()) * C + c1 * np.outer(pc, pc)
         + cmu * (y * w_eff[:, None]).T @ y)
    sigma_new = sigma * np.exp(min(1.0, cs / es.d_sigma * (np.linalg.norm(ps) / es.chi_n - 1)))
    return m + sigma * y_w, sigma_new, ps, pc, C


def test_buffered_update_matches_numpy_reference():
    # 7 generations with a refactorisation every 3: the deferred (buffered)
    # covariance update must equal the generation-by-generation update, the
    # path must use z = A^{-1} y with the factor of the last refactorisation
    # (both when tell reuses ask's z's and when it solves for them), and A must
    # be refreshed exactly at generations 3 and 6.
    es = CholeskyCMAES(6, sigma=0.7, seed=4, dtype="float64", init_params=0.3, eigen_gap=3)
    assert es._buf_gens == 3
    C = np.eye(6)
    A = np.eye(6)
    for g in range(7):
        x = es.ask()
        if g % 2:  # the rows in another order: tell must solve for z instead of reusing ask's
            x = tf.reverse(x, [0])
        f = -rosenbrock(x).numpy().astype(np.float64)
        np.testing.assert_allclose(es.A.numpy(), A, rtol=1e-9, atol=1e-12)
        z = None if g % 2 else es._z_last.numpy()  # the asked rows: tell uses ask's z's
        m, sigma, ps, pc, C = _reference_step(es, x.numpy().astype(np.float64), f, A, C, z)
        es.tell(x, f)
        if (g + 1) % 3 == 0:
            A = np.linalg.cholesky(C)
        np.testing.assert_allclose(es._mean.numpy(), m, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(es.p_sigma.numpy(), ps, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(es.p_c.numpy(), pc, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(float(es.sigma.numpy()), sigma, rtol=1e-9)
        np.testing.assert_allclose(es.covariance().numpy(), C, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(es.c_diag.numpy(), np.diag(C), rtol=1e-9, atol=1e-12)


def test_condition_bound_and_on_request_eigenvalues():
    es = CholeskyCMAES(5, sigma=1.0, seed=1, eigen_gap=1)
    for _ in range(150):
        x = es.ask()
        es.tell(x, -_ellipsoid(x))
    e = es.eigenvalues().numpy()
    np.testing.assert_allclose(e, np.linalg.eigvalsh(es.covariance().numpy()), rtol=1e-3)
    scales = es._axis_scales().numpy()
    bound = (scales.max() / scales.min()) ** 2
    assert 3.0 < bound <= e[-1] / e[0] * 1.001  # a lower bound of cond(C), and informative here
    assert es.axis_ratio() == pytest.approx(np.sqrt(e[-1] / e[0]), rel=1e-5)


def test_refactorisation_survives_an_indefinite_matrix():
    # A C that is not positive definite (as float32 rounding can make an
    # ill-conditioned C) is factorised with diagonal loading; A stays finite.
    es = CholeskyCMAES(3, sigma=1.0, seed=0, dtype="float32")
    es.C.assign(tf.constant([[1.0, 1.0, 0.0], [1.0, 1.0, 0.0], [0.0, 0.0, 2.0]], tf.float32) +
                tf.constant(np.diag([0.0, -1e-7, 0.0]), tf.float32))
    tf.function(es._refresh_op)()
    a = es.A.numpy()
    assert np.all(np.isfinite(a)) and not np.array_equal(a, np.eye(3))
    np.testing.assert_allclose(a @ a.T, es.C.numpy(), atol=1e-4)


@pytest.mark.slow  # (two popsizes, two compilations: kept out of the default suite's time budget)
def test_ipop_with_cholesky_inner():
    es = IPOP(3, sigma=2.0, init_range=(-5, 5), seed=0, tolfun=1e-2, tolx=1e-2, strategy=CholeskyCMAES)
    for _ in range(300):
        x = es.ask()
        es.tell(x, -sphere(x))
        if int(es.restarts.numpy()) >= 1:
            break
    assert int(es.restarts.numpy()) >= 1 and es.popsize == 2 * 7
    x = es.ask()
    es.tell(x, -sphere(x))  # the doubled population runs (buffer mode chosen per popsize)


# -- the TfevoCholesky op against its pure-TF (XLA) reference ---------------------------

needs_op = pytest.mark.skipif(not (kernels.built("TfevoCholesky") and linalg.lapack_library() is not None), reason="cholesky op not built or no LAPACK")


def _spd(n, dtype, seed, cond=None):
    rng = np.random.default_rng(seed + 7 * n)
    if cond is None:
        a = rng.normal(size=(n, n))
        x = a @ a.T / n + 0.1 * np.eye(n)
    else:
        q, _ = np.linalg.qr(rng.normal(size=(n, n)))
        x = (q * np.logspace(0, np.log10(cond), n)) @ q.T
    return ((x + x.T) / 2).astype(dtype)


@needs_op
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n,cond", [(1, None), (17, None), (130, None), (64, 1e4), (300, None), (300, 1e4)])
# n > 128: the single-matrix op works in 128 x 128 tiles (custom_ops/sym_eig.cc, TiledCholesky)
def test_cholesky_op_matches_reference(n, cond, dtype):
    # Stated tolerance: both factors within 8 n eps ||x|| / sqrt(lambda_min) of the
    # float64 factor (Cholesky's forward error), entry by entry.
    x = _spd(n, dtype, 0, cond)
    garbage = np.triu(np.full((n, n), 123.0, dtype), 1)  # only the lower triangle may be read
    op = linalg.cholesky(x + garbage, use_op=True).numpy()
    ref = linalg.cholesky_reference(x + garbage).numpy()
    exact = np.linalg.cholesky(x.astype(np.float64))
    ev = np.linalg.eigvalsh(x.astype(np.float64))
    tol = 8 * n * np.finfo(dtype).eps * ev[-1] / np.sqrt(ev[0])
    assert op.dtype == dtype and op.shape == (n, n)
    assert np.all(np.triu(op, 1) == 0) and np.all(np.triu(ref, 1) == 0)
    assert np.abs(op - exact).max() <= tol, np.abs(op - exact).max()
    assert np.abs(ref - exact).max() <= tol
    assert np.abs(op - ref).max() <= 2 * tol


@needs_op
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("where", [5, 200, 299])
def test_tiled_cholesky_failure_is_all_nan(where, dtype):
    # A matrix that stops being positive definite in the first, a middle or the last
    # tile of the tiled factorisation gives an all-NaN factor, as LAPACK's whole-matrix call.
    x = _spd(300, np.float64, 4)
    x[where, where] = -1.0
    assert np.all(np.isnan(linalg.cholesky(x.astype(dtype), use_op=True).numpy()))
    assert np.all(np.isnan(linalg.cholesky_reference(x.astype(dtype)).numpy()))


@needs_op
def test_cholesky_op_failures_batches_and_graphs():
    bad = np.diag([1.0, -1.0, 2.0]).astype(np.float32)
    nonfinite = np.eye(3, dtype=np.float32)
    nonfinite[2, 0] = np.nan
    good = _spd(3, np.float32, 1)
    batch = np.stack([good, bad, nonfinite, good * 2])
    op = linalg.cholesky(batch, use_op=True).numpy()
    ref = linalg.cholesky_reference(batch).numpy()
    for out in (op, ref):  # failed matrices are all NaN, the others untouched by them
        assert np.all(np.isnan(out[1])) and np.all(np.isnan(out[2]))
        np.testing.assert_allclose(out[0], np.linalg.cholesky(good.astype(np.float64)), atol=1e-5)
        np.testing.assert_allclose(out[3], np.linalg.cholesky(2 * good.astype(np.float64)), atol=1e-5)
    # NaN in the (ignored) upper triangle does not matter
    up = np.eye(3, dtype=np.float32)
    up[0, 2] = np.nan
    np.testing.assert_array_equal(linalg.cholesky(up, use_op=True).numpy(), np.eye(3))
    # inside tf.function (op) and inside XLA (reference) the same result
    x = tf.constant(_spd(50, np.float32, 2))
    g = tf.function(linalg.cholesky)(x).numpy()
    j = tf.function(linalg.cholesky, jit_compile=True)(x).numpy()
    np.testing.assert_allclose(g, j, atol=1e-5)
    with pytest.raises(Exception):
        linalg.cholesky(np.zeros((2, 3), np.float32))


needs_blas = pytest.mark.skipif(not (kernels.built("TfevoTriangular") and linalg.lapack_library() is not None), reason="BLAS ops not built or no LAPACK")


@needs_blas
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n,k", [(1, 1), (7, 3), (150, 200)])  # k = 200 > 64: several row chunks
def test_triangular_and_syrk_ops_match_reference(n, k, dtype):
    # Stated tolerance: 4 n eps relative to the largest entry (BLAS and Eigen sum in
    # different orders); the strict upper triangles must be ignored / zero exactly.
    rng = np.random.default_rng(n + k)
    c = _spd(n, np.float64, 3)
    a = np.linalg.cholesky(c).astype(dtype)
    a_garbage = a + np.triu(np.full((n, n), 5.0, dtype), 1)
    r = rng.normal(size=(k, n)).astype(dtype)
    tol = 4 * n * np.finfo(dtype).eps
    for solve in (False, True):
        op = linalg.triangular_rows(a_garbage, r, solve, use_op=True).numpy()
        ref = linalg.triangular_rows_reference(a_garbage, r, solve).numpy()
        exact = (np.linalg.solve(a.astype(np.float64), r.T.astype(np.float64)).T if solve
                 else r.astype(np.float64) @ a.astype(np.float64).T)
        scale = np.abs(exact).max()
        assert op.dtype == dtype and op.shape == (k, n)
        assert np.abs(op - ref).max() <= tol * scale * (10 if solve else 1)
        assert np.abs(op - exact).max() <= tol * scale * (10 if solve else 1)
    v = rng.normal(size=k).astype(dtype)  # mixed signs, as active CMA's weights
    v[0] = 0.0
    cu = c.astype(dtype) + np.triu(np.full((n, n), np.nan, dtype), 1)  # upper triangle never read
    op = linalg.syrk_update(cu, r, v, 0.9, use_op=True).numpy()
    ref = linalg.syrk_update_reference(np.tril(c).astype(dtype), r, v, 0.9).numpy()
    exact = np.tril(0.9 * c + (r.astype(np.float64) * v[:, None]).T @ r.astype(np.float64))
    assert np.all(np.triu(op, 1) == 0)
    scale = np.abs(exact).max()
    assert np.abs(op - ref).max() <= tol * k ** 0.5 * scale
    assert np.abs(op - exact).max() <= tol * k ** 0.5 * scale
    bad = v.copy()
    bad[-1] = np.nan
    # a non-finite result is all NaN on both paths (callers test one entry)
    assert np.all(np.isnan(linalg.syrk_update(c.astype(dtype), r, bad, 1.0, use_op=True).numpy()))
    assert np.all(np.isnan(linalg.syrk_update_reference(c.astype(dtype), r, bad, 1.0).numpy()))
    huge, twos = np.full_like(v, np.finfo(dtype).max), np.full_like(r, 2.0)  # finite input, overflowing result
    assert np.all(np.isnan(linalg.syrk_update(c.astype(dtype), twos, huge, 1.0, use_op=True).numpy()))
    assert np.all(np.isnan(linalg.syrk_update_reference(c.astype(dtype), twos, huge, 1.0).numpy()))


# -- TfevoCovarianceRefresh: update + refactorisation in place on the variables ------------

needs_refresh = pytest.mark.skipif(not linalg.covariance_refresh_op_available(), reason="refresh op not built")


def _refresh_case(n, k, dtype, seed):
    rng = np.random.default_rng(seed)
    c = np.tril(_spd(n, np.float64, seed)).astype(dtype)
    r = (0.1 * rng.normal(size=(k, n))).astype(dtype)
    v = np.abs(0.05 * rng.normal(size=k))
    v[::4] *= -0.05  # a few small negative weights (active CMA), the update stays positive definite
    v = v.astype(dtype)
    return c, r, v, dtype(0.97)


def _vars(c, a=None):
    n = c.shape[0]
    return (tf.Variable(c), tf.Variable(np.eye(n, dtype=c.dtype) if a is None else a),
            tf.Variable(tf.zeros([n, n], c.dtype)))


@needs_refresh
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n,k", [(9, 4), (300, 60)])  # 300 > 128: the tiled kernels
def test_covariance_refresh_op_is_the_two_ops_in_place(n, k, dtype):
    c, r, v, s = _refresh_case(n, k, dtype, 1)
    cv, av, sv = _vars(c)
    held_c, held_a = cv.read_value(), av.read_value()  # tensors sharing the variables' buffers
    up, fac = linalg.covariance_refresh(cv, av, sv, r, v, s, use_op=True)
    assert bool(up) and bool(fac)
    c_new = linalg.syrk_update(c, r, v, s, use_op=True).numpy()
    np.testing.assert_array_equal(cv.numpy(), c_new)  # bit for bit: the same kernels
    np.testing.assert_array_equal(av.numpy(), linalg.cholesky(c_new, use_op=True).numpy())
    np.testing.assert_array_equal(held_c.numpy(), c)  # buffers still shared are never written
    np.testing.assert_array_equal(held_a.numpy(), np.eye(n, dtype=dtype))
    # a second call reuses the swapped-out buffers; the first result read out stays intact
    first_c, first_a = cv.read_value(), av.read_value()
    up2, fac2 = linalg.covariance_refresh(cv, av, sv, r, v, s, use_op=True)
    assert bool(up2) and bool(fac2)
    np.testing.assert_array_equal(first_c.numpy(), c_new)
    np.testing.assert_array_equal(cv.numpy(), linalg.syrk_update(c_new, r, v, s, use_op=True).numpy())
    # the pure-TF reference (ordinary assignments, XLA Cholesky) agrees
    cr, ar, _ = _vars(c)
    for _ in range(2):
        upr, facr = linalg.covariance_refresh_reference(cr, ar, r, v, s)
        assert bool(upr) and bool(facr)
    tol = 16 * n * np.finfo(dtype).eps
    np.testing.assert_allclose(cr.numpy(), cv.numpy(), atol=tol * np.abs(c).max())
    np.testing.assert_allclose(ar.numpy(), av.numpy(), atol=tol * 10)
    # factor only (no rows): a <- chol(c), c untouched; inside tf.function too
    cf, af, sf = _vars(c)
    up3, fac3 = tf.function(lambda: linalg.covariance_refresh(cf, af, sf, use_op=True))()
    assert not bool(up3) and bool(fac3)
    np.testing.assert_array_equal(cf.numpy(), c)
    np.testing.assert_array_equal(af.numpy(), linalg.cholesky(c, use_op=True).numpy())


@pytest.mark.parametrize("use_op", [pytest.param(True, marks=needs_refresh), False])
def test_covariance_refresh_failures_keep_the_state(use_op):
    n = 140
    c, r, v, s = _refresh_case(n, 5, np.float32, 2)
    a0 = np.linalg.cholesky(c + np.tril(c, -1).T).astype(np.float32)

    def run(c_init, rows):
        cv, av, sv = _vars(c_init, a0)
        out = linalg.covariance_refresh(cv, av, sv if use_op else None, rows, None if rows is None else v, s,
                                        use_op=use_op)
        return [bool(t) for t in out], cv.numpy(), av.numpy()

    # a non-finite update is not committed: C kept, A refactorised from it
    bad_rows = r.copy()
    bad_rows[3, 7] = np.inf
    (up, fac), cn, an = run(c, bad_rows)
    assert not up and fac
    np.testing.assert_array_equal(cn, c)
    np.testing.assert_allclose(an, a0, atol=1e-5)
    # an indefinite C: retried with diagonal loading, A finite and A A^T close to C
    ind = c.copy()
    ind[50, 50] -= 1.5 * ind[50, 50]
    (up, fac), cn, an = run(ind, None)
    assert not up and fac and np.all(np.isfinite(an))
    full = ind + np.tril(ind, -1).T
    assert np.abs(an @ an.T - full).max() > 1e-3  # the loading was needed ...
    assert np.linalg.eigvalsh(an.astype(np.float64) @ an.T.astype(np.float64) - full).min() > -1e-3  # ... and is a shift
    # a C that no loading can rescue (NaN inside): A kept
    nan = c.copy()
    nan[70, 3] = np.nan
    (up, fac), cn, an = run(nan, None)
    assert not up and not fac
    np.testing.assert_array_equal(an, a0)


@needs_refresh
def test_covariance_refresh_bad_input_is_a_clear_error():
    c, r, v, s = _refresh_case(6, 2, np.float32, 3)
    cv, av, sv = _vars(c)
    with pytest.raises(Exception, match="tf.Variable"):
        linalg.covariance_refresh(c, av, sv, r, v, s)
    with pytest.raises(Exception, match="rows"):
        linalg.covariance_refresh(cv, av, sv, r[:, :5], v, s)
    with pytest.raises(Exception, match="three different variables"):
        linalg.covariance_refresh(cv, av, av, r, v, s, use_op=True)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_all_equal_matches_numpy(dtype):
    # Against np.array_equal: a one-ulp difference in the first, a middle or the last entry,
    # NaN equal to nothing, -0 equal to +0, empty tensors equal; eager and traced.
    rng = np.random.default_rng(0)
    x = rng.normal(size=(24, 1000)).astype(dtype)
    cases = [(x, x.copy())]
    for pos in (0, 1023, 1024, 12345, x.size - 1):
        y = x.copy().ravel()
        y[pos] = np.nextafter(y[pos], np.inf)
        cases.append((x, y.reshape(x.shape)))
    nan = x.copy()
    nan[3, 3] = np.nan
    cases += [(nan, nan.copy()), (np.zeros(5, dtype), -np.zeros(5, dtype)), (np.zeros((0, 4), dtype),) * 2]
    for a, b in cases:
        want = bool(np.array_equal(a, b))
        assert bool(linalg.all_equal(a, b)) == want
        assert bool(tf.function(lambda u, v: linalg.all_equal(u, v))(a, b)) == want
    assert [bool(linalg.all_equal(a, b)) for a, b in cases] == [True] + [False] * 5 + [False, True, True]
    with pytest.raises(Exception, match="one dtype and shape"):
        linalg.all_equal(x, x[:, :5])


def test_tell_reuses_asked_z_only_for_the_asked_rows():
    # Same state, same rows: the cached-z path and the solve path give the same
    # update (to rounding); a changed row forces the solve (the mean then differs).
    es = CholeskyCMAES(5, sigma=0.5, seed=7, eigen_gap=2)
    _run(es, 3, sphere)
    x = es.ask()
    ckpt = [v.numpy() for v in es.variables]
    es.tell(x, -sphere(x))
    cached = es.p_sigma.numpy()
    for v, val in zip(es.variables, ckpt):
        v.assign(val)
    es._x_last.assign(tf.fill(tf.shape(x), tf.constant(np.nan, es.dtype)))  # forget the ask: solve path
    es.tell(x, -sphere(x))
    np.testing.assert_allclose(es.p_sigma.numpy(), cached, rtol=1e-4, atol=1e-6)
    assert es.traces["tell"] == 1


@needs_blas
def test_large_triangular_product_split_over_threads_matches_reference():
    # n = 1000, 24 rows (CholeskyCMAES's ask at its default popsize): large enough that the
    # float32 product is split over the intra-op pool by row blocks of a; every entry is still
    # one dot product summed in a fixed order, so it equals the unsplit rows bit for bit.
    rng = np.random.default_rng(7)
    n = 1000
    a = (np.tril(rng.normal(size=(n, n))) / np.sqrt(n)).astype(np.float32)
    r = rng.normal(size=(24, n)).astype(np.float32)
    op = linalg.triangular_rows(a, r, use_op=True).numpy()
    exact = r.astype(np.float64) @ a.astype(np.float64).T
    assert np.abs(op - exact).max() <= 4 * n * np.finfo(np.float32).eps * np.abs(exact).max()
    # rows computed alone (a 1-row product is never split) give the same bits
    for i in (0, 13, 23):
        np.testing.assert_array_equal(linalg.triangular_rows(a, r[i:i + 1], use_op=True).numpy()[0], op[i])


@needs_blas
@pytest.mark.parametrize("n,k", [(5, 9), (127, 17), (130, 25), (257, 8), (517, 40)])
def test_triangular_product_kernel_tiles_chunks_and_rows_alone(n, k):
    # The float32 product kernel packs r in tiles (up to 24 rows: one tile of 24 columns and
    # blocks of 4 rows of a; more rows: tiles of 16 and blocks of 6; a last tile of 8 rows or
    # fewer takes a narrower path), walks j in chunks of 124 / 126, and splits large products
    # (517 x 517 x 40) over the pool. Every entry is one sum over j in ascending order in
    # either shape, so each row computed alone (the 24-column shape) gives the same bits as
    # in a product of 25 or 40 rows (the 16-column shape); the upper triangle (NaN here) is
    # never read.
    rng = np.random.default_rng(n * 100 + k)
    a = np.tril(rng.normal(size=(n, n)) / np.sqrt(n)).astype(np.float32)
    a_garbage = a + np.triu(np.full((n, n), np.nan, np.float32), 1)
    r = rng.normal(size=(k, n)).astype(np.float32)
    op = linalg.triangular_rows(a_garbage, r, use_op=True).numpy()
    exact = r.astype(np.float64) @ a.astype(np.float64).T
    assert np.all(np.isfinite(op))
    assert np.abs(op - exact).max() <= 4 * n * np.finfo(np.float32).eps * np.abs(exact).max()
    for i in sorted({0, k // 2, k - 1}):
        np.testing.assert_array_equal(linalg.triangular_rows(a_garbage, r[i:i + 1], use_op=True).numpy()[0], op[i])
