"""Audit: one tell() of OpenAI-ES, PGPE, ARS and SNES against evosax on the same samples and fitness.

tfevo asks a float64 population; evosax (JAX x64) is given the same mean and
std, that population and the negated fitness (evosax minimizes), and the new
means (and stds) are compared.  SGD on both sides (evosax's default optimizers
are optax transformations; SGD makes the step the gradient itself).  Cases:
fitness without ties, and a generation whose members all tie (evosax's
centered ranks average ties; its NES weights truncate the average rank).

Usage: python benchmarks/audit_strategies_evosax.py
"""

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402
from evosax.algorithms import ARS as EARS  # noqa: E402
from evosax.algorithms import PGPE as EPGPE  # noqa: E402
from evosax.algorithms import SNES as ESNES  # noqa: E402
from evosax.algorithms import Open_ES as EOpenES  # noqa: E402

import tfevo.strategies as S  # noqa: E402


def rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300))


def evosax_step(algo, params, mean, std, x, f):
    key = jax.random.key(0)
    state = algo.init(key, jnp.asarray(mean), params)
    state = state.replace(std=jnp.asarray(std, jnp.float64))
    state, _ = algo.tell(key, jnp.asarray(x), jnp.asarray(-f), state, params)
    return np.asarray(state.mean), np.asarray(state.std)


def fitness(x, tie):
    return np.zeros(len(x)) if tie else -np.sum((x - 0.3) ** 2, axis=1)


def main():
    d, p, lr = 6, 10, 0.05
    print("case | tie | max rel diff mean | max rel diff std")
    for tie in (False, True):
        c0 = np.linspace(-1, 1, d)
        # OpenAI-ES
        es = S.OpenES(d, p, sigma=0.3, learning_rate=lr, optimizer="sgd", weight_decay=0.0, init_params=c0,
                      seed=1, dtype="float64")
        x = es.ask().numpy()
        f = fitness(x, tie)
        ea = EOpenES(p, jnp.zeros(d), optimizer=optax.sgd(lr), std_schedule=optax.constant_schedule(0.3))
        m, _ = evosax_step(ea, ea.default_params, c0, 0.3, x, f)
        es.tell(x, f)
        print(f"OpenAI-ES | {tie} | {rel(es.mean.numpy(), m):.2e} | -")
        # PGPE (evosax: std_lr 0.1, std_max_change 0.2)
        s0 = np.linspace(0.2, 1.0, d)
        pg = S.PGPE(d, p, learning_rate=lr, sigma=s0, sigma_learning_rate=0.1, sigma_max_change=0.2,
                    optimizer="sgd", init_params=c0, seed=2, dtype="float64")
        x = pg.ask().numpy()
        f = fitness(x, tie)
        ea = EPGPE(p, jnp.zeros(d), optimizer=optax.sgd(lr))
        m, s = evosax_step(ea, ea.default_params, c0, s0, x, f)
        pg.tell(x, f)
        print(f"PGPE | {tie} | {rel(pg.mean.numpy(), m):.2e} | {rel(pg.sigma.numpy(), s):.2e}")
        # ARS: evosax keeps the top half of the directions (elite_ratio 0.5) and raw fitness
        n = p // 2
        ar = S.ARS(d, p, learning_rate=lr, sigma=0.3, num_top=max(1, n // 2), init_params=c0, seed=3,
                   dtype="float64")
        x = ar.ask().numpy()
        f = fitness(x, tie)
        ea = EARS(p, jnp.zeros(d), optimizer=optax.sgd(lr), std_schedule=optax.constant_schedule(0.3))
        m, _ = evosax_step(ea, ea.default_params, c0, 0.3, x, f)
        ar.tell(x, f)
        print(f"ARS (b = {max(1, n // 2)}) | {tie} | {rel(ar.mean.numpy(), m):.2e} | -")
        # SNES (evosax: SGD with learning rate 1 on the mean)
        sn = S.SNES(d, p, sigma=s0, init_params=c0, seed=4, dtype="float64")
        x = sn.ask().numpy()
        f = fitness(x, tie)
        ea = ESNES(p, jnp.zeros(d))
        m, s = evosax_step(ea, ea.default_params, c0, s0, x, f)
        sn.tell(x, f)
        print(f"SNES | {tie} | {rel(sn.mean.numpy(), m):.2e} | {rel(sn.sigma.numpy(), s):.2e}")


if __name__ == "__main__":
    main()
