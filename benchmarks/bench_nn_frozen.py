"""Forward cost of a template with a frozen encoder against the same template fully trainable.

Same process, alternating the two models rep by rep, so load drifts hit both alike; the number to
read is the ratio of medians (frozen / trainable).  Template: Dense 64->256 tanh -> 256 tanh (the
encoder, frozen or not) -> Dense 4 (the evolved head).

    python benchmarks/bench_nn_frozen.py --reps 200
"""

import argparse
import json

import keras
import numpy as np
import tensorflow as tf
import time

from tfevo import nn

L = keras.layers


def template(frozen):
    enc = keras.Sequential([keras.Input((64,)), L.Dense(256, activation="tanh"), L.Dense(256, activation="tanh")],
                           name="encoder")
    i = keras.Input((64,))
    model = keras.Model(i, L.Dense(4, name="head")(enc(i)))
    enc.trainable = not frozen
    return model


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=200)
    args = ap.parse_args()
    print("| P | B | D frozen / trainable | frozen ms | trainable ms | frozen/trainable |")
    print("|---|---|---|---|---|---|")
    for P, B in [(64, 1), (256, 1), (256, 32)]:
        pms = [nn.PopulationModel(template(f)) for f in (True, False)]
        params = [pm.init_params(P, seed=0) for pm in pms]
        x = tf.random.uniform((P, B, 64))
        for pm, p in zip(pms, params):
            np.asarray(pm(p, x))
        ts = [[], []]
        for _ in range(args.reps):
            for k in (0, 1):
                t0 = time.perf_counter()
                np.asarray(pms[k](params[k], x))
                ts[k].append(time.perf_counter() - t0)
        f, t = (1e3 * float(np.median(v)) for v in ts)
        print(f"| {P} | {B} | {pms[0].num_params} / {pms[1].num_params} | {f:.3f} | {t:.3f} | {f / t:.2f} |",
              flush=True)
    print(json.dumps({"done": True}))


if __name__ == "__main__":
    main()
