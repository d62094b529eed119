"""A small instance of every registered algorithm and a fitness for its population, for the
tests that sweep the registry (GPU readiness, traced and eager)."""

import tensorflow as tf

from tfevo import registry


def make_algorithm(name):
    """``registry.get("strategy", name)`` built small: 5-D vectors, NEAT on XOR, GP on 2 inputs,
    MAP-Elites on a 4x4 grid."""
    from tfevo.core import Algorithm

    cls = registry.get("strategy", name)
    if name == "neat":
        from tfevo.neat import XOR

        return cls(XOR().config(pop_size=16, max_nodes=8, max_conns=12), seed=0)
    if name == "gp":
        from tfevo.gp import GPConfig

        return cls(GPConfig(popsize=16, max_len=16, num_vars=2), seed=0)
    if name == "map_elites":
        from tfevo.qd import GridArchive, IsoLineEmitter

        archive = GridArchive(4, [4, 4], [(0, 1), (0, 1)])
        return cls(archive, [IsoLineEmitter(4, 8, bounds=(0, 1))], init_bounds=(0, 1), seed=0)
    assert issubclass(cls, Algorithm) or hasattr(cls, "ask"), name
    return cls(num_dims=5, popsize=8, seed=0)


def fitness_of(pop):
    """Negated sphere for vector populations, fixed normals for genome structures."""
    if isinstance(pop, tf.Tensor):
        return -tf.reduce_sum(tf.square(tf.cast(pop, tf.float32)), axis=1)
    n = tf.shape(tf.nest.flatten(pop)[0])[0]
    return tf.random.stateless_normal([n], [1, 2])


def one_generation(algo, name):
    """ask, then tell (MAP-Elites gets the first two coordinates as descriptors)."""
    pop = algo.ask()
    if name == "map_elites":
        algo.tell(pop, fitness_of(pop), tf.clip_by_value(pop[:, :2], 0.0, 1.0))
    else:
        algo.tell(pop, fitness_of(pop))
