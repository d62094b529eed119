"""Parent selection ranks duplicates (equal fitness and length) last."""

import numpy as np
import pytest

from tfevo.core import ConfigError
from tfevo.gp import GeneticProgramming, GPConfig, from_prefix
from tfevo.gp.selection import DUPLICATE_FITNESS, demote_duplicates


def test_demote_duplicates_keeps_the_first_of_each_group():
    f = np.array([1.0, 1.0, 0.5, 1.0, -np.inf, np.nan, 0.5, 0.25], np.float32)
    n = np.array([3, 3, 3, 5, 3, 3, 3, 3])
    out = demote_duplicates(f, n).numpy()
    d = DUPLICATE_FITNESS
    want = np.array([1.0, d, 0.5, 1.0, -np.inf, -np.inf, d, 0.25], np.float32)
    np.testing.assert_array_equal(out, want)
    # a demoted copy ranks below every distinct finite member, above an invalid one
    assert out[1] < out[7] and out[1] > out[4]


def _run(demote, seed=3):
    P = 64
    trees = from_prefix([["add", f"x{k}", f"x{k}"] for k in range(P)], 8)
    fit = np.zeros(P, np.float32)
    fit[-1] = -1.0  # 63 equally good trees of equal length, one worse distinct tree
    gp = GeneticProgramming(GPConfig(popsize=P, max_len=8, num_vars=P, functions=("add",), operators={},
                                     elite=0, tournament_size=P, demote_duplicates=demote), seed=seed)
    gp.tell(trees, fit)
    return gp.ask().values.numpy()[:, 1]


def test_engine_selection_draws_on_distinct_programs():
    """With 63 copies (by fitness and length) of the best, a tournament of
    64 picks the one distinct worse tree whenever its only better contenders
    are copies; without demotion it can never win."""
    chosen = _run(True)
    assert 8 <= np.sum(chosen == 63) <= 32, np.bincount(chosen.astype(int))
    assert np.sum(chosen == 0) >= 24  # the first of the group keeps its rank
    assert np.sum(_run(False) == 63) == 0
    np.testing.assert_array_equal(chosen, _run(True))  # same seed, same run


def test_demote_duplicates_is_checked():
    with pytest.raises(ConfigError, match="demote_duplicates"):
        GPConfig(demote_duplicates="yes").validate()


def test_the_estimators_carry_demote_duplicates_to_the_engine():
    from sklearn.base import clone

    from tfevo.gp import SymbolicClassifier, SymbolicRegressor

    X = np.random.RandomState(0).uniform(-1, 1, (40, 2)).astype(np.float32)
    for est, y in ((SymbolicRegressor, X[:, 0] * X[:, 1]), (SymbolicClassifier, (X[:, 0] > 0).astype(int))):
        e = est(population_size=32, generations=1, demote_duplicates=False, random_state=0)
        assert clone(e).get_params()["demote_duplicates"] is False
        assert e.fit(X, y).engine_.config.demote_duplicates is False
        assert est(population_size=32, generations=1, random_state=0).fit(X, y).engine_.config.demote_duplicates
        with pytest.raises(ConfigError, match="demote_duplicates"):
            est(population_size=32, generations=1, demote_duplicates="no").fit(X, y)
