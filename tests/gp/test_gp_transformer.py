"""SymbolicTransformer: scikit-learn's estimator checks, gplearn's choice of
components (hall of fame, least-correlated greedy rule) and fitness values,
pipelines, persistence and repeatability."""

import pickle

import numpy as np
import pytest
from sklearn.exceptions import NotFittedError
from sklearn.utils.estimator_checks import parametrize_with_checks

from tfevo.core import ConfigError
from tfevo.gp import SymbolicTransformer, make_fitness
from tfevo.gp.sklearn_run import hall_of_fame, least_correlated
from _roundtrip import saved_copies  # tests/ is on sys.path

SMALL = dict(population_size=120, generations=6, max_len=32, tournament_size=5, hall_of_fame=20, n_components=3,
             p_subtree_mutation=0.0, p_hoist_mutation=0.0, p_point_mutation=0.0, operators={"point": 0.05})

RNG = np.random.RandomState(0)
X = RNG.uniform(-1, 1, (150, 3))
Y = X[:, 0] * X[:, 1] + np.sin(2 * X[:, 2]) + 0.1 * RNG.normal(size=150)


def _expected_failed(est):
    return {}


@parametrize_with_checks([SymbolicTransformer(**SMALL)], expected_failed_checks=_expected_failed)
def test_sklearn_estimator_checks(estimator, check):
    check(estimator)


def _gplearn_rule(outputs, n_components):
    """gplearn's greedy rule restated with loops: among the remaining
    candidates (best fitness first), the pair of largest |correlation|,
    the first in row-major order, a NaN counting as the largest (numpy's
    argmax), loses its later member; repeat until n_components remain."""
    kept = list(range(len(outputs)))
    while len(kept) > n_components:
        best, pair = None, None
        for a in kept:
            for b in kept:
                if a == b:
                    continue
                with np.errstate(divide="ignore", invalid="ignore"):
                    c = abs(np.corrcoef(outputs[a], outputs[b])[0, 1])
                if np.isnan(c):
                    best, pair = c, (a, b)
                    break
                if best is None or c > best:
                    best, pair = c, (a, b)
            if best is not None and np.isnan(best):
                break
        kept.remove(max(pair))
    return kept


def test_least_correlated_is_gplearns_rule_on_given_outputs():
    rng = np.random.RandomState(1)
    base = rng.normal(size=(6, 40))
    for trial in range(20):
        mix = rng.normal(size=(25, 6)) * (rng.uniform(size=(25, 6)) < 0.4)
        out = mix @ base + 0.05 * rng.normal(size=(25, 40))
        out[rng.randint(25)] = 3.0  # a constant output: NaN correlations, dropped first as in gplearn
        if trial % 2:
            out[rng.randint(25)] = out[rng.randint(25)]  # exact duplicates
        for n in (1, 5, 12, 25):
            assert least_correlated(out, n) == _gplearn_rule(out, n), (trial, n)
    assert least_correlated(out[:1], 1) == [0]


def test_hall_of_fame_order_and_spearman_compares_ranks():
    f = np.random.RandomState(0).randint(0, 6, 300) / 5.0  # many ties
    assert hall_of_fame(f, 40, lower_is_better=False).tolist() == f.argsort()[::-1][:40].tolist()
    assert hall_of_fame(f, 40, lower_is_better=True).tolist() == f.argsort()[:40].tolist()
    assert hall_of_fame(np.array([0.2, 0.9, 0.5, 0.1]), 3, lower_is_better=False).tolist() == [1, 2, 0]
    # monotone transforms of one output: perfectly rank-correlated, not linearly
    x = np.linspace(0.1, 3, 50)
    out = np.stack([x, np.exp(3 * x), np.sin(7 * x)])
    from scipy.stats import rankdata

    ranks = np.apply_along_axis(rankdata, 1, out)
    assert least_correlated(out, 2, spearman=True) == _gplearn_rule(ranks, 2) == [0, 2]


def test_components_are_gplearns_choice_from_gplearns_final_generation():
    """gplearn's own run: our hall of fame and greedy rule, applied to its final
    generation and raw fitnesses, keep the programs it keeps."""
    from gplearn.genetic import SymbolicTransformer as GPLearnTransformer

    for seed, metric in ((0, "pearson"), (0, "spearman"), (3, "pearson"), (3, "spearman")):
        ref = GPLearnTransformer(population_size=200, generations=3, hall_of_fame=40, n_components=6,
                                 metric=metric, random_state=seed).fit(X, Y)
        final = ref._programs[-1]
        raw = np.array([p.raw_fitness_ for p in final])
        assert len(set(raw)) < 150  # ties: their order matters
        best = hall_of_fame(raw, 40, lower_is_better=False)
        outputs = np.array([final[i].execute(X) for i in best])
        keep = best[least_correlated(outputs, 6, spearman=metric == "spearman")]
        want = np.array([p.execute(X) for p in ref._best_programs])
        np.testing.assert_array_equal(np.array([final[i].execute(X) for i in keep]), want)


