"""Seconds per ask+tell (no evaluation) of tfevo CMA-ES / Sep-CMA-ES vs evosax and pycma.

Run: ``python benchmarks/bench_cma.py [--repeats R] [--gens G]``.
Prints a markdown table: median over R repeats of the mean time per generation
over G generations, measured after a warm-up (the first call, whose time is
reported separately as compile/trace time).  The same fixed fitness vector
(random, shape [P]) is told every generation so no evaluation is timed.

Full CMA-ES decomposes C only every few generations (tfevo and pycma both use
Hansen's gap ``max(1, floor(1 / (10 n (c1 + cmu))))`` by default), so each
timed block of a full CMA-ES covers two whole gaps of that library, which
amortises the eigendecomposition as in a real run.  evosax decomposes every
generation.  The ``gap x5`` rows set a five times longer gap in both tfevo
(``eigen_gap``) and pycma (``updatecovwait``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def _time(step, gens, repeats, multiple=1, budget=0.2):
    """(median s/gen over ``repeats`` blocks, first-call s).

    A block has at least ``gens`` generations and lasts at least ~``budget``
    seconds, rounded up to a multiple of ``multiple`` (whole eigen gaps).
    """
    t0 = time.perf_counter()
    step()
    compile_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    step()
    one = max(time.perf_counter() - t0, 1e-6)
    gens = max(gens, int(budget / one))
    gens = multiple * max(1, -(-gens // multiple))
    res = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(gens):
            step()
        res.append((time.perf_counter() - t0) / gens)
    return statistics.median(res), compile_s


def bench_tfevo(kind, n, p, gens, repeats, gap_factor=1, dtype="float32"):
    import tensorflow as tf
    from tfevo.strategies.cma_es import CMAES
    from tfevo.strategies.sep_cma_es import SepCMAES

    if kind == "cma":
        gap = CMAES(n, popsize=p).lazy_gap * gap_factor
        es = CMAES(n, popsize=p, sigma_init=0.1, seed=0, eigen_gap=gap, dtype=dtype)
        gens, multiple = max(gens, 2 * gap), gap  # whole gaps: the eigendecomposition is amortised
    else:
        es = SepCMAES(n, popsize=p, sigma_init=0.1, seed=0, dtype=dtype)
        multiple = 1
    f = tf.constant(np.random.default_rng(0).standard_normal(es.popsize), tf.float32)

    def step():
        x = es.ask()
        es.tell(x, f)
    return _time(step, gens, repeats, multiple)


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


def bench_pycma(kind, n, p, gens, repeats, gap_factor=1):
    import math

    import cma

    opts = {"popsize": p, "verbose": -9, "seed": 1}
    if kind == "sep":
        opts["CMA_diagonal"] = True
    es = cma.CMAEvolutionStrategy(np.zeros(n), 0.1, opts)
    if kind == "cma":
        gap = es.sm.lazy_update_gap
        if gap_factor != 1:
            opts["updatecovwait"] = gap * gap_factor
            es = cma.CMAEvolutionStrategy(np.zeros(n), 0.1, opts)
            gap = es.sm.lazy_update_gap
        multiple = max(1, math.ceil(gap))
        gens = max(gens, 2 * multiple)  # whole gaps, as for tfevo
    else:
        multiple = 1
    f = list(np.random.default_rng(0).standard_normal(p))

    def step():
        X = es.ask()
        es.tell(X, f)
    return _time(step, gens, repeats, multiple)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--gens", type=int, default=10)
    ap.add_argument("--cases", nargs="+", default=["cma:100", "cma:1000", "cma5:1000", "sep:100", "sep:1000",
                                                   "sep:10000"],
                    help="kind:n with kind cma, cma5 (5x eigen gap) or sep")
    args = ap.parse_args()
    cases = [(c.split(":")[0], int(c.split(":")[1])) for c in args.cases]
    print(f"load: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}")
    print("| strategy | D | P | tfevo s/gen | evosax s/gen | pycma s/gen | evosax/tfevo | pycma/tfevo | tfevo compile s | evosax compile s |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    evosax_cache = {}
    for kind, n in cases:
        default = 4 + int(np.floor(3 * np.log(n)))
        factor = 5 if kind == "cma5" else 1
        kind = "cma" if kind == "cma5" else kind
        for p in (default, 256):
            t, tc = bench_tfevo(kind, n, p, args.gens, args.repeats, factor)
            # evosax full CMA decomposes C every generation: no gap to amortise (and
            # nothing to change for the gap x5 rows, which reuse its numbers)
            if (kind, n, p) not in evosax_cache:
                evosax_cache[(kind, n, p)] = bench_evosax(kind, n, p, 2 if kind == "cma" and n >= 1000 else args.gens,
                                                          args.repeats)
            e, ec = evosax_cache[(kind, n, p)]
            c, _ = bench_pycma(kind, n, p, 2 if n >= 10000 else args.gens, args.repeats, factor)
            name = ("CMA-ES" + (" (gap x5)" if factor != 1 else "")) if kind == "cma" else "Sep-CMA-ES"
            print(f"| {name} | {n} | {p} | {t:.2e} | {e:.2e} | {c:.2e} | {e / t:.2f} | {c / t:.1f} | {tc:.1f} | {ec:.1f} |",
                  flush=True)
    print(f"load: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}")


if __name__ == "__main__":
    main()
