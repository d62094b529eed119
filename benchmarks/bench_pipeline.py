"""Benchmarks of the pipelined evaluator, the host envs and the indexed_matmul op.

Run ``python benchmarks/bench_pipeline.py`` (all sections, a few minutes) or
pick sections: ``--sections raw_atari,atari,naive_atari,raw_mujoco,mujoco,
naive_mujoco,buckets,op,forward,half``.  Prints markdown tables.  Every number is the
median of ``--repeats`` timed runs after one warm-up run; the warm-up time
(trace/compile + first call) is reported separately.

Throughput = member-steps per second *including inference*, i.e. agent steps
of all members divided by wall time of ``evaluate``.
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
import tensorflow as tf  # noqa: E402

ROWS: list[tuple] = []


def row(section, config, value, unit, extra=""):
    ROWS.append((section, config, value, unit, extra))
    print(f"| {section} | {config} | {value:,.1f} | {unit} | {extra} |", flush=True)


def timed(fn, repeats):
    t0 = time.perf_counter()
    fn()
    warm = time.perf_counter() - t0
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return warm, statistics.median(times), times


# ---------------------------------------------------------------- Atari
def raw_atari(args):
    from ale_py.vector_env import AtariVectorEnv

    for n in (16, 32):
        env = AtariVectorEnv("frostbite", num_envs=n, noop_max=30, reward_clipping=False, use_fire_reset=False,
                             repeat_action_probability=0.0, full_action_space=True, max_num_frames_per_episode=20000)
        env.reset(seed=0)
        rng = np.random.default_rng(0)
        steps = 200

        def run():
            for _ in range(steps):
                env.step(rng.integers(0, 18, n).astype(np.int32))

        warm, med, _ = timed(run, args.repeats)
        row("raw AtariVectorEnv (Frostbite, random actions)", f"{n} envs", n * steps / med, "steps/s",
            f"{4 * n * steps / med:,.0f} frames/s")
        env.close()


def _dqn_policy(num_actions, weight_dtype="float32"):
    from tfevo.envs.base import ActionSpec
    from tfevo.nn.model import PopulationModel
    from tfevo.nn.policy import Policy, nature_dqn

    pm = PopulationModel(nature_dqn(num_actions))
    return pm, Policy(pm, ActionSpec(discrete=True, num_actions=num_actions), weight_dtype=weight_dtype)


def _busy_seconds():
    """CPU seconds all processes spent busy so far (``/proc/stat``; None where it is missing)."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        return (sum(v) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):  # pragma: no cover - not Linux
        return None


