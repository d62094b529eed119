"""HyperNEAT as a PUREPLES / TensorNEAT user expects it: substrates of any coordinate width, with or
without hidden nodes, painted by CPPNs whose weights equal a hand-written NumPy evaluation of the
genome; bad substrates and settings are a ConfigError/ShapeError naming field and value."""

import numpy as np
import pytest

from tfevo.core import ConfigError
from tfevo.neat import NEAT
from tfevo.neat.hyperneat import HyperNEAT, Substrate


def test_substrates_without_hidden_nodes_build_and_run():
    """PUREPLES' standard substrate lists no hidden nodes; full and custom substrates accept an empty
    hidden list (inputs straight to outputs)."""
    full = Substrate.full([(-1.0, -1.0), (1.0, -1.0)], [], [(0.0, 1.0)])
    assert full.conns.tolist() == [[0, 2], [1, 2]] and full.hidden_coords.shape == (0, 2)
    custom = Substrate.custom([-1.0, 1.0], [], [0.0], [(0, 2), (1, 2)])  # 1-D coordinates as plain numbers
    assert custom.coords.tolist() == [[-1.0], [1.0], [0.0]]
    for sub in (full, custom):
        hn = HyperNEAT(sub, activation="tanh", activation_steps=2)
        cfg = hn.cppn_config(pop_size=3)
        W = hn.decode(NEAT(cfg, seed=0).ask(), cfg).weights.numpy()
        x = np.array([[[0.5, -0.25]]] * 3, np.float32)
        y = hn.forward(hn.decode(NEAT(cfg, seed=0).ask(), cfg), x).numpy()
        want = np.tanh(2.5 * np.einsum("pbi,pi->pb", x, W[:, :2, 2]))[..., None]
        np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("build, match", [
    (lambda: Substrate.full([(-1.0, -1.0)], [(0.0, 0.0, 0.0)], [(0.0, 1.0)]),
     r"same number of dimensions, got input_coords: 2, hidden_coords: 3, output_coords: 2"),
    (lambda: Substrate.full([], [(0.0, 0.0)], [(0.0, 1.0)]), r"input_coords must be .* n >= 1, got shape \[0\]"),
    (lambda: Substrate.custom([(-1.0,)], [(0.0,)], [], [(0, 1)]), r"output_coords must be .* n >= 1"),
    (lambda: Substrate.custom([(-1.0,)], [], [(1.0,)], np.zeros((0, 2))), r"conns must be a non-empty \[Q, 2\]"),
    (lambda: Substrate.custom([(-1.0,)], [], [(1.0,)], [(0, 1), (0, 1)]), r"more than once .*\[\[0, 1\]\]"),
    (lambda: Substrate.custom([(-1.0,)], [], [(1.0,)], [(0, 0.5)]), r"integer \(src, dst\) indices in \[0, 2\)"),
    (lambda: Substrate.custom([(-1.0,)], [], [(1.0,)], [(1, 0)]), r"cannot end in an input node .*\[\[1, 0\]\]"),
    (lambda: Substrate.layered([[(-1.0,), (1.0,)], np.zeros((0, 1)), [(0.0,)]]), r"layer 1 must be .* got shape \[0, 1\]"),
    (lambda: Substrate.layered([[(np.nan,), (1.0,)], [(0.0,)]]), r"layer 0 must be finite, got \[\[nan\], \[1\.0\]\]"),
    (lambda: Substrate.layered([[(0.0, 0.0)], [(0.0,)]]), r"same number of dimensions, got layer 0: 2, layer 1: 1"),
    (lambda: Substrate.layered([[(0.0, 0.0)]]), r"list of >= 2 layers"),
])
def test_bad_substrates_are_config_errors_naming_what_and_value(build, match):
    with pytest.raises(ConfigError, match=match):
        build()


_SUB = Substrate.layered([[(-1.0, -1.0), (1.0, -1.0)], [(0.0, 1.0)]])


