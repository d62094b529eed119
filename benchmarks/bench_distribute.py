"""Generation time of a sharded in-graph problem and of per-replica host simulators
(HostShards over PipelinedEvaluator, MuJoCo) on 1, 2 and 4 logical CPU devices, and
communication volume per generation for the seed-encoded GA vs full parameters.

    python benchmarks/bench_distribute.py [--popsize 256] [--repeats 5] [--host-popsize 32]

Prints markdown tables.  All device counts run in one process (the CPU is split
into 4 logical devices first; MirroredStrategy over the first 1, 2 or 4), and
the plain single-device tfevo.rollout.InGraphEvaluator is timed as the baseline.
"""

import argparse
import os
import statistics
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from tfevo.distribute import split_cpu  # noqa: E402

DEVICES = split_cpu(4)

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from tfevo.distribute import DistributedEvaluator, ShardedRollout  # noqa: E402
from tfevo.envs import make  # noqa: E402
from tfevo.nn import Policy, PopulationModel, mlp  # noqa: E402
from tfevo.rollout import InGraphEvaluator  # noqa: E402
from tfevo.strategies import OpenES, SeedGA  # noqa: E402


def time_generations(evaluate, es, repeats):
    t0 = time.perf_counter()
    x = es.ask()
    es.tell(x, evaluate(x))  # warm-up: traces/compiles
    first = time.perf_counter() - t0
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        x = es.ask()
        f = evaluate(x)
        es.tell(x, f)
        float(f[0])
        times.append(time.perf_counter() - t0)
    return first, statistics.median(times), f


