"""Solve rates of tfevo.neat and neat-python on the same config file.

Tasks: the 6-multiplexer, 3- and 4-bit parity (fitness ``cases - sum of
squared errors``, solved at ``cases - 0.025 * cases``), Acrobot-v1 (mean
return of ``--episodes`` episodes, solved at -100) and MountainCar-v0
(solved at -110).  For each task one neat-python config file is written
(``benchmarks/configs/neat_<task>.cfg``, the template below with the task's
input/output counts and threshold); neat-python reads it with
``neat.Config`` and tfevo with ``NEATConfig.from_neat_python`` (plus the slot
capacities ``max_nodes``/``max_conns``, which neat-python has no use for).

Each run is one seed of one library, up to the task's generation cap; a run
is solved at the first generation whose best fitness reaches the threshold.

Control tasks use one protocol on both sides: every genome gets its own
episode start states, fresh each generation (neat-python: one Gymnasium seed
per genome from ``numpy.random.default_rng(seed)``; tfevo: ``ControlProblem``,
whose evaluator draws one start state per member from its seed stream), at
most 200 steps (the environments' limit), the action is the argmax of the
outputs (first index on ties), the fitness is the mean return, and the
networks compute in double (neat-python's Python floats; tfevo
``ControlProblem(dtype="float64")``, ``--network-dtype``).
Results are appended as JSON lines to ``--out`` (so a long job can be read
while it runs) and ``--table`` prints the Markdown table from that file.

    nice -n 10 python benchmarks/bench_neat_tasks.py --seeds 20 --out /tmp/neat_tasks.jsonl
    python benchmarks/bench_neat_tasks.py --table --out /tmp/neat_tasks.jsonl
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import numpy as np  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))

# the same neat-python config file as the speed benchmark, at population 150 with fitness termination
sys.path.insert(0, HERE)
from bench_neat import NEAT_PY_CFG  # noqa: E402


def _bool_cases(task):
    if task == "mux6":
        xs = np.array(list(itertools.product([0.0, 1.0], repeat=6)), np.float32)
        addr = (2 * xs[:, 0] + xs[:, 1]).astype(int)
        ys = xs[np.arange(len(xs)), 2 + addr][:, None]
        return xs, ys.astype(np.float32)
    bits = {"parity3": 3, "parity4": 4}[task]
    xs = np.array(list(itertools.product([0.0, 1.0], repeat=bits)), np.float32)
    return xs, (xs.sum(1) % 2)[:, None].astype(np.float32)


# task -> (inputs, outputs, threshold, generation cap, max_nodes, max_conns)
TASKS = {
    "mux6": (6, 1, 64 * 0.975, 200, 48, 128),
    "parity3": (3, 1, 8 * 0.975, 300, 32, 96),
    "parity4": (4, 1, 16 * 0.975, 300, 48, 128),
    "acrobot": (6, 3, -100.0, 30, 32, 96),
    "mountaincar": (2, 3, -110.0, 30, 32, 96),
}
ENV_IDS = {"acrobot": "Acrobot-v1", "mountaincar": "MountainCar-v0"}
# the fitness of the best saturated linear separators of the parity tasks (3/4 of the cases right)
PLATEAUS = {"parity3": 6.0, "parity4": 12.0}


DEFAULT_THRESHOLDS = {task: t[2] for task, t in TASKS.items()}


def config_path(task) -> str:
    """The task's config file: ``benchmarks/configs/neat_<task>.cfg``, or with a
    ``--threshold`` other than the task's a copy in the temporary directory."""
    nin, nout, thr, *_ = TASKS[task]
    if thr == DEFAULT_THRESHOLDS[task]:
        os.makedirs(os.path.join(HERE, "configs"), exist_ok=True)
        path = os.path.join(HERE, "configs", f"neat_{task}.cfg")
    else:
        import tempfile

        path = os.path.join(tempfile.gettempdir(), f"neat_{task}_threshold_{thr:g}.cfg")
    text = NEAT_PY_CFG.format(pop=150, nin=nin, nout=nout, thr=thr, noterm=False)
    if not os.path.exists(path) or open(path).read() != text:
        with open(path, "w") as f:
            f.write(text)
    return path


