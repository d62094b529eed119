"""Benchmark of tfevo.nn: population forward passes.

For small MLPs (P = 64, 256, 1024) and Nature-DQN nets (P = 16, 64) it times
one forward pass of the whole population with ``PopulationModel`` and compares
it with

* the per-member Keras loop: ``model.set_weights(member) ; model(x[p])`` for
  every member (large P: a subset of members is timed and the time is
  extrapolated linearly -- marked ``*``),
* a loop over pre-built Keras models (``models[p](x[p])``, no weight copies;
  also a timed subset, extrapolated),
* JAX ``jit(vmap(net))`` of the same network (how evosax-style libraries batch
  a population), when JAX is installed,

and reports the achieved FLOP rate as a fraction of the rate of one plain
``tf.matmul`` (square, same total FLOPs) on this machine.

Run: ``python benchmarks/bench_nn.py [--quick]``; prints a markdown table.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import numpy as np  # noqa: E402
import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

from tfevo import kernels, nn  # noqa: E402


def median_time(fn, reps, min_seconds=0.3, max_reps=300):
    """Median wall time of ``fn`` over at least ``reps`` calls (after the caller's warm-up).

    Cheap calls are repeated until ``min_seconds`` have passed (at most
    ``max_reps`` calls), so sub-millisecond timings are medians of many calls.
    """
    ts = []
    start = time.perf_counter()
    while len(ts) < reps or (time.perf_counter() - start < min_seconds and len(ts) < max_reps):
        t = time.perf_counter()
        out = fn()
        np.asarray(out)
        ts.append(time.perf_counter() - t)
    return float(np.median(ts))


def model_flops(template, batch):
    """Multiply-add FLOPs (x2) of Dense and Conv2D layers for one member."""
    total = 0
    for layer in template.layers:
        if isinstance(layer, keras.layers.Dense):
            rows = int(np.prod(layer.input.shape[1:-1])) if len(layer.input.shape) > 2 else 1
            total += 2 * rows * layer.input.shape[-1] * layer.units
        elif isinstance(layer, keras.layers.Conv2D):
            _, ho, wo, f = layer.output.shape
            kh, kw = layer.kernel_size
            total += 2 * ho * wo * kh * kw * layer.input.shape[-1] * f
    return total * batch


def matmul_rate(flops, reps):
    """FLOP/s of one square tf.matmul with about ``flops`` FLOPs."""
    n = max(8, int(round((flops / 2) ** (1 / 3))))
    a = tf.random.normal([n, n])
    b = tf.random.normal([n, n])
    f = tf.function(lambda a, b: tf.matmul(a, b))
    f(a, b)
    t = median_time(lambda: f(a, b), reps)
    return 2 * n**3 / t, n


def jax_forward(template, popsize, batch, seed=0):
    """jit(vmap(forward)) of the template's Dense/Conv2D/Flatten stack in JAX."""
    try:
        import jax
        import jax.numpy as jnp
    except Exception:  # noqa: BLE001
        return None
    layers = [l for l in template.layers if not isinstance(l, keras.layers.InputLayer)]
    acts = {"relu": jax.nn.relu, "tanh": jnp.tanh, "linear": lambda v: v}

    def net(ws, x):
        i = 0
        for l in layers:
            if isinstance(l, keras.layers.Dense):
                x = acts[l.activation.__name__](x @ ws[i] + ws[i + 1])
                i += 2
            elif isinstance(l, keras.layers.Conv2D):
                x = jax.lax.conv_general_dilated(x, ws[i], l.strides, l.padding.upper(),
                                                 dimension_numbers=("NHWC", "HWIO", "NHWC"))
                x = acts[l.activation.__name__](x + ws[i + 1])
                i += 2
            elif isinstance(l, keras.layers.Flatten):
                x = x.reshape(x.shape[0], -1)
        return x

    key = jax.random.PRNGKey(seed)
    ws = [jax.random.normal(jax.random.fold_in(key, j), (popsize,) + tuple(w.shape)) * 0.01
          for j, w in enumerate(template.weights)]
    x = jax.random.uniform(key, (popsize, batch) + tuple(template.inputs[0].shape[1:]))
    f = jax.jit(jax.vmap(net))
    return lambda: f(ws, x).block_until_ready(), f, ws, x


def bench_case(name, template, popsize, batch, loop_members, reps, with_jax=True, subset=None):
    pm = nn.PopulationModel(template)
    params = pm.init_params(popsize, seed=0)
    x = tf.random.uniform((popsize, batch) + pm.input_shape)
    t0 = time.perf_counter()
    np.asarray(pm(params, x))
    first = time.perf_counter() - t0
    t_pop = median_time(lambda: pm(params, x), reps)
    trace = max(first - t_pop, 0.0)

    weights = pm.unflatten(params)
    t_split = median_time(lambda: pm(weights, x), reps)
    t_grouped = t_im2col = None
    if any(isinstance(l, keras.layers.Conv2D) for l in template.layers):
        pg = nn.PopulationModel(template, conv_method="grouped")
        np.asarray(pg(weights, x))
        t_grouped = median_time(lambda: pg(weights, x), reps)
        pi = nn.PopulationModel(template, conv_method="im2col")  # the pure-TF reference of the conv op
        np.asarray(pi(weights, x))
        t_im2col = median_time(lambda: pi(weights, x), reps)

    # per-member Keras loop on a subset of members, extrapolated to P
    k = min(loop_members, popsize)
    rows = [[w[p].numpy() for w in weights] for p in range(k)]
    model = keras.models.clone_model(template)
    model(x[0])  # warm up

    def loop_set():
        out = None
        for p in range(k):
            model.set_weights(rows[p])
            out = model(x[p])
        return out

    t_loop = median_time(loop_set, max(2, reps // 2)) * popsize / k
    models = []
    for p in range(k):
        m = keras.models.clone_model(template)
        m.set_weights(rows[p])
        m(x[p])
        models.append(m)
    t_loop2 = median_time(lambda: [m(x[p]) for p, m in enumerate(models)][-1], max(2, reps // 2)) * popsize / k

    t_jax = None
    if with_jax:
        j = jax_forward(template, popsize, batch)
        if j is not None:
            run = j[0]
            run()
            t_jax = median_time(run, reps)

    flops = model_flops(template, batch) * popsize
    rate = flops / t_pop
    mm_rate, n = matmul_rate(flops, reps)
    row = dict(
        case=name, P=popsize, B=batch, D=pm.num_params, t_pop=t_pop, t_split=t_split, trace=trace, t_grouped=t_grouped, t_im2col=t_im2col,
        t_loop=t_loop, t_loop2=t_loop2, extrap=k < popsize, k=k, t_jax=t_jax, gflops=rate / 1e9,
        mm_gflops=mm_rate / 1e9, mm_n=n, wgbs=popsize * pm.num_params * 4 / t_split / 1e9,
    )
    if subset:
        nsub = subset
        idx = tf.range(nsub) * (popsize // nsub)
        xs = x[:nsub]
        np.asarray(pm(params, xs, idx))
        np.asarray(pm(weights, xs, idx))
        row["subset"] = (nsub, median_time(lambda: pm(params, xs, idx), reps),
                         median_time(lambda: pm(weights, xs, idx), reps))
    return row


def mlp_alternated(template, popsize, batch, rounds=7, calls=30):
    """Small-MLP forward: fused kernel (eager call), the layer-by-layer path and JAX, alternated.

    Each round times ``calls`` consecutive calls of every variant (median per
    call), the variants taking turns, so load drift hits all alike; the
    result is the median over rounds.  Variants: tfevo ``pm(params, x)``
    (plain MLP: the ``TfevoPopulationMlp`` kernel, one op dispatch), the same
    model with ``use_op=False`` (the path before the kernel, its
    reference), and JAX ``jit(vmap)``.
    """
    pm = nn.PopulationModel(template)
    ref = nn.PopulationModel(template, use_op=False)
    params = pm.init_params(popsize, seed=0)
    x = tf.random.uniform((popsize, batch) + pm.input_shape)
    fns = {"fused": lambda: pm(params, x), "layered": lambda: ref(params, x)}
    j = jax_forward(template, popsize, batch)
    if j is not None:
        fns["jax"] = j[0]
    np.testing.assert_allclose(np.asarray(fns["fused"]()), np.asarray(fns["layered"]()), rtol=1e-5, atol=1e-6)
    for f in fns.values():
        for _ in range(5):
            np.asarray(f())
    per = {k: [] for k in fns}
    names = list(fns)
    for r in range(rounds):
        for i in range(len(names)):
            k = names[(i + r) % len(names)]
            ts = []
            for _ in range(calls):
                t = time.perf_counter()
                np.asarray(fns[k]())
                ts.append(time.perf_counter() - t)
            per[k].append(float(np.median(ts)))
    return dict(P=popsize, B=batch, kernel=pm.fused_mlp and batch <= 4, **{k: float(np.median(v)) for k, v in per.items()})


def fmt_ms(t):
    return "-" if t is None else (f"{t * 1e3:.3f}" if t < 1e-3 else f"{t * 1e3:.2f}" if t < 1 else f"{t * 1e3:.0f}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer repeats, smaller loops")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--networks", choices=("all", "mlp", "dqn"), default="all",
                    help="which rows to run (dqn = the Nature-DQN rows only)")
    args = ap.parse_args()
    reps = 3 if args.quick else args.reps
    load = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    print(f"uptime before: {load}")
    print(f"TensorFlow {tf.__version__}, Keras {keras.__version__}, indexed_matmul op: "
          f"{kernels.built("TfevoIndexedMatmul")}, reps={reps}\n")
    rows = []
    mlp_rows = []
    if args.networks in ("all", "mlp"):
        mlp = nn.mlp((8,), 2, hidden=(64, 64), activation="tanh")
        for p, b in ((64, 1), (256, 1), (1024, 1), (256, 32)):
            mlp_rows.append(mlp_alternated(mlp, p, b, rounds=3 if args.quick else 7))
        for p in (64, 256, 1024):
            rows.append(bench_case("MLP 8-64-64-2", mlp, p, 1, 16 if args.quick else 32, reps))
        rows.append(bench_case("MLP 8-64-64-2", mlp, 256, 32, 16 if args.quick else 32, reps))
    if args.networks in ("all", "dqn"):
        dqn = nn.nature_dqn(18)
        for p in (16, 64):
            rows.append(bench_case("Nature-DQN 84x84x4, 18 act", dqn, p, 1, 2 if args.quick else 4, reps,
                                   subset=p // 4))
        rows.append(bench_case("Nature-DQN 84x84x4, 18 act", dqn, 16, 8, 2 if args.quick else 4, reps))
    if mlp_rows:
        print("Small MLP 8-64-64-2 (tanh), variants alternated round by round (median over rounds of the "
              "median per call):\n")
        print("| P | B | tfevo forward ms (fused kernel) | layer-by-layer path ms (use_op=False) | fused speed-up "
              "| JAX jit(vmap) ms | tfevo/JAX time ratio |")
        print("|---|---|---|---|---|---|---|")
        for r in mlp_rows:
            jx = r.get("jax")
            ratio = "-" if jx is None else f"{r['fused'] / jx:.2f}"
            kern = "" if r["kernel"] else " (layer-by-layer: kernel only for <= 4 rows per member)"
            print(f"| {r['P']} | {r['B']} | {fmt_ms(r['fused'])}{kern} | {fmt_ms(r['layered'])} "
                  f"| {r['layered'] / r['fused']:.1f}x | {fmt_ms(jx)} | {ratio} |")
        print()
    print("| network | P | B | D | tfevo forward ms | tfevo, pre-split weights ms | pre-split, im2col conv ms "
          "| pre-split, grouped conv ms "
          "| trace+first-call overhead ms "
          "| Keras loop set_weights+call ms | speed-up | Keras loop pre-built models ms | speed-up "
          "| JAX jit(vmap) ms | tfevo/JAX time ratio | GFLOP/s | plain matmul GFLOP/s (n) | fraction "
          "| weights read GB/s (pre-split) |")
    print("|" + "---|" * 19)
    for r in rows:
        star = "*" if r["extrap"] else ""
        jr = "-" if r["t_jax"] is None else f"{r['t_pop'] / r['t_jax']:.2f}"
        print(f"| {r['case']} | {r['P']} | {r['B']} | {r['D']:,} | {fmt_ms(r['t_pop'])} | {fmt_ms(r['t_split'])} "
              f"| {fmt_ms(r['t_im2col'])} | {fmt_ms(r['t_grouped'])} "
              f"| {fmt_ms(r['trace'])} | {fmt_ms(r['t_loop'])}{star} | {r['t_loop'] / r['t_pop']:.1f}x "
              f"| {fmt_ms(r['t_loop2'])}{star} | {r['t_loop2'] / r['t_pop']:.1f}x | {fmt_ms(r['t_jax'])} | {jr} "
              f"| {r['gflops']:.2f} | {r['mm_gflops']:.1f} ({r['mm_n']}) | {r['gflops'] / r['mm_gflops']:.2f} | {r['wgbs']:.2f} |")
    print("\n`*` = Keras loop timed on the first k members and extrapolated linearly to P "
          + ", ".join(f"(P={r['P']}: k={r['k']})" for r in rows if r["extrap"]) + ".")
    subs = [r for r in rows if "subset" in r]
    if subs:
        print("\n| network | P | active n | full forward ms | subset, flat params ms | subset, pre-split weights ms |")
        print("|---|---|---|---|---|---|")
        for r in subs:
            n, a, b = r["subset"]
            print(f"| {r['case']} | {r['P']} | {n} | {fmt_ms(r['t_pop'])} | {fmt_ms(a)} | {fmt_ms(b)} |")
    load = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    print(f"\nuptime after: {load}")


if __name__ == "__main__":
    main()
