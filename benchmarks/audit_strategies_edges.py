"""Audit: edge cases of every registered flat-vector strategy, as an evosax / pycma user meets them.

For each algorithm in the registry: popsize 1, 2, 3, 5 (two ask/tell rounds when accepted),
num_dims 1 with the default popsize, fitness given as a Python list, float64 NumPy, a tf tensor,
``[P, 1]`` (tf and NumPy) and int64, a first generation where every member failed (all NaN), seeds
of several types and values, and sizes that are not integers.  Prints one line per case: ``ok``
with what came out, or the error type and message.

Usage: ``PYTHONPATH=. python benchmarks/audit_strategies_edges.py``
"""

import warnings

import numpy as np
import tensorflow as tf

from tfevo import registry
from tfevo.core import Algorithm


def _fit(a, x):
    p = a.decode(x) if x.dtype == tf.int32 else x
    return -tf.reduce_sum(tf.square(p - 0.5), axis=1)


def _case(label, fn):
    try:
        r = fn()
        return f"{label}: ok {r if r is not None else ''}"
    except Exception as e:  # every outcome is reported, errors included
        return f"{label}: {type(e).__name__}: {str(e)[:150]}"


def _rounds(a, n):
    for _ in range(n):
        x = a.ask()
        a.tell(x, _fit(a, x))
    return a


def _fitness_forms(cls):
    a = cls(num_dims=3, popsize=8, seed=0)
    out = []
    for kind in ("list", "np64", "tf", "tf_P1", "np_P1", "int64"):
        x = a.ask()
        f = _fit(a, x).numpy()
        value = {"list": list(map(float, f)), "np64": f.astype(np.float64), "tf": tf.constant(f),
                 "tf_P1": tf.constant(f)[:, None], "np_P1": f[:, None], "int64": f.astype(np.int64)}[kind]
        try:
            a.tell(x, value)
            out.append(f"{kind}=ok")
        except Exception as e:
            out.append(f"{kind}={type(e).__name__}({str(e)[:70]})")
    return " ".join(out)


def _all_nan(cls):
    a = cls(num_dims=3, popsize=8, seed=0)
    a.tell(a.ask(), np.full(8, np.nan))
    return f"best={a.best[0].numpy()} {float(a.best[1])}"


def main():
    warnings.simplefilter("ignore")
    for name in registry.names("strategy"):
        cls = registry.get("strategy", name)
        if not (isinstance(cls, type) and issubclass(cls, Algorithm)):
            continue
        out = []
        for p in (1, 2, 3, 5):
            out.append(_case(f"popsize={p}", lambda p=p: (
                lambda a: f"P={a.popsize} best={float(a.best[1]):.3g}")(_rounds(cls(num_dims=3, popsize=p, seed=0), 2))))
        out.append(_case("num_dims=1", lambda: (
            lambda a: f"P={a.popsize} mean={a.mean.numpy()} best={float(a.best[1]):.3g}")(_rounds(cls(num_dims=1, seed=0), 3))))
        out.append(_case("fitness forms", lambda: _fitness_forms(cls)))
        out.append(_case("all-NaN first generation", lambda: _all_nan(cls)))
        for s in (np.int64(3), -1, 2**31, 2**40, 1.0, True, "1"):
            out.append(_case(f"seed={s!r}", lambda s=s: cls(num_dims=3, popsize=8, seed=s).seeds.seed.numpy()))
        for kw in ({"popsize": 8.5}, {"popsize": "8"}, {"num_dims": 3.5}, {"popsize": 8.0}, {"popsize": np.int32(8)},
                   {"num_dims": 0}):
            out.append(_case(f"{kw}", lambda kw=kw: (lambda a: f"D={a.num_dims} P={a.popsize}")(
                cls(**{"num_dims": 3, **kw}))))
        print("==", name)
        print("\n".join("   " + o for o in out), flush=True)


if __name__ == "__main__":
    main()
