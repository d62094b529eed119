"""Steps per second of tfevo's batched MuJoCo envs vs Gymnasium, same run.

Run: ``python benchmarks/bench_mujoco.py [--quick]``.  Prints markdown tables.

Measured (random actions drawn beforehand, no policy, no resets; an episode
that terminates keeps stepping, which costs the same physics):

* HalfCheetah-v5, num_envs in {16, 64, 256}, 1 and 2 threads:
  tfevo ``backend="batch"`` (mujoco.batch.Batch), tfevo ``backend="threads"``
  (Python thread pool around mj_step), raw ``mujoco.rollout`` called once per
  env step (the simulator alone, no rewards/observations), Gymnasium's own env
  stepped in a Python loop, ``gymnasium.vector.SyncVectorEnv`` and
  ``AsyncVectorEnv`` (one process per env, so only at 16 envs).
* Ant-v5 and Humanoid-v5 at 64 envs, 1 and 2 threads, vs Gymnasium's loop
  and SyncVectorEnv.

Each number is the median of ``REPEATS`` timed windows after one warm-up
window; construction time (model compile, thread start) is reported apart.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
import types

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
try:  # Gymnasium's MuJoCo envs import imageio (used for video files only)
    import imageio  # noqa: F401
except ImportError:
    sys.modules["imageio"] = types.ModuleType("imageio")

import gymnasium as gym  # noqa: E402
import mujoco  # noqa: E402
from mujoco import rollout as mj_rollout  # noqa: E402

from tfevo.envs.mujoco import MujocoVectorEnv, disable_log_file  # noqa: E402

REPEATS = 3
WINDOW = 0.8  # seconds per timed window


CPU_RATES: dict = {}  # label -> steps per CPU-second of this process (all its threads)
CALLER_US: dict = {}  # label -> CPU microseconds of the calling thread per send+recv


def timed(step, steps_per_call: int, label: str = "") -> float:
    """Median steps/s (wall) over ``REPEATS`` windows, after one warm-up window.

    Also records steps per CPU-second of this process in ``CPU_RATES[label]``:
    on a machine shared with other jobs the wall rate mostly says how much CPU
    the scheduler gave us, the CPU rate how efficiently it was used.
    """
    rates, cpu_rates = [], []
    for r in range(REPEATS + 1):
        n, t0, c0 = 0, time.perf_counter(), time.process_time()
        while True:
            step()
            n += 1
            dt = time.perf_counter() - t0
            if dt >= (WINDOW if r else WINDOW / 2):
                break
        dc = time.process_time() - c0
        if r:
            rates.append(n * steps_per_call / dt)
            cpu_rates.append(n * steps_per_call / max(dc, 1e-9))
    if label:
        CPU_RATES[label] = statistics.median(cpu_rates)
    return statistics.median(rates)


def actions(nu: int, n: int, k: int = 64, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1, 1, size=(k, n, nu)).astype(np.float32)


def bench_tfevo(env_id: str, n: int, threads: int, backend: str):
    t0 = time.perf_counter()
    env = MujocoVectorEnv(env_id, n, num_threads=threads, backend=backend)
    env.reset()
    build = time.perf_counter() - t0
    acts = actions(env.model.nu, n)
    idx = np.arange(n)
    c = [0]

    def step():
        env.send(acts[c[0] % len(acts)], idx)
        env.recv()
        c[0] += 1

    rate = timed(step, n, f"tfevo-{backend}-{env_id}-{n}-{threads}")
    # CPU time of the calling thread per send+recv: what pipelined inference loses
    t0, k = time.thread_time(), 200
    for _ in range(k):
        step()
    CALLER_US[f"{backend}-{env_id}-{n}-{threads}"] = (time.thread_time() - t0) / k * 1e6
    env.close()
    return rate, build


def bench_rollout(env_id: str, n: int, threads: int):
    """mujoco.rollout called once per env step: the simulator without bookkeeping."""
    env = MujocoVectorEnv(env_id, 1)
    m, fs = env.model, env.task.frame_skip
    env.close()
    datas = [mujoco.MjData(m) for _ in range(threads)]
    spec = mujoco.mjtState.mjSTATE_FULLPHYSICS
    d = mujoco.MjData(m)
    s0 = np.zeros(mujoco.mj_stateSize(m, spec))
    mujoco.mj_getState(m, d, s0, spec)
    state = np.repeat(s0[None], n, 0)
    acts = actions(m.nu, n).astype(np.float64)
    c = [0]
    pool = mj_rollout.Rollout(nthread=threads)

    def step():
        ctrl = np.repeat(acts[c[0] % len(acts)][:, None, :], fs, 1)
        st, _ = pool.rollout(m, datas, state, ctrl, nstep=fs)
        state[:] = st[:, -1]
        c[0] += 1

    rate = timed(step, n, f"rollout-{env_id}-{n}-{threads}")
    pool.close()
    return rate


def bench_gym_loop(env_id: str):
    env = gym.make(env_id)
    env.reset(seed=0)
    acts = actions(env.action_space.shape[0], 1)[:, 0]
    c = [0]

    def step():
        env.step(acts[c[0] % len(acts)])
        c[0] += 1

    rate = timed(step, 1, f"loop-{env_id}")
    env.close()
    return rate


def bench_gym_vector(env_id: str, n: int, kind: str):
    t0 = time.perf_counter()
    if kind == "sync":
        env = gym.vector.SyncVectorEnv([lambda: gym.make(env_id) for _ in range(n)], autoreset_mode="SameStep")
    else:
        env = gym.vector.AsyncVectorEnv(
            [lambda: gym.make(env_id) for _ in range(n)], autoreset_mode="SameStep", context="fork"
        )
    env.reset(seed=0)
    build = time.perf_counter() - t0
    acts = actions(env.single_action_space.shape[0], n)
    c = [0]

    def step():
        env.step(acts[c[0] % len(acts)])
        c[0] += 1

    rate = timed(step, n, f"{kind}-{env_id}-{n}")
    env.close()
    return rate, build


def load() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="1 repeat of 0.4 s (smoke run)")
    args = p.parse_args(argv)
    global REPEATS, WINDOW
    if args.quick:
        REPEATS, WINDOW = 1, 0.4
    C = CPU_RATES
    disable_log_file()  # Gymnasium's envs would log MuJoCo's compiler notes into ./MUJOCO_LOG.TXT
    print(f"# bench_mujoco  {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}")
    print(f"mujoco {mujoco.__version__}, gymnasium {gym.__version__}, {os.cpu_count()} CPUs; "
          f"median of {REPEATS} x {WINDOW}s windows after a warm-up window")
    print(f"load before: `{load()}`\n")

    env_id = "HalfCheetah-v5"
    loop = bench_gym_loop(env_id)
    lc = C[f"loop-{env_id}"]
    print(f"## {env_id}: steps/s (wall clock)\n")
    print(f"Gymnasium single env in a Python loop: **{loop:,.0f}** steps/s wall, {lc:,.0f} steps per CPU-second\n")
    print("| num_envs | threads | tfevo batch | tfevo threads | raw mujoco.rollout | gym Sync | gym Async "
          "| batch / loop | batch / Sync | batch / Async | build s (tfevo, Sync) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    rows = []
    for n in (16, 64, 256):
        sync, sync_build = bench_gym_vector(env_id, n, "sync")
        asyn = bench_gym_vector(env_id, n, "async")[0] if n == 16 else float("nan")
        for th in (1, 2):
            rb, bb = bench_tfevo(env_id, n, th, "batch")
            rt, _ = bench_tfevo(env_id, n, th, "threads")
            rr = bench_rollout(env_id, n, th)
            a_txt = f"{asyn:,.0f}" if asyn == asyn else "-"
            ra_txt = f"{rb / asyn:.1f}x" if asyn == asyn else "-"
            print(f"| {n} | {th} | {rb:,.0f} | {rt:,.0f} | {rr:,.0f} | {sync:,.0f} | {a_txt} | "
                  f"{rb / loop:.2f}x | {rb / sync:.2f}x | {ra_txt} | {bb:.2f}, {sync_build:.2f} |", flush=True)
            rows.append((n, th))
    print(f"\n## {env_id}: steps per CPU-second of the process (all threads; Async's workers not counted)\n")
    print("| num_envs | threads | tfevo batch | tfevo threads | raw mujoco.rollout | gym Sync | batch / loop | batch / Sync "
          "| caller-thread CPU µs per send+recv (batch, threads) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for n, th in rows:
        b = C[f"tfevo-batch-{env_id}-{n}-{th}"]
        t = C[f"tfevo-threads-{env_id}-{n}-{th}"]
        r = C[f"rollout-{env_id}-{n}-{th}"]
        sy = C[f"sync-{env_id}-{n}"]
        cb, ct = CALLER_US[f"batch-{env_id}-{n}-{th}"], CALLER_US[f"threads-{env_id}-{n}-{th}"]
        print(f"| {n} | {th} | {b:,.0f} | {t:,.0f} | {r:,.0f} | {sy:,.0f} | {b / lc:.2f}x | {b / sy:.2f}x "
              f"| {cb:.0f}, {ct:.0f} |")

    print("\n## Ant-v5 and Humanoid-v5, 64 envs (tfevo threads backend)\n")
    print("| env | threads | tfevo steps/s | gym loop | gym Sync | / loop | / Sync "
          "| tfevo steps/CPU-s | loop steps/CPU-s | Sync steps/CPU-s | CPU-s ratio / loop |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for env_id in ("Ant-v5", "Humanoid-v5"):
        loop = bench_gym_loop(env_id)
        sync, _ = bench_gym_vector(env_id, 64, "sync")
        for th in (1, 2):
            rt, _ = bench_tfevo(env_id, 64, th, "threads")
            tc, lc, sc = C[f"tfevo-threads-{env_id}-64-{th}"], C[f"loop-{env_id}"], C[f"sync-{env_id}-64"]
            print(f"| {env_id} | {th} | {rt:,.0f} | {loop:,.0f} | {sync:,.0f} | {rt / loop:.2f}x | {rt / sync:.2f}x "
                  f"| {tc:,.0f} | {lc:,.0f} | {sc:,.0f} | {tc / lc:.2f}x |", flush=True)
    print(f"\nload after: `{load()}`")


if __name__ == "__main__":
    main()
