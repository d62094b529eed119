"""Variation semantics shared with gplearn (headless-chicken subtree mutation,
function-biased hoist points) and the estimator's random_state default."""

import numpy as np
import tensorflow as tf

from tfevo.gp import FunctionSet, GPConfig, SymbolicRegressor, TerminalSet, from_prefix, generate, validate
from tfevo.gp import operators as O

FS = FunctionSet(["add", "sub", "mul"])
SEED = tf.constant([4, 2])


def _full_tree(depth):
    """Prefix tokens of a full binary tree of ``depth`` (root depth 0)."""
    if depth == 0:
        return ["x0"]
    return ["add"] + _full_tree(depth - 1) + _full_tree(depth - 1)


def test_subtree_mutation_crosses_in_a_subtree_of_an_initial_style_tree():
    """The donor is a tree made like the initial ones (here full, depth 4:
    15 functions, 16 leaves) and its crossover point is a function node 90%
    of the time, so a one-leaf parent becomes a function-rooted subtree of
    up to 31 nodes with probability 13.5 / 15.1."""
    P = 3000
    leaves = from_prefix([["x1"]] * P, 64)
    child, ok = O.subtree_mutation(SEED, leaves, FS, TerminalSet(1, 0.0, None), (4, 4), 64, "full", 0.9)
    n = child.sizes.numpy()[:, 0]
    assert ok.numpy().all() and validate(child, num_vars=1).all()
    assert n.max() == 31 and set(np.unique(n)) <= {1, 3, 7, 15, 31}
    assert abs(np.mean(n > 1) - 13.5 / 15.1) < 0.03, np.mean(n > 1)
    # the whole donor (its root weighs 0.9 of 15.1) is inserted about 6% of the time
    assert abs(np.mean(n == 31) - 0.9 / 15.1) < 0.015
    # grow + uniform points: the classic "replace a random node by a random tree"
    child, _ = O.subtree_mutation(SEED, leaves, FS, TerminalSet(1, 0.0, None), (3, 3), 64, "full", None)
    assert abs(np.mean(child.sizes.numpy()[:, 0] > 1) - 7 / 15) < 0.03


def _expected_hoist_size(tokens, p_func, proper=False):
    """Exact mean child size of gplearn's hoist on one tree: a subtree ``i``
    drawn by weight, then a subtree ``j`` of it (``i`` itself included, as
    gplearn's ``get_subtree`` on the subtree) by weight."""
    tr = from_prefix([tokens], len(tokens))
    s = tr.sizes.numpy()[0]
    w = np.where(np.array([t in ("add", "sub", "mul") for t in tokens]), p_func, 1 - p_func)
    n, total = len(tokens), 0.0
    for i in range(n):
        inner = range(i + 1 if proper else i, i + s[i])
        if not len(inner):
            total += w[i] / w.sum() * n  # a leaf under the proper-subtree rule: unchanged
            continue
        wi = sum(w[j] for j in inner)
        total += w[i] / w.sum() * sum(w[j] / wi * (n - s[i] + s[j]) for j in inner)
    return total


def test_hoist_points_follow_the_function_bias():
    tokens = ["mul"] + _full_tree(3) + ["sub", "x0", "x0"]
    P = 6000
    trees = from_prefix([tokens] * P, 32)
    child, _ = O.hoist_mutation(SEED, trees, root_only=False, p_func=0.9)
    assert validate(child, num_vars=1).all()
    got = child.sizes.numpy()[:, 0].mean()
    want, uniform = _expected_hoist_size(tokens, 0.9), _expected_hoist_size(tokens, 0.5)
    proper = _expected_hoist_size(tokens, 0.9, proper=True)  # inner point never the subtree itself
    assert min(abs(want - uniform), abs(want - proper)) > 0.7  # the test can tell the rules apart
    assert abs(got - want) < 0.2, (got, want, uniform, proper)


def test_weighted_node_with_a_mask_and_engine_defaults():
    tr = generate(tf.constant([5, 5]), 2000, 64, FS, TerminalSet(2, 0.3, (-1, 1)), (2, 5))
    t = tr.types.numpy()
    mask = np.zeros_like(t, bool)
    mask[:, 1:] = t[:, 1:] != 0  # everything but the root
    idx, found = O.weighted_node(tf.constant([1, 1]), tr, 0.9, tf.constant(mask))
    idx = idx.numpy()
    assert found.numpy().all() and np.all(idx >= 1) and np.all(mask[np.arange(len(t)), idx])
    nf = ((t == 3) & mask).sum(1)
    nl = (((t == 1) | (t == 2)) & mask).sum(1)
    expect = np.mean(0.9 * nf / (0.9 * nf + 0.1 * nl))
    assert abs(np.mean(t[np.arange(len(t)), idx] == 3) - expect) < 0.03
    none, found = O.weighted_node(tf.constant([1, 1]), tr, 0.9, tf.zeros_like(tr.types, tf.bool))
    assert not found.numpy().any() and not none.numpy().any()
    # subtree mutation donors default to the initial trees' depth range
    assert GPConfig().subtree_depth is None


def test_random_state_default_is_fresh_and_an_int_fixes_the_run():
    est = SymbolicRegressor()
    assert est.get_params()["random_state"] is None
    a, b = est._seed(), est._seed()
    assert a != b  # a fresh seed per fit
    np.random.seed(7)
    c = est._seed()
    np.random.seed(7)
    assert est._seed() == c  # drawn from NumPy's global state, like check_random_state(None)
    x = np.random.RandomState(0).uniform(-1, 1, (40, 1))
    y = x[:, 0] ** 2
    kw = dict(population_size=60, generations=3, max_len=32, tournament_size=4)
    p1 = SymbolicRegressor(random_state=11, **kw).fit(x, y)
    p2 = SymbolicRegressor(random_state=11, **kw).fit(x, y)
    assert str(p1) == str(p2) and p1.best_mse_ == p2.best_mse_


