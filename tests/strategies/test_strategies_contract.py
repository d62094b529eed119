"""The ask/tell contract, checked for every registered flat-vector algorithm.

The algorithms come from the registry (every ``"strategy"`` that is a
:class:`tfevo.core.Algorithm`), not from a hand-written list, so a newly
registered algorithm is covered without touching this file.  Each one runs a
few generations at D = 6, P = 8 with failed evaluations (NaN, +inf, -inf, a
generation where every member failed) and must:

* keep every state variable free of NaN and +inf, and ``best`` on the best
  *finite* fitness told;
* warn exactly once per run (:class:`NonFiniteFitnessWarning`) and count every
  non-finite member;
* repeat the run bit for bit with the same seed, and continue a restored
  checkpoint exactly as the uninterrupted run;
* trace ``ask`` and ``tell`` once for the fixed shape, and reject wrong shapes;
* have ``mean``, ``stop_reasons``, a ``popsize`` default and a ``ConfigError``
  naming the class for a wrong keyword;
* refuse (``AskTellError``, state unchanged) a population other than the last
  asked where the update uses what ``ask`` stored;
* do all of it also with the private-API fast paths off (as on a GPU machine,
  ``tfevo._tf_private.fast_paths(False)``), with the same numbers bit for bit.
"""

import os
import re
import warnings

import numpy as np
import pytest
import tensorflow as tf

from tfevo import _tf_private, registry
from tfevo.core import Algorithm, AskTellError, ConfigError, NonFiniteFitnessWarning, ShapeError

D, P, GENS = 6, 8, 6

#: optional settings that make a short run exercise more of an algorithm
#: (an algorithm without an entry runs with its defaults)
EXTRA = {
    "openai_es": {"sigma_decay": 0.9},
    "random_search": {"adapt_center": True},
    "de": {"bounds": (-2.0, 2.0)},
}


def _flat_algorithms() -> dict:
    names = registry.names("strategy")
    out = {}
    for n in names:
        cls = registry.get("strategy", n)
        if isinstance(cls, type) and issubclass(cls, Algorithm):
            out[n] = cls
    return out


ALGOS = _flat_algorithms()


def _make(name, seed):
    return ALGOS[name](num_dims=D, popsize=P, seed=seed, **EXTRA.get(name, {}))


def _params(algo, x):
    """Parameter vectors of an asked population (seed-list genomes are decoded)."""
    return algo.decode(x) if x.dtype == tf.int32 else tf.convert_to_tensor(x)


def _fitness(algo, x, gen):
    f = -tf.reduce_sum(tf.square(_params(algo, x) - 0.5), axis=1).numpy().astype(np.float32)
    p = f.shape[0]
    if gen == 1:  # failed evaluations of every kind
        f[1], f[2], f[p - 1] = np.nan, -np.inf, np.inf
    if gen == 2:
        f[0] = np.inf  # +inf in the first row: still the worst
    if gen == 3:
        f[:] = np.nan  # everything failed
    return f


def _state(algo):
    return {f"{i}:{v.name}": v.numpy() for i, v in enumerate(algo.variables)}


def _check_state(name, algo, gen):
    for k, v in _state(algo).items():
        if v.dtype.kind != "f" or "x_last" in k:  # x_last: NaN until the first ask, by design
            continue
        assert not np.any(np.isnan(v)), f"{name}: {k} has NaN after generation {gen}"
        assert not np.any(v == np.inf), f"{name}: {k} has +inf after generation {gen}"
        if "fitness" not in k and "_f_hist" not in k:  # fitness records may hold -inf (worst, or none yet)
            assert np.all(np.isfinite(v)), f"{name}: {k} not finite after generation {gen}"


def test_registry_lists_every_flat_algorithm():
    # the 16 flat-vector algorithms of the package, at least (more may be registered)
    expected = {"openai_es", "pgpe", "ars", "snes", "xnes", "ga", "random_search", "de", "pso", "cma_es",
                "cholesky_cma_es", "sep_cma_es", "lm_ma_es", "ipop_cma_es", "bipop_cma_es", "seed_ga"}
    assert expected <= set(ALGOS)


@pytest.fixture(params=[True, False], ids=["fast_paths", "no_fast_paths"])
def fast_paths(request):
    with _tf_private.fast_paths(request.param):
        yield request.param


_ASKS: dict = {}  # name -> the asks of the run with the other fast-path setting


