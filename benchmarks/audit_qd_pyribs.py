"""Audit: tfevo.qd archives against pyribs 0.12 on identical inserts.

Feeds the same batches (collisions within a batch, integer-valued objectives for ties, descriptors on
bin edges, exactly on the upper bound and outside the box, and a few NaN/inf candidates that tfevo
drops while pyribs refuses them, so they are removed before pyribs' add) to a tfevo archive and to
pyribs' archive with the same settings, and prints, per case, how many cells, objectives and solutions
differ and the largest differences of the stats (pyribs' ArchiveStats against tfevo's metrics).
pyribs runs in float64 (its default) and tfevo in float32; the inputs are float32 values.

    python benchmarks/audit_qd_pyribs.py [--batches 40] [--batch 64]
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import tensorflow as tf

from ribs.archives import CVTArchive as RibsCVT
from ribs.archives import GridArchive as RibsGrid
from tfevo.qd import CVTArchive, ESEmitter, GridArchive, MAPElites


def batches(seed, n, b, d, integers):
    rng = np.random.default_rng(seed)
    edges = np.linspace(-1, 1, 9).astype(np.float32)  # every bin edge of an 8-bin axis over [-1, 1]
    for _ in range(n):
        desc = rng.uniform(-1.3, 1.3, (b, 2)).astype(np.float32)
        desc[: b // 8, 0] = rng.choice(edges, b // 8)  # on edges (incl. exactly low and high)
        desc[b // 8: b // 4] = desc[: b // 8]  # collisions within the batch
        fit = (rng.integers(-3, 6, b) if integers else rng.normal(1.0, 2.0, b)).astype(np.float32)
        sol = rng.normal(size=(b, d)).astype(np.float32)
        fit[rng.random(b) < 0.03] = np.nan
        desc[rng.random(b) < 0.03, 1] = np.inf
        yield sol, fit, desc


def ribs_cells(ra, cells):
    data = ra.data(["index", "objective", "solution", "threshold"])
    occ = np.zeros(cells, bool)
    obj, thr = np.full(cells, np.nan), np.full(cells, np.nan)
    sol = np.zeros((cells, ra.solution_dim))
    i = np.asarray(data["index"])
    occ[i], obj[i], sol[i], thr[i] = True, data["objective"], data["solution"], data["threshold"]
    return occ, obj, sol, thr


def compare(ours, theirs, n, b, integers, seed):
    d = ours.solution_dim
    worst = {"cells": 0, "objective": 0, "solution": 0, "threshold_abs": 0.0, "status": 0, "stats_rel": 0.0,
             "obj_max_differs": 0}
    for sol, fit, desc in batches(seed, n, b, d, integers):
        res = ours.add(sol, fit, desc)
        ok = np.isfinite(fit) & np.all(np.isfinite(desc), 1)
        info = theirs.add(sol[ok].astype(np.float64), fit[ok].astype(np.float64), desc[ok].astype(np.float64))
        entered = res.status.numpy()[ok] > 0
        # tfevo reports pyribs' status only for the candidate that entered its cell
        worst["status"] += int((res.status.numpy()[ok][entered] != info["status"][entered]).sum())
        occ, obj, rsol, thr = ribs_cells(theirs, ours.num_cells)
        o = ours.occupied.numpy()[:-1]
        worst["cells"] += int((o != occ).sum())
        both = o & occ
        worst["objective"] += int((ours.fitness.numpy()[:-1][both] != obj[both].astype(np.float32)).sum())
        worst["solution"] += int((ours.solutions.numpy()[:-1][both] != rsol[both].astype(np.float32)).any(1).sum())
        if ours.soft:
            worst["threshold_abs"] = max(worst["threshold_abs"], float(np.abs(
                ours.threshold.numpy()[:-1][both].astype(np.float64) - thr[both]).max(initial=0)))
        m, s = ours.metrics(), theirs.stats
        pairs = [(m["size"], s.num_elites), (m["coverage"], s.coverage), (m["qd_score"], s.qd_score),
                 (m["mean_fitness"], s.obj_mean)]
        if "norm_qd_score" in m:
            pairs.append((m["norm_qd_score"], s.norm_qd_score))
        for a, r in pairs:
            worst["stats_rel"] = max(worst["stats_rel"], abs(float(a) - float(r)) / max(1.0, abs(float(r))))
        worst["obj_max_differs"] += int(m["max_fitness"] != np.float32(s.obj_max))
    return worst


def result_archive_case(seed, iterations):
    """MAPElites(CMA-MAE soft archive, result_archive) vs pyribs' soft archive + result archive fed the
    batches tfevo asked (pyribs' archives are only fed, not searched)."""
    kw = dict(dims=[10, 10], ranges=[(-1, 1), (-1, 1)])
    soft = GridArchive(6, learning_rate=0.05, threshold_min=-2.0, **kw)
    res = GridArchive(6, **kw)
    me = MAPElites(soft, [ESEmitter(6, 8, num_emitters=2, sigma=0.3, ranker="imp", selection_rule="mu",
                                    restart_rule="basic", seed=seed)],
                   init_bounds=(-1, 1), seed=seed, result_archive=res)
    rk = dict(solution_dim=6, dims=[10, 10], ranges=[(-1, 1), (-1, 1)])
    rsoft, rres = RibsGrid(learning_rate=0.05, threshold_min=-2.0, **rk), RibsGrid(**rk)
    for _ in range(iterations):
        x = me.ask()
        xn = x.numpy()
        f = (-np.sum(xn ** 2, 1) + 0.5 * np.cos(3 * xn[:, 0])).astype(np.float32)
        dsc = np.tanh(xn[:, :2]).astype(np.float32)
        me.tell(x, f, dsc)
        rsoft.add(xn.astype(np.float64), f.astype(np.float64), dsc.astype(np.float64))
        rres.add(xn.astype(np.float64), f.astype(np.float64), dsc.astype(np.float64))
    out = {}
    for name, ours, theirs in (("soft", soft, rsoft), ("result", res, rres)):
        occ, obj, rsol, thr = ribs_cells(theirs, ours.num_cells)
        o = ours.occupied.numpy()[:-1]
        same = o & occ
        out[name] = {"cells_differ": int((o != occ).sum()), "filled": int(o.sum()),
                     "objective_differ": int((ours.fitness.numpy()[:-1][same] != obj[same].astype(np.float32)).sum())}
    m, s = me.metrics(), rres.stats
    out["metrics_vs_result_stats"] = {"qd_score": [m["qd_score"], float(s.qd_score)],
                                      "max_fitness": [m["max_fitness"], float(s.obj_max)]}
    out["soft_max_vs_pyribs_obj_max"] = [soft.metrics()["max_fitness"], float(rsoft.stats.obj_max)]
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batches", type=int, default=40)
    p.add_argument("--batch", type=int, default=64)
    args = p.parse_args()
    grid = dict(dims=[8, 5], ranges=[(-1, 1), (-1, 1)])
    cent = np.random.default_rng(7).uniform(-1, 1, (40, 2)).astype(np.float32)
    cases = []
    for soft in ({}, {"learning_rate": 0.01, "threshold_min": -1.0}, {"learning_rate": 0.5, "threshold_min": 0.0},
                 {"learning_rate": 1.0, "threshold_min": 0.0}, {"learning_rate": 0.0, "threshold_min": -2.0}):
        for offset in (0.0, -4.0):
            for integers in (True, False):
                cases.append(("grid", soft, offset, integers,
                              GridArchive(5, qd_offset=offset, **grid, **soft),
                              RibsGrid(solution_dim=5, qd_score_offset=offset, **grid, **soft)))
                cases.append(("cvt", soft, offset, integers,
                              CVTArchive(5, 40, [(-1, 1), (-1, 1)], centroids=cent, qd_offset=offset, **soft),
                              RibsCVT(solution_dim=5, centroids=cent.astype(np.float64), ranges=[(-1, 1), (-1, 1)],
                                      qd_score_offset=offset, nearest_neighbors="brute_force", **soft)))
    for i, (kind, soft, offset, integers, ours, theirs) in enumerate(cases):
        w = compare(ours, theirs, args.batches, args.batch, integers, seed=i)
        print(json.dumps({"archive": kind, **soft, "qd_offset": offset, "integer_objectives": integers, **w}))
    for seed in (0, 1, 2):
        print(json.dumps({"case": "MAPElites result_archive", "seed": seed, **result_archive_case(seed, 30)}))


if __name__ == "__main__":
    main()
