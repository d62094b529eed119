"""Tree-GP speed: tfevo vs gplearn (n_jobs=1, 2) and DEAP, same machine and data.

Usage: python benchmarks/bench_gp.py [--quick] [--gens N] [--pops 1000,5000] [--points 64,1024,4096]

Task: Pagie-1 symbolic regression, functions {add, sub, mul, div}, no
constants, tournament selection, p_crossover 0.9 and small mutation rates
(gplearn's defaults) in every library.  Reported: seconds per generation
(median over the timed generations, after one warm-up generation; tfevo's
trace/compile time is reported separately), and the evaluator throughput
(tree nodes x points per second) of the C++ op vs the TF reference.
Prints markdown tables.
"""

from __future__ import annotations

import argparse
import operator
import os
import statistics
import importlib.util
import subprocess
import sys
import time

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))


def pagie(n, seed=0):
    x = np.random.RandomState(seed).uniform(-5, 5, (n, 2)).astype(np.float32)
    y = (1 / (1 + x[:, 0] ** -4.0) + 1 / (1 + x[:, 1] ** -4.0)).astype(np.float32)
    return x, y


def bench_tfevo(P, N, gens):
    import tensorflow as tf

    from tfevo.gp import GeneticProgramming, GPConfig, mse

    x, y = pagie(N)
    xt, yt = tf.constant(x), tf.constant(y)
    t0 = time.perf_counter()
    gp = GeneticProgramming(GPConfig(popsize=P, max_len=128, num_vars=2, functions=("add", "sub", "mul", "div"),
                                     const_range=None, p_const=0.0, tournament_size=20, elite=1), seed=0)
    fs = gp.eval_functions
    tr = gp.ask()
    gp.tell(tr, -mse(tr, xt, yt, fs))  # warm-up: traces tell, builds/loads the op
    compile_s = time.perf_counter() - t0
    times, best = [], None
    for _ in range(gens):
        t1 = time.perf_counter()
        tr = gp.ask()
        loss = mse(tr, xt, yt, fs)
        gp.tell(tr, -loss)
        best = float(tf.reduce_min(loss))
        times.append(time.perf_counter() - t1)
    return statistics.median(times), compile_s, best


def bench_gplearn(P, N, gens, n_jobs):
    from gplearn.genetic import SymbolicRegressor

    x, y = pagie(N)
    times = []
    est = SymbolicRegressor(population_size=P, generations=1, tournament_size=20, function_set=("add", "sub", "mul", "div"),
                            const_range=None, init_depth=(2, 6), p_crossover=0.9, p_subtree_mutation=0.01,
                            p_hoist_mutation=0.01, p_point_mutation=0.01, n_jobs=n_jobs, random_state=0,
                            warm_start=True, verbose=0, metric="mse")
    est.fit(x, y)  # warm-up generation (initial population)
    for g in range(gens):
        est.set_params(generations=g + 2)
        t1 = time.perf_counter()
        est.fit(x, y)
        times.append(time.perf_counter() - t1)
    return statistics.median(times), float(est.run_details_["best_fitness"][-1])


def bench_deap(P, N, gens):
    from deap import algorithms, base, creator, gp, tools

    x, y = pagie(N)
    xs = [x[:, 0].astype(np.float64), x[:, 1].astype(np.float64)]
    yd = y.astype(np.float64)

    def pdiv(a, b):
        with np.errstate(all="ignore"):
            return np.where(np.abs(b) > 1e-3, np.divide(a, np.where(np.abs(b) > 1e-3, b, 1.0)), 1.0)

    pset = gp.PrimitiveSet("MAIN", 2)
    pset.addPrimitive(np.add, 2, name="add")
    pset.addPrimitive(np.subtract, 2, name="sub")
    pset.addPrimitive(np.multiply, 2, name="mul")
    pset.addPrimitive(pdiv, 2, name="div")
    if not hasattr(creator, "FitMinGP"):
        creator.create("FitMinGP", base.Fitness, weights=(-1.0,))
        creator.create("IndGP", gp.PrimitiveTree, fitness=creator.FitMinGP)
    tb = base.Toolbox()
    tb.register("expr", gp.genHalfAndHalf, pset=pset, min_=2, max_=6)
    tb.register("individual", tools.initIterate, creator.IndGP, tb.expr)
    tb.register("population", tools.initRepeat, list, tb.individual)

    def ev(ind):
        f = gp.compile(ind, pset)
        with np.errstate(all="ignore"):
            r = np.mean((f(*xs) - yd) ** 2)
        return (r if np.isfinite(r) else 1e30,)

    tb.register("evaluate", ev)
    tb.register("select", tools.selTournament, tournsize=20)
    tb.register("mate", gp.cxOnePoint)
    tb.register("expr_mut", gp.genFull, min_=0, max_=2)
    tb.register("mutate", gp.mutUniform, expr=tb.expr_mut, pset=pset)
    tb.decorate("mate", gp.staticLimit(key=len, max_value=128))
    tb.decorate("mutate", gp.staticLimit(key=len, max_value=128))
    import random

    random.seed(0)
    pop = tb.population(n=P)
    for ind in pop:
        ind.fitness.values = tb.evaluate(ind)
    times = []
    for _ in range(gens):
        t1 = time.perf_counter()
        off = tb.select(pop, len(pop))
        off = algorithms.varAnd(off, tb, 0.9, 0.03)
        for ind in off:
            if not ind.fitness.valid:
                ind.fitness.values = tb.evaluate(ind)
        pop = off
        times.append(time.perf_counter() - t1)
    return statistics.median(times), min(i.fitness.values[0] for i in pop)


