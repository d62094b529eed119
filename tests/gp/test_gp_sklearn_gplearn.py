"""gplearn's interface on SymbolicRegressor / SymbolicClassifier: its
constructor arguments land in the engine, and stopping_criteria, warm_start,
metric, max_samples, run_details_ and feature_names behave as gplearn
documents."""

import pickle
import warnings

import numpy as np
import pytest

from tfevo.core import ConfigError
from tfevo.gp import GPConfig, SymbolicClassifier, SymbolicRegressor

RNG = np.random.RandomState(1)
X = RNG.uniform(-1, 1, (96, 2))
Y = X[:, 0] ** 2 - 0.5 * X[:, 1]
LAB = (X[:, 0] + 0.3 * X[:, 1] > 0).astype(int)
TINY = dict(population_size=100, max_len=32, tournament_size=5, random_state=3)
KEYS = ("generation", "average_length", "average_fitness", "best_length", "best_fitness", "best_oob_fitness",
        "generation_time")


def _same_run(a, b):
    for x, y in zip(a.program_, b.program_):
        np.testing.assert_array_equal(x, y)
    for k in KEYS[:-1]:
        np.testing.assert_array_equal(np.asarray(a.run_details_[k]), np.asarray(b.run_details_[k]), err_msg=k)


def test_gplearn_canonical_example_runs_and_lands_in_engine():
    est = SymbolicRegressor(population_size=200, generations=4, stopping_criteria=0.01, p_crossover=0.7,
                            p_subtree_mutation=0.1, p_hoist_mutation=0.05, p_point_mutation=0.1,
                            max_samples=0.9, verbose=1, parsimony_coefficient=0.01, random_state=0)
    est.fit(X, Y)
    cfg = est.engine_.config
    assert dict(cfg.operators) == {"crossover": 0.7, "subtree": 0.1, "hoist": 0.05, "multi_point": 0.1}
    assert cfg.p_point == 0.05 and cfg.parsimony == 0.01 and cfg.popsize == 200
    rd = est.run_details_
    assert set(rd) == set(KEYS)
    n = len(rd["generation"])
    assert 1 <= n <= 4 and all(len(rd[k]) == n for k in KEYS)
    assert rd["generation"] == list(range(n))
    assert np.all(np.isfinite(rd["best_oob_fitness"]))  # max_samples < 1: out-of-bag fitness reported
    assert n == 4 or rd["best_fitness"][-1] <= 0.01
    assert np.isfinite(est.best_mse_) and est.score(X, Y) > 0


def test_defaults_keep_the_engine_defaults_and_p_point_alias():
    cfg = SymbolicRegressor(**TINY, generations=1).fit(X, Y).engine_.config
    assert dict(cfg.operators) == dict(GPConfig().operators) and cfg.p_point == GPConfig().p_point
    est = SymbolicRegressor(**TINY, generations=1, p_point=0.2, operators={"insert": 0.02}).fit(X, Y)
    assert est.engine_.config.p_point == 0.2 and est.engine_.config.operators["insert"] == 0.02
    est = SymbolicRegressor(**TINY, generations=1, init_method="half and half").fit(X, Y)  # gplearn's spelling
    assert est.engine_.config.init_method == "half_and_half"


