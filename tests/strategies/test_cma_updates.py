"""The CMA update equations (tfevo.strategies.cma_updates) against pycma and a NumPy transcription."""

from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from tfevo.strategies import cma_updates as eq

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("n,lam", [(3, None), (10, None), (40, None), (10, 30), (5, 64), (20, 160), (10, 5)])
def test_table_1_parameters(n, lam):
    # mu_eff, c_1, c_mu, c_c, c_sigma, d_sigma and all the weights as pycma 4 computes them.
    cma = pytest.importorskip("cma")
    opts = {"verbose": -9} if lam is None else {"verbose": -9, "popsize": lam}
    ref = cma.CMAEvolutionStrategy(np.zeros(n), 0.5, opts)
    lam = eq.default_popsize(n) if lam is None else lam
    assert lam == ref.sp.popsize
    mu = lam // 2
    wp = eq.raw_weights(lam)
    mueff = eq.effective_mass(wp[:mu])
    c1, cmu = eq.covariance_rates(n, mueff, lam)
    used = ref.sm.parameters(mueff=ref.sp.weights.mueff, lam=ref.sp.weights.lambda_)  # the rates its update uses
    np.testing.assert_allclose([mueff, c1, cmu, eq.path_rate(n, mueff)],
                               [ref.sp.weights.mueff, used["c1"], used["cmu"], ref.sp.cc], rtol=1e-12)
    w = eq.recombination_weights(wp, mu, n, c1, cmu, active=True)
    np.testing.assert_allclose(w, np.asarray(ref.sp.weights), rtol=1e-12)
    if lam >= 6:  # (below, pycma samples mirrored pairs, which changes its damping; tfevo does not)
        # the step-size rates as pycma's CSA (its damping grows with mu_eff faster than the
        # tutorial's: IPOP's large populations change sigma more slowly)
        np.testing.assert_allclose(eq.step_size_rates(n, mueff), [ref.adapt_sigma.cs, ref.adapt_sigma.damps],
                                   rtol=1e-12)
    neg = wp[mu:]
    mueff_neg = neg.sum() ** 2 / (neg**2).sum()
    alpha = min(1 + c1 / cmu, 1 + 2 * mueff_neg / (mueff + 2), (1 - c1 - cmu) / (n * cmu))
    np.testing.assert_allclose(w[mu:], alpha * neg / np.abs(neg).sum(), rtol=1e-12)
    assert abs(w[:mu].sum() - 1) < 1e-12 and np.all(w[mu:] <= 0)
    assert np.all(eq.recombination_weights(wp, mu, n, c1, cmu, active=False)[mu:] == 0)


def test_one_generation_is_the_tutorial_summary():
    # Eq. (41)-(47) composed from the named functions vs a float64 NumPy transcription.
    rng = np.random.default_rng(3)
    n, lam = 6, 12
    mu = lam // 2
    wp = eq.raw_weights(lam)
    mueff = eq.effective_mass(wp[:mu])
    c1, cmu = eq.covariance_rates(n, mueff)
    cs, ds = eq.step_size_rates(n, mueff)
    cc, chi = eq.path_rate(n, mueff), eq.expected_norm(n)
    w = eq.recombination_weights(wp, mu, n, c1, cmu, True)
    a = rng.standard_normal((n, n))
    C = a @ a.T / n + np.eye(n)
    e, B = np.linalg.eigh(C)
    c_isqrt = B @ np.diag(e**-0.5) @ B.T
    m, sigma, ps, pc = rng.standard_normal(n), 0.7, rng.standard_normal(n), rng.standard_normal(n)
    y, g = rng.standard_normal((lam, n)), 4
    # NumPy
    y_w = w[:mu] @ y[:mu]
    m_ref = m + sigma * y_w
    ps_ref = (1 - cs) * ps + np.sqrt(cs * (2 - cs) * mueff) * c_isqrt @ y_w
    h = float(np.sum(ps_ref**2) / (1 - (1 - cs) ** (2 * g)) / n - 1 < 1 + 4 / (n + 1))
    pc_ref = (1 - cc) * pc + h * np.sqrt(cc * (2 - cc) * mueff) * y_w
    sig_ref = sigma * np.exp(min(1.0, cs / ds * (np.linalg.norm(ps_ref) / chi - 1)))
    w_o = w.copy()
    w_o[mu:] *= n / np.sum((y[mu:] @ c_isqrt) ** 2, axis=1)
    C_ref = ((1 + c1 * (1 - h) * cc * (2 - cc) - c1 - cmu * w.sum()) * C + c1 * np.outer(pc_ref, pc_ref)
             + cmu * (y.T * w_o) @ y)
    # the named functions
    t = lambda v: tf.constant(v, tf.float64)  # noqa: E731
    y_w_t = eq.weighted_step(t(y[:mu]), t(w[:mu]))
    ps_t = eq.sigma_path(t(ps), cs, mueff, tf.linalg.matvec(t(c_isqrt), y_w_t))
    ps_norm = tf.norm(ps_t)
    h_t = eq.stall(ps_norm, cs, g, n, chi, tf.float64)
    pc_t = eq.cov_path(t(pc), cc, h_t, mueff, y_w_t)
    sq = tf.reduce_sum(tf.square(tf.matmul(t(y[mu:]), t(c_isqrt))), axis=1)
    w_eff = eq.active_weights(t(w), mu, sq, n, tf.float64)
    ys, v = eq.rank_one_mu_rows(t(y), pc_t, w_eff, c1, cmu, tf.float64)
    C_t = eq.cov_decay(h_t, cc, c1, cmu, float(w.sum())) * t(C) + tf.matmul(ys * v[:, None], ys, transpose_a=True)
    np.testing.assert_allclose(eq.move_mean(t(m), sigma, y_w_t).numpy(), m_ref, rtol=1e-12)
    np.testing.assert_allclose(ps_t.numpy(), ps_ref, rtol=1e-12)
    assert float(h_t) == h
    np.testing.assert_allclose(pc_t.numpy(), pc_ref, rtol=1e-12)
    np.testing.assert_allclose(float(eq.step_size(t(sigma), ps_norm, cs, ds, chi)), sig_ref, rtol=1e-12)
    np.testing.assert_allclose(C_t.numpy(), C_ref, rtol=1e-10)