@pytest.mark.parametrize("kw, match", [
    ({"max_weight": -1.0}, r"max_weight must be a finite number > 0, got -1\.0"),
    ({"max_weight": 0}, r"max_weight must be a finite number > 0, got 0"),
    ({"max_weight": float("nan")}, r"max_weight must be a finite number > 0, got nan"),
    ({"max_weight": float("inf")}, r"max_weight must be a finite number > 0, got inf"),
    ({"activation_steps": 0}, r"activation_steps must be an integer >= 1, got 0"),
    ({"activation_steps": 2.5}, r"activation_steps must be an integer >= 1, got 2\.5"),
    ({"activation_steps": float("inf")}, r"activation_steps must be an integer >= 1, got inf"),
    ({"activation_steps": float("nan")}, r"activation_steps must be an integer >= 1, got nan"),
    ({"weight_threshold": "0.2"}, r"weight_threshold must be a number in \[0, 1\), got '0\.2'"),
    ({"weight_threshold": 1.0}, r"weight_threshold must be a number in \[0, 1\), got 1\.0"),
    ({"bias_input": "no"}, r"bias_input must be True or False, got 'no'"),
    ({"activation": "tahn"}, r"activation: unknown activation 'tahn'; known: sigmoid, tanh"),
    ({"output_activation": "tahn"}, r"output_activation: unknown activation 'tahn'"),
    ({"substrate": [[0.0]]}, r"substrate must be a Substrate .* got list"),
])
def test_bad_hyperneat_settings_are_config_errors_naming_field_and_value(kw, match):
    """A negative max_weight flipped every weight's sign, 0 or NaN zeroed or poisoned the substrate,
    activation_steps=0 returned zeros and 2.5 ran 2 steps, bias_input='no' meant True: all silently."""
    kw = {"substrate": _SUB, **kw}
    with pytest.raises(ConfigError, match=match):
        HyperNEAT(**kw)


def test_recurrent_cppn_configs_are_refused():
    """A CPPN is queried once per coordinate pair; with feed_forward=False NEAT may grow cycles, which
    the one-shot query silently evaluated as if they were not there."""
    from tfevo.envs.base import ActionSpec
    from tfevo.neat import NEATConfig
    from tfevo.neat.hyperneat import cppn_config, query_cppn
    from tfevo.neat.hyperneat_policy import HyperNEATPolicy

    hn = HyperNEAT(_SUB)
    with pytest.raises(ConfigError, match=r"feed_forward=False: a CPPN .* use feed_forward=True"):
        hn.cppn_config(pop_size=4, feed_forward=False)
    with pytest.raises(ConfigError, match=r"feed_forward=False"):
        cppn_config(5, feed_forward=False)
    rec = NEATConfig(num_inputs=hn.cppn_inputs, num_outputs=1, pop_size=4, feed_forward=False)
    pop = NEAT(rec, seed=0).ask()
    with pytest.raises(ConfigError, match=r"feed_forward=False"):
        hn.decode(pop, rec)
    with pytest.raises(ConfigError, match=r"feed_forward=False"):
        query_cppn(pop, _SUB.queries(), rec)
    with pytest.raises(ConfigError, match=r"feed_forward=False"):
        HyperNEATPolicy(hn, rec, ActionSpec(discrete=True, num_actions=1))


def test_forward_shape_errors_name_both_sizes():
    from tfevo.core import ShapeError

    hn = HyperNEAT(_SUB)
    cfg = hn.cppn_config(pop_size=4)
    d = hn.decode(NEAT(cfg, seed=0).ask(), cfg)
    with pytest.raises(ShapeError, match=r"x must be \[P, B, 2\] or \[B, 2\] .* got \[4, 3, 3\]"):
        hn.forward(d, np.zeros((4, 3, 3), np.float32))
    with pytest.raises(ShapeError, match=r"x has 3 members .* the decoded weights 4"):
        hn.forward(d, np.zeros((3, 5, 2), np.float32))
    assert hn.forward(d, np.zeros((5, 2), np.float32)).shape == (4, 5, 1)  # inputs shared by every member


def test_substrate_weights_never_exceed_max_weight():
    """The CPPN's output node mutates its activation among cppn_config's options, unbounded ones
    included (identity, square, relu, abs); its raw output is clipped to [-1, 1] before threshold
    and scaling, so max_weight is the largest weight, as in the original HyperNEAT."""
    hn = HyperNEAT(_SUB, weight_threshold=0.2, max_weight=3.0)
    cfg = hn.cppn_config(pop_size=6, activation_default="identity", initial_connection="full_direct",
                         weight_init_stdev=5.0, bias_init_stdev=5.0)
    pop = NEAT(cfg, seed=0).ask()
    W = hn.decode(pop, cfg).weights.numpy()
    from tfevo.neat.hyperneat import query_cppn

    raw = np.clip(query_cppn(pop, _SUB.queries(), cfg).numpy()[..., 0], -1.0, 1.0)
    assert (np.abs(raw) == 1.0).sum() >= 3  # several outputs beyond [-1, 1] before clipping
    want = np.where(np.abs(raw) > 0.2, np.sign(raw) * (np.abs(raw) - 0.2) / 0.8 * 3.0, 0.0)
    np.testing.assert_allclose(W[:, _SUB.conns[:, 0], _SUB.conns[:, 1]], want, rtol=1e-6, atol=1e-6)
    assert np.abs(W).max() == np.float32(3.0)


