"""SepCMAES's kernels (custom_ops/sep_cma.cc, TfevoGaussianFromState in normal.cc)
against its pure-TensorFlow reference (the XLA-compiled tell and the graph ask)."""

import numpy as np
import pytest
import tensorflow as tf

from tfevo import ops
from tfevo.core import ConfigError
from tfevo.strategies.restarts import IPOP
from tfevo.strategies.sep_cma_es import SepCMAES

pytestmark = pytest.mark.skipif(
    ops.op_module("sep_cma", "tfevo_sep_cma_tell") is None or ops.op_module("normal", "tfevo_gaussian_from_state") is None,
    reason="no C++ compiler: the reference path is the only one",
)

_STATE = ("_mean", "sigma", "p_sigma", "p_c", "c_diag")
_EXACT = ("best_params", "best_fitness", "best_f_hist", "stag_best_hist", "stag_median_hist", "run_best_f",
          "stop_counters", "stop_flags", "generation")
_ALL = _STATE + ("xstag_mean",) + _EXACT


def _close(a, b, name):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if name in _EXACT:
        np.testing.assert_array_equal(a, b, err_msg=name)  # copies of the same fitness values and rows
        return
    scale = max(float(np.max(np.abs(b))), 1e-30)
    assert np.max(np.abs(a - b)) <= 2e-5 * scale, (name, np.max(np.abs(a - b)), scale)


def _lockstep(op, ref, fitness_fn, gens, perturb=None, check=_ALL):
    """Same rows and fitness to both; after each tell the reference takes the op's
    distribution state, so the comparison is per generation (no chaotic drift)."""
    assert op._tell_op_usable() and not ref._tell_op_usable()
    for g in range(gens):
        x = op.ask()
        np.testing.assert_array_equal(x.numpy(), ref.ask().numpy())  # the samplers: bit for bit
        if perturb is not None:
            x = perturb(g, x)
        f = fitness_fn(g, x)
        op.tell(x, f)
        ref.tell(x, f)
        for name in check:
            _close(getattr(op, name).numpy(), getattr(ref, name).numpy(), name)
        for name in _STATE + ("xstag_mean",):
            getattr(ref, name).assign(getattr(op, name))
    return op


def _pair(d, **kw):
    kw.setdefault("dtype", "float32")  # the op is the float32 tell
    return SepCMAES(d, **kw), SepCMAES(d, use_op=False, **kw)


def _ellipsoid(g, x):
    w = tf.pow(10.0, 3.0 * tf.range(x.shape[1], dtype=tf.float32) / max(1, x.shape[1] - 1))
    return -tf.reduce_sum(w * tf.square(x - 0.3), axis=1)


@pytest.mark.parametrize("d,p,active", [(40, 12, True), (300, 9, False), (1000, 24, True)])
def test_tell_matches_reference_every_generation(d, p, active):
    op, ref = _pair(d, popsize=p, sigma=0.5, seed=4, active=active)
    _lockstep(op, ref, _ellipsoid, 25)
    assert int(op.generation.numpy()) == 25


def test_stop_criteria_and_histories_match_reference():
    # a flat fitness: tolfun, tolfunhist and tolflatfitness; the common-scale move of C into
    # sigma runs as sigma shrinks
    op, ref = _pair(3, popsize=6, sigma=1e-3, seed=1)
    _lockstep(op, ref, lambda g, x: tf.fill([x.shape[0]], 1.0 + 1e-13 * g), 30)
    assert {"tolfun", "tolfunhist", "tolflatfitness"} <= set(op.stop_reasons), op.stop_reasons


