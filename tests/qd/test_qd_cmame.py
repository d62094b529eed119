"""CMA-ME (batched ESEmitter): pyribs' ranking, selection and restarts, seeds, batching; archive edge cases."""

import numpy as np
import pytest
import tensorflow as tf

from tfevo.core import ConfigError, ShapeError
from tfevo.qd import CVTArchive, ESEmitter, GridArchive, IsoLineEmitter, MAPElites, sphere_qd


def _filled_archive(rng, d=3, cells=(5, 5), fill=0.5):
    a = GridArchive(d, list(cells), [(0, 1), (0, 1)], qd_offset=-100.0)
    desc = a.cell_centers().astype(np.float32)
    keep = rng.random(len(desc)) < fill
    a.add(rng.normal(size=(int(keep.sum()), d)).astype(np.float32),
          rng.uniform(-50, 0, int(keep.sum())).astype(np.float32), desc[keep])
    return a


def _ribs_status_value(ribs_archive, sol, fit, desc):
    info = ribs_archive.add(sol.astype(np.float64), fit.astype(np.float64), desc.astype(np.float64))
    return info["status"], info["value"]


def test_two_stage_ranking_matches_pyribs_archive_and_ranker():
    """Status/value against the pre-batch archive agree with pyribs' GridArchive.add on the same batch
    (in-batch losers included), and the order is pyribs' lexsort by (status, value)."""
    ribs_archives = pytest.importorskip("ribs.archives")
    rng = np.random.default_rng(3)
    d, e, lam = 3, 3, 12
    a = GridArchive(d, [5, 5], [(0, 1), (0, 1)], qd_offset=0.0)
    ra = ribs_archives.GridArchive(solution_dim=d, dims=(5, 5), ranges=[(0, 1), (0, 1)])
    em = ESEmitter(d, lam, num_emitters=e, sigma=0.1, ranker="2imp", seed=0)
    for step in range(4):
        b = e * lam
        desc = rng.uniform(0, 1, (b, 2)).astype(np.float32)
        desc[::4] = desc[1::4][: len(desc[::4])]  # collisions within the batch
        fit = rng.integers(-30, 0, b).astype(np.float32)  # ties
        sol = rng.normal(size=(b, d)).astype(np.float32)
        inc = a.incumbents(desc)
        res = a.add(sol, fit, desc)
        r_status, r_value = _ribs_status_value(ra, sol, fit, desc)
        order, status, value = (t.numpy() for t in em.rank(fit, desc, res, incumbent=inc))
        np.testing.assert_array_equal(status.reshape(-1), r_status)
        np.testing.assert_allclose(value.reshape(-1), r_value, rtol=0, atol=1e-4)
        for i in range(e):
            sl = slice(i * lam, (i + 1) * lam)
            # pyribs' TwoStageImprovementRanker: lexsort by status, then value, descending (stable for ties)
            ref = np.array(sorted(range(lam), key=lambda j: (-r_status[sl][j], -r_value[sl][j], j)))
            np.testing.assert_array_equal(order[i], ref)
        if step == 0:
            assert (r_status[res.status.numpy() == 0] > 0).any()  # some in-batch losers ranked as improvers


def test_add_result_value_is_zero_for_every_candidate_not_added():
    for use_op in (None, False):
        a = GridArchive(2, [2, 2], [(0, 1), (0, 1)], use_op=use_op)
        a.add(np.zeros((1, 2), np.float32), np.array([5.0], np.float32), np.array([[0.1, 0.1]], np.float32))
        desc = np.array([[0.1, 0.1], [0.1, 0.1], [0.9, 0.9], [0.9, 0.9], [0.1, 0.9]], np.float32)
        fit = np.array([7.0, 9.0, 1.0, 3.0, 2.0], np.float32)
        res = a.add(np.zeros((5, 2), np.float32), fit, desc)
        np.testing.assert_array_equal(res.status.numpy(), [0, 1, 0, 2, 2])
        # losers of contested cells (7 < 9 in an occupied cell, 1 < 3 in a new cell) report 0
        np.testing.assert_allclose(res.value.numpy(), [0.0, 4.0, 0.0, 3.0, 2.0])


