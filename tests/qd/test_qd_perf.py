"""The fast paths of tfevo.qd give exactly the same answers as the simple ones."""

import numpy as np
import pytest
import tensorflow as tf

from tfevo.core import ConfigError
from tfevo.qd import CVTArchive, GridArchive, IsoLineEmitter, MAPElites, rastrigin_qd, rastrigin_qd_offset
from tfevo import kernels
from tfevo.qd.emitters import standard_normal


def _nearest_reference(pts, c):
    """Brute force in numpy, float64 direct differences, ties to the lowest index."""
    d = ((pts[:, None, :].astype(np.float64) - c[None, :, :].astype(np.float64)) ** 2).sum(-1)
    return np.argmin(d, 1)


def _hard_queries(rng, c, k, lo=0.0, hi=1.0):
    n = len(c)
    i, j = rng.integers(0, n, (2, 3000))
    mids = (c[i] + c[j]) / 2  # on (or next to) a Voronoi border: near-ties
    nudged = mids + rng.normal(scale=1e-6, size=mids.shape)
    uniform = rng.uniform(lo - 0.3, hi + 0.3, size=(4000, k))  # also outside the box
    far = np.array([[1e3] * k, [-1e4] * k, [0.5] * (k - 1) + [50.0]])  # brute-force fallback
    # far outside the box, where float32 differences lose the centroids' low bits
    wild = np.concatenate([rng.normal(size=(300, k)) * scale for scale in (1e3, 1e5, 1e7)])
    return np.concatenate([mids, nudged, uniform, c, far, wild]).astype(np.float32)


