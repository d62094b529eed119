"""Long GP checks (run with ``pytest -m slow tests/gp/test_gp_slow.py``)."""

import numpy as np
import pytest
import tensorflow as tf

from tfevo.gp import GeneticProgramming, GPConfig, mse


def _pagie(n, seed=0):
    x = np.random.RandomState(seed).uniform(-5, 5, (n, 2)).astype(np.float32)
    return x, (1 / (1 + x[:, 0] ** -4.0) + 1 / (1 + x[:, 1] ** -4.0)).astype(np.float32)


@pytest.mark.slow
def test_pagie1_full_budget_not_worse_than_gplearn():
    """Pagie-1, 1024 points, pop 5000, 100 generations, same function set,
    tournament size and operator rates: tfevo's best MSE <= gplearn's."""
    from gplearn.genetic import SymbolicRegressor

    x, y = _pagie(1024)
    gp = GeneticProgramming(GPConfig(popsize=5000, max_len=128, num_vars=2, functions=("add", "sub", "mul", "div"),
                                     const_range=None, p_const=0.0, tournament_size=20, elite=1), seed=0)
    for _ in range(100):
        tr = gp.ask()
        gp.tell(tr, -mse(tr, x, y, gp.eval_functions))
    ours = -float(gp.best[1])
    est = SymbolicRegressor(population_size=5000, generations=100, tournament_size=20,
                            function_set=("add", "sub", "mul", "div"), const_range=None, metric="mse",
                            p_crossover=0.9, p_subtree_mutation=0.01, p_hoist_mutation=0.01,
                            p_point_mutation=0.01, n_jobs=1, random_state=0)
    est.fit(x, y)
    theirs = float(est.run_details_["best_fitness"][-1])
    print(f"pagie1 best MSE: tfevo {ours:.5f}  gplearn {theirs:.5f}")
    assert ours <= theirs * 1.0001


@pytest.mark.slow
def test_cartpole_gp_policy_in_graph():
    """GP trees drive CartPole through the in-graph evaluator and improve."""
    from tfevo.gp import GPPolicy
    from tfevo.rollout.ingraph import InGraphEvaluator

    pol = GPPolicy(num_outputs=1, num_actions=2, functions=("add", "sub", "mul"))
    ev = InGraphEvaluator("CartPole-v1", pol, episodes=2, seed=0, jit_compile=False)
    gp = GeneticProgramming(GPConfig(popsize=200, max_len=32, num_vars=4, functions=("add", "sub", "mul"),
                                     tournament_size=5, elite=2), seed=0)
    best = []
    for _ in range(8):
        tr = gp.ask()
        f = ev.evaluate(GPPolicy.pack(tr))
        gp.tell(tr, f)
        best.append(float(tf.reduce_max(f)))
    assert best[-1] >= 400, best


def _nguyen_median_test_mse(k, seeds=range(10)):
    """Median test MSE and exact-recovery count of SymbolicRegressor on
    Nguyen-k at population 1000 / 50 generations (the benchmark's settings)."""
    from tfevo.gp import SymbolicRegressor
    from tfevo.problems.regression import _NGUYEN

    f, nv, lo, hi, n = _NGUYEN[k]
    mses = []
    for s in seeds:
        x = np.random.RandomState(s).uniform(lo, hi, (n, nv))
        xt = np.random.RandomState(10_000 + s).uniform(lo, hi, (1000, nv))
        est = SymbolicRegressor(population_size=1000, generations=50, tournament_size=20, const_range=None,
                                function_set=("add", "sub", "mul", "div", "sin", "cos", "exp", "log"),
                                parsimony_coefficient=0.001, metric="mse", random_state=s).fit(x, f(x))
        mses.append(float(np.mean((np.asarray(est.predict(xt), np.float64) - f(xt)) ** 2)))
    return float(np.median(mses)), int(np.sum(np.asarray(mses) <= 1e-8))


@pytest.mark.slow
def test_nguyen1_with_gplearn_initial_depths_and_headless_chicken():
    """Nguyen-1 over 10 seeds at the benchmark's settings: the depth-6
    initial trees and uniform small-tree subtree mutation had a median test
    MSE of 2.4e-3 and 3 exact recoveries; gplearn has 5.8e-4 and 4
    (benchmarks/results/gp.md)."""
    m1, exact = _nguyen_median_test_mse(1)
    print(f"nguyen1 median test MSE {m1:.3g}, exact {exact}/10")
    assert m1 < 5e-4 and exact >= 5, (m1, exact)
