"""A gplearn 0.4.3 user's code on tfevo's estimators: gplearn's arguments
(``n_jobs``, ``low_memory``, the classifier's ``metric`` and
``transformer``), gplearn's ``make_fitness`` / ``make_function`` objects and
gplearn's fitted attributes (``_program``, ``_programs``, formula syntax)
either work with gplearn's meaning or fail with a ConfigError saying why."""

import numpy as np
import pytest
import tensorflow as tf

from tfevo.core import ConfigError
from tfevo.gp import SymbolicClassifier, SymbolicRegressor, SymbolicTransformer, from_prefix, to_gplearn
from tfevo.gp.metrics import subsample_mask

gplearn_fitness = pytest.importorskip("gplearn.fitness")
gplearn_functions = pytest.importorskip("gplearn.functions")
gplearn_program = pytest.importorskip("gplearn._program")

RNG = np.random.RandomState(1)
X = RNG.uniform(-1, 1, (80, 3))
Y = X[:, 0] * X[:, 1] + X[:, 2]
YC = (Y > 0.1).astype(int)
TINY = dict(population_size=40, generations=3, max_len=32, tournament_size=5, random_state=2)


def _mse(y, p, w):
    return np.average((y - p) ** 2, weights=w)


def _brier(y, p, w):
    return np.average((y - p) ** 2, weights=w)


def _same_run(a, b):
    for x, y in zip(a.program_, b.program_):
        np.testing.assert_array_equal(x, y)
    assert a.run_details_["best_fitness"] == b.run_details_["best_fitness"]


def test_n_jobs_is_taken_and_changes_nothing():
    ref = SymbolicRegressor(**TINY).fit(X, Y)
    for n_jobs in (-1, 2, None):
        _same_run(SymbolicRegressor(**TINY, n_jobs=n_jobs).fit(X, Y), ref)
    with pytest.raises(ConfigError, match="n_jobs must be None or a nonzero integer"):
        SymbolicRegressor(**TINY, n_jobs=0).fit(X, Y)


def test_programs_hold_every_generation_unless_low_memory():
    est = SymbolicRegressor(**TINY, max_samples=0.7).fit(X, Y)
    progs = est._programs
    assert len(progs) == 3 and all(len(p) == 40 for p in progs)
    last = progs[-1]
    i = int(np.argmin(last.raw_fitness_))
    assert last[i].raw_fitness_ == est.run_details_["best_fitness"][-1] == est._program.raw_fitness_
    assert str(last[i]) == str(est._program) == str(est)
    np.testing.assert_array_equal(last[i].execute(X), est.predict(X))
    # gplearn's oob_fitness_ of the fitted program: the last generation's best_oob_fitness
    assert np.isfinite(est._program.oob_fitness_)
    assert est._program.oob_fitness_ == est.run_details_["best_oob_fitness"][-1]
    # gplearn's meaning: the metric (mean absolute error) on the rows the best tree was not scored on
    rows = subsample_mask(tf.constant([int(est.engine_.seeds.seed.numpy()), -1 - 2], tf.int32), 40, len(Y),
                          int(0.7 * len(Y))).numpy()[i]
    out_of_bag = np.mean(np.abs(last[i].execute(X)[~rows] - Y[~rows]))
    np.testing.assert_allclose(est._program.oob_fitness_, out_of_bag, rtol=1e-5)
    assert np.isnan(SymbolicRegressor(**TINY).fit(X, Y)._program.oob_fitness_)  # max_samples=1: NaN, as gplearn
    low = SymbolicRegressor(**TINY, max_samples=0.7, low_memory=True).fit(X, Y)
    assert low._programs[:2] == [None, None]
    np.testing.assert_array_equal(low._programs[-1].programs.types, last.programs.types)
    _same_run(low, est)
    with pytest.raises(ConfigError, match="low_memory must be a bool"):
        SymbolicRegressor(**TINY, low_memory="yes").fit(X, Y)


