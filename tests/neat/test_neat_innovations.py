"""Innovation markers and gene alignment as neat-python 2.0 has them: a new
connection's marker is shared only by the children adding the same pair in
the same generation (its ``InnovationTracker`` is reset every generation), so
a pair deleted and added again is a new gene for crossover; the compatibility
distance aligns connections by (in, out) key, whatever their markers.  The
reference and the C++ kernels are both checked."""

import types

import numpy as np
import pytest
import tensorflow as tf

from tfevo import kernels
from tfevo.neat import NEATConfig
from tfevo.neat import _breed_op as B
from tfevo.neat import _speciate_op as so
from tfevo.neat import functions as F
from tfevo.neat import operators as O
from tfevo.neat.speciation import distance_matrix

_USE = [False] + ([True] if kernels.built("TfevoNeatBreed") else [])
_USE_SP = [False] + ([True] if kernels.built("TfevoNeatSpeciate") else [])
_QUIET = dict(bias_mutate_rate=0.0, bias_replace_rate=0.0, response_mutate_rate=0.0, weight_mutate_rate=0.0,
              weight_replace_rate=0.0, enabled_mutate_rate=0.0, node_add_prob=0.0, node_delete_prob=0.0,
              conn_delete_prob=0.0)


def _cfg(P, **kw):
    return NEATConfig(**{**dict(num_inputs=1, num_outputs=1, pop_size=P, max_nodes=4, max_conns=4), **_QUIET, **kw})


def _breed(cfg, nodes, conns, p1, p2, seed, nm, use_op):
    P, N, C = nodes.shape[0], nodes.shape[1], conns.shape[1]
    out = B.breed(cfg, tf.constant(nodes), tf.constant(conns), tf.constant(p1, tf.int32), tf.constant(p2, tf.int32),
                  tf.zeros([P], tf.bool), O.crossover_words(P, N, C, tf.constant([seed, 1], tf.int64)),
                  O.mutation_uniforms(cfg, P, N, C, tf.constant([seed, 2], tf.int64)),
                  tf.constant(10, tf.int64), tf.constant(nm, tf.int64), use_op=use_op)
    return out[0].numpy(), out[1].numpy(), int(out[3].numpy())


def _start(P):
    """Genome 0 holds connection 0 -> 1 (marker 0, disabled, weight 0.75);
    the others had it deleted: they hold no connection."""
    nodes = np.full((P, 4, 5), np.nan, np.float32)
    nodes[:, :2] = [[0, 0, 1, F.aggregation_id("sum"), F.activation_id("sigmoid")],
                    [1, 0.5, 1, F.aggregation_id("sum"), F.activation_id("sigmoid")]]
    conns = np.full((P, 4, 5), np.nan, np.float32)
    conns[0, 0] = [0, 1, 0.0, 0.75, 0]
    return nodes, conns


@pytest.mark.parametrize("use_op", _USE)
@pytest.mark.parametrize("per_generation", [True, False])
def test_readded_pair_gets_a_fresh_marker_shared_by_its_generation(use_op, per_generation):
    P, nm = 64, 5
    cfg = _cfg(P, conn_add_prob=1.0, per_generation_innovations=per_generation)
    nodes, conns = _start(P)
    idx = np.arange(P)
    _, c, nm_out = _breed(cfg, nodes, conns, idx, idx, 0, nm, use_op)
    assert c[0, 0, 4] == 0  # already had the pair: unchanged
    added = ~np.isnan(c[1:, 0, 0])
    assert added.sum() > 10 and (c[1:][added, 0, :2] == [0, 1]).all()
    if per_generation:  # neat-python 2.0: one new innovation for every child adding 0 -> 1 now
        assert (c[1:][added, 0, 4] == nm).all() and nm_out == nm + 1
    else:  # population-wide markers: the pair's marker 0
        assert (c[1:][added, 0, 4] == 0).all() and nm_out == nm


