"""bench_gp_classify.py's tfevo cross-entropy classifier with one set_params override.

Usage: PYTHONPATH=. python benchmarks/tools/gp_classify_variant.py '{"elite": 0}' [iris_vv[,wine_01,...]] [0-19]

Prints per seed: data set, seed, test accuracy, test AUC (from decision_function), training
accuracy and program length; then the medians per data set.
"""
import sys, json, numpy as np
import os
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..")); sys.path.insert(0, os.path.join(HERE, "..", ".."))
import bench_gp_classify as B
from sklearn.metrics import roc_auc_score, accuracy_score
kw = json.loads(sys.argv[1])
datasets = (sys.argv[2] if len(sys.argv) > 2 else "iris_vv").split(",")
seeds = B._range(sys.argv[3] if len(sys.argv) > 3 else "0-19")
for ds in datasets:
    acc, auc, tr, ln = [], [], [], []
    for s in seeds:
        x, xt, y, yt = B.dataset(ds, s)
        est = B.make("tfevo_ce", 1000, 50, s).set_params(**kw).fit(x, y)
        acc.append(accuracy_score(yt, est.predict(xt))); auc.append(roc_auc_score(yt, est.decision_function(xt)))
        tr.append(accuracy_score(y, est.predict(x))); ln.append(int(np.asarray(est.program_.sizes)[0, 0]))
        print(ds, s, round(acc[-1], 4), round(auc[-1], 4), round(tr[-1], 4), ln[-1], flush=True)
    print(ds, kw, "median acc", np.median(acc), "median AUC", np.median(auc), "mean AUC", np.mean(auc),
          "median len", np.median(ln), "median train acc", np.median(tr), flush=True)
