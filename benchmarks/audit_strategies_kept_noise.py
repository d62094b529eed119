"""Audit: float32 tell() of the Gaussian strategies far from the origin, against a float64 reference.

For OpenAI-ES, PGPE, ARS and SNES at ``|theta| ~ 1e2 .. 1e4`` and ``sigma ~ 1e-2 .. 1e-3``:
one ``ask`` (float32), the noise it drew regenerated from its seed key with the pure-TensorFlow
reference sampler (the same stream as the sampler op, to a few ulp), and the paper's step of the
centre computed in float64 NumPy from that noise and the same fitness.  tfevo's float32 step is
read before it is added to the centre (where ``ulp(theta)`` would round it): OpenAI-ES and PGPE
run plain SGD (learning rate 1, momentum 0, no weight decay) and the step is the SGD velocity;
ARS and SNES add their step directly, so their learning rate is set so large (``100 |theta|``
for the step) that the rounding of the new centre is ~1e-9 of the step.  Prints the largest
error of the float32 step relative to the largest coordinate of the reference step.  Float32 rounding of the
noise itself gives ~1e-7; recovering the noise as ``(x - theta) / sigma`` from a float32 population
cannot do better than ``ulp(theta) / sigma`` relative.

Also checks that a population with two rows swapped is refused (``AskTellError``) by each.

Usage: ``PYTHONPATH=. python benchmarks/audit_strategies_kept_noise.py``
"""

import warnings

import numpy as np
import tensorflow as tf

from tfevo.core import AskTellError
from tfevo.strategies import ARS, PGPE, SNES, OpenES
from tfevo.strategies.shaping import _normal_reference, centered_rank, utility_weights

D, P = 50, 64
LR_SCALE = 100.0  # ARS / SNES: steps ~100 |theta|, far above ulp(theta)


def _make(name, theta, sigma, mag):
    if name == "openai_es":
        return OpenES(num_dims=D, popsize=P, sigma=sigma, learning_rate=1.0, optimizer="sgd", weight_decay=0.0,
                      init_params=theta, seed=1)
    if name == "pgpe":
        return PGPE(num_dims=D, popsize=P, sigma=sigma, learning_rate=1.0, optimizer="sgd", init_params=theta, seed=1)
    if name == "ars":
        return ARS(num_dims=D, popsize=P, sigma=sigma, learning_rate=LR_SCALE * mag, init_params=theta, seed=1)
    return SNES(num_dims=D, popsize=P, sigma=sigma, learning_rate=LR_SCALE * mag / sigma, init_params=theta, seed=1)


def _reference_step(name, es, key, f, sigma):
    """The paper's step of the centre in float64 from the noise drawn with ``key``."""
    n = P // 2 if name != "snes" else P
    e = _normal_reference([n, D], key, dtype=tf.float32).numpy().astype(np.float64)
    eps = np.concatenate([e, -e]) if name != "snes" else e
    if name == "openai_es":  # Salimans et al.: g = sum_i w_i eps_i / (P sigma), centered ranks
        w = centered_rank(tf.constant(f, tf.float64), tf.float64).numpy()
        return w @ eps / (P * sigma)
    if name == "pgpe":  # Sehnke et al.: mean over pairs of eps_k (f+ - f-) / 2, eps_k = sigma e_k
        w = centered_rank(tf.constant(f, tf.float64), tf.float64).numpy()
        h = P // 2
        return (sigma * e).T @ (0.5 * (w[:h] - w[h:])) / h
    if name == "ars":  # Mania et al. V1: alpha / (N sigma_R) sum_k (r+ - r-) delta_k
        h = P // 2
        r = f.astype(np.float64)
        return es.learning_rate * e.T @ (r[:h] - r[h:]) / h / np.std(r)
    u = utility_weights(tf.constant(f, tf.float64), es.utilities.numpy().astype(np.float64)).numpy()
    return es.learning_rate * sigma * (u @ eps)  # SNES: eta_mu sigma sum_i u_i z_i


def main():
    warnings.simplefilter("ignore")
    rng = np.random.default_rng(0)
    print(f"D = {D}, P = {P}; error of the float32 step relative to max|reference step|")
    print(f"{'strategy':10s} {'|theta|':>8s} {'sigma':>7s} {'rel. error':>11s} {'ulp(theta)/sigma':>17s}")
    for name in ("openai_es", "pgpe", "ars", "snes"):
        for mag in (1e2, 1e3, 1e4):
            for sigma in (1e-2, 1e-3):
                theta = (mag * np.sign(rng.standard_normal(D)) * (1 + rng.random(D))).astype(np.float32)
                es = _make(name, theta, sigma, mag)
                x = es.ask()
                key = es.seeds.last()
                f = rng.standard_normal(P).astype(np.float32)
                ref = _reference_step(name, es, key, f, sigma)
                c0 = es.center.numpy().astype(np.float64)
                es.tell(x, f)
                if name in ("openai_es", "pgpe"):
                    got = es.optimizer.velocity.numpy().astype(np.float64)  # the step, before theta + step
                else:
                    got = es.center.numpy().astype(np.float64) - c0
                err = np.max(np.abs(got - ref)) / np.max(np.abs(ref))
                print(f"{name:10s} {mag:8.0e} {sigma:7.0e} {err:11.1e} {np.spacing(np.float32(mag)) / sigma:17.1e}")
        es = _make(name, np.zeros(D, np.float32), 0.1, 1.0)
        x = es.ask().numpy()
        swapped = x.copy()
        swapped[[0, 1]] = swapped[[1, 0]]
        f = rng.standard_normal(P).astype(np.float32)
        try:
            es.tell(swapped, f[[1, 0] + list(range(2, P))])
            print(f"{name}: a population with rows 0 and 1 swapped was ACCEPTED")
        except AskTellError:
            print(f"{name}: a population with rows 0 and 1 swapped is refused (AskTellError)")


if __name__ == "__main__":
    main()
