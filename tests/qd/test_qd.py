import numpy as np
import pytest
import tensorflow as tf

from tfevo.core import ConfigError, ShapeError
from tfevo.qd import (CVTArchive, ESEmitter, GaussianEmitter, GridArchive, IsoLineEmitter, MAPElites,
                      PolynomialMutationEmitter, kmeans_centroids, archive_heatmap, rastrigin_qd, rastrigin_qd_offset,
                      sphere_linproj, sphere_qd, linproj_descriptor_bounds)


def reference_insert(arch_fit, arch_occ, arch_sol, cells, fit, sol):
    """Per-candidate reference: process cells; best-in-batch (first on ties) vs incumbent."""
    arch_fit, arch_occ, arch_sol = arch_fit.copy(), arch_occ.copy(), arch_sol.copy()
    status = np.zeros(len(fit), int)
    for c in np.unique(cells):
        idx = [i for i in range(len(fit)) if cells[i] == c and np.isfinite(fit[i])]
        if not idx:
            continue
        w = idx[int(np.argmax([fit[i] for i in idx]))]  # argmax returns the first max
        if not arch_occ[c] or fit[w] > arch_fit[c]:
            status[w] = 1 if arch_occ[c] else 2
            arch_fit[c], arch_occ[c], arch_sol[c] = fit[w], True, sol[w]
    return arch_fit, arch_occ, arch_sol, status


@pytest.mark.parametrize("use_op", [None, False])  # C++ kernel (when built) and the TF reference
def test_batched_insertion_matches_reference_with_collisions(use_op):
    rng = np.random.default_rng(0)
    a = GridArchive(3, [4, 3], [(0, 1), (0, 1)], use_op=use_op)
    for _ in range(6):
        b = 200
        desc = rng.uniform(-0.2, 1.2, size=(b, 2)).astype(np.float32)  # out of range clipped
        fit = rng.integers(0, 20, size=b).astype(np.float32)  # many ties
        fit[rng.random(b) < 0.1] = np.nan
        fit[rng.random(b) < 0.05] = -np.inf
        sol = rng.normal(size=(b, 3)).astype(np.float32)
        cells = a.index_of(desc).numpy()
        ref = reference_insert(a.fitness.numpy()[:12], a.occupied.numpy()[:12], a.solutions.numpy()[:12],
                               cells, fit, sol)
        res = a.add(sol, fit, desc)
        np.testing.assert_array_equal(a.occupied.numpy()[:12], ref[1])
        np.testing.assert_array_equal(a.fitness.numpy()[:12][ref[1]], ref[0][ref[1]])
        np.testing.assert_array_equal(a.solutions.numpy()[:12], ref[2])
        np.testing.assert_array_equal(res.status.numpy(), ref[3])
        assert not a.occupied.numpy()[12]  # trash row stays empty


def test_grid_index_row_major_and_clipping():
    a = GridArchive(1, [10, 5], [(0, 1), (-1, 1)])
    idx = a.index_of(tf.constant([[0.0, -1.0], [0.95, 0.99], [2.0, 5.0], [0.15, 0.0]])).numpy()
    assert list(idx) == [0, 9 * 5 + 4, 49, 1 * 5 + 2]


def test_cvt_archive_nearest_centroid_and_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TFEVO_CACHE", str(tmp_path))
    a = CVTArchive(2, cells=50, ranges=[(0, 1), (0, 1)], num_samples=5000, iterations=10)
    assert list((tmp_path / "cvt").glob("*.npy"))
    c = a.centroids.numpy()
    pts = np.random.default_rng(1).uniform(size=(300, 2)).astype(np.float32)
    ref = np.argmin(((pts[:, None] - c[None]) ** 2).sum(-1), 1)
    np.testing.assert_array_equal(a.index_of(pts).numpy(), ref)
    b = CVTArchive(2, cells=50, ranges=[(0, 1), (0, 1)], num_samples=5000, iterations=10)
    np.testing.assert_array_equal(b.centroids.numpy(), c)
    # centroids spread over the box: every sample's nearest centroid is close
    assert np.max(np.sqrt(((pts[:, None] - c[None]) ** 2).sum(-1)).min(1)) < 0.25