def atari(args):
    """Frostbite evaluation throughput for K = 1, 2, 4, plus the session-4 serial path (one inference
    chain, inline single-threaded executor), K=2 with one emulator thread per subset and K=1/K=2
    with float16 weights (``Policy(weight_dtype="float16")``), for an A/B in the same run
    (``--atari-configs`` picks a subset by key).  All configs are warmed up first, then timed round
    by round in alternating order (same load for all).  Per config it also prints the cores this process used (CPU seconds /
    wall seconds) and the cores other processes used meanwhile ("other", from ``/proc/stat``): a run
    with other > ~0.1 was not measured on a quiet machine."""
    from tfevo.rollout.pipelined import PipelinedEvaluator

    P = args.atari_pop
    # (label, K, inference chains, env kwargs, key of the result in the returned dict, weight dtype)
    configs = [("K=1", 1, None, None, 1, "float32"),
               ("K=1, 1 chain, inline executor (session-4 path)", 1, 1, None, "prev", "float32"),
               ("K=2", 2, None, None, 2, "float32"), ("K=4", 4, None, None, 4, "float32"),
               ("K=2, 1 emulator thread per subset", 2, None, {"num_threads": 1}, "K2_1thread", "float32"),
               ("K=1, float16 weights", 1, None, None, "f16_1", "float16"),
               ("K=2, float16 weights", 2, None, None, "f16_2", "float16")]
    keep = {k.strip() for k in args.atari_configs.split(",")}
    configs = [c for c in configs if str(c[4]) in keep]
    evs, params = [], None
    for name, K, chains, env_kwargs, _, wdt in configs:
        pm, policy = _dqn_policy(18, wdt)
        if chains is not None:
            pm.inference_chains = chains
        if params is None:
            params = pm.init_params(P, seed=0)
        ev = PipelinedEvaluator("ALE/Frostbite-v5", policy, num_envs=args.atari_slots, num_subsets=K,
                                max_steps=args.atari_steps, seed=0, env_kwargs=env_kwargs)
        t0 = time.perf_counter()
        ev.evaluate(params)
        evs.append((ev, time.perf_counter() - t0))
    times = [[] for _ in configs]
    cpus = [[] for _ in configs]
    others = [[] for _ in configs]
    stats = [[] for _ in configs]
    fits = [None] * len(configs)
    for r in range(args.repeats):
        order = range(len(configs)) if r % 2 == 0 else reversed(range(len(configs)))
        for i in order:
            b0, c0, t0 = _busy_seconds(), time.process_time(), time.perf_counter()
            f = evs[i][0].evaluate(params)  # every config is at the same call number (same seeds) in a round
            t, c, b1 = time.perf_counter() - t0, time.process_time() - c0, _busy_seconds()
            times[i].append(t)
            cpus[i].append(c)
            others[i].append(None if b0 is None else max(0.0, (b1 - b0 - c) / t))
            stats[i].append(dict(evs[i][0].last_stats))
            fits[i] = f.numpy()
    res = {}
    f32 = [f for f, c in zip(fits, configs) if c[5] == "float32"]
    f16 = [f for f, c in zip(fits, configs) if c[5] == "float16"]
    same = all(np.array_equal(f, f32[0]) for f in f32) and all(np.array_equal(f, f16[0]) for f in f16)
    for i, (name, _, _, _, key, _) in enumerate(configs):
        ev, warm = evs[i]
        med = statistics.median(times[i])
        steps = stats[i][0]["steps"]
        per = steps / args.atari_slots  # 32-member steps (one per slot and agent step)
        split = " / ".join(f"{statistics.median([s[k] for s in stats[i]]) / per * 1e3:.1f}"
                           for k in ("forward_seconds", "recv_seconds", "reset_seconds"))
        res[key] = steps / med
        cores = statistics.median(c / t for c, t in zip(cpus[i], times[i]))
        other = ", ".join("?" if o is None else f"{o:.2f}" for o in others[i])
        row("eval Nature-DQN GA pop %d, Frostbite, cap %d steps" % (P, args.atari_steps),
            f"{name}, {args.atari_slots} slots", steps / med, "steps/s",
            f"warm-up {warm:.1f}s; executor {ev.forward_executor}; per {args.atari_slots}-member step ms "
            f"forward / recv / reset {split}; {steps / statistics.median(cpus[i]):,.0f} steps per CPU-second, "
            f"{cores:.2f} cores; runs {', '.join(f'{steps / t:,.0f}' for t in times[i])}; "
            f"other processes' cores per run {other}")
    print(f"- Atari fitness identical across configs of the same weight dtype: {same}")
    if f32 and f16:
        print(f"- float16 vs float32 weights: mean fitness {np.mean(f16[0]):.1f} vs {np.mean(f32[0]):.1f}; "
              f"{int(np.sum(f16[0] != f32[0]))} of {len(f32[0])} members differ (rounded weights act differently)")
    for ev, _ in evs:
        ev.close()
    del params
    return res


