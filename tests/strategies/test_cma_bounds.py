"""Box bounds of the CMA family: pycma's ``BoundTransform`` (the samples are evaluated in the
box and learned untransformed), checked against pycma's transformation and on problems whose
constrained optimum lies on the bound (where learning from clipped samples stalls)."""

import numpy as np
import pytest
import tensorflow as tf

from tfevo.strategies import CMAES, IPOP, LMMAES, CholeskyCMAES, SepCMAES
from tfevo.strategies.minimize import fmin

cma_transformations = pytest.importorskip("cma.transformations")

LO, HI = -5.0, 5.0


def test_repair_is_pycma_bound_transform():
    lo, hi = np.array([-5.0, 0.0, 1.0]), np.array([5.0, 0.3, 100.0])
    es = CMAES(3, bounds=(lo, hi))
    ref = cma_transformations.BoxConstraintsLinQuadTransformation([list(b) for b in zip(lo, hi)])
    x = np.random.default_rng(0).standard_normal([3000, 3]) * [8.0, 1.0, 80.0] + [0.0, 0.1, 50.0]
    np.testing.assert_array_equal(es.repair(x).numpy(), np.array([ref(row) for row in x]))
    assert np.all(CMAES(3).repair(x).numpy() == x)  # no bounds: the identity


