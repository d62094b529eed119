"""Restart schedule and the pycma stop criteria the restart wrappers act on.

The runs here are driven by the fitness they are told: random fitness keeps a
run going (no criterion fires within a few dozen generations), constant fitness
after informative generations ends it through ``tolflatfitness`` after two generations, so every
regime choice, population size and iteration limit of the schedule is checked
against the rule it follows.
"""

import math

import numpy as np
import pytest
import tensorflow as tf

from tfevo.strategies import BIPOP, CMAES, IPOP, LMMAES, SepCMAES
from tfevo.strategies.cma_stop import STOP_REASONS


def _random(es, rng):
    return tf.constant(rng.standard_normal(es.popsize), tf.float32)


def _flat(es):
    return tf.zeros([es.popsize], tf.float32)


def test_flat_fitness_stops_after_more_than_one_flat_generation():
    # pycma's tolflatfitness=1: the best equal to the member at rank floor(0.75 lambda)
    # in more than one generation in a row stops the run.
    assert "tolflatfitness" in STOP_REASONS
    es = CMAES(6, sigma=1.0, seed=0)
    rng = np.random.default_rng(0)
    es.tell(es.ask(), _flat(es))
    assert "tolflatfitness" not in es.stop_reasons  # one flat generation is tolerated
    x = es.ask()
    es.tell(x, _random(es, rng))  # a generation with information resets the count
    es.tell(es.ask(), _flat(es))
    assert "tolflatfitness" not in es.stop_reasons
    es.tell(es.ask(), _flat(es))
    assert "tolflatfitness" in es.stop_reasons
    # a plateau that only the top quarter leaves is not flat: the best is better than rank 0.75 lambda
    es.reset()
    for _ in range(3):
        f = np.zeros(es.popsize, np.float32)
        f[0] = 1.0
        es.tell(es.ask(), tf.constant(f))
        assert "tolflatfitness" not in es.stop_reasons


def test_flat_fitness_on_a_step_plateau_restarts_ipop():
    # a wide plateau (sigma far below the step width): every value equal, so pycma's tolfun (this
    # generation's range and that of the one best recorded, both 0) restarts IPOP after one
    # generation, before tolflatfitness (two flat generations) could
    def steps(x):
        return -tf.reduce_sum(tf.floor(tf.abs(x) / 100.0), axis=1)

    es = IPOP(5, sigma=1.0, init_range=(-3, 3), seed=2)
    x = es.ask()
    es.tell(x, tf.cast(steps(x), tf.float32))
    assert int(es.restarts.numpy()) == 1
    assert es.history[0][2] == ["tolfun"]


def test_tolfacupx_fires_when_a_coordinate_std_grows_1000_fold_from_the_run_sigma():
    # on a linear function sigma grows; the criterion compares sigma sqrt(C_ii) with
    # 1e3 times the sigma this run started from (reset may set another than the constructor's)
    es = CMAES(4, sigma=1.0, seed=1)
    es.reset(sigma=1e-4)
    fired_at = None
    for g in range(300):
        x = es.ask()
        es.tell(x, tf.cast(x[:, 0], tf.float32))
        std = float(es.sigma.numpy()) * np.sqrt(np.diag(es.covariance().numpy()))
        if "tolfacupx" in es.stop_reasons:
            fired_at = g
            break
        assert np.all(std <= 1e3 * 1e-4 * (1 + 1e-12))
    assert fired_at is not None
    assert np.any(std > 1e3 * 1e-4)
    assert float(es.run_sigma0.numpy()) == 1e-4