def naive_atari(args):
    import ale_py
    import gymnasium as gym
    import keras

    from tfevo.nn.policy import nature_dqn

    gym.register_envs(ale_py)

    P = args.naive_pop

    def make():  # Gymnasium's ALE env: frame skip 4, grayscale 210x160 (resized below; no OpenCV needed)
        return gym.make("ALE/Frostbite-v5", frameskip=4, repeat_action_probability=0.0, full_action_space=True,
                        obs_type="grayscale")

    vec = gym.vector.SyncVectorEnv([make] * P)
    rows, cols = np.linspace(0, 209, 84).astype(int), np.linspace(0, 159, 84).astype(int)
    models = []
    for i in range(P):
        keras.utils.set_random_seed(i)
        models.append(nature_dqn(18))

    def run():
        frames, _ = vec.reset(seed=0)
        small = frames[:, rows][:, :, cols]
        stack = np.repeat(small[..., None], 4, axis=-1)
        for _ in range(args.atari_steps):
            x = stack.astype(np.float32) / 255.0
            acts = np.array([int(np.argmax(models[i].predict_on_batch(x[i:i + 1])[0])) for i in range(P)])
            frames, *_ = vec.step(acts)
            stack = np.concatenate([stack[..., 1:], frames[:, rows][:, :, cols][..., None]], axis=-1)

    warm, med, _ = timed(run, max(1, args.repeats - 1))
    row("naive: Gymnasium SyncVectorEnv + per-member Keras predict_on_batch (Frostbite, Nature-DQN)",
        f"pop {P}", P * args.atari_steps / med, "steps/s", f"warm-up {warm:.1f}s")
    vec.close()
    return P * args.atari_steps / med


# ---------------------------------------------------------------- MuJoCo
def raw_mujoco(args):
    from tfevo.envs.mujoco import MujocoVectorEnv

    out = {}
    # The simulator limit is the best raw rate over slot counts (the batch
    # stepper's rate depends on how many simulations one call steps).
    # Random actions excite more contacts than a policy near its initialisation
    # does, which makes each physics step dearer; zero actions are the cheap end.
    # The limit is the best rate over both.
    for n, kind in [(n, k) for n in sorted({64, args.mj_slots}) for k in ("random", "zero")]:
        env = MujocoVectorEnv("HalfCheetah-v5", num_envs=n)
        idx = np.arange(n)
        env.reset(idx, seeds=idx)
        rng = np.random.default_rng(0)
        acts = rng.uniform(-1, 1, (300, n, 6)).astype(np.float32)
        if kind == "zero":
            acts[:] = 0.0

        def run():
            for t in range(300):
                env.send(acts[t], idx)
                env.recv()

        warm, med, _ = timed(run, args.repeats)
        out[(n, kind)] = 300 * n / med
        row(f"raw MujocoVectorEnv HalfCheetah-v5 ({kind} actions)", f"{n} envs, backend {env.backend}",
            out[(n, kind)], "steps/s")
        env.close()
    return max(out.values())


def _mlp_policy(env_id="HalfCheetah-v5"):
    from tfevo.envs.mujoco import MujocoVectorEnv
    from tfevo.nn.model import PopulationModel
    from tfevo.nn.policy import Policy, mlp

    e = MujocoVectorEnv(env_id, 1)
    pm = PopulationModel(mlp(e.observation_shape, e.action_spec.policy_output_size, hidden=(64, 64)))
    return pm, Policy(pm, e.action_spec)


MJ_RAW_ROUNDS: dict = {}


