"""The pipelined scheduler against a simulated accelerator, on the real simulators.

The policy's forward pass is replaced by
:class:`tfevo.rollout.simulated.SimulatedAcceleratorPolicy`: a cheap read-out
followed by a timer wait of ``T_inf(rows)`` from an accelerator model, during
which the calling thread holds no core and no GIL (as a host thread waiting
for a GPU).  Everything else -- :class:`PipelinedEvaluator`, ale-py's native
vector env, tfevo's batched MuJoCo -- is the code users run.

Two accelerator models per simulator:

* ``gpu``: the stated Nature-DQN model for a named GPU (``--gpu``, default
  RTX 4090; ``nature_dqn_gpu_model``);
* ``balanced``: the same launch cost with the per-row cost set so that one
  subset's forward takes as long as one subset's simulator step measured at
  the start (``T_inf ≈ T_sim``), where pipelining has the most to gain.

Per round (``--repeats`` rounds, order alternating) it times raw stepping of
one subset's env (``T_sim``, random actions) and of the whole slot set, then
K=1 and K=2 evaluations with each model.  Reported per config (medians over
rounds):

* member-steps per second;
* ``T_inf``: wall time of one forward call as the evaluator sees it
  (``forward_seconds / forward_calls``: the read-out, the host work of the
  call and the simulated wait);
* ``bound``: ``1 / max(T_sim, T_inf)`` per subset step for K >= 2, i.e.
  ``forward_calls * max(T_sim(N/K), T_inf) / seconds`` as a fraction (1.0 =
  every subset step costs only the longer of the two); for K=1 the serial
  sum ``T_sim(N) + T_inf``;
* the main thread's CPU seconds per member-step (``time.thread_time``).

Run: ``python benchmarks/bench_sim_accel.py`` (both simulators, ~15 min on a
loaded 2-core machine) or ``--sims atari`` / ``--sims mujoco``; ``--sims
main_cpu`` measures the evaluator's main-thread CPU per member-step on
Frostbite at 16 and 64 rows per call.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402


def _raw_step_seconds(env_id, n, steps, actions_fn):
    """Median-free single timing of ``steps`` send/recv rounds of an ``n``-slot env (seconds per step)."""
    from tfevo.envs import make

    env = make(env_id, num_envs=n)
    idx = np.arange(n)
    env.reset(idx, idx)
    rng = np.random.default_rng(0)
    acts = [actions_fn(rng, n, env.action_spec) for _ in range(steps)]
    env.send(acts[0], idx)
    env.recv()
    t0 = time.perf_counter()
    for t in range(steps):
        env.send(acts[t], idx)
        env.recv()
    dt = (time.perf_counter() - t0) / steps
    env.close()
    return dt


def _actions(rng, n, spec):
    if spec.discrete:
        return rng.integers(0, spec.num_actions, n).astype(np.int32)
    return rng.uniform(-1, 1, (n, *spec.shape)).astype(np.float32)


SIMS = {
    # env id, slots N, population P, max_steps, raw steps per timing
    "atari": ("ALE/Frostbite-v5", 32, 32, 150, 60),
    "mujoco": ("HalfCheetah-v5", 256, 256, 200, 100),
}


def run_sim(sim, args):
    from tfevo.envs import make
    from tfevo.rollout.pipelined import PipelinedEvaluator
    from tfevo.rollout.simulated import SimulatedAcceleratorPolicy, nature_dqn_gpu_model

    env_id, N, P, cap, raw_steps = SIMS[sim]
    N = args.slots or N
    P = args.pop or P
    K2 = 2
    probe = make(env_id, num_envs=1)
    spec, shape = probe.action_spec, probe.observation_shape
    probe.close()

    # T_sim of one subset (N/2 slots), median of a few runs, to balance the stand-in.
    t_sub = statistics.median(_raw_step_seconds(env_id, N // K2, raw_steps, _actions) for _ in range(3))
    gpu = nature_dqn_gpu_model(args.gpu)
    models = {"gpu": gpu,
              "balanced": gpu.with_latency(N // K2, t_sub, f"balanced: T_inf({N // K2}) = {t_sub * 1e3:.2f} ms")}
    models = {k: v for k, v in models.items() if k in args.models.split(",")}
    configs = [(m, K) for m in models for K in (1, K2)]
    pols = {m: SimulatedAcceleratorPolicy(spec, shape, models[m]) for m in models}
    params = pols[next(iter(pols))].init_params(P, seed=0)
    evs = {}
    for m, K in configs:
        ev = PipelinedEvaluator(env_id, pols[m], num_envs=N, num_subsets=K, max_steps=cap, seed=0)
        ev.evaluate(params)  # warm-up: trace, first resets
        evs[(m, K)] = ev
    res = {c: [] for c in configs}
    raw = {1: [], K2: []}
    fits = {}
    for r in range(args.repeats):
        for K in (1, K2):
            raw[K].append(_raw_step_seconds(env_id, N // K, raw_steps, _actions))
        order = configs if r % 2 == 0 else configs[::-1]
        for c in order:
            ev, pol = evs[c], pols[c[0]]
            pol.reset_stats()
            c0, t0 = time.thread_time(), time.perf_counter()
            f = ev.evaluate(params)  # every config at the same call number in a round: same seeds
            sec, cpu = time.perf_counter() - t0, time.thread_time() - c0
            s = dict(ev.last_stats)
            res[c].append(dict(seconds=sec, steps=s["steps"], calls=s["forward_calls"],
                               t_inf=s["forward_seconds"] / s["forward_calls"], recv=s["recv_seconds"],
                               reset=s["reset_seconds"], main_cpu=cpu, busy=pol.busy_seconds,
                               rows=s["padded_rows"], t_sim=raw[c[1]][-1]))
            fits.setdefault(r, []).append(f.numpy())
    same = all(all(np.array_equal(f, fs[0]) for f in fs) for fs in fits.values())
    print(f"\n### {sim}: {env_id}, {N} slots, population {P}, cap {cap} steps, {args.repeats} rounds\n")
    print(f"- T_sim (raw step, random actions, median over rounds): {N} slots "
          f"{statistics.median(raw[1]) * 1e3:.2f} ms, {N // K2} slots {statistics.median(raw[K2]) * 1e3:.2f} ms")
    for m, mod in models.items():
        print(f"- model `{m}`: {mod.name}: launch {mod.launch_seconds * 1e6:.0f} us + "
              f"{mod.member_seconds * 1e6:.2f} us/row; T_inf({N // K2}) = {mod.latency(N // K2) * 1e3:.3f} ms, "
              f"T_inf({N}) = {mod.latency(N) * 1e3:.3f} ms")
    print(f"- fitness identical across all configs and rounds: {same}\n")
    print("| model | K | member-steps/s | runs | T_inf per call ms | T_sim per step ms | of bound | "
          "K=2 / K=1 | recv ms per call | main-thread CPU us per member-step |")
    print("|---|---|---:|---|---:|---:|---:|---:|---:|---:|")
    out = {}
    for m, K in configs:
        rs = res[(m, K)]
        rates = [x["steps"] / x["seconds"] for x in rs]
        if K == 1:
            bound = [x["calls"] * (x["t_sim"] + x["t_inf"]) / x["seconds"] for x in rs]
        else:
            bound = [x["calls"] * max(x["t_sim"], x["t_inf"]) / x["seconds"] for x in rs]
        out[(m, K)] = dict(rate=statistics.median(rates), bound=statistics.median(bound))
        ratio = ""
        if K != 1:
            pair = [a["seconds"] / b["seconds"] for a, b in zip(res[(m, 1)], rs)]  # same round, paired
            ratio = f"{statistics.median(pair):.2f} ({', '.join(f'{p:.2f}' for p in pair)})"
            out[(m, K)]["vs_serial"] = statistics.median(pair)
        print(f"| {m} | {K} | {statistics.median(rates):,.0f} | {', '.join(f'{v:,.0f}' for v in rates)} | "
              f"{statistics.median(x['t_inf'] for x in rs) * 1e3:.2f} | "
              f"{statistics.median(x['t_sim'] for x in rs) * 1e3:.2f} | "
              f"{statistics.median(bound):.2f} ({', '.join(f'{b:.2f}' for b in bound)}) | {ratio} | "
              f"{statistics.median(x['recv'] / x['calls'] for x in rs) * 1e3:.2f} | "
              f"{statistics.median(x['main_cpu'] / x['steps'] for x in rs) * 1e6:.1f} |", flush=True)
    for ev in evs.values():
        ev.close()
    return out


def main_thread_cpu(args):
    """The evaluator's main-thread CPU per member-step on Frostbite, K=2, `gpu` model, 32 and 128 slots."""
    from tfevo.envs import make
    from tfevo.rollout.pipelined import PipelinedEvaluator
    from tfevo.rollout.simulated import SimulatedAcceleratorPolicy, nature_dqn_gpu_model

    probe = make("ALE/Frostbite-v5", num_envs=1)
    pol = SimulatedAcceleratorPolicy(probe.action_spec, probe.observation_shape, nature_dqn_gpu_model(args.gpu))
    probe.close()
    print("\n### main-thread CPU, Frostbite, K=2, `gpu` model, population = slots, cap 100 steps\n")
    print("| slots | rows per call | main-thread CPU us per member-step (runs) |")
    print("|---:|---:|---|")
    for N in (32, 128):
        params = pol.init_params(N, seed=0)
        ev = PipelinedEvaluator("ALE/Frostbite-v5", pol, num_envs=N, num_subsets=2, max_steps=100, seed=0)
        ev.evaluate(params)
        runs = []
        for _ in range(args.repeats):
            c0 = time.thread_time()
            ev.evaluate(params)
            runs.append((time.thread_time() - c0) / ev.last_stats["steps"] * 1e6)
        ev.close()
        print(f"| {N} | {N // 2} | {statistics.median(runs):.1f} ({', '.join(f'{r:.1f}' for r in runs)}) |", flush=True)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sims", default="atari,mujoco")
    p.add_argument("--models", default="gpu,balanced")
    p.add_argument("--gpu", default="rtx4090")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--slots", type=int, default=0, help="override the simulator's slot count")
    p.add_argument("--pop", type=int, default=0, help="override the population size")
    args = p.parse_args(argv)
    t0 = time.time()
    print(f"started {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}; load average {os.getloadavg()}")
    for sim in args.sims.split(","):
        if sim.strip() == "main_cpu":
            main_thread_cpu(args)
        else:
            run_sim(sim.strip(), args)
    print(f"\nfinished in {time.time() - t0:.0f} s; load average {os.getloadavg()}")


if __name__ == "__main__":
    main()