def test_bipop_schedule_follows_pycma_budgets():
    n, seed = 10, 3
    es = BIPOP(n, sigma=2.0, init_range=(-4, 4), seed=seed)
    base = es.popsize
    assert base == 10
    # pycma's maxiter with its unfloored popsize option 4 + 3 ln n
    assert es.max_generations == 100 + 150 * (n + 3) ** 2 // math.sqrt(4 + 3 * math.log(n)) == 7775
    rng = np.random.default_rng(0)

    def run(random_gens):
        """``random_gens`` generations of random fitness, then flat ones until a restart;
        returns the generations this run made."""
        before, gens = int(es.restarts.numpy()), 0
        while int(es.restarts.numpy()) == before:
            es.tell(es.ask(), _random(es, rng) if gens < random_gens else _flat(es))
            gens += 1
            assert gens < 500
        return gens

    # first run: 5 random + 2 flat generations; its evaluations count to the small regime
    assert run(5) == 7
    assert int(es.evals_small.numpy()) == 70 and int(es.evals_large.numpy()) == 0
    # small (70) >= max(1, large = 0): the next run is large, popsize floor(10.9 * 2)
    assert es.popsize == 21 and bool(es.regime_small.numpy()) is False
    assert run(20) == 22
    large = 22 * 21
    assert int(es.evals_large.numpy()) == large
    small = 70
    sizes, sigmas = [], []
    while small < large:
        # a small run: popsize floor(10.9 * 2**(U**2)) in [10, 21] (the last large
        # run's multiplier is 2), sigma 2 * 0.01**U, at most ceil(0.5 * large / popsize)
        # generations: random fitness runs into that iteration limit
        assert bool(es.regime_small.numpy()) is True
        p, sigma0 = es.popsize, float(es.sigma.numpy())
        assert base <= p <= 21
        assert 2.0 * 0.01 <= sigma0 <= 2.0
        cap = math.ceil(0.5 * large / p)
        assert run(10**6) == cap
        assert es.history[-1][2][-1] == "maxiter"
        small += cap * p
        assert int(es.evals_small.numpy()) == small and int(es.evals_large.numpy()) == large
        sizes.append(p)
        sigmas.append(sigma0)
    # the small regime caught up: the second large run, popsize floor(10.9 * 4), the run's full sigma
    assert bool(es.regime_small.numpy()) is False
    assert es.popsize == 43 and float(es.sigma.numpy()) == 2.0
    assert len(sizes) >= 2
    # popsize and sigma come from two draws of the wrapper's stream (keys [-1 - seed, k]): k = 1 the
    # first start point, 2 that of the large run, then per small run U_sigma, U_pop and its start point
    for i, (p, sigma0) in enumerate(zip(sizes, sigmas)):
        u_sigma, u_pop = (float(tf.random.stateless_uniform([], seed=[-1 - seed, k], dtype=tf.float64))
                          for k in (3 + 3 * i, 4 + 3 * i))
        assert p == max(2, math.floor((4 + 3 * math.log(n)) * 2.0 ** (u_pop * u_pop)))
        assert sigma0 == pytest.approx(2.0 * 0.01**u_sigma, rel=1e-12)


@pytest.mark.parametrize("small, large, want_small", [(70, 0, False), (3000, 8000, True), (8000, 8000, False)])
def test_bipop_regime_choice_on_budget_examples(small, large, want_small):
    es = BIPOP(10, seed=0)
    es.evals_small.assign(small)
    es.evals_large.assign(large)
    assert es._next_is_small() is want_small


# -- cma.fmin as the reference: its restart schedule driven by a scripted fitness -------------------
def _pycma_fmin_runs(n, pattern, restarts, bipop=False):
    """Runs ``cma.fmin`` with a fitness scripted per generation and returns, per run,
    ``(popsize, generations, tolstagnation, maxiter)``.

    ``pattern(g, lam)``: the ``lam`` values of generation ``g`` of a run (pycma minimizes).
    """
    import warnings

    cma = pytest.importorskip("cma")
    runs = []
    state = {"i": 0, "es": None}

    def f(x):
        es = state["es"]
        lam, g = es.popsize, es.countiter
        v = pattern(g, lam)[state["i"] % lam]
        state["i"] += 1
        return float(v)

    def init(es):
        state["es"], state["i"] = es, 0
        runs.append([es.popsize, 0, es.opts["tolstagnation"], es.opts["maxiter"]])

    def count(es):
        runs[-1][1] = es.countiter

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cma.fmin(f, np.zeros(n), 1.0, {"verbose": -9, "seed": 1, "tolfun": 0, "tolfunhist": 0},
                 restarts=restarts, incpopsize=2, bipop=bipop, init_callback=init, callback=count)
    return [tuple(r) for r in runs]


