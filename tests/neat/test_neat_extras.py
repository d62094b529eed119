"""CPPN/HyperNEAT decoding, policy seam, export, control and HyperNEAT runs."""

from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from tfevo import registry
from tfevo.core import ConfigError
from tfevo.neat import NEAT, NEATConfig
from tfevo.neat import network as net
from tfevo.neat.export import to_keras, to_sympy, draw
from tfevo.neat.hyperneat import HyperNEAT, HyperNEATProblem, Substrate, query_cppn


def _structured_pop(cfg):
    algo = NEAT(cfg, seed=1)
    return algo.ask()


def test_registry_names():
    import tfevo.neat  # noqa: F401  (registers its names)

    assert registry._REGISTRY["strategy"]["neat"] is NEAT
    for name in ("xor", "xor3", "neat_control"):
        assert name in registry._REGISTRY["problem"]


def test_cppn_query_and_hyperneat_decode_match_reference():
    sub = Substrate.layered([[(-1.0, -1.0), (1.0, -1.0)], [(-1.0, 0.0), (0.0, 0.0), (1.0, 0.0)], [(0.0, 1.0)]])
    hn = HyperNEAT(sub, weight_threshold=0.3, max_weight=3.0, activation="tanh")
    cfg = hn.cppn_config(pop_size=6, num_hidden=2, initial_connection="full_direct")
    pop = _structured_pop(cfg)
    q = sub.queries(True)
    raw = query_cppn(pop, q, cfg).numpy()[..., 0]
    dec = hn.decode(pop, cfg).weights.numpy()
    x = np.random.default_rng(0).uniform(-1, 1, (6, 4, 2)).astype(np.float32)
    y = hn.forward(hn.decode(pop, cfg), x).numpy()
    for p in range(6):
        ref = net.reference_forward(pop.nodes[p].numpy(), pop.conns[p].numpy(), q, cfg.num_inputs, 1)[:, 0]
        np.testing.assert_allclose(raw[p], ref, rtol=1e-4, atol=1e-5)
        w = np.where(np.abs(ref) > 0.3, np.sign(ref) * (np.abs(ref) - 0.3) / 0.7 * 3.0, 0.0)
        M = np.zeros((6, 6))
        M[sub.conns[:, 0], sub.conns[:, 1]] = w
        np.testing.assert_allclose(dec[p], M, rtol=1e-4, atol=1e-5)
        h = np.tanh(2.5 * (x[p] @ M[:2, 2:5]))
        o = np.tanh(2.5 * (h @ M[2:5, 5:6]))
        np.testing.assert_allclose(y[p], o, rtol=1e-3, atol=1e-4)


