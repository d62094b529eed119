"""``sample_weight`` of SymbolicRegressor / SymbolicClassifier: every metric is
gplearn's weighted metric (``np.average(..., weights=w)`` and its weighted
correlations), combined with the ``max_samples`` rows; a zero weight is a row
left out; bad weights are refused as scikit-learn refuses them."""

import numpy as np
import pytest
import tensorflow as tf

from tfevo.gp import FunctionSet, SymbolicClassifier, SymbolicRegressor, TerminalSet, generate, interpret
from tfevo.gp.metrics import classification_raw, regression_loss, subsample_mask

RNG = np.random.RandomState(5)
X = RNG.uniform(-2, 2, (90, 2))
Y = (X[:, 0] * X[:, 1] + np.round(X[:, 0], 1) + 0.3 * np.sin(3 * X[:, 1])).astype(np.float32)
W = RNG.uniform(0, 3, 90) * (RNG.uniform(size=90) > 0.2)  # about a fifth of the rows weigh 0
KW = dict(population_size=150, generations=5, max_len=32, tournament_size=5, random_state=3)


def _trees():
    fs = FunctionSet(["add", "sub", "mul", "div", "sin"])
    trees = generate(tf.constant([1, 2]), 120, 32, fs, TerminalSet(2, 0.3, (-1, 1)), (1, 4), "half_and_half")
    x = X.astype(np.float32)
    pred = np.stack([interpret(trees, x, i) for i in range(120)]).astype(np.float64).reshape(120, -1)
    return trees, fs, x, pred


@pytest.mark.parametrize("metric", ["mean absolute error", "mse", "rmse", "pearson", "spearman"])
def test_weighted_metrics_equal_gplearns_with_and_without_max_samples(metric):
    from gplearn.fitness import _fitness_map

    trees, fs, x, pred = _trees()
    mask = subsample_mask(tf.constant([7, -1]), 120, len(Y), 50)
    for m in (None, mask):
        got = regression_loss(trees, tf.constant(x), tf.constant(Y), metric, fs, None, m,
                              tf.constant(W, tf.float64)).numpy()
        w = np.broadcast_to(W[None, :] * (1.0 if m is None else m.numpy()), (120, len(W)))
        with np.errstate(all="ignore"):
            want = np.array([_fitness_map[metric](Y.astype(np.float64), pred[i], w[i]) for i in range(120)])
        if metric not in ("pearson", "spearman"):
            want = np.where(np.isfinite(want), want, np.inf)
        assert np.isfinite(want).sum() > 60
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-6)


def test_weighted_classification_losses_equal_numpy():
    scores = RNG.normal(size=(6, 3, 90)).astype(np.float32)
    lab = RNG.randint(0, 3, 90)
    mask = subsample_mask(tf.constant([2, -1]), 6, 90, 40)
    w = W[None, :] * mask.numpy()
    acc = classification_raw(tf.constant(scores), tf.constant(lab, tf.int32), "accuracy", mask, W).numpy()
    ce = classification_raw(tf.constant(scores), tf.constant(lab, tf.int32), "crossentropy", mask, W).numpy()
    s = scores.astype(np.float64)
    logp = s - np.log(np.exp(s).sum(1, keepdims=True))
    nll = -np.take_along_axis(logp, lab[None, None, :], 1)[:, 0]
    np.testing.assert_allclose(acc, [np.average(s[i].argmax(0) == lab, weights=w[i]) for i in range(6)], rtol=1e-6)
    np.testing.assert_allclose(ce, [np.average(nll[i], weights=w[i]) for i in range(6)], rtol=1e-5)


def test_zero_weight_is_a_row_left_out_and_unit_weights_change_nothing():
    keep = W > 0
    a = SymbolicRegressor(**KW).fit(X, Y, sample_weight=keep.astype(float))
    b = SymbolicRegressor(**KW).fit(X[keep], Y[keep])
    # weighted means are summed in double, plain ones in float32: equal to rounding
    assert str(a) == str(b) and np.allclose(a.history_, b.history_, rtol=1e-6, atol=0)
    c = SymbolicRegressor(**KW).fit(X, Y, sample_weight=np.ones(len(Y)))
    d = SymbolicRegressor(**KW).fit(X, Y)
    assert str(c) == str(d) and c.history_ == d.history_  # equal weights are no weights, bit for bit
    lab = (X[:, 0] + 0.5 * X[:, 1] > 0.2).astype(int)
    e = SymbolicClassifier(**KW).fit(X, lab, sample_weight=keep.astype(float))
    f = SymbolicClassifier(**KW).fit(X[keep], lab[keep])
    assert str(e) == str(f) and np.allclose(e.history_, f.history_, rtol=1e-6, atol=0)


def test_weights_steer_the_fit():
    # two regimes; weight on one of them makes the fit follow it
    x = np.linspace(-1, 1, 80)[:, None]
    y = np.where(np.arange(80) % 2 == 0, 2 * x[:, 0], -2 * x[:, 0]).astype(np.float32)
    even = (np.arange(80) % 2 == 0).astype(float)
    kw = dict(KW, generations=8, metric="mse")
    up = SymbolicRegressor(**kw).fit(x, y, sample_weight=even + 1e-3)
    down = SymbolicRegressor(**kw).fit(x, y, sample_weight=1 - even + 1e-3)
    assert up.predict(np.array([[1.0]]))[0] > 1.0 and down.predict(np.array([[1.0]]))[0] < -1.0
    assert up.history_ != down.history_


@pytest.mark.parametrize("est", [SymbolicRegressor(**KW), SymbolicClassifier(**KW)], ids=["regressor", "classifier"])
@pytest.mark.parametrize("weights, match", [(-np.ones(90), "Negative values"), (np.ones(89), "90"),
                                            (np.zeros(90), "zero"), (np.full(90, np.nan), "NaN")])
def test_bad_weights_are_refused_before_the_run(est, weights, match):
    y = Y if isinstance(est, SymbolicRegressor) else (X[:, 0] > 0).astype(int)
    with pytest.raises(ValueError, match=match):
        est.fit(X, y, sample_weight=weights)


def test_class_weight_is_gplearns_product_with_sample_weight():
    from sklearn.utils.class_weight import compute_sample_weight

    lab = (X[:, 0] + 0.5 * X[:, 1] > 0.9).astype(int)  # imbalanced: about a fifth positive
    assert 0.1 < lab.mean() < 0.35
    bal = SymbolicClassifier(**KW, class_weight="balanced").fit(X, lab)
    same = SymbolicClassifier(**KW).fit(X, lab, sample_weight=compute_sample_weight("balanced", lab))
    assert str(bal) == str(same) and bal.history_ == same.history_
    both = SymbolicClassifier(**KW, class_weight={0: 1.0, 1: 3.0}).fit(X, lab, sample_weight=W + 0.5)
    ref = SymbolicClassifier(**KW).fit(X, lab, sample_weight=np.where(lab == 1, 3.0, 1.0) * (W + 0.5))
    assert str(both) == str(ref) and both.history_ == ref.history_
    plain = SymbolicClassifier(**KW).fit(X, lab)
    assert plain.history_ != bal.history_
    with pytest.raises(ValueError, match="class_weight"):
        SymbolicClassifier(**KW, class_weight="balance").fit(X, lab)
