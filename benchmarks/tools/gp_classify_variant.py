"""iris_vv (bench_gp_classify.py) with tfevo's cross-entropy classifier and one set_params override, seeds 0-19.

Usage: PYTHONPATH=. python benchmarks/tools/gp_classify_variant.py '{"elite": 0}'
"""
import sys, json, numpy as np
import os
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..")); sys.path.insert(0, os.path.join(HERE, "..", ".."))
import bench_gp_classify as B
from sklearn.metrics import roc_auc_score, accuracy_score
kw = json.loads(sys.argv[1])
acc, auc = [], []
for s in range(20):
    x, xt, y, yt = B.dataset("iris_vv", s)
    est = B.make("tfevo_ce", 1000, 50, s).set_params(**kw).fit(x, y)
    acc.append(accuracy_score(yt, est.predict(xt))); auc.append(roc_auc_score(yt, est.decision_function(xt)))
print(kw, "median acc", np.median(acc), "median AUC", np.median(auc), flush=True)
