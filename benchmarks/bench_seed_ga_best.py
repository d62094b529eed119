"""SeedGA under noisy fitness: what the run reports as its best, against what that member scores.

Two rules, read from the same runs (so every comparison is paired):

* ``elite``: what tfevo reports for SeedGA (``best_genome``/``best_fitness``): the Deep GA
  elite with its mean over all its evaluations;
* ``luckiest``: the highest single evaluation of the run (``best_single_*``), which is what
  SeedGA and the Trainer (its logged ``best_ever``, checkpointed and exported best) reported
  before: both took the first arg-max of each generation and replaced on a strictly higher value.

Each member picked is then scored without the training noise: ``sphere`` (a shifted sphere plus
N(0, noise^2) per evaluation): the noise-free sphere value; ``env`` (an in-graph environment,
Pendulum-v1 by default, one episode per evaluation from random start states): the mean return
over ``--test-episodes`` fresh episodes.  Prints one JSON line per seed and a summary; the number of seeds is fixed by
``--seeds`` before running.

    PYTHONPATH=$PWD python benchmarks/bench_seed_ga_best.py --task sphere --seeds 10
    PYTHONPATH=$PWD python benchmarks/bench_seed_ga_best.py --task env --seeds 8 --generations 15
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import tensorflow as tf

from tfevo.strategies.seed_ga import SeedGA


def sphere(p):
    return -tf.reduce_sum((p - 0.5) ** 2, axis=1)


def sphere_run(seed, a):
    ga = SeedGA(num_dims=20, popsize=64, truncation=8, num_elite_candidates=5, sigma=0.05,
                max_generations=a.generations, seed=seed)
    rng = np.random.RandomState(1000 + seed)

    def evaluate(g):
        f = sphere(ga.decode(g)).numpy() + a.noise * rng.standard_normal(g.shape[0])
        return tf.constant(f.astype(np.float32))

    return ga, evaluate, lambda params: sphere(params).numpy()


def env_run(seed, a):
    from tfevo import nn
    from tfevo.envs import make
    from tfevo.rollout import GenomeEvaluator, InGraphEvaluator

    env = make(a.env, 1)
    spec = env.action_spec
    pm = nn.PopulationModel(nn.mlp(tuple(env.observation_shape), spec.policy_output_size,
                                   hidden=(8,)))
    policy = nn.Policy(pm, spec)
    ga = SeedGA(pm.num_params, popsize=32, truncation=6, num_elite_candidates=3, sigma=0.1,
                max_generations=a.generations, seed=seed, init_fn=lambda s: pm.init_params(1, s)[0])
    train = GenomeEvaluator(InGraphEvaluator(a.env, policy, episodes=1, max_steps=a.max_steps,
                                             seed=seed + 1, jit_compile=False), ga.decode)
    test = InGraphEvaluator(a.env, policy, episodes=a.test_episodes, max_steps=a.max_steps,
                            seed=10_000 + seed, jit_compile=False)
    return ga, train.evaluate, lambda params: test.evaluate(params).numpy()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--task", choices=["sphere", "env"], default="sphere")
    ap.add_argument("--env", default="Pendulum-v1", help="env task: an in-graph environment id")
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--generations", type=int, default=30)
    ap.add_argument("--noise", type=float, default=1.0, help="sphere: noise standard deviation")
    ap.add_argument("--max-steps", type=int, default=200)
    ap.add_argument("--test-episodes", type=int, default=100)
    a = ap.parse_args()
    rows = []
    for seed in range(a.seeds):
        t0 = time.perf_counter()
        ga, evaluate, score = (sphere_run if a.task == "sphere" else env_run)(seed, a)
        for _ in range(a.generations):
            g = ga.ask()
            ga.tell(g, evaluate(g))
        picked = tf.stack([ga.best_genome, ga.best_single_genome])
        true = score(ga.decode(picked))
        row = dict(task=a.task, seed=seed, generations=a.generations,
                   elite_reported=float(ga.best_fitness.numpy()), elite_true=float(true[0]),
                   elite_evaluations=int(ga.best_evaluations.numpy()),
                   luckiest_reported=float(ga.best_single_fitness.numpy()), luckiest_true=float(true[1]),
                   same_member=bool(np.array_equal(picked[0].numpy(), picked[1].numpy())),
                   seconds=round(time.perf_counter() - t0, 2))
        rows.append(row)
        print(json.dumps(row), flush=True)
    er, et = np.array([r["elite_reported"] for r in rows]), np.array([r["elite_true"] for r in rows])
    lr, lt = np.array([r["luckiest_reported"] for r in rows]), np.array([r["luckiest_true"] for r in rows])
    summary = dict(
        task=a.task, seeds=len(rows),
        elite_optimism_mean=float(np.mean(er - et)), elite_optimism_sd=float(np.std(er - et, ddof=1)),
        luckiest_optimism_mean=float(np.mean(lr - lt)), luckiest_optimism_sd=float(np.std(lr - lt, ddof=1)),
        elite_true_mean=float(np.mean(et)), luckiest_true_mean=float(np.mean(lt)),
        elite_true_higher=int(np.sum(et > lt)), equal=int(np.sum(et == lt)), luckiest_true_higher=int(np.sum(lt > et)),
        abs_error_elite_smaller=int(np.sum(np.abs(er - et) < np.abs(lr - lt))),
    )
    try:
        from scipy.stats import wilcoxon

        d = np.abs(lr - lt) - np.abs(er - et)
        summary["wilcoxon_p_abs_error"] = float(wilcoxon(d).pvalue) if np.any(d != 0) else None
        d = et - lt
        summary["wilcoxon_p_true"] = float(wilcoxon(d).pvalue) if np.any(d != 0) else None
    except ImportError:
        pass
    print(json.dumps({"summary": summary}), flush=True)


if __name__ == "__main__":
    main()
