"""Random trees and mutations with the default leaf rule and gplearn's
depth range and grow rule (``init_depth=(2, 6)``, ``grow_p_func="gplearn"``:
not the defaults, docs/gp.md says why), compared with gplearn 0.4.3's own
generator and operators on the same settings.

Each comparison draws a few thousand trees on both sides and checks that
the means of tree statistics (node count, depth, share of functions,
variables and constants) agree within four standard errors of their
difference; each test also checks that the rules tfevo used before
(depths 2..5, ``p_const=0.3``) would have failed the same comparison, so
the tolerance can tell the rules apart."""

import numpy as np
import pytest
import tensorflow as tf

from tfevo.core import ConfigError
from tfevo.gp import FunctionSet, GPConfig, SymbolicClassifier, SymbolicRegressor, TerminalSet, from_prefix, generate
from tfevo.gp import operators as O
from tfevo.gp.generation import DEFAULT_DEPTH, grow_probability
from tfevo.gp.trees import CONST, FUNC, VAR, node_arity

gplearn_program = pytest.importorskip("gplearn._program")
gplearn_functions = pytest.importorskip("gplearn.functions")

N = 2000
NAMES = ("add", "sub", "mul", "div", "sin")


def _gplearn(names, n_features, method, depth=(2, 6), const_range=(-1.0, 1.0)):
    """A factory of gplearn ``_Program`` s with the estimator's settings
    (``init_depth`` as the estimator passes it)."""
    fs = [gplearn_functions._function_map[n] for n in names]
    arities = {}
    for f in fs:
        arities.setdefault(f.arity, []).append(f)
    rs = np.random.RandomState(0)

    def make(program=None):
        return gplearn_program._Program(fs, arities, depth, method, n_features, const_range, None, 1.0, 0.0, rs,
                                        program=program)
    return make, rs


def _gplearn_stats(programs):
    """Per-program (length, depth, functions, variables, constants)."""
    rows = []
    for p in programs:
        prog = p.program if hasattr(p, "program") else p
        nf = sum(isinstance(n, gplearn_functions._Function) for n in prog)
        nc = sum(isinstance(n, float) for n in prog)
        rows.append((len(prog), _gplearn_depth(prog), nf, len(prog) - nf - nc, nc))
    return np.array(rows, np.float64)


def _prefix_depth(arities):
    """Depth of a tree in prefix order given each node's arity (0 = terminal)."""
    depth, stack = 0, []
    for a in arities:
        depth = max(depth, len(stack))
        if a:
            stack.append(a)
        else:
            while stack:
                stack[-1] -= 1
                if stack[-1]:
                    break
                stack.pop()
    return depth


def _gplearn_depth(prog):
    return _prefix_depth([node.arity if isinstance(node, gplearn_functions._Function) else 0 for node in prog])


def _tfevo_stats(trees):
    t, v = trees.types.numpy(), trees.values.numpy()
    ar = node_arity(trees.types, trees.values).numpy()
    rows = []
    for ti, ai in zip(t, ar):
        n = int(np.sum(ti != 0))
        depth = _prefix_depth([int(ai[k]) if ti[k] == FUNC else 0 for k in range(n)])
        rows.append((n, depth, np.sum(ti == FUNC), np.sum(ti == VAR), np.sum(ti == CONST)))
    return np.array(rows, np.float64)


def _summary(rows):
    """Means of length, depth and the shares of functions / variables /
    constants among all nodes (ratio estimators, with standard errors)."""
    n, tot = len(rows), rows[:, 0].sum()
    out = {}
    for k, col in (("length", 0), ("depth", 1)):
        out[k] = (rows[:, col].mean(), rows[:, col].std(ddof=1) / np.sqrt(n))
    for k, col in (("functions", 2), ("variables", 3), ("constants", 4)):
        r = rows[:, col].sum() / tot
        resid = rows[:, col] - r * rows[:, 0]
        out[k] = (r, resid.std(ddof=1) / (rows[:, 0].mean() * np.sqrt(n)))
    return out


