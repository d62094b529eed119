"""One translator per Keras layer type: how :class:`tfevo.nn.PopulationModel` runs each layer of a
template for a whole population (see :mod:`tfevo.nn.translators.base` and docs/nn_translators.md).

Importing this package registers every built-in translator; a new layer type is one new module that
defines a :class:`Translator` subclass decorated with :func:`register_translator`.
"""

from tfevo.nn.translators.base import (  # noqa: F401
    TRANSLATOR_DOCS, PerSampleTranslator, PopulationInit, Translator, merge_leading, per_member, register_translator,
    registry, select, split_leading, supported_layers, translator_for,
)
from tfevo.nn.translators import (  # noqa: F401  (registration happens on import)
    activation, batchnorm, conv1d, conv2d, conv3d, dense, depthwise, embedding, groupnorm, identity, layernorm,
    merge, pooling, preprocessing, recurrent, reshape, shape_ops,
)
from tfevo.nn.translators import attention, wrappers  # noqa: F401,E402  (sequence layers and wrappers)
from tfevo.nn.translators import conv_transpose  # noqa: F401  (registers Conv1D/2D/3DTranspose)

__all__ = ["Translator", "PerSampleTranslator", "PopulationInit", "register_translator", "translator_for",
           "supported_layers", "registry", "TRANSLATOR_DOCS", "select", "per_member", "merge_leading", "split_leading"]