# neat-python's activation definitions (what PUREPLES' substrates and CPPNs use), in float64
_NP_ACT = {"sigmoid": lambda z: 1 / (1 + np.exp(-np.clip(5 * z, -60, 60))),
           "tanh": lambda z: np.tanh(np.clip(2.5 * z, -60, 60)), "sin": lambda z: np.sin(np.clip(5 * z, -60, 60)),
           "gauss": lambda z: np.exp(-5 * np.clip(z, -3.4, 3.4) ** 2), "identity": lambda z: z, "abs": np.abs,
           "relu": lambda z: np.maximum(z, 0), "square": lambda z: z * z}


def _cppn_numpy(nodes, conns, q, num_inputs):
    """One CPPN genome's single output at the rows of ``q``: node by node in topological order,
    act(bias + response * sum(w * in)) over enabled connections."""
    from tfevo.neat.functions import activation_name

    nd = {int(r[0]): r for r in nodes if not np.isnan(r[0])}
    inc = {}
    for r in conns:
        if not np.isnan(r[0]) and r[2] > 0.5:
            inc.setdefault(int(r[1]), []).append((int(r[0]), float(r[3])))
    vals = {i: q[:, i].astype(np.float64) for i in range(num_inputs)}
    rest = [k for k in nd if k >= num_inputs]
    while rest:
        ready = [k for k in rest if all(a in vals for a, _ in inc.get(k, []))]
        assert ready, "cycle"
        for k in ready:
            s = sum((vals[a] * w for a, w in inc.get(k, [])), np.zeros(len(q)))
            vals[k] = _NP_ACT[activation_name(int(nd[k][4]))](nd[k][1] + nd[k][2] * s)
        rest = [k for k in rest if k not in vals]
    return vals[num_inputs]


_SHAPES = {
    "2d_layered_2_3_1": (lambda: Substrate.layered([[(-1.0, -1.0), (1.0, -1.0)], [(-1.0, 0.0), (0.0, 0.0), (1.0, 0.0)],
                                                    [(0.0, 1.0)]]), {}),
    "1d_no_hidden": (lambda: Substrate.layered([[[-1.0], [0.0], [1.0]], [[0.5]]]), {"weight_threshold": 0.0}),
    "3d_3_2_5_no_bias": (lambda: Substrate.layered([[(-1, 0, 0), (1, 0, 0), (0, 1, 0)], [(0, 0, .5), (1, 1, .5)],
                                                    [(0, 0, 1), (1, 0, 1), (0, 1, 1), (1, 1, 1), (.5, .5, 1)]]),
                         {"bias_input": False, "activation": "tanh", "output_activation": "identity"}),
    "2d_two_hidden_3_out": (lambda: Substrate.layered([[(-1, -1), (1, -1)], [(-1, -.3), (1, -.3)], [(-1, .3), (1, .3)],
                                                       [(-1, 1), (0, 1), (1, 1)]]), {"max_weight": 1.0}),
    "full_recurrent": (lambda: Substrate.full([(-1.0, -1.0), (1.0, -1.0)], [(0.0, 0.0)], [(0.0, 1.0), (1.0, 1.0)],
                                              recurrent=True), {"activation": "tanh", "activation_steps": 4}),
    "full_no_hidden": (lambda: Substrate.full([(-1.0,), (1.0,)], [], [(0.0,)]), {"activation_steps": 1}),
    "custom": (lambda: Substrate.custom([(-1.0, -1.0), (1.0, -1.0)], [(0.0, 0.0)], [(0.0, 1.0)],
                                        [(0, 2), (1, 2), (2, 3), (0, 3), (3, 2)]),
               {"activation": "sigmoid", "output_activation": "sin", "activation_steps": 3}),
}