@pytest.mark.parametrize("kw, match", [
    (dict(operators={"crossover": 0.5}), r"operators\['crossover'\]=0.5 .*p_crossover=0.9"),
    (dict(operators={"multi_point": 0.1}), r"p_point_mutation"),
    (dict(p_crossover=0.9, p_subtree_mutation=0.1, operators={"insert": 0.05}),
     r"p_crossover=0.9 \+ p_subtree_mutation=0.1 .*operators\['insert'\]=0.05 = 1.0[67]"),
    (dict(p_hoist_mutation=1.5), r"p_hoist_mutation must be a probability .* 1.5"),
    (dict(p_point=0.2, p_point_replace=0.1), r"p_point=0.2 and p_point_replace=0.1"),
    (dict(metric="kendall"), r"metric must be one of .*'pearson', 'spearman'.*make_fitness.*'kendall'"),
    (dict(max_samples=0.0), r"max_samples must be a fraction in \(0, 1\], got 0.0"),
    (dict(max_samples=1.5), r"max_samples .* 1.5"),
    (dict(stopping_criteria="low"), r"stopping_criteria must be a number or None, got 'low'"),
    (dict(feature_names="ab"), r"feature_names must be None or a sequence of str"),
])
def test_bad_gplearn_settings_are_config_errors(kw, match):
    with pytest.raises(ConfigError, match=match):
        SymbolicRegressor(**{**TINY, "generations": 1, **kw}).fit(X, Y)


def test_feature_names_length_mismatch_and_printing():
    with pytest.raises(ValueError, match="feature_names has 3 names but X has 2 features"):
        SymbolicRegressor(**TINY, generations=1, feature_names=["a", "b", "c"]).fit(X, Y)
    est = SymbolicRegressor(**TINY, generations=3, feature_names=["speed", "mass"]).fit(X, Y)
    s = str(est)
    assert ("speed" in s or "mass" in s) and "x0" not in s and "x1" not in s
    syms = {str(v) for v in est.to_sympy(simplify=False).free_symbols}
    assert syms and syms <= {"speed", "mass"}


def test_stopping_criteria_lower_and_higher_is_better():
    full = SymbolicRegressor(**TINY, generations=4, stopping_criteria=None).fit(X, Y)
    assert len(full.run_details_["generation"]) == 4
    # lower is better: any loss <= 1e9 stops after the first generation
    for metric in ("mse", "mean absolute error", "rmse"):
        est = SymbolicRegressor(**TINY, generations=4, metric=metric, stopping_criteria=1e9).fit(X, Y)
        assert len(est.run_details_["best_fitness"]) == 1 and int(est.engine_.generation) == 1
    # a threshold reached mid-run stops at the first generation reaching it
    thr = full.run_details_["best_fitness"][1]
    est = SymbolicRegressor(**TINY, generations=4, stopping_criteria=thr).fit(X, Y)
    first = next(i for i, f in enumerate(full.run_details_["best_fitness"]) if f <= thr)
    assert len(est.run_details_["best_fitness"]) == first + 1
    # accuracy is higher-is-better: 0.0 stops at once, 1.01 never
    clf = SymbolicClassifier(**TINY, generations=3, fitness="accuracy", stopping_criteria=0.0).fit(X, LAB)
    assert len(clf.run_details_["best_fitness"]) == 1
    clf = SymbolicClassifier(**TINY, generations=3, fitness="accuracy", stopping_criteria=1.01).fit(X, LAB)
    assert len(clf.run_details_["best_fitness"]) == 3
    # the default cross-entropy is lower-is-better: 0.0 never, 10.0 at once
    clf = SymbolicClassifier(**TINY, generations=3, stopping_criteria=0.0).fit(X, LAB)
    assert len(clf.run_details_["best_fitness"]) == 3 and clf.fitness == "crossentropy"
    clf = SymbolicClassifier(**TINY, generations=3, stopping_criteria=10.0).fit(X, LAB)
    assert len(clf.run_details_["best_fitness"]) == 1