def mujoco(args, bucket="pow2", Ks=(1, 2, 4), section="eval MLP 64x64 pop %d, HalfCheetah-v5, cap %d steps",
           previous=True):
    """Pipelined evaluations, alternated round by round with raw stepping of the same slot count.

    Each round runs the raw simulator (random and zero actions, ``mj_slots``
    envs, 100 steps) and then every evaluator once, the order rotating by one
    each round, so load drift hits all configurations alike.  Steps per
    CPU-second (process CPU time, the simulators' threads included) are
    printed too: on a loaded machine they say more than wall rates about
    what the code would do on two idle cores.  ``previous``
    also runs the path before the fused kernel (layer-by-layer forward,
    ordinary function call) for K=1 and K=2.
    """
    from tfevo.envs.mujoco import MujocoVectorEnv
    from tfevo.nn.model import PopulationModel
    from tfevo.nn.policy import Policy
    from tfevo.rollout.pipelined import PipelinedEvaluator

    pm, policy = _mlp_policy()
    P = args.mj_pop
    params = pm.init_params(P, seed=0)
    configs = [(f"K={K}", K, policy, True, None) for K in Ks]
    if previous and 2 in Ks:  # one MuJoCo thread per subset (the default is one per core in every subset)
        configs.append(("K=2, 1 MuJoCo thread per subset", 2, policy, True, {"num_threads": 1}))
    if previous:
        old = Policy(PopulationModel(pm.template, use_op=False), policy.action_spec)
        configs += [(f"K={K} previous path (layer-by-layer ops, ordinary call)", K, old, False, None)
                    for K in (1, 2) if K in Ks]
    evs = {}
    for name, K, pol, inline, kw in configs:
        evs[name] = PipelinedEvaluator("HalfCheetah-v5", pol, num_envs=args.mj_slots, num_subsets=K,
                                       max_steps=args.mj_steps, seed=0, bucket=bucket, inline_forward=inline,
                                       env_kwargs=kw)
    n = args.mj_slots
    raw = MujocoVectorEnv("HalfCheetah-v5", num_envs=n)
    idx = np.arange(n)
    raw.reset(idx, seeds=idx)
    acts = {"random": np.random.default_rng(0).uniform(-1, 1, (100, n, 6)).astype(np.float32),
            "zero": np.zeros((100, n, 6), np.float32)}

    def raw_rate(kind):
        t0, c0 = time.perf_counter(), time.process_time()
        for t in range(100):
            raw.send(acts[kind][t], idx)
            raw.recv()
        cpu[kind].append(100 * n / (time.process_time() - c0))
        return 100 * n / (time.perf_counter() - t0)

    warm = {}
    cpu = {name: [] for name in [*evs, "random", "zero"]}
    for name, ev in evs.items():
        t0 = time.perf_counter()
        ev.evaluate(params)
        warm[name] = time.perf_counter() - t0
    raw_rate("random")
    rates = {name: [] for name in evs}
    fwd = {name: [] for name in evs}
    raws = {"random": [], "zero": []}
    names = list(evs)
    for r in range(args.repeats):
        for kind in raws:
            raws[kind].append(raw_rate(kind))
        for j in range(len(names)):
            name = names[(j + r) % len(names)]
            ev = evs[name]
            t0, c0 = time.perf_counter(), time.process_time()
            ev.evaluate(params)
            rates[name].append(ev.last_stats["steps"] / (time.perf_counter() - t0))
            cpu[name].append(ev.last_stats["steps"] / (time.process_time() - c0))
            fwd[name].append(ev.last_stats["forward_seconds"] / max(1, ev.last_stats["forward_calls"]))
    raw_best = max(statistics.median(v) for v in raws.values())
    MJ_RAW_ROUNDS["best"] = raw_best
    for kind, v in raws.items():
        row(f"raw MujocoVectorEnv HalfCheetah-v5, in the same rounds ({kind} actions)", f"{n} envs",
            statistics.median(v), "steps/s", f"{statistics.median(cpu[kind]):,.0f} steps per CPU-second")
    res = {}
    for name, K, _, _, _ in configs:
        med = statistics.median(rates[name])
        if name == f"K={K}":
            res[K] = med
        ev = evs[name]
        row(section % (P, args.mj_steps), f"{name}, {n} slots, bucket={bucket}", med, "steps/s",
            f"{med / raw_best:.2f} of raw (same rounds); warm-up {warm[name]:.1f}s; "
            f"forward {statistics.median(fwd[name]) * 1e3:.3f} ms/call x {ev.last_stats['forward_calls']} calls; "
            f"executor {ev.forward_executor}; {statistics.median(cpu[name]):,.0f} steps per CPU-second")
        ev.close()
    raw.close()
    return res


