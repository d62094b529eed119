"""Per-generation statistics of tfevo.neat and neat-python 2.0 under real selection,
with the same config file, fitness and protocol as ``bench_neat_tasks.py``, and a
check of tfevo's speciation against neat-python's own ``DefaultSpeciesSet.speciate``.

Every child is compared with its two parents by the same code on both sides
(neat-python: ``DefaultReproduction.ancestors``; tfevo: the parents of its plan),
so the per-child counts are measured alike:

- ``clone``: both parents are the same genome (neat-python picks two parents
  with replacement and always crosses);
- ``add_node``/``del_node``: hidden node keys new to the child / of parent 1
  missing in it; ``add_conn``/``del_conn``: (in, out) pairs new to the child
  (not from an add-node split) / of parent 1 missing in it (not through a
  deleted node); ``reenable``: a pair disabled in both parents, enabled in the
  child;
- ``w_changed``: fraction of the child's connections also in parent 1 whose
  weight equals neither parent's (perturbed or replaced), ``w_step``: mean
  |new - parent 1's| of those; ``b_changed``: the same for node biases;
  ``en_changed``: connections whose enabled flag differs from both parents'.

Per generation (columns ``COLS``): best / mean fitness, live species, hidden
nodes, enabled connections, all connections (``conns_all``; means over the population), elites, the largest
species and species of size <= 2 (after speciation), the per-child rates
above, ``stagnant``: species removed as stagnant after the evaluation,
``founded``: species founded by the speciation after it (tfevo: of this
population in ``tell``, not counting the first; neat-python: of the next population), and (tfevo) ``sp_diff``: genomes that neat-python's speciate, run on
tfevo's genomes copied into neat-python genomes (double distances of the
float32 values) with tfevo's old representatives, puts in another species than
tfevo, and ``thr_flip``: genome/representative pairs whose float32 distance
and double distance fall on different sides of the threshold.

    nice -n 5 python benchmarks/bench_neat_gentrace.py --impl tfevo --task parity3 --seeds 20 --gens 150 --out /tmp/gt
    nice -n 5 python benchmarks/bench_neat_gentrace.py --impl neat-python --task parity3 --seeds 20 --gens 150 --out /tmp/gt
    python benchmarks/bench_neat_gentrace.py --compare --task parity3 --out /tmp/gt
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import random
import sys
from itertools import count

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, HERE)

import numpy as np  # noqa: E402

import bench_neat_tasks as B  # noqa: E402

COLS = ["best", "mean", "species", "hidden", "enabled", "elites", "largest", "small_species", "clone", "add_node",
        "del_node", "add_conn", "del_conn", "reenable", "w_changed", "w_step", "b_changed", "en_changed",
        "sp_diff", "thr_flip", "stagnant", "founded", "conns_all"]
CHILD = ["clone", "add_node", "del_node", "add_conn", "del_conn", "reenable", "w_changed", "w_step", "b_changed",
         "en_changed"]


# a genome as plain dicts: hidden {key: bias}, outputs {key: bias}, conns {(in, out): (weight, enabled)}
def child_stats(children, parents):
    """Mean per-child counts (``CHILD``) over non-elite children.
    children: list of genome dicts; parents: list of (p1, p2, same) with p1 the fitter."""
    acc = {k: [] for k in CHILD}
    wsteps = []
    for ch, (p1, p2, same) in zip(children, parents):
        acc["clone"].append(float(same))
        new_nodes = set(ch["hidden"]) - set(p1["hidden"]) - set(p2["hidden"])
        gone_nodes = set(p1["hidden"]) - set(ch["hidden"])
        acc["add_node"].append(len(new_nodes))
        acc["del_node"].append(len(gone_nodes))
        cp, pp = set(ch["conns"]), set(p1["conns"])
        added = [k for k in cp - pp if k[0] not in new_nodes and k[1] not in new_nodes]
        deleted = [k for k in pp - cp if k[0] not in gone_nodes and k[1] not in gone_nodes]
        acc["add_conn"].append(len(added))
        acc["del_conn"].append(len(deleted))
        re, wc, nw, en = 0, 0, 0, 0
        for k in cp & pp:
            w, e = ch["conns"][k]
            w1, e1 = p1["conns"][k]
            w2, e2 = p2["conns"].get(k, (w1, e1))
            nw += 1
            if w != w1 and w != w2:
                wc += 1
                wsteps.append(abs(w - w1))
            if e != e1 and e != e2:
                en += 1
            if e and not e1 and not e2:
                re += 1
        acc["reenable"].append(re)
        acc["en_changed"].append(en)
        if nw:
            acc["w_changed"].append(wc / nw)
        nb, bc = 0, 0
        for k in set(ch["nodes"]) & set(p1["nodes"]):
            b = ch["nodes"][k]
            b1 = p1["nodes"][k]
            b2 = p2["nodes"].get(k, b1)
            nb += 1
            bc += b != b1 and b != b2
        if nb:
            acc["b_changed"].append(bc / nb)
    out = {k: float(np.mean(v)) if v else np.nan for k, v in acc.items()}
    out["w_step"] = float(np.mean(wsteps)) if wsteps else np.nan
    return out


def gen_row(fit, genomes, species_sizes, elites, children, parents, sp_diff=np.nan, thr_flip=np.nan, stagnant=np.nan,
            founded=np.nan):
    fit = np.asarray(fit, float)
    hidden = [len(g["hidden"]) for g in genomes]
    enabled = [sum(e for _, e in g["conns"].values()) for g in genomes]
    r = dict(best=fit.max(), mean=fit.mean(), species=len(species_sizes), hidden=np.mean(hidden),
             enabled=np.mean(enabled), elites=elites, largest=max(species_sizes),
             small_species=sum(s <= 2 for s in species_sizes), sp_diff=sp_diff, thr_flip=thr_flip,
             stagnant=stagnant, founded=founded, conns_all=np.mean([len(g["conns"]) for g in genomes]))
    r.update(child_stats(children, parents))
    return [r[c] for c in COLS]


# ---------------------------------------------------------------- neat-python
def np_dict(g, nout):
    return {"hidden": {k: n.bias for k, n in g.nodes.items() if k >= nout},
            "nodes": {k: n.bias for k, n in g.nodes.items()},
            "conns": {k: (c.weight, c.enabled) for k, c in g.connections.items()}}


def run_np(task, seed, gens):
    import neat

    nin, nout, thr, cap, *_ = B.TASKS[task]
    random.seed(seed)
    cfg = neat.Config(neat.DefaultGenome, neat.DefaultReproduction, neat.DefaultSpeciesSet, neat.DefaultStagnation,
                      B.config_path(task))
    cfg.no_fitness_termination = True
    evaluate = _np_evaluator(task, seed)
    p = neat.Population(cfg)
    stag = {}
    update = p.reproduction.stagnation.update

    def counted_update(species_set, generation):
        out = update(species_set, generation)
        stag["n"] = sum(bool(st) for _, _, st in out)
        stag["kept"] = {sid for sid, _, st in out if not st}
        return out

    p.reproduction.stagnation.update = counted_update
    rows = []
    prev = None  # previous generation's genomes by id (parents of this one)
    for g in range(gens):
        # the species of the population about to be evaluated (speciated after the last reproduction)
        sizes = [len(s.members) for s in p.species.species.values()]
        holder = {}

        def ev(genomes, config):
            evaluate(genomes, config)
            holder["pop"] = dict(genomes)

        p.run(ev, 1)
        pop = holder["pop"]
        ids = sorted(pop)
        fit = [pop[i].fitness for i in ids]
        genomes = [np_dict(pop[i], nout) for i in ids]
        children, parents, elites = [], [], 0
        if prev is not None:
            for i in ids:
                if i in prev:
                    elites += 1
                    continue
                a, b = p.reproduction.ancestors[i]
                ga, gb = prev[a], prev[b]
                # configure_crossover: genome1 is parent 1 if strictly fitter, else genome2
                p1, p2 = (ga, gb) if ga.fitness > gb.fitness else (gb, ga)
                children.append(genomes[ids.index(i)])
                parents.append((np_dict(p1, nout), np_dict(p2, nout), a == b))
        # species removed after this evaluation, species founded in the speciation that follows
        founded = len(set(p.species.species) - stag["kept"])
        rows.append(gen_row(fit, genomes, sizes, elites, children, parents, stagnant=stag["n"], founded=founded))
        prev = pop
    return rows


def _np_evaluator(task, seed):
    import neat

    if task in B.ENV_IDS:
        import gymnasium as gym

        env = gym.make(B.ENV_IDS[task])
        rng = np.random.default_rng(seed)

        def evaluate(genomes, config):
            for _, g in genomes:
                net = neat.nn.FeedForwardNetwork.create(g, config)
                obs, _ = env.reset(seed=int(rng.integers(0, 2**31 - 1, 1)[0]))
                total = 0.0
                while True:
                    obs, r, term, trunc, _ = env.step(int(np.argmax(net.activate(obs))))
                    total += r
                    if term or trunc:
                        break
                g.fitness = total
        return evaluate
    xs, ys = B._bool_cases(task)
    cases = [(tuple(map(float, x)), float(y[0])) for x, y in zip(xs, ys)]

    def evaluate(genomes, config):
        for _, g in genomes:
            net = neat.nn.FeedForwardNetwork.create(g, config)
            g.fitness = len(cases) - sum((net.activate(x)[0] - y) ** 2 for x, y in cases)
    return evaluate


# ---------------------------------------------------------------------- tfevo
def tf_dict(nodes, conns, nin, nout):
    nv = ~np.isnan(nodes[:, 0])
    cv = ~np.isnan(conns[:, 0])
    hid = {int(n[0]): float(n[1]) for n in nodes[nv] if n[0] >= nin + nout}
    return {"hidden": hid, "nodes": {int(n[0]): float(n[1]) for n in nodes[nv] if n[0] >= nin},
            "conns": {(int(c[0]), int(c[1])): (float(c[3]), bool(c[2] > 0.5)) for c in conns[cv]}}


def neat_python_genome(nodes, conns, nin, nout, key):
    """tfevo genome rows as a neat-python DefaultGenome (values as doubles)."""
    from tfevo.neat import NEATConfig, to_neat_python

    return to_neat_python(nodes, conns, NEATConfig(num_inputs=nin, num_outputs=nout), key)


def speciation_check(cfg, ncfg, algo, nodes, conns, sp, keys_after, rep_idx):
    """(genomes in another species than neat-python's speciate puts them,
    genome/representative pairs whose float32 and double distances fall on
    different sides of the threshold; the representatives are the old ones
    and tfevo's new ones)."""
    import neat

    from tfevo.neat.speciation import distance_matrix

    nin, nout = cfg.num_inputs, cfg.num_outputs
    active = algo.species_active.numpy()
    skeys = algo.species_key.numpy()
    rn, rc = algo.species_rep_nodes.numpy(), algo.species_rep_conns.numpy()
    ss = neat.DefaultSpeciesSet(ncfg.species_set_config, neat.reporting.ReporterSet())
    ss.indexer = count(int(algo.next_species_key.numpy()) + 1)  # neat-python keys start at 1
    for s in np.nonzero(active)[0]:
        sp_obj = neat.species.Species(int(skeys[s]) + 1, 0)
        sp_obj.representative = neat_python_genome(rn[s], rc[s], nin, nout, 10**9 + int(s))
        ss.species[int(skeys[s]) + 1] = sp_obj
    mk = algo.member_key.numpy()
    popd = {int(mk[p]) + 1: neat_python_genome(nodes[p], conns[p], nin, nout, int(mk[p]) + 1)
            for p in range(cfg.pop_size)}
    ss.speciate(ncfg, popd, 0)
    diff = sum(ss.genome_to_species[int(mk[p]) + 1] != int(keys_after[sp[p]]) + 1 for p in range(cfg.pop_size))
    # threshold flips: against the old representatives and the new ones
    flips = 0
    reps = [(rn[s], rc[s]) for s in np.nonzero(active)[0]] + [(nodes[i], conns[i]) for i in rep_idx if i >= 0]
    thr = cfg.compatibility_threshold
    if reps:
        c32 = dataclasses.replace(cfg, distance_dtype="float32")
        d32 = distance_matrix(c32, np.stack([r[0] for r in reps]), np.stack([r[1] for r in reps]), nodes, conns).numpy()
        for si, (a, b) in enumerate(reps):
            ga = neat_python_genome(a, b, nin, nout, -1)
            for p in range(cfg.pop_size):
                d64 = ga.distance(popd[int(mk[p]) + 1], ncfg.genome_config)
                flips += (d32[si, p] < thr) != (d64 < thr)
    return diff, flips


def run_tfevo(task, seed, gens, check_species=True):
    import neat
    import tensorflow as tf

    from tfevo.neat import NEAT, NEATConfig, SupervisedProblem, _speciate_op, generation
    from tfevo.neat.policy import ControlProblem

    nin, nout, thr, cap, mn, mc = B.TASKS[task]
    cfg = NEATConfig.from_neat_python(B.config_path(task), max_nodes=mn, max_conns=mc)
    ncfg = neat.Config(neat.DefaultGenome, neat.DefaultReproduction, neat.DefaultSpeciesSet, neat.DefaultStagnation,
                       B.config_path(task))
    if task in B.ENV_IDS:
        prob = ControlProblem(B.ENV_IDS[task], cfg, episodes=1, seed=seed, dtype="float64")
        evaluate = prob
    else:
        sup = SupervisedProblem(*B._bool_cases(task))
        evaluate = lambda pop: sup(pop, cfg)  # noqa: E731
    algo = NEAT(cfg, seed=seed)
    captured = {}
    orig_breed, orig_spec = generation.breed, generation.speciate

    def breed(cfg_, jit, nodes, conns, p1, p2, is_elite, *a, **k):
        captured.update(p1=p1.numpy(), p2=p2.numpy(), is_elite=is_elite.numpy())
        return orig_breed(cfg_, jit, nodes, conns, p1, p2, is_elite, *a, **k)

    def speciate(cfg_, s, nodes, conns):
        before = set(s.species_key.numpy()[s.species_active.numpy()])
        out = orig_spec(cfg_, s, nodes, conns)
        captured.update(sp=out[0].numpy(), keys=out[2].numpy(), alive=out[1].numpy(),
                        founded=len(set(out[2].numpy()[out[1].numpy()]) - before) if before else 0)
        return out

    orig_plan = _speciate_op.plan

    def plan(*a, **k):
        out = orig_plan(*a, **k)
        captured.update(stagnant=int(captured["alive"].sum() - out[1].numpy().sum()))
        return out

    rows = []
    prev = None
    generation.breed, generation.speciate, _speciate_op.plan = breed, speciate, plan
    try:
        for g in range(gens):
            pop = algo.ask()
            f = evaluate(pop)
            nodes, conns = (t.numpy() for t in pop)
            P = cfg.pop_size
            genomes = [tf_dict(nodes[p], conns[p], nin, nout) for p in range(P)]
            children, parents, elites = [], [], 0
            if prev is not None:
                pn, pc, pf, p1, p2, el = prev
                for p in range(P):
                    if el[p]:
                        elites += 1
                        continue
                    children.append(genomes[p])
                    parents.append((tf_dict(pn[p1[p]], pc[p1[p]], nin, nout), tf_dict(pn[p2[p]], pc[p2[p]], nin, nout),
                                    p1[p] == p2[p]))
            state = generation.State(*[getattr(algo, n) for n in generation.State._fields])
            seeds = generation.SeedVars(algo.seeds.seed, algo.seeds.counter)
            fit = tf.cast(f, cfg.fitness_tf_dtype)
            sp_diff = flips = np.nan
            if check_species:
                # speciation alone, on the state before tell (tell changes the representatives)
                out = _speciate_op.speciate(cfg, nodes, conns, algo.species_rep_nodes, algo.species_rep_conns,
                                            algo.species_active, algo.species_key, algo.species_created,
                                            algo.species_best_fitness, algo.species_last_improved,
                                            algo.next_species_key, algo.generation)
                sp_diff, flips = speciation_check(cfg, ncfg, algo, nodes, conns, out[0].numpy(), out[2].numpy(),
                                                   out[7].numpy())
            generation.tell(cfg, False, state, seeds, tf.convert_to_tensor(nodes), tf.convert_to_tensor(conns), fit)
            sizes = np.bincount(captured["sp"], minlength=cfg.max_species)
            sizes = [int(s) for s in sizes if s > 0]
            rows.append(gen_row(np.asarray(f, float), genomes, sizes, elites, children, parents, sp_diff, flips,
                                captured["stagnant"], captured["founded"]))
            prev = (nodes, conns, np.asarray(f), captured["p1"], captured["p2"], captured["is_elite"])
    finally:
        generation.breed, generation.speciate, _speciate_op.plan = orig_breed, orig_spec, orig_plan
    return rows


def compare(task, out):
    from scipy.stats import mannwhitneyu

    t, n = np.load(f"{out}_{task}_tfevo.npy"), np.load(f"{out}_{task}_neat-python.npy")
    G = t.shape[1]
    gens = [g for g in (1, 2, 5, 10, 20, 30, 50, 100, 150, 200, 300) if g <= G]
    print(f"{task}: {t.shape[0]} tfevo seeds, {n.shape[0]} neat-python seeds, {G} generations; per cell: "
          "tfevo / neat-python mean over seeds, Mann-Whitney p over the seeds' values")
    print("| statistic | " + " | ".join(f"generation {g}" for g in gens) + " | mean over generations 2.. per seed |")
    print("|---|" + "---|" * (len(gens) + 1))
    for c, name in enumerate(COLS):
        if name in ("sp_diff", "thr_flip"):
            continue
        cells = []
        for g in gens:
            a, b = t[:, g - 1, c], n[:, g - 1, c]
            a, b = a[~np.isnan(a)], b[~np.isnan(b)]
            if len(a) == 0 or len(b) == 0:
                cells.append("-")
                continue
            p = mannwhitneyu(a, b).pvalue if (np.ptp(np.r_[a, b]) > 0) else 1.0
            cells.append(f"{a.mean():.3g}/{b.mean():.3g} ({p:.2f})")
        # all generations pooled: per seed mean over generations 2..G
        a, b = np.nanmean(t[:, 1:, c], 1), np.nanmean(n[:, 1:, c], 1)
        p = mannwhitneyu(a, b).pvalue if np.ptp(np.r_[a, b]) > 0 else 1.0
        cells.append(f"{a.mean():.3g}/{b.mean():.3g} ({p:.3f})")
        print(f"| {name} | " + " | ".join(cells) + " |")
    for name in ("sp_diff", "thr_flip"):
        c = COLS.index(name)
        print(f"tfevo {name}: total {np.nansum(t[:, :, c]):g} over {t.shape[0]} seeds x {G} generations")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--impl", choices=["tfevo", "neat-python"])
    ap.add_argument("--task", default="parity3", choices=list(B.TASKS))
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--gens", type=int, default=150)
    ap.add_argument("--out", default="/tmp/neat_gentrace")
    ap.add_argument("--no-species-check", action="store_true")
    ap.add_argument("--compare", action="store_true")
    a = ap.parse_args()
    if a.compare:
        compare(a.task, a.out)
        return
    res = []
    for s in range(a.first_seed, a.first_seed + a.seeds):
        if a.impl == "tfevo":
            res.append(run_tfevo(a.task, s, a.gens, not a.no_species_check))
        else:
            res.append(run_np(a.task, s, a.gens))
        np.save(f"{a.out}_{a.task}_{a.impl}.npy", np.array(res, float))
        r = np.array(res[-1], float)
        print(f"seed {s}: best {r[:, 0].max():.3f}, final species {r[-1, 2]:g}, "
              f"sp_diff {np.nansum(r[:, COLS.index('sp_diff')]):g}, thr_flip {np.nansum(r[:, COLS.index('thr_flip')]):g}",
              flush=True)


if __name__ == "__main__":
    main()
