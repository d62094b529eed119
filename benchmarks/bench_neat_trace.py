"""Per-generation trace of tfevo.neat and neat-python under the real selection of a Boolean task
(same config file, same fitness), mean over seeds.

Columns: best fitness, mean fitness, fraction of genomes at fitness >= 5.99 (on the
parity plateau or above), hidden nodes, enabled connections, fraction of genomes that
are exact copies of another (structure, weights, biases to 1e-6), live species, largest
species, fraction of genomes above 6.01.  The per-seed rows are saved as
``<out>_<impl>.npy`` for tests between the libraries (``--compare``).

    python benchmarks/bench_neat_trace.py --impl tfevo --seeds 20 --gens 150 --out /tmp/trace
    python benchmarks/bench_neat_trace.py --impl neat-python --seeds 20 --gens 150 --out /tmp/trace
    python benchmarks/bench_neat_trace.py --compare --out /tmp/trace
    python benchmarks/bench_neat_trace.py --check-eval --seeds 3 --gens 60
"""

import argparse
import os
import random
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, HERE)

import numpy as np  # noqa: E402

import bench_neat_tasks as B  # noqa: E402

COLS = ["best", "mean fitness", "at >= 5.99", "hidden", "enabled", "copies", "species", "largest species",
        "above 6.01"]

def stats(fit, hidden, enabled, dup, nspec, sizes):
    fit = np.asarray(fit, float)
    return [fit.max(), fit.mean(), np.mean(fit >= 5.99), np.mean(hidden), np.mean(enabled), dup, nspec, max(sizes), np.mean(fit > 6.01)]

def run_tfevo(task, seed, gens):
    from tfevo.neat import NEAT, NEATConfig, SupervisedProblem
    nin, nout, thr, cap, mn, mc = B.TASKS[task]
    cfg = NEATConfig.from_neat_python(B.config_path(task), max_nodes=mn, max_conns=mc)
    sup = SupervisedProblem(*B._bool_cases(task))
    algo = NEAT(cfg, seed=seed); out = []
    for g in range(gens):
        pop = algo.ask(); f = sup(pop, cfg).numpy()
        nodes, conns = (t.numpy() for t in pop)
        nv = ~np.isnan(nodes[..., 0]); cv = ~np.isnan(conns[..., 0])
        en = (cv & (conns[..., 2] > 0.5)).sum(1)
        keys = set()
        for p in range(cfg.pop_size):
            c = conns[p][cv[p]]; n = nodes[p][nv[p]]
            keys.add((tuple(sorted(map(tuple, np.round(c[:, :4], 6).tolist()))), tuple(sorted(map(tuple, np.round(n[:, :3], 6).tolist())))))
        algo.tell(pop, f)
        sizes = [int(x) for x in algo.species_size.numpy() if x > 0]
        out.append(stats(f, nv.sum(1) - nin - nout, en, 1 - len(keys) / cfg.pop_size, algo.num_species, sizes or [0]))
    return out

def run_np(task, seed, gens):
    import neat
    random.seed(seed)
    cfg = neat.Config(neat.DefaultGenome, neat.DefaultReproduction, neat.DefaultSpeciesSet, neat.DefaultStagnation, B.config_path(task))
    cfg.no_fitness_termination = True
    xs, ys = B._bool_cases(task)
    cases = [(tuple(map(float, x)), float(y[0])) for x, y in zip(xs, ys)]
    nout = B.TASKS[task][1]
    p = neat.Population(cfg); out = []
    for g in range(gens):
        row = {}
        def ev(genomes, config):
            gs = [gg for _, gg in genomes]
            for gg in gs:
                net = neat.nn.FeedForwardNetwork.create(gg, config)
                gg.fitness = len(cases) - sum((net.activate(x)[0] - y) ** 2 for x, y in cases)
            keys = set()
            for gg in gs:
                keys.add((tuple(sorted((k[0], k[1], float(c.enabled), round(c.weight, 6)) for k, c in gg.connections.items())),
                          tuple(sorted((k, round(n.bias, 6), round(n.response, 6)) for k, n in gg.nodes.items()))))
            row["v"] = ([gg.fitness for gg in gs], [len(gg.nodes) - nout for gg in gs],
                        [sum(c.enabled for c in gg.connections.values()) for gg in gs], 1 - len(keys) / len(gs))
        p.run(ev, 1)
        f, h, e, d = row["v"]
        out.append(stats(f, h, e, d, len(p.species.species), [len(s.members) for s in p.species.species.values()]))
    return out

