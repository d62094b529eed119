"""Tests of tfevo.problems.bbob (24 noiseless BBOB functions).

Two instance sources are tested: ``instance=i`` must reproduce COCO's ``bbob``
suite (compared with ``cocoex`` when it is installed, and with a few values
recorded from cocoex 2.8.2 when it is not), ``seed=s`` is tfevo's own
NumPy-drawn instance family (kept for backward compatibility).
"""

import math

import numpy as np
import pytest
import tensorflow as tf

from tfevo.core import ConfigError, ShapeError
from tfevo.problems import bbob, bbob_instances
from tfevo.registry import get

FIDS = list(range(1, 25))


@pytest.mark.parametrize("dim", [10])
def test_value_at_optimum_is_f_opt(dim):
    for fid in FIDS:
        p = bbob.make(fid, dim, seed=3)
        assert abs(float(p.value(p.x_opt)) - p.f_opt) < 1e-9, (fid, p.name)
        assert abs(float(p.fitness(p.x_opt[None])[0])) < 1e-6
        # the optimum is better than random points
        x = np.random.default_rng(fid).uniform(-5, 5, (16, dim))
        assert np.all(p.value(x).numpy() >= p.f_opt - 1e-9), fid


def test_vectorized_equals_per_row():
    x = np.random.default_rng(0).uniform(-5, 5, (9, 6))
    for fid in FIDS:
        p = bbob.make(fid, 6, seed=1)
        batch = p.value(x).numpy()
        rows = np.array([float(p.value(r)) for r in x])
        np.testing.assert_allclose(batch, rows, rtol=1e-12, atol=1e-9, err_msg=str(fid))


def test_known_values():
    d = 5
    ar = np.arange(d) / (d - 1)
    # f1 sphere: x_opt + e_i -> f_opt + 1
    p = bbob.make(1, d, seed=0)
    assert float(p.value(p.x_opt + np.eye(d)[2])) == pytest.approx(p.f_opt + 1.0, abs=1e-9)
    # f2: T_osz(1) = 1, so a unit step along coordinate i costs 10^(6 i/(d-1))
    p = bbob.make(2, d, seed=0)
    for i in range(d):
        assert float(p.value(p.x_opt + np.eye(d)[i])) == pytest.approx(p.f_opt + 10 ** (6 * ar[i]), rel=1e-9)
    # f5 linear slope at the origin: sum 5 |s_i| with |s_i| = 10^(i/(d-1))
    p = bbob.make(5, d, seed=0)
    assert float(p.value(np.zeros(d))) == pytest.approx(p.f_opt + 5 * np.sum(10 ** ar), rel=1e-12)
    # f8 Rosenbrock: z = 0 gives sum (0 - 1)^2 = d - 1
    p = bbob.make(8, d, seed=0)
    assert float(p.value(p.x_opt - 1.0)) == pytest.approx(p.f_opt + d - 1, rel=1e-12)
    # f14 different powers: a step r along the rotated first axis gives |r|
    p = bbob.make(14, d, seed=0)
    v = float(p.value(p.x_opt + 0.0)) - p.f_opt
    assert v == pytest.approx(0.0, abs=1e-12)
    # f16 Weierstrass f0 and f23 Katsuura vanish at the optimum exactly
    for fid in (16, 23, 17):
        p = bbob.make(fid, d, seed=2)
        assert abs(float(p.value(p.x_opt)) - p.f_opt) < 1e-9
    # f24: second funnel value d*1 + s*sum((mu1 - mu1)^2) = d at x_hat = mu1
    p = bbob.make(24, d, seed=0)
    s = 1.0 - 1.0 / (2.0 * math.sqrt(d + 20.0) - 8.2)
    mu1 = -math.sqrt((2.5**2 - 1.0) / s)
    x = mu1 / 2.0 * np.sign(p.x_opt)
    z_rastr = float(p.value(x)) - p.f_opt
    assert z_rastr >= d - 1e-9  # min(funnels) = d, Rastrigin part >= 0


def test_plain_helpers():
    x = tf.constant([[0.0, 0.0], [1.0, 1.0], [1.0, 2.0]])
    np.testing.assert_allclose(bbob.sphere(x).numpy(), [0, 2, 5])
    np.testing.assert_allclose(bbob.rosenbrock(x).numpy(), [1, 0, 100], atol=1e-5)
    np.testing.assert_allclose(bbob.rastrigin(x).numpy(), [0, 2, 5], atol=1e-4)


def test_same_seed_same_instance_and_registry():
    a, b, c = bbob.make(15, 4, 7), bbob.make(15, 4, 7), bbob.make(15, 4, 8)
    np.testing.assert_array_equal(a.x_opt, b.x_opt)
    assert a.f_opt == b.f_opt and not np.array_equal(a.x_opt, c.x_opt)
    p = get("problem", "bbob_f15")(dim=4, seed=7)
    assert p.f_opt == a.f_opt


