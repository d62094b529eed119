"""``to_neat_python``: a tfevo genome as neat-python's own ``DefaultGenome``, checked by
neat-python's FeedForwardNetwork and its compatibility distance."""

import os
import sys

import numpy as np
import pytest

from tfevo.core import ShapeError
from tfevo.neat import NEAT, NEATConfig, to_neat_python
from tfevo.neat.network import reference_forward

neat = pytest.importorskip("neat")
I, O, P = 3, 2, 24


def _config_file(tmp_path):
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks"))
    from bench_neat import NEAT_PY_CFG

    text = NEAT_PY_CFG.format(pop=P, nin=I, nout=O, thr=100.0, noterm=False)
    # several activations and aggregations, so the names (not only their ids) must survive
    text = (text.replace("activation_mutate_rate  = 0.0", "activation_mutate_rate  = 0.5")
            .replace("activation_options      = sigmoid", "activation_options      = sigmoid tanh relu")
            .replace("aggregation_mutate_rate = 0.0", "aggregation_mutate_rate = 0.3")
            .replace("aggregation_options     = sum", "aggregation_options     = sum product max")
            .replace("node_add_prob           = 0.2", "node_add_prob           = 0.6"))
    path = tmp_path / "neat.cfg"
    path.write_text(text)
    return str(path)


def _evolved(path, gens=6):
    cfg = NEATConfig.from_neat_python(path, max_nodes=20, max_conns=40)
    algo = NEAT(cfg, seed=3)
    rng = np.random.default_rng(0)
    for _ in range(gens):
        algo.tell(algo.ask(), rng.normal(size=cfg.pop_size))
    nodes, conns = (np.asarray(a) for a in algo.ask()[:2])
    return cfg, nodes, conns


def test_neat_python_computes_the_same_network(tmp_path):
    path = _config_file(tmp_path)
    cfg, nodes, conns = _evolved(path)
    npc = neat.Config(neat.DefaultGenome, neat.DefaultReproduction, neat.DefaultSpeciesSet, neat.DefaultStagnation,
                      path)
    x = np.random.default_rng(1).normal(size=(16, I))
    acts, aggs, hidden = set(), set(), 0
    for p in range(len(nodes)):
        g = to_neat_python(nodes[p], conns[p], cfg, key=p)
        assert g.key == p and sorted(k for k in g.nodes if k < O) == list(range(O))
        acts |= {n.activation for n in g.nodes.values()}
        aggs |= {n.aggregation for n in g.nodes.values()}
        hidden += sum(k >= O for k in g.nodes)
        ffn = neat.nn.FeedForwardNetwork.create(g, npc)
        got = np.array([ffn.activate(list(row)) for row in x])
        want = reference_forward(nodes[p], conns[p], x, I, O, float32=False)
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12, err_msg=f"member {p}")
    assert len(acts) > 1 and len(aggs) > 1 and hidden > 0  # the check covered names and hidden nodes


def test_the_population_forwards_compute_neat_pythons_networks(tmp_path):
    """The TensorFlow forward and the C++ kernel (where built) against neat-python's
    FeedForwardNetwork on the same genomes, e.g. a hidden node without enabled inputs:
    0 for every aggregation but product, whose empty product is 1."""
    import tensorflow as tf

    from tfevo import kernels
    from tfevo.neat import _forward_op as fo
    from tfevo.neat import network as net

    path = _config_file(tmp_path)
    cfg, nodes, conns = _evolved(path)
    npc = neat.Config(neat.DefaultGenome, neat.DefaultReproduction, neat.DefaultSpeciesSet, neat.DefaultStagnation,
                      path)
    x = np.random.default_rng(1).normal(size=(16, I)).astype(np.float32)
    want = np.stack([[neat.nn.FeedForwardNetwork.create(to_neat_python(nodes[p], conns[p], cfg), npc).activate(
        [float(v) for v in row]) for row in x] for p in range(len(nodes))])
    xs = tf.constant(np.broadcast_to(x, (len(nodes),) + x.shape))
    acts, aggs = cfg.activation_options, cfg.aggregation_options
    got = {"tf": fo.forward(net.transform(nodes, conns, I, True), xs, I, O, acts, aggs).numpy()}
    if kernels.built("TfevoNeatForward"):
        got["kernel"] = fo.forward(fo.prepare(nodes, conns, I, True, acts, aggs, use_op=True), xs, I, O).numpy()
    for name, y in got.items():
        np.testing.assert_allclose(y, want, rtol=2e-5, atol=2e-6, err_msg=name)


def test_genes_keys_and_flags_are_neat_pythons(tmp_path):
    cfg, nodes, conns = _evolved(_config_file(tmp_path))
    p = int(np.argmax([np.sum(conns[q, :, 2] < 0.5) for q in range(len(conns))]))  # most disabled genes
    g = to_neat_python(nodes[p], conns[p], cfg)
    rows = conns[p][~np.isnan(conns[p, :, 0])]
    key = lambda k: -(int(k) + 1) if k < I else int(k) - I  # noqa: E731
    assert set(g.connections) == {(key(r[0]), key(r[1])) for r in rows}
    for r in rows:
        c = g.connections[(key(r[0]), key(r[1]))]
        assert c.enabled == (r[2] > 0.5) and c.weight == float(r[3]) and c.innovation == int(r[4])
    assert all(k >= 0 for k in g.nodes) and len(g.nodes) == int(np.sum(~np.isnan(nodes[p, :, 0]))) - I


def test_a_pair_held_twice_is_one_gene_with_the_summed_weight():
    cfg = NEATConfig(num_inputs=1, num_outputs=1)
    nan = np.nan
    nodes = np.array([[0, 0, 1, 0, 0], [1, 0.5, 1, 0, 0]], np.float32)
    conns = np.array([[0, 1, 1, 0.25, 0], [0, 1, 1, 0.5, 7], [0, 1, 0, 9.0, 8], [nan] * 5], np.float32)
    g = to_neat_python(nodes, conns, cfg)
    (c,) = g.connections.values()
    assert c.key == (-1, 0) and c.enabled and c.weight == 0.75 and c.innovation == 0
    with pytest.raises(ShapeError, match="ONE genome"):
        to_neat_python(nodes[None], conns[None], cfg)


def test_the_keras_export_computes_neat_pythons_networks(tmp_path):
    from tfevo.neat import to_keras

    path = _config_file(tmp_path)
    cfg, nodes, conns = _evolved(path)
    npc = neat.Config(neat.DefaultGenome, neat.DefaultReproduction, neat.DefaultSpeciesSet, neat.DefaultStagnation,
                      path)
    x = np.random.default_rng(2).normal(size=(8, I)).astype(np.float32)
    for p in range(len(nodes)):
        ffn = neat.nn.FeedForwardNetwork.create(to_neat_python(nodes[p], conns[p], cfg), npc)
        want = np.array([ffn.activate([float(v) for v in row]) for row in x])
        got = np.asarray(to_keras(nodes[p], conns[p], cfg)(x))
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6, err_msg=f"member {p}")