def bench_eval(P, N, L=128, reps=3):
    import tensorflow as tf

    from tfevo.gp import FunctionSet, TerminalSet, evaluate, generate

    fs = FunctionSet(["add", "sub", "mul", "div", "sin", "cos"])
    tr = generate(tf.constant([1, 2]), P, L, fs, TerminalSet(2), (4, 8))
    x, _ = pagie(N)
    nodes = float(np.sum(tr.sizes.numpy()[:, 0]))
    out = {}
    ref = tf.function(lambda t, v, s: evaluate((t, v, s), x, 1, fs, use_op=False), autograph=False)
    for name, fn in (("op", lambda: evaluate(tr, x, 1, fs, use_op=True)), ("tf", lambda: ref(*tr))):
        fn()
        ts = []
        for _ in range(reps):
            t1 = time.perf_counter()
            fn().numpy()
            ts.append(time.perf_counter() - t1)
        out[name] = nodes * N / statistics.median(ts)
    return out, nodes / P


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gens", type=int, default=3)
    ap.add_argument("--pops", default="1000,5000")
    ap.add_argument("--points", default="64,1024,4096")
    ap.add_argument("--big", type=int, default=20000, help="extra tfevo-only population (0 = skip)")
    ap.add_argument("--skip-peers-above", type=int, default=5000 * 1024,
                    help="skip DEAP / gplearn n_jobs=2 when P*N exceeds this")
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    if a.quick:
        a.pops, a.points, a.big, a.gens = "1000", "64,1024", 0, 2
    has_deap = importlib.util.find_spec("deap") is not None  # an optional peer: its column says so if absent
    pops = [int(p) for p in a.pops.split(",")]
    points = [int(n) for n in a.points.split(",")]
    print(f"load: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}")
    print("\n| P | N | tfevo s/gen | tfevo trace+1st gen s | gplearn n_jobs=1 s/gen | gplearn n_jobs=2 s/gen | DEAP s/gen | speed-up vs gplearn(1) | best MSE tfevo / gplearn |")
    print("|---|---|---|---|---|---|---|---|---|")
    for P in pops + ([a.big] if a.big else []):
        for N in points:
            t, c, b = bench_tfevo(P, N, a.gens)
            g1 = g2 = d = gb = None
            if P <= max(pops):
                g1, gb = bench_gplearn(P, N, a.gens, 1)
                if P * N <= a.skip_peers_above:
                    g2, _ = bench_gplearn(P, N, a.gens, 2)
                    d = bench_deap(P, N, a.gens)[0] if has_deap else "not installed"
            f = lambda v: "skipped" if v is None else v if isinstance(v, str) else f"{v:.3f}"  # noqa: E731
            ratio = "" if g1 is None else f"{g1 / t:.1f}x"
            print(f"| {P} | {N} | {t:.3f} | {c:.1f} | {f(g1)} | {f(g2)} | {f(d)} | {ratio} | {b:.4g} / {'' if gb is None else f'{gb:.4g}'} |",
                  flush=True)
    print("\n| evaluator | P | N | mean tree len | node-points/s |")
    print("|---|---|---|---|---|")
    for P, N in ((5000, 1024),):
        r, ln = bench_eval(P, N)
        for k, v in r.items():
            print(f"| {'C++ op' if k == 'op' else 'TF reference'} | {P} | {N} | {ln:.1f} | {v / 1e6:.1f} M |")
        print(f"| op / reference | | | | {r['op'] / r['tf']:.1f}x |")
    print(f"\nload after: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}")


if __name__ == "__main__":
    main()