def test_errors():
    with pytest.raises(ConfigError):
        bbob.make(25, 4)
    with pytest.raises(ConfigError):
        bbob.make(3, 1)
    with pytest.raises(ShapeError):
        bbob.make(3, 4)(np.zeros((2, 5)))


def test_seed_mode_default_and_positional_seed_unchanged():
    a, b, c = bbob.make(4, 3), bbob.make(4, 3, 0), bbob.make(4, 3, seed=0)
    assert a.seed == 0 and a.instance is None
    np.testing.assert_array_equal(a.x_opt, b.x_opt)
    np.testing.assert_array_equal(a.x_opt, c.x_opt)
    assert "seed=0" in repr(a) and "instance=7" in repr(bbob.make(4, 3, instance=7))


# -- COCO instances ---------------------------------------------------------------
COCO_DIMS = (2, 3, 5, 10, 20, 40)
COCO_INSTANCES = (1, 2, 3, 4, 5, 15, 71)


def _schrage_uniform(n, seed):
    """Scalar transcription of the BBOB-2009 legacy uniform generator (the spec)."""
    seed = max(abs(seed), 1)
    s, table = seed, [0] * 32
    for i in range(39, -1, -1):
        t = s // 127773
        s = 16807 * (s - t * 127773) - 2836 * t
        if s < 0:
            s += 2147483647
        if i < 32:
            table[i] = s
    last, out = table[0], []
    for _ in range(n):
        t = s // 127773
        s = 16807 * (s - t * 127773) - 2836 * t
        if s < 0:
            s += 2147483647
        j = last // 67108865
        last = table[j]
        table[j] = s
        out.append(last / 2.147483647e9 or 1e-99)
    return np.array(out)


@pytest.mark.parametrize("seed", [1, 3, 10001, 1010024, 710017, -5, 0])
def test_legacy_uniform_equals_scalar_schrage(seed):
    # the block-doubled vectorized LCG + shuffle table equals the sequential spec bit for bit
    n = 2 * 40 * 40 + 7
    np.testing.assert_array_equal(bbob_instances._legacy_uniform(n, seed), _schrage_uniform(n, seed))


def test_legacy_rotation_is_orthogonal_in_any_dimension():
    for d in (2, 7, 40, 64):
        R = bbob_instances._legacy_rotation(1000000 + 15 + 10000 * d, d)
        np.testing.assert_allclose(R.T @ R, np.eye(d), atol=1e-12)
    # beyond COCO's dimensions the same generator continues
    p = bbob.make(15, 64, instance=3)
    assert abs(float(p.value(p.x_opt)) - p.f_opt) < 1e-10


# values of cocoex 2.8.2, BareProblem("bbob", fid, 5, instance) at x = 0.9 * linspace(-4, 4, 5) + 0.1
_COCO_RECORDED = [
    (1, 1, 135.25285568), (3, 2, 2666.1491759291034), (7, 3, 2720.1133770394777),
    (12, 15, 69634291.2297951), (16, 4, -466.4309319443669), (21, 71, -22.29611394156271),
    (22, 5, 114.71687122799918), (24, 1, 185.01549045487764), (20, 2, 131660.38875556568),
    (5, 3, 194.638519200888), (9, 1, 61674.873200123366), (23, 1, 26.13783854740657),
]


def test_recorded_coco_values_without_cocoex():
    x = 0.9 * np.linspace(-4.0, 4.0, 5) + 0.1
    for fid, inst, ref in _COCO_RECORDED:
        got = float(bbob.make(fid, 5, instance=inst).value(x))
        assert got == pytest.approx(ref, rel=1e-12, abs=1e-12), (fid, inst)
    # the example in cocoex's BareProblem docstring: f1, 13-D, instance 1 at the origin
    assert float(bbob.make(1, 13, instance=1).value(np.zeros(13))) == pytest.approx(124.61122368000001, rel=1e-14)


def _coco_points(p, rng, n_rand=6):
    d = p.dim
    return np.concatenate([
        rng.uniform(-5, 5, (n_rand, d)),                                     # the BBOB domain
        p.x_opt + 10.0 ** rng.uniform(-7, -1, (4, 1)) * rng.standard_normal((4, d)),  # near the optimum
        rng.uniform(-7, 7, (2, d)),                                          # outside: penalties
        p.x_opt[None],
    ])


