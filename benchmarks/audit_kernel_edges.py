"""Custom ops against their pure-TF references on edge inputs; prints one table row per check.

Counts disagreements (NaN/inf pattern, values beyond float rounding, cells) between the C++
kernel and the reference on inputs the parity tests do not sweep: special values (NaN, +-inf,
float32 extremes, protection thresholds) in every argument of every GP function, random
populations of every NEAT activation/aggregation on such inputs, MSEs whose squares leave
float32, CVT descriptors far outside the archive's ranges, odd sizes for the Philox, Gaussian
and indexed-matmul kernels, and NaN/inf above the diagonal for the eigensolver.

    PYTHONPATH=$PWD python benchmarks/audit_kernel_edges.py
"""
from __future__ import annotations

import itertools
import os
import sys

import numpy as np


def row(check, n, bad, note=""):
    print(f"| {check} | {n} | {bad} | {note} |", flush=True)


def gp():
    from tfevo.gp import GPConfig, GeneticProgramming, evaluate, mse, mse_reference
    from tfevo.gp.functions import PROTECT_EPS, builtin_functions
    from tfevo.gp.trees import from_prefix, get_function

    sp = np.array([0.0, -0.0, PROTECT_EPS, -PROTECT_EPS, 1.0, -1.0, 2.5, -3.0, 88.0, 89.0, 100.0, -100.0, 1e30, -1e30,
                   3.4e38, -3.4e38, np.inf, -np.inf, np.nan], np.float32)
    n = bad = 0
    for fn in builtin_functions():
        a = get_function(fn).arity
        x = np.array(list(itertools.product(sp, repeat=min(a, 2))), np.float32)
        if a > 2:
            x = np.concatenate([x, np.tile(np.array([[5.0, -7.0]], np.float32), (len(x), 1))], 1)
        tr = from_prefix([[fn] + [f"x{i}" for i in range(a)]], 8)
        g, r = evaluate(tr, x, use_op=True).numpy()[0], evaluate(tr, x, use_op=False).numpy()[0]
        with np.errstate(all="ignore"):
            ok = (np.isnan(g) & np.isnan(r)) | (g == r) | np.isclose(g, r, rtol=2e-6, atol=0)
        n, bad = n + len(x), bad + int((~ok).sum())
    row("GpEval, each built-in function on special-value pairs", n, bad)
    tr = GeneticProgramming(GPConfig(popsize=1003, max_len=48, num_vars=3, functions=tuple(builtin_functions())),
                            seed=1).ask()
    rs = np.random.RandomState(0)
    for N in (1, 7, 1000, 4099):
        x = rs.randn(N, 3).astype(np.float32) * 3
        y = np.sin(x[:, 0]).astype(np.float32)
        m1, m2 = mse(tr, x, y, use_op=True).numpy(), mse_reference(tr, x, y).numpy()
        row(f"GpMse, random trees, N={N}: finite/inf pattern", len(m1), int((np.isfinite(m1) != np.isfinite(m2)).sum()),
            f"bit-identical losses {np.mean(m1 == m2):.2f}")


def neat():
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    sys.path[:0] = [os.path.join(root, "tests"), os.path.join(root, "tests", "kernels")]
    from test_neat_forward_op import ALL_ACT, ALL_AGG, random_genomes

    from tfevo.neat import _forward_op as fo
    from tfevo.neat import functions as F
    from tfevo.neat import network as net

    I, O = 3, 2
    acts, aggs = [F.activation_id(a) for a in ALL_ACT], [F.aggregation_id(a) for a in ALL_AGG]
    for P, N, C, B in ((1, 5, 1, 1), (257, 14, 30, 17), (33, 40, 90, 5)):
        nodes, conns = random_genomes(P, N, C, I, O, seed=P, act_ids=acts, agg_ids=aggs)
        rng = np.random.default_rng(P)
        for kind in ("uniform", "1e20", "special"):
            if kind == "uniform":
                x = rng.uniform(-1, 1, (P, B, I)).astype(np.float32)
            elif kind == "1e20":
                x = (rng.uniform(-1, 1, (P, B, I)) * 1e20).astype(np.float32)
            else:
                x = rng.choice(np.array([np.nan, np.inf, -np.inf, 0.0, 1e38, -1e38, 1.0], np.float32), (P, B, I))
            r = fo.forward(net.transform(nodes, conns, I, True), x, I, O, ALL_ACT, ALL_AGG).numpy()
            g = fo.forward(fo.prepare(nodes, conns, I, True, ALL_ACT, ALL_AGG, use_op=True), x, I, O).numpy()
            nanm = int((np.isnan(g) != np.isnan(r)).sum())
            infm = int((np.isinf(g) != np.isinf(r)).sum())
            fin = np.isfinite(g) & np.isfinite(r)
            far = int((~np.isclose(g[fin], r[fin], rtol=1e-5, atol=1e-5)).sum())
            row(f"TfevoNeatForward P={P} N={N} B={B}, {kind} inputs: NaN / inf / far", g.size,
                f"{nanm} / {infm} / {far}")


