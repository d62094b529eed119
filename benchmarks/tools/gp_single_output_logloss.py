"""iris_vv with gplearn's classifier model on tfevo's engine: one output,
gplearn's log loss of its sigmoid (a ``make_fitness`` metric of
``SymbolicRegressor``), the classification harness's settings
(bench_gp_classify.py: population 1000, 50 generations, parsimony 0.001, ...),
seeds 0-4.  Prints the population's mean length at generations 0/10/25/49,
the returned program's length and the test AUC of its raw output.

  PYTHONPATH=. python benchmarks/tools/gp_single_output_logloss.py '{"demote_duplicates": false}'
"""

import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import bench_gp_classify as c  # noqa: E402


def logloss(y, p, w):  # gplearn's _log_loss of its sigmoid transformer
    with np.errstate(all="ignore"):
        s = 1 / (1 + np.exp(-p.astype(np.float64)))
    eps = 1e-15
    inv = np.clip(1 - s, eps, 1 - eps)
    s = np.clip(s, eps, 1 - eps)
    return np.average(-(y * np.log(s) + (1 - y) * np.log(inv)), weights=w)


def main():
    from sklearn.metrics import roc_auc_score

    from tfevo.gp import SymbolicRegressor, make_fitness

    overrides = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
    for seed in range(5):
        x, xt, y, yt = c.dataset("iris_vv", seed)
        kw = {**c.common(1000, 50, seed), **overrides}
        est = SymbolicRegressor(max_len=128, metric=make_fitness(function=logloss, greater_is_better=False),
                                stopping_criteria=None, **kw).fit(x, y)
        ml = est.run_details_["average_length"]
        auc = roc_auc_score(yt, est.predict(xt))
        print(json.dumps(overrides), "seed", seed, "mean len g0/10/25/49", [round(ml[g], 1) for g in (0, 10, 25, 49)],
              "returned", int(est.program_.sizes[0, 0]), "auc %.4f" % auc, flush=True)


if __name__ == "__main__":
    main()
