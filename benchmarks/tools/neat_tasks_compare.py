"""Solve-rate table of new tfevo rows (bench_neat_tasks.py --out FILE) against the recorded
neat-python and float32 tfevo rows of benchmarks/results/neat_tasks_solve.jsonl on the same
seeds, with Fisher exact p-values (solved, above the plateau) and Mann-Whitney p (generations).

    python benchmarks/tools/neat_tasks_compare.py benchmarks/results/neat_tasks_f64.jsonl

--label names the new rows; --previous FILE (with --previous-label) takes the earlier tfevo
rows from FILE instead of the float32 rows of neat_tasks_solve.jsonl (the neat-python rows
always come from neat_tasks_solve.jsonl).
"""
import argparse, json, statistics, sys
from scipy.stats import fisher_exact, mannwhitneyu
import os
R = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "results") + os.sep
ap = argparse.ArgumentParser()
ap.add_argument("new")
ap.add_argument("--label", default="tfevo, float64 (new default)")
ap.add_argument("--previous", default=None)
ap.add_argument("--previous-label", default="tfevo, float32 (recorded)")
args = ap.parse_args()
old = [json.loads(l) for l in open(R + "neat_tasks_solve.jsonl") if l.strip()]
prev = old if args.previous is None else [json.loads(l) for l in open(args.previous) if l.strip()]
new = [json.loads(l) for l in open(args.new) if l.strip()]
PLAT = {"parity3": 6.0}
def sel(rows, task, impl, episodes=None):
    out = [r for r in rows if r["task"] == task and r["impl"] == impl]
    if task == "acrobot":
        out = [r for r in out if r.get("episodes") == 5 and r.get("threshold") == -80.0]
    return {r["seed"]: r for r in out}
def row(name, rs):
    rs = list(rs.values())
    solved = [r["generations"] for r in rs if r["solved"]]
    med = statistics.median(solved) if solved else float("nan")
    task = rs[0]["task"]
    above = f"{sum(r['best'] > PLAT[task] + 0.01 for r in rs)}/{len(rs)}" if task in PLAT else "-"
    return (f"| {task} | {name} | {len(rs)} | {len(solved)}/{len(rs)} | {med:g} | "
            f"{statistics.mean(r['generations'] for r in rs):.1f} | {above} | "
            f"{statistics.median(r['best'] for r in rs):.3f} | {statistics.median(r['species'] for r in rs):g} | "
            f"{statistics.median(r['seconds'] for r in rs):.1f} |"), rs
print("| task | library | runs | solved | median generations (solved runs) | mean generations (unsolved = cap) | best fitness above the plateau | median best fitness | median final species | seconds per run |")
print("|---|---|---|---|---|---|---|---|---|---|")
stats = []
for task in ("parity3", "mountaincar", "acrobot"):
    t64 = sel(new, task, "tfevo")
    if not t64:
        continue
    seeds = sorted(t64)
    npy = sel(old, task, "neat-python")
    t32 = sel(prev, task, "tfevo")
    npy = {s: npy[s] for s in seeds if s in npy}
    t32 = {s: t32[s] for s in seeds if s in t32}
    line, a = row(args.label, t64); print(line)
    line, b = row(args.previous_label, t32); print(line)
    line, c = row("neat-python", npy); print(line)
    def cnt(rs, f): return sum(map(f, rs))
    sv = lambda r: r["solved"]
    for lab, x in ((f"{args.label} vs neat-python", c), (f"{args.label} vs {args.previous_label}", b)):
        s1, s2 = cnt(a, sv), cnt(x, sv)
        p = fisher_exact([[s1, len(a) - s1], [s2, len(x) - s2]])[1]
        msg = f"{task}: solved {s1}/{len(a)} vs {s2}/{len(x)} ({lab}) Fisher p = {p:.3g}"
        if task in PLAT:
            ab = lambda r: r["best"] > PLAT[task] + 0.01
            a1, a2 = cnt(a, ab), cnt(x, ab)
            msg += f"; above plateau {a1} vs {a2}, p = {fisher_exact([[a1, len(a) - a1], [a2, len(x) - a2]])[1]:.3g}"
        g1 = [r["generations"] for r in a if r["solved"]]; g2 = [r["generations"] for r in x if r["solved"]]
        if g1 and g2:
            msg += f"; median generations (solved) {statistics.median(g1):g} vs {statistics.median(g2):g}, MWU p = {mannwhitneyu(g1, g2).pvalue:.3g}"
        stats.append(msg)
print()
for s in stats: print("-", s)