@pytest.mark.parametrize("max_samples", [1.0, 0.75])
def test_warm_start_continues_bit_for_bit(max_samples):
    kw = dict(TINY, max_samples=max_samples, stopping_criteria=None)
    one = SymbolicRegressor(**kw, generations=5).fit(X, Y)
    est = SymbolicRegressor(**kw, generations=2, warm_start=True).fit(X, Y)  # no stored run: ordinary fit
    _same_run(est, SymbolicRegressor(**kw, generations=2).fit(X, Y))
    est.set_params(generations=5).fit(X, Y)
    _same_run(est, one)
    assert est.best_mse_ == one.best_mse_
    # the stored run survives pickling: continue after unpickling
    est = SymbolicRegressor(**kw, generations=3, warm_start=True).fit(X, Y)
    back = pickle.loads(pickle.dumps(est))
    assert back.engine_ is None
    back.set_params(generations=5).fit(X, Y)
    _same_run(back, one)
    with pytest.raises(ValueError, match="generations=4 must be larger or equal to the 5 generations"):
        back.set_params(generations=4).fit(X, Y)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        back.set_params(generations=5).fit(X, Y)
    assert any("without increasing generations" in str(m.message) for m in w)
    _same_run(back, one)
    with pytest.raises(ValueError, match="population_size: 100 -> 120"):
        back.set_params(generations=6, population_size=120).fit(X, Y)


def test_warm_start_classifier_and_changed_operator_mix():
    one = SymbolicClassifier(**TINY, generations=4).fit(X, LAB)
    est = SymbolicClassifier(**TINY, generations=2, warm_start=True).fit(X, LAB)
    est.set_params(generations=4).fit(X, LAB)
    _same_run(est, one)
    # other settings may change between warm fits (as in gplearn): the run continues with them
    est.set_params(generations=6, p_crossover=0.5).fit(X, LAB)
    assert est.engine_.config.operators["crossover"] == 0.5 and len(est.run_details_["generation"]) == 6


@pytest.mark.parametrize("metric", ["mse", "mean absolute error", "rmse"])
def test_metric_matches_numpy_on_best_program(metric):
    est = SymbolicRegressor(**TINY, generations=3, metric=metric, stopping_criteria=None).fit(X, Y)
    err = est.predict(X).astype(np.float64) - Y.astype(np.float32)
    ref = {"mse": np.mean(err ** 2), "mean absolute error": np.mean(np.abs(err)),
           "rmse": np.sqrt(np.mean(err ** 2))}[metric]
    np.testing.assert_allclose(est.best_fitness_, ref, rtol=1e-4)
    np.testing.assert_allclose(est.best_mse_, np.mean(err ** 2), rtol=1e-4)
    assert est.best_fitness_ == min(est.run_details_["best_fitness"])
    assert est.history_ == est.run_details_["best_fitness"]


def test_masked_metrics_match_numpy():
    import tensorflow as tf

    from tfevo.gp import FunctionSet
    from tfevo.gp.metrics import classification_raw, regression_loss, subsample_mask

    est = SymbolicRegressor(**TINY, generations=1).fit(X, Y)
    trees = est.engine_.ask()
    xt, yt = tf.constant(X, tf.float32), tf.constant(Y, tf.float32)
    mask = subsample_mask(tf.constant([4, -1]), 100, len(Y), 30)
    m = mask.numpy()
    assert (m.sum(1) == 30).all() and not (m == m[0]).all()  # exactly 30 rows per tree, rows differ per tree
    pred = est.engine_.evaluate(trees, xt).numpy().astype(np.float64)
    fs = FunctionSet(["add", "sub", "mul", "div"])
    for metric, f in (("mse", np.square), ("mean absolute error", np.abs)):
        got = regression_loss(trees, xt, yt, metric, fs, None, mask).numpy()
        with np.errstate(invalid="ignore", over="ignore"):
            ref = np.array([f(pred[i, m[i]] - Y[m[i]].astype(np.float32)).mean() for i in range(100)])
        ref = np.where(np.isfinite(ref), ref, np.inf)
        np.testing.assert_allclose(got, ref, rtol=1e-4)
    scores = tf.constant(RNG.normal(size=(5, 2, len(Y))), tf.float32)
    acc = classification_raw(scores, tf.constant(LAB, tf.int32), "accuracy", mask[:5]).numpy()
    ref = [(scores.numpy()[i].argmax(0) == LAB)[m[i]].mean() for i in range(5)]
    np.testing.assert_allclose(acc, ref, rtol=1e-6)