@pytest.mark.parametrize("name", sorted(ALGOS))
def test_contract(name, tmp_path, fast_paths):
    a = _make(name, 0)
    initial = _state(a)
    ckpt = tf.train.Checkpoint(algo=a)
    start = ckpt.save(str(tmp_path / "start"))
    asks, best_told, bad_told = [], -np.inf, 0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for gen in range(GENS):
            x = a.ask()
            asks.append(x.numpy())
            if gen == 4:  # saved between ask and tell: the restored run must make the same tell
                mid = ckpt.save(str(tmp_path / "mid"))
            f = _fitness(a, x, gen)
            mean_before = a.mean.numpy()
            a.tell(x, f)
            if gen == 3:  # every member failed: the search stays where it was
                np.testing.assert_array_equal(a.mean.numpy(), mean_before, err_msg=f"{name}: moved on no information")
            finite = np.isfinite(f)
            bad_told += int((~finite).sum())
            if finite.any():
                best_told = max(best_told, float(f[finite].max()))
            _check_state(name, a, gen)
            # the Deep GA's (SeedGA, GaussianGA) `best` is its elite by mean fitness; its highest single
            # fitness is `best_single`
            params, best_f = a.best_single if hasattr(a, "best_single") else a.best
            assert float(best_f) == best_told, f"{name}: best fitness {float(best_f)} != best finite told"
            assert np.all(np.isfinite(params.numpy())) and np.all(np.isfinite(a.best[0].numpy()))
        asks.append(a.ask().numpy())
    final = _state(a)
    if not fast_paths:  # ask and tell made TensorFlow's ordinary calls
        assert all(getattr(c, "_flat", None) is None for c in (a._ask_call, a._tell_call) if c is not None)
    other = _ASKS.setdefault(name, asks)
    for gen, (x0, x1) in enumerate(zip(other, asks)):  # the same numbers with and without the fast paths
        np.testing.assert_array_equal(x0, x1, err_msg=f"{name}: generation {gen}, fast paths on vs off")
    nonfinite = [w for w in caught if issubclass(w.category, NonFiniteFitnessWarning)]
    assert len(nonfinite) == 1, f"{name}: {len(nonfinite)} non-finite warnings in one run"
    assert str(nonfinite[0].message).startswith(f"{ALGOS[name].__name__}: 3 of {P} members had non-finite fitness")
    assert a.num_nonfinite == bad_told
    assert all(v == 1 for v in a.traces.values()), a.traces  # (an eager-kernel tell traces nothing)
    assert all(np.all(np.isfinite(x)) for x in asks)
    assert not np.array_equal(asks[0], asks[-1])
    m = a.mean.numpy()
    assert m.shape == (D,) and np.all(np.isfinite(m))
    assert isinstance(a.stop_reasons, list)

    # same seed => the same initial state, bit for bit (and the run below repeats it)
    for (k, v0), v1 in zip(initial.items(), _state(_make(name, 0)).values()):
        np.testing.assert_array_equal(v0, v1, err_msg=f"{name}: {k}")
    # an object built with another seed, restored to the start, repeats the whole run bit for bit
    c = _make(name, 123)
    restore = tf.train.Checkpoint(algo=c)
    restore.restore(start).assert_existing_objects_matched()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NonFiniteFitnessWarning)
        for gen in range(GENS):
            x = c.ask()
            np.testing.assert_array_equal(x.numpy(), asks[gen], err_msg=f"{name}: generation {gen}")
            c.tell(x, _fitness(c, x, gen))
        np.testing.assert_array_equal(c.ask().numpy(), asks[GENS])
        for (k, va), vc in zip(final.items(), _state(c).values()):
            np.testing.assert_array_equal(va, vc, err_msg=f"{name}: {k}")
        # restored between an ask and its tell: continues exactly as the uninterrupted run
        restore.restore(mid).assert_existing_objects_matched()
        for gen in (4, 5):
            x = tf.constant(asks[gen])
            c.tell(x, _fitness(c, x, gen))
            np.testing.assert_array_equal(c.ask().numpy(), asks[gen + 1])
    for (k, va), vc in zip(final.items(), _state(c).values()):
        np.testing.assert_array_equal(va, vc, err_msg=f"{name}: {k}")

    # wrong shapes are rejected before any compiled call
    x = asks[-1]
    with pytest.raises(ShapeError, match="population|genomes"):
        a.tell(np.zeros([x.shape[0], x.shape[1] + 1], x.dtype), np.zeros([P], np.float32))
    with pytest.raises(ShapeError, match="fitness"):
        a.tell(x, np.zeros([P + 1], np.float32))
    assert all(v == 1 for v in a.traces.values()), a.traces

    # where the update uses what ask stored, tell refuses any other population and changes nothing
    if ALGOS[name].tell_needs_last_ask:
        x = a.ask()
        before = _state(a)
        other = x.numpy().copy()
        other[[0, 1]] = other[[1, 0]]  # the same rows in another order
        with pytest.raises(AskTellError, match=ALGOS[name].__name__):
            a.tell(other, _fitness(a, x, 0))
        for (k, v0), v1 in zip(before.items(), _state(a).values()):
            np.testing.assert_array_equal(v0, v1, err_msg=f"{name}: {k} changed by a refused tell")
        a.tell(x, _fitness(a, x, 0))  # the asked population is accepted
        assert int(a.generation.numpy()) == GENS + 1
        # once: its samples are spent (pycma refuses a second tell per iteration too)
        before = _state(a)
        with pytest.raises(AskTellError, match="told already"):
            a.tell(x, _fitness(a, x, 0))
        for (k, v0), v1 in zip(before.items(), _state(a).values()):
            np.testing.assert_array_equal(v0, v1, err_msg=f"{name}: {k} changed by a second tell")
        assert all(v == 1 for v in a.traces.values()), a.traces

    # fitness as a Python list, float64 NumPy or a tf tensor is taken; [P, 1] is a ShapeError naming the shape
    for form in (list, lambda f: f.astype(np.float64), tf.constant):
        x = a.ask()
        a.tell(x, form(_fitness(a, x, 0)))
    with pytest.raises(ShapeError, match=rf"fitness must have shape \[{P}\].*got \[{P}, 1\]"):
        a.tell(a.ask(), _fitness(a, x, 0)[:, None])
    assert all(v == 1 for v in a.traces.values()), a.traces


