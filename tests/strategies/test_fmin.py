"""tfevo.strategies.minimize.fmin against pycma's cma.fmin2 on the same problems."""

import cma
import numpy as np
import pytest

from tfevo.core import ConfigError, ShapeError
from tfevo.strategies.minimize import fmin


def rosenbrock(x):
    x = np.asarray(x, np.float64)
    return float(np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2))


def rastrigin_rows(X):
    return 10.0 * X.shape[1] + np.sum(X ** 2 - 10.0 * np.cos(2 * np.pi * X), axis=1)


def _pycma_evals(fn, x0, sigma0, seed, **opts):
    opts = dict(opts, seed=seed, verbose=-9)
    _, es = cma.fmin2(fn, x0, sigma0, options=opts)
    return es.result.fbest, es.result.evaluations


def test_rosenbrock_to_1e_10_in_pycmas_number_of_evaluations():
    ours, theirs = [], []
    for seed in (1, 2, 3):
        r = fmin(rosenbrock, np.full(5, 0.1), 0.5, seed=seed, ftarget=1e-10)
        assert r.stop == {"ftarget": 1e-10} and r.f <= 1e-10, r.stop
        assert r.f == pytest.approx(rosenbrock(r.x), abs=0.0)
        assert r.evals_best <= r.evaluations
        ours.append(r.evaluations)
        f, evals = _pycma_evals(rosenbrock, np.full(5, 0.1), 0.5, seed, ftarget=1e-10)
        assert f <= 1e-10
        theirs.append(evals)
    assert np.median(ours) <= 1.3 * np.median(theirs), (ours, theirs)


def test_parallel_objective_with_a_large_optimum_value_reaches_1e_10():
    target = np.array([0.3, -0.1, 0.2])
    r = fmin(None, np.zeros(3), 0.3, parallel_objective=lambda X: 1000.0 + np.sum((X - target) ** 2, axis=1),
             ftarget=1000.0 + 1e-10, seed=0)
    assert "ftarget" in r.stop and r.f - 1000.0 <= 1e-10
    assert np.max(np.abs(r.x - target)) < 1e-5


@pytest.mark.slow  # 13 restarts, ~1500 generations (~20 s); BIPOP's restart rules are checked in the default run
def test_bipop_solves_rastrigin_where_a_single_run_does_not():  # against cma.fmin (test_cma_restarts.py)
    x0 = np.full(4, 3.0)
    single = fmin(None, x0, 2.0, parallel_objective=rastrigin_rows, ftarget=1e-8, seed=0, max_evals=20000)
    bipop = fmin(None, x0, 2.0, parallel_objective=rastrigin_rows, restarts="bipop", ftarget=1e-8, seed=0,
                 max_evals=60000)
    assert single.f > 1e-8 and "ftarget" not in single.stop
    assert bipop.f <= 1e-8 and bipop.restarts >= 1, (bipop.f, bipop.stop, bipop.restarts)


def test_budget_iteration_limit_and_callback_end_the_run():
    sphere = lambda x: float(np.sum(np.square(x)))  # noqa: E731
    r = fmin(sphere, np.ones(6), 1.0, max_evals=50, seed=0)
    assert r.stop == {"maxfevals": 50} and 50 <= r.evaluations < 50 + r.es.popsize
    r = fmin(sphere, np.ones(6), 1.0, max_iter=7, seed=0)
    assert r.stop == {"maxiter": 7} and r.iterations == 7
    r = fmin(sphere, np.ones(6), 1.0, restarts="ipop", max_restarts=1, max_iter=4, seed=0)
    assert r.stop == {"maxiter": 4} and r.restarts == 1 and r.iterations == 8
    seen = []
    r = fmin(sphere, np.ones(6), 1.0, seed=0, callback=lambda es: seen.append(1) or len(seen) == 3)
    assert r.stop == {"callback": True} and r.iterations == 3


def test_non_finite_values_are_the_worst():
    def f(x):
        return np.nan if x[0] > 0.5 else float(np.sum(np.square(x - 0.2)))

    r = fmin(f, np.zeros(3), 0.5, ftarget=1e-12, seed=0, max_evals=20000)
    assert np.isfinite(r.f) and r.f <= 1e-12 and r.x[0] <= 0.5


def test_same_seed_same_run():
    a = fmin(rosenbrock, np.zeros(4), 0.5, seed=7, max_evals=600)
    b = fmin(rosenbrock, np.zeros(4), 0.5, seed=7, max_evals=600)
    assert a.f == b.f and np.array_equal(a.x, b.x) and a.evals_best == b.evals_best