def _tfevo_runs(es, pattern, runs):
    """Drives ``es`` (IPOP/BIPOP) with the same scripted fitness (maximized: negated) for ``runs`` runs."""
    out, g, lam = [], 0, es.popsize
    while len(out) < runs:
        before = int(es.restarts.numpy())
        es.tell(es.ask(), tf.constant(-np.asarray(pattern(g, lam), np.float64)))
        g += 1
        if int(es.restarts.numpy()) != before:
            out.append((lam, g))
            g, lam = 0, es.popsize
    return out


def _informative_then_flat(flat_from):
    # distinct values before generation flat_from, then the best floor(0.75 lambda) + 1 equal (a
    # plateau the rest leaves: no tolfun, but the best equals the member at rank floor(0.75 lambda))
    def pattern(g, lam):
        if g < flat_from:
            return np.arange(lam, dtype=np.float64) + g
        v = np.zeros(lam)
        k = int(0.75 * lam) + 1
        v[k:] = 1.0 + np.arange(lam - k)
        return v
    return pattern


@pytest.mark.parametrize("n", [10, 20])
def test_ipop_popsizes_and_flat_fitness_end_runs_as_cma_fmin(n):
    # cma.fmin multiplies the unfloored popsize 4 + 3 ln n by 2 at each restart and floors the
    # product (n = 10: 10, 21, 43, 87); a run ends after two flat generations in a row
    # (tolflatfitness=1; es.stop() checks once per iteration however often it is called)
    pattern = _informative_then_flat(3)
    theirs = _pycma_fmin_runs(n, pattern, restarts=3)
    es = IPOP(n, sigma=1.0, seed=0, max_restarts=3)
    ours = _tfevo_runs(es, pattern, 3)
    assert [(p, g) for p, g, _, _ in theirs[:3]] == ours
    assert ours[0][1] == 5  # three informative generations, two flat ones
    # maxiter and the stagnation window: evaluated with the first run's unfloored popsize, kept by every run
    assert es.max_generations == theirs[0][3] == theirs[-1][3]
    assert es.inner.stag_window == theirs[0][2] == theirs[-1][2]


def test_bipop_large_popsizes_are_cma_fmins():
    n = 10
    es = BIPOP(n, sigma=2.0, seed=3)
    pattern = _informative_then_flat(2)
    larges = []
    for _ in range(8):  # (seed 3: large runs 1, 3 and 8; the small runs between them under M = 2 and M = 4)
        _tfevo_runs(es, pattern, 1)
        if not bool(es.regime_small.numpy()):
            larges.append(es.popsize)
        else:  # a small run: floor(popsize0 * M^(U^2)) with M the last large run's multiplier
            m = 2.0 ** int(es.n_large.numpy())
            assert int(4 + 3 * math.log(n)) <= es.popsize <= int((4 + 3 * math.log(n)) * m)
    assert larges[:2] == [21, 43]


@pytest.mark.parametrize("n, popsize", [(2, None), (10, None), (20, None), (40, None), (10, 24)])
def test_stagnation_window_is_pycmas_tolstagnation(n, popsize):
    # pycma evaluates int(100 + 100 n^1.5 / popsize) with its popsize option: 4 + 3 ln n before int()
    cma = pytest.importorskip("cma")
    opts = {"verbose": -9} if popsize is None else {"verbose": -9, "popsize": popsize}
    theirs = cma.CMAEvolutionStrategy(np.zeros(n), 1.0, opts)
    es = CMAES(n, popsize=popsize)
    assert es.popsize == theirs.popsize
    assert es.stag_window == theirs.opts["tolstagnation"]