@pytest.mark.parametrize("shape", sorted(_SHAPES))
def test_substrate_weights_and_outputs_equal_a_numpy_evaluation(shape):
    """Every substrate weight equals the hand-written NumPy CPPN at its coordinate pair, thresholded
    and scaled (float32 against float64: within 1e-5 * max_weight), every other entry is 0; the
    population forward equals NumPy's substrate run and each member run alone (float rounding)."""
    build, kw = _SHAPES[shape]
    sub = build()
    hn = HyperNEAT(sub, **kw)
    t, mw = hn.weight_threshold, hn.max_weight
    cfg = hn.cppn_config(pop_size=10, max_nodes=20, max_conns=40, node_add_prob=0.5, conn_add_prob=0.5,
                         activation_mutate_rate=0.5)
    algo = NEAT(cfg, seed=3)
    rng = np.random.default_rng(3)
    for _ in range(6):  # grow hidden CPPN nodes with mixed activations
        pop = algo.ask()
        algo.tell(pop, rng.normal(size=cfg.pop_size))
    pop = algo.ask()
    W = hn.decode(pop, cfg).weights.numpy()
    q = sub.queries(hn.bias_input)
    assert q.shape == (len(sub.conns), 2 * sub.coord_dims + hn.bias_input)
    M, I, O = sub.num_nodes, sub.num_inputs, sub.num_outputs
    x = rng.uniform(-1, 1, (cfg.pop_size, 4, I)).astype(np.float32)
    y = hn.forward(hn.decode(pop, cfg), x).numpy()
    assert y.shape == (cfg.pop_size, 4, O)
    act, oact = _NP_ACT[hn.activation], _NP_ACT[hn.output_activation]
    grown = 0
    for p in range(cfg.pop_size):
        nodes, conns = pop.nodes[p].numpy(), pop.conns[p].numpy()
        grown += int(np.sum(~np.isnan(nodes[:, 0]))) > cfg.num_inputs + 1
        raw = np.clip(_cppn_numpy(nodes, conns, q, cfg.num_inputs), -1, 1)
        w = np.where(np.abs(raw) > t, np.sign(raw) * (np.abs(raw) - t) / (1 - t) * mw, 0.0)
        ref = np.zeros((M, M))
        ref[sub.conns[:, 0], sub.conns[:, 1]] = w
        edge = np.zeros((M, M), bool)
        edge[sub.conns[:, 0], sub.conns[:, 1]] = np.abs(np.abs(raw) - t) < 1e-5  # float32 may land either side
        np.testing.assert_allclose(np.where(edge, 0, W[p]), np.where(edge, 0, ref), rtol=0, atol=1e-5 * mw)
        # the substrate network in NumPy, from tfevo's weights
        if sub.layers is not None:
            offs = np.cumsum([0] + list(sub.layers))
            h = x[p].astype(np.float64)
            for k in range(len(sub.layers) - 1):
                z = h @ W[p][offs[k]:offs[k + 1], offs[k + 1]:offs[k + 2]]
                h = oact(z) if k == len(sub.layers) - 2 else act(z)
            want = h
        else:
            v = np.concatenate([x[p], np.zeros((4, M - I))], 1).astype(np.float64)
            for _ in range(hn.activation_steps):
                z = v @ W[p]
                v = np.concatenate([x[p], np.where(np.arange(M) >= M - O, oact(z), act(z))[:, I:]], 1)
            want = v[:, M - O:]
        np.testing.assert_allclose(y[p], want, rtol=1e-4, atol=1e-5)
        d = hn.decode((pop.nodes[p:p + 1], pop.conns[p:p + 1]), cfg)
        np.testing.assert_array_equal(d.weights.numpy()[0], W[p])  # the CPPN query does not depend on the batch
        np.testing.assert_allclose(hn.forward(d, x[p:p + 1]).numpy()[0], y[p], rtol=1e-6, atol=1e-6)
    assert grown >= 3, "the CPPNs should have hidden nodes"


def test_query_coords_and_layer_sizes_are_checked():
    from tfevo.core import ShapeError
    from tfevo.neat.hyperneat import query_cppn
    from tfevo.neat.hyperneat_policy import layered_substrate

    hn = HyperNEAT(_SUB)
    cfg = hn.cppn_config(pop_size=2)
    pop = NEAT(cfg, seed=0).ask()
    with pytest.raises(ShapeError, match=r"coords must be \[Q, 5\] \(num_inputs of the CPPN config\), got \[3, 4\]"):
        query_cppn(pop, np.zeros((3, 4), np.float32), cfg)
    with pytest.raises(ConfigError, match=r"hidden must be a list of hidden layer sizes, got '16'"):
        layered_substrate(2, "16", 1)  # was read as the layers [1, 6]
    assert layered_substrate(2, [16], 1).layers == (2, 16, 1)