def test_tell_checks_cover_the_algorithms_that_store_samples():
    # (OpenAI-ES, PGPE, ARS and SNES keep the noise ask drew: KeptNoise; PGPE and ARS also pair rows k, k + P/2)
    assert {"xnes", "ga", "seed_ga", "openai_es", "pgpe", "ars", "snes"} <= {
        n for n, c in ALGOS.items() if c.tell_needs_last_ask}
    from tfevo.strategies.shaping import KeptNoise

    assert {n for n, c in ALGOS.items() if issubclass(c, KeptNoise)} | {"xnes"} == set(KEEP_SAMPLES)


#: the algorithms whose tell uses the standard-normal samples their ask drew (not recovered from x):
#: XNES and every KeptNoise strategy (checked in test_tell_checks_cover_the_algorithms_that_store_samples)
KEEP_SAMPLES = ["ars", "openai_es", "pgpe", "snes", "xnes"]
#: arguments that make the step independent of where the centre is (OpenAI-ES's weight decay pulls to 0)
#: and far above float32's resolution at 1e4 (the NES steps are learning_rate * sigma * ...)
FAR_EXTRA = {"openai_es": {"weight_decay": 0.0}, "snes": {"learning_rate": 1e3}, "xnes": {"learning_rate": 1e3}}


@pytest.mark.parametrize("name", KEEP_SAMPLES)
def test_float32_step_far_from_the_origin(name):
    # Same seed, same fitness per row, centre at 0 and at 1e4 with sigma = 1e-3 (float32 ulp there: 1e-3):
    # the samples drawn do not depend on the centre, so the first step must be the same number, and the
    # centre at 1e4 must be exactly float32(1e4 + step at 0).  Recovering the samples as (x - centre) / sigma
    # (as before) kept about one bit of each there: steps off by up to their own size.
    far = np.float32(1e4)
    a = ALGOS[name](num_dims=D, popsize=P, seed=3, sigma=1e-3, **FAR_EXTRA.get(name, {}))
    start = [v.numpy() for v in a.variables]
    runs = []
    for c in (np.float32(0.0), far):  # one object (traced once): back to the start, centre moved to c
        for v, value in zip(a.variables, start):
            v.assign(value)
        a.center.assign(np.full(D, c, np.float32))
        x = a.ask()
        a.tell(x, np.linspace(-1.0, 1.0, P, dtype=np.float32))
        runs.append(a.mean.numpy())
    near, at_far = runs
    assert np.max(np.abs(near)) > 10 * np.spacing(far), f"{name}: the step is below float32 resolution at 1e4"
    np.testing.assert_array_equal(at_far, (far + near).astype(np.float32), err_msg=name)


@pytest.mark.parametrize("name", sorted(ALGOS))
def test_constructor_contract(name):
    cls = ALGOS[name]
    # a popsize default for every algorithm
    a = cls(num_dims=D)
    assert a.popsize >= 2
    # a wrong keyword: ConfigError naming the public class, what it accepts and the closest match
    with pytest.raises(ConfigError, match=rf"^{cls.__name__}: .*'sed'.*did you mean 'seed'.* accepts: .*num_dims"):
        cls(num_dims=D, sed=1)
    with pytest.raises(ConfigError, match=rf"^{cls.__name__}: "):
        cls(num_dims=D, no_such_argument=1)


#: names replaced by the one vocabulary (init_params, sigma, learning_rate)
OLD_NAMES = {"mean_init", "init_mean", "x0", "sigma_init", "noise_std", "step_size", "center_learning_rate",
             "lr_mean", "lr_sigma", "sigma_lr", "lr_B"}


