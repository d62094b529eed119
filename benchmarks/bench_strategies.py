"""Overhead of one ask+tell (no evaluation): tfevo OpenAI-ES / SNES / Sep-CMA-ES vs evosax (JAX CPU, jitted).

Usage::

    python benchmarks/bench_strategies.py [--dims 100 1000 10000] [--repeats 7] [--budget 0.3]

For every (strategy, D, P) both libraries get the same configuration (OpenAI-ES:
mirrored sampling, centered ranks, Adam lr 0.01, no weight decay; SNES: default
utilities and learning rates; Sep-CMA-ES: default weights and rates, sigma 0.1,
as in bench_cma.py), a warm-up generation (compile/trace time is
reported separately), then ``repeats`` timed blocks of generations; the table
shows the median seconds per generation.  ``ratio`` = evosax time / tfevo time
(> 1 means tfevo is faster).  Fitness is a fixed random vector in each
library's own array type, so no conversion is timed.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import numpy as np  # noqa: E402


def _time_interleaved(steps, budget: float, repeats: int) -> list:
    """Median seconds per call of each step function.

    The libraries are timed in alternating blocks of ~``budget`` seconds, so a
    change of machine load (the machine is shared) affects both alike.
    """
    counts = []
    for step in steps:
        step()  # warm
        t = time.perf_counter()
        step()
        one = max(time.perf_counter() - t, 1e-6)
        counts.append(max(1, int(budget / one)))
    times = [[] for _ in steps]
    for _ in range(repeats):
        for i, step in enumerate(steps):
            t = time.perf_counter()
            for _ in range(counts[i]):
                step()
            times[i].append((time.perf_counter() - t) / counts[i])
    return [float(np.median(t)) for t in times]


def bench_tfevo(name: str, d: int, p: int, budget: float, repeats: int):
    import tensorflow as tf

    from tfevo.strategies import SNES, OpenES, SepCMAES

    if name == "OpenAI-ES":
        algo = OpenES(d, p, sigma=0.02, learning_rate=0.01, optimizer="adam", weight_decay=0.0, seed=0)
    elif name == "Sep-CMA-ES":
        algo = SepCMAES(d, popsize=p, sigma=0.1, seed=0, dtype="float32")
    else:
        algo = SNES(d, p, seed=0)
    fit = tf.random.stateless_normal([p], seed=[1, 2])
    t = time.perf_counter()
    x = algo.ask()
    algo.tell(x, fit)
    _ = algo.mean.numpy()
    compile_s = time.perf_counter() - t

    def step():
        x = algo.ask()
        algo.tell(x, fit)

    return step, compile_s


def bench_evosax(name: str, d: int, p: int, budget: float, repeats: int):
    import jax
    import jax.numpy as jnp
    import optax
    from evosax.algorithms import SNES, Open_ES, Sep_CMA_ES

    solution = jnp.zeros(d)
    if name == "OpenAI-ES":
        es = Open_ES(p, solution, use_antithetic_sampling=True, optimizer=optax.adam(0.01),
                     std_schedule=optax.constant_schedule(0.02))
    elif name == "Sep-CMA-ES":
        es = Sep_CMA_ES(population_size=p, solution=solution)
    else:
        es = SNES(p, solution)
    params = es.default_params
    key = jax.random.key(0)
    fit = jax.random.normal(jax.random.key(1), (p,))
    t = time.perf_counter()
    state = es.init(key, solution, params)
    pop, state = es.ask(key, state, params)
    state, _ = es.tell(key, pop, fit, state, params)
    jax.block_until_ready(state)
    compile_s = time.perf_counter() - t
    box = {"state": state, "key": key}

    def step():
        key, k1, k2 = jax.random.split(box["key"], 3)
        pop, st = es.ask(k1, box["state"], params)
        st, _ = es.tell(k2, pop, fit, st, params)
        box["state"], box["key"] = st, key

    def step_sync():
        step()
        jax.block_until_ready(box["state"])

    # JAX dispatches asynchronously: block every generation (a user reads fitness each generation).
    return step_sync, compile_s


def call_floor(repeats: int, budget: float) -> list:
    """Seconds per call of the smallest useful compiled step in each runtime.

    A program that reads one float32 [100] state, adds 1 and writes it back:
    TensorFlow ``tf.function`` (graph and XLA) called normally and through
    :class:`tfevo.core.FastCall`, versus ``jax.jit`` returning the new state
    (blocked on).  This is the fixed cost per ask or tell call that no
    strategy code can go below.
    """
    import jax
    import jax.numpy as jnp
    import tensorflow as tf

    from tfevo.core import FastCall

    v = tf.Variable(tf.zeros([100]))
    graph = tf.function(lambda: v.assign_add(tf.ones([100])), input_signature=[])
    xla = tf.function(lambda: v.assign_add(tf.ones([100])), input_signature=[], jit_compile=True)
    fast_graph, fast_xla = FastCall(graph), FastCall(xla)
    jf = jax.jit(lambda s: s + 1.0)
    box = [jnp.zeros(100)]

    def jax_step():
        box[0] = jf(box[0])
        box[0].block_until_ready()

    names = ["TF graph tf.function call", "TF graph via FastCall", "TF XLA tf.function call", "TF XLA via FastCall",
             "jax.jit call + block"]
    secs = _time_interleaved([graph, fast_graph, xla, fast_xla, jax_step], budget, repeats)
    return list(zip(names, secs))


def noise_shapes(dims):
    return [(p, d) for d in dims for p in (default_popsize(d, True), 256)]


def time_noise(p: int, d: int, repeats: int, budget: float):
    """Seconds per ``_gaussian_population`` call (graph mode, FastCall), op vs reference."""
    import tensorflow as tf

    from tfevo.core import FastCall
    from tfevo import kernels
    from tfevo.strategies.shaping import _gaussian_population

    center, sigma = tf.Variable(tf.zeros([d])), tf.Variable(0.02)
    seed = tf.Variable([0, 0])
    fns = []
    for use_op in ((True if kernels.built("TfevoGaussianPopulation") else False), False):
        def body(use_op=use_op):
            return _gaussian_population(center, sigma, p, True, seed.assign_add([0, 1]), use_op=use_op)
        fns.append(FastCall(tf.function(body, input_signature=[])))
    return _time_interleaved(fns, budget, repeats)


def default_popsize(d: int, even: bool) -> int:
    from tfevo.strategies.shaping import _default_popsize

    return _default_popsize(d, even=even)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dims", type=int, nargs="+", default=[100, 1000, 10000])
    ap.add_argument("--pops", nargs="+", default=["default", "256"])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--budget", type=float, default=0.3, help="seconds per timed block")
    ap.add_argument("--algos", nargs="+", default=["OpenAI-ES", "SNES", "Sep-CMA-ES"])
    ap.add_argument("--no-floor", action="store_true", help="skip the per-call floor table")
    ap.add_argument("--noise-table", action="store_true",
                    help="also time the Gaussian sampler alone: C++ op vs pure-TF reference")
    args = ap.parse_args()

    load = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    print(f"<!-- uptime at start: {load} -->")
    if not args.no_floor:
        print("| per-call floor (state [100] += 1) | microseconds per call |")
        print("|---|---|")
        for name, sec in call_floor(args.repeats, min(args.budget, 0.2)):
            print(f"| {name} | {sec * 1e6:.0f} |", flush=True)
        print()
    if args.noise_table:
        print("| noise [P, D] (mirrored, + centre) | C++ op s | TF reference s | reference/op |")
        print("|---|---|---|---|")
        for p_, d_ in noise_shapes(args.dims):
            op_s, ref_s = time_noise(p_, d_, args.repeats, min(args.budget, 0.2))
            print(f"| {p_} x {d_} | {op_s:.3e} | {ref_s:.3e} | {ref_s / op_s:.2f} |", flush=True)
        print()
    print("| strategy | D | P | tfevo s/gen | evosax s/gen | ratio (evosax/tfevo) "
          "| tfevo first call s | evosax first call s |")
    print("|---|---|---|---|---|---|---|---|")
    for name in args.algos:
        for d in args.dims:
            for pop in args.pops:
                p = default_popsize(d, even=(name == "OpenAI-ES")) if pop == "default" else int(pop)
                t_step, t_comp = bench_tfevo(name, d, p, args.budget, args.repeats)
                e_step, e_comp = bench_evosax(name, d, p, args.budget, args.repeats)
                t_sec, e_sec = _time_interleaved([t_step, e_step], args.budget, args.repeats)
                print(f"| {name} | {d} | {p}{' (default)' if pop == 'default' else ''} | {t_sec:.3e} | "
                      f"{e_sec:.3e} | {e_sec / t_sec:.2f} | {t_comp:.2f} | {e_comp:.2f} |", flush=True)
    load = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    print(f"<!-- uptime at end: {load} -->")


if __name__ == "__main__":
    main()