# -- gplearn's correlation metrics and make_fitness ---------------------------------------------
def _population_and_predictions():
    import tensorflow as tf

    from tfevo.gp import FunctionSet, TerminalSet, generate, interpret

    fs = FunctionSet(["add", "sub", "mul", "div", "sin"])
    trees = generate(tf.constant([1, 2]), 150, 32, fs, TerminalSet(2, 0.3, (-1, 1)), (1, 4), "half_and_half")
    x = X.astype(np.float32)
    y = (X[:, 0] * X[:, 1] + np.round(X[:, 0], 1)).astype(np.float32)  # ties in y: the ranks average them
    pred = np.stack([interpret(trees, x, i) for i in range(150)]).astype(np.float64)
    return trees, fs, x, y, pred


@pytest.mark.parametrize("metric", ["pearson", "spearman"])
def test_correlation_metrics_equal_gplearns_on_the_same_predictions(metric):
    import tensorflow as tf

    from gplearn.fitness import _fitness_map
    from tfevo.gp.metrics import regression_loss, subsample_mask

    trees, fs, x, y, pred = _population_and_predictions()
    mask = subsample_mask(tf.constant([3, 4]), 150, len(y), 60)
    for m in (None, mask):
        got = regression_loss(trees, tf.constant(x), tf.constant(y), metric, fs, None, m).numpy()
        w = np.ones((150, len(y))) if m is None else m.numpy().astype(np.float64)
        want = np.array([_fitness_map[metric](y.astype(np.float64), pred[i], w[i]) for i in range(150)])
        assert 10 < np.sum(want == 0) < 150  # constant trees score 0 on both sides
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_correlation_metric_fit_is_greater_is_better_like_gplearn():
    from gplearn.fitness import _fitness_map

    est = SymbolicRegressor(**TINY, generations=4, metric="spearman", stopping_criteria=None).fit(X, Y)
    rd = est.run_details_["best_fitness"]
    assert est.best_fitness_ == max(rd) and rd == sorted(rd)  # the elite keeps the best score
    ref = _fitness_map["spearman"](Y, est.predict(X).astype(np.float64), np.ones(len(Y)))
    np.testing.assert_allclose(est.best_fitness_, ref, rtol=1e-6)
    with pytest.warns(UserWarning, match="stops after the first generation"):
        one = SymbolicRegressor(**TINY, generations=4, metric="pearson").fit(X, Y)
    assert len(one.run_details_["generation"]) == 1  # gplearn's rule: best score >= 0.0 at once
    stop = SymbolicRegressor(**TINY, generations=30, metric="pearson", stopping_criteria=0.9).fit(X, Y)
    assert stop.run_details_["best_fitness"][-1] >= 0.9 > max(stop.run_details_["best_fitness"][:-1] + [-1])


def _neg_mae(y, y_pred, w):
    return -np.average(np.abs(y_pred - y), weights=w)