@pytest.mark.parametrize("name", sorted(ALGOS))
def test_sizes_and_seeds(name):
    cls = ALGOS[name]
    # a size that is not an integer is refused by name (popsize 8.5 or "8" ran with 8, num_dims 2.5 with 2)
    for field, bad in (("popsize", 8.5), ("popsize", "8"), ("num_dims", 2.5), ("popsize", 0), ("num_dims", 0)):
        with pytest.raises(ConfigError, match=rf"^{field} must be an integer >= 1, got {bad!r}"):
            cls(**{"num_dims": D, "popsize": P, field: bad})
    # seeds: an integer in [0, 2**31) (NumPy's too) everywhere; anything else is refused by name
    for bad in (-1, 2**31, 2**40, 1.5, "1", True):
        with pytest.raises(ConfigError, match="^seed must be an integer in"):
            cls(num_dims=D, popsize=P, seed=bad)
    # the smallest populations and D = 1: refused with an error that starts with the field (the config
    # layer maps it to algorithm.popsize; antithetic pairs need an even P, as evosax asserts), or built
    # (NumPy integers and integral floats are sizes and seeds too)
    for d in (1, 2):
        for p in (1, 2, 3, 4):
            try:
                a = cls(num_dims=np.int64(d), popsize=float(p), seed=np.int64(5))
                break
            except ConfigError as e:
                assert re.match(r"(popsize|num_dims) must be", str(e)), f"{name}: {e}"
        else:
            continue
        break
    assert (a.num_dims, a.popsize, int(a.seeds.seed.numpy())) == (d, p, 5)
    assert d == 1 or name == "lm_ma_es", name  # LM-MA-ES needs D >= 2


@pytest.mark.parametrize("name", sorted(ALGOS))
def test_one_vocabulary(name):
    accepted = set(ALGOS[name].accepted_arguments())
    assert not accepted & OLD_NAMES, f"{name} still takes {sorted(accepted & OLD_NAMES)}"
    assert "sigma" in accepted or name in ("de", "pso"), f"{name}: no 'sigma'"
    assert "init_params" in accepted or "init_fn" in accepted, f"{name}: no 'init_params'"


@pytest.mark.parametrize("name", sorted(ALGOS))
def test_every_member_failing_in_the_first_generation(name):
    # nothing finite has been seen yet: the state stays usable and the next ask is finite
    a = _make(name, 0)
    x = a.ask()
    with pytest.warns(NonFiniteFitnessWarning, match=f"{P} of {P} members"):
        a.tell(x, np.full(P, np.nan, np.float32))
    x = a.ask()
    assert np.all(np.isfinite(_params(a, x).numpy())), name
    a.tell(x, _fitness(a, x, 0))
    assert np.all(np.isfinite(a.best[0].numpy())) and np.isfinite(float(a.best[1])), name


def test_large_finite_fitness_is_not_reported_as_non_finite():
    # |f| ~ 1e30: the squares overflow float32 but every value is finite
    a = _make("openai_es", 0)
    assert a.dtype == tf.float32
    x = a.ask()
    with warnings.catch_warnings():
        warnings.simplefilter("error", NonFiniteFitnessWarning)
        warnings.simplefilter("error", RuntimeWarning)  # nor numpy's overflow warning of the test itself
        a.tell(x, np.full(P, -1e30, np.float32))
    assert a.num_nonfinite == 0
    x = a.ask()
    f = _fitness(a, x, 0)
    f[0] = np.nan
    with pytest.warns(NonFiniteFitnessWarning, match=f"1 of {P} members"):  # the first real one still warns
        a.tell(x, f)


@pytest.mark.parametrize("name", sorted(set(registry.names("strategy")) - set(ALGOS)))
def test_structured_algorithms_warn_once_and_count_non_finite_fitness(name):
    # NEAT, GP and MAP-Elites keep the same promise as the flat algorithms: one warning, a count
    import sys

    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from _registry_algorithms import fitness_of, make_algorithm

    a = make_algorithm(name)

    def tell(pop, f):
        if name == "map_elites":
            a.tell(pop, f, tf.clip_by_value(pop[:, :2], 0.0, 1.0))
        else:
            a.tell(pop, f)

    pop = a.ask()
    f = fitness_of(pop).numpy()
    f[0], f[1] = np.nan, np.inf
    with pytest.warns(NonFiniteFitnessWarning, match=f"2 of {f.size} members"):
        tell(pop, f)
    pop = a.ask()
    f = fitness_of(pop).numpy()
    f[-1] = -np.inf
    with warnings.catch_warnings():
        warnings.simplefilter("error", NonFiniteFitnessWarning)  # once per object
        tell(pop, f)
    assert a.num_nonfinite == 3
    assert np.isfinite(float(a.best[-1]))