def qd():
    from tfevo.qd import CVTArchive

    rng = np.random.default_rng(0)
    cent = rng.uniform(size=(70, 2)).astype(np.float32)
    a = CVTArchive(3, 70, [(0, 1), (0, 1)], use_op=True, centroids=cent, lookup="buckets")
    b = CVTArchive(3, 70, [(0, 1), (0, 1)], use_op=False, centroids=cent, lookup="buckets")
    for scale in (1.0, 100.0, 1e3, 1e4, 1e6):
        d = rng.uniform(-scale, scale, size=(20000, 2)).astype(np.float32)
        i1, i2 = a.index_of(d).numpy(), b.index_of(d).numpy()
        true = ((d.astype(np.float64)[:, None] - cent.astype(np.float64)[None]) ** 2).sum(-1).argmin(1)
        row(f"TfevoNearestCentroid, descriptors in [-{scale:g}, {scale:g}]^2 (range [0, 1]^2)", len(d),
            int((i1 != i2).sum()),
            f"kernel / reference != float64 nearest: {(i1 != true).sum()} / {(i2 != true).sum()}")


def misc():
    import tensorflow as tf

    from tfevo import linalg, random_ops
    from tfevo.nn.indexed import indexed_matmul, indexed_matmul_reference
    from tfevo.strategies import shaping as S

    n = bad = 0
    for shape in ([0], [1], [3], [17], [2, 0, 4], [1000003], [7, 131]):
        for seed in ([0, 0], [-1, -1], [2**31 - 1, -2**31]):
            n += 1
            bad += not np.array_equal(random_ops.stateless_uniform(shape, seed, use_op=True).numpy(),
                                      random_ops.stateless_uniform_reference(shape, seed).numpy())
    row("TfevoStatelessUniform, odd shapes and extreme seeds (bitwise)", n, bad)
    n = bad = 0
    for r, d in ((1, 1), (2, 1), (1, 7), (3, 5), (17, 33), (1001, 3)):
        for scale in (None, 0.5, np.linspace(0.1, 2, d).astype(np.float32)):
            n += 1
            bad += not np.allclose(S._normal([r, d], [3, 4], scale, use_op=True).numpy(),
                                   S._normal_reference([r, d], [3, 4], scale).numpy(), rtol=1e-5, atol=1e-6)
    row("TfevoGaussianPopulation, odd shapes and scales (rtol 1e-5)", n, bad)
    rng = np.random.default_rng(0)
    n = bad = 0
    for (k, b, i, m, M) in ((1, 1, 1, 1, 1), (1, 3, 5, 7, 2), (7, 13, 33, 65, 9), (2, 64, 129, 255, 3)):
        x, w = rng.normal(size=(k, b, i)).astype(np.float32), rng.normal(size=(M, i, m)).astype(np.float32)
        x.flat[::7], x.flat[3::11] = np.inf, np.nan
        idx = rng.integers(0, M, k).astype(np.int32)
        g, r = indexed_matmul(x, w, idx, use_op=True).numpy(), indexed_matmul_reference(x, w, idx).numpy()
        n += g.size
        with np.errstate(all="ignore"):
            bad += int((~((np.isnan(g) & np.isnan(r)) | np.isclose(g, r, rtol=1e-4, atol=1e-4))).sum())
    row("TfevoIndexedMatmul, odd sizes with NaN/inf inputs", n, bad)
    x = np.array([[2.0, np.nan, np.inf], [1.0, 3.0, -np.inf], [0.5, -1.0, 4.0]], np.float32)
    out = []
    for use_op in (True, False):
        try:
            out.append(np.round(linalg.eigh(x, use_op=use_op)[0].numpy(), 4).tolist())
        except tf.errors.InvalidArgumentError:
            out.append("InvalidArgumentError")
    row("TfevoSymEig, NaN/inf above the diagonal only (kernel, reference)", 1, int(out[0] != out[1]), str(out))
    out = []
    for use_op in (True, False):
        try:
            out.append(linalg.eigh(np.array([[np.nan]], np.float32), use_op=use_op)[0].numpy().tolist())
        except tf.errors.InvalidArgumentError:
            out.append("InvalidArgumentError")
    row("TfevoSymEig, 1x1 NaN (kernel, reference)", 1, int(out[0] != out[1]), str(out))


if __name__ == "__main__":
    print("| check | compared | disagreements | note |\n|---|---|---|---|")
    for part in (gp, neat, qd, misc):
        part()
