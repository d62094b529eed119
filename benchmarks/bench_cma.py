"""Seconds per ask+tell (no evaluation) of tfevo CMA-ES vs evosax and pycma, and ``eigh`` alone.

Run::

    python benchmarks/bench_cma.py [--repeats R] [--gens G] [--cases cma:100 cma:1000 ...] [--eigh-table]
                                   [--variants eigen cholesky] [--breakdown 1000:24 1000:256]

Prints markdown tables.  Strategy table: for each case every library gets a
warm-up call (its time is reported as compile/trace time), then the libraries
run *alternating* timed blocks (tfevo, evosax, pycma, tfevo, ...), ``R``
blocks each, so a change of load on the shared machine hits all of them alike
(each block starts after a ``--pause`` sleep, default 0.3 s, so worker threads a
library left spinning -- OpenBLAS spins ~0.1 s after a call -- are idle again);
each cell is the median seconds per generation over the blocks (wall clock; the
"CPU" columns are the median *process* CPU seconds per generation, all threads,
and the last column the load average when the row was printed).  The same
fixed fitness vector (random, shape [P]) is told every generation, so no
evaluation is timed.

Full CMA-ES decomposes C only every few generations (tfevo and pycma both use
Hansen's gap ``max(1, floor(1 / (10 n (c1 + cmu))))`` by default), so each
timed block of a full CMA-ES covers whole gaps (at least two) of that library,
which amortises the eigendecomposition as in a real run.  evosax decomposes
every generation.  ``cma5`` cases set a five times longer gap in tfevo
(``eigen_gap``) and pycma (``updatecovwait``; not comparable, see results).
Full CMA-ES cases time both of tfevo's variants by default (``--variants``):
``CMAES`` (eigendecomposition, pycma's algorithm) and ``CholeskyCMAES``
(Cholesky factor, Krause et al. 2016), in the same alternation as the peers.
``--breakdown D:P`` prints where a generation's time goes for both variants.
``sep`` cases time Sep-CMA-ES (its evosax comparison lives in
``bench_strategies.py``).

``--eigh-table``: one symmetric 1000x1000 (and 300x300) eigendecomposition,
alternating: tfevo's op (``tfevo.linalg.eigh``: LAPACK ``?syevd`` from a private
copy of numpy's OpenBLAS, 1 thread and 2 threads), TensorFlow's
``tf.linalg.eigh`` (the reference path), numpy, scipy (``driver="evd"``, with
its default threads and limited to 1 thread by threadpoolctl) and jax (jitted),
float32 and float64.

eigh thread counts of tfevo are compared in *separate* runs
(``TFEVO_EIGH_THREADS=2 python benchmarks/bench_cma.py``): OpenBLAS worker
threads keep spinning after a call, which slows down whatever runs next in the
same process on a 2-core machine.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def _calibrate(step, gens, multiple=1, budget=0.2):
    """Warm-up; returns (generations per block, first-call seconds).

    A block has at least ``gens`` generations and lasts at least ~``budget``
    seconds, rounded up to a multiple of ``multiple`` (whole eigen gaps).
    """
    t0 = time.perf_counter()
    step()
    compile_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    step()
    one = max(time.perf_counter() - t0, 1e-6)
    gens = max(gens, int(budget / one))
    return multiple * max(1, -(-gens // multiple)), compile_s


def _interleaved(entries, repeats, cpu=None, pause=0.0):
    """``entries``: list of (step, gens per block).  Median s/gen of each, blocks alternating.

    ``cpu``: if a list, it receives the median *process* CPU seconds per generation of
    each entry (all threads of this process, so it includes the peers' worker threads).
    ``pause``: seconds of sleep before each block, so that worker threads a library left
    spinning (OpenBLAS's spin for ~0.1 s after a multithreaded call, JAX/TF pools briefly)
    have gone idle and do not eat into the next library's block.
    """
    res = [[] for _ in entries]
    cres = [[] for _ in entries]
    for _ in range(repeats):
        for i, (step, gens) in enumerate(entries):
            if pause > 0:
                time.sleep(pause)
            t0, c0 = time.perf_counter(), time.process_time()
            for _ in range(gens):
                step()
            res[i].append((time.perf_counter() - t0) / gens)
            cres[i].append((time.process_time() - c0) / gens)
    if cpu is not None:
        cpu[:] = [statistics.median(r) for r in cres]
    return [statistics.median(r) for r in res]


def make_tfevo(kind, n, p, gens, gap_factor=1, dtype="float32", threads=None, variant="eigen"):
    """``threads``: ``TFEVO_EIGH_THREADS`` for this instance (read when its ``tell`` is traced).
    ``variant``: ``"eigen"`` (CMAES) or ``"cholesky"`` (CholeskyCMAES) for full CMA-ES."""
    import tensorflow as tf
    from tfevo.strategies.cma_es import CMAES, CholeskyCMAES
    from tfevo.strategies.sep_cma_es import SepCMAES

    if kind == "cma":
        gap = CMAES(n, popsize=p).lazy_gap * gap_factor
        cls = CholeskyCMAES if variant == "cholesky" else CMAES
        es = cls(n, popsize=p, sigma=0.1, seed=0, eigen_gap=gap, dtype=dtype)
        gens, multiple = max(gens, 2 * gap), gap  # whole gaps: the eigendecomposition is amortised
    else:
        es = SepCMAES(n, popsize=p, sigma=0.1, seed=0, dtype=dtype)
        multiple = 1
    f = tf.constant(np.random.default_rng(0).standard_normal(es.popsize), tf.float32)

    def step():
        x = es.ask()
        es.tell(x, f)
    old = os.environ.get("TFEVO_EIGH_THREADS")
    if threads is not None:
        os.environ["TFEVO_EIGH_THREADS"] = str(threads)
    try:
        return (step, *_calibrate(step, gens, multiple))  # traces tell (and its eigh) here
    finally:
        if old is None:
            os.environ.pop("TFEVO_EIGH_THREADS", None)
        else:
            os.environ["TFEVO_EIGH_THREADS"] = old


def make_evosax(kind, n, p, gens):
    import jax
    import jax.numpy as jnp
    from evosax.algorithms import CMA_ES, Sep_CMA_ES

    es = (CMA_ES if kind == "cma" else Sep_CMA_ES)(population_size=p, solution=jnp.zeros(n))
    params = es.default_params
    key = jax.random.key(0)
    state = es.init(key, jnp.zeros(n), params)
    f = jnp.asarray(np.random.default_rng(0).standard_normal(p), jnp.float32)
    box = {"s": state}

    def step():
        pop, s = es.ask(key, box["s"], params)
        s, _ = es.tell(key, pop, f, s, params)
        jax.block_until_ready(s)
        box["s"] = s
    return (step, *_calibrate(step, gens))


def make_pycma(kind, n, p, gens, gap_factor=1):
    import math

    import cma

    opts = {"popsize": p, "verbose": -9, "seed": 1}
    if kind == "sep":
        opts["CMA_diagonal"] = True
    es = cma.CMAEvolutionStrategy(np.zeros(n), 0.1, opts)
    if kind == "cma":
        gap = es.sm.lazy_update_gap
        if gap_factor != 1:
            opts["updatecovwait"] = gap * gap_factor
            es = cma.CMAEvolutionStrategy(np.zeros(n), 0.1, opts)
            gap = es.sm.lazy_update_gap
        multiple = max(1, math.ceil(gap))
        gens = max(gens, 2 * multiple)  # whole gaps, as for tfevo
    else:
        multiple = 1
    f = list(np.random.default_rng(0).standard_normal(p))

    def step():
        X = es.ask()
        es.tell(X, f)
    return (step, *_calibrate(step, gens, multiple))


def _one_thread(f):
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1):
        return f()


def eigh_table(repeats):
    """Alternating timings of one eigendecomposition in each library (median seconds)."""
    import jax
    import jax.numpy as jnp
    import scipy.linalg
    import tensorflow as tf

    from tfevo import linalg, ops

    jax.config.update("jax_enable_x64", True)
    mod = ops.load("sym_eig") if linalg.lapack_library() is not None else None
    lib = linalg.lapack_library()
    print(f"\nLAPACK library of the op: {lib}\n")
    print("| n | dtype | tfevo op (1 thread) s | tfevo op (2 threads) s | tf.linalg.eigh s | numpy s | scipy evd s "
          "| scipy evd (1 thread) s | jax s | tf/op(1) | jax/op(1) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    jeigh = jax.jit(jnp.linalg.eigh)
    for n in (300, 1000):
        rng = np.random.default_rng(n)
        a = rng.standard_normal((n, n))
        c64 = a @ a.T / n + np.eye(n)
        for dt in (np.float32, np.float64):
            c = c64.astype(dt)
            xt, xj = tf.constant(c), jnp.asarray(c)
            ref = tf.function(tf.linalg.eigh)
            steps = {
                "op1": (lambda: mod.tfevo_sym_eig(xt, lapack=lib, threads=1)[0].numpy()) if mod else None,
                "op2": (lambda: mod.tfevo_sym_eig(xt, lapack=lib, threads=2)[0].numpy()) if mod else None,
                "tf": lambda: ref(xt)[0].numpy(),
                "numpy": lambda: np.linalg.eigh(c),
                "scipy": lambda: scipy.linalg.eigh(c, driver="evd"),
                "scipy1": lambda: _one_thread(lambda: scipy.linalg.eigh(c, driver="evd")),
                "jax": lambda: jax.block_until_ready(jeigh(xj)),
            }
            live = {k: f for k, f in steps.items() if f is not None}
            for f in live.values():
                f()
            times = dict(zip(live, _interleaved([(f, 1) for f in live.values()], repeats)))
            if mod:
                mod.tfevo_sym_eig(xt, lapack=lib, threads=1)  # leave the op's copy at 1 thread
            g = lambda k: f"{times[k]:.4f}" if k in times else "n/a"  # noqa: E731
            r1 = times.get("op1")
            print(f"| {n} | {np.dtype(dt).name} | {g('op1')} | {g('op2')} | {g('tf')} | {g('numpy')} | {g('scipy')} | "
                  f"{g('scipy1')} | {g('jax')} | {times['tf'] / r1 if r1 else float('nan'):.2f} | "
                  f"{times['jax'] / r1 if r1 else float('nan'):.2f} |", flush=True)


def breakdown(n, p, repeats):
    """Per-generation cost of the pieces of tfevo's full CMA-ES variants at (n, p).

    Wall and CPU (process) seconds, median of ``max(repeats, 7)`` alternating
    calls of each piece on the instance's own state: the traced ``ask``, the
    graph-mode whitening before the core (Cholesky: the triangular solve, which
    a generation skips when ``tell`` gets the asked rows; eigen: nothing), the XLA
    numeric core, the covariance-update step of every generation (eigen: the
    rank-(P+1) update of C's lower triangle; Cholesky: writing the buffer), the
    update flush and the factorisation (eigen: ``?syevd`` and B, D, the two eigen
    steps timed apart on copies of C, B, D although a generation makes them one
    call of ``linalg.eigen_refresh``;
    Cholesky: both in one in-place call, ``?syrk`` of the whole gap's buffer
    then ``?potrf``, shown as the flush), and a
    whole generation (``ask`` + ``tell``, averaged over whole gaps).  "per
    generation" amortises the flush and the factorisation over the gap; "call
    overhead" is the whole generation minus the sum of its pieces.
    """
    import tensorflow as tf
    from tfevo import linalg
    from tfevo.strategies.cma_es import CMAES, CholeskyCMAES

    print(f"\n### Breakdown D={n} P={p} (ms per call; wall / CPU)\n")
    rng = np.random.default_rng(0)
    rows = {}
    for cls in (CMAES, CholeskyCMAES):
        es = cls(n, popsize=p, sigma=0.1, seed=0, dtype="float32")
        gap = es.lazy_gap
        f = tf.constant(rng.standard_normal(p), tf.float32)
        for _ in range(2 * gap):
            es.tell(es.ask(), f)
        x = es.ask()
        pre = tf.function(lambda x: es._model.prepare(x))
        extra = pre(x)
        core = es._core_fn
        out = core(x, f, *extra)
        ap = tf.function(lambda *a: es._model._apply(*a))
        if cls is CholeskyCMAES:
            # flush and factorisation are one in-place call (linalg.covariance_refresh), timed on
            # copies of the instance's C and A
            k = max(es._buf_gens, 1) * (p + 1)
            rows_t = tf.constant(rng.standard_normal((k, n)) * 0.01, es.dtype)
            v_t = tf.constant(np.abs(rng.standard_normal(k)) * 1e-3, es.dtype)
            c2, a2 = tf.Variable(es.C), tf.Variable(es.A)
            s2 = tf.Variable(tf.zeros_like(es.C))
            flush = tf.function(lambda: linalg.covariance_refresh(c2, a2, s2, rows_t, v_t, tf.constant(0.99, es.dtype)))
            fac = None
            flush_every = es._buf_gens
        else:
            # update and eigendecomposition are one in-place call (linalg.eigen_refresh), timed
            # apart on copies of the instance's C, B, D: update only, then decomposition only
            flush, flush_every = None, 1
            c2, b2, d2 = tf.Variable(es.C), tf.Variable(es.B), tf.Variable(es.D)
            ys_t, v_t, decay_t, ok_t = out
            ap = tf.function(lambda *a: linalg.eigen_refresh(c2, b2, d2, ys_t, v_t, decay_t, ok=ok_t, refresh=False))
            fac = tf.function(lambda: linalg.eigen_refresh(c2, b2, d2, refresh=True))

        def gen_block():
            for _ in range(gap):
                es.tell(es.ask(), f)
            es.sigma.numpy()

        pieces = {
            "ask": lambda: es._ask_call().numpy(),
            "whiten (graph)": lambda: [t.numpy() for t in pre(x)],  # x is not the last ask here: the solve path
            "core (XLA)": lambda: tf.nest.map_structure(lambda t: t.numpy(), core(x, f, *extra)),
            "C update / buffer write": lambda: (ap(*out), es.sigma.numpy()),
            "flush (?syrk)": (lambda: [t.numpy() for t in flush()]) if flush is not None else None,
            "factorisation": (lambda: tf.nest.map_structure(lambda t: t.numpy(), fac())) if fac is not None else None,
            "generation": gen_block,
        }
        live = {k: fn for k, fn in pieces.items() if fn is not None}
        for fn in live.values():
            fn()
        res = {k: ([], []) for k in live}
        for _ in range(max(repeats, 7)):
            for k, fn in live.items():
                w0, c0 = time.perf_counter(), time.process_time()
                fn()
                res[k][0].append(time.perf_counter() - w0)
                res[k][1].append(time.process_time() - c0)
        med = {k: (statistics.median(a) * 1e3, statistics.median(b) * 1e3) for k, (a, b) in res.items()}
        med["generation"] = tuple(v / gap for v in med["generation"])
        per_gen = {}
        for k, v in med.items():
            div = gap if k == "factorisation" else (flush_every if k.startswith("flush") else 1)
            per_gen[k] = tuple(x / div for x in v)
        parts = [k for k in per_gen if k != "generation"]
        over = tuple(per_gen["generation"][i] - sum(per_gen[k][i] for k in parts) for i in (0, 1))
        rows[cls.__name__] = (gap, flush_every, med, per_gen, over)
    print("| piece | CMAES (eigen) per call | per generation | CholeskyCMAES per call | per generation |")
    print("|---|---|---|---|---|")
    keys = ["ask", "whiten (graph)", "core (XLA)", "C update / buffer write", "flush (?syrk)", "factorisation",
            "generation"]
    fmt = lambda t: f"{t[0]:.2f} / {t[1]:.2f}"  # noqa: E731
    for k in keys:
        cells = []
        for name in ("CMAES", "CholeskyCMAES"):
            _, _, med, per_gen, _ = rows[name]
            cells += [fmt(med[k]), fmt(per_gen[k])] if k in med else ["-", "-"]
        label = "flush (Cholesky: ?syrk + ?potrf, in place)" if k == "flush (?syrk)" else k
        print(f"| {label} | " + " | ".join(cells) + " |")
    print("| call overhead (generation - pieces) | - | " + fmt(rows["CMAES"][4]) + " | - | "
          + fmt(rows["CholeskyCMAES"][4]) + " |")
    print(f"\n(gap: eigen {rows['CMAES'][0]}, Cholesky {rows['CholeskyCMAES'][0]} generations; Cholesky flush every "
          f"{rows['CholeskyCMAES'][1]})", flush=True)


def tri_table(repeats, n=1000, ks=(24, 256), calls=10):
    """The sampling product ``y = A z`` of ``CholeskyCMAES`` alone (``tfevo.linalg.triangular_rows``,
    op path, float32, ``n`` x ``n`` lower ``A``, ``k`` rows): ms per call, min and median over
    ``max(repeats, 20)`` blocks of ``calls`` successive calls of a ``tf.function`` holding the op (call
    overhead included), and the rate in GFLOP/s (``k n^2`` flops: one multiply-add per entry of the
    triangle).  Not several products inside one graph: with constant inputs Grappler folds them, and a
    chain of control dependencies gave impossible rates (> 400 GFLOP/s), so it did not run them all."""
    import tensorflow as tf

    from tfevo import linalg

    rng = np.random.default_rng(0)
    a = tf.constant(np.tril(rng.standard_normal((n, n))).astype(np.float32))
    print(f"\n### Triangular sampling product, n = {n} (ms per call, min / median)\n")
    print("| k rows | min ms | median ms | GFLOP/s (min) |")
    print("|---|---|---|---|")
    for k in ks:
        zs = [tf.constant(rng.standard_normal((k, n)).astype(np.float32)) for _ in range(calls)]
        f = tf.function(lambda a, z: linalg.triangular_rows(a, z, use_op=True))
        f(a, zs[0]).numpy()
        ts = []
        for _ in range(max(repeats, 20)):
            t0 = time.perf_counter()
            for z in zs:  # successive calls, as in successive generations (eager CPU calls run in order)
                y = f(a, z)
            y.numpy()
            ts.append((time.perf_counter() - t0) / calls)
        lo, med = min(ts) * 1e3, statistics.median(ts) * 1e3
        print(f"| {k} | {lo:.3f} | {med:.3f} | {k * n * n / lo / 1e6:.0f} |", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--gens", type=int, default=2)
    ap.add_argument("--cases", nargs="*", default=["cma:100", "cma:1000"],
                    help="kind:n with kind cma, cma5 (5x eigen gap) or sep")
    ap.add_argument("--popsizes", nargs="+", default=["default", "256"])
    ap.add_argument("--variants", nargs="+", default=["eigen", "cholesky"], choices=["eigen", "cholesky"],
                    help="full CMA-ES variants of tfevo timed (alternating with evosax and pycma in one run): "
                         "eigen = CMAES (pycma's algorithm), cholesky = CholeskyCMAES")
    ap.add_argument("--pause", type=float, default=0.3,
                    help="seconds of sleep before each timed block (lets the previous library's spinning worker "
                         "threads go idle; 0 = blocks back to back, as before session 7)")
    ap.add_argument("--breakdown", nargs="*", default=None, metavar="D:P",
                    help="per-generation breakdown of tfevo's CMA-ES variants (e.g. 1000:24 1000:256)")
    ap.add_argument("--eigh-table", action="store_true", help="also time eigh alone (op vs TF vs numpy/scipy/jax)")
    ap.add_argument("--tri-table", action="store_true",
                    help="also time CholeskyCMAES's sampling product y = A z alone (n = 1000, 24 and 256 rows)")
    ap.add_argument("--one-thread", action="store_true",
                    help="every library on one thread (TF intra/inter-op 1, XLA/JAX single-threaded, OpenBLAS 1 "
                         "via threadpoolctl): per-core cost, robust to the load of a shared machine")
    args = ap.parse_args()
    if args.one_thread:
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                                   " --xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1").strip()
        import tensorflow as tf
        from threadpoolctl import threadpool_limits

        tf.config.threading.set_intra_op_parallelism_threads(1)
        tf.config.threading.set_inter_op_parallelism_threads(1)
        import scipy.linalg  # noqa: F401  (load scipy's OpenBLAS too, so the limit covers it)

        _limits = threadpool_limits(1)  # noqa: F841  (kept for the whole run)
        print("one-thread mode: TF intra/inter-op 1, XLA_FLAGS=" + os.environ["XLA_FLAGS"] + ", OpenBLAS 1")
    cases = [(c.split(":")[0], int(c.split(":")[1])) for c in args.cases]
    uptime = lambda: subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()  # noqa: E731
    print(f"start {time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime())} UTC, load: {uptime()}")
    print(f"TFEVO_EIGH_THREADS={os.environ.get('TFEVO_EIGH_THREADS', '1 (default)')}")
    if cases:
        print("| strategy | D | P | eigh threads | tfevo s/gen | evosax s/gen | pycma s/gen | evosax/tfevo | pycma/tfevo "
              "| tfevo first call s | evosax first call s | pycma first call s | tfevo CPU s/gen | evosax CPU s/gen "
              "| pycma CPU s/gen | load after |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for kind, n in cases:
        default = 4 + int(np.floor(3 * np.log(n)))
        factor = 5 if kind == "cma5" else 1
        kind = "cma" if kind == "cma5" else kind
        # One tfevo entry per case.  (Timing a TFEVO_EIGH_THREADS=2 instance in the same
        # process was tried: its spinning OpenBLAS threads slow down the blocks that
        # follow it, so thread counts are compared in separate runs.)
        variants = args.variants if kind == "cma" else ["eigen"]
        for ps in args.popsizes:
            p = default if ps == "default" else int(ps)
            tf_entries = [make_tfevo(kind, n, p, args.gens, factor, variant=v) for v in variants]
            e_step, e_gens, ec = make_evosax(kind, n, p, args.gens)
            c_step, c_gens, cc = make_pycma(kind, n, p, args.gens, factor)
            entries = [(s, g) for s, g, _ in tf_entries] + [(e_step, e_gens), (c_step, c_gens)]
            cpu = []
            times = _interleaved(entries, args.repeats, cpu, pause=args.pause)
            e, c = times[-2:]
            for v, t, tcpu, (_, _, tc) in zip(variants, times, cpu, tf_entries):
                if kind == "cma":
                    name = ("CMA-ES (Cholesky)" if v == "cholesky" else "CMA-ES (eigen)") + (
                        " (gap x5)" if factor != 1 else "")
                else:
                    name = "Sep-CMA-ES"
                th_s = "-" if kind != "cma" else str(os.environ.get("TFEVO_EIGH_THREADS", 1))
                print(f"| {name} | {n} | {p} | {th_s} | {t:.2e} | {e:.2e} | {c:.2e} | {e / t:.2f} | {c / t:.1f} | "
                      f"{tc:.1f} | {ec:.1f} | {cc:.1f} | {tcpu:.2e} | {cpu[-2]:.2e} | {cpu[-1]:.2e} | "
                      f"{uptime().split('load average:')[-1].strip()} |", flush=True)
    if args.breakdown:
        for spec in args.breakdown:
            n, p = (int(v) for v in spec.split(":"))
            breakdown(n, p, args.repeats)
    if args.eigh_table:
        eigh_table(args.repeats)
    if args.tri_table:
        tri_table(args.repeats)
    print(f"end {time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime())} UTC, load: {uptime()}")


if __name__ == "__main__":
    main()