def _mismatches(a, b, z=4.0):
    sa, sb = _summary(a), _summary(b)
    return {k: (sa[k][0], sb[k][0]) for k in sa
            if abs(sa[k][0] - sb[k][0]) > z * np.hypot(sa[k][1], sb[k][1]) + 1e-12}


@pytest.mark.parametrize("n_features,method", [(1, "grow"), (3, "grow"), (3, "full"), (8, "half and half")])
def test_default_random_trees_match_gplearns_generator(n_features, method):
    make, _ = _gplearn(NAMES, n_features, method)
    theirs = _gplearn_stats(make() for _ in range(N))
    fs, ts = FunctionSet(NAMES), TerminalSet(n_features, const_range=(-1.0, 1.0))
    ours_method = method.replace(" ", "_")
    ours = _tfevo_stats(generate(tf.constant([3, n_features]), N, 128, fs, ts, (2, 6), ours_method, p_func="gplearn"))
    assert not _mismatches(ours, theirs), _mismatches(ours, theirs)
    # the former rules (depths 2..5, a constant leaf w.p. 0.3) fail the comparison
    old = _tfevo_stats(generate(tf.constant([3, n_features]), N, 128, fs, TerminalSet(n_features, 0.3, (-1.0, 1.0)),
                                (2, 5), ours_method, p_func="gplearn"))
    assert _mismatches(old, theirs)
    if method == "full":  # grow's rule plays no part
        deap = _tfevo_stats(generate(tf.constant([3, n_features]), N, 128, fs, ts, (2, 6), ours_method))
        assert not _mismatches(deap, theirs), _mismatches(deap, theirs)


def test_grow_probability_rules():
    fs, ts = FunctionSet(NAMES), TerminalSet(3)
    assert grow_probability("gplearn", fs, ts) == 6 / 8
    assert grow_probability("gplearn", fs, TerminalSet(1)) == 1.0  # one input: grow = full
    assert grow_probability("deap", fs, ts) == 5 / 9  # 3 variables + "a constant"
    assert grow_probability("deap", fs, TerminalSet(3, 0.0)) == 5 / 8
    assert grow_probability(0.25, fs, ts) == 0.25
    for bad in ("koza", 1.5, [0.5]):
        with pytest.raises(ConfigError, match="p_func must be a number in \\[0, 1\\] or one of"):
            grow_probability(bad, fs, ts)
    with pytest.raises(ConfigError, match="grow_p_func"):
        GPConfig(grow_p_func="koza").validate()


def test_p_const_auto_is_one_over_n_features_plus_one_and_a_float_still_works():
    fs = FunctionSet(["add", "mul"])
    for nv in (1, 4):
        t = generate(tf.constant([1, nv]), 4000, 64, fs, TerminalSet(nv), method="full").types.numpy()
        share = np.sum(t == CONST) / np.sum((t == CONST) | (t == VAR))
        assert abs(share - 1 / (nv + 1)) < 0.02, (nv, share)
    t = generate(tf.constant([1, 9]), 4000, 64, fs, TerminalSet(4, 0.7), method="full").types.numpy()
    assert abs(np.sum(t == CONST) / np.sum((t == CONST) | (t == VAR)) - 0.7) < 0.02
    assert TerminalSet(3, const_range=None).const_prob() == 0.0  # no constants to draw
    assert TerminalSet(0).const_prob() == 1.0  # no variables
    with pytest.raises(ConfigError, match="p_const must be a number in \\[0, 1\\] or 'auto'"):
        TerminalSet(2, "half")
    with pytest.raises(ConfigError, match="p_const must be a number in \\[0, 1\\] or 'auto'"):
        GPConfig(p_const=1.5).validate()
    assert GPConfig().p_const == "auto" and GPConfig().grow_p_func == "deap"