@pytest.mark.parametrize("use_op", _USE)
def test_readded_pair_is_not_homologous_in_crossover(use_op):
    """Child of (re-added pair, fitter) x (old pair): exactly the fitter
    parent's gene (no weight from the other parent, no 3/4 disable rule),
    as neat-python's configure_crossover with different innovations."""
    P = 64
    cfg = _cfg(P, conn_add_prob=1.0)
    nodes, conns = _start(P)
    idx = np.arange(P)
    n1, c1, nm = _breed(cfg, nodes, conns, idx, idx, 0, 5, use_op)
    k = 1 + int(np.flatnonzero(~np.isnan(c1[1:, 0, 0]))[0])  # a child that added 0 -> 1 again
    assert c1[k, 0, 4] != c1[0, 0, 4] and c1[k, 0, 2] == 1.0
    n2, c2, _ = _breed(_cfg(P), n1, c1, np.full(P, k), np.zeros(P, int), 1, nm, use_op)
    np.testing.assert_array_equal(c2, np.broadcast_to(c1[k], c2.shape))
    # the same pair with one marker is homologous: weights mix and 7/8 of the children are disabled
    c1[0, 0, 4] = c1[k, 0, 4]
    _, c3, _ = _breed(_cfg(P), n1, c1, np.full(P, k), np.zeros(P, int), 1, nm, use_op)
    assert (c3[:, 0, 3] == 0.75).any() and (c3[:, 0, 2] == 0.0).mean() > 0.6


def _hand_pair():
    """Two genomes (2 inputs, output 2, hidden 3); pair (1, 3) has different
    markers (deleted and added again), and A holds (0, 3), B does not."""
    s, t = F.activation_id("sigmoid"), F.activation_id("tanh")
    g = F.aggregation_id("sum")
    nodes = np.full((2, 5, 5), np.nan, np.float32)
    nodes[:, 0] = [0, 0, 1, g, s]
    nodes[:, 1] = [1, 0, 1, g, s]
    nodes[0, 2], nodes[0, 3] = [2, 0.1, 1, g, s], [3, -0.2, 1, g, s]
    nodes[1, 2], nodes[1, 3] = [2, 0.3, 1, g, s], [3, -0.2, 1, g, t]
    conns = np.full((2, 6, 5), np.nan, np.float32)
    conns[0, :4] = [[0, 2, 1, 0.5, 0], [1, 3, 1, 1.0, 1], [3, 2, 1, -1.0, 2], [0, 3, 0, 0.25, 7]]
    conns[1, [0, 2, 5]] = [[0, 2, 1, 0.1, 0], [1, 3, 0, -0.5, 9], [3, 2, 1, -1.5, 2]]
    return nodes, conns


def _neat_python_distance(nodes, conns, dc, wc):
    neat = pytest.importorskip("neat")
    gs = []
    for p in range(2):
        gen = neat.DefaultGenome(p)
        for row in nodes[p, 2:]:
            if np.isnan(row[0]):
                continue
            ng = neat.genes.DefaultNodeGene(int(row[0]))
            ng.bias, ng.response, ng.time_constant = float(row[1]), float(row[2]), 1.0
            ng.aggregation, ng.activation = str(row[3]), str(row[4])
            gen.nodes[ng.key] = ng
        for row in conns[p]:
            if np.isnan(row[0]):
                continue
            cg = neat.genes.DefaultConnectionGene((int(row[0]), int(row[1])), innovation=int(row[4]))
            cg.weight, cg.enabled = float(row[3]), bool(row[2])
            gen.connections[cg.key] = cg
        gs.append(gen)
    cfg = types.SimpleNamespace(compatibility_disjoint_coefficient=dc, compatibility_weight_coefficient=wc)
    return gs[0].distance(gs[1], cfg)


@pytest.mark.parametrize("use_op", _USE_SP)
def test_distance_aligns_connections_by_key_as_neat_python(use_op):
    nodes, conns = _hand_pair()
    dc, wc = 1.0, 0.5
    want = _neat_python_distance(nodes, conns, dc, wc)
    cfg = NEATConfig(num_inputs=2, num_outputs=1, pop_size=2, max_nodes=5, max_conns=6, max_species=4,
                     compatibility_disjoint_coefficient=dc, compatibility_weight_coefficient=wc)
    d = distance_matrix(cfg, tf.constant(nodes[:1]), tf.constant(conns[:1]), tf.constant(nodes), tf.constant(conns))
    assert abs(float(d[0, 1]) - want) < 1e-5 and float(d[0, 0]) == 0.0
    # the speciation step (reference or kernel): B joins A's species just above that distance
    S = 4
    for thr, same in ((want + 0.05, True), (want - 0.05, False)):
        c = NEATConfig(**{**cfg.__dict__, "compatibility_threshold": thr})
        out = so.speciate(c, nodes, conns, np.full((S, 5, 5), np.nan, np.float32),
                          np.full((S, 6, 5), np.nan, np.float32), np.zeros(S, bool), np.full(S, -1, np.int64),
                          np.zeros(S, np.int64), np.zeros(S, np.float32), np.zeros(S, np.int64), np.int64(0),
                          np.int64(0), use_op=use_op)
        sp = out[0].numpy()
        assert (sp[0] == sp[1]) == same, (thr, sp)