def _run(seed, gens, emitters_fn, dim=10, ckpt=None):
    a = GridArchive(dim, [20, 20], [(0, 1), (0, 1)], qd_offset=rastrigin_qd_offset(dim))
    me = MAPElites(a, emitters_fn(dim), init_bounds=(0, 1), seed=seed)
    return me


def test_rastrigin_qd_coverage_and_score_grow_to_targets():
    dim = 20
    a = GridArchive(dim, [32, 32], [(0, 1), (0, 1)], qd_offset=rastrigin_qd_offset(dim))
    me = MAPElites(a, [IsoLineEmitter(dim, 256, bounds=(0, 1))], init_bounds=(0, 1), seed=0)
    cov, qd = [], []
    for _ in range(60):  # 15360 evaluations
        x = me.ask()
        f, d = rastrigin_qd(x)
        me.tell(x, f, d)
        m = me.metrics()
        cov.append(m["coverage"])
        qd.append(m["qd_score"])
    assert all(np.diff(qd) >= 0) and all(np.diff(cov) >= 0)  # elitist archive never loses
    assert cov[-1] >= 0.9 and cov[0] < 0.25
    assert qd[-1] > 1.5 * qd[0]
    # mean fitness improves well beyond the random initial batch
    assert m["max_fitness"] > -300


def test_reproducible_and_checkpoint_resume_exact(tmp_path):
    def make():
        a = GridArchive(6, [10, 10], [(0, 1), (0, 1)], qd_offset=rastrigin_qd_offset(6))
        em = [IsoLineEmitter(6, 32, bounds=(0, 1)), GaussianEmitter(6, 16, sigma=0.05, bounds=(0, 1)),
              PolynomialMutationEmitter(6, 16, bounds=(0, 1))]
        return MAPElites(a, em, init_bounds=(0, 1), seed=7)

    def step(me):
        x = me.ask()
        f, d = rastrigin_qd(x)
        me.tell(x, f, d)
        return x.numpy()

    full = make()
    xs = [step(full) for _ in range(8)]
    part = make()
    for _ in range(4):
        step(part)
    path = tf.train.Checkpoint(me=part).save(str(tmp_path / "ck"))
    resumed = make()
    tf.train.Checkpoint(me=resumed).restore(path)
    for i in range(4, 8):
        np.testing.assert_array_equal(step(resumed), xs[i])
    np.testing.assert_array_equal(resumed.archive.fitness.numpy(), full.archive.fitness.numpy())


def test_bad_inputs():
    a = GridArchive(3, [4, 4], [(0, 1), (0, 1)])
    with pytest.raises(ShapeError, match="descriptors"):
        a.add(np.zeros((5, 3)), np.zeros(5), np.zeros((5, 3)))
    with pytest.raises(ConfigError, match="high > low"):
        GridArchive(3, [4], [(1, 0)])
    for bad in ((0, np.inf), (-np.inf, 1), (0, np.nan)):  # an infinite range would put every descriptor in bin 0
        with pytest.raises(ConfigError, match=r"ranges: .*finite"):
            GridArchive(3, [4], [bad])
        with pytest.raises(ConfigError, match=r"ranges: .*finite"):
            CVTArchive(3, 4, [bad, (0, 1)], num_samples=100, iterations=1, cache=False)
    with pytest.raises(ConfigError, match="solution_dim"):
        MAPElites(a, [GaussianEmitter(4, 8)], init_bounds=(0, 1))
    for bad in (0.0, -1.0, np.nan, np.inf, [0.1, 0.2], [0.1, 0.0, 0.1], "0.1"):  # NaN used to emit NaN batches
        with pytest.raises(ConfigError, match=r"sigma must be a finite number > 0"):
            GaussianEmitter(3, 8, sigma=bad)
    for kw in ({"iso_sigma": np.nan}, {"line_sigma": -0.1}, {"iso_sigma": "0.1"}):
        with pytest.raises(ConfigError, match=next(iter(kw))):
            IsoLineEmitter(3, 8, **kw)
    # a per-dimension sigma (as pyribs' GaussianEmitter takes): dimension 1 does not move
    one = GridArchive(3, [2], [(0, 1)])
    one.add(np.full((1, 3), 0.5, np.float32), np.zeros(1, np.float32), np.full((1, 1), 0.5, np.float32))
    step = GaussianEmitter(3, 4000, sigma=[0.1, 1e-9, 2.0]).emit(one, tf.constant([1, 2])).numpy() - 0.5
    np.testing.assert_allclose(step.std(0), [0.1, 0.0, 2.0], rtol=0.05, atol=1e-7)  # (0.5 + 1e-9 == 0.5)
    for bad in ((0, [1, 2]), 5, (0, np.nan), (1, 1)):
        with pytest.raises(ConfigError, match=r"bounds"):
            IsoLineEmitter(3, 8, bounds=bad)
    for bad in ((1, 0), (0, np.inf), (0, [1, 2]), 5):
        with pytest.raises(ConfigError, match="init_bounds"):
            MAPElites(a, [GaussianEmitter(3, 8)], init_bounds=bad)
    me = MAPElites(a, [GaussianEmitter(3, 8)], init_bounds=(0, [1, 2, 3]))
    assert np.all(me.ask().numpy() <= [1, 2, 3])
    me = MAPElites(a, [GaussianEmitter(3, 8)], init_bounds=(0, 1))
    with pytest.raises(ShapeError, match="fitness"):
        me.tell(me.ask(), np.zeros(7), np.zeros((7, 2)))


