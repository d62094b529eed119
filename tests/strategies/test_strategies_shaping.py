"""Fitness shaping and ES optimizers against small hand-computed examples and their formulas."""

import numpy as np
import pytest
import tensorflow as tf

from tfevo.core import ConfigError
from tfevo.strategies.optimizers import SGD, Adam, ClipUp, get_optimizer
from tfevo.strategies.shaping import (
    centered_rank, nes_utilities, ranks, utility_weights, weight_decay, z_score,
)


def test_ranks_and_centered_rank_hand_example():
    f = tf.constant([3.0, 1.0, np.nan, 2.0, -np.inf])
    np.testing.assert_array_equal(ranks(f).numpy(), [4, 2, 0, 3, 1])  # NaN (first) and -inf are worst
    # the two worst (NaN, -inf) tie and share the mean of ranks 0 and 1
    np.testing.assert_allclose(centered_rank(f).numpy(), [0.5, 0.0, -0.375, 0.25, -0.375])
    np.testing.assert_allclose(centered_rank(tf.constant([2.0, 7.0])).numpy(), [-0.5, 0.5])
    np.testing.assert_allclose(centered_rank(tf.constant([5.0])).numpy(), [0.0])
    assert abs(float(tf.reduce_sum(centered_rank(tf.random.normal([101]))))) < 1e-5
    # invariant to monotone transformations
    g = tf.random.normal([17], seed=1)
    np.testing.assert_array_equal(centered_rank(g).numpy(), centered_rank(tf.exp(3 * g)).numpy())


def test_z_score_hand_example():
    np.testing.assert_allclose(z_score(tf.constant([1.0, 2.0, 3.0])).numpy(), [-1.2247449, 0.0, 1.2247449],
                               rtol=1e-5)
    np.testing.assert_allclose(z_score(tf.constant([4.0, 4.0])).numpy(), [0.0, 0.0])
    z = z_score(tf.constant([1.0, np.nan, 3.0, -np.inf])).numpy()  # worst -> lowest finite value (1)
    expected = (np.array([1, 1, 3, 1.0]) - 1.5) / np.std([1, 1, 3, 1.0])
    np.testing.assert_allclose(z, expected, rtol=1e-5)
    big = z_score(tf.constant([3e38, -3e38, 0.0])).numpy()
    assert np.all(np.isfinite(big)) and big[0] > big[2] > big[1]


def test_weight_decay():
    x = tf.constant([[1.0, 2.0], [0.0, -3.0]])
    np.testing.assert_allclose(weight_decay(x, 0.5).numpy(), [-2.5, -4.5])
    np.testing.assert_allclose(weight_decay(tf.constant([2.0, 0.0]), 0.1).numpy(), -0.4, rtol=1e-6)


def test_nes_utilities_hand_example():
    # P = 4: log(3) - log(i) for i = 1, 2 (i = 3, 4 clip to 0)
    a, b = np.log(3.0), np.log(3.0) - np.log(2.0)
    expected = np.array([a, b, 0, 0]) / (a + b) - 0.25
    np.testing.assert_allclose(nes_utilities(4), expected, rtol=1e-6)
    assert abs(nes_utilities(17).sum()) < 1e-6
    u = utility_weights(tf.constant([0.0, 9.0, np.nan, 5.0])).numpy()
    np.testing.assert_allclose(u, expected[[2, 0, 3, 1]], rtol=1e-6)
    with pytest.raises(ConfigError):
        nes_utilities(0)


def test_sgd_momentum_formula():
    opt = SGD(learning_rate=0.1, momentum=0.9).build(2)
    g1, g2 = np.array([1.0, -2.0]), np.array([0.5, 0.5])
    s1 = opt.step(tf.constant(g1, tf.float32)).numpy()
    s2 = opt.step(tf.constant(g2, tf.float32)).numpy()
    np.testing.assert_allclose(s1, 0.1 * g1, rtol=1e-6)
    np.testing.assert_allclose(s2, 0.9 * 0.1 * g1 + 0.1 * g2, rtol=1e-6)


