"""ObservationNormalizer: running statistics equal numpy's; checkpoint round trip."""

import numpy as np
import pytest
import tensorflow as tf

from tfevo.core import ConfigError, ShapeError
from tfevo.rollout.normalization import ObservationNormalizer


def test_statistics_equal_numpy_over_uneven_batches():
    rng = np.random.default_rng(0)
    data = rng.normal(3.0, 5.0, size=(1000, 3, 2)) + rng.uniform(-100, 100, size=(1, 3, 2))
    norm = ObservationNormalizer((3, 2))
    for chunk in np.split(data, [1, 7, 200, 201, 650]):  # incl. a batch of one row
        norm.update(chunk)
    norm.update(np.zeros((0, 3, 2)))  # empty batches change nothing
    assert norm.count.numpy() == 1000
    np.testing.assert_allclose(norm.mean.numpy(), data.mean(0), rtol=1e-12)
    np.testing.assert_allclose(norm.variance.numpy(), data.var(0), rtol=1e-10)
    x = rng.normal(size=(4, 5, 3, 2))  # extra leading axes are fine
    y = norm(x).numpy()
    assert y.dtype == np.float32
    np.testing.assert_allclose(y, (x - data.mean(0)) / np.sqrt(data.var(0) + 1e-8), rtol=1e-5, atol=1e-5)


def test_merge_of_moments_and_clip():
    rng = np.random.default_rng(1)
    a, b = rng.normal(size=(50, 4)), rng.normal(2.0, 3.0, size=(70, 4))
    norm = ObservationNormalizer(4, clip=1.5)
    norm.update(a)
    norm.merge(len(b), b.mean(0), ((b - b.mean(0)) ** 2).sum(0))
    both = np.concatenate([a, b])
    np.testing.assert_allclose(norm.mean.numpy(), both.mean(0), rtol=1e-12)
    np.testing.assert_allclose(norm.variance.numpy(), both.var(0), rtol=1e-10)
    y = norm(100 * rng.normal(size=(10, 4))).numpy()
    assert y.max() == pytest.approx(1.5) and y.min() == pytest.approx(-1.5)


def test_checkpoint_round_trip(tmp_path):
    rng = np.random.default_rng(2)
    a = ObservationNormalizer((5,), clip=4.0)
    a.update(rng.normal(size=(30, 5)))
    path = tf.train.Checkpoint(norm=a).write(str(tmp_path / "n"))
    more = rng.normal(size=(20, 5))
    a.update(more)
    b = ObservationNormalizer((5,), clip=4.0)
    tf.train.Checkpoint(norm=b).read(path).assert_consumed()
    b.update(more)  # continuing from the restored state gives the same statistics
    for v in ("count", "mean", "m2"):
        np.testing.assert_array_equal(getattr(a, v).numpy(), getattr(b, v).numpy())


def test_in_graph_normalize_and_errors():
    norm = ObservationNormalizer((2,))
    norm.update([[1.0, 2.0], [3.0, 6.0]])
    f = tf.function(lambda x: norm(x))
    np.testing.assert_allclose(f(tf.constant([[2.0, 4.0]])).numpy(), [[0.0, 0.0]], atol=1e-6)
    with pytest.raises(ShapeError, match=r"end with shape \(2,\)"):
        norm.update(np.zeros((3, 3)))
    with pytest.raises(ConfigError):
        ObservationNormalizer((0,))
    with pytest.raises(ConfigError):
        ObservationNormalizer((2,), clip=-1.0)