def buckets(args):
    out = {}
    for b in ("pow2", "full", "none"):
        out[b] = mujoco(args, bucket=b, Ks=(2,), section="bucket mode, MLP pop %d HalfCheetah cap %d",
                        previous=False)[2]
    return out


def naive_mujoco(args):
    import gymnasium as gym
    import keras

    from tfevo.nn.policy import mlp

    P = args.naive_pop
    vec = gym.vector.SyncVectorEnv([lambda: gym.make("HalfCheetah-v5")] * P)
    models = []
    for i in range(P):
        keras.utils.set_random_seed(i)
        models.append(mlp((17,), 6, hidden=(64, 64)))
    steps = min(args.mj_steps, 100)

    def run():
        obs, _ = vec.reset(seed=0)
        for _ in range(steps):
            acts = np.stack([models[i].predict_on_batch(obs[i:i + 1].astype(np.float32))[0] for i in range(P)])
            obs, *_ = vec.step(np.tanh(acts))

    warm, med, _ = timed(run, max(1, args.repeats - 1))
    row("naive: Gymnasium SyncVectorEnv + per-member Keras predict_on_batch (HalfCheetah, MLP 64x64)",
        f"pop {P}", P * steps / med, "steps/s", f"warm-up {warm:.1f}s")
    vec.close()
    return P * steps / med


# ---------------------------------------------------------------- custom ops
def _bench_call(f, args_, repeats, reps):
    f(*args_).numpy()
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(reps):
            r = f(*args_)
        r.numpy()
        ts.append((time.perf_counter() - t0) / reps)
    return statistics.median(ts)


def _alternate(fa, fb, args_, repeats, reps):
    """Median per-call times of two functions, measured alternately (same load for both)."""
    fa(*args_).numpy()
    fb(*args_).numpy()
    ta, tb = [], []
    for _ in range(repeats):
        ta.append(_bench_call(fa, args_, 1, reps))
        tb.append(_bench_call(fb, args_, 1, reps))
    return statistics.median(ta), statistics.median(tb)


def op(args):
    from tfevo import ops
    from tfevo.nn.layers import population_conv2d

    mod = ops.load("indexed_matmul")
    if mod is None:
        print("custom op unavailable; skipping")
        return {}
    out = {}
    for name, (P, b, k, m) in {"Nature-DQN dense 7744x512": (64, 1, 7744, 512),
                               "MLP hidden 64x64": (256, 1, 64, 64)}.items():
        w = tf.random.normal([P, k, m])
        for frac in (1.0, 0.5, 0.1):
            n = max(1, int(round(P * frac)))
            x = tf.random.normal([n, b, k])
            idx = tf.constant(np.sort(np.random.default_rng(0).choice(P, n, replace=False)), tf.int32)
            f_op = tf.function(lambda x, w, i: mod.tfevo_indexed_matmul(x, w, i))
            f_ref = tf.function(lambda x, w, i: tf.matmul(x, tf.gather(w, i)))
            t_op, t_ref = _alternate(f_op, f_ref, (x, w, idx), args.repeats, 20 if k > 1000 else 200)
            out[(name, frac)] = t_ref / t_op
            row(f"indexed_matmul {name}, P={P}", f"active {int(frac * 100)}% (n={n})", t_op * 1e3, "ms/call (op)",
                f"reference gather+matmul {t_ref * 1e3:.3f} ms; speed-up x{t_ref / t_op:.2f}")
        del w
    # TfevoPopulationConv2D (method="auto") against its reference, the im2col path, on the
    # Nature-DQN conv layers (bias + ReLU included), one 84x84x4 observation per active member.
    P = 64
    layers = [("conv1 8x8/4, 4->32", (84, 84, 4), 8, 32, 4), ("conv2 4x4/2, 32->64", (21, 21, 32), 4, 64, 2),
              ("conv3 3x3/1, 64->64", (11, 11, 64), 3, 64, 1)]
    for name, (h, w_, c), ks, f, s in layers:
        kern = tf.random.normal([P, ks, ks, c, f]) * 0.05
        bias = tf.random.normal([P, f]) * 0.05
        for frac in (1.0, 0.5, 0.1):
            n = max(1, int(round(P * frac)))
            x = tf.random.uniform([n, 1, h, w_, c])
            idx = tf.constant(np.sort(np.random.default_rng(0).choice(P, n, replace=False)), tf.int32)
            f_op = tf.function(lambda x, k_, b_, i, s=s: population_conv2d(x, k_, b_, s, "same", "relu", i),
                               autograph=False)
            f_ref = tf.function(
                lambda x, k_, b_, i, s=s: population_conv2d(x, k_, b_, s, "same", "relu", i, method="im2col"),
                autograph=False)
            t_op, t_ref = _alternate(f_op, f_ref, (x, kern, bias, idx), args.repeats, 10)
            out[(name, frac)] = t_ref / t_op
            row(f"pop_conv {name}, P={P}", f"active {int(frac * 100)}% (n={n})", t_op * 1e3, "ms/call (op)",
                f"reference im2col {t_ref * 1e3:.3f} ms; speed-up x{t_ref / t_op:.2f}")
    return out


