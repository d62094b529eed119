"""Cost of the general population convolution (dilated, grouped, transposed forms: patches by strided
slices + one batched product per member) against the plain Conv2D paths and against per-member Keras.

1. The same plain ``Conv2D(32, 3, padding="same")`` on ``21x21x32`` inputs three ways: the C++ direct
   population convolution (default), ``extract_patches`` im2col (``use_op=False``), and the general
   convolution forced on that layer (identical math) -- what the slicing im2col costs.
2. ``Conv2DTranspose(32, 3, strides=2, padding="same")`` and a dilated ``Conv2D(32, 3, dilation_rate=2)``
   as populations against ``P`` pre-built Keras models called one by one.

Median of ``--repeats`` timed calls after two warm-up calls (the first call's time, tracing included, is
reported apart).  Usage: ``PYTHONPATH=$PWD python benchmarks/bench_nn_conv_forms.py [--popsize 64]``
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import numpy as np
import tensorflow as tf

from tfevo import nn

L = keras.layers


def template(layer, shape=(21, 21, 32)):
    return keras.Sequential([keras.Input(shape), layer, L.GlobalAveragePooling2D(), L.Dense(2)])


def timed(fn, repeats):
    t0 = time.perf_counter()
    fn()
    first = time.perf_counter() - t0
    fn()
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return first, float(np.median(ts))


def force_general(pm):
    for step in pm._steps:
        if type(step.layer) is L.Conv2D:
            step.tr.general = True
            step.tr.forward_flat = None
    return pm


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--popsize", type=int, default=64)
    ap.add_argument("--batches", type=int, nargs="*", default=[1, 16])
    ap.add_argument("--repeats", type=int, default=10)
    args = ap.parse_args(argv)
    P = args.popsize
    rng = np.random.default_rng(0)
    print(f"P={P}; median of {args.repeats} after warm-up, ms (first call incl. tracing in brackets)")
    plain = template(L.Conv2D(32, 3, padding="same"))
    for B in args.batches:
        x = rng.standard_normal((P, B, 21, 21, 32)).astype(np.float32)
        for name, pm in [("C++ direct (default)", nn.PopulationModel(plain)),
                         ("im2col extract_patches (use_op=False)", nn.PopulationModel(plain, use_op=False)),
                         ("general slices (forced)", force_general(nn.PopulationModel(plain)))]:
            params = pm.init_params(P, 0)
            first, med = timed(lambda: pm(params, x).numpy(), args.repeats)
            print(f"plain Conv2D B={B:3d} {name:40s} {med * 1e3:9.2f} ({first * 1e3:.0f})")
    for label, layer in [("Conv2DTranspose s2", L.Conv2DTranspose(32, 3, strides=2, padding="same")),
                         ("Conv2D dilated 2", L.Conv2D(32, 3, dilation_rate=2, padding="same"))]:
        tpl = template(layer)
        pm = nn.PopulationModel(tpl)
        params = pm.init_params(P, 0)
        models = [pm.to_keras(params[p]) for p in range(P)]
        for B in args.batches:
            x = rng.standard_normal((P, B, 21, 21, 32)).astype(np.float32)
            first, med = timed(lambda: pm(params, x).numpy(), args.repeats)
            kfirst, kmed = timed(lambda: [m(x[p]).numpy() for p, m in enumerate(models)], max(3, args.repeats // 3))
            print(f"{label:18s} B={B:3d} population {med * 1e3:9.2f} ({first * 1e3:.0f})   "
                  f"{P} Keras models {kmed * 1e3:9.2f} ({kfirst * 1e3:.0f})   ratio {kmed / med:.1f}x")


if __name__ == "__main__":
    main()
