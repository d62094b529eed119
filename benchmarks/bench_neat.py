"""tfevo.neat vs neat-python 2.x on the same machine.

Seconds per generation (median of a few generations after warm-up; trace /
compile time of the first generation reported separately) on XOR and
CartPole-v1 at several population sizes, with neat-python serial and with its
ParallelEvaluator; and generations to solve XOR (threshold 3.9, pop 150,
<= 300 generations) over seeds.

    python benchmarks/bench_neat.py                 # full table (a few minutes)
    python benchmarks/bench_neat.py --quick         # smaller
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import numpy as np  # noqa: E402

NEAT_PY_CFG = """
[NEAT]
fitness_criterion     = max
fitness_threshold     = {thr}
pop_size              = {pop}
reset_on_extinction   = False
no_fitness_termination = {noterm}

[DefaultGenome]
activation_default      = sigmoid
activation_mutate_rate  = 0.0
activation_options      = sigmoid
aggregation_default     = sum
aggregation_mutate_rate = 0.0
aggregation_options     = sum
bias_init_mean          = 0.0
bias_init_stdev         = 1.0
bias_max_value          = 30.0
bias_min_value          = -30.0
bias_mutate_power       = 0.5
bias_mutate_rate        = 0.7
bias_replace_rate       = 0.1
compatibility_disjoint_coefficient = 1.0
compatibility_weight_coefficient   = 0.5
conn_add_prob           = 0.5
conn_delete_prob        = 0.5
enabled_default         = True
enabled_mutate_rate     = 0.01
feed_forward            = True
initial_connection      = full
node_add_prob           = 0.2
node_delete_prob        = 0.2
num_hidden              = 0
num_inputs              = {nin}
num_outputs             = {nout}
response_init_mean      = 1.0
response_init_stdev     = 0.0
response_max_value      = 30.0
response_min_value      = -30.0
response_mutate_power   = 0.0
response_mutate_rate    = 0.0
response_replace_rate   = 0.0
weight_init_mean        = 0.0
weight_init_stdev       = 1.0
weight_max_value        = 30
weight_min_value        = -30
weight_mutate_power     = 0.5
weight_mutate_rate      = 0.8
weight_replace_rate     = 0.1

[DefaultSpeciesSet]
compatibility_threshold = 3.0

[DefaultStagnation]
species_fitness_func = max
max_stagnation       = 20
species_elitism      = 2