def _pycma_stop_generation(n, pattern, max_gens=60):
    """Generations until ``CMAEvolutionStrategy`` (ask/tell, one ``stop()`` per iteration) stops on
    the scripted fitness ``pattern(g, lam)`` (minimized), and its stop dictionary."""
    cma = pytest.importorskip("cma")
    es = cma.CMAEvolutionStrategy(np.zeros(n), 1.0, {"verbose": -9, "seed": 1})
    for g in range(max_gens):
        x = es.ask()
        es.tell(x, list(pattern(g, es.popsize)))
        if es.stop():
            return g + 1, dict(es.stop())
    return None, {}


def _tfevo_stop_generation(n, pattern, max_gens=60):
    es = CMAES(n, sigma=1.0, seed=0)
    for g in range(max_gens):
        es.tell(es.ask(), tf.constant(-np.asarray(pattern(g, es.popsize), np.float64)))
        if es.stop_reasons:
            return g + 1, es.stop_reasons
    return None, []


def test_tolfunhist_fires_as_pycmas_when_the_best_stays_put():
    # the best value never moves, the rest of the population spreads (no tolfun, not flat): pycma's
    # tolfunhist (10 recorded bests within 1e-12) ends the run at generation 10
    def pattern(g, lam):
        return np.concatenate([[5.0], 6.0 + np.arange(lam - 1) + g])

    g_py, why_py = _pycma_stop_generation(10, pattern)
    g_tf, why_tf = _tfevo_stop_generation(10, pattern)
    assert g_py == 10 and "tolfunhist" in why_py
    assert (g_tf, why_tf) == (g_py, ["tolfunhist"])


def test_tolfun_needs_no_full_history_as_pycmas():
    # values within 1e-13 from the first generation: pycma's tolfun holds at once (its history is
    # the one best recorded so far), before the 10 + 30 n / lambda generations of a full window
    def pattern(g, lam):
        return 3.0 + 1e-13 * np.arange(lam)

    g_py, why_py = _pycma_stop_generation(10, pattern)
    g_tf, why_tf = _tfevo_stop_generation(10, pattern)
    assert g_py == 1 and "tolfun" in why_py
    assert g_tf == 1 and "tolfun" in why_tf


@pytest.mark.parametrize("n, lam", [(10, 10), (10, 21), (10, 43), (20, 12)])
def test_tolfun_window_is_pycmas_history_length(n, lam):
    # pycma keeps at most 10 + 30 n / lambda recorded bests (it pops while the list is longer)
    cma = pytest.importorskip("cma")
    es = cma.CMAEvolutionStrategy(np.zeros(n), 1.0, {"verbose": -9, "seed": 1, "popsize": lam})
    rng = np.random.default_rng(0)
    for _ in range(60):
        es.tell(es.ask(), list(rng.standard_normal(lam) + 100))
    assert CMAES(n, popsize=lam).tolfun_window == len(es.fit.hist)


def _stagnant(g, lam):
    """Fitness that does not depend on x (minimised): distinct values on a 1/1024 grid (exact in
    float32), the best of the whole run in the first generation, or a new one at generation 600."""
    f = 1.0 + np.random.default_rng([3, g]).permutation(1024)[:lam] / 1024.0
    if g == 0:
        f[1] = 0.5
    return f


def _late_best(g, lam):
    f = _stagnant(g, lam)
    if g == 600:
        f[3] = 0.25
    return f


def _flagged_generations(tell_loop, key, gens):
    return [g + 1 for g, reasons in zip(range(gens), tell_loop) if key in reasons]


def _pycma_loop(n, pattern, gens, opts=None):
    cma = pytest.importorskip("cma")
    es = cma.CMAEvolutionStrategy(np.zeros(n), 1.0, {"verbose": -9, "seed": 1, **(opts or {})})
    for g in range(gens):
        es.tell(es.ask(), list(pattern(g, es.popsize)))
        yield es.stop()  # (one stop() per iteration; the run is continued whatever it says)


def _tfevo_loop(es, pattern, gens):
    for g in range(gens):
        es.tell(es.ask(), tf.constant(-pattern(g, es.popsize), es.dtype))
        yield es.stop_reasons


