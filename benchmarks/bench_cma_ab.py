"""A/B timing of tfevo's CMA rows between two checkouts (seconds per ask+tell, no evaluation).

Run::

    python benchmarks/bench_cma_ab.py --trees /tmp/before . [--rounds 3] [--repeats 5]
                                      [--cases eigen:1000:default eigen:1000:256 cholesky:1000:24 sep:1000:default]

Each round runs one subprocess per checkout, alternating (A, B, A, B, ...), so
a change of load on a shared machine hits both alike.  A subprocess imports
tfevo from its checkout, builds every case with ``bench_cma.make_tfevo`` (the
same instances as the strategy table of ``bench_cma.py``: float32, sigma 0.1,
whole eigen gaps per block) and times them in alternating blocks (median of
``--repeats``); the table gives, per case, the median over rounds of those
medians and the ratio B / A.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

_CHILD = r"""
import json, os, sys
tree = os.path.abspath(sys.argv[1])
sys.path.insert(0, tree)
sys.path.insert(0, os.path.join(tree, "benchmarks"))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import bench_cma
import tfevo
assert os.path.dirname(os.path.abspath(tfevo.__file__)) == os.path.join(tree, "tfevo"), tfevo.__file__
cases, repeats, gens = json.loads(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
entries = []
for variant, n, p in cases:
    kind = "sep" if variant == "sep" else "cma"
    if p == "default":
        p = 4 + int(__import__("math").floor(3 * __import__("math").log(n)))
    step, g, _ = bench_cma.make_tfevo(kind, n, int(p), gens, variant=variant if kind == "cma" else "eigen")
    entries.append((step, g))
print("RESULT " + json.dumps(bench_cma._interleaved(entries, repeats, pause=0.3)))
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trees", nargs=2, required=True, metavar=("A", "B"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--gens", type=int, default=2)
    ap.add_argument("--cases", nargs="+",
                    default=["eigen:1000:default", "eigen:1000:256", "cholesky:1000:default", "cholesky:1000:256",
                             "sep:1000:default", "eigen:100:default"])
    args = ap.parse_args()
    cases = [(c.split(":")[0], int(c.split(":")[1]), c.split(":")[2]) for c in args.cases]
    uptime = lambda: subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()  # noqa: E731
    print(f"start {time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime())} UTC, load: {uptime()}", flush=True)
    res = {t: [] for t in args.trees}
    for r in range(args.rounds):
        for tree in args.trees:
            out = subprocess.run([sys.executable, "-c", _CHILD, tree, json.dumps(cases), str(args.repeats),
                                  str(args.gens)], capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=""))
            line = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")]
            if not line:
                sys.exit(f"{tree} failed:\n{out.stderr[-3000:]}")
            res[tree].append(json.loads(line[0][7:]))
            print(f"round {r + 1} {tree}: " + " ".join(f"{t:.2e}" for t in res[tree][-1])
                  + f"  (load {uptime().split('load average:')[-1].strip()})", flush=True)
    a, b = args.trees
    print(f"\n| case (variant:D:P) | A s/gen ({a}) | B s/gen ({b}) | B / A |")
    print("|---|---|---|---|")
    for i, c in enumerate(args.cases):
        ta = statistics.median(x[i] for x in res[a])
        tb = statistics.median(x[i] for x in res[b])
        print(f"| {c} | {ta:.3e} | {tb:.3e} | {tb / ta:.3f} |")
    print(f"\nend {time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime())} UTC, load: {uptime()}")


if __name__ == "__main__":
    main()
