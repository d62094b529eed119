"""Tree-GP classification quality: tfevo's SymbolicClassifier vs gplearn's on bundled binary data.

Usage:
  python benchmarks/bench_gp_classify.py run --lib tfevo|tfevo_ce|gplearn [--seeds 0-9]
         [--datasets breast_cancer,iris_vv,wine_01] [--pop 1000] [--gens 50] --out results.jsonl
  python benchmarks/bench_gp_classify.py table results.jsonl [more.jsonl ...]

Data (scikit-learn's bundled sets, binary problems): ``breast_cancer``
(569 x 30), ``iris_vv`` (iris versicolor vs virginica, the two classes that
overlap: 100 x 4), ``wine_01`` (wine classes 0 vs 1: 130 x 13).  Split 70/30,
stratified, by the run's seed; test accuracy and ROC AUC (from
``predict_proba``, and as ``scoring="roc_auc"`` computes it: from
``decision_function`` where the estimator has one, tfevo's, else from
``predict_proba``, gplearn's).

Both libraries get the same settings: population, generations, functions
{add, sub, mul, div}, constants in [-1, 1], tournament 20, ramped
half-and-half with each library's default depth range (gplearn's
``init_depth=(2, 6)``: depths 2..6, its ``_Program`` draws ``randint(2, 6 +
1)``; tfevo's default ``(2, 5)``, both ends included), p_crossover
0.9, subtree / hoist / point mutation 0.01 each, p_point_replace 0.05,
parsimony 0.001.  Each library keeps its own classifier model: gplearn one
tree through a sigmoid, trained on log loss; tfevo one output per class
(``decision = out1 - out0``), trained on accuracy (``--lib tfevo``, its
default) or on the softmax cross-entropy (``--lib tfevo_ce``, the
counterpart of gplearn's log loss).
"""

from __future__ import annotations

import json
import os
import sys
import time

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_gp_quality import _range, read_records, run_table_cli  # noqa: E402

DATASETS = ("breast_cancer", "iris_vv", "wine_01")
FUNCS = ("add", "sub", "mul", "div")


def dataset(name, seed):
    from sklearn.datasets import load_breast_cancer, load_iris, load_wine
    from sklearn.model_selection import train_test_split

    if name == "breast_cancer":
        x, y = load_breast_cancer(return_X_y=True)
    elif name == "iris_vv":
        x, y = load_iris(return_X_y=True)
        x, y = x[y > 0], (y[y > 0] == 2).astype(int)
    elif name == "wine_01":
        x, y = load_wine(return_X_y=True)
        x, y = x[y < 2], y[y < 2]
    else:
        raise SystemExit(f"unknown data set {name!r}; known: {', '.join(DATASETS)}")
    return train_test_split(np.asarray(x, np.float64), y, test_size=0.3, random_state=seed, stratify=y)


def common(pop, gens, seed):
    return dict(population_size=pop, generations=gens, tournament_size=20, function_set=FUNCS,
                const_range=(-1.0, 1.0), parsimony_coefficient=0.001, p_crossover=0.9, p_subtree_mutation=0.01,
                p_hoist_mutation=0.01, p_point_mutation=0.01, p_point_replace=0.05, random_state=seed)


def make(lib, pop, gens, seed, overrides=None):
    if lib == "gplearn":
        from gplearn.genetic import SymbolicClassifier

        return SymbolicClassifier(init_depth=(2, 6), n_jobs=1, **common(pop, gens, seed))
    from tfevo.gp import SymbolicClassifier

    fitness = "crossentropy" if lib == "tfevo_ce" else "accuracy"
    kw = dict(max_len=128, fitness=fitness, **common(pop, gens, seed))  # tfevo's default init_depth
    kw.update(overrides or {})
    return SymbolicClassifier(**kw)


def program_len(lib, est):
    return int(est._program.length_) if lib == "gplearn" else int(np.asarray(est.program_.sizes)[0, 0])


