"""CMA bounds with an initial step size larger than the box: tfevo's CMAES against pycma, whose
``maxstd_boundrange`` option (default 1/3) caps every coordinate's standard deviation at a third of the
bound range; tfevo has no such cap.

Problem: f(x) = sum (x_i - 3)^2 on the box [0, 1]^D from x0 = 0.5, so the optimum is the corner x = 1
(f* = 4 D). 100 generations, default popsize, seeds 0-9 (pycma: seed + 1), fixed before running.
Counts runs with best f - f* < 1e-6 and the median best f - f*.

    python benchmarks/audit_cma_maxstd.py
"""

import json
import warnings

import numpy as np

warnings.filterwarnings("ignore")


def run_pycma(D, s0, seed, opts):
    import cma

    es = cma.CMAEvolutionStrategy(np.full(D, 0.5), s0, dict(
        {"bounds": [0, 1], "seed": seed + 1, "verbose": -9, "tolfun": 0, "tolx": 0, "tolfunhist": 0,
         "tolflatfitness": 1e9, "tolstagnation": 10**9}, **opts))
    best = np.inf
    for _ in range(100):
        X = es.ask()
        v = np.sum((np.array(X) - 3) ** 2, 1)
        es.tell(X, list(v))
        best = min(best, v.min())
    return best - 4.0 * D


def run_tfevo(D, s0, seed, dtype):
    from tfevo.strategies import CMAES

    es = CMAES(D, sigma=s0, seed=seed, bounds=(0.0, 1.0), dtype=dtype, init_params=0.5)
    best = np.inf
    for _ in range(100):
        x = es.ask()
        v = np.sum((x.numpy().astype(np.float64) - 3) ** 2, 1)
        es.tell(x, -v)
        best = min(best, v.min())
    return best - 4.0 * D


def main():
    for D, s0 in [(2, 2.0), (7, 2.0), (7, 0.3)]:
        for name, fn in [("tfevo float32", lambda s: run_tfevo(D, s0, s, "float32")),
                         ("tfevo float64", lambda s: run_tfevo(D, s0, s, "float64")),
                         ("pycma", lambda s: run_pycma(D, s0, s, {})),
                         ("pycma maxstd_boundrange=1e12", lambda s: run_pycma(D, s0, s, {"maxstd_boundrange": 1e12}))]:
            out = np.array([fn(s) for s in range(10)])
            print(json.dumps({"D": D, "sigma0": s0, "lib": name, "solved": int(np.sum(out < 1e-6)),
                              "median": float(np.median(out)), "runs": out.tolist()}), flush=True)


if __name__ == "__main__":
    main()
