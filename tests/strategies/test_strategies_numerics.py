"""One tell() of the ES strategies against NumPy references of their papers, in float64.

The references are written from the papers (Salimans et al. 2017, Schaul et
al. 2011, Wierstra et al. 2014, Sehnke et al. 2010); a float64 strategy must
agree with them to float64 rounding, not to float32 rounding.
"""

import numpy as np
import pytest
from scipy.linalg import expm

import tfevo.strategies as S


def _centered_ranks(f):
    r = np.empty(len(f))
    r[np.argsort(f)] = np.arange(len(f))
    return r / (len(f) - 1) - 0.5


def _utilities_by_member(f):
    p = len(f)
    u = np.maximum(0.0, np.log(p / 2 + 1) - np.log(np.arange(1, p + 1)))
    u = u / u.sum() - 1.0 / p  # best first
    out = np.empty(p)
    out[np.argsort(-f)] = u
    return out


def _fitness(x):
    return -np.sum((x - 0.3) ** 2, axis=1)  # no ties


def _assert_f64_close(actual, expected):
    np.testing.assert_allclose(np.asarray(actual, np.float64), expected, rtol=1e-12, atol=1e-14)


def test_openes_float64_step_is_float64_accurate():
    c0 = np.linspace(-1.0, 1.0, 7)
    es = S.OpenES(7, 10, sigma=0.3, learning_rate=0.05, optimizer="sgd", weight_decay=0.005,
                  init_params=c0, seed=1, dtype="float64")
    x = es.ask().numpy()
    f = _fitness(x)
    g = _centered_ranks(f) @ ((x - c0) / 0.3) / (10 * 0.3) - 0.005 * c0
    es.tell(x, f)
    _assert_f64_close(es.mean.numpy(), c0 + 0.05 * g)


@pytest.mark.parametrize("mirrored", [False, True])
def test_snes_float64_step_is_float64_accurate(mirrored):
    d, p = 6, 10
    s0 = np.linspace(0.5, 2.0, d)
    es = S.SNES(d, p, sigma=s0, mirrored=mirrored, init_params=np.ones(d), seed=2, dtype="float64")
    x = es.ask().numpy()
    f = _fitness(x)
    z, u = (x - 1.0) / s0, _utilities_by_member(f)
    eta_sigma = (3 + np.log(d)) / (5 * np.sqrt(d))
    es.tell(x, f)
    _assert_f64_close(es.mean.numpy(), 1.0 + s0 * (u @ z))
    _assert_f64_close(es.sigma.numpy(), s0 * np.exp(eta_sigma / 2 * (u @ (z * z - 1))))


def test_xnes_float64_step_is_float64_accurate():
    d, p = 4, 8
    es = S.XNES(d, p, sigma=0.7, init_params=np.full(d, 0.5), seed=3, dtype="float64")
    x = es.ask().numpy()
    f = _fitness(x)
    z, u = (x - 0.5) / 0.7, _utilities_by_member(f)
    eta = 3 * (3 + np.log(d)) / (5 * d * np.sqrt(d))
    gm = sum(u[k] * (np.outer(z[k], z[k]) - np.eye(d)) for k in range(p))
    gs = np.trace(gm) / d
    es.tell(x, f)
    _assert_f64_close(es.mean.numpy(), 0.5 + 0.7 * (u @ z))
    _assert_f64_close(es.sigma.numpy(), 0.7 * np.exp(eta / 2 * gs))
    np.testing.assert_allclose(es.B.numpy(), expm(eta / 2 * (gm - gs * np.eye(d))), rtol=1e-11, atol=1e-13)


def test_pgpe_float64_step_is_float64_accurate():
    d, p = 5, 8
    s0 = np.linspace(0.2, 1.0, d)
    es = S.PGPE(d, p, learning_rate=0.1, sigma=s0, sigma_learning_rate=0.3, optimizer="sgd",
                init_params=np.full(d, -0.2), seed=4, dtype="float64")
    x = es.ask().numpy()
    f = _fitness(x)
    w, n = _centered_ranks(f), p // 2
    eps, fp, fm = x[:n] + 0.2, w[:n], w[n:]
    g_mu = np.mean(eps * ((fp - fm) / 2)[:, None], axis=0)
    g_s = np.mean(((fp + fm) / 2 - w.mean())[:, None] * (eps**2 - s0**2) / s0, axis=0)
    es.tell(x, f)
    _assert_f64_close(es.mean.numpy(), -0.2 + 0.1 * g_mu)
    _assert_f64_close(es.sigma.numpy(), np.clip(s0 + 0.3 * g_s, 0.8 * s0, 1.2 * s0))


