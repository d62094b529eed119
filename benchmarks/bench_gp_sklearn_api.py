"""Per-fit time of SymbolicRegressor under each metric / max_samples, median of repeats.

Usage: PYTHONPATH=$PWD python benchmarks/bench_gp_sklearn_api.py [--repeats 3]
"""

import argparse
import time

import numpy as np

from tfevo.gp import SymbolicRegressor


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--pop", type=int, default=2000)
    ap.add_argument("--gens", type=int, default=10)
    ap.add_argument("--rows", type=int, default=1000)
    a = ap.parse_args()
    rng = np.random.RandomState(0)
    X = rng.uniform(-1, 1, (a.rows, 3))
    y = X[:, 0] ** 2 - X[:, 1] * X[:, 2]
    cases = [("mse", 1.0), ("mean absolute error", 1.0), ("rmse", 1.0), ("mse", 0.9)]
    base = None
    print(f"P={a.pop} gens={a.gens} N={a.rows}, median of {a.repeats} (after one warm-up fit)")
    for metric, ms in cases:
        kw = dict(population_size=a.pop, generations=a.gens, metric=metric, max_samples=ms,
                  stopping_criteria=None, random_state=0)
        SymbolicRegressor(**kw).fit(X, y)
        ts = []
        for _ in range(a.repeats):
            t0 = time.perf_counter()
            SymbolicRegressor(**kw).fit(X, y)
            ts.append(time.perf_counter() - t0)
        t = float(np.median(ts))
        base = base or t
        print(f"| {metric} | {ms} | {t:.3f} s | {t / base:.2f}x |")


if __name__ == "__main__":
    main()