[DefaultReproduction]
elitism            = 2
survival_threshold = 0.2
"""

XOR_IN = [(0.0, 0.0), (0.0, 1.0), (1.0, 0.0), (1.0, 1.0)]
XOR_OUT = [0.0, 1.0, 1.0, 0.0]


# ---------------------------------------------------------------- neat-python
def _np_config(pop, nin, nout, thr=3.9, noterm=True):
    import neat

    text = NEAT_PY_CFG.format(pop=pop, nin=nin, nout=nout, thr=thr, noterm=noterm)
    fd, path = tempfile.mkstemp(suffix=".cfg")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    cfg = neat.Config(neat.DefaultGenome, neat.DefaultReproduction, neat.DefaultSpeciesSet, neat.DefaultStagnation, path)
    os.unlink(path)
    return cfg


def np_xor_genome(genome, config):
    import neat

    net = neat.nn.FeedForwardNetwork.create(genome, config)
    f = 4.0
    for xi, xo in zip(XOR_IN, XOR_OUT):
        f -= (net.activate(xi)[0] - xo) ** 2
    return f


def np_cartpole_genome(genome, config, seed=0):
    import gymnasium as gym
    import neat

    net = neat.nn.FeedForwardNetwork.create(genome, config)
    env = gym.make("CartPole-v1")
    obs, _ = env.reset(seed=seed)
    total = 0.0
    while True:
        out = net.activate(obs)
        obs, r, term, trunc, _ = env.step(int(np.argmax(out)))
        total += r
        if term or trunc:
            break
    env.close()
    return total


def _serial(fn):
    def run(genomes, config):
        for _, g in genomes:
            g.fitness = fn(g, config)
    return run


def neat_python_gen_times(problem, pop, gens, parallel):
    import neat

    nin, nout = (2, 1) if problem == "xor" else (4, 2)
    fn = np_xor_genome if problem == "xor" else np_cartpole_genome
    cfg = _np_config(pop, nin, nout)
    p = neat.Population(cfg)
    times = []
    pe = neat.ParallelEvaluator(multiprocessing.cpu_count(), fn) if parallel else None
    ev = pe.evaluate if parallel else _serial(fn)
    for _ in range(gens):
        t = time.perf_counter()
        p.run(ev, 1)
        times.append(time.perf_counter() - t)
    if pe is not None:
        pe.close() if hasattr(pe, "close") else None
    return times


def neat_python_solve(seed, gens=300):
    import random

    import neat

    random.seed(seed)
    cfg = _np_config(150, 2, 1, thr=3.9, noterm=False)
    p = neat.Population(cfg)
    best = p.run(_serial(np_xor_genome), gens)
    solved = best.fitness >= 3.9
    return solved, p.generation


# ---------------------------------------------------------------------- tfevo
def tfevo_gen_times(problem, pop, gens, jit=False):
    from tfevo.neat import NEAT, XOR, NEATConfig
    from tfevo.neat.policy import ControlProblem

    if problem == "xor":
        prob = XOR()
        cfg = prob.config(pop_size=pop, max_nodes=32, max_conns=64)
        ev = lambda p: prob(p, cfg)  # noqa: E731
    else:
        cfg = NEATConfig(num_inputs=4, num_outputs=2, pop_size=pop, max_nodes=24, max_conns=48)
        cp = ControlProblem("CartPole-v1", cfg, episodes=1)
        ev = cp
    algo = NEAT(cfg, seed=0, jit_compile=jit)
    times, evals, tells = [], [], []
    for _ in range(gens + 1):
        t = time.perf_counter()
        pop_ = algo.ask()
        f = ev(pop_)
        f.numpy()
        t1 = time.perf_counter()
        algo.tell(pop_, f)
        algo.nodes.numpy()
        t2 = time.perf_counter()
        times.append(t2 - t)
        evals.append(t1 - t)
        tells.append(t2 - t1)
    # with jit, a generation whose bucket width is new compiles the XLA breed
    # programs (seconds): counted as compile time, not in the median
    med = statistics.median(tells[1:])
    comp = [i for i in range(1, len(tells)) if tells[i] > max(1.0, 20 * med)]
    keep = [i for i in range(1, len(tells)) if i not in comp]
    recompile = sum(tells[i] - med for i in comp)
    return (times[0] + recompile, [times[i] for i in keep], statistics.median([evals[i] for i in keep]),
            statistics.median([tells[i] for i in keep]))


def tfevo_solve(seed, gens=300, jit=False):
    from tfevo.neat import NEAT, XOR

    prob = XOR()
    cfg = prob.config(pop_size=150, fitness_threshold=3.9)
    algo = NEAT(cfg, seed=seed, jit_compile=jit)
    r = algo.run(lambda p: prob(p, cfg), gens)
    return r["solved"], r["generations"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--skip-solve", action="store_true")
    ap.add_argument("--problems", default="xor,cartpole")
    ap.add_argument("--sizes", default="150,1000,10000")
    ap.add_argument("--modes", default="graph",
                    help="tfevo tell modes to run: graph (default NEAT) and/or xla (NEAT(jit_compile=True))")
    ap.add_argument("--solve-mode", default="graph", help="tfevo tell mode of the solve-rate runs (graph or xla)")
    ap.add_argument("--tf-gens", type=int, default=0, help="tfevo generations per size (0: 7, 7, 5)")
    ap.add_argument("--no-serial-above", type=int, default=10**9,
                    help="skip serial neat-python above this population")
    ap.add_argument("--no-parallel-above", type=int, default=10**9,
                    help="skip neat-python's ParallelEvaluator above this population")
    args = ap.parse_args()
    with open("/proc/loadavg") as f:
        load_before = f.read().split()[:3]
    rows = []
    sizes = [int(s) for s in args.sizes.split(",")]
    np_gens = {150: 5, 1000: 3, 10000: 1}
    tf_gens = {150: 7, 1000: 7, 10000: 5}
    for problem in args.problems.split(","):
        for pop in sizes:
            if args.quick and pop > 1000:
                continue
            skip_serial = (problem == "cartpole" and pop >= 10000) or pop > args.no_serial_above
            t_np = statistics.median(neat_python_gen_times(problem, pop, np_gens.get(pop, 1), False)) if not skip_serial else math.nan
            t_pp = (statistics.median(neat_python_gen_times(problem, pop, np_gens.get(pop, 1), True))
                    if pop <= args.no_parallel_above else math.nan)
            for mode in args.modes.split(","):
                trace, tt, t_ev, t_tell = tfevo_gen_times(problem, pop, args.tf_gens or tf_gens.get(pop, 3),
                                                          jit=(mode == "xla"))
                t_tf = statistics.median(tt)
                rows.append((problem, pop, mode, t_tf, trace, t_ev, t_tell, t_np, t_pp))
                print(f"# {problem} pop {pop} [{mode}]: tfevo {t_tf:.4f}s (compile {trace:.2f}s; eval {t_ev:.4f} "
                      f"tell {t_tell:.4f}) neat-python {t_np:.4f}s parallel {t_pp:.4f}s", flush=True)
    print()
    print("| problem | pop | tfevo tell | tfevo s/gen | tfevo eval s | tfevo tell s | tfevo trace+compile s (first gen + XLA recompiles) | neat-python serial s/gen | neat-python parallel (2 proc) s/gen | speedup vs serial | speedup vs parallel |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for problem, pop, mode, t_tf, trace, t_ev, t_tell, t_np, t_pp in rows:
        print(f"| {problem} | {pop} | {mode} | {t_tf:.4f} | {t_ev:.4f} | {t_tell:.4f} | {trace:.2f} | {t_np:.4f} | {t_pp:.4f} | "
              f"{t_np / t_tf:.1f}x | {t_pp / t_tf:.1f}x |")
    if not args.skip_solve:
        print()
        res_tf = [tfevo_solve(s, jit=args.solve_mode == "xla") for s in range(args.seeds)]
        res_np = [neat_python_solve(s) for s in range(args.seeds)]
        print("| library | XOR solved (of %d) | median generations (solved runs) | median evaluations |" % args.seeds)
        print("|---|---|---|---|")
        for name, res in (("tfevo.neat", res_tf), ("neat-python", res_np)):
            g = [n for ok, n in res if ok]
            med = statistics.median(g) if g else math.nan
            print(f"| {name}{' (' + args.solve_mode + ')' if name == 'tfevo.neat' else ''} | {sum(ok for ok, _ in res)} | {med} | {med * 150:.0f} |")
        print()
        print("per-seed generations tfevo:", [n if ok else None for ok, n in res_tf])
        print("per-seed generations neat-python:", [n if ok else None for ok, n in res_np])
    with open("/proc/loadavg") as f:
        print(f"\nload average before: {' '.join(load_before)}; after: {' '.join(f.read().split()[:3])}")


if __name__ == "__main__":
    main()