@pytest.mark.parametrize("make, msg", [
    (lambda: GridArchive(3, [2.5, 4], [(0, 1), (0, 1)]), r"dims must be .*integer bin counts, got \[2\.5, 4\]"),
    (lambda: GridArchive(3, 10, [(0, 1)]), r"dims must be a non-empty list"),
    (lambda: GridArchive(3, [4, 4], [(0, 1), (0, 1)], qd_offset=float("nan")), r"qd_offset must be a finite number"),
    (lambda: PolynomialMutationEmitter(3, 8, bounds=(0, 1), eta=-1.0), r"eta .* must be a finite number >= 0, got -1"),
    (lambda: PolynomialMutationEmitter(3, 8, bounds=(0, 1), rate=2.0), r"rate .* must be in \[0, 1\], got 2"),
])
def test_impossible_archive_and_emitter_settings_are_config_errors(make, msg):
    """Settings that would silently truncate (2.5 bins), poison every QD-score (NaN offset) or make
    the mutation produce NaN (eta = -1) are refused with the value."""
    with pytest.raises(ConfigError, match=msg):
        make()


def test_tasks_and_heatmap(tmp_path):
    x = tf.fill([2, 4], 0.5)  # maps to the origin
    f, d = rastrigin_qd(x)
    np.testing.assert_allclose(f.numpy(), 0.0, atol=1e-4)
    np.testing.assert_allclose(d.numpy(), 0.5)
    f, _ = sphere_qd(tf.zeros([1, 3]))
    np.testing.assert_allclose(f.numpy(), [-3 * 25.0], rtol=1e-6)
    f, d = sphere_linproj(tf.fill([1, 4], 0.4 * 5.12))
    np.testing.assert_allclose(f.numpy(), [100.0], rtol=1e-6)
    np.testing.assert_allclose(d.numpy(), [[2 * 2.048, 2 * 2.048]], rtol=1e-6)
    a = GridArchive(4, [8, 8], [(0, 1), (0, 1)])
    xs = tf.random.stateless_uniform([100, 4], seed=[1, 2])
    f, d = rastrigin_qd(xs)
    a.add(xs, f, d)
    out = archive_heatmap(a, tmp_path / "h.png")
    assert out.stat().st_size > 1000


def test_map_elites_through_trainer_resumes_exactly(tmp_path):
    from tfevo.training import Trainer

    def make(run):
        a = GridArchive(8, [10, 10], [(0, 1), (0, 1)], qd_offset=rastrigin_qd_offset(8))
        me = MAPElites(a, [IsoLineEmitter(8, 64, bounds=(0, 1))], init_bounds=(0, 1), seed=3)
        return me, Trainer(me, rastrigin_qd, run_dir=run, generations=6, progress=False, verbose=False)

    me_full, t = make(tmp_path / "a")
    t.run()
    me_part, t = make(tmp_path / "b")
    t.budget_generations = 3
    t.run()
    me_res, t = make(tmp_path / "b")
    assert int(t.generation.numpy()) == 3
    t.run()
    np.testing.assert_array_equal(me_res.archive.fitness.numpy(), me_full.archive.fitness.numpy())
    np.testing.assert_array_equal(me_res.archive.solutions.numpy(), me_full.archive.solutions.numpy())
    import json

    last = json.loads((tmp_path / "b" / "progress.jsonl").read_text().splitlines()[-1])
    assert last["coverage"] == pytest.approx(me_full.metrics()["coverage"])  # QD metrics logged


