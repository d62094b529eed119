"""Per-run-index success of restart sequences in bench_cma_bbob.py records: of the sequences that
reached run k, how many were solved in run k (k = 1, 2, 3), with Fisher's exact two-sided p of each
side against the last file's side.

    python benchmarks/tools/cma_run_index.py ALGO FID DIM REP_LO REP_HI LABEL=FILE [LABEL=FILE ...]
"""
import json
import sys

from scipy.stats import fisher_exact


def counts(path, algo, fid, dim, lo, hi):
    """[(solved in run k, reached run k) for k = 1, 2, 3] and the number of sequences."""
    seqs = [r for r in map(json.loads, open(path)) if r["algo"] == algo and r["fid"] == fid and r["dim"] == dim
            and lo <= r.get("rep", 0) <= hi]
    out = []
    for k in (1, 2, 3):
        reached = sum(1 for r in seqs if len(r["runs"]) >= k)
        solved = sum(1 for r in seqs if r["evals"] is not None and len(r["runs"]) == k)
        out.append((solved, reached))
    return out, len(seqs)


def main():
    algo, fid, dim, lo, hi = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    sides = [a.split("=", 1) for a in sys.argv[6:]]
    ref = counts(sides[-1][1], algo.replace("tfevo", "pycma"), fid, dim, lo, hi)[0] if sides else None
    print(f"| side | sequences | run 1 solved / reached | run 2 | run 3 | Fisher p vs {sides[-1][0]} (run 1 / 2 / 3) |")
    print("|---|---|---|---|---|---|")
    for label, path in sides:
        a = algo.replace("tfevo", "pycma") if label.startswith("pycma") else algo
        c, n = counts(path, a, fid, dim, lo, hi)
        ps = [fisher_exact([[s, r - s], [s2, r2 - s2]])[1] if r and r2 else float("nan")
              for (s, r), (s2, r2) in zip(c, ref)]
        print(f"| {label} | {n} | " + " | ".join(f"{s}/{r}" for s, r in c) + " | "
              + " / ".join(f"{p:.3f}" for p in ps) + " |")


if __name__ == "__main__":
    main()
