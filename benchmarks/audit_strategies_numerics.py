"""Audit: one tell() of every non-CMA flat-vector strategy against a NumPy reference of its paper.

For each strategy (float64 state), ``--gens`` generations are run on a fixed
fitness; before every ``tell`` the reference computes the update from the
state the strategy held and the population it asked (written here from the
papers: Salimans et al. 2017, Schaul et al. 2011, Wierstra et al. 2014,
Sehnke et al. 2010 / Toklu et al. 2020, Mania et al. 2018, Such et al. 2017,
Storn & Price 1997, Kennedy & Eberhart 1995 / Clerc & Kennedy 2002), and
the largest relative difference of the new state is printed.  Random draws
made inside ``tell`` (GA children, PSO's r1 r2) are reproduced from the
strategy's seed stream with TensorFlow's stateless ops; DE's partners are
recovered by brute force from the trial vectors.

Also: same seed -> bit-identical run, ``best`` is the best ever told (the GA: ``best_single``, and
``best`` is its elite with its mean), and
D = 1e5 runs (memory checked by the peak RSS).

Usage: python benchmarks/audit_strategies_numerics.py [--gens 6]
"""

from __future__ import annotations

import argparse
import itertools
import resource
import sys

import numpy as np
import tensorflow as tf

import tfevo.strategies as S

F64 = "float64"


def rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300))


def fitness_of(x, rng):
    # a fixed function plus noise: no ties
    f = -np.sum((x - 0.3) ** 2, axis=1) + 0.01 * rng.standard_normal(len(x))
    return f


# -- references --------------------------------------------------------------


def centered_ranks(f):
    r = np.empty(len(f))
    r[np.argsort(f, kind="stable")] = np.arange(len(f))
    return r / (len(f) - 1) - 0.5


def z_scores(f):
    # tfevo's documented z-score: statistics of f / max|f| (its eps is relative to max|f|;
    # evosax's jax.nn.standardize divides by sqrt(var + 1e-8): a 1e-8-relative difference)
    g = f / np.max(np.abs(f))
    return (g - g.mean()) / (g.std() + 1e-8)


def nes_util(p):
    k = np.arange(1, p + 1)
    u = np.maximum(0, np.log(p / 2 + 1) - np.log(k))
    return u / u.sum() - 1 / p


def by_rank(f, table):
    """table[0] goes to the best member (no ties in these fitness values)."""
    out = np.empty(len(f))
    out[np.argsort(-f)] = table
    return out


class AdamRef:
    def __init__(self, lr, d, b1=0.9, b2=0.999, eps=1e-8):
        self.lr, self.b1, self.b2, self.eps = lr, b1, b2, eps
        self.m, self.v, self.t = np.zeros(d), np.zeros(d), 0

    def step(self, g):
        self.t += 1
        self.m = self.b1 * self.m + (1 - self.b1) * g
        self.v = self.b2 * self.v + (1 - self.b2) * g * g
        a = self.lr * np.sqrt(1 - self.b2 ** self.t) / (1 - self.b1 ** self.t)
        return a * self.m / (np.sqrt(self.v) + self.eps)


class SGDRef:
    def __init__(self, lr, d, momentum=0.0):
        self.lr, self.mom, self.v = lr, momentum, np.zeros(d)

    def step(self, g):
        self.v = self.mom * self.v + self.lr * g
        return self.v


class ClipUpRef:
    def __init__(self, lr, d, max_speed=None, momentum=0.9):
        self.lr, self.mom, self.v = lr, momentum, np.zeros(d)
        self.max_speed = 2 * lr if max_speed is None else max_speed

    def step(self, g):
        n = np.linalg.norm(g)
        self.v = self.mom * self.v + self.lr * (g / n if n > 0 else g)
        vn = np.linalg.norm(self.v)
        if vn > self.max_speed:
            self.v = self.v * self.max_speed / vn
        return self.v


# -- the strategy cases --------------------------------------------------------