def test_qd_rl_on_mujoco_with_feet_contact_descriptors():
    from tfevo import envs, nn
    from tfevo.rollout import PipelinedEvaluator

    spec = envs.make("Walker2d-v5", 1)
    model = nn.PopulationModel(nn.mlp(spec.observation_shape, spec.action_spec.policy_output_size, hidden=(8,)))
    ev = PipelinedEvaluator("Walker2d-v5", nn.Policy(model, spec.action_spec), num_envs=8, num_subsets=2,
                            max_steps=40, descriptors=True)

    def evaluate(p):
        f, d = ev.evaluate(p)
        return f, tf.convert_to_tensor(d)[:, 2:4]

    a = GridArchive(model.num_params, [8, 8], [(0, 1), (0, 1)], qd_offset=-100.0)
    me = MAPElites(a, [IsoLineEmitter(model.num_params, 16, iso_sigma=0.05, line_sigma=0.2)],
                   init_solutions=model.init_params(16, seed=0), seed=0)
    for _ in range(3):
        x = me.ask()
        f, d = evaluate(x)
        assert d.shape == (16, 2) and np.all((d.numpy() >= 0) & (d.numpy() <= 1))
        me.tell(x, f, d)
    m = me.metrics()
    assert m["size"] >= 2 and np.isfinite(m["max_fitness"])


def test_compiled_programs_trace_without_autograph(monkeypatch):
    """ask/tell/step/add trace tfevo's own code from the loaded code objects.  Autograph would re-read
    the source files at trace time; a file edited meanwhile then mixes old and new code (what made
    the MuJoCo QD test above fail in a shared checkout)."""
    from tensorflow.python.autograph.impl import api

    calls = []
    real = api.converted_call

    def spy(f, *args, **kwargs):
        calls.append(getattr(f, "__qualname__", repr(f)))
        return real(f, *args, **kwargs)

    monkeypatch.setattr(api, "converted_call", spy)
    tf.function(lambda v: v + 1.0)(tf.constant(1.0))  # the spy sees autograph when it is used
    assert calls
    calls.clear()
    a = GridArchive(4, [5, 5], [(0, 1), (0, 1)], qd_offset=rastrigin_qd_offset(4))
    me = MAPElites(a, [IsoLineEmitter(4, 16, bounds=(0, 1)), GaussianEmitter(4, 8, sigma=0.1, bounds=(0, 1))],
                   init_bounds=(0, 1), seed=0)
    for _ in range(2):
        x = me.ask()
        me.tell(x, *rastrigin_qd(x))
    me.step(tf.function(rastrigin_qd, autograph=False))
    x = tf.random.stateless_uniform([6, 4], seed=[1, 1])
    a.add(x, *rastrigin_qd(x))
    assert calls == [], calls
    assert a.size.numpy() > 0


def test_rastrigin_qd_equals_qdax_formula():
    """rastrigin_qd (two row sums of y = 10 x) is QDax's -(10 D + sum(z^2 - 10 cos(2 pi z))), z = 10 x - 5."""
    x = np.random.default_rng(3).uniform(-0.2, 1.2, size=(500, 37)).astype(np.float32)
    z = x.astype(np.float64) * 10.0 - 5.0
    ref = -(10.0 * 37 + np.sum(z * z - 10.0 * np.cos(2.0 * np.pi * z), axis=1))
    f, d = rastrigin_qd(x)
    np.testing.assert_allclose(f.numpy(), ref, rtol=2e-6, atol=2e-4)
    np.testing.assert_array_equal(d.numpy(), x[:, :2])
    assert float(rastrigin_qd(np.full((1, 37), 0.5, np.float32))[0][0]) == pytest.approx(0.0, abs=1e-4)