def forward(args):
    """Where the time of one pipelined step goes: the Nature-DQN forward of n active members out of P
    (one observation each), layer by layer, C++ ops against the pure-TF references."""
    from tfevo.nn.indexed import indexed_matmul
    from tfevo.nn.layers import population_conv2d, population_dense
    from tfevo.nn.model import PopulationModel
    from tfevo.nn.policy import nature_dqn

    P, n = args.atari_pop, args.atari_slots
    pm = PopulationModel(nature_dqn(18))
    ref = PopulationModel(nature_dqn(18), conv_method="im2col")
    ws = [tf.random.normal((P,) + s) * 0.02 for s in pm.weight_shapes]  # pre-split weights, as in an evaluation
    idx = tf.constant(np.sort(np.random.default_rng(0).choice(P, n, replace=False)), tf.int32)
    x = tf.random.uniform([n, 1, 84, 84, 4])
    f_all = tf.function(lambda w, x, i: pm.forward_graph(w, x, i), autograph=False)
    f_ref = tf.function(lambda w, x, i: ref.forward_graph(w, x, i), autograph=False)
    t_all, t_ref = _alternate(f_all, f_ref, (ws, x, idx), args.repeats, 5)
    row(f"Nature-DQN forward, {n} active of P={P}, 1 obs each", "C++ ops (default)", t_all * 1e3, "ms/call",
        f"{t_all * 1e3 / n:.2f} ms per member-step")
    row(f"Nature-DQN forward, {n} active of P={P}, 1 obs each", "im2col convs + indexed_matmul op", t_ref * 1e3,
        "ms/call", f"{t_ref * 1e3 / n:.2f} ms per member-step; op path x{t_ref / t_all:.2f}")
    h = x
    convs = [(0, 4), (2, 2), (4, 1)]
    for j, (wi, s) in enumerate(convs):
        fo = tf.function(lambda h, k_, b_, i, s=s: population_conv2d(h, k_, b_, s, "same", "relu", i), autograph=False)
        fr = tf.function(lambda h, k_, b_, i, s=s: population_conv2d(h, k_, b_, s, "same", "relu", i,
                                                                     method="im2col"), autograph=False)
        a = (h, ws[wi], ws[wi + 1], idx)
        to, tr = _alternate(fo, fr, a, args.repeats, 10)
        row("  layer", f"conv{j + 1}", to * 1e3, "ms (op)", f"im2col reference {tr * 1e3:.2f} ms")
        h = fo(*a)
    h = tf.reshape(h, [n, 1, -1])
    fd = tf.function(lambda h, k_, b_, i: population_dense(h, k_, b_, "relu", i), autograph=False)
    fdr = tf.function(lambda h, k_, b_, i: tf.nn.relu(indexed_matmul(h, k_, i, use_op=False)
                                                      + tf.gather(b_, i)[:, None]), autograph=False)
    td, tdr = _alternate(fd, fdr, (h, ws[6], ws[7], idx), args.repeats, 5)
    row("  layer", "dense 7744x512 (+bias, relu)", td * 1e3, "ms (op)",
        f"gather+matmul reference {tdr * 1e3:.2f} ms; {n * 7744 * 512 * 4 / td / 1e9:.1f} GB/s of weights")
    h2 = fd(h, ws[6], ws[7], idx)
    t2 = _bench_call(tf.function(lambda h, k_, b_, i: population_dense(h, k_, b_, None, i), autograph=False),
                     (h2, ws[8], ws[9], idx), args.repeats, 20)
    row("  layer", "dense 512x18", t2 * 1e3, "ms (op)", "")
    big = ws[6][:n]
    tb = _bench_call(tf.function(lambda w: tf.reduce_sum(w), autograph=False), (big,), args.repeats, 5)
    row("  memory", f"tf.reduce_sum over {n} members' dense weights ({n * 7744 * 512 * 4 / 1e6:.0f} MB)",
        tb * 1e3, "ms", f"{n * 7744 * 512 * 4 / tb / 1e9:.1f} GB/s")
    return {"forward": t_all, "reference": t_ref}


