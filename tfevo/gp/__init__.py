"""Tensorized tree genetic programming (EvoGP-style).

Trees are prefix sequences padded to ``L_max`` (``types``, ``values``,
``sizes`` tensors of shape ``[P, L_max]``); generation, every variation
operator (built on one subtree-exchange primitive), selection and the
evaluation of all trees on all data points are whole-population tensor
programs.  Evaluation uses the C++ op ``custom_ops/gp_eval.cc`` when it is
built and a pure-TensorFlow reference otherwise.

Main entry points: :class:`GeneticProgramming` (ask/tell),
:class:`SymbolicRegressor` / :class:`SymbolicClassifier` /
:class:`SymbolicTransformer` (scikit-learn style), :class:`GPPolicy` (control), :func:`evaluate`, :func:`mse`.
"""

from tfevo.gp.trees import (  # noqa: F401
    CONST, FUNC, OUT, PAD, VAR, FunctionSet, GPFunction, Trees, builtin_functions, check_trees,
    compute_sizes, from_prefix, get_function, interpret, register_function, to_gplearn, to_infix, to_prefix,
    tree_lengths, validate,
)
from tfevo.gp.generation import TerminalSet, generate  # noqa: F401
from tfevo.gp.evaluate import evaluate, evaluate_reference, mse, mse_reference  # noqa: F401
from tfevo.gp.operators import (  # noqa: F401
    constant_mutation, delete_mutation, hoist_mutation, insert_mutation, leaf_biased_crossover,
    multi_constant_mutation, multi_point_mutation, one_point_crossover, point_mutation, random_node,
    subtree_exchange, subtree_mutation, weighted_node,
)
from tfevo.gp.selection import rank_selection, roulette, select, tournament, truncation  # noqa: F401
from tfevo.gp.algorithm import OPERATORS, GeneticProgramming, GPConfig  # noqa: F401
from tfevo.gp.export import GPExpression, to_keras, to_sympy  # noqa: F401
from tfevo.gp.metrics import Fitness, make_fitness  # noqa: F401
from tfevo.gp.sklearn import SymbolicClassifier, SymbolicRegressor, SymbolicTransformer  # noqa: F401
from tfevo.gp.policy import GPPolicy  # noqa: F401

__all__ = [
    "Trees", "FunctionSet", "GPFunction", "TerminalSet", "register_function", "get_function",
    "builtin_functions", "from_prefix", "to_prefix", "to_infix", "to_gplearn", "interpret", "validate",
    "check_trees", "compute_sizes", "tree_lengths", "generate", "evaluate", "evaluate_reference",
    "mse", "mse_reference", "subtree_exchange", "random_node", "weighted_node", "one_point_crossover",
    "leaf_biased_crossover", "subtree_mutation", "hoist_mutation", "point_mutation",
    "multi_point_mutation", "insert_mutation", "delete_mutation", "constant_mutation",
    "multi_constant_mutation", "select", "tournament", "truncation", "roulette", "rank_selection",
    "GeneticProgramming", "GPConfig", "OPERATORS", "to_sympy", "to_keras", "GPExpression",
    "SymbolicRegressor", "SymbolicClassifier", "SymbolicTransformer", "GPPolicy", "make_fitness", "Fitness",
    "PAD", "CONST", "VAR", "FUNC", "OUT",
]
