"""Bloat control as gplearn's: the elite is the tree gplearn's tournaments
rank first (raw error plus the parsimony penalty), and the fitted program is
the best raw fitness of the last generation (gplearn's ``_program``)."""

import numpy as np
import pytest

from tfevo.core import ConfigError
from tfevo.gp import GeneticProgramming, GPConfig, SymbolicRegressor, from_prefix

RNG = np.random.RandomState(1)
X = RNG.uniform(-1, 1, (64, 2))
Y = X[:, 0] ** 2 - 0.5 * X[:, 1] + 0.1 * RNG.normal(size=64)


def _gplearn_fitness(err, n, c):
    """gplearn's own penalised fitness (lower is better) of an n-node program of raw error ``err``."""
    from gplearn._program import _Program
    from gplearn.fitness import _fitness_map
    from gplearn.functions import add2

    p = _Program(function_set=[add2], arities={2: [add2]}, init_depth=(2, 6), init_method="full",
                 n_features=1, const_range=None, metric=_fitness_map["mse"], p_point_replace=0.05,
                 parsimony_coefficient=c, random_state=np.random.RandomState(0),
                 program=[add2] * (n // 2) + [0] * (n // 2 + 1))
    assert p.length_ == n
    p.raw_fitness_ = float(err)
    return p.fitness()


def _elite_after_one_generation(**kw):
    P, c = 16, 0.001
    long_tree = ["add", "add", "x0", "x0", "add", "x0", "add", "x0", "x0"]  # 9 nodes
    progs = [long_tree] + [["add", "x0", "x0"]] * (P - 1)
    trees = from_prefix(progs, 16)
    err = np.full(P, 0.5, np.float32)
    err[0], err[1] = 0.100, 0.1005  # the long tree is the most accurate; the short one wins with the penalty
    lengths = trees.sizes.numpy()[:, 0]
    ref = np.array([_gplearn_fitness(e, n, c) for e, n in zip(err, lengths)])
    assert np.argmin(err) == 0 and np.argmin(ref) == 1
    gp = GeneticProgramming(GPConfig(popsize=P, max_len=16, num_vars=1, functions=("add",), elite=1,
                                     parsimony=c, operators={"hoist": 1.0}, **kw), seed=0)
    gp.tell(trees, -err)
    out = gp.ask()
    return int(np.argmin(ref)), [np.array_equal(out.types.numpy()[0], trees.types.numpy()[i]) and
                                 int(out.sizes.numpy()[0, 0]) == int(lengths[i]) for i in range(P)]


def test_elite_is_the_tree_gplearns_tournament_ranks_first():
    best, same = _elite_after_one_generation(elite_fitness="selection")
    assert same[best] and not same[0]
    _, same_raw = _elite_after_one_generation()  # the default elite: the raw best
    assert same_raw[0] and not same_raw[best]
    with pytest.raises(ConfigError, match="elite_fitness"):
        GPConfig(elite_fitness="best").validate()


def _fit(**kw):
    kw = {**dict(population_size=60, generations=12, max_len=32, tournament_size=4, metric="mse",
                 parsimony_coefficient=0.001, stopping_criteria=None, random_state=5), **kw}
    return SymbolicRegressor(**kw).fit(X, Y)


@pytest.mark.parametrize("elite", [0, 1])
def test_fitted_program_is_the_best_of_the_last_generation(elite):
    est = _fit(elite=elite)
    rd = est.run_details_
    if elite == 0:  # without an elite the best error goes up at some generation, as in gplearn
        assert min(rd["best_fitness"]) < rd["best_fitness"][-1]
    # gplearn: _program = _programs[-1][argmin(raw_fitness_)]
    assert est.best_fitness_ == rd["best_fitness"][-1]
    assert int(est.program_.sizes[0, 0]) == rd["best_length"][-1]
    pred = est.predict(X).astype(np.float64)
    np.testing.assert_allclose(np.mean((pred - Y.astype(np.float32)) ** 2), est.best_fitness_, rtol=1e-4)
    old = _fit(elite=elite, best_program="all_time")  # tfevo's former choice: the best of any generation
    assert old.best_fitness_ == min(old.run_details_["best_fitness"])
    with pytest.raises(ConfigError, match="best_program"):
        _fit(best_program="best")