@pytest.mark.parametrize("metric", ["pearson", "spearman"])
def test_component_fitness_is_gplearns_correlation_of_its_output(metric):
    from gplearn.fitness import _fitness_map

    st = SymbolicTransformer(**SMALL, metric=metric, random_state=2).fit(X, Y)
    Z = st.transform(X)
    assert Z.shape == (150, 3) and Z.dtype == np.float64 and len(st) == 3
    want = [_fitness_map[metric](Y.astype(np.float32).astype(np.float64), z, np.ones(150)) for z in Z.T]
    np.testing.assert_allclose(st.fitness_, want, rtol=2e-5)
    assert list(st.fitness_) == sorted(st.fitness_, reverse=True)  # hall-of-fame order
    assert max(st.fitness_) == st.run_details_["best_fitness"][-1]
    assert min(st.fitness_) > 0.5


def test_pipeline_with_ridge_on_original_and_constructed_features():
    from sklearn.linear_model import Ridge
    from sklearn.pipeline import make_pipeline, make_union
    from sklearn.preprocessing import FunctionTransformer

    st = SymbolicTransformer(**SMALL, random_state=4)
    pipe = make_pipeline(make_union(FunctionTransformer(feature_names_out="one-to-one"), st), Ridge()).fit(X[:100], Y[:100])
    fitted = pipe[0].transformer_list[1][1]
    manual = Ridge().fit(np.hstack([X[:100], fitted.transform(X[:100])]), Y[:100])
    np.testing.assert_allclose(pipe.predict(X[100:]), manual.predict(np.hstack([X[100:], fitted.transform(X[100:])])))
    base = Ridge().fit(X[:100], Y[:100]).score(X[100:], Y[100:])
    assert pipe.score(X[100:], Y[100:]) > base  # the constructed features carry the product and the sine
    names = pipe[0].get_feature_names_out()
    assert list(names[-3:]) == ["symbolictransformer__symbolictransformer0", "symbolictransformer__symbolictransformer1",
                                "symbolictransformer__symbolictransformer2"]
    piped = make_pipeline(SymbolicTransformer(**SMALL, random_state=4), Ridge()).fit(X[:100], Y[:100])
    np.testing.assert_array_equal(piped[0].transform(X), fitted.transform(X))


def test_same_seed_same_components_and_persistence():
    a = SymbolicTransformer(**SMALL, random_state=5)
    Za = a.fit_transform(X, Y)
    b = SymbolicTransformer(**SMALL, random_state=5).fit(X, Y)
    np.testing.assert_array_equal(b.transform(X), Za)
    assert str(a) == str(b)
    c = SymbolicTransformer(**SMALL, random_state=6).fit(X, Y)
    assert not np.array_equal(c.transform(X), Za)
    for other in saved_copies(a):
        np.testing.assert_array_equal(other.transform(X), Za)
        assert other.engine_ is None


def test_warm_start_equals_one_long_run():
    one = SymbolicTransformer(**{**SMALL, "generations": 6}, random_state=7).fit(X, Y)
    ws = SymbolicTransformer(**{**SMALL, "generations": 3}, warm_start=True, random_state=7).fit(X, Y)
    ws = pickle.loads(pickle.dumps(ws))
    ws.set_params(generations=6).fit(X, Y)
    np.testing.assert_array_equal(ws.transform(X), one.transform(X))


