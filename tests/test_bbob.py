"""Tests of tfevo.problems.bbob (24 noiseless BBOB functions)."""

import math

import numpy as np
import pytest
import tensorflow as tf

from tfevo.core import ConfigError, ShapeError
from tfevo.problems import bbob
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