@pytest.mark.parametrize("n,lam", [(10, None), (20, 160), (4, None)])
def test_h_sigma_is_pycmas_decision(n, lam):
    # pycma's CSA hsig on the same p_sigma and iteration count, around the threshold,
    # where the tutorial's ||p_sigma|| test and pycma's ||p_sigma||^2 test disagree.
    cma = pytest.importorskip("cma")
    opts = {"verbose": -9} if lam is None else {"verbose": -9, "popsize": lam}
    ref = cma.CMAEvolutionStrategy(np.zeros(n), 0.5, opts)
    ref.adapt_sigma.initialize(ref)
    lam = eq.default_popsize(n) if lam is None else lam
    mueff = eq.effective_mass(eq.raw_weights(lam)[: lam // 2])
    cs, _ = eq.step_size_rates(n, mueff)
    rng = np.random.default_rng(0)
    decisions, tutorial = [], []
    for g in (1, 2, 3, 7, 40):
        lim = np.sqrt(n * (2 + 4 / (n + 1)) * (1 - (1 - cs) ** (2 * g)))  # pycma's threshold on ||p_sigma||
        r = (1.4 + 2 / (n + 1)) * eq.expected_norm(n) * np.sqrt(1 - (1 - cs) ** (2 * g)) / lim  # the tutorial's
        for f in list(np.linspace(0.9, 1.1, 20)) + [(1 + r) / 2]:
            ps = rng.standard_normal(n)
            ps *= f * lim / np.linalg.norm(ps)
            ref.countiter, ref.adapt_sigma.ps = g, ps
            ref.adapt_sigma._ps_updated_iteration = g  # (hsig must read this path, not update it)
            want = bool(ref.adapt_sigma.hsig(ref))
            got = bool(eq.stall(tf.constant(np.linalg.norm(ps), tf.float64), cs, g, n, eq.expected_norm(n), tf.float64))
            decisions.append((got, want))
            tutorial.append(np.linalg.norm(ps) / np.sqrt(1 - (1 - cs) ** (2 * g))
                            < (1.4 + 2 / (n + 1)) * eq.expected_norm(n))
    assert all(got == want for got, want in decisions), [i for i, (a, b) in enumerate(decisions) if a != b]
    assert any(t != want for t, (_, want) in zip(tutorial, decisions))  # the test separates the two forms


def test_expected_norm_is_pycmas():
    # the E||N(0, I)|| of pycma's CSA (exact up to n = 100, a series above)
    cma = pytest.importorskip("cma")
    from cma.utilities.math import Mh

    for n in (1, 2, 3, 6, 10, 20, 40, 100, 101, 1000):
        np.testing.assert_allclose(eq.expected_norm(n), Mh.chiN(n), rtol=1e-7)
    assert abs(eq.expected_norm(6) / Mh.chiN(6) - 1) < 1e-9  # (the tutorial's series is 3e-4 off here)


def test_one_update_of_mean_sigma_and_c_is_pycmas():
    # pycma's tell on the same samples and fitness (its C set to I: pycma starts from a
    # slightly anisotropic diagonal to keep eigenvalues apart), eigendecomposition every generation.
    cma = pytest.importorskip("cma")
    from tfevo.strategies import CMAES

    n, lam, s0 = 6, 12, 0.7
    m0 = np.linspace(-1, 1, n)
    w = np.power(1e3, np.arange(n) / (n - 1))
    es = CMAES(n, popsize=lam, sigma=s0, init_params=m0, seed=3, eigen_gap=1)
    ref = cma.CMAEvolutionStrategy(m0, s0, {"popsize": lam, "verbose": -9, "seed": 5})
    ref.sm.C, ref.sm.D, ref.sm.B, ref.sm._inverse_root_C = np.eye(n), np.ones(n), np.eye(n), None
    for _ in range(8):
        x = np.asarray(ref.ask())
        f = (w * x**2).sum(1)
        es.ask()
        es.tell(tf.constant(x), tf.constant(-f, tf.float32))
        ref.tell(list(x), list(f))
        np.testing.assert_allclose(es.mean.numpy(), ref.mean, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(float(es.sigma.numpy()), ref.sigma, rtol=1e-9)
        np.testing.assert_allclose(es.p_sigma.numpy(), ref.adapt_sigma.ps, rtol=1e-8, atol=1e-10)
        np.testing.assert_allclose(es.p_c.numpy(), ref.pc, rtol=1e-8, atol=1e-10)
        np.testing.assert_allclose(es.covariance().numpy(), ref.sm.C, rtol=1e-8, atol=1e-10)


def test_the_cma_modules_stay_small():
    files = sorted((ROOT / "tfevo" / "strategies").glob("*cma*.py")) + [
        ROOT / "tfevo" / "strategies" / n for n in ("lm_ma_es.py", "restarts.py")]
    sizes = {f.name: len(f.read_text().splitlines()) for f in files}
    assert len(sizes) >= 8 and max(sizes.values()) <= 400, sizes
