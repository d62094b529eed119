"""Benchmark: in-graph evaluator vs a naive Gymnasium + Keras loop.

Measures environment steps per second (population x episodes x steps, only
steps of running episodes are counted) of :class:`InGraphEvaluator` on
CartPole-v1 and Pendulum-v1 with an MLP 64x64 policy (tfevo.nn), for several
population sizes, with and without XLA.  Compile/trace time (first call minus
a steady-state call) is reported separately; steady-state numbers are the
median of ``--repeats`` calls after the warm-up call.

The naive baseline is what one writes without tfevo: Gymnasium's
``SyncVectorEnv`` with one env per member and one eager Keras call per member
per step.  Its cost is linear in P, so it is measured at a small P and its
steps/s (which does not depend on P) is the reference for the ratios.

Wall-clock and process CPU time are both reported: the machine is shared, so
CPU-seconds are the steadier measure.

Run:  python benchmarks/bench_classic.py [--pops 64 256 1024] [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402


def _timed(fn):
    w, c = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - w, time.process_time() - c


def bench_ingraph(env_id, popsize, jit, repeats, hidden=(64, 64)):
    from tfevo.problems.control import control_problem

    policy, ev, _ = control_problem(env_id, hidden=hidden, episodes=1, seed=0, jit_compile=jit)
    params = policy.init_params(popsize, seed=1)
    _, first_wall, _ = _timed(lambda: ev.evaluate(params).numpy())
    walls, cpus, frames = [], [], []
    for _ in range(repeats):
        _, w, c = _timed(lambda: ev.evaluate(params).numpy())
        walls.append(w)
        cpus.append(c)
        frames.append(ev.last_frames)
    wall = statistics.median(walls)
    cpu = statistics.median(cpus)
    fr = statistics.median(frames)
    return {
        "compile_s": max(first_wall - wall, 0.0),
        "wall_s": wall,
        "frames": fr,
        "steps_per_s": fr / wall,
        "steps_per_cpu_s": fr / max(cpu, 1e-9),
    }


def bench_naive(env_id, popsize, hidden=(64, 64), max_steps=None):
    """SyncVectorEnv (one env per member) + one eager Keras call per member per step."""
    import gymnasium as gym

    from tfevo.envs import make
    from tfevo.nn import Policy, PopulationModel, mlp

    tenv = make(env_id)
    pm = PopulationModel(mlp(tenv.observation_shape, tenv.action_spec.policy_output_size, hidden=hidden))
    policy = Policy(pm, tenv.action_spec)
    params = policy.init_params(popsize, seed=1)
    models = [pm.to_keras(params[i]) for i in range(popsize)]
    discrete = tenv.action_spec.discrete
    low, high = tenv.action_spec.low, tenv.action_spec.high
    venv = gym.vector.SyncVectorEnv([lambda: gym.make(env_id) for _ in range(popsize)])
    limit = max_steps or tenv.max_episode_steps

    def run(limit=limit):
        obs, _ = venv.reset(seed=0)
        done = np.zeros(popsize, bool)
        frames = 0
        for _ in range(limit):
            acts = []
            for i in range(popsize):
                if done[i]:
                    acts.append(0 if discrete else np.zeros(1, np.float32))
                    continue
                y = models[i](obs[i : i + 1], training=False).numpy()[0]
                if discrete:
                    acts.append(int(np.argmax(y)))
                else:
                    acts.append((low + (np.tanh(y) + 1.0) * 0.5 * (high - low)).astype(np.float32))
            frames += int((~done).sum())
            obs, _, term, trunc, _ = venv.step(np.array(acts))
            done |= term | trunc
            if done.all():
                break
        return frames

    run(limit=2)  # warm-up (first Keras calls trace)
    frames, wall, cpu = _timed(run)
    venv.close()
    return {"frames": frames, "wall_s": wall, "steps_per_s": frames / wall, "steps_per_cpu_s": frames / max(cpu, 1e-9)}


def bench_env_only(env_id, num_envs, steps, jit, repeats):
    """Raw environment stepping (constant actions) in one compiled loop."""
    from tfevo.envs import make

    env = make(env_id, num_envs)
    spec = env.action_spec
    action = tf.zeros([num_envs], tf.int32) if spec.discrete else tf.zeros([num_envs, *spec.shape], tf.float32)

    @tf.function(jit_compile=jit, autograph=False)
    def run(seed):
        state, obs = env.reset(seed)

        def body(i, state, acc):
            r = env.step(state, action)
            # depend on the whole state so nothing is dead code
            return i + 1, r.state, acc + tf.reduce_sum(r.reward) + tf.reduce_sum(r.obs) + tf.reduce_sum(tf.cast(r.terminated, tf.float32))

        return tf.while_loop(lambda i, s, a: i < steps, body, (0, state, 0.0))[2]

    _, first, _ = _timed(lambda: run(tf.constant([0, 0])).numpy())
    walls, cpus = [], []
    for r in range(repeats):
        _, w, c = _timed(lambda: run(tf.constant([0, r + 1])).numpy())
        walls.append(w)
        cpus.append(c)
    wall, cpu = statistics.median(walls), statistics.median(cpus)
    frames = num_envs * steps
    return {"compile_s": max(first - wall, 0.0), "wall_s": wall, "steps_per_s": frames / wall,
            "steps_per_cpu_s": frames / max(cpu, 1e-9)}


def bench_gym_vector(env_id, num_envs, steps):
    """Gymnasium's own NumPy-vectorized env (vector_entry_point), constant actions."""
    import gymnasium as gym

    venv = gym.make_vec(env_id, num_envs=num_envs, vectorization_mode="vector_entry_point")
    venv.reset(seed=0)
    acts = np.zeros(num_envs, np.int64)

    def run():
        for _ in range(steps):
            venv.step(acts)

    run()
    _, wall, cpu = _timed(run)
    venv.close()
    frames = num_envs * steps
    return {"wall_s": wall, "steps_per_s": frames / wall, "steps_per_cpu_s": frames / max(cpu, 1e-9)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--envs", nargs="+", default=["CartPole-v1", "Pendulum-v1"])
    ap.add_argument("--pops", nargs="*", type=int, default=[64, 256, 1024])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--naive-pop", type=int, default=8)
    ap.add_argument("--env-batch", nargs="+", type=int, default=[1024, 16384])
    args = ap.parse_args()

    load = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    print(f"date: {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}")
    print(f"uptime (start): {load}")
    print(f"tensorflow {tf.__version__}, {os.cpu_count()} CPUs\n")
    print("| env | P | jit | compile s | steady s/call | frames/call | steps/s (wall) | steps/s (CPU) "
          "| vs naive (wall) | vs naive (CPU) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for env_id in args.envs:
        naive = bench_naive(env_id, args.naive_pop)
        print(f"| {env_id} | {args.naive_pop} | naive SyncVectorEnv + per-member Keras | - | {naive['wall_s']:.3f} "
              f"| {naive['frames']} | {naive['steps_per_s']:.0f} | {naive['steps_per_cpu_s']:.0f} | 1.0 | 1.0 |",
              flush=True)
        for p in args.pops:
            for jit in (True, False):
                r = bench_ingraph(env_id, p, jit, args.repeats)
                print(f"| {env_id} | {p} | {'XLA' if jit else 'graph'} | {r['compile_s']:.2f} | {r['wall_s']:.3f} "
                      f"| {r['frames']:.0f} | {r['steps_per_s']:.0f} | {r['steps_per_cpu_s']:.0f} "
                      f"| {r['steps_per_s'] / naive['steps_per_s']:.0f}x "
                      f"| {r['steps_per_cpu_s'] / naive['steps_per_cpu_s']:.0f}x |", flush=True)
    print("\nEnvironment stepping only (constant actions, 200 steps per call, no policy):\n")
    print("| env | N envs | engine | compile s | steady s/call | steps/s (wall) | steps/s (CPU) |")
    print("|---|---|---|---|---|---|---|")
    for n in args.env_batch:
        g = bench_gym_vector("CartPole-v1", n, 200)
        print(f"| CartPole-v1 | {n} | Gymnasium CartPoleVectorEnv (NumPy) | - | {g['wall_s']:.3f} "
              f"| {g['steps_per_s']:.0f} | {g['steps_per_cpu_s']:.0f} |", flush=True)
        for env_id in args.envs:
            for jit in (True, False):
                r = bench_env_only(env_id, n, 200, jit, args.repeats)
                print(f"| {env_id} | {n} | tfevo {'XLA' if jit else 'graph'} | {r['compile_s']:.2f} | {r['wall_s']:.3f} "
                      f"| {r['steps_per_s']:.0f} | {r['steps_per_cpu_s']:.0f} |", flush=True)
    print(f"\nuptime (end): {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}")


if __name__ == "__main__":
    main()