def test_p_const_auto_follows_the_data_width_in_one_traced_step():
    """The generation step is shared across data widths (the width is a
    runtime input), so "auto" must be computed from it at run time."""
    from tfevo.gp import GeneticProgramming

    for nv in (1, 7):
        gp = GeneticProgramming(GPConfig(popsize=3000, num_vars=nv, init_method="full"), seed=1)
        t = gp.ask().types.numpy()
        share = np.sum(t == CONST) / np.sum((t == CONST) | (t == VAR))
        assert abs(share - 1 / (nv + 1)) < 0.02, (nv, share)


def test_point_mutation_leaves_like_gplearns():
    """gplearn's point mutation (every node replaced: p_point_replace = 1)
    draws leaves uniformly among the features and "a constant"."""
    nf = 3
    make, rs = _gplearn(NAMES, nf, "full", depth=(3, 3))
    parents = [make() for _ in range(N)]
    theirs = _gplearn_stats(p.point_mutation(rs)[0] for p in parents)
    prefix = [[n.name if isinstance(n, gplearn_functions._Function) else
               (f"x{n}" if isinstance(n, int) else float(n)) for n in p.program] for p in parents]
    trees = from_prefix(prefix, 64)
    child, _ = O.multi_point_mutation(tf.constant([2, 2]), trees, FunctionSet(NAMES), TerminalSet(nf), p=1.0)
    ours = _tfevo_stats(child)
    assert not _mismatches(ours, theirs), _mismatches(ours, theirs)
    old, _ = O.multi_point_mutation(tf.constant([2, 2]), trees, FunctionSet(NAMES), TerminalSet(nf, 0.3), p=1.0)
    assert _mismatches(_tfevo_stats(old), theirs)


def test_subtree_mutation_children_like_gplearns():
    """Headless chicken with half-and-half donors of depths 2..6 and
    gplearn's grow rule on one parent; no length cap on either side."""
    nf = 2
    make, rs = _gplearn(NAMES, nf, "half and half")
    parent = make()
    while not 9 <= len(parent.program) <= 25:
        parent = make()
    theirs = _gplearn_stats(parent.subtree_mutation(rs)[0] for _ in range(N))
    prefix = [n.name if isinstance(n, gplearn_functions._Function) else
              (f"x{n}" if isinstance(n, int) else float(n)) for n in parent.program]
    trees = from_prefix([prefix] * N, 256)
    fs = FunctionSet(NAMES)
    child, ok = O.subtree_mutation(tf.constant([5, 1]), trees, fs, TerminalSet(nf), (2, 6), grow_p_func="gplearn")
    assert ok.numpy().all()
    assert not _mismatches(_tfevo_stats(child), theirs), _mismatches(_tfevo_stats(child), theirs)
    old, _ = O.subtree_mutation(tf.constant([5, 1]), trees, fs, TerminalSet(nf, 0.3), (2, 5), grow_p_func="gplearn")
    assert _mismatches(_tfevo_stats(old), theirs)


@pytest.mark.parametrize("cls", [SymbolicRegressor, SymbolicClassifier])
def test_generation_settings_in_get_params_and_clone(cls):
    from sklearn.base import clone

    est = cls()
    p = est.get_params()
    assert p["p_const"] == "auto" and p["grow_p_func"] == "deap" and tuple(p["init_depth"]) == DEFAULT_DEPTH
    est.set_params(p_const=0.25, grow_p_func="gplearn", init_depth=(3, 4))
    c = clone(est)
    assert (c.p_const, c.grow_p_func, c.init_depth) == (0.25, "gplearn", (3, 4))
    cfg = c._config(3, 1)
    assert (cfg.p_const, cfg.grow_p_func, cfg.init_depth) == (0.25, "gplearn", (3, 4))
    assert cls()._config(3, 1).terminals().const_prob() == 0.25  # auto with 3 features
    for bad, match in (({"p_const": "x"}, "p_const"), ({"grow_p_func": 2.0}, "grow_p_func")):
        with pytest.raises(ConfigError, match=match):
            cls(**bad)._config(3, 1)