@pytest.mark.parametrize("kw, err, match", [
    (dict(x0=[0.0, np.nan]), ConfigError, "x0 must be finite"),
    (dict(x0=np.zeros((2, 2))), ShapeError, "x0 must be a non-empty 1-D"),
    (dict(sigma0=0.0), ConfigError, "sigma0 must be a positive"),
    (dict(max_evals=-5), ConfigError, "max_evals must be a positive integer"),
    (dict(popsize=2.5), ConfigError, "popsize must be a positive integer"),
    (dict(strategy="nelder_mead"), ConfigError, "strategy must be one of"),
    (dict(restarts="sometimes"), ConfigError, "restarts must be None, 'ipop' or 'bipop'"),
    (dict(max_restarts=-1), ConfigError, "max_restarts"),
    (dict(ftarget=float("nan")), ConfigError, "ftarget"),
    (dict(sigmaa=1.0), ConfigError, "sigmaa"),
    (dict(parallel_objective=lambda X: X[:, 0]), ConfigError, "exactly one of"),
])
def test_bad_arguments_are_named_before_any_evaluation(kw, err, match):
    calls = []
    args = dict(objective=lambda x: calls.append(1) or 0.0, x0=np.zeros(2), sigma0=1.0)
    args.update(kw)
    with pytest.raises(err, match=match):
        fmin(args.pop("objective"), args.pop("x0"), args.pop("sigma0"), **args)
    assert not calls


def test_an_objective_returning_the_wrong_number_of_values_is_a_shape_error():
    with pytest.raises(ShapeError, match="parallel_objective must return 6 values"):
        fmin(None, np.zeros(3), 1.0, popsize=6, parallel_objective=lambda X: X.sum())


@pytest.mark.parametrize("restarts", [None, "ipop"])
def test_the_mean_of_every_run_is_evaluated_as_cma_fmins(restarts):
    # a constant objective ends every run in its first iteration (tolfun); cma.fmin evaluates
    # the final mean of each run (eval_final_mean): one more evaluation per run
    import warnings

    n, calls = 4, []

    def f(x):
        calls.append(np.array(x, np.float64))
        return 1.0

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = cma.fmin(f, np.zeros(n), 1.0, {"verbose": -9, "seed": 1}, restarts=1 if restarts else 0,
                       incpopsize=2)
    theirs = res[3]  # (n = 4: popsizes floor(8.16 * 2^k) = 8, 16)
    # one restart: the mean of a run that ends in a restart and the mean of the last run
    pops = [int((4 + 3 * np.log(n)) * 2**k) for k in range(2 if restarts else 1)]
    assert theirs == sum(pops) + len(pops)  # (the pycma behaviour the test relies on)
    r = fmin(f, np.zeros(n), 1.0, restarts=restarts, max_restarts=1, seed=0)
    assert (r.evaluations, r.iterations) == (theirs, len(pops))
    assert r.restarts == len(pops) - 1
    r0 = fmin(f, np.zeros(n), 1.0, restarts=restarts, max_restarts=1, seed=0, eval_final_mean=False)
    assert r0.evaluations == sum(pops)


def test_a_final_mean_better_than_every_sample_is_the_result():
    # on the sphere the mean of a converged run is better than its samples: fmin returns it
    sphere = lambda x: float(np.sum(np.square(x - 0.3)))  # noqa: E731
    for restarts in (None, "bipop"):
        r = fmin(sphere, np.zeros(3), 0.5, restarts=restarts, max_restarts=1, seed=0, max_evals=400)
        m = r.es.mean.numpy()
        assert r.f == sphere(m) and np.array_equal(r.x, m) and r.evals_best == r.evaluations


@pytest.mark.parametrize("restarts", [None, "ipop"])
def test_result_has_pycmas_xfavorite_and_stds(restarts):
    r = fmin(rosenbrock, np.zeros(3), 0.5, restarts=restarts, max_evals=400, seed=2, bounds=(-0.5, 2.0))
    es = r.es.inner if restarts else r.es
    np.testing.assert_array_equal(r.xfavorite, es.repair(es.mean).numpy())
    assert np.all((r.xfavorite >= -0.5) & (r.xfavorite <= 2.0))
    want = float(es.sigma.numpy()) * np.sqrt(np.diag(es.covariance().numpy()))
    np.testing.assert_allclose(r.stds, want, rtol=1e-12)