# ---------------------------------------------------------------- neat-python
def _sigmoid_f32(z):
    """neat-python's sigmoid in float32 arithmetic (as tfevo's kernels)."""
    f = np.float32
    return float(f(1) / (f(1) + np.exp(-np.clip(f(5) * f(z), f(-60), f(60)))))


def run_neat_python(task, seed, episodes, float32=False):
    import random

    import neat

    nin, nout, thr, cap, *_ = TASKS[task]
    random.seed(seed)
    cfg = neat.Config(neat.DefaultGenome, neat.DefaultReproduction, neat.DefaultSpeciesSet, neat.DefaultStagnation,
                      config_path(task))
    if float32:  # control: tfevo's float32 resolution of outputs and fitness, all else neat-python's
        if task in ENV_IDS:
            raise SystemExit("neat-python-f32 is for the Boolean tasks")
        cfg.genome_config.activation_defs.add("sigmoid", _sigmoid_f32)
    if task in ENV_IDS:
        import gymnasium as gym

        env = gym.make(ENV_IDS[task])
        rng = np.random.default_rng(seed)

        def fitness(genome, config, ep_seeds):
            net = neat.nn.FeedForwardNetwork.create(genome, config)
            total = 0.0
            for s in ep_seeds:
                obs, _ = env.reset(seed=int(s))
                while True:
                    obs, r, term, trunc, _ = env.step(int(np.argmax(net.activate(obs))))
                    total += r
                    if term or trunc:
                        break
            return total / len(ep_seeds)

        def evaluate(genomes, config):
            for _, g in genomes:
                g.fitness = fitness(g, config, rng.integers(0, 2**31 - 1, episodes))
    else:
        xs, ys = _bool_cases(task)
        cases = [(tuple(map(float, x)), float(y[0])) for x, y in zip(xs, ys)]

        def evaluate(genomes, config):
            for _, g in genomes:
                net = neat.nn.FeedForwardNetwork.create(g, config)
                if float32:
                    out = np.array([net.activate(x)[0] for x, _ in cases], np.float32)
                    g.fitness = float(np.float32(len(cases)) - np.sum(np.square(out - ys[:, 0])))
                else:
                    g.fitness = len(cases) - sum((net.activate(x)[0] - y) ** 2 for x, y in cases)

    p = neat.Population(cfg)
    best = -np.inf
    for g in range(1, cap + 1):
        holder = {}

        def ev(genomes, config):
            evaluate(genomes, config)
            holder["best"] = max(gg.fitness for _, gg in genomes)

        p.run(ev, 1)
        best = max(best, holder["best"])
        if holder["best"] >= thr:
            return True, g, best, len(p.species.species)
    return False, cap, best, len(p.species.species)


# ---------------------------------------------------------------------- tfevo
def run_tfevo(task, seed, episodes, population_markers=False, fitness_dtype="float64", network_dtype="float64"):
    import tensorflow as tf

    from tfevo.neat import NEAT, NEATConfig, SupervisedProblem
    from tfevo.neat.policy import ControlProblem

    nin, nout, thr, cap, max_nodes, max_conns = TASKS[task]
    cfg = NEATConfig.from_neat_python(config_path(task), max_nodes=max_nodes, max_conns=max_conns,
                                      per_generation_innovations=not population_markers, fitness_dtype=fitness_dtype)
    if task in ENV_IDS:
        prob = ControlProblem(ENV_IDS[task], cfg, episodes=episodes, seed=seed, dtype=network_dtype)
        evaluate = prob
    else:
        sup = SupervisedProblem(*_bool_cases(task))
        evaluate = lambda pop: sup(pop, cfg)  # noqa: E731
    algo = NEAT(cfg, seed=seed)
    best = -np.inf
    for g in range(1, cap + 1):
        pop = algo.ask()
        f = evaluate(pop)
        b = float(tf.reduce_max(f))
        best = max(best, b)
        algo.tell(pop, f)
        if b >= thr:
            return True, g, best, algo.num_species
    return False, cap, best, algo.num_species