def test_exports_name_features_and_compute_the_transform():
    pd = pytest.importorskip("pandas")
    df = pd.DataFrame(X, columns=["age", "bmi", "bp"])
    st = SymbolicTransformer(**SMALL, random_state=8).fit(df, Y)
    text = str(st)
    assert text.startswith("[") and text.count("\n") == 2 and ("age" in text or "bmi" in text or "bp" in text)
    exprs = st.to_sympy(simplify=False, exact=True)
    assert len(exprs) == 3 and {s.name for e in exprs for s in e.free_symbols} <= {"age", "bmi", "bp"}
    import sympy

    Z = st.transform(df)
    for k, e in enumerate(exprs):
        f = sympy.lambdify([sympy.Symbol(n) for n in ("age", "bmi", "bp")], e, "numpy")
        val = np.broadcast_to(np.asarray(f(*X.astype(np.float32).T.astype(np.float64)), np.float64), (150,))
        np.testing.assert_allclose(val, Z[:, k], rtol=1e-4, atol=1e-4)
    assert st.to_sympy(component=1, simplify=False, exact=True) == exprs[1]
    comps = list(st)  # gplearn's est[i] / iteration over the components
    assert len(comps) == len(st) == 3 and text == "[" + ",\n ".join(str(c) for c in comps) + "]"
    for k, c in enumerate(comps):
        np.testing.assert_array_equal(c.execute(X), Z[:, k])
        assert c.raw_fitness_ == st.fitness_[k] and c.length_ == int(st.programs_.sizes[k, 0])
        assert c.to_sympy(simplify=False, exact=True) == exprs[k]
    assert str(st[-1]) == str(st[2])
    with pytest.raises(IndexError):
        st[3]
    np.testing.assert_allclose(st.to_keras(component=2).predict(X.astype(np.float32), verbose=0).reshape(-1),
                               Z[:, 2], rtol=1e-5, atol=1e-5)


def test_unfitted_and_bad_settings_refused():
    with pytest.raises(NotFittedError):
        SymbolicTransformer().transform(X)
    with pytest.raises(NotFittedError):
        SymbolicTransformer().get_feature_names_out()
    assert len(SymbolicTransformer()) == 0
    for kw, match in ((dict(hall_of_fame=121), r"hall_of_fame must be None or an integer in \[1, 120\]"),
                      (dict(hall_of_fame=0), "hall_of_fame"),
                      (dict(n_components=21), r"n_components must be None or an integer in \[1, 20\].*got 21"),
                      (dict(metric="mse"), "metric must be one of 'pearson', 'spearman'"),
                      (dict(p_crossover=1.2), "p_crossover")):
        with pytest.raises(ConfigError, match=match):
            SymbolicTransformer(**{**SMALL, **kw}).fit(X, Y)
    with pytest.raises(ValueError, match="NaN"):
        SymbolicTransformer(**SMALL).fit(np.where(X > 0.9, np.nan, X), Y)
    with pytest.raises(ValueError, match="requires y"):
        SymbolicTransformer(**SMALL).fit(X, None)
    st = SymbolicTransformer(**SMALL, random_state=0).fit(X, Y)
    with pytest.raises(ValueError, match="features"):
        st.transform(X[:, :2])


def test_sample_weight_weights_the_fitness_as_gplearn():
    from gplearn.fitness import _fitness_map

    w = np.random.RandomState(9).uniform(0, 2, 150)
    w[:20] = 0.0
    st = SymbolicTransformer(**SMALL, random_state=3).fit(X, Y, sample_weight=w)
    Z = st.transform(X)
    want = [_fitness_map["pearson"](Y.astype(np.float32).astype(np.float64), z, w) for z in Z.T]
    np.testing.assert_allclose(st.fitness_, want, rtol=2e-5)
    ones = SymbolicTransformer(**SMALL, random_state=3).fit(X, Y, sample_weight=np.full(150, 2.0))
    np.testing.assert_array_equal(ones.transform(X), SymbolicTransformer(**SMALL, random_state=3).fit_transform(X, Y))


def test_none_sizes_and_make_fitness_metric():
    small = {**SMALL, "population_size": 30, "generations": 2}
    st = SymbolicTransformer(**{**small, "hall_of_fame": None, "n_components": None}, random_state=0).fit(X, Y)
    assert len(st) <= 30 and st.transform(X).shape == (150, len(st))

    def neg_mae(y, p, w):
        return -np.average(np.abs(p - y), weights=w)

    def mae(y, p, w):
        return np.average(np.abs(p - y), weights=w)

    for fn, gib in ((neg_mae, True), (mae, False)):
        m = make_fitness(function=fn, greater_is_better=gib)
        st = SymbolicTransformer(**small, metric=m, stopping_criteria=None, random_state=1).fit(X, Y)
        Z = st.transform(X).astype(np.float32).astype(np.float64)
        y32 = Y.astype(np.float32).astype(np.float64)
        want = np.array([fn(y32, z, np.ones(150)) for z in Z.T])
        np.testing.assert_allclose(st.fitness_, want, rtol=1e-5)
        assert list(st.fitness_) == sorted(st.fitness_, reverse=gib)