def test_layered_substrate_exports_to_keras_that_loads_without_tfevo(tmp_path):
    """HyperNEAT.to_keras: the member's substrate as plain Keras (Dense + built-in ops), equal to
    forward, loading in a fresh interpreter that never imports tfevo."""
    import json
    import os
    import subprocess
    import sys

    sub = Substrate.layered([[(-1.0, -1.0), (1.0, -1.0), (0.0, -1.0)], [(-1.0, 0.0), (0.0, 0.0), (1.0, 0.0)],
                             [(-0.5, 1.0), (0.5, 1.0)]])
    hn = HyperNEAT(sub, weight_threshold=0.1, activation="sin", output_activation="tanh")
    cfg = hn.cppn_config(pop_size=5, num_hidden=2, initial_connection="full_direct")
    decoded = hn.decode(_structured_pop(cfg), cfg)
    assert np.count_nonzero(decoded.weights.numpy()) > 0
    x = np.random.default_rng(0).uniform(-1, 1, (5, 7, 3)).astype(np.float32)
    y = hn.forward(decoded, x).numpy()
    for p in (0, 3):
        model = hn.to_keras(decoded, p)
        np.testing.assert_allclose(np.asarray(model(x[p])), y[p], rtol=1e-5, atol=1e-6)
    model.save(tmp_path / "m.keras")
    code = ("import sys, json, numpy as np, keras; m = keras.models.load_model(sys.argv[1]); "
            "print(json.dumps(np.asarray(m(np.asarray(json.loads(sys.argv[2]), np.float32))).tolist())); "
            "assert not any(k.startswith('tfevo') for k in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "m.keras"), json.dumps(x[3].tolist())],
                         capture_output=True, text=True, timeout=300,
                         env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert out.returncode == 0, out.stderr[-2000:]
    np.testing.assert_allclose(np.array(json.loads(out.stdout.strip().splitlines()[-1])), y[3], rtol=1e-5, atol=1e-6)
    full = HyperNEAT(Substrate.full([(-1.0, -1.0)], [(0.0, 0.0)], [(0.0, 1.0)]))
    with pytest.raises(ConfigError, match="layered substrates"):
        full.to_keras(full.decode(_structured_pop(full.cppn_config(pop_size=2)), full.cppn_config(pop_size=2)))


def test_full_substrate_runs_as_recurrent_network():
    sub = Substrate.full([(-1.0, -1.0), (1.0, -1.0)], [(0.0, 0.0)], [(0.0, 1.0)], recurrent=True)
    hn = HyperNEAT(sub, activation="tanh", activation_steps=3)
    cfg = hn.cppn_config(pop_size=4)
    pop = _structured_pop(cfg)
    W = hn.decode(pop, cfg).weights.numpy()
    x = np.ones((4, 1, 2), np.float32)
    y = hn.forward(hn.decode(pop, cfg), x).numpy()
    for p in range(4):
        v = np.zeros(4)
        v[:2] = 1.0
        for _ in range(3):
            v = np.concatenate([[1.0, 1.0], np.tanh(2.5 * (v @ W[p]))[2:]])
        np.testing.assert_allclose(y[p, 0], v[3:], rtol=1e-3, atol=1e-4)


def test_export_keras_sympy_and_picture(tmp_path):
    import keras
    import sympy as sp

    cfg = NEATConfig(num_inputs=3, num_outputs=2, pop_size=4, num_hidden=2, initial_connection="full_direct",
                     activation_options=("sigmoid", "tanh", "relu"), aggregation_options=("sum", "max", "product"),
                     activation_default="tanh")
    pop = _structured_pop(cfg)
    x = np.random.default_rng(0).uniform(-1, 1, (7, 3)).astype(np.float32)
    n = net.transform(pop.nodes, pop.conns, 3, True)
    want = net.forward(n, np.broadcast_to(x, (4, 7, 3)), 3, 2, cfg.activation_options, cfg.aggregation_options).numpy()
    model = to_keras(pop.nodes[1], pop.conns[1], cfg)
    np.testing.assert_allclose(model(x).numpy(), want[1], rtol=1e-6, atol=1e-6)
    model.save(tmp_path / "g.keras")
    again = keras.models.load_model(tmp_path / "g.keras")
    np.testing.assert_allclose(again(x).numpy(), want[1], rtol=1e-6, atol=1e-6)
    exprs = to_sympy(pop.nodes[1].numpy(), pop.conns[1].numpy(), cfg)
    f = sp.lambdify(sp.symbols("x0:3"), exprs, "numpy")
    got = np.array([f(*row) for row in x], float)
    np.testing.assert_allclose(got, want[1], rtol=1e-4, atol=1e-4)
    draw(pop.nodes[1], pop.conns[1], cfg, str(tmp_path / "g.png"))
    draw(pop.nodes[1], pop.conns[1], cfg, str(tmp_path / "g.svg"))
    assert (tmp_path / "g.png").stat().st_size > 1000 and (tmp_path / "g.svg").stat().st_size > 1000


def test_policy_seam_with_ingraph_evaluator():
    from tfevo.envs import make
    from tfevo.neat.policy import NEATPolicy
    from tfevo.rollout.ingraph import InGraphEvaluator

    cfg = NEATConfig(num_inputs=4, num_outputs=2, pop_size=8, max_nodes=10, max_conns=20)
    env = make("CartPole-v1", 1)
    pol = NEATPolicy(cfg, env.action_spec)
    pop = _structured_pop(cfg)
    obs = np.random.default_rng(0).normal(size=(8, 3, 4)).astype(np.float32)
    a = pol.forward(pop, obs).numpy()
    y = net.forward(net.transform(pop.nodes, pop.conns, 4), obs, 4, 2).numpy()
    np.testing.assert_array_equal(a, y.argmax(-1))
    np.testing.assert_array_equal(pol.forward(pol.flatten(pop), obs).numpy(), a)
    ev = InGraphEvaluator(env, pol, episodes=2, max_steps=50, seed=0, jit_compile=False)
    f = ev.evaluate(pol.flatten(pop)).numpy()
    assert f.shape == (8,) and np.all((f >= 1) & (f <= 50))


def test_control_problem_trims_to_used_width_without_changing_outputs():
    """The rollout on the used node width (what ControlProblem runs) gives the
    same network outputs as the full tensors, and a trimmed evaluator is built."""
    import dataclasses

    from tfevo.neat.policy import ControlProblem, NEATPolicy

    cfg = NEATConfig(num_inputs=4, num_outputs=2, pop_size=24, max_nodes=24, max_conns=40, node_add_prob=0.8,
                     conn_add_prob=0.8)
    algo = NEAT(cfg, seed=2)
    rng = np.random.default_rng(0)
    for _ in range(4):
        algo.tell(algo.ask(), rng.normal(size=24).astype(np.float32))
    nodes, conns = algo.ask()
    prob = ControlProblem("CartPole-v1", cfg, episodes=1, max_steps=20, seed=0)
    ev, n, c = prob._evaluator_for(nodes, conns)
    assert ev is not prob.evaluator and n.shape[1] < cfg.max_nodes
    # the cut drops only empty slots
    assert not np.any(~np.isnan(nodes.numpy()[:, n.shape[1]:, 0]))
    obs = rng.normal(size=(24, 3, 4)).astype(np.float32)
    full = NEATPolicy(cfg, prob.env.action_spec)
    cut = NEATPolicy(dataclasses.replace(cfg, max_nodes=n.shape[1]), prob.env.action_spec)
    y_full = net.forward(net.transform(nodes, conns, 4), obs, 4, 2).numpy()
    y_cut = net.forward(net.transform(n, c, 4), obs, 4, 2).numpy()
    np.testing.assert_allclose(y_cut, y_full, rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(cut.forward((n, c), obs).numpy(), full.forward((nodes, conns), obs).numpy())
    f = prob((nodes, conns)).numpy()
    assert f.shape == (24,) and np.all((f >= 1) & (f <= 20))


@pytest.mark.slow
@pytest.mark.parametrize("feed_forward", [True, False])
def test_cartpole_reaches_500(feed_forward):
    from tfevo.neat.policy import ControlProblem

    cfg = NEATConfig(num_inputs=4, num_outputs=2, pop_size=1000, max_nodes=24, max_conns=48,
                     feed_forward=feed_forward, fitness_threshold=500.0)
    prob = ControlProblem("CartPole-v1", cfg, episodes=2, seed=0)
    algo = NEAT(cfg, seed=0)
    r = algo.run(prob, 30)
    assert r["solved"], r


@pytest.mark.slow
def test_hyperneat_solves_substrate_xor():
    sub = Substrate.layered([[(-1.0, -1.0), (1.0, -1.0), (0.0, -1.0)],
                             [(-1.0, 0.0), (-0.5, 0.0), (0.0, 0.0), (0.5, 0.0), (1.0, 0.0)], [(0.0, 1.0)]])
    hn = HyperNEAT(sub, weight_threshold=0.2, max_weight=5.0, activation="sigmoid")
    X = np.array([[0, 0, 1], [0, 1, 1], [1, 0, 1], [1, 1, 1]], np.float32)
    Y = np.array([[0], [1], [1], [0]], np.float32)
    prob = HyperNEATProblem(hn, X, Y)
    cfg = hn.cppn_config(pop_size=150, max_nodes=24, max_conns=48, fitness_threshold=3.9)
    solved = 0
    for seed in range(3):
        algo = NEAT(cfg, seed=seed)
        solved += algo.run(lambda p: prob(p, cfg), 300)["solved"]
    assert solved >= 2


def test_problems_and_custom_activation_match_reference(tmp_path):
    from tfevo.neat import XOR3, FunctionFit, register_activation

    register_activation("swish_t", lambda z: z * tf.sigmoid(z), lambda z: z / (1.0 + np.exp(-z)))
    cfg = NEATConfig(num_inputs=3, num_outputs=1, pop_size=5, num_hidden=2, initial_connection="full_direct",
                     activation_options=("swish_t", "sigmoid"), activation_default="swish_t")
    pop = _structured_pop(cfg)
    prob = XOR3()
    prob.jit_compile = False  # same program, no XLA compile wait in the default suite
    f = prob(pop, cfg).numpy()
    for p in range(5):
        y = net.reference_forward(pop.nodes[p].numpy(), pop.conns[p].numpy(), prob.inputs, 3, 1)
        assert abs(f[p] - (8.0 - ((y - prob.targets) ** 2).sum())) < 1e-3
    cfg1 = NEATConfig(num_inputs=1, num_outputs=1, pop_size=5, num_hidden=1, activation_options=("tanh",),
                      activation_default="tanh")
    pop1 = _structured_pop(cfg1)
    fit = FunctionFit(np.sin, -2, 2, 16)
    fit.jit_compile = False
    f = fit(pop1, cfg1).numpy()
    for p in range(5):
        y = net.reference_forward(pop1.nodes[p].numpy(), pop1.conns[p].numpy(), fit.inputs, 1, 1)
        assert abs(f[p] + ((y - fit.targets) ** 2).mean()) < 1e-4
    # neat-python config files are read with their meaning
    path = tmp_path / "np.cfg"
    text = (Path(__file__).parents[2] / "benchmarks" / "configs" / "neat_parity3.cfg").read_text()
    for old, new in (("pop_size              = 150", "pop_size = 77"),
                     ("num_inputs              = 3", "num_inputs = 2"),
                     ("conn_add_prob           = 0.5", "conn_add_prob = 0.3"),
                     ("initial_connection      = full", "initial_connection = partial 0.5"),
                     ("activation_options      = sigmoid", "activation_options = sigmoid tanh"),
                     ("compatibility_threshold = 3.0", "compatibility_threshold = 2.5")):
        assert old in text
        text = text.replace(old, new)
    path.write_text(text)
    c = NEATConfig.from_neat_python(str(path))
    assert (c.pop_size, c.conn_add_prob, c.initial_connection, c.connection_fraction, c.compatibility_threshold,
            c.activation_options) == (77, 0.3, "partial", 0.5, 2.5, ("sigmoid", "tanh"))