# ---------------------------------------------------------------------- table
def table(path):
    rows = [json.loads(line) for line in open(path) if line.strip()]
    by = {}
    for r in rows:
        by.setdefault((r["task"], r["impl"]), []).append(r)
    out = ["| task | library | runs | solved | median generations (solved runs) | mean generations (unsolved = cap) "
           "| best fitness above the plateau | median best fitness | median final species | seconds per run |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for task in TASKS:
        for impl in ("tfevo", "tfevo-popmarkers", "neat-python", "neat-python-f32"):
            rs = by.get((task, impl))
            if not rs:
                continue
            solved = [r["generations"] for r in rs if r["solved"]]
            med = statistics.median(solved) if solved else float("nan")
            mean_all = statistics.mean(r["generations"] for r in rs)
            plateau = PLATEAUS.get(task)
            above = f"{sum(r['best'] > plateau + 0.01 for r in rs)}/{len(rs)}" if plateau is not None else "-"
            out.append(f"| {task} | {impl} | {len(rs)} | {len(solved)}/{len(rs)} | {med:g} | {mean_all:.1f} | "
                       f"{above} | {statistics.median(r['best'] for r in rs):.3f} | "
                       f"{statistics.median(r['species'] for r in rs):g} | "
                       f"{statistics.median(r['seconds'] for r in rs):.1f} |")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", default=",".join(TASKS))
    ap.add_argument("--impls", default="tfevo,neat-python",
                    help="tfevo, neat-python, neat-python-f32 (neat-python with float32 sigmoid and fitness)")
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--episodes", type=int, default=1, help="episodes per genome on the control tasks")
    ap.add_argument("--threshold", type=float, default=None,
                    help="solve threshold instead of the task's (the same on both libraries; it is also written "
                         "into the config file's fitness_threshold)")
    ap.add_argument("--out", default="/tmp/neat_tasks.jsonl")
    ap.add_argument("--table", action="store_true", help="print the table of --out and exit")
    ap.add_argument("--fitness-dtype", default="float64", choices=["float64", "float32"],
                    help="tfevo's NEATConfig.fitness_dtype (recorded in each tfevo row)")
    ap.add_argument("--network-dtype", default="float64", choices=["float64", "float32"],
                    help="tfevo's ControlProblem dtype on the control tasks (neat-python's networks run in double; "
                         "recorded in each tfevo control row)")
    ap.add_argument("--population-markers", action="store_true",
                    help="tfevo with per_generation_innovations=False (records as impl 'tfevo-popmarkers')")
    a = ap.parse_args()
    if a.table:
        print(table(a.out))
        return
    for task in a.tasks.split(","):
        if task not in TASKS:
            raise SystemExit(f"unknown task {task!r}; tasks: {', '.join(TASKS)}")
        if a.threshold is not None:
            TASKS[task] = (*TASKS[task][:2], a.threshold, *TASKS[task][3:])
        for impl in a.impls.split(","):
            fn = {"tfevo": run_tfevo, "neat-python": run_neat_python,
                  "neat-python-f32": functools.partial(run_neat_python, float32=True)}[impl]
            if impl == "tfevo":
                fn = functools.partial(run_tfevo, population_markers=a.population_markers, fitness_dtype=a.fitness_dtype,
                                       network_dtype=a.network_dtype)
            name = "tfevo-popmarkers" if impl == "tfevo" and a.population_markers else impl
            for seed in range(a.first_seed, a.first_seed + a.seeds):
                t = time.perf_counter()
                solved, gens, best, species = fn(task, seed, a.episodes)
                rec = dict(task=task, impl=name, seed=seed, solved=bool(solved), generations=int(gens),
                           best=float(best), species=int(species), seconds=round(time.perf_counter() - t, 2),
                           threshold=TASKS[task][2], episodes=a.episodes)
                if impl == "tfevo":
                    rec["fitness_dtype"] = a.fitness_dtype
                    if task in ENV_IDS:
                        rec["network_dtype"] = a.network_dtype
                print(json.dumps(rec), flush=True)
                with open(a.out, "a") as f:
                    f.write(json.dumps(rec) + "\n")


if __name__ == "__main__":
    main()
