"""``dtype`` end to end for every registered flat-vector algorithm: state, ask, tell, best."""

import numpy as np
import pytest
import tensorflow as tf

from tfevo import registry
from tfevo.core import ConfigError


def _flat_vector_algorithms():
    names = []
    for name in registry.names("strategy"):
        cls = registry.get("strategy", name)
        # SeedGA's population is int32 seed lists, not vectors (its dtype: test_seed_ga_dtype_end_to_end)
        if cls.__module__.startswith("tfevo.strategies.") and name != "seed_ga":
            names.append(name)
    return names


FLAT = _flat_vector_algorithms()


def test_the_registry_lists_the_flat_vector_algorithms():
    assert {"cma_es", "sep_cma_es", "openai_es", "snes", "xnes", "pgpe", "ars", "ga", "de", "pso",
            "random_search", "lm_ma_es", "ipop_cma_es", "bipop_cma_es", "cholesky_cma_es"} <= set(FLAT)


@pytest.mark.parametrize("name", FLAT)
def test_float64_end_to_end(name):
    cls = registry.get("strategy", name)
    es = cls(num_dims=3, seed=0, dtype="float64")
    assert es.dtype == tf.float64
    for _ in range(3):
        x = es.ask()
        assert x.dtype == tf.float64 and x.shape == (es.popsize, 3)
        es.tell(x, -tf.reduce_sum(tf.square(x - 1.0 / 3.0), axis=1))
    params, fit = es.best
    assert params.dtype == tf.float64 and fit.dtype == tf.float64
    assert es.mean.dtype == tf.float64
    assert np.all(np.isfinite(params.numpy())) and np.isfinite(float(fit))
    # every variable holding parameters is float64 (no float32 state left behind)
    float_vars = [v for v in es.variables if v.dtype.is_floating and v.shape.rank and v.shape[-1] == 3]
    assert float_vars and all(v.dtype == tf.float64 for v in float_vars), [
        (v.name, v.dtype.name) for v in float_vars if v.dtype != tf.float64]


@pytest.mark.parametrize("name", FLAT)
def test_float32_end_to_end(name):
    cls = registry.get("strategy", name)
    es = cls(num_dims=3, seed=0, dtype="float32")
    x = es.ask()
    assert x.dtype == tf.float32
    es.tell(tf.cast(x, tf.float64), -tf.reduce_sum(tf.square(x), axis=1))  # other float dtypes are cast
    assert es.best[0].dtype == tf.float32


@pytest.mark.parametrize("name", FLAT)
@pytest.mark.parametrize("bad", ["float16", "int32", "double-ish", 3])
def test_invalid_dtype_is_a_config_error_naming_the_field(name, bad):
    cls = registry.get("strategy", name)
    with pytest.raises(ConfigError, match="dtype"):
        cls(num_dims=3, seed=0, dtype=bad)


@pytest.mark.parametrize("name", ["cma_es", "sep_cma_es"])
def test_float64_fitness_resolves_differences_below_float32_spacing(name):
    """An objective whose optimum value is 1000 (float32 spacing there: 6e-5) is still
    minimized to 1e-10 by a float64 algorithm: fitness is taken and ranked in float64."""
    es = registry.get("strategy", name)(num_dims=4, seed=1, sigma=0.5, init_params=np.full(4, 0.7),
                                        dtype="float64")
    target = np.array([0.1, -0.2, 0.3, 0.05])
    for _ in range(400):
        x = es.ask()
        es.tell(x, -(1000.0 + tf.reduce_sum(tf.square(x - target), axis=1)))
        if es.stop_reasons:
            break
    params, fit = es.best
    assert fit.dtype == tf.float64
    assert -float(fit) - 1000.0 < 1e-10, -float(fit) - 1000.0
    assert np.max(np.abs(params.numpy() - target)) < 1e-5


def test_seed_ga_dtype_end_to_end():
    """SeedGA's genomes stay int32 seed lists; dtype is that of everything decoded from them, of the fitness
    it takes and of its statistics.  float64 parameters are the seed formula in float64 exactly: the cached
    fast path equals a from-scratch rebuild and the formula written out with TensorFlow's float64 normals."""
    from tfevo.strategies import SeedGA

    for bad in ("float16", 3):
        with pytest.raises(ConfigError, match="dtype"):
            SeedGA(num_dims=5, popsize=8, dtype=bad)
    ga = SeedGA(num_dims=5, popsize=8, truncation=3, sigma=0.1, init_sigma=0.5, seed=2, dtype="float64")
    assert ga.dtype == tf.float64
    target = np.linspace(-1, 1, 5)
    for _ in range(4):
        g = ga.ask()
        assert g.dtype == tf.int32
        x = ga.decode(g)
        assert x.dtype == tf.float64
        ga.tell(g, -tf.reduce_sum(tf.square(x - target), axis=1))
    params, fit = ga.best
    assert params.dtype == tf.float64 and fit.dtype == tf.float64 and ga.mean.dtype == tf.float64
    assert all(v.dtype in (tf.float64, tf.int32, tf.int64) for v in ga.variables)
    g = ga.ask()
    cached = ga.decode(g).numpy()
    fresh = SeedGA(num_dims=5, popsize=8, truncation=3, sigma=0.1, init_sigma=0.5, seed=2, dtype="float64")
    np.testing.assert_array_equal(fresh.decode(g).numpy(), cached)  # no cache: every genome rebuilt
    for row, genome in zip(cached, g.numpy()):
        n = genome[0]
        want = 0.5 * tf.random.stateless_normal([5], seed=[genome[1], 0], dtype=tf.float64)
        for s in genome[2:n + 1]:
            want = want + 0.1 * tf.random.stateless_normal([5], seed=[s, 0x5EED], dtype=tf.float64)
        np.testing.assert_array_equal(row, want.numpy())
    # float32 stays the default
    assert SeedGA(num_dims=5, popsize=8).decode(g).dtype == tf.float32
