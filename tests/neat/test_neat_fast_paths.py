"""NEAT runs bit for bit the same with the private-API fast paths off (as on a GPU machine)."""

import numpy as np

from tfevo import _tf_private
from tfevo.neat import NEAT, XOR


def _run(fast: bool):
    prob = XOR()
    cfg = prob.config(pop_size=24, max_nodes=8, max_conns=16)
    with _tf_private.fast_paths(fast):
        algo = NEAT(cfg, seed=3)
        for _ in range(3):
            pop = algo.ask()
            algo.tell(pop, prob(pop, cfg))
        return [v.numpy() for v in (algo.nodes, algo.conns, algo.member_species, algo.next_node_key)]


def test_neat_same_bits_with_and_without_fast_paths():
    on, off = _run(True), _run(False)
    for a, b in zip(on, off):
        np.testing.assert_array_equal(a, b)