def test_make_fitness_matches_gplearn_and_survives_clone_and_pickle():
    import copy

    import tensorflow as tf
    from gplearn.fitness import make_fitness as gplearn_make_fitness
    from sklearn.base import clone

    from tfevo.gp import make_fitness
    from tfevo.gp.metrics import regression_loss, subsample_mask

    trees, fs, x, y, pred = _population_and_predictions()
    mask = subsample_mask(tf.constant([5, 6]), 150, len(y), 60)
    mine = make_fitness(function=_neg_mae, greater_is_better=True)
    batched = make_fitness(function=lambda y, p, w: -np.sum(w * np.abs(p - y), 1) / np.sum(w, 1),
                           greater_is_better=True, batched=True)
    theirs = gplearn_make_fitness(function=_neg_mae, greater_is_better=True, wrap=False)
    w = mask.numpy().astype(np.float64)
    want = np.array([theirs(y.astype(np.float64), pred[i], w[i]) for i in range(150)])
    want = np.where(np.isfinite(want), want, -np.inf)  # a non-finite score is the worst
    for metric in (mine, batched):
        got = regression_loss(trees, tf.constant(x), tf.constant(y), metric, fs, None, mask).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-6)

    # through the constructor, with a lambda (not picklable by pickle itself), fitted and cloned
    est = SymbolicRegressor(**TINY, generations=3, stopping_criteria=None,
                            metric=make_fitness(function=lambda y, p, w: -np.average((p - y) ** 2, weights=w),
                                                greater_is_better=True)).fit(X, Y)
    assert est.best_fitness_ == max(est.run_details_["best_fitness"])
    np.testing.assert_allclose(-est.best_fitness_, est.best_mse_, rtol=1e-5)
    c = clone(est)
    assert c.metric == est.metric and "make_fitness(function=" in repr(est)
    back = pickle.loads(pickle.dumps(est))
    np.testing.assert_array_equal(back.predict(X), est.predict(X))
    again = SymbolicRegressor(**back.get_params()).fit(X, Y)  # the unpickled metric still scores
    _same_run(again, est)
    assert copy.deepcopy(est.metric) == est.metric
    with pytest.raises(ConfigError, match="greater_is_better must be a bool"):
        make_fitness(function=_neg_mae, greater_is_better="yes")
    with pytest.raises(ConfigError, match="must return a number"):
        make_fitness(function=lambda y, p, w: p - y, greater_is_better=False)


# Constructor defaults that differ from gplearn 0.4.3's on purpose (docs/gp.md, "Coming from gplearn"),
# each as the relation that holds between the two values:
DELIBERATE_DEFAULTS = {
    # the same meaning (both ends included), one level shallower by default
    "init_depth": lambda ours, theirs: tuple(ours) == (theirs[0], theirs[1] - 1),
}
CLASSIFIER_DELIBERATE = {
    # gplearn's 0.0 never stops its log loss (clipped above 0); tfevo's float32 cross-entropy reaches
    # exactly 0.0 once the training data are separated, and with fitness="accuracy" 0.0 would stop at
    # once (>=): None never stops, which is what gplearn's 0.0 does
    "stopping_criteria": lambda ours, theirs: ours is None and theirs == 0.0,
}
# gplearn arguments tfevo does not take (reasons in docs/gp.md)
NOT_TAKEN = set()  # every gplearn argument is taken
NOT_TAKEN_CLASSIFIER = set()


@pytest.mark.parametrize("name", ["SymbolicRegressor", "SymbolicClassifier", "SymbolicTransformer"])
def test_defaults_equal_gplearns(name):
    genetic = pytest.importorskip("gplearn.genetic")
    import tfevo.gp

    ours, theirs = getattr(tfevo.gp, name)().get_params(), getattr(genetic, name)().get_params()
    deliberate = dict(DELIBERATE_DEFAULTS, **(CLASSIFIER_DELIBERATE if name == "SymbolicClassifier" else {}))
    missing = NOT_TAKEN | (NOT_TAKEN_CLASSIFIER if name == "SymbolicClassifier" else set())
    assert set(theirs) - set(ours) == missing
    for key in sorted(set(theirs) & set(ours)):
        if key in deliberate:
            assert deliberate[key](ours[key], theirs[key]), (key, ours[key], theirs[key])
        else:
            assert ours[key] == theirs[key], (key, ours[key], theirs[key])


def test_default_metric_and_parsimony_are_gplearns_in_the_engine():
    est = SymbolicRegressor(**TINY, generations=2, stopping_criteria=None).fit(X, Y)
    assert est.engine_.config.parsimony == 0.001 and est.engine_.config.init_method == "half_and_half"
    mae = float(np.mean(np.abs(est.predict(X).astype(np.float64) - Y)))
    np.testing.assert_allclose(est.best_fitness_, mae, rtol=1e-5)  # raw fitness = gplearn's default MAE
