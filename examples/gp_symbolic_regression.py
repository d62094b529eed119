"""Symbolic regression of Pagie-1 with tensorized tree GP (ask/tell loop).

Run: python examples/gp_symbolic_regression.py
"""

import tensorflow as tf

from tfevo.gp import GeneticProgramming, GPConfig, to_infix, to_sympy
from tfevo.problems.regression import pagie1
from _toy import budget  # TFEVO_EXAMPLE_TOY=1: a few seconds, for the test suite

prob = pagie1(n_points=1024)
gp = GeneticProgramming(GPConfig(popsize=budget(2000, 100), max_len=128, num_vars=prob.num_vars, functions=prob.functions,
                                 const_range=None, p_const=0.0, tournament_size=20, elite=1), seed=0)
for gen in range(budget(30, 2)):
    trees = gp.ask()
    fitness = prob.evaluate(trees)  # -MSE, higher is better
    gp.tell(trees, fitness)
    if gen % 5 == 0:
        print(f"gen {gen:3d}  best MSE {-float(tf.reduce_max(fitness)):.5f}")
best, fit = gp.best
print("best MSE", -float(fit))
print("infix:", to_infix(best))
print("sympy:", to_sympy(best))