@pytest.mark.parametrize("pattern, gens", [(_stagnant, 620), (_late_best, 760)])
@pytest.mark.parametrize("cls, kw", [(CMAES, {}), (SepCMAES, {"use_op": False}),
                                     (SepCMAES, {"dtype": "float32"})])
def test_stagnation_fires_in_the_generations_pycmas_tolstagnation_does(pattern, gens, cls, kw):
    # pycma samples best and median every 5 iterations and compares the newest
    # max(tolstagnation, samples) // 10 samples with the ones before, once the run's best is more than
    # tolstagnation / 2 iterations old and the run longer than n (5 + 100 / lambda) iterations; the
    # criterion depends on the told fitness only, so every generation it holds in must agree
    # (SepCMAES against CMA_diagonal=True)
    n = 2
    opts = {"CMA_diagonal": True} if cls is SepCMAES else {}
    theirs = _flagged_generations(_pycma_loop(n, pattern, gens, opts), "tolstagnation", gens)
    ours = _flagged_generations(_tfevo_loop(cls(n, sigma=1.0, seed=0, **kw), pattern, gens), "stagnation", gens)
    assert theirs and theirs[0] >= 505  # (101 samples)
    assert ours == theirs


@pytest.mark.parametrize("cls, kw", [(CMAES, {}), (SepCMAES, {"use_op": False}), (LMMAES, {})])
def test_tolxstagnation_fires_as_pycmas(cls, kw):
    # sigma0 = 1e-13: the mean never moves by delta = 1e-9; pycma stops when the iterations since
    # the reference point exceed 20 + 0.1 iterations, at iteration 23
    cma = pytest.importorskip("cma")
    n = 3
    es = cma.CMAEvolutionStrategy(np.full(n, 0.5), 1e-13, {"verbose": -9, "seed": 1, "tolx": 0})
    for g in range(60):
        es.tell(es.ask(), list(_stagnant(g, es.popsize)))
        if es.stop():
            break
    ours = cls(n, sigma=1e-13, init_params=0.5, tolx=0.0, seed=0, **kw)
    for g_tf in range(60):
        ours.tell(ours.ask(), tf.constant(-_stagnant(g_tf, ours.popsize), ours.dtype))
        if ours.stop_reasons:
            break
    assert (g + 1, list(es.stop())) == (23, ["tolxstagnation"])
    assert (g_tf + 1, ours.stop_reasons) == (23, ["tolxstagnation"])


def test_tolxstagnation_reference_point_moves_as_pycmas():
    # pycma's own bookkeeping (_StopTolXStagnation) fed with tfevo's means, step by step: the
    # reference point is reset whenever the mean moved by more than delta sqrt(max(1, age / t))
    cma = pytest.importorskip("cma")
    from cma.evolution_strategy import _StopTolXStagnation

    ours = CMAES(3, sigma=3e-10, tolx=0.0, seed=2)
    theirs = _StopTolXStagnation(ours.mean.numpy())
    stops = []
    for g in range(120):
        ours.tell(ours.ask(), tf.constant(-_stagnant(g, ours.popsize)))
        theirs.update(ours.mean.numpy())
        stops.append((theirs.stop, "tolxstagnation" in ours.stop_reasons))
        assert int(ours.stop_counters[1]) == theirs.count_x, g
    assert [a for a, _ in stops] == [b for _, b in stops]
    assert 0 < theirs.count_x  # the reference point moved at least once
    del cma


