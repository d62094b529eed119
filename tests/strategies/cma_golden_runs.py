"""Short CMA-family runs recorded bit for bit (the golden file of test_cma_golden.py).

``python tests/strategies/cma_golden_runs.py OUT.npz`` records every run below:
each generation's asked population, the final state variables and the
checkpoint's variable names.  tests/strategies/data/cma_golden.npz is written
by this script (rerun it only for a deliberate change of trajectory or state);
the test replays the runs and asserts equality.
"""

from __future__ import annotations

import math
import os
import sys
import tempfile

import numpy as np
import tensorflow as tf


def sphere(x):
    return tf.reduce_sum(tf.square(x - 0.3), axis=1)


def ellipsoid(x):
    n = x.shape[1]
    w = tf.constant(np.power(1e6, np.arange(n) / max(n - 1, 1)), x.dtype)
    return tf.reduce_sum(w * tf.square(x), axis=1)


def rastrigin(x):
    return 10.0 * x.shape[1] + tf.reduce_sum(tf.square(x) - 10.0 * tf.cos(2.0 * math.pi * x), axis=1)


FUNCTIONS = {"sphere": sphere, "ellipsoid": ellipsoid, "rastrigin": rastrigin}


def _runs():
    """(name, factory, function, generations, tweak) of every recorded run; ``tweak(g, x)``
    returns the population told at generation ``g`` (the asked one, or a changed copy)."""
    from tfevo.strategies import BIPOP, CMAES, IPOP, LMMAES, CholeskyCMAES, SepCMAES

    def nan_row(g, x):  # a non-finite member every 4th generation
        return tf.tensor_scatter_nd_update(x, [[1]], [tf.fill([x.shape[1]], tf.constant(np.nan, x.dtype))]) \
            if g % 4 == 3 else x

    def shuffled(g, x):  # rows re-ordered / perturbed on odd generations (the whitening solve path)
        return tf.reverse(x, [0]) * 1.0001 if g % 2 else x

    runs = []
    for dt in ("float64", "float32"):
        runs += [
            (f"cma_{dt}_sphere", lambda dt=dt: CMAES(8, sigma=0.5, seed=1, dtype=dt), "sphere", 14, None),
            (f"cma_{dt}_ellipsoid_gap3", lambda dt=dt: CMAES(6, sigma=1.0, seed=2, dtype=dt, eigen_gap=3),
             "ellipsoid", 14, nan_row),
            (f"cma_{dt}_rastrigin_passive_bounds", lambda dt=dt: CMAES(
                5, popsize=12, sigma=2.0, seed=3, dtype=dt, active=False, bounds=(-3, 3)), "rastrigin", 10, None),
            (f"chol_{dt}_sphere", lambda dt=dt: CholeskyCMAES(8, sigma=0.5, seed=1, dtype=dt), "sphere", 14, None),
            (f"chol_{dt}_ellipsoid_gap3", lambda dt=dt: CholeskyCMAES(6, sigma=1.0, seed=2, dtype=dt, eigen_gap=3),
             "ellipsoid", 14, nan_row),
            (f"chol_{dt}_ellipsoid_gap3_solve", lambda dt=dt: CholeskyCMAES(
                6, sigma=1.0, seed=4, dtype=dt, eigen_gap=3), "ellipsoid", 12, shuffled),
            (f"chol_{dt}_rastrigin_bounds", lambda dt=dt: CholeskyCMAES(
                5, popsize=12, sigma=2.0, seed=3, dtype=dt, bounds=(-3, 3)), "rastrigin", 10, None),
            (f"sep_{dt}_ellipsoid", lambda dt=dt: SepCMAES(10, sigma=1.0, seed=5, dtype=dt), "ellipsoid", 14, nan_row),
            (f"sep_{dt}_rastrigin_bounds", lambda dt=dt: SepCMAES(
                5, popsize=10, sigma=2.0, seed=6, dtype=dt, bounds=(-3, 3)), "rastrigin", 10, shuffled),
            (f"lm_{dt}_ellipsoid", lambda dt=dt: LMMAES(12, sigma=1.0, seed=7, dtype=dt), "ellipsoid", 14, nan_row),
            (f"ipop_{dt}_sphere", lambda dt=dt: IPOP(4, sigma=1.0, seed=8, dtype=dt, init_range=(-2, 2),
                                                     tolx=0.2, max_restarts=3), "sphere", 30, None),
            (f"bipop_{dt}_rastrigin", lambda dt=dt: BIPOP(4, sigma=2.0, seed=9, dtype=dt, init_range=(-4, 4),
                                                          tolx=0.3, max_restarts=3), "rastrigin", 40, None),
            (f"ipop_sep_{dt}_sphere", lambda dt=dt: IPOP(4, sigma=1.0, seed=11, dtype=dt, strategy=SepCMAES,
                                                         tolx=0.2, max_restarts=2), "sphere", 25, None),
            (f"ipop_chol_{dt}_sphere", lambda dt=dt: IPOP(4, sigma=1.0, seed=10, dtype=dt, strategy=CholeskyCMAES,
                                                          tolx=0.2, max_restarts=2), "sphere", 25, None),
        ]
    return runs


def _state(es):
    # (tf.Module lists variables by attribute name: the keys also pin the attribute names)
    return {f"{i:02d}_{v.name}": v.numpy() for i, v in enumerate(es.variables)}


def _checkpoint_keys(es):
    with tempfile.TemporaryDirectory() as d:
        path = tf.train.Checkpoint(es=es).write(os.path.join(d, "ckpt"))
        return sorted(name for name, _ in tf.train.list_variables(path) if "OBJECT_GRAPH" not in name)


def record_run(name, make, fn_name, gens, tweak):
    """The arrays of one run (key prefix ``name/``)."""
    es = make()
    fn = FUNCTIONS[fn_name]
    out = {}
    for g in range(gens):
        x = es.ask()
        out[f"{name}/x{g}"] = x.numpy()
        told = tweak(g, x) if tweak is not None else x
        f = -fn(tf.cast(told, tf.float64))
        es.tell(told, tf.cast(f, tf.float32))
    for k, v in _state(es).items():
        out[f"{name}/state/{k}"] = v
    out[f"{name}/popsize"] = np.array(es.popsize)
    out[f"{name}/ckpt_keys"] = np.array(_checkpoint_keys(es))
    return out


def record_all(names=None):
    out = {}
    for run in _runs():
        if names is None or run[0] in names:
            out.update(record_run(*run))
    return out


if __name__ == "__main__":
    np.savez_compressed(sys.argv[1], **record_all())