def check_eval(task, seeds, gens):
    """Largest |fitness difference| between tfevo's evaluation and neat-python's
    FeedForwardNetwork on every 10th generation's tfevo population (genomes copied
    gene by gene into neat-python genomes)."""
    import neat

    from tfevo.neat import NEAT, NEATConfig, SupervisedProblem

    nin, nout, thr, cap, mn, mc = B.TASKS[task]
    cfg = NEATConfig.from_neat_python(B.config_path(task), max_nodes=mn, max_conns=mc)
    ncfg = neat.Config(neat.DefaultGenome, neat.DefaultReproduction, neat.DefaultSpeciesSet,
                       neat.DefaultStagnation, B.config_path(task))
    sup = SupervisedProblem(*B._bool_cases(task))
    xs, ys = B._bool_cases(task)
    cases = [(tuple(map(float, x)), float(y[0])) for x, y in zip(xs, ys)]

    def kmap(k):  # tfevo keys: inputs 0..I-1, outputs I..; neat-python: inputs -1..-I, outputs 0..
        k = int(k)
        return -(k + 1) if k < nin else (k - nin if k < nin + nout else k)

    worst, count = 0.0, 0
    for seed in range(seeds):
        algo = NEAT(cfg, seed=seed)
        for g in range(gens):
            pop = algo.ask()
            f = sup(pop, cfg).numpy()
            if g % 10 == 9:
                nodes, conns = (t.numpy() for t in pop)
                for p in range(cfg.pop_size):
                    gg = neat.DefaultGenome(p)
                    for n in nodes[p]:
                        if np.isnan(n[0]) or n[0] < nin:
                            continue
                        ng = neat.DefaultGenome.create_node(ncfg.genome_config, kmap(n[0]))
                        ng.bias, ng.response = float(n[1]), float(n[2])
                        gg.nodes[kmap(n[0])] = ng
                    for i, c in enumerate(conns[p]):
                        if np.isnan(c[0]):
                            continue
                        cg = neat.genes.DefaultConnectionGene((kmap(c[0]), kmap(c[1])), innovation=i)
                        cg.weight, cg.enabled = float(c[3]), bool(c[2] > 0.5)
                        gg.connections[cg.key] = cg
                    net = neat.nn.FeedForwardNetwork.create(gg, ncfg)
                    fn = len(cases) - sum((net.activate(x)[0] - y) ** 2 for x, y in cases)
                    worst = max(worst, abs(fn - float(f[p])))
                    count += 1
            algo.tell(pop, f)
    return worst, count


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--impl", choices=["tfevo", "neat-python"])
    ap.add_argument("--task", default="parity3", choices=["parity3", "parity4", "mux6"])
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--gens", type=int, default=150)
    ap.add_argument("--out", default="/tmp/neat_trace")
    ap.add_argument("--check-eval", action="store_true",
                    help="largest fitness difference of tfevo's evaluation and neat-python's on tfevo's genomes")
    ap.add_argument("--compare", action="store_true", help="median per seed and Mann-Whitney p of both saved runs")
    a = ap.parse_args()
    if a.check_eval:
        worst, count = check_eval(a.task, a.seeds, a.gens)
        print(f"{count} genomes: largest |fitness difference| {worst:.3g}")
        return
    if a.compare:
        from scipy.stats import mannwhitneyu

        t, n = np.load(f"{a.out}_tfevo.npy"), np.load(f"{a.out}_neat-python.npy")
        print("| generation | " + " | ".join(f"{c} (tfevo / neat-python, p)" for c in COLS[3:7]) + " |")
        print("|---|" + "---|" * 4)
        for g in (5, 10, 20, 30, 40, 60, 100, t.shape[1] - 1):
            cells = [f"{np.median(t[:, g, c]):.2f} / {np.median(n[:, g, c]):.2f}, "
                     f"{mannwhitneyu(t[:, g, c], n[:, g, c]).pvalue:.3f}" for c in range(3, 7)]
            print(f"| {g + 1} | " + " | ".join(cells) + " |")
        return
    fn = run_tfevo if a.impl == "tfevo" else run_np
    res = np.array([fn(a.task, s, a.gens) for s in range(a.seeds)])
    np.save(f"{a.out}_{a.impl}.npy", res)
    m = res.mean(0)
    print("| generation | " + " | ".join(COLS) + " |")
    print("|---|" + "---|" * len(COLS))
    for g in list(range(0, 10)) + list(range(10, a.gens, 10)):
        print(f"| {g + 1} | " + " | ".join(f"{x:.3f}" for x in m[g]) + " |")


if __name__ == "__main__":
    main()