def half(args):
    """float16 population weights (``Policy(weight_dtype="float16")``): the in-place Dense op of the
    Nature-DQN (7744x512, bias + ReLU) on ``--atari-slots`` active members of P = 2 * slots with float16
    against float32 params, and the per-generation float16 copy of an ``--atari-pop`` population
    (op ``TfevoToHalf`` against ``tf.cast`` plus a masked ``reduce_max`` range check)."""
    from tfevo import ops
    from tfevo.nn.indexed import to_half, to_half_reference

    mod = ops.op_module("indexed_matmul", "tfevo_indexed_dense_flat")
    if mod is None:
        print("custom op unavailable; skipping")
        return {}
    dense = mod.tfevo_indexed_dense_flat
    n, k, m = args.atari_slots, 7744, 512
    P = 2 * n
    w32 = tf.random.normal([P, k * m + m]) * 0.01
    w16 = tf.cast(w32, tf.float16)
    x = tf.nn.relu(tf.random.normal([n, 1, k]))
    idx = tf.constant(np.sort(np.random.default_rng(0).choice(P, n, replace=False)), tf.int32)
    f = tf.function(lambda x, w, i: dense(x, w, i, w_offset=0, units=m, bias_offset=k * m, activation="relu"))
    t16s, t32s = [], []  # (each _bench_call warms its dtype's trace first)
    for _ in range(args.repeats):
        t16s.append(_bench_call(f, (x, w16, idx), 1, 10))
        t32s.append(_bench_call(f, (x, w32, idx), 1, 10))
    t16, t32 = statistics.median(t16s), statistics.median(t32s)
    row(f"Dense 7744x512 in place, {n} of {P} members, 1 row each", "float16 params", t16 * 1e3, "ms/call",
        f"float32 params {t32 * 1e3:.2f} ms; x{t32 / t16:.2f}; {n * k * m * 2 / t16 / 1e9:.1f} GB/s of float16 "
        f"weights against {n * k * m * 4 / t32 / 1e9:.1f} GB/s of float32")
    del w32, w16
    pop = tf.random.normal([args.atari_pop, 4052658]) * 0.05
    ta, tb = [], []
    for r in range(args.repeats + 1):
        for fn, ts in ((lambda: to_half(pop, use_op=True), ta), (lambda: to_half_reference(pop), tb)):
            t0 = time.perf_counter()
            h, big = fn()
            float(big)
            if r:
                ts.append(time.perf_counter() - t0)
            del h
    a, b = statistics.median(ta), statistics.median(tb)
    row(f"float16 copy of {args.atari_pop} Nature-DQN members ({args.atari_pop * 4052658 * 4 / 1e9:.1f} GB float32)",
        "TfevoToHalf op", a, "s", f"tf.cast + range check {b:.2f} s; x{b / a:.1f}")
    del pop
    return {"dense": t32 / t16, "to_half": b / a}