@pytest.mark.parametrize("use_op", [None, False])  # C++ kernel (when built) and the TF reference
def test_grid_cells_match_pyribs_on_edges_bounds_and_out_of_range(use_op):
    """Interior bin edges go to the upper bin, the upper bound to the last bin, values outside are clipped:
    the cells of ``index_of`` and of the insertion (kernel or reference) are pyribs' GridArchive's."""
    ribs = pytest.importorskip("ribs.archives")
    rng = np.random.default_rng(3)
    for dims, ranges in (([10, 7], [(0.0, 1.0), (-1.0, 0.3)]), ([20, 3], [(-2.5, 4.0), (0.1, 0.2)]),
                         ([64, 5], [(-1.0, 1.0), (-4.0, 4.0)])):
        edges = [np.linspace(lo, hi, n + 1) for n, (lo, hi) in zip(dims, ranges)]
        cols = [np.concatenate([e, e + (e[1] - e[0]) * 1e-7, e - (e[1] - e[0]) * 1e-7,
                                [lo - 3 * (hi - lo), hi + 3 * (hi - lo)], rng.uniform(lo, hi, 40)])
                for e, (lo, hi) in zip(edges, ranges)]
        n = max(len(c) for c in cols)
        desc = np.stack([np.resize(c, n) for c in cols], 1).astype(np.float32)
        theirs = ribs.GridArchive(solution_dim=2, dims=dims, ranges=ranges).index_of(desc)
        ours = GridArchive(2, dims, ranges, use_op=use_op)
        np.testing.assert_array_equal(ours.index_of(desc).numpy(), theirs)
        res = ours.add(np.zeros((n, 2), np.float32), np.arange(n, dtype=np.float32), desc)
        np.testing.assert_array_equal(res.cell.numpy(), theirs)
    # descriptors on the edges k/10 (as float32, some just below) open bin k; 1.0 is in the last bin
    on_edge = (np.arange(11) / 10).astype(np.float32)
    np.testing.assert_array_equal(GridArchive(2, [10], [(0, 1)], use_op=use_op).index_of(on_edge[:, None]).numpy(),
                                  [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 9])


def test_grid_archive_epsilon_is_checked():
    with pytest.raises(ConfigError, match="epsilon"):
        GridArchive(2, [4], [(0, 1)], epsilon=-1.0)


@pytest.mark.parametrize("use_op", [None, False])
def test_index_of_a_non_finite_descriptor_is_no_cell(use_op):
    """NaN or +-inf in a descriptor: index_of gives -1 (pyribs' index_of raises), not a cell: the grid
    read NaN as bin 0 and +inf as the last bin, the brute-force CVT returned cells (an out-of-range
    one for NaN) and the bucket CVT cell 0.  add still drops such candidates."""
    bad = np.array([[np.nan, 0.5], [0.5, np.inf], [-np.inf, 0.5], [0.2, 0.7]], np.float32)
    cent = np.random.default_rng(3).uniform(size=(70, 2)).astype(np.float32)
    archives = [GridArchive(2, [5, 4], [(0, 1), (0, 1)], use_op=use_op),
                CVTArchive(2, 70, [(0, 1), (0, 1)], centroids=cent, lookup="buckets", use_op=use_op),
                CVTArchive(2, 6, [(0, 1), (0, 1)], centroids=cent[:6], lookup="brute", use_op=use_op)]
    for a in archives:
        idx = a.index_of(bad).numpy()
        np.testing.assert_array_equal(idx[:3], -1, err_msg=type(a).__name__)
        assert idx[3] == a.index_of(bad[3:]).numpy()[0] >= 0
        res = a.add(np.zeros((4, 2), np.float32), np.ones(4, np.float32), bad)
        np.testing.assert_array_equal(res.status.numpy(), [0, 0, 0, 2])
        assert int(a.size) == 1
    np.testing.assert_array_equal(archives[0].grid_index(bad).numpy()[:3], -1)