def test_noeffectaxis_checks_the_axis_pycma_checks_in_each_iteration():
    # One principal axis (the shortest, index 0 in both libraries' ascending order) no longer
    # moves the mean, no coordinate is still; pycma checks axis countiter mod n after the
    # iteration's tell, so the criterion holds in iterations 3, 6 (n = 3), not 1, 4, 7.
    cma = pytest.importorskip("cma")
    from tfevo.strategies import cma_stop

    n, sigma = 3, 1e-13
    c, s = np.cos(0.3), np.sin(0.3)
    b = np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])
    d = np.array([1e-3, 1.0, 2.0])
    m = np.ones(n)
    ref = cma.CMAEvolutionStrategy(np.zeros(n), 1.0, {"verbose": -9, "seed": 1})
    x = ref.ask()
    ref.tell(x, [float(np.sum(np.square(v))) for v in x])
    ref.mean, ref.sigma, ref.sm.B, ref.sm.D, ref.sm.C = m.copy(), sigma, b.copy(), d.copy(), (b * d**2) @ b.T
    ours = CMAES(n, sigma=1.0, seed=0)
    ours.tell(ours.ask(), -tf.reduce_sum(tf.square(ours.ask()), 1))
    want, got = [], []
    for it in range(1, 8):
        ref.countiter = it
        want.append("noeffectaxis" in ref.stop())
        for v, val in ((ours._mean, m), (ours.sigma, sigma), (ours.B, b), (ours.D, d), (ours.C, (b * d**2) @ b.T)):
            v.assign(val)
        ours.generation.assign(it - 1)  # (the tell's count before its increment)
        ours.restart_generation.assign(0)
        f = -tf.range(1, ours.popsize + 1, dtype=tf.float64)
        cma_stop.update_stop_flags(ours, f, tf.range(ours.popsize, dtype=tf.int32))
        got.append("noeffectaxis" in ours.stop_reasons)
        assert "noeffectcoord" not in ours.stop_reasons
    assert want == [False, False, True, False, False, True, False]
    assert got == want


def test_bipop_budgets_count_the_final_mean_to_the_run_that_ended():
    # cma.fmin adds a run's evaluations, its final mean's included, to that run's regime before
    # it chooses the next one (n = 4: popsizes 8, then 16; a constant fitness ends each run in
    # its first iteration)
    es = BIPOP(4, sigma=1.0, seed=0)
    seen = []
    es.evaluate_final_mean = lambda m: seen.append(m) or -1.0
    es.tell(es.ask(), tf.fill([es.popsize], tf.constant(-1.0, tf.float64)))
    assert (int(es.evals_small.numpy()), int(es.evals_large.numpy()), es.popsize) == (8 + 1, 0, 16)
    es.tell(es.ask(), tf.fill([es.popsize], tf.constant(-1.0, tf.float64)))
    assert (int(es.evals_small.numpy()), int(es.evals_large.numpy())) == (9, 16 + 1)
    assert int(es.evaluations.numpy()) == 26 and len(seen) == 2


def _issued(stream):
    """The keys a seed stream has handed out so far (replayed eagerly from counter 0)."""
    count = int(stream.counter.numpy())
    stream.counter.assign(0)
    keys = {tuple(int(v) for v in stream.next().numpy()) for _ in range(count)}
    assert int(stream.counter.numpy()) == count
    return keys


def _restarted(es, runs, rng):
    """Random fitness for three generations, then flat fitness until a restart, ``runs`` times."""
    for _ in range(runs):
        before, gens = int(es.restarts.numpy()) + int(getattr(es, "n_large", es.restarts).numpy()), 0
        while int(es.restarts.numpy()) + int(getattr(es, "n_large", es.restarts).numpy()) == before:
            es.tell(es.ask(), _random(es, rng) if gens < 3 else _flat(es))
            gens += 1


@pytest.mark.parametrize("cls", [IPOP, BIPOP])
def test_the_wrapper_and_the_inner_strategy_never_share_a_key(cls):
    # the wrapper's draws (start points, BIPOP's uniforms) use keys no SeedStream uses, so a
    # restart's start point is independent of the samples of every run
    seed = 5
    es = cls(4, sigma=1.0, init_range=(-2, 2), seed=seed)
    _restarted(es, 3, np.random.default_rng(0))
    assert int(es.restarts.numpy()) == 3
    wrapper, inner = _issued(es.seeds), _issued(es.inner.seeds)
    assert not wrapper & inner
    assert len(wrapper) >= 3 and len(inner) > 10
    # whatever the seed of any SeedStream: its keys' first word is the seed, in [0, 2**31)
    assert all(hi < 0 for hi, _ in wrapper) and all(hi >= 0 for hi, _ in inner)