def _beyond_bound(x):  # half the coordinates' optimum (6) beyond the upper bound: f* = d / 2
    d = x.shape[1]
    opt = np.where(np.arange(d) < d // 2, 6.0, 0.0)
    return np.sum((np.asarray(x, np.float64) - opt) ** 2, axis=1) - d // 2


@pytest.mark.parametrize("cls", [CMAES, CholeskyCMAES, SepCMAES, LMMAES])
def test_optimum_beyond_the_bound_is_reached(cls):
    # Learning from samples clipped into the box stalled here (sigma collapsed, then C degenerated).
    es = cls(6, sigma=2.5, seed=0, bounds=(LO, HI))
    for _ in range(400):
        x = es.ask()
        assert np.all((x.numpy() >= LO) & (x.numpy() <= HI))
        f = _beyond_bound(x.numpy())
        es.tell(x, -f)
        if f.min() <= 1e-8:
            break
    assert f.min() <= 1e-8, (f.min(), es.stop_reasons)
    assert np.all(np.abs(es.repair(es.mean).numpy()[:3] - HI) < 1e-6)


def test_fmin_bounds_result_in_the_box():
    r = fmin(lambda x: float(_beyond_bound(x[None, :])[0]), np.zeros(6), 2.5, bounds=(LO, HI), seed=1,
             ftarget=1e-9, max_evals=5000)
    assert r.f <= 1e-9 and "ftarget" in r.stop
    assert np.all((r.x >= LO) & (r.x <= HI))


def test_ipop_with_bounds_restarts_keep_the_transform():
    es = IPOP(4, sigma=2.0, seed=2, bounds=(LO, HI), tolx=0.5, max_restarts=2)
    for _ in range(80):
        x = es.ask()
        assert np.all((x.numpy() >= LO) & (x.numpy() <= HI))
        es.tell(x, -_beyond_bound(x.numpy()))
    assert int(es.restarts.numpy()) >= 1 and es.popsize > 8
    assert float(-es.best[1]) < 1e-2


def test_rows_changed_by_the_caller_are_learned_as_given_with_a_limited_step():
    # Told rows other than the asked ones: a far row must not blow up the step size.
    es = CMAES(4, sigma=0.1, seed=3, bounds=(LO, HI), init_params=0.0)
    x = es.ask().numpy()
    x[0] = HI  # a corner, ~70 standard deviations away
    f = -np.sum(x ** 2, axis=1)
    f[0] = 1.0  # ranked best
    es.tell(tf.constant(x), f)
    assert float(es.sigma.numpy()) < 0.2
    assert float(es.best_fitness.numpy()) == 1.0 and np.all(es.best_params.numpy() == HI)


def test_same_population_told_twice_same_state():
    a = CMAES(5, sigma=1.0, seed=4, bounds=(-1.0, 1.0))
    b = CMAES(5, sigma=1.0, seed=4, bounds=(-1.0, 1.0))
    for _ in range(5):
        xa, xb = a.ask(), b.ask()
        np.testing.assert_array_equal(xa.numpy(), xb.numpy())
        a.tell(xa, -tf.reduce_sum(xa ** 2, 1))
        b.tell(tf.constant(xb.numpy()), -np.sum(xb.numpy() ** 2, 1))
    np.testing.assert_array_equal(a.mean.numpy(), b.mean.numpy())


def test_restored_between_ask_and_tell_redraws_the_same_samples(tmp_path):
    a = CMAES(4, sigma=3.0, seed=5, bounds=(-1.0, 1.0))
    for _ in range(3):
        x = a.ask()
        a.tell(x, -tf.reduce_sum(x ** 2, 1))
    x = a.ask()
    path = tf.train.Checkpoint(es=a).write(str(tmp_path / "ck"))
    b = CMAES(4, sigma=3.0, seed=5, bounds=(-1.0, 1.0))
    tf.train.Checkpoint(es=b).read(path).assert_consumed()
    f = -tf.reduce_sum(x ** 2, 1)
    a.tell(x, f)
    b.tell(tf.constant(x.numpy()), f)
    for v, w in ((a.mean, b.mean), (a.sigma, b.sigma), (a.C, b.C)):
        np.testing.assert_array_equal(v.numpy(), w.numpy())


def test_one_sided_bounds_none_or_inf_as_pycma():
    # pycma takes None (a side or an entry) for no bound; it was read as NaN and every sample was NaN.
    ref = cma_transformations.BoxConstraintsLinQuadTransformation([[None, 1.0], [0.0, None]])
    x = np.random.default_rng(1).standard_normal([500, 2]) * 30.0
    want = np.array([ref(row) for row in x])
    for bounds in (([None, 0.0], [1.0, None]), ([-np.inf, 0.0], [1.0, np.inf])):
        es = CMAES(2, sigma=1.0, seed=0, bounds=bounds)
        np.testing.assert_array_equal(es.repair(x).numpy(), want)
        for _ in range(3):
            y = es.ask().numpy()
            assert np.all(np.isfinite(y)) and np.all(y[:, 0] <= 1.0) and np.all(y[:, 1] >= 0.0)
            es.tell(y, -np.sum(y ** 2, 1))
        assert np.all(np.isfinite(es.mean.numpy()))
    r = fmin(lambda v: float(np.sum((v - 2.0) ** 2)), np.zeros(2), 1.0, bounds=(None, 1.0), max_evals=3000,
             ftarget=2.0 + 1e-9)
    assert r.f <= 2.0 + 1e-9 and np.all(r.x <= 1.0)


@pytest.mark.parametrize("bounds", [(np.nan, 1.0), ([0.0, 0.0, 0.0], 1.0), (0.0, [[1.0, 1.0]]), (0.0,)])
def test_bad_bounds_are_config_errors(bounds):
    from tfevo.core import ConfigError
    with pytest.raises(ConfigError, match="bound"):
        CMAES(2, bounds=bounds)


@pytest.mark.parametrize("cls", [CMAES, SepCMAES])
def test_reordered_rows_are_learned_as_their_samples(cls):
    # The asked rows told in another order (pycma's tell finds each one's sample): same update as in
    # the asked order, bit for bit. They were learned from their preimage with a limited step instead,
    # which took 2.4x the generations on the optimum-beyond-the-bound sphere.
    a = cls(6, sigma=2.5, seed=7, bounds=(LO, HI))
    b = cls(6, sigma=2.5, seed=7, bounds=(LO, HI))
    perm = np.random.default_rng(0).permutation(a.popsize)
    for _ in range(15):
        x = a.ask().numpy()
        np.testing.assert_array_equal(b.ask().numpy(), x)
        f = -_beyond_bound(x)
        a.tell(x, f)
        b.tell(x[perm], f[perm])
    for v, w in ((a.mean, b.mean), (a.sigma, b.sigma)):
        np.testing.assert_array_equal(v.numpy(), w.numpy())