def test_emitter_bounds_in_pyribs_form_and_the_ambiguous_two_dimensional_case():
    """pyribs' per-dimension pairs [(low, high), ...] with None for no bound give pyribs' lower/upper
    bounds (they were a ConfigError); with D = 2 the pairs [(0, 1), (2, 3)] were silently read as
    low = [0, 1], high = [2, 3]: now a ConfigError naming both readings unless low and high are arrays."""
    ribs_archives = pytest.importorskip("ribs.archives")
    ribs_emitters = pytest.importorskip("ribs.emitters")
    pairs = [(0.0, 1.0), (-2.0, None), (None, 3.0), (0.5, 0.75)]
    ra = ribs_archives.GridArchive(solution_dim=4, dims=[2], ranges=[(0, 1)])
    theirs = ribs_emitters.GaussianEmitter(ra, sigma=0.1, x0=np.zeros(4), bounds=pairs)
    for em in (GaussianEmitter(4, 8, bounds=pairs), IsoLineEmitter(4, 8, bounds=pairs),
               ESEmitter(4, 4, bounds=pairs)):
        np.testing.assert_array_equal(em.bounds[0].numpy(), theirs.lower_bounds)
        np.testing.assert_array_equal(em.bounds[1].numpy(), theirs.upper_bounds)
    lo, hi = GaussianEmitter(1, 8, bounds=[(0.0, 2.0)]).bounds
    assert (lo.numpy().tolist(), hi.numpy().tolist()) == ([0.0], [2.0])
    for bad in ([(0, 1), (2, 3)], np.array([[0, 1], [2, 3]])):
        with pytest.raises(ConfigError, match=r"ambiguous with solution_dim=2.*np\.array\(low\)"):
            GaussianEmitter(2, 8, bounds=bad)
    # where only one reading is a box there is nothing to ask: pyribs' usual [(-1, 1), (-1, 1)] (read as
    # (low, high) it would have high == low) is pyribs' box, and so is [(0, 5), (1, 2)]
    for two in ([(-1.0, 1.0), (-1.0, 1.0)], [(0.0, 5.0), (1.0, 2.0)]):
        ra2 = ribs_archives.GridArchive(solution_dim=2, dims=[2], ranges=[(0, 1)])
        theirs = ribs_emitters.GaussianEmitter(ra2, sigma=0.1, x0=np.zeros(2), bounds=two)
        lo, hi = GaussianEmitter(2, 8, bounds=two).bounds
        np.testing.assert_array_equal(lo.numpy(), theirs.lower_bounds)
        np.testing.assert_array_equal(hi.numpy(), theirs.upper_bounds)
    lo, hi = GaussianEmitter(2, 8, bounds=[(0.0, -1.0), (1.0, 2.0)]).bounds  # as pairs, high < low
    assert (lo.numpy().tolist(), hi.numpy().tolist()) == ([0.0, -1.0], [1.0, 2.0])
    lo, hi = GaussianEmitter(2, 8, bounds=(np.array([0.0, 1.0]), np.array([2.0, 3.0]))).bounds
    assert (lo.numpy().tolist(), hi.numpy().tolist()) == ([0.0, 1.0], [2.0, 3.0])
    lo, hi = GaussianEmitter(2, 8, bounds=(0, 1)).bounds
    assert (lo.numpy().tolist(), hi.numpy().tolist()) == ([0.0, 0.0], [1.0, 1.0])
    with pytest.raises(ConfigError, match="finite bounds"):
        PolynomialMutationEmitter(4, 8, bounds=pairs)