def host_section(args):
    """HostShards: every replica drives its own PipelinedEvaluator (MuJoCo), one shared obs normalizer."""
    from tfevo.distribute import HostShards
    from tfevo.rollout import ObservationNormalizer, PipelinedEvaluator

    env_id, p, slots, steps = args.host_env, args.host_popsize, args.host_slots, args.host_steps
    probe = make(env_id, 1)
    obs_shape, spec = tuple(probe.observation_shape), probe.action_spec
    probe.close()
    policy = Policy(PopulationModel(mlp(obs_shape, spec.policy_output_size, hidden=(32, 32))), spec)
    d = policy.num_params
    print(f"\n## Generation time, OpenES on host {env_id} through HostShards (P={p}, MLP {obs_shape[0]}-32-32-"
          f"{spec.policy_output_size}, D={d}, 1 episode of {steps} steps, {slots} simulator slots in total, "
          f"K=2 subsets per replica, shared obs normalizer), median of {args.repeats} after warm-up\n")
    print("| evaluator | replicas | slots per replica | first gen s | gen s (median) | env steps/s | "
          "speed-up vs 1 replica |")
    print("|---|---|---|---|---|---|---|")
    base_norm = ObservationNormalizer(obs_shape, clip=10.0)
    base = PipelinedEvaluator(env_id, policy, num_envs=slots, num_subsets=2, max_steps=steps, obs_norm=base_norm)
    first, med, _ = time_generations(base.evaluate, OpenES(d, popsize=p, sigma=0.05, seed=0), args.repeats)
    print(f"| tfevo.rollout.PipelinedEvaluator (no tf.distribute) | 1 | {slots} | {first:.2f} | {med:.3f} | "
          f"{p * steps / med:,.0f} | - |")
    one, results = None, {}
    for n in (1, 2, 4):
        norm = ObservationNormalizer(obs_shape, clip=10.0)
        per = max(2, slots // n)

        def make_evaluator(norm=norm, per=per):
            return PipelinedEvaluator(env_id, policy, num_envs=per, num_subsets=2, max_steps=steps, obs_norm=norm,
                                      update_obs_norm=False)

        shards = HostShards(make_evaluator, episodes=1, report_frames=True, obs_norm=norm)
        ev = DistributedEvaluator(tf.distribute.MirroredStrategy(DEVICES[:n]), shards, seed=0)
        first, med, f = time_generations(ev.evaluate, OpenES(d, popsize=p, sigma=0.05, seed=0), args.repeats)
        results[n] = (f.numpy(), norm.mean.numpy())
        one = one or med
        print(f"| DistributedEvaluator + HostShards | {n} | {per} | {first:.2f} | {med:.3f} | "
              f"{p * steps / med:,.0f} | {one / med:.2f}x |")
        for e in shards.evaluators.values():
            e.close()
    same = all(np.array_equal(results[1][0], results[n][0]) and np.array_equal(results[1][1], results[n][1])
               for n in (2, 4))
    print(f"\nlast-generation fitness and observation statistics identical for 1, 2, 4 replicas: {same}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--popsize", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--hidden", type=int, default=32)
    ap.add_argument("--host-env", default="HalfCheetah-v5")
    ap.add_argument("--host-popsize", type=int, default=32, help="0 skips the host-simulator section")
    ap.add_argument("--host-slots", type=int, default=16)
    ap.add_argument("--host-steps", type=int, default=200)
    args = ap.parse_args()
    load = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    env = make("CartPole-v1", 1)
    policy = Policy(PopulationModel(mlp((4,), 2, hidden=(args.hidden, args.hidden))), env.action_spec)
    d = policy.num_params
    p = args.popsize
    print(f"uptime at start: {load}\n")
    print(f"## Generation time, OpenES on in-graph CartPole-v1 (P={p}, MLP 4-{args.hidden}-{args.hidden}-2, "
          f"D={d}, 1 episode, <=500 steps), median of {args.repeats} after warm-up\n")
    print("| evaluator | replicas | first gen (trace+compile) s | gen s (median) | speed-up vs 1 replica |")
    print("|---|---|---|---|---|")
    base = InGraphEvaluator(env, policy, episodes=1, seed=0)
    first, med, _ = time_generations(base.evaluate, OpenES(d, popsize=p, sigma=0.05, seed=0), args.repeats)
    print(f"| tfevo.rollout.InGraphEvaluator (no tf.distribute) | 1 | {first:.2f} | {med:.3f} | - |")
    one = None
    results = {}
    for n in (1, 2, 4):
        st = tf.distribute.MirroredStrategy(DEVICES[:n])
        ev = DistributedEvaluator(st, ShardedRollout(env, policy, episodes=1), seed=0, jit_compile=True)
        first, med, f = time_generations(ev.evaluate, OpenES(d, popsize=p, sigma=0.05, seed=0), args.repeats)
        results[n] = f.numpy()
        one = one or med
        print(f"| DistributedEvaluator + ShardedRollout (XLA) | {n} | {first:.2f} | {med:.3f} | {one / med:.2f}x |")
    same = all(np.array_equal(results[1], results[n]) for n in (2, 4))
    print(f"\nlast-generation fitness identical for 1, 2, 4 replicas: {same}")

    if args.host_popsize:
        host_section(args)

    print("\n## Communication per generation (bytes)\n")
    print("Each worker runs the same deterministic `ask`/`tell`, so the population never crosses the network in "
          "tfevo.distribute; only fitness is all-gathered.  For comparison, the bytes a chief would send if it "
          "shipped genomes to the workers:\n")
    print("| setting | P | D | genome bytes / member | population message | fitness all-gather |")
    print("|---|---|---|---|---|---|")
    ga = SeedGA(num_dims=d, popsize=p, truncation=8, max_generations=50, seed=0)
    ev = DistributedEvaluator(tf.distribute.MirroredStrategy(DEVICES[:4]),
                              lambda x, i, s: -tf.reduce_sum(x * x, axis=1), decode_fn=ga.decode, seed=0)
    for _ in range(3):
        g = ga.ask()
        ga.tell(g, ev.evaluate(g))
    gathered = ev.bytes_gathered
    for name, pp, dd, gens in [(f"this benchmark, generation 3", p, d, 3),
                               ("Atari deep GA (Such et al.: P=1000, Nature DQN)", 1000, 4_000_000, 100)]:
        seed_b = 4 * (gens + 2)  # live seeds + count at generation `gens`
        full_b = 4 * dd
        print(f"| {name}: seed-encoded GA (live seeds) | {pp} | {dd} | {seed_b} | {pp * seed_b:,} | {4 * pp:,} |")
        print(f"| {name}: full float32 parameters | {pp} | {dd} | {full_b:,} | {pp * full_b:,} | {4 * pp:,} |")
    print(f"\nmeasured DistributedEvaluator.bytes_gathered per generation (P={p}): {gathered}; "
          f"SeedGA tensor as held (padded to max_generations+2={ga.genome_length}): {4 * ga.genome_length} B/member")
    print(f"\nuptime at end: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}")


if __name__ == "__main__":
    main()
