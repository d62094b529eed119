"""Replica-count invariance check: the same runs on any strategy give the same bits.

Runs a few generations of an ES (OpenES on in-graph CartPole), the seed-encoded
deep GA (:class:`~tfevo.strategies.SeedGA`, genomes decoded on each replica),
NEAT (XOR), MAP-Elites (Rastrigin QD) and SNES with per-replica host evaluators
(:class:`~tfevo.distribute.HostShards` over :class:`~tfevo.rollout.PipelinedEvaluator`
on Gymnasium's CartPole) through a
:class:`~tfevo.distribute.DistributedEvaluator` and returns the final states.
Run it on a new cluster to verify that every worker and every layout agrees::

    python -m tfevo.distribute.check --logical-cpus 3 --out /tmp/a.npz   # 3 replicas
    python -m tfevo.distribute.check --out /tmp/b.npz                    # 1 replica
    TF_CONFIG=... python -m tfevo.distribute.check --out /tmp/w0.npz     # each worker

and compare the ``.npz`` files (``--compare a.npz b.npz`` prints the verdict).
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

__all__ = ["run_checks", "compare"]

CHECKS = ("es", "ga", "neat", "qd", "host")


def _es(strategy, generations):
    from tfevo.distribute import DistributedEvaluator, ShardedRollout
    from tfevo.envs import make
    from tfevo.nn import Policy, PopulationModel, mlp
    from tfevo.strategies import OpenES

    env = make("CartPole-v1", 1)
    policy = Policy(PopulationModel(mlp((4,), 2, hidden=(8,))), env.action_spec)
    ev = DistributedEvaluator(strategy, ShardedRollout(env, policy, episodes=2, max_steps=200), seed=3)
    es = OpenES(policy.num_params, popsize=10, sigma=0.1, seed=1)
    fits = []
    for _ in range(generations):
        x = es.ask()
        f = ev.evaluate(x)
        es.tell(x, f)
        fits.append(f.numpy())
    return {"es_mean": es.mean.numpy(), "es_fitness": np.stack(fits), "es_traces": ev.traces.get("step", 0)}


def _ga(strategy, generations):
    import tensorflow as tf

    from tfevo.distribute import DistributedEvaluator
    from tfevo.strategies import SeedGA

    d = 200
    ga = SeedGA(num_dims=d, popsize=13, truncation=4, sigma=0.05, num_elite_candidates=2,
                max_generations=generations + 1, seed=5)

    def fitness(params, indices, seeds):
        noise = tf.map_fn(lambda s: tf.random.stateless_normal([], seed=s), seeds, fn_output_signature=tf.float32)
        return -tf.reduce_sum(tf.square(params - 0.1), axis=1) + 0.01 * noise

    ev = DistributedEvaluator(strategy, fitness, decode_fn=ga.decode, seed=7)
    for _ in range(generations):
        g = ga.ask()
        ga.tell(g, ev.evaluate(g))
    return {"ga_population": ga.population.numpy(), "ga_best": ga.best_fitness.numpy(),
            "ga_best_params": ga.best[0].numpy()}


def _neat(strategy, generations):
    from tfevo.distribute import DistributedEvaluator
    from tfevo.neat import NEAT, XOR

    prob = XOR()
    cfg = prob.config(pop_size=30)
    algo = NEAT(cfg, seed=2)
    # XOR.evaluate trims the population to its used width first (data-dependent shapes): eager per replica
    ev = DistributedEvaluator(strategy, lambda pop, idx, seeds: prob(pop, cfg), seed=0, eager=True)
    for _ in range(generations):
        pop = algo.ask()
        algo.tell(pop, ev.evaluate(pop))
    return {"neat_nodes": algo.nodes.numpy(), "neat_conns": algo.conns.numpy(),
            "neat_best": algo.best_fitness.numpy()}


def _qd(strategy, generations):
    from tfevo.distribute import DistributedEvaluator
    from tfevo.qd import GridArchive, IsoLineEmitter, MAPElites, rastrigin_qd

    d = 6
    archive = GridArchive(d, dims=[10, 10], ranges=[(0, 1), (0, 1)])
    me = MAPElites(archive, [IsoLineEmitter(d, 25, bounds=(0, 1))], init_bounds=(0, 1), seed=4)
    ev = DistributedEvaluator(strategy, lambda x, idx, seeds: rastrigin_qd(x), seed=0)
    for _ in range(generations):
        x = me.ask()
        f, desc = ev.evaluate_all(x)
        me.tell(x, f, desc)
    m = me.metrics()
    return {"qd_qd_score": np.float64(m.get("qd_score", np.nan)), "qd_coverage": np.float64(m.get("coverage", np.nan)),
            "qd_fitness": archive.fitness.numpy(), "qd_solutions": archive.solutions.numpy()}


def _host(strategy, generations):
    from tfevo.distribute import DistributedEvaluator, HostShards
    from tfevo.envs import make
    from tfevo.nn import Policy, PopulationModel, mlp
    from tfevo.rollout import ObservationNormalizer, PipelinedEvaluator
    from tfevo.strategies import SNES

    spec = make("CartPole-v1", 1).action_spec
    policy = Policy(PopulationModel(mlp((4,), 2, hidden=(4,))), spec)
    norm = ObservationNormalizer((4,), clip=10.0)  # one set of running statistics for all replicas

    def make_evaluator():  # Gymnasium's CartPole on the host, 2 pipelined subsets
        return PipelinedEvaluator("CartPole-v1", policy, num_envs=4, num_subsets=2, episodes=2, max_steps=40, seed=9,
                                  obs_norm=norm, update_obs_norm=False)

    shards = HostShards(make_evaluator, episodes=2, report_frames=True, obs_norm=norm)
    ev = DistributedEvaluator(strategy, shards, seed=1)
    es = SNES(policy.num_params, popsize=11, sigma=0.5, seed=3)
    fits, frames = [], []
    for _ in range(generations):
        x = es.ask()
        f = ev.evaluate(x)
        es.tell(x, f)
        fits.append(f.numpy())
        frames.append(ev.last_frames)
    return {"host_mean": es.mean.numpy(), "host_fitness": np.stack(fits), "host_frames": np.asarray(frames),
            "host_obs_count": norm.count.numpy(), "host_obs_mean": norm.mean.numpy(), "host_obs_m2": norm.m2.numpy(),
            "host_replicas_used": np.int64(len(shards.evaluators))}


def run_checks(strategy, generations: int = 3, which=CHECKS) -> dict[str, np.ndarray]:
    """Runs the chosen checks on ``strategy``; returns ``{name: final state array}``."""
    fns = {"es": _es, "ga": _ga, "neat": _neat, "qd": _qd, "host": _host}
    out = {}
    for name in which:
        out.update(fns[name](strategy, generations))
    return {k: np.asarray(v) for k, v in out.items()}


def compare(a: dict, b: dict, ignore=("es_traces", "num_replicas", "host_replicas_used")) -> list[str]:
    """Names of the arrays that differ (NaN == NaN) between two results."""
    bad = []
    for k in sorted(set(a) | set(b)):
        if k in ignore:
            continue
        if k not in a or k not in b or not np.array_equal(a[k], b[k], equal_nan=a[k].dtype.kind == "f"):
            bad.append(k)
    return bad


def main(argv=None) -> int:
    """Command line: run the checks on this process's strategy, save/compare results."""
    ap = argparse.ArgumentParser(prog="python -m tfevo.distribute.check", description=__doc__.split("\n\n")[0])
    ap.add_argument("--logical-cpus", type=int, default=0, help="split the CPU into this many replicas")
    ap.add_argument("--generations", type=int, default=3)
    ap.add_argument("--checks", default=",".join(CHECKS))
    ap.add_argument("--out", help="write the final states to this .npz")
    ap.add_argument("--against-one", action="store_true",
                    help="also run on a single replica in this process and report whether the states agree")
    ap.add_argument("--compare", nargs=2, metavar=("A", "B"), help="compare two .npz files and exit")
    args = ap.parse_args(argv)
    if args.compare:
        a, b = (dict(np.load(p)) for p in args.compare)
        bad = compare(a, b)
        print("identical" if not bad else "DIFFERENT: " + ", ".join(bad))
        return 1 if bad else 0
    from tfevo.distribute.strategy import make_strategy

    strategy = make_strategy(logical_cpus=args.logical_cpus or None)
    res = run_checks(strategy, args.generations, [c for c in args.checks.split(",") if c])
    checks = [c for c in args.checks.split(",") if c]
    status = 0
    if args.against_one:
        import tensorflow as tf

        one = run_checks(tf.distribute.OneDeviceStrategy(strategy.extended.worker_devices[0]), args.generations, checks)
        bad = compare(res, one)
        print("against one replica: " + ("identical" if not bad else "DIFFERENT: " + ", ".join(bad)))
        status = 1 if bad else 0
    res["num_replicas"] = np.asarray(strategy.num_replicas_in_sync)
    if args.out:
        np.savez(args.out, **res)
    print(f"replicas={strategy.num_replicas_in_sync} "
          + " ".join(f"{k}:{np.nansum(np.where(np.isinf(v), 0, v)):.6g}" for k, v in res.items()))
    return status


if __name__ == "__main__":
    sys.exit(main())