def run(args):
    from sklearn.metrics import accuracy_score, roc_auc_score

    overrides = json.loads(args.tfevo_set) if args.tfevo_set else {}
    if overrides and args.lib == "gplearn":
        raise SystemExit("--tfevo-set is for the tfevo libs")

    for s in _range(args.seeds):
        for name in [d for d in args.datasets.split(",") if d]:
            x, xt, y, yt = dataset(name, s)
            est = make(args.lib, args.pop, args.gens, s, overrides)
            c0, t0 = time.process_time(), time.perf_counter()
            est.fit(x, y)
            cpu, wall = time.process_time() - c0, time.perf_counter() - t0
            with np.errstate(all="ignore"):
                p = np.asarray(est.predict_proba(xt), np.float64)[:, 1]
                acc = float(accuracy_score(yt, est.predict(xt)))
                train_acc = float(accuracy_score(y, est.predict(x)))
                auc = float(roc_auc_score(yt, np.nan_to_num(p, nan=0.5)))
                # what scoring="roc_auc" uses: decision_function when there is one (tfevo), else predict_proba
                d = est.decision_function(xt) if hasattr(est, "decision_function") else p
                auc_scorer = float(roc_auc_score(yt, np.nan_to_num(np.asarray(d, np.float64), nan=0.0)))
                ties = int(len(p) - len(np.unique(p)))
            rec = dict(lib=args.lib, problem=name, seed=s, pop=args.pop, gens=args.gens, test_acc=acc,
                       test_auc=auc, test_auc_scorer=auc_scorer, proba_ties=ties, train_acc=train_acc, length=program_len(args.lib, est),
                       program=str(est._program) if args.lib == "gplearn" else str(est),
                       cpu_s=round(cpu, 2), wall_s=round(wall, 2))
            if overrides:
                rec["tfevo_set"] = overrides
            with open(args.out, "a") as f:
                f.write(json.dumps(rec) + "\n")
            print(name, s, args.lib, f"acc={acc:.4f} auc={auc:.4f} auc(scorer)={auc_scorer:.4f} ties={ties} train={train_acc:.4f} len={rec['length']} "
                  f"cpu={cpu:.1f}s", flush=True)


def table(args):
    from scipy.stats import mannwhitneyu

    recs = read_records(args.files)
    by = {}
    for r in recs:
        by.setdefault((r["problem"], r["lib"]), {})[r["seed"]] = r
    libs = [lib for lib in ("tfevo", "tfevo_ce") if any(k[1] == lib for k in by)]
    print("| data set | tfevo variant | seeds (both) | tfevo median test acc | gplearn median test acc "
          "| tfevo median test AUC | gplearn median test AUC | MWU p acc / AUC | met (acc and AUC) "
          "| tfevo / gplearn median len | tfevo / gplearn CPU s/run |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for pr in sorted({r["problem"] for r in recs}):
        b = by.get((pr, "gplearn"), {})
        for lib in libs:
            a = by.get((pr, lib), {})
            seeds = sorted(set(a) & set(b))
            if not seeds:
                continue

            def v(d, key):
                # gplearn has no decision_function: its scorer AUC is the predict_proba one
                return np.array([d[s].get(key, d[s]["test_auc"]) for s in seeds], np.float64)

            aa, ba, au, bu = v(a, "test_acc"), v(b, "test_acc"), v(a, args.auc), v(b, args.auc)
            pa = mannwhitneyu(aa, ba).pvalue if np.any(aa != ba) else 1.0
            pu = mannwhitneyu(au, bu).pvalue if np.any(au != bu) else 1.0
            met = np.median(aa) >= np.median(ba) - 1e-12 and np.median(au) >= np.median(bu) - 1e-12  # equal medians: met
            print(f"| {pr} | {lib} | {len(seeds)} | {np.median(aa):.4f} | {np.median(ba):.4f} | {np.median(au):.4f} "
                  f"| {np.median(bu):.4f} | {pa:.2g} / {pu:.2g} | {'yes' if met else '**no**'} "
                  f"| {np.median(v(a, 'length')):.0f} / {np.median(v(b, 'length')):.0f} "
                  f"| {np.median(v(a, 'cpu_s')):.1f} / {np.median(v(b, 'cpu_s')):.1f} |")


def main():
    run_table_cli(__doc__, run, table, libs=("tfevo", "tfevo_ce", "gplearn"), estimator="SymbolicClassifier",
                  run_args=[(("--seeds",), dict(default="0-9")), (("--datasets",), dict(default=",".join(DATASETS)))],
                  table_args=[(("--auc",), dict(default="test_auc", choices=("test_auc", "test_auc_scorer"),
                               help="AUC from predict_proba (default) or from what scoring='roc_auc' uses"))])


if __name__ == "__main__":
    main()