@pytest.mark.parametrize("cls", [IPOP, BIPOP])
def test_every_start_point_is_a_draw_of_the_wrapper_stream(cls):
    # the first start point too (one source for all of them); the inner strategy's samples are
    # those of the same CMAES built with the same seed at that start point
    seed, lo, hi = 7, -2.0, 3.0

    def start(k):
        u = tf.random.stateless_uniform([4], seed=[-1 - seed, k], dtype=tf.float64).numpy()
        return lo + u * (hi - lo)

    es = cls(4, sigma=1.0, init_range=(lo, hi), seed=seed)
    np.testing.assert_array_equal(es.mean.numpy(), start(1))
    alone = CMAES(4, sigma=1.0, init_params=start(1), seed=seed, dtype="float64")
    np.testing.assert_array_equal(es.ask().numpy(), alone.ask().numpy())
    _restarted(es, 1, np.random.default_rng(1))
    assert int(es.seeds.counter.numpy()) == 2  # (BIPOP's first restart is a large run: no uniforms drawn)
    np.testing.assert_array_equal(es.mean.numpy(), start(2))


def test_restored_restart_wrapper_continues_the_uninterrupted_run(tmp_path):
    # restored between two restarts: the wrapper's later draws (start points; BIPOP's uniforms come
    # from the same stream) and the inner samples continue as in the uninterrupted run
    rng = np.random.default_rng(2)
    fits = [rng.standard_normal(64) for _ in range(20)]

    def drive(es, start, stop):
        xs = []
        for g in range(start, stop):
            x = es.ask()
            xs.append(x.numpy())
            es.tell(x, fits[g][: es.popsize] if g % 9 < 4 else np.zeros(es.popsize))
        return xs

    make = lambda: IPOP(4, sigma=1.0, init_range=(-2, 2), seed=3, max_restarts=2)  # noqa: E731
    a = make()
    drive(a, 0, 6)
    assert int(a.restarts.numpy()) == 1
    path = tf.train.Checkpoint(es=a).write(str(tmp_path / "ckpt"))
    counter = int(a.seeds.counter.numpy())
    whole = drive(a, 6, 20)
    b = make()
    tf.train.Checkpoint(es=b).restore(path)
    rest = drive(b, 6, 20)
    assert int(b.restarts.numpy()) >= 2 and int(b.seeds.counter.numpy()) > counter
    for got, want in zip(rest, whole):
        np.testing.assert_array_equal(got, want)


def test_a_whole_run_on_pycmas_samples_stops_in_pycmas_generation():
    # tfevo told pycma's samples of a whole sphere run from x0 in [-4, 4]^n with sigma0 2 (the BBOB
    # harness's start): the mean stays pycma's and the first stop criterion holds in the same
    # generation, for the same reason. (pycma's C starts 1e-5 anisotropic: the states agree to
    # about 1e-3 relative.)
    cma = pytest.importorskip("cma")
    n, lam, s0 = 10, 21, 2.0  # (the harness's first large restart at 10-D)
    m0 = np.random.default_rng(10_000).uniform(-4, 4, n)
    es = CMAES(n, popsize=lam, sigma=s0, init_params=m0, seed=3)
    ref = cma.CMAEvolutionStrategy(m0, s0, {"popsize": lam, "verbose": -9, "seed": 5})
    g, stopped_at = 0, None
    while not ref.stop() and g < 400:
        x = np.asarray(ref.ask())
        f = (x**2).sum(1)
        es.ask()
        es.tell(tf.constant(x), tf.constant(-f, tf.float64))
        ref.tell(list(x), list(f))
        g += 1
        if stopped_at is None and int(es.stop_flags.numpy()):
            stopped_at = g
        np.testing.assert_allclose(es.mean.numpy(), ref.mean, rtol=1e-6, atol=1e-12)
    assert 100 < g < 400 and sorted(ref.stop()) == ["tolfun"]
    assert (stopped_at, es.stop_reasons) == (g, ["tolfun"])
    np.testing.assert_allclose(float(es.sigma.numpy()), ref.sigma, rtol=1e-2)