def test_adam_formula():
    opt = Adam(learning_rate=0.01, beta1=0.8, beta2=0.9, epsilon=1e-8).build(3)
    rng = np.random.default_rng(0)
    m = v = np.zeros(3)
    fn = tf.function(opt.step)  # also runs inside tf.function
    for t in range(1, 6):
        g = rng.normal(size=3)
        m = 0.8 * m + 0.2 * g
        v = 0.9 * v + 0.1 * g * g
        expected = 0.01 * np.sqrt(1 - 0.9**t) / (1 - 0.8**t) * m / (np.sqrt(v) + 1e-8)
        np.testing.assert_allclose(fn(tf.constant(g, tf.float32)).numpy(), expected, rtol=1e-4)
    assert int(opt.iterations.numpy()) == 5


def test_clipup_formula():
    opt = ClipUp(learning_rate=0.5, momentum=0.9).build(2)
    assert opt.max_speed == 1.0  # 2 * learning_rate
    s1 = opt.step(tf.constant([3.0, 4.0])).numpy()
    np.testing.assert_allclose(s1, [0.3, 0.4], rtol=1e-6)  # 0.5 * g / |g|
    s2 = opt.step(tf.constant([0.0, 10.0])).numpy()
    v = 0.9 * np.array([0.3, 0.4]) + 0.5 * np.array([0.0, 1.0])  # norm 0.96 < 1: not clipped
    np.testing.assert_allclose(s2, v, rtol=1e-6)
    s3 = opt.step(tf.constant([0.0, 1.0])).numpy()
    v = 0.9 * v + 0.5 * np.array([0.0, 1.0])
    v = v / np.linalg.norm(v) * 1.0  # clipped to max_speed
    np.testing.assert_allclose(s3, v, rtol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(s3), 1.0, rtol=1e-6)
    s4 = opt.step(tf.zeros([2])).numpy()  # zero gradient: velocity just decays
    np.testing.assert_allclose(s4, 0.9 * v, rtol=1e-6)


def test_optimizer_checkpoint_and_errors(tmp_path):
    a = Adam(0.1).build(2)
    a.step(tf.constant([1.0, 2.0]))
    path = tf.train.Checkpoint(opt=a).save(str(tmp_path / "o"))
    expected = a.step(tf.constant([0.5, -1.0])).numpy()
    b = Adam(0.1).build(2)
    tf.train.Checkpoint(opt=b).restore(path)
    np.testing.assert_array_equal(b.step(tf.constant([0.5, -1.0])).numpy(), expected)
    with pytest.raises(ConfigError, match="learning_rate"):
        SGD(0.0)
    with pytest.raises(ConfigError, match="momentum"):
        ClipUp(0.1, momentum=1.0)
    with pytest.raises(ConfigError, match="unknown optimizer"):
        get_optimizer("lion", 0.1, 2)
    assert isinstance(get_optimizer("ClipUp", 0.1, 2), ClipUp)


def test_fast_normal_distribution_and_determinism():
    from tfevo.strategies.shaping import _normal

    z = _normal([2001, 50], tf.constant([3, 4])).numpy()
    assert z.shape == (2001, 50) and np.all(np.isfinite(z))
    flat = z.ravel()
    assert abs(flat.mean()) < 0.01 and abs(flat.std() - 1.0) < 0.01
    assert abs(np.mean(flat**4) - 3.0) < 0.1  # Gaussian kurtosis
    assert abs(np.mean(flat > 1.96) - 0.025) < 0.003
    assert abs(np.corrcoef(z[:1000].ravel(), z[1000:2000].ravel())[0, 1]) < 0.02  # cos/sin halves independent
    np.testing.assert_array_equal(z, _normal([2001, 50], tf.constant([3, 4])).numpy())
    s = _normal([4, 3], tf.constant([1, 1]), scale=tf.constant([1.0, 2.0, 0.0])).numpy()
    np.testing.assert_allclose(s[:, 1] / 2.0, _normal([4, 3], tf.constant([1, 1])).numpy()[:, 1], rtol=1e-6)
    assert np.all(s[:, 2] == 0)