SECTIONS = {
    "raw_atari": raw_atari,
    "atari": atari,
    "naive_atari": naive_atari,
    "raw_mujoco": raw_mujoco,
    "mujoco": mujoco,
    "naive_mujoco": naive_mujoco,
    "buckets": buckets,
    "op": op,
    "forward": forward,
    "half": half,
}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sections", default=",".join(SECTIONS))
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--atari-pop", type=int, default=256)
    p.add_argument("--atari-slots", type=int, default=32)
    p.add_argument("--atari-steps", type=int, default=20)
    p.add_argument("--atari-configs", default="1,prev,2,4,K2_1thread,f16_1,f16_2",
                   help="keys of the Atari configs to time (1, prev, 2, 4, K2_1thread, f16_1, f16_2)")
    p.add_argument("--mj-pop", type=int, default=256)
    p.add_argument("--mj-slots", type=int, default=64)
    p.add_argument("--mj-steps", type=int, default=200)
    p.add_argument("--naive-pop", type=int, default=8)
    args = p.parse_args(argv)
    print(f"load: {os.getloadavg()}  tf {tf.__version__}  cpus {os.cpu_count()}")
    print("| section | config | value | unit | notes |\n|---|---|---|---|---|")
    results = {}
    for s in args.sections.split(","):
        try:
            results[s] = SECTIONS[s](args)
        except Exception as e:  # keep measuring the other sections
            print(f"| {s} | FAILED | 0 | | {type(e).__name__}: {str(e)[:200]} |")
    print(f"load after: {os.getloadavg()}")
    ratios = []
    if "raw_mujoco" in results and "mujoco" in results:
        for K, v in results["mujoco"].items():
            ratios.append(f"HalfCheetah K={K}: {v / results['raw_mujoco']:.2f} of the raw simulator limit "
                          f"({results['raw_mujoco']:,.0f} steps/s, best slot count and action kind)")
    if "mujoco" in results and MJ_RAW_ROUNDS:
        for K, v in results["mujoco"].items():
            ratios.append(f"HalfCheetah K={K}: {v / MJ_RAW_ROUNDS['best']:.2f} of raw stepping measured in the same "
                          f"rounds ({MJ_RAW_ROUNDS['best']:,.0f} steps/s, best action kind)")
    if "atari" in results:
        a = results["atari"]
        names = {2: "K=2", 4: "K=4", "K2_1thread": "K=2 with 1 emulator thread per subset",
                 "prev": "the session-4 path (1 chain, inline)", "f16_1": "K=1 float16 weights",
                 "f16_2": "K=2 float16 weights"}
        if 1 in a:
            ratios.append("Atari vs serial K=1: " + ", ".join(f"{names[k]} x{v / a[1]:.2f}" for k, v in a.items()
                                                                if k != 1))
        if "f16_1" in a and "f16_2" in a:
            ratios.append(f"Atari float16 weights, pipelined/serial: K=2 x{a['f16_2'] / a['f16_1']:.2f}")
        if "naive_atari" in results:
            ratios.append("Atari vs naive: " + ", ".join(
                f"{'K=1' if k == 1 else names[k]} x{v / results['naive_atari']:.2f}" for k, v in a.items()))
    if "mujoco" in results and "naive_mujoco" in results:
        m = results["mujoco"]
        ratios.append(f"HalfCheetah vs naive: K=1 x{m[1] / results['naive_mujoco']:.1f}, "
                      f"best x{max(m.values()) / results['naive_mujoco']:.1f}")
    for r in ratios:
        print("-", r)


if __name__ == "__main__":
    main()
