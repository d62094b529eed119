"""Compares records of bench_gp_quality.py / bench_gp_classify.py runs:
tfevo variants against each other (paired by problem and seed) and against
gplearn (unpaired and paired by seed).

Usage:
  python benchmarks/tools/gp_quality_compare.py KEY A.jsonl[,A2.jsonl] B.jsonl[,B2.jsonl] [--names a,b]

KEY is the record field compared: ``test_mse`` (lower is better), or
``test_r2`` / ``test_auc_scorer`` / ``test_acc`` (higher is better).  A and
B are comma-separated record files, each side one library or variant (the
``lib`` field is ignored).  Per problem it prints the medians, the exact
recoveries (``test_mse`` only), how often A is better / worse / tied on the
seeds both have (gplearn's ``test_auc_scorer`` is its ``test_auc``), and two p-values: the Wilcoxon signed-rank test paired by
seed and the Mann-Whitney U test (unpaired).  A missing value (a
non-finite score) counts as the worst.
"""

from __future__ import annotations

import argparse
import json

import numpy as np
from scipy.stats import mannwhitneyu, wilcoxon


def load(paths):
    by = {}
    for p in paths.split(","):
        with open(p) as f:
            for line in f:
                if line.strip():
                    r = json.loads(line)
                    by.setdefault(r["problem"], {})[r["seed"]] = r
    return by


def value(rec, key, bad):
    if key == "test_auc_scorer" and key not in rec:  # gplearn has no decision_function: its AUC is predict_proba's
        key = "test_auc"
    v = rec.get(key)
    return bad if v is None else v


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("key")
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--names", default="A,B")
    args = ap.parse_args()
    na, nb = args.names.split(",")
    lower = args.key == "test_mse"
    bad = np.inf if lower else -np.inf
    A, B = load(args.a), load(args.b)
    exact = args.key == "test_mse"
    print(f"| problem | seeds | {na} median | {nb} median |" + (f" {na} exact | {nb} exact |" if exact else "")
          + f" {na} better / worse / tie | Wilcoxon p (paired) | Mann-Whitney p |")
    print("|---|---|---|---|" + ("---|---|" if exact else "") + "---|---|---|")
    key = lambda n: (n.startswith("nguyen"), int(n[6:]) if n[6:].isdigit() else 0, n)  # noqa: E731
    for pr in sorted(set(A) & set(B), key=key):
        seeds = sorted(set(A[pr]) & set(B[pr]))
        if not seeds:
            continue
        va = np.array([value(A[pr][s], args.key, bad) for s in seeds], float)
        vb = np.array([value(B[pr][s], args.key, bad) for s in seeds], float)
        if exact:  # below the exactness threshold the differences are float round-off
            va, vb = np.where(va <= 1e-8, 0.0, va), np.where(vb <= 1e-8, 0.0, vb)
        sign = -1.0 if lower else 1.0
        better = int(np.sum(sign * (va - vb) > 0))
        worse = int(np.sum(sign * (va - vb) < 0))
        tie = len(seeds) - better - worse
        fa, fb = np.nan_to_num(va, posinf=1e300, neginf=-1e300), np.nan_to_num(vb, posinf=1e300, neginf=-1e300)
        pw = wilcoxon(fa, fb).pvalue if better + worse > 0 else 1.0
        pm = mannwhitneyu(fa, fb).pvalue if np.any(fa != fb) else 1.0
        fmt = ".3g" if exact else ".4f"
        row = f"| {pr} | {len(seeds)} | {np.median(va):{fmt}} | {np.median(vb):{fmt}} |"
        if exact:
            row += f" {int(np.sum(va == 0))} | {int(np.sum(vb == 0))} |"
        print(row + f" {better} / {worse} / {tie} | {pw:.2g} | {pm:.2g} |")


if __name__ == "__main__":
    main()