def test_stagnation_and_xstagnation_match_reference():
    # fitness that does not depend on x, its best in the first generation: the sampled
    # histories fill, tolstagnation fires after 500 iterations; sigma0 = 1e-13 keeps the mean
    # within tolxstagnation's delta
    def fit(g, x):
        f = 1.0 + np.random.default_rng([3, g]).permutation(1024)[: x.shape[0]] / 1024.0
        if g == 0:
            f[1] = 3.0
        return tf.constant(f, tf.float32)

    op, ref = _pair(3, popsize=6, sigma=1.0, seed=1)
    fired = []
    for _ in range(560):
        # (random selection: a rare h_sigma decision at its threshold may differ by rounding,
        # and the synchronised state is compared in the other tests)
        _lockstep(op, ref, fit, 1, check=_EXACT)
        fired.append(op.stop_reasons)
    assert "stagnation" in fired[-1] and not any("stagnation" in r for r in fired[:504])
    op, ref = _pair(3, popsize=6, sigma=1e-13, seed=1, init_params=0.5)
    _lockstep(op, ref, fit, 30)
    assert "tolxstagnation" in op.stop_reasons


def test_nan_fitness_and_non_finite_rows_match_reference():
    def perturb(g, x):
        x = x.numpy()
        if g % 3 == 0:
            x[1, 2] = np.nan
        if g % 4 == 1:
            x[0, :] = np.inf
        return tf.constant(x)

    def fit(g, x):
        f = _ellipsoid(g, tf.where(tf.math.is_finite(x), x, 0.0)).numpy()
        f[-1] = np.nan
        if g % 5 == 2:
            f[2] = np.inf
        if g == 7:
            f[:] = np.nan  # nothing finite: only the histories and the counters move
        return tf.constant(f)

    op, ref = _pair(20, popsize=8, sigma=0.3, seed=2)
    _lockstep(op, ref, fit, 20, perturb)
    for name in _STATE:
        assert np.all(np.isfinite(getattr(op, name).numpy())), name


def test_popsize_change_and_reset_use_their_own_constants():
    op, ref = _pair(30, popsize=6, sigma=0.5, seed=3)
    _lockstep(op, ref, _ellipsoid, 3)
    for es in (op, ref):
        es._configure(14)
        es.reset(sigma=0.2)
    _lockstep(op, ref, _ellipsoid, 5)
    assert op.ask().shape == (14, 30)


def test_op_path_solves_and_ipop_restarts_with_it():
    es = SepCMAES(10, sigma=0.5, seed=0, dtype="float32")
    assert es._tell_op_usable()
    for _ in range(400):
        x = es.ask()
        es.tell(x, -tf.reduce_sum(x * x, axis=1))
    assert float(-es.best_fitness.numpy()) < 1e-8
    ip = IPOP(6, strategy=SepCMAES, sigma=2.0, init_range=(-5, 5), seed=0, tolfun=1e-3, tolx=1e-3,
              dtype="float32")
    for _ in range(300):
        x = ip.ask()
        ip.tell(x, -tf.reduce_sum(x * x - 10.0 * tf.cos(2 * np.pi * x) + 10.0, axis=1))
    assert int(ip.restarts.numpy()) >= 1 and ip.popsize > 4 + int(3 * np.log(6))


def test_reads_taken_before_a_tell_never_change():
    es = SepCMAES(50, popsize=8, sigma=0.5, seed=0, dtype="float32")
    x = es.ask()
    before = {n: getattr(es, n).value() for n in _ALL}
    copies = {n: t.numpy().copy() for n, t in before.items()}
    counter = es.seeds.counter.value()
    es.tell(x, _ellipsoid(0, x))
    es.ask()
    for n in _ALL:
        np.testing.assert_array_equal(before[n].numpy(), copies[n], err_msg=n)
    assert int(counter.numpy()) == 1 and int(es.seeds.counter.numpy()) == 2