# -- ties: equal fitness must give equal weights, whatever the members' order ------------


def test_centered_rank_and_utilities_average_tied_ranks():
    from scipy.stats import rankdata

    from tfevo.strategies.shaping import centered_rank, nes_utilities, utility_weights

    f = np.array([3.0, 1.0, np.nan, 2.0, 1.0, np.inf, 3.0, 3.0, -np.inf, 0.5])
    finite = np.where(np.isfinite(f), f, -np.inf)  # every non-finite value is the worst
    avg = rankdata(finite) - 1.0  # 0 = worst, ties share the mean rank
    np.testing.assert_allclose(centered_rank(f, "float64").numpy(), avg / 9 - 0.5, rtol=0, atol=1e-15)
    table = nes_utilities(10, "float64")[::-1]  # worst first
    lo = (finite[None, :] < finite[:, None]).sum(1)  # a member's block of ranks: [lo, hi)
    hi = (finite[None, :] <= finite[:, None]).sum(1)
    expected = [table[a:b].mean() for a, b in zip(lo, hi)]
    np.testing.assert_allclose(utility_weights(f, nes_utilities(10, "float64")).numpy(), expected, atol=1e-15)
    # without ties: each member its own entry, exactly as before
    g = np.array([0.3, -1.0, 2.0, 0.1])
    np.testing.assert_array_equal(centered_rank(g).numpy(), np.float32([2, 0, 3, 1]) / np.float32(3) - np.float32(0.5))


@pytest.mark.parametrize("name", ["openai_es", "pgpe", "snes", "xnes"])
def test_a_generation_of_equal_fitness_moves_nothing(name):
    # mirrored pairs with equal fitness carry no information; ranking them by position
    # gave the '+' members lower weights than their '-' twins: a full optimizer step
    # along -sum(eps+) on a plateau (an RL task whose episodes all return 0)
    make = {
        "openai_es": lambda: S.OpenES(8, 10, sigma=0.1, learning_rate=0.05, weight_decay=0.0, dtype="float64"),
        "pgpe": lambda: S.PGPE(8, 10, sigma=0.1, learning_rate=0.05, dtype="float64"),
        "snes": lambda: S.SNES(8, 10, sigma=0.1, dtype="float64"),
        "xnes": lambda: S.XNES(8, 10, sigma=0.1, dtype="float64"),
    }[name]
    es = make()
    sigma0 = np.array(es.sigma.numpy())
    for _ in range(3):
        es.tell(es.ask(), np.zeros(10))
    assert np.max(np.abs(es.mean.numpy())) < 1e-12
    np.testing.assert_allclose(es.sigma.numpy(), sigma0, rtol=1e-12)


def test_weight_decay_keeps_a_float64_population_float64():
    import tensorflow as tf

    from tfevo.strategies.shaping import weight_decay

    x = np.array([[1.0 + 1e-12, 2.0], [0.0, -3.0]])
    expected = -0.005 * np.sum(x * x, axis=1)
    for given in (x, tf.constant(x)):  # a float64 strategy's ask() output, or NumPy
        out = weight_decay(given, 0.005)
        assert out.dtype == tf.float64
        np.testing.assert_array_equal(out.numpy(), expected)
    assert weight_decay(tf.constant(x, tf.float32), 0.005).dtype == tf.float32


def test_tie_averaged_shaping_of_an_empty_population_is_empty():
    # ranks() and the position-ranked shaping returned [] for P = 0; the tie blocks raised
    # an UnsortedSegmentSum InvalidArgumentError (one block start for no member)
    import tensorflow as tf

    from tfevo.strategies.shaping import centered_rank, utility_weights

    empty = np.zeros([0], np.float32)
    assert centered_rank(empty).shape == [0] and centered_rank(empty, "float64").dtype == tf.float64
    assert utility_weights(empty, empty).shape == [0]
    dyn = tf.function(centered_rank, input_signature=[tf.TensorSpec([None], tf.float32)], jit_compile=True)
    assert dyn(empty).shape == [0]
    np.testing.assert_array_equal(dyn(np.float32([2.0, 2.0, 1.0])).numpy(), [0.25, 0.25, -0.5])
