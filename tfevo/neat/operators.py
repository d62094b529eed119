"""NEAT's whole-population variation and distance operators in one namespace.

The code lives in the modules named after neat-python's:
:mod:`~tfevo.neat.crossover`, :mod:`~tfevo.neat.mutation` (structural),
:mod:`~tfevo.neat.genes` (attributes), :mod:`~tfevo.neat.graphs` (cycle
check), :mod:`~tfevo.neat.speciation` (compatibility distance) and the slot
helpers of :mod:`~tfevo.neat.genome`.  All of them work on every genome at
once (leading axis P) with masks and ``tf.where``; nothing loops over genomes
or genes in Python.
"""

from tfevo.neat.crossover import crossover, crossover_given, crossover_words
from tfevo.neat.genes import attr_columns as _attr_columns
from tfevo.neat.genes import mutate_attributes
from tfevo.neat.genome import align, compact, used_width
from tfevo.neat.graphs import reachable_along, reachable_along_dense, reachable_from
from tfevo.neat.mutation import mutate, mutate_given, mutate_post, mutate_pre, mutation_uniforms, pair_markers
from tfevo.neat.speciation import distance_matrix, distance_one_to_many

__all__ = ["align", "used_width", "compact", "distance_one_to_many", "distance_matrix", "crossover",
           "crossover_given", "crossover_words", "mutate", "mutate_given", "mutate_pre", "mutate_post", "pair_markers",
           "mutation_uniforms", "mutate_attributes", "reachable_from", "reachable_along", "reachable_along_dense"]