def _mu_weights(k):
    w = np.log(k + 0.5) - np.log(np.arange(1, k + 1))
    return w / w.sum()


def test_mu_selection_recombines_the_best_half_by_improvement_not_raw_fitness():
    rng = np.random.default_rng(0)
    a = _filled_archive(rng)
    d, e, lam = 3, 2, 10
    em = ESEmitter(d, lam, num_emitters=e, sigma=0.2, selection_rule="mu", seed=1, jit_compile=False)
    x = em.emit(a, tf.constant([1, 2])).numpy()
    mean0 = em.mean.numpy().copy()
    desc = rng.uniform(0, 1, (e * lam, 2)).astype(np.float32)
    fit = rng.uniform(-60, 0, e * lam).astype(np.float32)
    inc = a.incumbents(desc)
    res = a.add(x, fit, desc)
    order = em.rank(fit, desc, res, incumbent=inc)[0].numpy()
    em.tell(x, fit, desc, res, incumbent=inc)
    w = _mu_weights(lam // 2)
    for i in range(e):
        xi = x[i * lam:(i + 1) * lam].astype(np.float64)
        expected = (w[:, None] * xi[order[i][: lam // 2]]).sum(0)
        np.testing.assert_allclose(em.mean.numpy()[i], expected, rtol=1e-5, atol=1e-5)
        raw = (w[:, None] * xi[np.argsort(-fit[i * lam:(i + 1) * lam], kind="stable")[: lam // 2]]).sum(0)
        assert not np.allclose(raw, expected)  # raw-fitness ranking would move elsewhere
        assert not np.allclose(mean0[i], expected)


def test_mu_rates_precomputed_equal_the_graph_rates():
    """With mu selection the parent count is fixed, so the weights and rates are constants computed once;
    they equal the in-graph formula used for filter selection."""
    for d, lam, e in ((3, 10, 2), (100, 37, 15), (20, 7, 1)):
        em = ESEmitter(d, lam, num_emitters=e, selection_rule="mu")
        graph = em._rates(tf.constant(np.full([e], float(lam // 2))))
        assert len(em._mu_rates) == len(graph) == 7
        for const, t in zip(em._mu_rates, graph):
            np.testing.assert_allclose(const, t.numpy(), rtol=1e-12, atol=0)
        w = em._mu_rates[0]
        np.testing.assert_allclose(w[0, : lam // 2], _mu_weights(lam // 2), rtol=1e-12)
        assert not w[:, lam // 2:].any()


def test_filter_selection_and_restart_rules():
    rng = np.random.default_rng(1)
    a = _filled_archive(rng, fill=1.0)
    d, e, lam = 3, 3, 8
    for rule, restarts_expected in (("no_improvement", [0, 1, 1]), ("basic", [0, 0, 0])):
        em = ESEmitter(d, lam, num_emitters=e, sigma=0.1, selection_rule="filter", restart_rule=rule, seed=2,
                       jit_compile=False)
        x = em.emit(a, tf.constant([0, 1])).numpy()
        mean_before = em.mean.numpy().copy()
        desc = np.tile(np.array([[0.5, 0.5]], np.float32), [e * lam, 1])
        occ, inc = (t.numpy() for t in a.incumbents(desc))
        assert occ.all()
        fit = (inc[0] - 10.0 - np.arange(e * lam)).astype(np.float32)  # nobody beats the elite ...
        fit[2] = inc[0] + 1.0  # ... except one candidate of search 0
        res = a.add(x, fit, desc)
        em.tell(x, fit, desc, res, incumbent=(tf.constant(occ), tf.constant(inc)))
        np.testing.assert_array_equal(em.restarts.numpy(), restarts_expected)
        # filter: search 0 recombines its single improver; the others do not move
        np.testing.assert_allclose(em.mean.numpy()[0], x[2], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(em.mean.numpy()[1:], mean_before[1:])
        # a restarted search starts again from an archive elite with sigma0 and an identity covariance
        em.emit(a, tf.constant([0, 2]))
        elites = a.elites()[0]
        for i in np.nonzero(np.array(restarts_expected))[0]:
            assert np.min(np.abs(elites - em.mean.numpy()[i]).sum(1)) < 1e-6
            assert em.sigma.numpy()[i] == pytest.approx(0.1)
            np.testing.assert_array_equal(em.cov.numpy()[i], np.eye(d))


def test_restart_after_integer_period_and_stop_on_flat_ranking():
    rng = np.random.default_rng(2)
    a = _filled_archive(rng, fill=1.0)
    em = ESEmitter(3, 6, num_emitters=2, restart_rule=3, seed=0, jit_compile=False)
    for t in range(1, 7):
        x = em.emit(a, tf.constant([0, t]))
        desc = rng.uniform(0, 1, (12, 2)).astype(np.float32)
        fit = rng.uniform(-5, 0, 12).astype(np.float32)  # different values: no flat-fitness stop
        inc = a.incumbents(desc)
        em.tell(x, fit, desc, a.add(x, fit, desc), incumbent=inc)
        assert list(em.restarts.numpy()) == [t // 3] * 2
    # all candidates equal status and value: CMA-ES' flat-fitness stop, also under "basic"
    em = ESEmitter(3, 6, num_emitters=2, restart_rule="basic", seed=0, jit_compile=False)
    x = em.emit(a, tf.constant([0, 9]))
    desc = np.tile(np.array([[0.3, 0.3]], np.float32), [12, 1])
    occ, inc = (t.numpy() for t in a.incumbents(desc))
    fit = np.full(12, inc[0] - 1.0, np.float32)
    em.tell(x, fit, desc, a.add(x, fit, desc), incumbent=(tf.constant(occ), tf.constant(inc)))
    assert list(em.restarts.numpy()) == [1, 1]


def _run(seed, em_seed, iters=6, e=3, lam=8, d=4, jit=False):
    a = GridArchive(d, [6, 6], [(0, 1), (0, 1)], qd_offset=-25.0 * d)
    em = ESEmitter(d, lam, num_emitters=e, sigma=0.05, restart_rule=2, seed=em_seed, jit_compile=jit)
    me = MAPElites(a, [em], init_bounds=(0, 1), seed=seed)
    me.step(sphere_qd, iterations=iters)
    return me, em


def test_seeds_reach_the_noise_after_restarts_and_runs_repeat_exactly():
    me_a, em_a = _run(0, 1)
    me_b, em_b = _run(0, 2)
    me_c, em_c = _run(5, 1)
    me_d, em_d = _run(0, 1)
    assert em_a.restarts.numpy().sum() >= 3 and np.array_equal(em_a.restarts.numpy(), em_b.restarts.numpy())
    xa, xb, xc, xd = me_a.ask().numpy(), me_b.ask().numpy(), me_c.ask().numpy(), me_d.ask().numpy()
    assert not np.allclose(xa, xb)  # different emitter seeds: different noise after restarts
    assert not np.allclose(xa, xc)  # the MAPElites seed reaches the emitter
    np.testing.assert_array_equal(xa, xd)  # same seeds: the same run, bit for bit
    # the noise itself (not only the restart elites) depends on the emitter seed: same state, other seed
    em_b2 = ESEmitter(4, 8, num_emitters=3, sigma=0.05, seed=2, jit_compile=False)
    for v_src, v_dst in zip(em_a.variables, em_b2.variables):
        v_dst.assign(v_src)
    s = tf.constant([7, 7])
    assert not np.allclose(em_a.emit(me_a.archive, s).numpy(), em_b2.emit(me_a.archive, s).numpy())


def test_checkpoint_resume_is_exact(tmp_path):
    me, _ = _run(3, 4, iters=4, jit=True)  # the XLA-compiled update
    path = tf.train.Checkpoint(me=me).write(str(tmp_path / "ck"))
    me.step(sphere_qd, iterations=5)
    me2, _ = _run(3, 4, iters=1, jit=True)
    tf.train.Checkpoint(me=me2).read(path).assert_consumed()
    me2.step(sphere_qd, iterations=5)
    for u, v in zip(me.variables, me2.variables):
        np.testing.assert_array_equal(u.numpy(), v.numpy())


def test_many_searches_are_one_batched_program():
    """The ask and tell graphs do not grow with the number of searches (no Python loop over them),
    and the searches evolve independently inside one ESEmitter."""
    def graph_ops(e):
        a = GridArchive(4, [6, 6], [(0, 1), (0, 1)])
        me = MAPElites(a, [ESEmitter(4, 8, num_emitters=e, seed=0, jit_compile=False)], init_bounds=(0, 1),
                       seed=0)
        x = me.ask()
        me.tell(x, *sphere_qd(x))
        ask = me._ask_fn.get_concrete_function().graph
        tell = me._tell_fn.get_concrete_function(*[tf.TensorSpec(t.shape, t.dtype) for t in (x, *sphere_qd(x))])
        return len(ask.get_operations()) + len(tell.graph.get_operations()), me
    n1, _ = graph_ops(1)
    n16, me = graph_ops(16)
    assert n1 == n16
    assert me.ask().shape == (16 * 8, 4)
    em = me.emitters[0]
    assert em.batch_size == 128 and em.es_batch_size == 8


def test_quality_at_least_pyribs_cma_me_on_a_small_sphere():
    """Equal budget, equal setting (15 searches in the benchmark; here 4 x 12 on 10-D Sphere-QD, 2 seeds):
    the QD-score is at least pyribs' within a small margin."""
    ribs = pytest.importorskip("ribs")
    from ribs.archives import GridArchive as RGrid
    from ribs.emitters import EvolutionStrategyEmitter
    from ribs.schedulers import Scheduler

    d, e, lam, iters = 10, 4, 12, 60
    ours, theirs = [], []
    for seed in range(2):
        a = GridArchive(d, [20, 20], [(0, 1), (0, 1)], qd_offset=-25.0 * d)
        me = MAPElites(a, [ESEmitter(d, lam, num_emitters=e, sigma=0.1, selection_rule="mu", seed=seed,
                                     jit_compile=False)],
                       init_bounds=(0, 1), seed=seed)
        me.step(sphere_qd, iterations=iters)
        ours.append(me.metrics()["qd_score"])
        ra = RGrid(solution_dim=d, dims=(20, 20), ranges=[(0, 1), (0, 1)], qd_score_offset=-25.0 * d, seed=seed)
        x = np.random.default_rng(seed).uniform(0, 1, (e * lam, d))
        f, dd = (t.numpy() for t in sphere_qd(x.astype(np.float32)))
        ra.add(x, f, dd)
        sched = Scheduler(ra, [EvolutionStrategyEmitter(ra, x0=ra.sample_elites(1)["solution"][0], sigma0=0.1,
                                                        ranker="2imp", selection_rule="mu", batch_size=lam,
                                                        seed=100 * seed + i) for i in range(e)])
        for _ in range(iters - 1):
            x = sched.ask()
            f, dd = (t.numpy() for t in sphere_qd(x.astype(np.float32)))
            sched.tell(f, dd)
        theirs.append(float(ra.stats.qd_score))
    assert np.mean(ours) >= 0.98 * np.mean(theirs), (ours, theirs)


def test_es_emitter_rejects_bad_settings():
    for kw, word in [({"ranker": "nov"}, "ranker"), ({"selection_rule": "all"}, "selection_rule"),
                     ({"restart_rule": 0}, "restart_rule"), ({"num_emitters": 0}, "num_emitters"),
                     ({"sigma": -1.0}, "sigma"), ({"batch_size": 1}, "batch_size"), ({"seed": -3}, "seed"),
                     ({"strategy": "cma_es"}, "strategy")]:
        with pytest.raises(ConfigError, match=word):
            ESEmitter(4, **kw)
    with pytest.raises(ShapeError, match="x0"):
        ESEmitter(4, x0=np.zeros(3))
    a = GridArchive(4, [3, 3], [(0, 1), (0, 1)])
    em = ESEmitter(4, 4, num_emitters=2, x0=np.zeros(4), jit_compile=False)
    x = em.emit(a, tf.constant([0, 1]))
    f, d = sphere_qd(x)
    inc = a.incumbents(d)
    res = a.add(x, f, d)
    with pytest.raises(ConfigError, match="incumbent"):
        em.tell(x, f, d, res)
    with pytest.raises(ShapeError, match="fitness"):
        em.tell(x, f[:5], d, res, incumbent=inc)
    with pytest.raises(ConfigError, match="x0 must be finite"):
        ESEmitter(4, 4, x0=[0.0, np.nan, 0.0, 0.0])
    with pytest.raises(ConfigError, match="centroids must be finite"):
        CVTArchive(4, 3, [(0, 1), (0, 1)], centroids=[[0.1, 0.1], [np.nan, 0.5], [0.9, 0.9]])
    for bad in (1.5, -1, "3", 2**31):  # 1.5 used to run as seed 1
        with pytest.raises(ConfigError, match=r"seed must be an integer in \[0, 2\*\*31\)"):
            ESEmitter(4, 4, seed=bad)


def test_es_emitter_bounds_resample_then_clip():
    rng = np.random.default_rng(0)
    a = _filled_archive(rng, d=5)
    em = ESEmitter(5, 16, num_emitters=4, sigma=2.0, bounds=(-0.5, 0.5), seed=0)
    x = em.emit(a, tf.constant([0, 3])).numpy()
    assert x.min() >= -0.5 and x.max() <= 0.5
    em0 = ESEmitter(5, 16, num_emitters=4, sigma=0.01, x0=np.zeros(5), bounds=(-0.5, 0.5), seed=0)
    x0 = em0.emit(a, tf.constant([0, 3])).numpy()
    assert np.abs(x0).max() < 0.1 and len(np.unique(x0[:, 0])) == 64  # in bounds: the samples themselves


def test_cvt_cells_must_be_positive():
    for cells in (0, -5):
        with pytest.raises(ConfigError, match="cells"):
            CVTArchive(2, cells=cells, ranges=[(0, 1), (0, 1)], num_samples=100, cache=False)


def test_index_of_wrong_descriptor_size_is_a_shape_error():
    g = GridArchive(2, [4, 4, 4], [(0, 1)] * 3)
    for bad in (np.zeros((5, 2), np.float32), np.zeros((5, 1), np.float32), np.zeros((5, 4), np.float32),
                np.zeros(3, np.float32)):
        with pytest.raises(ShapeError, match="descriptor"):
            g.index_of(bad)
    c = CVTArchive(2, cells=8, ranges=[(0, 1), (0, 1)], centroids=np.random.default_rng(0).uniform(size=(8, 2)))
    with pytest.raises(ShapeError, match="descriptor"):
        c.index_of(np.zeros((5, 3), np.float32))


def test_other_emitters_unchanged_alongside_es_emitter():
    """A MAPElites mixing Iso+LineDD with CMA-ME searches keeps one compiled step."""
    a = GridArchive(4, [6, 6], [(0, 1), (0, 1)], qd_offset=-100.0)
    me = MAPElites(a, [IsoLineEmitter(4, 16, bounds=(0, 1)), ESEmitter(4, 8, num_emitters=2, seed=0, jit_compile=False)],
                   init_bounds=(0, 1), seed=0)
    me.step(sphere_qd, iterations=5)
    assert me.metrics()["size"] > 5 and me.evaluations.numpy() == 5 * 32


@pytest.mark.parametrize("decomposition", ["cholesky", "eigh"])
def test_factorization_samples_c_whitens_c_and_bounds_its_spectrum(decomposition):
    rng = np.random.default_rng(4)
    d, e = 6, 3
    em = ESEmitter(d, 8, num_emitters=e, x0=np.zeros(d), decomposition=decomposition, seed=0)
    m = rng.normal(size=(e, d, d)).astype(np.float32)
    c = m @ m.transpose(0, 2, 1) + 0.1 * np.eye(d, dtype=np.float32)
    em.cov.assign(c)
    for _ in range(16):  # power iterations warm-start across decompositions
        em._decompose()
    t, w = em.transform.numpy(), em.invsqrt.numpy()
    np.testing.assert_allclose(t @ t.transpose(0, 2, 1), c, rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(w @ c @ w.transpose(0, 2, 1), np.broadcast_to(np.eye(d), c.shape), atol=2e-3)
    ev = np.linalg.eigvalsh(c.astype(np.float64))
    np.testing.assert_allclose(em.extremes.numpy()[:, 0], ev[:, -1], rtol=1e-3)
    np.testing.assert_allclose(em.extremes.numpy()[:, 1], ev[:, 0], rtol=1e-2)
    # a covariance that is not positive definite stops the search (infinite condition number)
    bad = c.copy()
    bad[1] = -np.eye(d)
    em.cov.assign(bad)
    em._decompose()
    if decomposition == "cholesky":
        assert em.extremes.numpy()[1, 1] == 0.0


@pytest.mark.parametrize("kw", [{"dtype": "float64"}, {"selection_rule": "filter", "ranker": "imp"},
                                {"decomposition": "eigh", "bounds": (0, 1)}])
def test_variants_run_in_the_compiled_step(kw):
    a = GridArchive(4, [6, 6], [(0, 1), (0, 1)], qd_offset=-100.0)
    em = ESEmitter(4, 8, num_emitters=2, seed=0, jit_compile=False, **kw)
    me = MAPElites(a, [em], init_bounds=(0, 1), seed=0)
    me.step(sphere_qd, iterations=8)
    assert me.metrics()["size"] > 10 and np.isfinite(em.mean.numpy()).all()
    assert em.mean.dtype == tf.as_dtype(kw.get("dtype", "float32"))


def test_compiled_tell_hands_the_pre_batch_incumbents():
    """Inside MAPElites' compiled tell, the incumbents are read before the insertion writes the archive."""
    class Spy(ESEmitter):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            self.seen_occ = tf.Variable(tf.zeros([self.batch_size], tf.bool), trainable=False)
            self.seen_fit = tf.Variable(tf.zeros([self.batch_size]), trainable=False)

        def tell(self, solutions, fitness, descriptors, result, incumbent=None):
            self.seen_occ.assign(incumbent[0])
            self.seen_fit.assign(incumbent[1])
            return super().tell(solutions, fitness, descriptors, result, incumbent)

    a = GridArchive(4, [3, 3], [(0, 1), (0, 1)], qd_offset=-100.0)
    em = Spy(4, 16, num_emitters=2, sigma=0.3, jit_compile=False, seed=0)
    me = MAPElites(a, [em], init_bounds=(0, 1), seed=0)
    for _ in range(4):
        x = me.ask()
        f, d = sphere_qd(x)
        occ0, fit0 = a.occupied.numpy().copy(), a.fitness.numpy().copy()
        cells = a.index_of(d).numpy()
        res = me.tell(x, f, d)
        np.testing.assert_array_equal(em.seen_occ.numpy(), occ0[cells])
        np.testing.assert_array_equal(em.seen_fit.numpy()[occ0[cells]], fit0[cells][occ0[cells]])
        assert (res.status.numpy() > 0).any() or occ0.all()


def test_restarts_do_not_retrace_the_step():
    """A restart is handled inside the compiled step: many restarts, one trace of the program."""
    traces = []

    def task(x):
        traces.append(1)  # runs once per trace, never per call
        return sphere_qd(x)

    a = GridArchive(4, [6, 6], [(0, 1), (0, 1)], qd_offset=-100.0)
    em = ESEmitter(4, 8, num_emitters=3, seed=0, restart_rule=2)
    me = MAPElites(a, [em], init_bounds=(0, 1), seed=0)
    me.step(task, iterations=9)
    assert em.restarts.numpy().sum() >= 9  # every search restarted every second tell
    assert len(traces) == 1


def test_candidates_are_the_reference_normal_stream_through_the_factor():
    """Sampling (the Gaussian kernel where it runs) is mean + sigma * z A^T with z the Box-Muller stream of
    tfevo's pure-TensorFlow reference for the same seed."""
    from tfevo.strategies.shaping import _normal_reference

    rng = np.random.default_rng(1)
    e, lam, d = 3, 5, 4
    em = ESEmitter(d, lam, num_emitters=e, x0=np.zeros(d), seed=0)
    t = np.tril(rng.normal(size=(e, d, d))).astype(np.float32)
    em.transform.assign(t)
    em.mean.assign(rng.normal(size=(e, d)).astype(np.float32))
    em.sigma.assign(np.array([0.5, 1.0, 2.0], np.float32))
    seed = tf.constant([3, 9])
    got = em._draw(seed, tf.constant([0, 0])).numpy().reshape(e, lam, d)
    z = _normal_reference([e * lam, d], seed).numpy().reshape(e, lam, d)
    want = em.mean.numpy()[:, None] + em.sigma.numpy()[:, None, None] * (z @ t.transpose(0, 2, 1))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_mu_update_matches_the_cma_es_equations():
    """One tell with mu selection against the CMA-ES equations written out in NumPy (rank-one and rank-mu
    terms, paths, step size), every candidate filling a new cell so the ranking is by fitness."""
    rng = np.random.default_rng(2)
    e, lam, d = 2, 6, 3
    em = ESEmitter(d, lam, num_emitters=e, x0=np.zeros(d), selection_rule="mu", restart_rule="basic", seed=0)
    m0 = rng.normal(size=(e, d))
    c0 = np.stack([np.eye(d) + 0.3 * np.outer(v, v) for v in rng.normal(size=(e, d))])
    a0 = np.linalg.cholesky(c0)
    ps0, pc0 = 0.1 * rng.normal(size=(e, d)), 0.1 * rng.normal(size=(e, d))
    sig0 = np.array([0.3, 0.7])
    for v, x in ((em.mean, m0), (em.cov, c0), (em.transform, a0), (em.invsqrt, np.linalg.inv(a0)), (em.ps, ps0),
                 (em.pc, pc0), (em.sigma, sig0)):
        v.assign(x.astype(np.float32))
    x = (m0[:, None] + sig0[:, None, None] * rng.normal(size=(e, lam, d))).astype(np.float32)
    f = rng.normal(size=(e, lam)).astype(np.float32)
    b = e * lam
    em.last_emitted.assign(x.reshape(b, d))  # as if emit had drawn these samples
    em.emitted.assign(True)
    em.tell(x.reshape(b, d), f.reshape(b), np.full([b, 2], 0.5, np.float32), (np.zeros(b, np.int32),
            np.zeros(b, np.float32), np.zeros(b, np.int32)), incumbent=(np.zeros(b, bool), np.zeros(b, np.float32)))
    w, mueff, cc, cs, c1, cmu, damps = (np.asarray(t, np.float64) for t in em._mu_rates)
    n = float(d)
    chi = np.sqrt(n) * (1 - 1 / (4 * n) + 1 / (21 * n * n))
    for i in range(e):
        y = (x[i][np.argsort(-f[i], kind="stable")] - m0[i]) / sig0[i]
        yw = w[i] @ y
        ps = (1 - cs[i]) * ps0[i] + np.sqrt(cs[i] * (2 - cs[i]) * mueff[i]) * np.linalg.solve(a0[i], yw)
        hsig = float(np.linalg.norm(ps) / np.sqrt(1 - (1 - cs[i]) ** 2) / chi < 1.4 + 2 / (n + 1))
        pc = (1 - cc[i]) * pc0[i] + hsig * np.sqrt(cc[i] * (2 - cc[i]) * mueff[i]) * yw
        c1a = c1[i] * (1 - (1 - hsig) * cc[i] * (2 - cc[i]))
        cov = ((1 - c1a - cmu[i]) * c0[i] + c1[i] * np.outer(pc, pc)
               + cmu[i] * sum(w[i, k] * np.outer(y[k], y[k]) for k in range(lam)))
        sigma = sig0[i] * np.exp(min(1.0, cs[i] / damps[i] * (np.linalg.norm(ps) / chi - 1)))
        np.testing.assert_allclose(em.mean.numpy()[i], m0[i] + sig0[i] * yw, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(em.ps.numpy()[i], ps, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(em.pc.numpy()[i], pc, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(em.cov.numpy()[i], cov, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(em.sigma.numpy()[i], sigma, rtol=1e-5)


def test_a_non_finite_covariance_counts_as_a_failed_factorization():
    d = 4
    em = ESEmitter(d, 6, num_emitters=3, x0=np.zeros(d), seed=0)
    c = np.broadcast_to(2.0 * np.eye(d, dtype=np.float32), (3, d, d)).copy()
    c[1, 2, 0] = c[1, 0, 2] = np.nan
    c[2, 3, 1] = c[2, 1, 3] = np.inf
    em.cov.assign(c)
    em._decompose()
    assert em.extremes.numpy()[0, 1] > 0
    assert em.extremes.numpy()[1, 1] == 0.0 and em.extremes.numpy()[2, 1] == 0.0
    np.testing.assert_array_equal(em.transform.numpy()[1:], np.broadcast_to(np.eye(d), (2, d, d)))  # kept


def test_tell_accepts_only_the_batch_the_last_ask_returned_once():
    """The searches' update treats the told solutions as their samples: another batch, a reordered one or a
    second tell of the same batch is an AskTellError and changes nothing (pyribs tells its stored batch)."""
    from tfevo.core import AskTellError

    d = 4
    for compiled in (True, False):
        es = ESEmitter(d, batch_size=6, num_emitters=2, sigma=0.2, seed=1)
        if not compiled:
            es.graph_safe = False  # the eager ask/tell path of MAPElites
        me = MAPElites(GridArchive(d, [6, 6], [(-2, 2), (-2, 2)]), [es], init_bounds=(-1, 1), seed=3)
        for _ in range(2):
            x = me.ask()
            me.tell(x, *sphere_qd(x))
        x = me.ask()
        f, desc = sphere_qd(x)
        before = [v.numpy().copy() for v in (es.mean, es.sigma, es.cov, me.archive.fitness)]
        for bad in (x + 0.01, x[::-1]):
            with pytest.raises(AskTellError, match="last ask"):
                me.tell(bad, f, desc)
        for v, b in zip((es.mean, es.sigma, es.cov, me.archive.fitness), before):
            np.testing.assert_array_equal(v.numpy(), b)
        me.tell(x, f, desc)
        with pytest.raises(AskTellError, match="already told"):
            me.tell(x, f, desc)
    # the emitter on its own (pyribs' EvolutionStrategyEmitter.tell uses its stored samples)
    a = _filled_archive(np.random.default_rng(0), d=d)
    es = ESEmitter(d, batch_size=6, sigma=0.2, seed=1)
    x = es.emit(a, tf.constant([1, 2]))
    f, desc = sphere_qd(x)
    inc = a.incumbents(desc)
    with pytest.raises(AskTellError, match="last emit"):
        es.tell(x * 2.0, f, desc, a.add(x, f, desc), incumbent=inc)
    es.tell(x, f, desc, a.add(x, f, desc), incumbent=inc)
    with pytest.raises(AskTellError, match="already told"):
        es.tell(x, f, desc, a.add(x, f, desc), incumbent=inc)
