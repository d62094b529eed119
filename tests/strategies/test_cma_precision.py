"""CMA-ES family precision: float64 defaults reach f - f_opt <= 1e-8 where pycma does,
and the stop criteria do not fire while the run still makes progress."""

import numpy as np
import pytest
import tensorflow as tf

from tfevo.problems import bbob
from tfevo.strategies import BIPOP, CMAES, IPOP, CholeskyCMAES, LMMAES, SepCMAES

TARGET = 1e-8


def _run(es, problem, budget, ignore_stop_for=0, target=TARGET):
    """Runs ``es`` on ``problem`` (fitness ``-(f - f_opt)``) until ``target``, the budget or a
    stop criterion.  Returns ``(evaluations or None, best f - f_opt, stop reasons, best after
    ignore_stop_for more generations)``."""
    evals, reasons, extra = 0, [], None
    while evals < budget:
        x = es.ask()
        fit = problem.fitness(x)
        g = -fit.numpy().astype(np.float64)
        if g.min() <= target:
            return evals + int(np.argmax(g <= target)) + 1, float(g.min()), [], None
        evals += len(g)
        es.tell(x, fit)
        if es.stop_reasons:
            reasons = es.stop_reasons
            break
    best = -float(es.best[1].numpy())
    if reasons and ignore_stop_for:
        for _ in range(ignore_stop_for):
            x = es.ask()
            es.tell(x, problem.fitness(x))
        extra = -float(es.best[1].numpy())
    return None, best, reasons, extra


def _x0(dim, seed=0):
    return np.random.default_rng(seed).uniform(-4.0, 4.0, dim)


@pytest.mark.parametrize("cls", [CMAES, SepCMAES, CholeskyCMAES, LMMAES, IPOP, BIPOP])
def test_cma_family_defaults_to_float64_end_to_end(cls):
    es = cls(5, seed=0)
    assert es.dtype == tf.float64
    x = es.ask()
    assert x.dtype == tf.float64
    es.tell(x, -tf.reduce_sum(x * x, 1))
    assert es.best[0].dtype == tf.float64 and es.mean.dtype == tf.float64
    # the asked point is kept at full precision (no float32 rounding on the way)
    b = es.best[0].numpy()
    assert np.any(b != b.astype(np.float32).astype(np.float64))


def test_float64_reaches_below_the_float32_grid():
    # x_opt off the float32 grid: a float32 population cannot get closer than the grid
    # allows; float64 ask/state can (sphere around an irrational point).
    c = np.full(4, np.pi, np.float64)
    es = CMAES(4, sigma=1.0, seed=0, init_params=3.0)
    for _ in range(400):
        x = es.ask()
        es.tell(x, -tf.reduce_sum(tf.square(x - c), 1) * 1e16)  # scaled so float32 fitness resolves it
    err = np.max(np.abs(es.best[0].numpy() - c))
    grid = np.max(np.abs(c.astype(np.float32).astype(np.float64) - c))
    assert err < grid / 10, (err, grid)


def test_cma_default_reaches_1e8_on_ill_conditioned_f10_20d():
    # Ellipsoid (cond 1e6, rotated), 20-D: pycma reaches 1e-8 with ~14-15k evaluations
    # (benchmarks/results/cma.md, BBOB section); the float32 state stopped on noeffectaxis at ~1e-5.
    p = bbob.make(10, 20, instance=1)
    evals, best, reasons, _ = _run(CMAES(20, sigma=2.0, init_params=_x0(20), seed=1), p, 25_000)
    assert evals is not None, (best, reasons)


def test_sep_cma_default_reaches_1e8_on_separable_ellipsoid_f2_20d():
    # f2 (separable, cond 1e6): float32 state stopped on noeffectcoord at ~5e-6
    p = bbob.make(2, 20, instance=1)
    evals, best, reasons, _ = _run(SepCMAES(20, sigma=2.0, init_params=_x0(20), seed=1), p, 10_000)
    assert evals is not None, (best, reasons)


def test_float32_stop_criteria_do_not_fire_while_progressing():
    # float32 state on f2 20-D: when a criterion fires, 300 more generations (stop ignored)
    # improve the best by less than 2x -- it fired when progress had ended.  The per-axis
    # no-effect tests fired at ~5e-6 while the run could still improve 500-fold.
    p = bbob.make(2, 20, instance=1)
    es = SepCMAES(20, sigma=2.0, init_params=_x0(20), seed=1, dtype="float32")
    evals, best, reasons, after = _run(es, p, 30_000, ignore_stop_for=300, target=0.0)
    assert reasons, best  # (target 0: the run ends on a stop criterion)
    assert best < 1e-7 and after > 0.5 * best, (reasons, best, after)


@pytest.mark.slow
@pytest.mark.parametrize("cls", [CMAES, CholeskyCMAES])
def test_float32_full_cma_stop_criteria_do_not_fire_while_progressing(cls):
    p = bbob.make(10, 20, instance=1)
    es = cls(20, sigma=2.0, init_params=_x0(20), seed=1, dtype="float32")
    evals, best, reasons, after = _run(es, p, 60_000, ignore_stop_for=400, target=0.0)
    assert reasons, best
    assert after > 0.5 * best, (reasons, best, after)


def _pycma_evals(fid, dim, budget):
    cma = pytest.importorskip("cma")
    p = bbob.make(fid, dim, instance=1)

    def f(x):
        return float(p.value(np.asarray(x)[None])[0].numpy()) - p.f_opt

    es = cma.CMAEvolutionStrategy(_x0(dim), 2.0, {"ftarget": TARGET, "maxfevals": budget, "verbose": -9,
                                                 "seed": 1})
    es.optimize(f)
    return es.result.evaluations if es.result.fbest <= TARGET else None


@pytest.mark.slow
@pytest.mark.parametrize("dim", [20, 40])
@pytest.mark.parametrize("fid", [2, 10, 11, 12])
def test_cma_default_reaches_1e8_where_pycma_does(fid, dim):
    budget = 3000 * dim
    ref = _pycma_evals(fid, dim, budget)
    if ref is None:
        pytest.skip(f"pycma does not reach 1e-8 on f{fid} {dim}-D within {budget} evaluations")
    p = bbob.make(fid, dim, instance=1)
    evals, best, reasons, _ = _run(CMAES(dim, sigma=2.0, init_params=_x0(dim), seed=1), p, budget)
    assert evals is not None, (best, reasons, ref)
    assert evals <= 1.5 * ref, (evals, ref)
