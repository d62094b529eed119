"""Emitters: where MAP-Elites' new candidates come from.

An emitter is a ``tf.Module`` with ``batch_size`` and

* ``emit(archive, seed) -> [batch_size, D]`` new candidate solutions, and
* ``tell(solutions, fitness, descriptors, add_result)`` (optional feedback;
  an emitter with ``wants_incumbent = True`` also receives
  ``incumbent=(occupied, threshold)`` of each candidate's cell before the
  batch, which the CMA-ME emitter ranks by).

Variation emitters sample parents uniformly among filled cells.  All
randomness is stateless from the seed passed in, so a :class:`MAPElites` run
is reproducible and resumes exactly.

The base class and the shared sampler live in :mod:`tfevo.qd.emitter_base`,
the variation emitters in :mod:`tfevo.qd.variation` and CMA-ME's
:class:`ESEmitter` in :mod:`tfevo.qd.cma_me`; this module gathers them.
"""

from tfevo.qd.cma_me import AddResultLike, ESEmitter  # noqa: F401
from tfevo.qd.emitter_base import Emitter, standard_normal  # noqa: F401
from tfevo.qd.variation import GaussianEmitter, IsoLineEmitter, PolynomialMutationEmitter

__all__ = ["standard_normal", "Emitter", "GaussianEmitter", "IsoLineEmitter", "PolynomialMutationEmitter",
           "ESEmitter"]