def test_warm_start_programs_continue_like_one_run():
    one = SymbolicRegressor(**{**TINY, "generations": 4}).fit(X, Y)
    two = SymbolicRegressor(**{**TINY, "generations": 2}, warm_start=True).fit(X, Y)
    two.set_params(generations=4).fit(X, Y)
    _same_run(two, one)
    assert len(two._programs) == 4
    for a, b in zip(two._programs, one._programs):
        np.testing.assert_array_equal(a.raw_fitness_, b.raw_fitness_)
    with pytest.raises(ValueError, match="must be larger or equal"):
        two.set_params(generations=3).fit(X, Y)


def test_formula_is_gplearns_syntax():
    # the same program in both libraries prints the same
    fs = [gplearn_functions._function_map[n] for n in ("add", "mul", "sub")]
    prog = [fs[0], fs[1], 0, 0.5, fs[2], 2, -0.25]
    theirs = gplearn_program._Program(fs, {2: fs}, (2, 6), "grow", 3, (-1.0, 1.0), None, 0.05, 0.0,
                                      np.random.RandomState(0), program=prog)
    ours = from_prefix([["add", "mul", "x0", 0.5, "sub", "x2", -0.25]], max_len=16)
    assert to_gplearn(ours) == str(theirs) == "add(mul(X0, 0.500), sub(X2, -0.250))"
    theirs.feature_names = ["a", "b", "c"]
    assert to_gplearn(ours, var_names=["a", "b", "c"]) == str(theirs)
    est = SymbolicRegressor(**TINY, feature_names=["a", "b", "c"]).fit(X, Y)
    assert str(est) == to_gplearn(est.program_, var_names=["a", "b", "c"]) and "X0" not in str(est)


def test_gplearn_make_fitness_objects_are_scored_like_gplearns():
    mf = gplearn_fitness.make_fitness(function=_mse, greater_is_better=False)
    reg = SymbolicRegressor(**TINY, metric=mf).fit(X, Y)
    np.testing.assert_allclose(reg.best_fitness_, _mse(Y, reg.predict(X), np.ones(len(Y))), rtol=1e-6)
    st = SymbolicTransformer(**TINY, metric=mf, hall_of_fame=10, n_components=2, stopping_criteria=None).fit(X, Y)
    np.testing.assert_allclose(st.fitness_[0], _mse(Y, st[0].execute(X), np.ones(len(Y))), rtol=1e-6)
    assert [str(c) for c in st._best_programs] == [str(c) for c in st] and len(st) == 2
    np.testing.assert_array_equal(np.stack([c.execute(X) for c in st], 1), st.transform(X))


def test_classifier_takes_gplearns_metric_and_transformer():
    ref = SymbolicClassifier(**TINY).fit(X, YC)
    _same_run(SymbolicClassifier(**TINY, metric="log loss", transformer="sigmoid").fit(X, YC), ref)
    brier = gplearn_fitness.make_fitness(function=_brier, greater_is_better=False)
    clf = SymbolicClassifier(**TINY, metric=brier).fit(X, YC)
    p1 = clf.predict_proba(X)[:, 1]  # gplearn's metric sees the sigmoid probability of classes_[1]
    np.testing.assert_allclose(clf.best_fitness_, _brier(YC, p1, np.ones(len(YC))), rtol=1e-6)
    np.testing.assert_allclose(clf.predict_proba(X).sum(axis=1), 1.0)
    with pytest.raises(ConfigError, match="give one of them"):
        SymbolicClassifier(**TINY, metric=brier, fitness="accuracy").fit(X, YC)
    with pytest.raises(ConfigError, match="y has 3 classes"):
        SymbolicClassifier(**TINY, metric=brier).fit(X, np.digitize(Y, [-0.3, 0.3]))
    with pytest.raises(ConfigError, match="metric must be 'log loss'"):
        SymbolicClassifier(**TINY, metric="accuracy").fit(X, YC)
    sig = gplearn_functions.make_function(function=lambda x: 1 / (1 + np.exp(-x)), name="sig", arity=1)
    with pytest.raises(ConfigError, match="transformer must be 'sigmoid'"):
        SymbolicClassifier(**TINY, transformer=sig).fit(X, YC)


def test_make_function_in_function_set_says_how_to_register():
    pd = gplearn_functions.make_function(function=lambda a, b: a * b + 1, name="pd", arity=2)
    with pytest.raises(ConfigError, match=r"register_function\('pd', arity=2"):
        SymbolicRegressor(**TINY, function_set=("add", pd)).fit(X, Y)
