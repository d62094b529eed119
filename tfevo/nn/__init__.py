"""Population-batched neural networks for neuroevolution.

* :class:`PopulationDense`, :class:`PopulationConv2D` -- Keras layers holding
  one set of weights per member (leading axis ``P``), with functional forms
  :func:`population_dense`, :func:`population_conv2d` that take the weights
  as arguments.
* :class:`PopulationModel` -- turns an ordinary Keras template model into P
  networks: flat parameter layout ``[P, D]``, stateless initialization,
  Keras import/export, and one batched forward pass (optionally for a subset
  of members through :func:`indexed_matmul`).
* :class:`Policy`, :func:`mlp`, :func:`nature_dqn` -- actions from
  observations for a whole population.
"""

from tfevo._lazy import import_parts

__all__ = import_parts("tfevo.nn", ("indexed", "init", "layers", "model", "policy"), globals())

# The C++ kernels' gradients, registered once the whole package is loaded
# (they differentiate through the layers' reference paths).
from tfevo.nn import gradients as _gradients  # noqa: E402,F401