def test_shared_inputs_run_every_substrate_kind():
    """x [B, I] (the same inputs for every member) runs full and custom substrates as it runs layered
    ones, equal to the inputs broadcast to [P, B, I]."""
    x = np.random.default_rng(0).uniform(-1, 1, (5, 2)).astype(np.float32)
    for sub in (_SUB, Substrate.full([(-1.0, -1.0), (1.0, -1.0)], [(0.0, 0.0)], [(0.0, 1.0)]),
                Substrate.custom([(-1.0, -1.0), (1.0, -1.0)], [(0.0, 0.0)], [(0.0, 1.0)], [(0, 2), (1, 3), (2, 3)])):
        hn = HyperNEAT(sub, activation_steps=3)
        cfg = hn.cppn_config(pop_size=4)
        d = hn.decode(NEAT(cfg, seed=0).ask(), cfg)
        np.testing.assert_array_equal(hn.forward(d, x).numpy(), hn.forward(d, np.broadcast_to(x, (4, 5, 2))).numpy())


def test_same_seed_same_hyperneat_run():
    from tfevo.neat.hyperneat import HyperNEATProblem

    x = np.array([[0, 0], [0, 1], [1, 0], [1, 1]], np.float32)
    prob = HyperNEATProblem(HyperNEAT(_SUB), x, x[:, :1] * x[:, 1:])

    def run(seed):
        cfg = prob.hn.cppn_config(pop_size=16, max_nodes=16, max_conns=32, node_add_prob=0.5)
        algo = NEAT(cfg, seed=seed)
        out = []
        for _ in range(4):
            pop = algo.ask()
            f = prob(pop, cfg)
            algo.tell(pop, f)
            out += [pop.nodes.numpy(), pop.conns.numpy(), f.numpy()]
        return out

    a, b, c = run(5), run(5), run(6)
    assert all(np.array_equal(u, v, equal_nan=True) for u, v in zip(a, b))
    assert not all(np.array_equal(u, v, equal_nan=True) for u, v in zip(a, c))


def test_a_substrate_built_directly_as_a_dataclass_is_checked_like_custom():
    """Substrate(...) called as the dataclass it is (PUREPLES' Substrate(input_coordinates,
    output_coordinates) habit): plain lists work as in Substrate.custom, and bad conns are
    ConfigErrors (duplicates were summed, a connection into an input silently kept, an index past
    the nodes a numpy IndexError, a list of conns a TypeError)."""
    ins, outs = [(-1.0, -1.0), (1.0, -1.0)], [(0.0, 1.0)]
    direct = Substrate(ins, [], outs, [(0, 2), (1, 2)])
    custom = Substrate.custom(ins, [], outs, [(0, 2), (1, 2)])
    for field in ("input_coords", "hidden_coords", "output_coords", "conns"):
        np.testing.assert_array_equal(getattr(direct, field), getattr(custom, field))
    hn = HyperNEAT(direct, activation_steps=2)
    cfg = hn.cppn_config(pop_size=2)
    assert hn.forward(hn.decode(NEAT(cfg, seed=0).ask(), cfg), np.ones((3, 2), np.float32)).shape == (2, 3, 1)
    for conns, match in (([(0, 2), (0, 2)], r"more than once.*\[\[0, 2\]\]"),
                         ([(2, 0), (1, 2)], r"cannot end in an input node.*\[\[2, 0\]\]"),
                         ([(0, 5)], r"indices in \[0, 3\).*\[\[0, 5\]\]"),
                         ([(-1, 2)], r"indices in \[0, 3\)")):
        with pytest.raises(ConfigError, match=match):
            Substrate(np.float32(ins), np.zeros((0, 2), np.float32), np.float32(outs), np.int32(conns))
    with pytest.raises(ConfigError, match="layers must be the node counts"):
        Substrate(ins, [], outs, [(0, 2), (1, 2)], layers=(2, 2))
    with pytest.raises(ConfigError, match="from one layer to the next"):
        Substrate(ins, [(0.0, 0.0)], outs, [(0, 3), (1, 2), (2, 3)], layers=(2, 1, 1))
    layered = Substrate.layered([ins, [(0.0, 0.0)], outs])
    assert layered.layers == (2, 1, 1) and layered.conns.tolist() == [[0, 2], [1, 2], [2, 3]]
