import numpy as np
import pytest
import tensorflow as tf

from tfevo.core import (
    Algorithm, ConfigError, SeedStream, ShapeError, check_fitness, sanitize_fitness, worst_to_finite,
)


def test_seed_stream_reproducible_and_checkpointed(tmp_path):
    a, b = SeedStream(3), SeedStream(3)
    xa = [tf.random.stateless_normal([4], seed=a.next()).numpy() for _ in range(3)]
    xb = [tf.random.stateless_normal([4], seed=b.next()).numpy() for _ in range(3)]
    np.testing.assert_array_equal(xa, xb)
    assert not np.allclose(xa[0], xa[1])
    ckpt = tf.train.Checkpoint(s=a)
    path = ckpt.save(str(tmp_path / "c"))
    after = tf.random.stateless_normal([4], seed=a.next()).numpy()
    c = SeedStream(99)
    tf.train.Checkpoint(s=c).restore(path)
    np.testing.assert_array_equal(tf.random.stateless_normal([4], seed=c.next()).numpy(), after)


def test_bad_seed():
    with pytest.raises(ConfigError, match="seed"):
        SeedStream(-1)
    for bad in (1.5, "1", None, True, 2**31, np.float32(0.25)):  # 1.5 used to run silently as seed 1
        with pytest.raises(ConfigError, match=r"seed must be an integer in \[0, 2\*\*31\)"):
            SeedStream(bad)
    for ok in (3, np.int64(3), 3.0):
        assert SeedStream(ok).next().numpy().tolist() == SeedStream(3).next().numpy().tolist()


def test_fitness_sanitizing():
    f = tf.constant([1.0, np.nan, -np.inf, np.inf, -2.0])
    s = sanitize_fitness(f).numpy()
    assert s[1] == -np.inf and s[2] == -np.inf and s[3] == -np.inf  # +inf is a failure too
    w = worst_to_finite(f).numpy()
    assert np.all(np.isfinite(w)) and w[1] == -2.0
    assert np.all(worst_to_finite(tf.constant([np.nan, np.nan])).numpy() == 0)


def test_check_fitness_shape_error():
    with pytest.raises(ShapeError, match=r"shape \[4\]"):
        check_fitness(np.zeros(3), 4)
    with pytest.raises(ShapeError, match="float"):
        check_fitness(tf.constant(["a"] * 4), 4)


class _Mean(Algorithm):
    def __init__(self, **kw):
        super().__init__(**kw)
        self.m = tf.Variable(tf.zeros([self.num_dims]))

    def _ask(self):
        return self.m + tf.random.stateless_normal([self.popsize, self.num_dims], seed=self.seeds.next())

    def _tell(self, x, fitness):
        self.m.assign(x[tf.argmax(fitness)])


def test_algorithm_base_traces_once_and_validates():
    algo = _Mean(num_dims=3, popsize=5, seed=0)
    for _ in range(4):
        x = algo.ask()
        algo.tell(x, -tf.reduce_sum(x**2, 1))
    assert algo.traces == {"ask": 1, "tell": 1}
    with pytest.raises(ShapeError, match="population"):
        algo.tell(tf.zeros([4, 3]), tf.zeros([5]))
    assert int(algo.generation.numpy()) == 4


def test_import_parts_fails_loudly_on_a_missing_module():
    """A misspelt module in a subpackage's list is an import error, not a silently missing part."""
    from tfevo._lazy import import_parts

    ns = {}
    with pytest.raises(ModuleNotFoundError, match="tfevo.strategies.no_such_strategy"):
        import_parts("tfevo.strategies", ("open_es", "no_such_strategy"), ns)
    assert "OpenES" in ns  # the parts before it were imported


class Toy(Algorithm):
    def __init__(self, num_dims, popsize=4, rate=0.1, seed=0):
        super().__init__(num_dims, popsize, seed=seed)
        self.rate = rate


class _Hidden(Toy):
    def __init__(self, *args, **kwargs):  # forwards to Toy
        super().__init__(*args, **kwargs)


class PublicHidden(_Hidden):
    pass


class Popping(Algorithm):
    def __init__(self, **kw):  # consumes its own key before forwarding
        self.extra = kw.pop("extra", None)
        super().__init__(**kw)


def test_constructor_argument_errors_name_the_public_class():
    with pytest.raises(ConfigError, match=r"^Toy: unknown argument\(s\) 'rat'; did you mean 'rate'.* "
                                          r"Toy accepts: num_dims, popsize, rate, seed"):
        Toy(3, rat=0.2)
    with pytest.raises(ConfigError, match=r"^Toy: missing a required argument: 'num_dims'"):
        Toy(popsize=3)
    # through a private base class that forwards **kwargs: the error names the class built
    with pytest.raises(ConfigError, match=r"^PublicHidden: unknown argument\(s\) 'sead'; did you mean 'seed'"):
        PublicHidden(3, sead=1)
    assert PublicHidden.accepted_arguments() == ["num_dims", "popsize", "rate", "seed"]
    assert Popping(num_dims=2, popsize=3, extra=1).extra == 1