@pytest.mark.parametrize("k,cells", [(2, 2000), (3, 700), (1, 300)])
def test_cvt_bucket_lookup_equals_brute_force(k, cells):
    rng = np.random.default_rng(k)
    # clustered centroids (dense blobs + sparse rest) stress the padded bins
    c = np.concatenate([rng.uniform(size=(cells // 2, k)),
                        0.3 + 0.05 * rng.uniform(size=(cells - cells // 2, k))]).astype(np.float32)
    fast = CVTArchive(3, cells, [(0.0, 1.0)] * k, centroids=c)
    assert fast._buckets is not None
    brute = CVTArchive(3, cells, [(0.0, 1.0)] * k, centroids=c, lookup="brute")
    pts = _hard_queries(rng, c, k)
    ref = _nearest_reference(pts, c)
    np.testing.assert_array_equal(fast.index_of(pts).numpy(), ref)  # C++ kernel when built
    tf_buckets = CVTArchive(3, cells, [(0.0, 1.0)] * k, centroids=c, use_op=False)
    np.testing.assert_array_equal(tf_buckets.index_of(pts).numpy(), ref)
    np.testing.assert_array_equal(brute.index_of(pts).numpy(), ref)
    # inside a compiled insertion too
    f = rng.normal(size=len(pts)).astype(np.float32)
    res = fast.add(np.zeros((len(pts), 3), np.float32), f, pts)
    np.testing.assert_array_equal(res.cell.numpy(), ref)


def test_cvt_brute_force_lookup_is_exact_far_outside_the_box():
    rng = np.random.default_rng(6)
    c = rng.uniform(size=(500, 6)).astype(np.float32)
    a = CVTArchive(3, 500, [(0.0, 1.0)] * 6, centroids=c)
    assert a._buckets is None  # six descriptor dimensions: brute force
    pts = _hard_queries(rng, c, 6)
    np.testing.assert_array_equal(a.index_of(pts).numpy(), _nearest_reference(pts, c))


def test_cvt_bucket_ties_go_to_lowest_index():
    c = np.array([[0.5, 0.5], [0.5, 0.5], [0.25, 0.25]] + [[x, 0.9] for x in np.linspace(0, 1, 70)], np.float32)
    a = CVTArchive(1, len(c), [(0, 1), (0, 1)], centroids=c, lookup="buckets")
    pts = np.array([[0.5, 0.5], [0.49, 0.51], [0.375, 0.375]], np.float32)  # last: exact midpoint of 0 and 2
    np.testing.assert_array_equal(a.index_of(pts).numpy(), _nearest_reference(pts, c))


def test_cvt_bad_lookup_option():
    with pytest.raises(ConfigError, match="lookup"):
        CVTArchive(2, 10, [(0, 1)], centroids=np.zeros((10, 1)), lookup="kd")


def test_standard_normal_distribution_and_determinism():
    s = tf.constant([4, 2])
    z = standard_normal([20001, 7], s).numpy()  # odd row count
    assert z.shape == (20001, 7)
    np.testing.assert_array_equal(z, standard_normal([20001, 7], s).numpy())
    assert not np.array_equal(z, standard_normal([20001, 7], tf.constant([4, 3])).numpy())
    flat = np.sort(z.reshape(-1))
    assert abs(flat.mean()) < 0.01 and abs(flat.std() - 1) < 0.01
    # Kolmogorov-Smirnov distance to N(0, 1) (critical value at alpha=1e-3 is ~0.0046 here)
    from math import erf, sqrt

    cdf = 0.5 * (1 + np.vectorize(erf)(flat / sqrt(2)))
    ecdf = np.arange(1, flat.size + 1) / flat.size
    assert np.max(np.abs(cdf - ecdf)) < 0.0046
    # rows and columns are uncorrelated (the cos and sin halves pair rows i and i + n/2)
    corr = np.corrcoef(z[:10000].reshape(-1), z[10000:20000].reshape(-1))[0, 1]
    assert abs(corr) < 0.02


def test_sample_indices_uniform_over_filled_cells():
    a = GridArchive(1, [50], [(0, 1)])
    filled = np.arange(0, 50, 7)
    occ = np.zeros(51, bool)
    occ[filled] = True
    a.occupied.assign(occ)
    idx = a.sample_indices(70000, tf.constant([1, 1])).numpy()
    assert set(np.unique(idx)) == set(filled)
    counts = np.bincount(idx, minlength=50)[filled]
    expected = 70000 / len(filled)
    chi2 = ((counts - expected) ** 2 / expected).sum()
    assert chi2 < 30  # 7 degrees of freedom: p ~ 1e-4
    empty = GridArchive(1, [5], [(0, 1)])
    assert set(empty.sample_indices(10, tf.constant([1, 1])).numpy()) == {0}


def _make(seed, jit=None, batch=64, dim=8, use_op=None):
    a = GridArchive(dim, [16, 16], [(0, 1), (0, 1)], qd_offset=rastrigin_qd_offset(dim), use_op=use_op)
    return MAPElites(a, [IsoLineEmitter(dim, batch, bounds=(0, 1), use_op=use_op)], init_bounds=(0, 1), seed=seed,
                     jit_compile=jit)


def _state(me):
    a = me.archive
    return [v.numpy() for v in (a.solutions, a.fitness, a.occupied, me.generation, me.seeds.counter)]


def _task_with_dead(x):
    f, d = rastrigin_qd(x)
    return tf.where(tf.range(tf.shape(x)[0]) % 9 == 0, np.float32(np.nan), f), d  # dead never enter


def test_step_equals_ask_tell_and_xla_insert_equals_graph_insert():
    # default path (C++ kernels when they build): step() == ask()/tell(), bit for bit
    loop, stepped = _make(3), _make(3)
    # pure-TensorFlow path: XLA-compiled insertion == plain-graph insertion, bit for bit
    ref_xla, ref_plain = _make(3, use_op=False), _make(3, jit=False, use_op=False)
    assert ref_xla._jit_tell and not ref_plain._jit_tell
    for _ in range(12):
        for me in (loop, ref_xla, ref_plain):
            x = me.ask()
            me.tell(x, *_task_with_dead(x))
    stepped.step(_task_with_dead, iterations=12)
    for a, b in ((loop, stepped), (ref_xla, ref_plain)):
        for u, v in zip(_state(a), _state(b)):
            np.testing.assert_array_equal(u, v)
    for me in (loop, ref_xla):
        occ = me.archive.occupied.numpy()[:-1]
        assert occ.sum() > 50 and np.all(np.isfinite(me.archive.fitness.numpy()[:-1][occ]))


_needs_op = pytest.mark.skipif(not kernels.built("TfevoIsoLineEmit"), reason="qd_emit custom op not built (no compiler) or disabled by TFEVO_DISABLE_CUSTOM_OPS")


@_needs_op
def test_insert_kernel_equals_tf_reference():
    """TfevoArchiveInsert == the pure-TensorFlow insertion: same archive, status and value, bit for bit,
    on batches with many collisions, ties, NaN/-inf/+inf fitness and non-finite descriptors."""
    rng = np.random.default_rng(11)
    cent = rng.uniform(size=(70, 2)).astype(np.float32)
    for make in (lambda op: GridArchive(5, [6, 5], [(0, 1), (0, 1)], qd_offset=-3.0, use_op=op),
                 lambda op: CVTArchive(5, 70, [(0, 1), (0, 1)], qd_offset=-3.0, use_op=op, centroids=cent)):
        fast, ref = make(True), make(False)
        assert fast.insert_op_enabled and not ref.insert_op_enabled
        for _ in range(5):
            b = 300
            desc = rng.uniform(-0.2, 1.2, size=(b, 2)).astype(np.float32)
            desc[rng.random(b) < 0.03, 1] = np.nan
            desc[rng.random(b) < 0.02, 0] = np.inf
            fit = rng.integers(-5, 15, size=b).astype(np.float32)  # many ties
            fit[rng.random(b) < 0.1] = np.nan
            fit[rng.random(b) < 0.05] = -np.inf
            fit[rng.random(b) < 0.01] = np.inf
            sol = rng.normal(size=(b, 5)).astype(np.float32)
            r1, r2 = fast.add(sol, fit, desc), ref.add(sol, fit, desc)
            for u, v in zip(r1, r2):
                np.testing.assert_array_equal(u.numpy(), v.numpy())
            n = fast.num_cells
            for var in ("solutions", "fitness", "descriptors", "occupied"):
                np.testing.assert_array_equal(getattr(fast, var).numpy()[:n], getattr(ref, var).numpy()[:n])
            assert not fast.occupied.numpy()[n]  # trash row stays empty
        assert 0 < fast.size.numpy() < n + 1


@_needs_op
def test_iso_line_kernel_matches_tf_reference():
    """Same parents (exactly) and the same noise (to float rounding of log/sin/cos) as the TF reference."""
    a = GridArchive(7, [9, 9], [(0, 1), (0, 1)])
    x = tf.random.stateless_uniform([120, 7], seed=[1, 2])
    a.add(x, *rastrigin_qd(x))
    empty = GridArchive(7, [9, 9], [(0, 1), (0, 1)])
    for batch, bounds in ((1, None), (33, (0, 1)), (257, None)):
        for arch in (a, empty):
            exact = IsoLineEmitter(7, batch, iso_sigma=0.0, line_sigma=0.0, bounds=bounds)
            noisy = IsoLineEmitter(7, batch, iso_sigma=0.3, line_sigma=0.7, bounds=bounds)
            for seed in ([3, 4], [-7, 2**31 - 1]):
                s = tf.constant(seed, tf.int32)
                np.testing.assert_array_equal(exact.emit(arch, s).numpy(), exact.emit_reference(arch, s).numpy())
                got = noisy.emit(arch, s).numpy()
                np.testing.assert_allclose(got, noisy.emit_reference(arch, s).numpy(), rtol=0, atol=2e-6)
                np.testing.assert_array_equal(got, noisy.emit(arch, s).numpy())  # deterministic
                if arch is a and bounds is None:
                    assert np.std(got) > 0.05  # the noise is really there
    # an XLA-compiled ask falls back to the reference instead of failing to compile
    me = _make(4, jit=True)
    me.step(rastrigin_qd, iterations=2)
    assert me.archive.size.numpy() > 0


def test_step_checkpoint_resume_exact(tmp_path):
    a = _make(5)
    a.step(rastrigin_qd, iterations=4)
    ckpt = tf.train.Checkpoint(me=a)
    path = ckpt.write(str(tmp_path / "ck"))
    a.step(rastrigin_qd, iterations=5)
    b = _make(5)
    tf.train.Checkpoint(me=b).read(path).assert_consumed()
    b.step(rastrigin_qd, iterations=5)
    for u, v in zip(_state(a), _state(b)):
        np.testing.assert_array_equal(u, v)


def test_step_rejects_bad_use():
    me = _make(0)
    with pytest.raises(ConfigError, match="iterations"):
        me.step(rastrigin_qd, iterations=0)
    class EagerEmitter(IsoLineEmitter):
        graph_safe = False

    a = GridArchive(4, [4, 4], [(0, 1), (0, 1)])
    es = MAPElites(a, [EagerEmitter(4, 8)], init_bounds=(0, 1), seed=0)
    with pytest.raises(ConfigError, match="graph-safe"):
        es.step(rastrigin_qd)


def test_compiled_ask_shares_one_count_and_equals_eager_emit():
    """The compiled ask computes the filled-cell count once for the empty check and
    all parent samples; it must give exactly the eager emit (one count per sample)."""
    me = _make(2)
    me.step(rastrigin_qd, iterations=3)
    assert me.archive._trace.running is None  # the shared count never leaks out of a trace
    c = int(me.seeds.counter.numpy())
    seed = tf.constant([int(me.seeds.seed.numpy()), c + 1], tf.int32)
    expected = me._emit_all(seed).numpy()
    np.testing.assert_array_equal(me.ask().numpy(), expected)
    assert int(me.seeds.counter.numpy()) == c + 1
