"""pyribs' archive reading API on tfevo's archives: retrieve, data, sample_elites (against pyribs)."""

import numpy as np
import pytest

from tfevo.core import ConfigError, ShapeError
from tfevo.qd import CVTArchive, GridArchive

RANGES = [(0, 1), (-2, 3)]


def _batch(rng, b, d):
    desc = rng.uniform([0, -2], [1, 3], (b, 2)).astype(np.float32)
    return rng.normal(size=(b, d)).astype(np.float32), rng.uniform(-40, 0, b).astype(np.float32), desc


def _ribs_pair(kind, soft):
    ribs_archives = pytest.importorskip("ribs.archives")
    if kind == "grid":
        return (GridArchive(3, [4, 5], RANGES, **soft),
                ribs_archives.GridArchive(solution_dim=3, dims=(4, 5), ranges=RANGES, seed=0, **soft))
    c = np.random.default_rng(0).uniform([0, -2], [1, 3], (15, 2))
    return (CVTArchive(3, ranges=RANGES, centroids=c, **soft),
            ribs_archives.CVTArchive(solution_dim=3, centroids=c, ranges=RANGES, seed=0,
                                     nearest_neighbors="brute_force", **soft))


@pytest.mark.parametrize("kind,soft", [("grid", {}), ("cvt", {"learning_rate": 0.5, "threshold_min": -30.0})])
def test_retrieve_data_and_sample_elites_match_pyribs(kind, soft):
    a, ra = _ribs_pair(kind, soft)
    rng = np.random.default_rng(1)
    for _ in range(3):
        sol, fit, desc = _batch(rng, 12, 3)
        a.add(sol, fit, desc)
        ra.add(sol.astype(np.float64), fit.astype(np.float64), desc.astype(np.float64))
    assert len(a) == len(ra) and not a.empty and a.field_list == ra.field_list
    np.testing.assert_array_equal(a.lower_bounds, ra.lower_bounds)
    np.testing.assert_array_equal(a.upper_bounds, ra.upper_bounds)
    q = rng.uniform([0, -2], [1, 3], (40, 2))
    occ, got = a.retrieve(q)
    r_occ, want = ra.retrieve(q)
    np.testing.assert_array_equal(occ, r_occ)
    assert 0 < occ.sum() < len(q)
    for f in ra.field_list:
        np.testing.assert_allclose(got[f], want[f], rtol=1e-6, equal_nan=True, err_msg=f)
    one = a.retrieve_single(q[0])
    assert one[0] == occ[0] and one[1]["index"] == got["index"][0]
    # data(): pyribs lists the elites in the order their cells were filled, tfevo in cell order
    mine, theirs = a.data(), ra.data()
    order = np.argsort(theirs["index"])
    for f in ra.field_list:
        np.testing.assert_allclose(mine[f], theirs[f][order], rtol=1e-6, err_msg=f)
    np.testing.assert_array_equal(a.data("objective"), mine["objective"])
    obj, meas = a.data(["objective", "measures"], return_type="tuple")
    np.testing.assert_array_equal(meas, mine["measures"])
    assert list(a.data(return_type="pandas").columns) == list(ra.data(return_type="pandas").columns)
    with pytest.raises(ConfigError, match=r"'fitness_x'.*\['solution', 'objective'"):
        a.data("fitness_x")
    with pytest.raises(ConfigError, match="measures must be finite"):
        a.retrieve([[0.5, np.nan]])
    with pytest.raises(ShapeError, match="descriptors must have shape"):
        a.retrieve(np.zeros((2, 3)))
    # sample_elites: elites of the archive, uniformly (with and without replacement), seeded
    s = a.sample_elites(400, seed=5)
    occ_s, at = a.retrieve(s["measures"])
    assert occ_s.all()
    np.testing.assert_array_equal(at["solution"], s["solution"])
    np.testing.assert_array_equal(s["index"], a.sample_elites(400, seed=5)["index"])
    counts = np.unique(s["index"], return_counts=True)[1]
    assert len(counts) == len(a) and counts.min() > 0.3 * 400 / len(a)
    u = a.sample_elites(len(a), replace=False, seed=1)["index"]
    assert sorted(u) == sorted(mine["index"])
    with pytest.raises(ConfigError, match="distinct"):
        a.sample_elites(len(a) + 1, replace=False)
    with pytest.raises(IndexError, match="empty"):
        _ribs_pair(kind, soft)[0].sample_elites(1)