@pytest.mark.parametrize("make, msg", [
    (lambda: GridArchive(2.5, [4], [(0, 1)]), r"solution_dim must be an integer >= 1, got 2\.5"),
    (lambda: GridArchive("3", [4], [(0, 1)]), r"solution_dim must be an integer >= 1, got '3'"),
    (lambda: GridArchive(3, [4], [(0, 1, 2)]), r"ranges must be a list of \(low, high\) pairs"),
    (lambda: GridArchive(3, [4], None), r"ranges must be a list of \(low, high\) pairs"),
    (lambda: GridArchive(3, [4], [(0, 1)], qd_offset="1"), r"qd_offset must be a finite number, got '1'"),
    (lambda: GaussianEmitter(3, 2.5), r"batch_size must be an integer >= 1, got 2\.5"),
    (lambda: IsoLineEmitter(3.5, 8), r"solution_dim must be an integer >= 1, got 3\.5"),
    (lambda: ESEmitter(3, 4.5), r"batch_size \(candidates per search\) must be an integer >= 2, got 4\.5"),
    (lambda: ESEmitter(3, 4, num_emitters=1.5), r"num_emitters must be an integer >= 1, got 1\.5"),
    (lambda: ESEmitter(3, 4, resample_rounds=0.5), r"resample_rounds must be an integer >= 0, got 0\.5"),
    (lambda: CVTArchive(3, 4, [(0, 1)], num_samples=0, cache=False), r"num_samples must be an integer >= 4, got 0"),
    (lambda: CVTArchive(3, 4, [(0, 1)], num_samples=100, seed=1.5, cache=False), r"seed must be an integer"),
    (lambda: CVTArchive(3, 4, [(0, 1)], num_samples=100, iterations=2.5, cache=False), r"iterations must be"),
    (lambda: kmeans_centroids(np.random.default_rng(0).uniform(size=(20, 2)), 0), r"k must be an integer >= 1"),
    (lambda: kmeans_centroids(np.full((20, 2), np.nan), 3), r"k-means samples must be finite"),
])
def test_sizes_seeds_and_ranges_are_checked_not_truncated(make, msg):
    """Counts that int() silently truncated (2.5 -> 2 candidates, 1.5 -> 1 search), a num_samples of 0
    silently replaced by the default, and malformed ranges, seeds or k-means inputs that raised raw
    Python/TensorFlow errors (or returned NaN centroids) are ConfigErrors naming the field and value."""
    with pytest.raises(ConfigError, match=msg):
        make()


def test_cvt_archive_takes_pyribs_number_of_centroids():
    """pyribs' CVTArchive(solution_dim=..., centroids=n, ranges=...) (n centroids by k-means) raised a
    TypeError (cells missing); it is the same archive as cells=n. An array of centroids gives cells."""
    kw = dict(ranges=[(0, 1), (-1, 1)], num_samples=500, iterations=3, cache=False)
    a = CVTArchive(solution_dim=3, centroids=20, **kw)
    b = CVTArchive(3, 20, **kw)
    assert a.num_cells == 20 and a.centroids.numpy().tobytes() == b.centroids.numpy().tobytes()
    assert CVTArchive(3, centroids=b.centroids.numpy(), ranges=kw["ranges"]).num_cells == 20
    with pytest.raises(ConfigError, match=r"cells=10 and centroids=20 .* disagree"):
        CVTArchive(3, 10, centroids=20, **kw)
    with pytest.raises(ConfigError, match=r"CVTArchive needs cells"):
        CVTArchive(3, ranges=kw["ranges"])


def test_emitter_bounds_take_pyribs_none_entries_for_a_whole_dimension():
    """pyribs' bounds list may hold None for a dimension with no bound at all; that was a ConfigError
    (D != 2) and, at D = 2, [(0, 1), None] was silently read as low = [0, 1], high = +inf."""
    ribs_archives = pytest.importorskip("ribs.archives")
    ribs_emitters = pytest.importorskip("ribs.emitters")
    for pairs in ([(0.0, 1.0), None, (-1.0, None)], [None]):
        d = len(pairs)
        ra = ribs_archives.GridArchive(solution_dim=d, dims=[2], ranges=[(0, 1)])
        theirs = ribs_emitters.GaussianEmitter(ra, sigma=0.1, x0=np.zeros(d), bounds=pairs)
        for em in (GaussianEmitter(d, 8, bounds=pairs), ESEmitter(d, 4, bounds=pairs)):
            np.testing.assert_array_equal(em.bounds[0].numpy(), theirs.lower_bounds)
            np.testing.assert_array_equal(em.bounds[1].numpy(), theirs.upper_bounds)
    with pytest.raises(ConfigError, match="ambiguous with solution_dim=2"):
        GaussianEmitter(2, 8, bounds=[(0.0, 1.0), None])
    lo, hi = GaussianEmitter(2, 8, bounds=[None, None]).bounds  # no bound either way
    assert (lo.numpy().tolist(), hi.numpy().tolist()) == ([-np.inf, -np.inf], [np.inf, np.inf])
