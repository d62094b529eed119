"""Single CMA-ES runs (no restarts), tfevo ``CMAES`` or pycma, on the 10-D sphere with default
options, sigma0 2 and x0 uniform in [-4, 4]^10 (``default_rng(10000 + s)`` for run s, the same on
both sides; sampling seed 1 + s): per run, the iteration at which the best sample first reaches
f <= 1e-3 and f <= 1e-8, the iteration at which the first stop criterion holds, and the criteria.
It separates the dynamics (iterations to a target) from the stop rules (iterations from the
target to the stop).

    python benchmarks/tools/cma_single_runs.py run SIDE POPSIZE FIRST_RUN RUNS > side.json
    python benchmarks/tools/cma_single_runs.py compare pycma.json tfevo.json

SIDE is ``tfevo`` or ``pycma``; ``run`` prints one JSON list of ``[it 1e-3, it 1e-8, stop it,
reasons]``. tfevo reuses one object (its initial variables assigned back, then ``reset``) instead
of tracing a new one per run (checked: the same stop iterations as a new ``CMAES(..., seed=1 + s)``
per run over 100 runs). ``compare`` prints deciles, means and Mann-Whitney p of each column.
"""
import collections
import json
import os
import sys
import warnings

import numpy as np

D = 10
TARGETS = (1e-3, 1e-8)


def sphere(x):
    return np.sum(np.square(x), axis=1)


def run(side, lam, first, count):
    out = []
    if side == "tfevo":
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
        import tensorflow as tf

        from tfevo.strategies import CMAES

        tf.config.threading.set_intra_op_parallelism_threads(1)
        es = CMAES(D, popsize=lam, sigma=2.0, seed=0)
        init = [v.numpy() for v in es.variables]
    else:
        import cma
    for s in range(first, first + count):
        x0 = np.random.default_rng(10_000 + s).uniform(-4, 4, D)
        hit = {}
        if side == "pycma":
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                es = cma.CMAEvolutionStrategy(x0, 2.0, {"popsize": lam, "verbose": -9, "seed": 1 + s})
                while not es.stop():
                    x = es.ask()
                    f = sphere(np.array(x))
                    es.tell(x, list(f))
                    for t in TARGETS:
                        if f.min() <= t and t not in hit:
                            hit[t] = es.countiter
            out.append((hit.get(1e-3), hit.get(1e-8), es.countiter, sorted(es.stop())))
        else:
            for v, val in zip(es.variables, init):
                v.assign(val)
            es.seeds.seed.assign(1 + s)
            es.seeds.counter.assign(0)
            es.reset(mean=x0, sigma=2.0)
            it = 0
            while True:
                x = es.ask()
                it += 1
                f = sphere(x.numpy())
                es.tell(x, tf.constant(-f, tf.float64))
                for t in TARGETS:
                    if f.min() <= t and t not in hit:
                        hit[t] = it
                if es.stop_reasons or it > 5000:
                    break
            out.append((hit.get(1e-3), hit.get(1e-8), it, sorted(es.stop_reasons)))
    print(json.dumps(out))


def compare(path_a, path_b):
    from scipy.stats import mannwhitneyu

    a, b = json.load(open(path_a)), json.load(open(path_b))
    print(f"runs: {len(a)} / {len(b)}")
    cols = [("iterations to f <= 1e-3", lambda r: r[0]), ("iterations to f <= 1e-8", lambda r: r[1]),
            ("iteration of the stop", lambda r: r[2]), ("stop minus 1e-8 iteration", lambda r: r[2] - r[1])]
    for name, get in cols:
        va, vb = [get(r) for r in a], [get(r) for r in b]
        qa, qb = np.percentile(va, [10, 50, 90]), np.percentile(vb, [10, 50, 90])
        print(f"{name}: 10/50/90% {qa[0]:.0f}/{qa[1]:.1f}/{qa[2]:.0f} vs {qb[0]:.0f}/{qb[1]:.1f}/{qb[2]:.0f}, "
              f"mean {np.mean(va):.2f} vs {np.mean(vb):.2f}, Mann-Whitney p {mannwhitneyu(va, vb).pvalue:.3f}")
    print("stop reasons:", dict(collections.Counter(",".join(r[3]) for r in a)), "vs",
          dict(collections.Counter(",".join(r[3]) for r in b)))


if __name__ == "__main__":
    if sys.argv[1] == "run":
        run(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
    else:
        compare(sys.argv[2], sys.argv[3])
