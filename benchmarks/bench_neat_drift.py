"""Structural drift of tfevo.neat and neat-python under equal fitness, same config file.

With every genome's fitness equal, selection is blind and the mean genome
size per generation is set by mutation, crossover and reproduction alone:
a difference between the libraries here is a difference in those operators'
semantics.  ``--fitness hidden`` / ``hidden-ties`` tell the hidden node
count instead (plus a uniform tie-breaker, or alone): the response to real
selection, through speciation, allotment, elitism and parent choice.  Prints per generation (mean over seeds): nodes per genome
(inputs counted), connections, enabled connections, live species, and the
fraction of genomes without an enabled connection.

    python benchmarks/bench_neat_drift.py --impl tfevo --seeds 6 --gens 15
    python benchmarks/bench_neat_drift.py --impl neat-python --seeds 6 --gens 15
    python benchmarks/bench_neat_drift.py --impl tfevo --task parity3 --seeds 20 --gens 30 --fitness hidden

The species column is read after each generation's ``tell`` (tfevo: the
species of the told population) and after ``Population.run(..., 1)``
(neat-python: the species of the NEXT population), so neat-python's column
runs one generation ahead.
"""

from __future__ import annotations

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


def _fitness(kind, rng, hidden):
    """Told fitness: all equal (blind selection), i.i.d. uniform, or the hidden node count plus a
    uniform tie-breaker, or without it (many ties): selection responses both libraries should show alike."""
    hidden = np.asarray(hidden, np.float64)
    if kind == "zero":
        return np.zeros(len(hidden))
    if kind == "hidden-ties":
        return hidden
    u = rng.random(len(hidden))
    return u if kind == "random" else hidden + u


def drift_tfevo(path, seed, gens, kind="zero"):
    from tfevo.neat import NEAT, NEATConfig

    cfg = NEATConfig.from_neat_python(path, max_nodes=32, max_conns=96)
    algo = NEAT(cfg, seed=seed)
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(gens):
        pop = algo.ask()
        nodes, conns = (t.numpy() for t in pop)
        cv = ~np.isnan(conns[..., 0])
        en = (cv & (conns[..., 2] > 0.5)).sum(1)
        hidden = (~np.isnan(nodes[..., 0])).sum(1) - cfg.num_inputs - cfg.num_outputs
        algo.tell(pop, _fitness(kind, rng, hidden).astype(np.float32))
        out.append([(~np.isnan(nodes[..., 0])).sum(1).mean(), cv.sum(1).mean(), en.mean(), algo.num_species,
                    (en == 0).mean()])
    return out


def drift_neat_python(path, seed, gens, kind="zero"):
    import neat

    random.seed(seed)
    cfg = neat.Config(neat.DefaultGenome, neat.DefaultReproduction, neat.DefaultSpeciesSet, neat.DefaultStagnation,
                      path)
    cfg.no_fitness_termination = True
    p = neat.Population(cfg)
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(gens):
        row = {}

        def ev(genomes, config):
            gs = [g for _, g in genomes]
            nout = config.genome_config.num_outputs
            for g, f in zip(gs, _fitness(kind, rng, [len(g.nodes) - nout for g in gs])):
                g.fitness = float(np.float32(f))
            en = np.array([sum(c.enabled for c in g.connections.values()) for g in gs])
            row["v"] = [np.mean([len(g.nodes) + config.genome_config.num_inputs for g in gs]),
                        np.mean([len(g.connections) for g in gs]), en.mean(), 0, (en == 0).mean()]

        p.run(ev, 1)
        row["v"][3] = len(p.species.species)
        out.append(row["v"])
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--impl", choices=["tfevo", "neat-python"], required=True)
    ap.add_argument("--task", default="mountaincar", choices=list(B.TASKS))
    ap.add_argument("--seeds", type=int, default=6)
    ap.add_argument("--gens", type=int, default=15)
    ap.add_argument("--fitness", default="zero", choices=["zero", "random", "hidden", "hidden-ties"],
                    help="told fitness: all zero, i.i.d. uniform, hidden nodes + uniform, or hidden nodes alone")
    a = ap.parse_args()
    fn = drift_tfevo if a.impl == "tfevo" else drift_neat_python
    m = np.mean([fn(B.config_path(a.task), s, a.gens, a.fitness) for s in range(a.seeds)], 0)
    print("| generation | nodes | connections | enabled | species | no enabled connection |")
    print("|---|---|---|---|---|---|")
    for g, row in enumerate(m, 1):
        print(f"| {g} | " + " | ".join(f"{x:.3f}" for x in row) + " |")


if __name__ == "__main__":
    main()
