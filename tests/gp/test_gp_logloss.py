"""The classifier's default fitness is gplearn's log loss: per row the
probability of the true class clipped to [1e-15, 1 - 1e-15]
(gplearn.fitness._log_loss on the sigmoid of the score difference)."""

import numpy as np
import pytest
import tensorflow as tf

from tfevo.core import ConfigError
from tfevo.gp import SymbolicClassifier
from tfevo.gp.metrics import LOG_LOSS_MAX, classification_raw

RNG = np.random.RandomState(5)


def _binary_scores():
    # margins up to +-300: many rows far beyond gplearn's clip at -log(1e-15) = 34.5
    s = RNG.normal(size=(8, 2, 60)) * np.array([1, 3, 10, 30, 60, 100, 200, 300])[:, None, None]
    return s.astype(np.float32), RNG.randint(0, 2, 60)


def test_crossentropy_is_gplearns_clipped_log_loss():
    from gplearn.fitness import _fitness_map

    s, lab = _binary_scores()
    w = RNG.uniform(0.5, 2.0, 60)
    got = classification_raw(tf.constant(s), tf.constant(lab, tf.int32), "crossentropy",
                             sample_weight=tf.constant(w)).numpy()
    d = s[:, 1].astype(np.float64) - s[:, 0]
    with np.errstate(over="ignore"):
        p = 1.0 / (1.0 + np.exp(-d))  # gplearn's sigmoid transformer
    want = np.array([_fitness_map["log loss"](lab.astype(np.float64), p[i], w) for i in range(8)])
    assert want.max() > 10 and (np.abs(d) > 40).sum() > 100  # the clip matters on these scores
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-6)


def test_unclipped_crossentropy_keeps_each_rows_margin():
    s, lab = _binary_scores()
    got = classification_raw(tf.constant(s), tf.constant(lab, tf.int32), "crossentropy_unclipped").numpy()
    z = s.astype(np.float64)
    nll = np.logaddexp(z[:, 0], z[:, 1]) - np.take_along_axis(z, lab[None, None, :], 1)[:, 0]
    np.testing.assert_allclose(got, nll.mean(1), rtol=2e-5)
    assert got.max() > 2 * LOG_LOSS_MAX


def test_nan_score_stays_the_worst_fitness_when_clipped():
    s, lab = _binary_scores()
    s[0, 1, 3] = np.nan
    got = classification_raw(tf.constant(s), tf.constant(lab, tf.int32), "crossentropy").numpy()
    assert got[0] == np.inf and np.isfinite(got[1:]).all()


def test_classifier_fitness_values():
    x = RNG.normal(size=(40, 2))
    y = (x[:, 0] > 0).astype(int)
    kw = dict(population_size=60, generations=2, max_len=32, random_state=1)
    a = SymbolicClassifier(fitness="crossentropy_unclipped", **kw).fit(x, y)
    assert a.best_fitness_ > 0
    with pytest.raises(ConfigError, match="crossentropy_unclipped"):
        SymbolicClassifier(fitness="logloss", **kw).fit(x, y)


def _gplearn_penalised(est, trees, x, y):
    """gplearn's ``_Program.fitness()`` of every tree (log loss of the sigmoid
    of the score difference, clipped as gplearn clips it, plus c * length)."""
    from gplearn.fitness import _fitness_map

    from tfevo.gp.evaluate import evaluate

    s = evaluate(trees, x.astype(np.float32), 2, ["add", "sub", "mul", "div"]).numpy().astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        p = 1.0 / (1.0 + np.exp(-(s[:, 1] - s[:, 0])))
        raw = np.array([_fitness_map["log loss"](y.astype(np.float64), p[i], np.ones(len(y))) for i in range(len(p))])
    raw = np.where(np.isfinite(raw), raw, np.inf)
    return raw + est.parsimony_coefficient * trees.sizes.numpy()[:, 0], raw


def test_classifier_elite_is_the_tree_gplearns_tournaments_rank_first():
    from tfevo.gp import GeneticProgramming

    x = RNG.normal(size=(60, 3))
    y = (x[:, 0] + 0.5 * x[:, 1] * x[:, 2] > 0).astype(int)
    est = SymbolicClassifier(population_size=300, generations=1, max_len=64, parsimony_coefficient=0.05,
                             random_state=4).fit(x, y)
    gen0 = GeneticProgramming(est.engine_.config, seed=4).ask()  # the population the one generation ranked
    pen, raw = _gplearn_penalised(est, gen0, x, y)
    assert np.argmin(pen) != np.argmin(raw)  # the rule matters here: the most accurate tree is not gplearn's first
    elite = est.engine_.ask()
    e = [i for i in range(300) if np.array_equal(gen0.types.numpy()[i], elite.types.numpy()[0])
         and np.array_equal(gen0.values.numpy()[i], elite.values.numpy()[0])]
    assert e and np.isclose(pen[e[0]], pen.min(), rtol=1e-5)
