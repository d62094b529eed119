"""The runs of restart sequences in bench_cma_bbob.py records, side by side: per kind of run
(the first run, the k-th large run, BIPOP's small runs), how many runs of that kind there were,
how they ended (stop reason counts), the evaluations they used (quartiles) and the best
f - f_opt they reached (quartiles, and how many reached the target 1e-8 and the next levels),
with Mann-Whitney p-values of the evaluations and of the best f of one side against the other.
Runs that the harness ended (budget, target) are counted under their end but left out of the
evaluation quartiles, which describe the runs that ended on a criterion.

    python benchmarks/tools/cma_run_stats.py ALGO FID DIM REP_LO REP_HI TFEVO_FILE PYCMA_FILE

ALGO is ``ipop`` or ``bipop``; the reps are inclusive.
"""
import json
import sys

import numpy as np
from scipy.stats import mannwhitneyu

HARNESS_ENDS = {"budget", "callback", "maxfevals", "ftarget"}
LEVELS = (1e-8, 1e-2, 1.0, 10.0)  # best f - f_opt at most these


def runs_by_kind(path, algo, fid, dim, lo, hi):
    """{kind: [run records]} with kind '1' (the first run), 'L2', 'L3', ... (large runs) or 's' (small)."""
    out = {}
    for r in map(json.loads, open(path)):
        if r["algo"] != algo or r["fid"] != fid or r["dim"] != dim or not lo <= r.get("rep", 0) <= hi:
            continue
        n_large = 1
        for i, run in enumerate(r["runs"]):
            if i == 0:
                kind = "1"
            elif algo.endswith("bipop") and run.get("small") and run["sigma0"] < 2.0:
                kind = "s"
            else:
                n_large += 1
                kind = f"L{n_large}"
            out.setdefault(kind, []).append(run)
    return out


def _reasons(stop):
    """A run's end: the target, else the budget (pycma's callback and maxfevals), else its criteria."""
    if "ftarget" in stop:
        return ["ftarget"]
    if HARNESS_ENDS & set(stop):
        return ["budget"]
    return stop


def _q(v, fmt):
    if not v:
        return "-"
    q = np.percentile(v, [25, 50, 75])
    return "/".join(fmt.format(x) for x in q)


def _p(a, b):
    if len(a) < 2 or len(b) < 2:
        return "-"
    return f"{mannwhitneyu(a, b, alternative='two-sided').pvalue:.2f}"


def main():
    kind, fid, dim, lo, hi = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    sides = {"tfevo": runs_by_kind(sys.argv[6], f"tfevo_{kind}", fid, dim, lo, hi),
             "pycma": runs_by_kind(sys.argv[7], f"pycma_{kind}", fid, dim, lo, hi)}
    kinds = sorted(set(sides["tfevo"]) | set(sides["pycma"]), key=lambda k: (k == "s", len(k), k))
    print(f"#### f{fid} {dim}-D {kind.upper()}, reps {lo}-{hi}: runs by kind\n")
    print("| run | side | runs | ended on a criterion | evaluations of those (q1/median/q3) | MW p | best f - f_opt "
          "(q1/median/q3) | MW p | best <= " + " / ".join(f"{v:g}" for v in LEVELS) + " | stop reasons |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for k in kinds:
        stats = {}
        for side, tab in sides.items():
            runs = tab.get(k, [])
            crit = [r for r in runs if not HARNESS_ENDS & set(r["stop"])]
            stats[side] = ([r["evals"] for r in crit], [r["best"] for r in runs])
        for side, tab in sides.items():
            runs = tab.get(k, [])
            ev, best = stats[side]
            other = stats["pycma" if side == "tfevo" else "tfevo"]
            reasons = {}
            for r in runs:
                for s in _reasons(r["stop"]):
                    reasons[s] = reasons.get(s, 0) + 1
            why = ", ".join(f"{a} {b}" for a, b in sorted(reasons.items(), key=lambda kv: -kv[1]))
            levels = " / ".join(str(sum(1 for b in best if b <= v)) for v in LEVELS)
            pe = _p(ev, other[0]) if side == "tfevo" else ""
            pb = _p(best, other[1]) if side == "tfevo" else ""
            print(f"| {k} | {side} | {len(runs)} | {len(ev)} | {_q(ev, '{:.0f}')} | {pe} | {_q(best, '{:.3g}')} | {pb} | "
                  f"{levels} | {why} |")


if __name__ == "__main__":
    main()