def test_one_default_depth_range_for_initial_and_mutation_trees():
    """generate(), subtree_mutation(), GPConfig and both estimators share
    DEFAULT_DEPTH = (2, 5), both ends included (as gplearn's init_depth):
    full binary trees of depth 2..5 (7..63 nodes), never depth 6 (127
    nodes, which fit in 128)."""
    import inspect

    from tfevo.gp import SymbolicClassifier
    from tfevo.gp.generation import DEFAULT_DEPTH

    assert DEFAULT_DEPTH == (2, 5)
    assert inspect.signature(generate).parameters["depth"].default == DEFAULT_DEPTH
    assert inspect.signature(O.subtree_mutation).parameters["depth"].default == DEFAULT_DEPTH
    assert GPConfig().init_depth == DEFAULT_DEPTH
    assert SymbolicRegressor().init_depth == DEFAULT_DEPTH == SymbolicClassifier().init_depth
    ts = TerminalSet(1, 0.0, None)
    n = generate(SEED, 2000, 128, FS, ts, method="full").sizes.numpy()[:, 0]
    assert set(np.unique(n)) == {7, 15, 31, 63}
    # headless-chicken donors: the same depths, and by default as long as the trees
    # allow (no 32-node cap): a whole depth-5 donor (63 nodes) replaces a leaf
    leaves = from_prefix([["x0"]] * 3000, 128)
    child, ok = O.subtree_mutation(SEED, leaves, FS, ts, method="full")
    m = child.sizes.numpy()[:, 0]
    assert ok.numpy().all() and validate(child, num_vars=1).all()
    assert m.max() == 63 and set(np.unique(m)) <= {1, 3, 7, 15, 31, 63}


def test_auto_parsimony_is_gplearns_covariant_coefficient():
    """parsimony="auto": c = np.cov(length, error)[1, 0] / np.var(length)
    over the finite members (gplearn's formula), selection on f - c * len."""
    from tfevo.core import ConfigError
    from tfevo.gp.selection import covariant_parsimony, parsimony

    rng = np.random.RandomState(3)
    length = rng.randint(1, 60, 500)
    err = 0.01 * length + rng.exponential(1.0, 500)  # longer trees worse: c > 0
    f = (-err).astype(np.float32)
    f[[4, 77]] = [-np.inf, np.nan]  # worst members: left out of the statistics
    keep = np.isfinite(f)
    want = np.cov(length[keep], -f[keep].astype(np.float64))[1, 0] / np.var(length[keep])
    got = float(covariant_parsimony(tf.constant(f), tf.constant(length, tf.int32)))
    assert want > 0 and abs(got - want) <= 1e-5 * abs(want), (got, want)
    sel = parsimony(tf.constant(f), tf.constant(length, tf.int32), "auto").numpy()
    np.testing.assert_allclose(sel[keep], f[keep] - np.float32(want) * length[keep], rtol=1e-5)
    assert np.all(sel[~keep] == -np.inf)
    # equal lengths: no information, no penalty
    assert float(covariant_parsimony(tf.constant(f), tf.fill([500], 9))) == 0.0
    # accepted by the engine and the estimator (a gplearn setting), other strings refused
    GPConfig(parsimony="auto").validate()
    for bad in ("bogus", -0.1, float("nan")):
        try:
            GPConfig(parsimony=bad).validate()
        except ConfigError as e:
            assert "parsimony" in str(e)
        else:
            raise AssertionError(f"parsimony={bad!r} accepted")
    x = np.random.RandomState(0).uniform(-1, 1, (40, 1))
    kw = dict(population_size=60, generations=3, max_len=32, tournament_size=4, random_state=1)
    a = SymbolicRegressor(parsimony_coefficient="auto", **kw).fit(x, x[:, 0] ** 2)
    b = SymbolicRegressor(parsimony_coefficient="auto", **kw).fit(x, x[:, 0] ** 2)
    assert np.isfinite(a.best_mse_) and str(a) == str(b)


def test_auto_parsimony_steers_the_engines_selection():
    """The engine's "auto" selects exactly as a fixed coefficient equal to
    the population's covariant one, and otherwise than no parsimony."""
    from tfevo.gp import GeneticProgramming
    from tfevo.gp.selection import covariant_parsimony

    out = {}
    for key in ("none", "auto", "fixed"):
        gp = GeneticProgramming(GPConfig(popsize=400, max_len=64, functions=("add", "mul"), operators={},
                                         elite=0, tournament_size=4), seed=5)
        trees = gp.ask()
        n = trees.sizes.numpy()[:, 0]
        fit = -(0.01 * n + np.random.RandomState(0).exponential(1.0, 400)).astype(np.float32)
        c = {"none": 0.0, "auto": "auto", "fixed": float(covariant_parsimony(fit, n))}[key]
        gp = GeneticProgramming(dict(gp.config.__dict__, parsimony=c), seed=5)
        gp.tell(trees, fit)
        out[key] = gp.ask().sizes.numpy()[:, 0]
    assert np.array_equal(out["auto"], out["fixed"])
    assert out["auto"].mean() < out["none"].mean() - 1.0, (out["auto"].mean(), out["none"].mean())
