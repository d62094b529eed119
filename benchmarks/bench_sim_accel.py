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
* ``balanced``: the same launch cost, with the wait set so that a call's whole
  inference side equals one subset's simulator step *as the evaluator sees
  it*: a calibration run (K=1 on one subset's N/K slots, zero-wait stand-in)
  gives ``T_sim`` = the main thread's wait in ``recv`` per call (the whole
  step: the main thread sends, then waits) and the host side ``H`` = wall time
  per call minus ``T_sim`` (bookkeeping, resets, the forward call's host
  work); the wait is ``W = T_sim - H``, so ``T_inf = H + W = T_sim``.

Per round (``--repeats`` rounds, order alternating) one calibration run
(``T_sim`` and ``H`` of that round), then K=1 and K=2 evaluations with each
model.  Reported per config (medians over rounds):

* member-steps per second;
* ``T_inf``: the main thread's time per call outside ``recv`` (``H`` plus the
  simulated wait): what the other subset's simulators can hide behind;
* ``of bound`` (K=2): ``forward_calls * max(T_sim, T_inf) / seconds`` (1.0 =
  every subset step costs only the longer of the two, with ``T_sim`` from the
  same round's calibration);
* ``K=2 / K=1``: serial wall time over pipelined wall time of the same round,
  and the ideal one, serial wall time over ``forward_calls * max(T_sim,
  T_inf)`` of the K=2 run;
* the main thread's CPU seconds per member-step (``time.thread_time``).

Run: ``python benchmarks/bench_sim_accel.py`` (both simulators; the time it
took is printed at the end) or ``--sims atari`` / ``--sims mujoco``; ``--sims
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


def _actions(rng, n, spec):
    if spec.discrete:
        return rng.integers(0, spec.num_actions, n).astype(np.int32)
    return rng.uniform(-1, 1, (n, *spec.shape)).astype(np.float32)


SIMS = {
    # env id, slots N, population P, max_steps
    "atari": ("ALE/Frostbite-v5", 32, 32, 150),
    "mujoco": ("HalfCheetah-v5", 256, 256, 200),
}


def _split(stats, seconds, busy):
    """(T_sim, host side, wait) per call of one evaluation, in seconds.

    T_sim: the main thread's wait in ``recv`` per call -- in a K=1 run the whole
    simulator step, as the simulators run inside the evaluator.  Host side:
    everything else the main thread does per call except the simulated wait
    (bookkeeping, resets, the forward call's host work).
    """
    calls = stats["forward_calls"]
    return (stats["recv_seconds"] / calls, (seconds - stats["recv_seconds"] - busy) / calls, busy / calls)


def run_sim(sim, args):
    from tfevo.envs import make
    from tfevo.rollout.pipelined import PipelinedEvaluator
    from tfevo.rollout.simulated import AcceleratorModel, SimulatedAcceleratorPolicy, nature_dqn_gpu_model

    env_id, N, P, cap = SIMS[sim]
    N = args.slots or N
    P = args.pop or P
    cap = args.cap or cap
    K2 = 2
    sub = N // K2
    probe = make(env_id, num_envs=1)
    spec, shape = probe.action_spec, probe.observation_shape
    probe.close()

    def evaluate(ev, pol, params):
        pol.reset_stats()
        c0, t0 = time.thread_time(), time.perf_counter()
        f = ev.evaluate(params)  # every config at the same call number in a round: same seeds
        sec, cpu = time.perf_counter() - t0, time.thread_time() - c0
        return f.numpy(), sec, cpu, dict(ev.last_stats), pol.busy_seconds

    # Calibration: K=1 on one subset's slots with a zero-wait stand-in.  T_sim = the simulators'
    # step as the evaluator sees it; H = the host side of a call.  The balanced wait is
    # W = T_sim - H, so that a call's whole inference side H + W equals T_sim.
    zero = SimulatedAcceleratorPolicy(spec, shape, AcceleratorModel("zero wait", 0.0, 0.0))
    params = zero.init_params(P, seed=0)
    kw = {"env_kwargs": {"num_threads": args.env_threads}} if args.env_threads else {}
    cal = PipelinedEvaluator(env_id, zero, num_envs=sub, num_subsets=1, max_steps=cap, seed=0, **kw)
    cal.evaluate(params)  # warm-up: trace, first resets
    splits = []
    for _ in range(args.calibrate):
        _, sec, _, st, busy = evaluate(cal, zero, params)
        splits.append(_split(st, sec, busy))
    t_sim0 = statistics.median(s[0] for s in splits)
    host0 = statistics.median(s[1] for s in splits)
    gpu = nature_dqn_gpu_model(args.gpu)
    wait = max(t_sim0 - host0, gpu.launch_seconds)
    models = {"gpu": gpu,
              "balanced": gpu.with_latency(sub, wait, f"balanced: wait({sub}) = {wait * 1e3:.2f} ms")}
    models = {k: v for k, v in models.items() if k in args.models.split(",")}
    configs = [(m, K) for m in models for K in (1, K2)]
    pols = {m: SimulatedAcceleratorPolicy(spec, shape, models[m]) for m in models}
    evs = {}
    for m, K in configs:
        ev = PipelinedEvaluator(env_id, pols[m], num_envs=N, num_subsets=K, max_steps=cap, seed=0, **kw)
        ev.evaluate(params)  # warm-up: trace, first resets
        evs[(m, K)] = ev
    res = {c: [] for c in configs}
    cals = []
    fits = {}
    for r in range(args.repeats):
        _, sec, _, st, busy = evaluate(cal, zero, params)
        cals.append(_split(st, sec, busy))
        order = configs if r % 2 == 0 else configs[::-1]
        for c in order:
            f, sec, cpu, s, busy = evaluate(evs[c], pols[c[0]], params)
            t_sim, host, w = _split(s, sec, busy)
            res[c].append(dict(seconds=sec, steps=s["steps"], calls=s["forward_calls"], t_inf=host + w,
                               host=host, wait=w, recv=s["recv_seconds"], main_cpu=cpu, t_sim_sub=cals[-1][0],
                               t_sim_own=t_sim))
            fits.setdefault(r, []).append(f)
    same = all(all(np.array_equal(f, fs[0]) for f in fs) for fs in fits.values())
    med = statistics.median
    print(f"\n### {sim}: {env_id}, {N} slots, population {P}, cap {cap} steps, {args.repeats} rounds\n")
    print(f"- calibration (K=1 on {sub} slots, zero-wait stand-in, median of {args.calibrate} runs before the "
          f"rounds): T_sim({sub}) = {t_sim0 * 1e3:.2f} ms per step (recv wait per call), host side "
          f"H = {host0 * 1e3:.2f} ms per call; balanced wait W = T_sim - H = {wait * 1e3:.2f} ms")
    print(f"- per-round calibration: T_sim({sub}) {med(c[0] for c in cals) * 1e3:.2f} ms "
          f"({', '.join(f'{c[0] * 1e3:.2f}' for c in cals)}), H {med(c[1] for c in cals) * 1e3:.2f} ms "
          f"({', '.join(f'{c[1] * 1e3:.2f}' for c in cals)})")
    for m, mod in models.items():
        print(f"- model `{m}`: {mod.name}: launch {mod.launch_seconds * 1e6:.0f} us + "
              f"{mod.member_seconds * 1e6:.2f} us/row; wait({sub}) = {mod.latency(sub) * 1e3:.3f} ms, "
              f"wait({N}) = {mod.latency(N) * 1e3:.3f} ms")
    print(f"- fitness identical across all configs and rounds: {same}\n")
    print("| model | K | member-steps/s | runs | T_inf per call ms (H + wait) | H ms | T_sim ms | of bound | "
          "K=2 / K=1 | ideal K=2 / K=1 | recv ms per call | main-thread CPU us per member-step |")
    print("|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    out = {}
    for m, K in configs:
        rs = res[(m, K)]
        rates = [x["steps"] / x["seconds"] for x in rs]
        out[(m, K)] = dict(rate=med(rates))
        bound = ratio = ideal = ""
        if K == 1:
            t_sim = med(x["t_sim_own"] for x in rs)  # serial: the recv wait is the whole step of N slots
        else:
            t_sim = med(x["t_sim_sub"] for x in rs)
            b = [x["calls"] * max(x["t_sim_sub"], x["t_inf"]) / x["seconds"] for x in rs]
            pair = [a["seconds"] / x["seconds"] for a, x in zip(res[(m, 1)], rs)]  # same round, paired
            best = [a["seconds"] / (x["calls"] * max(x["t_sim_sub"], x["t_inf"])) for a, x in zip(res[(m, 1)], rs)]
            bound = f"**{med(b):.2f}** ({', '.join(f'{v:.2f}' for v in b)})"
            ratio = f"**{med(pair):.2f}** ({', '.join(f'{v:.2f}' for v in pair)})"
            ideal = f"{med(best):.2f}"
            out[(m, K)].update(bound=med(b), vs_serial=med(pair), ideal=med(best))
        print(f"| {m} | {K} | {med(rates):,.0f} | {', '.join(f'{v:,.0f}' for v in rates)} | "
              f"{med(x['t_inf'] for x in rs) * 1e3:.2f} | {med(x['host'] for x in rs) * 1e3:.2f} | "
              f"{t_sim * 1e3:.2f} | {bound} | {ratio} | {ideal} | "
              f"{med(x['recv'] / x['calls'] for x in rs) * 1e3:.2f} | "
              f"{med(x['main_cpu'] / x['steps'] for x in rs) * 1e6:.1f} |", flush=True)
    for ev in (*evs.values(), cal):
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
    p.add_argument("--cap", type=int, default=0, help="override the episode step cap")
    p.add_argument("--calibrate", type=int, default=3, help="calibration runs before the rounds")
    p.add_argument("--env-threads", type=int, default=0,
                   help="simulator worker threads (0: the env's default, one per core); 1 on a 2-core machine "
                        "keeps a core for the host side, as the simulators' own cores would on a large machine")
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
