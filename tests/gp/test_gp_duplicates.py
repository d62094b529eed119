"""Parent selection ranks duplicates (equal raw fitness; the shortest stays) last."""

import numpy as np
import pytest

from tfevo.core import ConfigError
from tfevo.gp import GeneticProgramming, GPConfig, from_prefix
from tfevo.gp.selection import DUPLICATE_FITNESS, demote_duplicates


def test_demote_duplicates_keeps_the_first_of_each_group():
    f = np.array([1.0, 1.0, 0.5, 1.0, -np.inf, np.nan, 0.5, 0.25], np.float32)
    n = np.array([3, 3, 3, 5, 3, 3, 3, 3])
    out = demote_duplicates(f, n).numpy()  # equal error: the shortest (then the first) of each group stays
    kept, dup = [0, 2, 7], [1, 3, 6]
    np.testing.assert_array_equal(out[kept], f[kept])
    np.testing.assert_array_equal(out[[4, 5]], [-np.inf, -np.inf])
    # a demoted copy ranks below every distinct finite member, above an invalid one
    assert np.all(out[dup] <= DUPLICATE_FITNESS) and np.all(out[dup] > 1.2 * DUPLICATE_FITNESS)
    assert np.all(np.diff(out[dup]) < 0), out[dup]  # and the demoted keep their order
    np.testing.assert_array_equal(out, demote_duplicates(f, n, rule="error").numpy())
    # the former rule: equal fitness and equal length, all demoted to one value
    d = DUPLICATE_FITNESS
    want = np.array([1.0, d, 0.5, 1.0, -np.inf, -np.inf, d, 0.25], np.float32)
    np.testing.assert_array_equal(demote_duplicates(f, n, rule="error_and_length").numpy(), want)


def test_demotion_keeps_gplearns_order_among_equal_errors():
    """gplearn's tournaments compare ``raw + c * length``: of two programs of
    equal error the shorter always wins.  Duplicate demotion must not turn
    that round (the former rule demoted the copies of the shorter program
    and left a lone longer spelling of equal error at full fitness)."""
    from gplearn._program import _Program
    from gplearn.fitness import _fitness_map
    from gplearn.functions import add2

    from tfevo.gp.selection import parsimony

    rng = np.random.RandomState(0)
    err = rng.choice([0.5, 0.25, 0.125], 40).astype(np.float32)
    length = rng.choice([3, 5, 7, 9], 40)
    c = 0.001

    def gplearn_fitness(e, n):  # gplearn's own penalised fitness of a program of n nodes
        p = _Program(function_set=[], arities={}, init_depth=(2, 6), init_method="full", n_features=1,
                     const_range=None, metric=_fitness_map["mse"], p_point_replace=0.05,
                     parsimony_coefficient=c, random_state=rng,
                     program=[add2] * (n // 2) + [0] * (n // 2 + 1))
        assert p.length_ == n
        p.raw_fitness_ = float(e)
        return p.fitness()

    ref = np.array([gplearn_fitness(e, n) for e, n in zip(err, length)])
    sel = demote_duplicates(parsimony(-err, length, c), length, -err).numpy()
    for i in range(40):
        for j in range(40):
            if err[i] == err[j] and ref[i] < ref[j]:  # gplearn prefers i (lower fitness_ is better)
                assert sel[i] > sel[j], (i, j, err[i], length[i], length[j], sel[i], sel[j])


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