def run_openes(gens, rng, shaping="centered_rank", opt="adam", mirrored=True, wd=0.005, center=None,
               dtype=F64, d=7, p=10):
    c0 = rng.standard_normal(d) if center is None else center
    es = S.OpenES(d, p, sigma=0.3, learning_rate=0.05, optimizer=opt, weight_decay=wd, sigma_decay=0.9,
                  sigma_limit=0.2, mirrored=mirrored, fitness_shaping=shaping, init_params=c0, seed=1,
                  dtype=dtype)
    ref = {"adam": AdamRef, "sgd": SGDRef, "clipup": ClipUpRef}[opt](0.05, d)
    theta, sigma, worst = np.array(c0, np.float64), 0.3, 0.0
    for _ in range(gens):
        x = es.ask().numpy().astype(np.float64)
        f = fitness_of(x, rng)
        eps = (x - theta) / sigma
        if mirrored:
            worst = max(worst, rel(eps[: p // 2], -eps[p // 2:]))
        w = {"centered_rank": centered_ranks, "z_score": z_scores, "raw": lambda v: v}[shaping](f)
        g = w @ eps / (p * sigma) - wd * theta
        theta = theta + ref.step(g)
        sigma = max(sigma * 0.9, 0.2)
        es.tell(x, f)
        worst = max(worst, rel(es.mean.numpy(), theta), rel(es.sigma.numpy(), sigma))
        theta = es.mean.numpy().astype(np.float64)  # re-sync (the next step is checked alone)
    return worst


def run_snes(gens, rng, mirrored=False, d=6, p=10):
    s0 = rng.uniform(0.5, 2, d)
    es = S.SNES(d, p, sigma=s0, mirrored=mirrored, init_params=np.ones(d), seed=2, dtype=F64)
    mu, sig = np.ones(d), s0.copy()
    eta_s = (3 + np.log(d)) / (5 * np.sqrt(d))
    util, worst = nes_util(p), 0.0
    for _ in range(gens):
        x = es.ask().numpy()
        f = fitness_of(x, rng)
        z = (x - mu) / sig
        u = by_rank(f, util)
        mu_new = mu + 1.0 * sig * (u @ z)
        sig_new = sig * np.exp(eta_s / 2 * (u @ (z * z - 1)))
        es.tell(x, f)
        worst = max(worst, rel(es.mean.numpy(), mu_new), rel(es.sigma.numpy(), sig_new))
        mu, sig = es.mean.numpy(), es.sigma.numpy()
    return worst


def run_xnes(gens, rng, d=4, p=8):
    from scipy.linalg import expm

    es = S.XNES(d, p, sigma=0.7, init_params=np.full(d, 0.5), seed=3, dtype=F64)
    eta = 3 * (3 + np.log(d)) / (5 * d * np.sqrt(d))
    util, worst = nes_util(p), 0.0
    for _ in range(gens):
        mu, sig, B = es.mean.numpy(), float(es.sigma.numpy()), es.B.numpy()
        x = es.ask().numpy()
        f = fitness_of(x, rng)
        z = np.linalg.solve(sig * B, (x - mu).T).T
        u = by_rank(f, util)
        gd = u @ z
        gm = sum(u[k] * (np.outer(z[k], z[k]) - np.eye(d)) for k in range(p))
        gs = np.trace(gm) / d
        gb = gm - gs * np.eye(d)
        mu_new = mu + sig * B @ gd
        sig_new = sig * np.exp(eta / 2 * gs)
        B_new = B @ expm(eta / 2 * gb)
        es.tell(x, f)
        worst = max(worst, rel(es.mean.numpy(), mu_new), rel(es.sigma.numpy(), sig_new), rel(es.B.numpy(), B_new))
    return worst


def run_pgpe(gens, rng, opt="clipup", shaping="centered_rank", d=5, p=8):
    s0 = rng.uniform(0.2, 1.0, d)
    es = S.PGPE(d, p, learning_rate=0.1, sigma=s0, sigma_learning_rate=0.3, sigma_max_change=0.2,
                optimizer=opt, fitness_shaping=shaping, init_params=np.full(d, -0.2), seed=4, dtype=F64)
    ref = {"adam": AdamRef, "sgd": SGDRef, "clipup": ClipUpRef}[opt](0.1, d)
    n, worst = p // 2, 0.0
    for _ in range(gens):
        mu, sig = es.mean.numpy(), es.sigma.numpy()
        x = es.ask().numpy()
        f = fitness_of(x, rng)
        w = {"centered_rank": centered_ranks, "z_score": z_scores, "raw": lambda v: v}[shaping](f)
        eps = x[:n] - mu
        worst = max(worst, rel(x[n:] - mu, -eps))
        fp, fm = w[:n], w[n:]
        g_mu = np.mean(eps * ((fp - fm) / 2)[:, None], axis=0)
        g_s = np.mean((((fp + fm) / 2) - w.mean())[:, None] * (eps ** 2 - sig ** 2) / sig, axis=0)
        mu_new = mu + ref.step(g_mu)
        sig_new = np.clip(sig + 0.3 * g_s, 0.8 * sig, 1.2 * sig)
        es.tell(x, f)
        worst = max(worst, rel(es.mean.numpy(), mu_new), rel(es.sigma.numpy(), sig_new))
    return worst


def run_ars(gens, rng, b=3, normalize=True, d=5, p=12):
    es = S.ARS(d, p, learning_rate=0.2, sigma=0.1, num_top=b, normalize_rewards=normalize,
               init_params=np.full(d, 1.0), seed=5, dtype=F64)
    n, worst = p // 2, 0.0
    for _ in range(gens):
        th = es.mean.numpy()
        x = es.ask().numpy()
        f = fitness_of(x, rng)
        delta = (x[:n] - th) / 0.1
        rp, rm = f[:n], f[n:]
        top = np.argsort(-np.maximum(rp, rm), kind="stable")[:b]
        sr = np.std(np.concatenate([rp[top], rm[top]])) if normalize else 1.0
        th_new = th + 0.2 / (b * sr) * ((rp[top] - rm[top]) @ delta[top])
        es.tell(x, f)
        worst = max(worst, rel(es.mean.numpy(), th_new))
    return worst


def run_ga(gens, rng, d=4, p=12, t=4, e=3):
    ga = S.GaussianGA(d, p, truncation=t, sigma=0.05, num_elite_candidates=e, init_sigma=1.0, seed=6, dtype=F64)
    total, count, worst = np.zeros(p), np.zeros(p), 0.0
    for g in range(gens):
        x = ga.ask().numpy()
        f = np.round(fitness_of(x, rng), 6)
        total, count = total + f, count + 1
        score = total / count
        carried = np.arange(p) <= e if g > 0 else np.ones(p, bool)
        elite = int(np.argmax(np.where(carried, score, -np.inf)))
        others = score.copy()
        others[elite] = -np.inf
        keep = [elite] + list(np.argsort(-others, kind="stable")[:e])
        parents = np.argsort(-score, kind="stable")[:t]
        ga.tell(x, f)
        s_choice, s_noise = tf.unstack(tf.random.experimental.stateless_split(ga.seeds.last(), 2))
        choice = tf.random.stateless_uniform([p - 1 - e], seed=s_choice, minval=0, maxval=t, dtype=tf.int32).numpy()
        new = ga.population.numpy()
        # children: the parent drawn (parents in the order of their mean fitness, best first) plus N(0, sigma^2)
        kids = new[1 + e:]
        noise = (kids - x[parents[choice]]) / 0.05
        noise_ok = np.max(np.abs(noise)) < 6 and 0.6 < np.std(noise) < 1.4
        worst = max(worst, rel(new[: 1 + e], x[keep]), 0.0 if noise_ok else 1.0)
        total = np.concatenate([total[keep], np.zeros(p - 1 - e)])
        count = np.concatenate([count[keep], np.zeros(p - 1 - e)])
        worst = max(worst, rel(ga.eval_sum.numpy(), total), rel(ga.eval_count.numpy(), count))
    return worst


def run_de(gens, rng, variant="rand/1/bin", d=4, p=7, F=0.7):
    de = S.DifferentialEvolution(d, p, variant=variant, F=F, CR=1.0, init_params=np.zeros(d), init_sigma=1.0,
                                 seed=7, dtype=F64)
    worst = 0.0
    x = de.ask().numpy()
    f = fitness_of(x, rng)
    de.tell(x, f)
    for _ in range(gens):
        pop, pf = de.population.numpy(), de.fitness.numpy()
        trial = de.ask().numpy()
        for i in range(p):
            if variant == "rand/1/bin":
                cands = [(a, b, c) for a, b, c in itertools.permutations(range(p), 3) if i not in (a, b, c)
                         and np.allclose(trial[i], pop[a] + F * (pop[b] - pop[c]), rtol=1e-13, atol=1e-13)]
            else:
                best = int(np.argmax(pf))
                cands = [(a, b) for a, b in itertools.permutations(range(p), 2) if i not in (a, b)
                         and np.allclose(trial[i], pop[best] + F * (pop[a] - pop[b]), rtol=1e-13, atol=1e-13)]
            worst = max(worst, 0.0 if cands else 1.0)
        f = fitness_of(trial, rng)
        de.tell(trial, f)
        acc = f >= pf
        worst = max(worst, rel(de.population.numpy(), np.where(acc[:, None], trial, pop)))
    return worst


def run_de_cr(rng, CR=0.3, d=2000, p=6):
    de = S.DifferentialEvolution(d, p, CR=CR, init_params=np.zeros(d), seed=8, dtype=F64)
    x = de.ask().numpy()
    de.tell(x, fitness_of(x, rng))
    trial = de.ask().numpy()
    frac = float(np.mean(trial != x))
    # expected: CR + (1 - CR) / d (j_rand) ; binomial sd
    exp = CR + (1 - CR) / d
    return abs(frac - exp) / np.sqrt(exp * (1 - exp) / (p * d)), bool(np.all((trial != x).sum(1) >= 1))


def run_pso(gens, rng, vmax=0.3, d=5, p=8, bounds=None):
    w, c1, c2 = 0.7298, 1.49618, 1.49618
    pso = S.PSO(d, p, max_velocity=vmax, bounds=bounds, init_params=np.zeros(d), init_sigma=1.0, seed=9, dtype=F64)
    pb, pbf, v, worst = None, None, np.zeros((p, d)), 0.0
    for g in range(gens):
        x = pso.ask().numpy()
        f = fitness_of(x, rng)
        if g == 0:
            pb, pbf = x.copy(), f.copy()
        else:
            imp = f > pbf
            pb[imp], pbf[imp] = x[imp], f[imp]
        gb = pb[np.argmax(pbf)]
        pso.tell(x, f)
        s1, s2 = tf.unstack(tf.random.experimental.stateless_split(pso.seeds.last(), 2))
        r1 = tf.random.stateless_uniform([p, d], seed=s1, dtype=tf.float64).numpy()
        r2 = tf.random.stateless_uniform([p, d], seed=s2, dtype=tf.float64).numpy()
        v = w * v + c1 * r1 * (pb - x) + c2 * r2 * (gb - x)
        if vmax is not None:
            v = np.clip(v, -vmax, vmax)
        pos = x + v
        if bounds is not None:
            out = (pos < bounds[0]) | (pos > bounds[1])
            pos = np.clip(pos, *bounds)
            v = np.where(out, 0.0, v)
        worst = max(worst, rel(pso.velocity.numpy(), v), rel(pso.position.numpy(), pos),
                    rel(pso.personal_best.numpy(), pb))
    return worst


# -- cross-cutting checks ---------------------------------------------------------

CASES = {
    "openai_es": lambda: S.OpenES(6, 8, dtype=F64, seed=3),
    "snes": lambda: S.SNES(6, 8, dtype=F64, seed=3),
    "xnes": lambda: S.XNES(6, 8, dtype=F64, seed=3),
    "pgpe": lambda: S.PGPE(6, 8, dtype=F64, seed=3),
    "ars": lambda: S.ARS(6, 8, num_top=2, dtype=F64, seed=3),
    "ga": lambda: S.GaussianGA(6, 12, truncation=4, num_elite_candidates=2, sigma=0.3, dtype=F64, seed=3),
    "de": lambda: S.DifferentialEvolution(6, 8, dtype=F64, seed=3),
    "pso": lambda: S.PSO(6, 8, dtype=F64, seed=3),
    "random_search": lambda: S.RandomSearch(6, 8, dtype=F64, seed=3),
}


def run_and_trace(make, gens=8):
    a = make()
    xs, best_seen = [], -np.inf
    best_ok = True
    for _ in range(gens):
        x = a.ask()
        f = -tf.reduce_sum(tf.square(x - 0.3), axis=1)
        best_seen = max(best_seen, float(tf.reduce_max(f)))
        a.tell(x, f)
        if hasattr(a, "best_single"):
            # the GA's best is its elite (row 0 of the next population) with its mean; the best ever told
            # is its best_single (the function is deterministic, so a mean equals each evaluation)
            bp, bf = a.best
            best_ok &= np.array_equal(bp.numpy(), a.population[0].numpy())
            best_ok &= float(bf) == float((a.eval_sum[0] / a.eval_count[0]).numpy())
            best_ok &= abs(-float(np.sum((bp.numpy() - 0.3) ** 2)) - float(bf)) <= 1e-12 * max(1, abs(float(bf)))
            bp, bf = a.best_single
        else:
            bp, bf = a.best
        best_ok &= float(bf) == best_seen and bp.dtype == tf.float64
        best_ok &= abs(-float(np.sum((bp.numpy() - 0.3) ** 2)) - float(bf)) <= 1e-12 * max(1, abs(float(bf)))
        xs.append(x.numpy())
    return np.stack(xs), best_ok, a.mean.dtype == tf.float64 and x.dtype == tf.float64


def large_d(name, make, d=100_000, gens=2):
    a = make(d)
    for _ in range(gens):
        x = a.ask()
        a.tell(x, -tf.reduce_sum(tf.square(x), axis=1))
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


LARGE = {
    "openai_es": lambda d: S.OpenES(d, seed=0),
    "snes": lambda d: S.SNES(d, seed=0),
    "pgpe": lambda d: S.PGPE(d, seed=0),
    "ars": lambda d: S.ARS(d, num_top=4, seed=0),
    "ga": lambda d: S.GaussianGA(d, seed=0),
    "de": lambda d: S.DifferentialEvolution(d, seed=0),
    "pso": lambda d: S.PSO(d, seed=0),
    "random_search": lambda d: S.RandomSearch(d, seed=0),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gens", type=int, default=6)
    ap.add_argument("--skip-large", action="store_true")
    args = ap.parse_args()
    g = args.gens
    rng = np.random.default_rng(0)
    rows = [
        ("OpenAI-ES adam centered_rank mirrored", run_openes(g, rng)),
        ("OpenAI-ES sgd z_score mirrored", run_openes(g, rng, "z_score", "sgd")),
        ("OpenAI-ES clipup raw unmirrored", run_openes(g, rng, "raw", "clipup", mirrored=False, p=9)),
        ("OpenAI-ES adam centered_rank, |centre| 1e3 (float64)", run_openes(g, rng, center=np.full(7, 1e3))),
        ("OpenAI-ES adam centered_rank, |centre| 1e3 (float32)",
         run_openes(g, rng, center=np.full(7, 1e3), dtype="float32")),
        ("SNES", run_snes(g, rng)),
        ("SNES mirrored", run_snes(g, rng, mirrored=True)),
        ("XNES", run_xnes(g, rng)),
        ("PGPE clipup centered_rank", run_pgpe(g, rng)),
        ("PGPE adam z_score", run_pgpe(g, rng, "adam", "z_score")),
        ("PGPE sgd raw", run_pgpe(g, rng, "sgd", "raw")),
        ("ARS V1-t b=3 normalized", run_ars(g, rng)),
        ("ARS V1 b=N unnormalized", run_ars(g, rng, b=6, normalize=False)),
        ("GaussianGA elitism + running means", run_ga(g, rng)),
        ("DE rand/1/bin (partners recovered)", run_de(g, rng)),
        ("DE best/1/bin (partners recovered)", run_de(g, rng, "best/1/bin")),
        ("PSO vmax 0.3", run_pso(g, rng)),
        ("PSO bounds [-0.5, 0.5]", run_pso(g, rng, vmax=None, bounds=(-0.5, 0.5))),
    ]
    print(f"{'case':58s} max relative difference to the NumPy reference over {g} tells")
    for name, w in rows:
        print(f"{name:58s} {w:.3e}")
    z, all_have = run_de_cr(rng)
    print(f"DE CR=0.3 crossover fraction: {z:.2f} binomial sd from CR+(1-CR)/D; every trial has a mutant coord: "
          f"{all_have}")
    print()
    print(f"{'strategy':14s} same-seed identical  best==best-ever  float64 out")
    for name, make in CASES.items():
        a, ok1, f64 = run_and_trace(make)
        b, _, _ = run_and_trace(make)
        print(f"{name:14s} {str(np.array_equal(a, b)):20s} {str(ok1):16s} {f64}")
    if not args.skip_large:
        print()
        for name, make in LARGE.items():
            print(f"D=1e5 {name:14s} peak RSS so far {large_d(name, make):.0f} MB")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