def _assert_equals_coco(suite, fid, dim, inst, n_rand=6, jit_compile=False):
    p = bbob.make(fid, dim, instance=inst, jit_compile=jit_compile)
    q = suite.get_problem_by_function_dimension_instance(fid, dim, inst)
    try:
        assert q.id == f"bbob_f{fid:03d}_i{inst:02d}_d{dim:02d}"
        X = _coco_points(p, np.random.default_rng([fid, dim, inst]), n_rand)
        ref = np.array([q(x) for x in X])
    finally:
        q.free()
    got = p.value(X).numpy()
    # rtol 1e-10 on f - f_opt; the floor is ~10 ulps of f_opt (COCO adds f_opt in float64 too)
    err = np.abs(got - ref)
    tol = 1e-10 * np.abs(ref - p.f_opt) + 1e-12 * (1.0 + abs(p.f_opt))
    assert np.all(err <= tol), (fid, dim, inst, err.max(), X[np.argmax(err - tol)])
    # f(x_opt) == f_opt (COCO's best value)
    assert abs(got[-1] - p.f_opt) <= 1e-12 * (1.0 + abs(p.f_opt)), (fid, dim, inst)
    assert abs(got[-1] - ref[-1]) <= 1e-12 * (1.0 + abs(p.f_opt)), (fid, dim, inst)


@pytest.fixture(scope="module")
def cocoex():
    return pytest.importorskip("cocoex")


@pytest.fixture(scope="module")
def coco_suite(cocoex):
    return cocoex.Suite("bbob", "instances: " + ",".join(map(str, COCO_INSTANCES)),
                        "dimensions: " + ",".join(map(str, COCO_DIMS)))


@pytest.mark.parametrize("fid", FIDS)
def test_coco_instances_match_cocoex(coco_suite, fid):
    # every dimension, two instances per dimension (cycling through 1-5, 15, 71);
    # one dimension per function (a different one for each) also through XLA
    for k, dim in enumerate(COCO_DIMS):
        for inst in (COCO_INSTANCES[(fid + k) % 7], COCO_INSTANCES[(fid + k + 3) % 7]):
            _assert_equals_coco(coco_suite, fid, dim, inst)
    dim = COCO_DIMS[fid % len(COCO_DIMS)]
    _assert_equals_coco(coco_suite, fid, dim, COCO_INSTANCES[fid % 7], jit_compile=True)


def test_coco_x_opt_and_f_opt_all_instances(cocoex):
    # instance data only: every function, dimension and instance of the grid
    for fid in FIDS:
        for dim in COCO_DIMS:
            for inst in COCO_INSTANCES:
                q = cocoex.BareProblem("bbob", fid, dim, inst)
                raw = bbob_instances._coco_instance(fid, dim, inst)
                np.testing.assert_allclose(raw["x_opt"], q.best_parameter(), rtol=0, atol=1e-12,
                                           err_msg=str((fid, dim, inst)))
                # COCO's best value is f(x_opt), which is f_opt up to rounding (f20: ~1e-15)
                assert raw["f_opt"] == pytest.approx(q.best_value(), rel=0, abs=1e-12), (fid, dim, inst)


@pytest.mark.slow
@pytest.mark.parametrize("fid", FIDS)
def test_coco_instances_match_cocoex_full_grid(coco_suite, fid):
    for dim in COCO_DIMS:
        for inst in COCO_INSTANCES:
            _assert_equals_coco(coco_suite, fid, dim, inst, n_rand=40)
            _assert_equals_coco(coco_suite, fid, dim, inst, n_rand=10, jit_compile=True)


def test_instances_share_one_trace():
    p = bbob.make(15, 6, instance=1)
    fn = p._fn
    p.value(np.zeros((8, 6)))
    n = fn.experimental_get_tracing_count()
    for inst in (2, 3, 4):
        bbob.make(15, 6, instance=inst).value(np.ones((8, 6)))
    bbob.make(15, 6, seed=5).value(np.ones((3, 6)))  # other instance family, other population size
    p.value(np.ones(6))
    assert bbob.make(15, 6, seed=5)._fn is fn
    assert fn.experimental_get_tracing_count() == n == 1


def test_instance_errors():
    with pytest.raises(ConfigError, match="not both"):
        bbob.make(3, 4, seed=1, instance=1)
    for bad in (0, -1, bbob.MAX_INSTANCE + 1):
        with pytest.raises(ConfigError, match="instance"):
            bbob.make(3, 4, instance=bad)
    for bad in (1.5, True, "2"):
        with pytest.raises(ConfigError, match="integer"):
            bbob.make(3, 4, instance=bad)
    with pytest.raises(ConfigError):
        bbob.make(3, 4, dtype="int32")
    p = get("problem", "bbob_f3")(dim=4, instance=2)
    assert p.instance == 2 and p.f_opt == bbob.make(3, 4, instance=2).f_opt