def test_graph_callers_take_the_reference_and_get_the_same_run():
    eager = SepCMAES(12, popsize=6, sigma=0.5, seed=9, dtype="float32")
    graph = SepCMAES(12, popsize=6, sigma=0.5, seed=9, dtype="float32")

    @tf.function
    def step():
        x = graph.ask()
        graph.tell(x, _ellipsoid(0, x))
        return x

    for g in range(5):
        x = eager.ask()
        eager.tell(x, _ellipsoid(0, x))
        np.testing.assert_array_equal(x.numpy(), step().numpy())  # the asks: bit for bit
        np.testing.assert_allclose(eager._mean.numpy(), graph._mean.numpy(), rtol=1e-5, atol=1e-6)
        graph._mean.assign(eager._mean)
        graph.c_diag.assign(eager.c_diag)
        graph.p_sigma.assign(eager.p_sigma)
        graph.p_c.assign(eager.p_c)
        graph.sigma.assign(eager.sigma)


def test_bad_use_and_bad_variables_give_clear_errors():
    with pytest.raises(ConfigError, match="float32"):
        SepCMAES(5, dtype="float64", use_op=True)
    with pytest.raises(ConfigError, match="use_op"):
        SepCMAES(5, use_op="yes", dtype="float32")
    es = SepCMAES(5, popsize=4, seed=0, dtype="float32")
    mod = ops.op_module("sep_cma", "tfevo_sep_cma_tell")
    state = list(es._tell_state())
    state[4] = tf.Variable(tf.ones([6]))  # c_diag of the wrong length
    with pytest.raises(tf.errors.InvalidArgumentError, match="c_diag"):
        mod.tfevo_sep_cma_tell(
            es.ask(), tf.zeros([4]), tf.constant(es.weights_np, tf.float32), tf.constant(es._tell_consts()),
            *[v.handle for v in state],
        )
    gen = ops.op_module("normal", "tfevo_gaussian_from_state")
    with pytest.raises(tf.errors.InvalidArgumentError, match="counter"):
        gen.tfevo_gaussian_from_state(
            es.seeds.seed.handle, tf.Variable(0, dtype=tf.int32).handle, es._mean.handle, es.sigma.handle,
            es.c_diag.handle, rows=4, dim=5,
        )


def test_tell_constants_follow_the_kernels_named_layout():
    """TellConstants' fields are the kernel's enum Const, in order (kOneMinusCs <-> one_minus_cs)."""
    import pathlib
    import re

    from tfevo.strategies.sep_cma_es import TellConstants

    src = (pathlib.Path(__file__).resolve().parents[2] / "custom_ops" / "sep_cma.cc").read_text()
    body = re.search(r"enum Const \{(.*?)\};", src, re.S).group(1)
    names = re.findall(r"^\s*k(\w+?)(?: = 0)?,", body, re.M)
    snake = [re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", n).lower() for n in names]
    assert tuple(snake) == TellConstants._fields
    es = SepCMAES(7, popsize=6, seed=0, dtype="float32", active=True)
    v = es._tell_consts()
    assert v.dtype == np.float64 and v.shape == (len(TellConstants._fields),)
    named = TellConstants(*v)
    assert named.mu == es.mu and named.active == 1.0 and named.hist_len == es.hist_len
    assert named.cs_over_ds == pytest.approx(es.c_sigma / es.d_sigma)


@pytest.mark.parametrize("eager", [True, False])
def test_tolupsigma_follows_the_runs_own_sigma0_after_a_reset(eager):
    """``reset(sigma=...)`` (BIPOP's small runs) moves tolupsigma's reference point; the kernel
    must see the new one as the reference does, in its eager and its traced tell."""
    op, ref = _pair(5, popsize=8, sigma=1.0, seed=3)
    for es in (op, ref):
        es.reset(sigma=1e-22)
        es.sigma.assign(1.0)  # far above 1e20 * 1e-22: tolupsigma must fire
    x = op.ask()
    ref.ask()
    f = -tf.reduce_sum(tf.square(x), axis=1)
    if eager:
        op.tell(x, f)
    else:
        tf.function(lambda a, b: op.tell(a, b))(x, f)
    ref.tell(x, f)
    assert "tolupsigma" in ref.stop_reasons
    assert int(op.stop_flags.numpy()) == int(ref.stop_flags.numpy())
