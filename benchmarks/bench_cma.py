"""Seconds per ask+tell (no evaluation) of tfevo CMA-ES / Sep-CMA-ES vs evosax and pycma.

Run: ``python benchmarks/bench_cma.py [--repeats R] [--gens G] [--quick]``.
Prints a markdown table: median over R repeats of the mean time per generation
over G generations, measured after a warm-up (the first call, whose time is
reported separately as compile/trace time).  The same fixed fitness vector
(random, shape [P]) is told every generation so no evaluation is timed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np


def _time(step, gens, repeats):
    t0 = time.perf_counter()
    step()
    compile_s = time.perf_counter() - t0
    res = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(gens):
            step()
        res.append((time.perf_counter() - t0) / gens)
    return statistics.median(res), compile_s


def bench_tfevo(kind, n, p, gens, repeats):
    import tensorflow as tf
    from tfevo.strategies.cma_es import CMAES
    from tfevo.strategies.sep_cma_es import SepCMAES

    es = (CMAES if kind == "cma" else SepCMAES)(n, popsize=p, sigma_init=0.1, seed=0)
    f = tf.constant(np.random.default_rng(0).standard_normal(es.popsize), tf.float32)

    def step():
        x = es.ask()
        es.tell(x, f)
    # lazy eigendecomposition: time whole multiples of the eigen gap
    gens = max(gens, getattr(es, "lazy_gap", 1))
    return _time(step, gens, repeats)


def bench_evosax(kind, n, p, gens, repeats):
    import jax
    import jax.numpy as jnp
    from evosax.algorithms import CMA_ES, Sep_CMA_ES

    es = (CMA_ES if kind == "cma" else Sep_CMA_ES)(population_size=p, solution=jnp.zeros(n))
    params = es.default_params
    key = jax.random.key(0)
    state = es.init(key, jnp.zeros(n), params)
    f = jnp.asarray(np.random.default_rng(0).standard_normal(p), jnp.float32)
    box = {"s": state}

    def step():
        pop, s = es.ask(key, box["s"], params)
        s, _ = es.tell(key, pop, f, s, params)
        jax.block_until_ready(s)
        box["s"] = s
    return _time(step, gens, repeats)


def bench_pycma(kind, n, p, gens, repeats):
    import cma

    opts = {"popsize": p, "verbose": -9, "seed": 1}
    if kind == "sep":
        opts["CMA_diagonal"] = True
    es = cma.CMAEvolutionStrategy(np.zeros(n), 0.1, opts)
    f = list(np.random.default_rng(0).standard_normal(p))

    def step():
        X = es.ask()
        es.tell(X, f)
    return _time(step, gens, repeats)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--gens", type=int, default=10)
    ap.add_argument("--quick", action="store_true", help="skip pycma at n >= 10000")
    args = ap.parse_args()
    cases = [("cma", 100), ("cma", 1000), ("sep", 100), ("sep", 1000), ("sep", 10000)]
    print(f"load: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}")
    print("| strategy | D | P | tfevo s/gen | evosax s/gen | pycma s/gen | evosax/tfevo | pycma/tfevo | tfevo compile s | evosax compile s |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for kind, n in cases:
        default = 4 + int(np.floor(3 * np.log(n)))
        for p in (default, 256):
            t, tc = bench_tfevo(kind, n, p, args.gens, args.repeats)
            e, ec = bench_evosax(kind, n, p, args.gens, args.repeats)
            if kind == "cma" and n >= 1000 or n >= 10000:
                c, _ = bench_pycma(kind, n, p, max(2, args.gens // 3), args.repeats)
            else:
                c, _ = bench_pycma(kind, n, p, args.gens, args.repeats)
            name = "CMA-ES" if kind == "cma" else "Sep-CMA-ES"
            print(f"| {name} | {n} | {p} | {t:.2e} | {e:.2e} | {c:.2e} | {e / t:.2f} | {c / t:.1f} | {tc:.1f} | {ec:.1f} |",
                  flush=True)
    print(f"load: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}")


if __name__ == "__main__":
    main()
