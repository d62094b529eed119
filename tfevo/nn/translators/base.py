"""The translator contract and its registry.

A *translator* turns one call of a Keras layer in a template into a
population op: the same computation for ``n`` members at once, each with its
own weights.  :class:`tfevo.nn.PopulationModel` walks the template's
functional graph and, for each layer call, instantiates the translator
registered for the layer's exact Keras class (a subclass may change ``call``,
so it is not assumed to compute the same thing).

Tensors seen by a translator carry two leading axes, members and batch:
``[n, B, *sample_shape]``.  Weights arrive as ``[n or M, *weight_shape]``; with
``indices`` (int32 ``[n]``) row ``i`` of the inputs belongs to member
``indices[i]`` of the weights (``M`` members in all).

Writing one (see docs/nn_translators.md)::

    @register_translator(keras.layers.Dense)
    class DenseTranslator(Translator):
        weight_names = ("kernel", "bias")            # order of the population op's weights
        def forward(self, inputs, weights, indices):
            ...                                      # return the output [n, B, ...]
"""

from __future__ import annotations

import abc
import functools
from typing import Callable, Sequence

import keras
import tensorflow as tf

from tfevo.core import ConfigError

__all__ = ["Translator", "register_translator", "translator_for", "supported_layers", "PopulationInit",
           "select", "per_member", "merge_leading", "split_leading", "float32_layer", "TRANSLATOR_DOCS"]

#: The page explaining how to write a translator (named in the unsupported-layer error).
TRANSLATOR_DOCS = "docs/nn_translators.md"

_REGISTRY: dict = {}


def register_translator(*layer_classes):
    """Class decorator: the decorated :class:`Translator` handles these exact Keras layer classes."""
    if not layer_classes or not all(isinstance(c, type) and issubclass(c, keras.layers.Layer) for c in layer_classes):
        raise ConfigError(f"register_translator needs Keras layer classes, got {layer_classes!r}")

    def deco(cls):
        if not (isinstance(cls, type) and issubclass(cls, Translator)):
            raise ConfigError(f"register_translator decorates Translator subclasses, got {cls!r}")
        for c in layer_classes:
            _REGISTRY[c] = cls
        cls.layer_classes = tuple(getattr(cls, "layer_classes", ())) + tuple(layer_classes)
        return cls

    return deco


def translator_for(layer):
    """The translator class registered for ``type(layer)``, or ``None``."""
    return _REGISTRY.get(type(layer))


def supported_layers() -> list:
    """Names of the Keras layer classes that have a translator, sorted."""
    return sorted({c.__name__ for c in _REGISTRY})


def registry() -> dict:
    """``{keras layer class: translator class}`` (a copy)."""
    return dict(_REGISTRY)


class PopulationInit:
    """An initializer a translator computes itself: ``fn(shape, popsize, seed) -> [popsize, *shape]``
    (stateless ops only, so the same seed gives the same population)."""

    def __init__(self, fn: Callable, description: str = ""):
        self.fn = fn
        self.description = description

    def __call__(self, shape, popsize, seed):
        return self.fn(tuple(shape), int(popsize), seed)


class Translator(abc.ABC):
    """Population op of one call of a Keras layer.

    Subclasses set :attr:`weight_names` (or override :meth:`weight_order`) and
    implement :meth:`forward`; they may also provide :meth:`forward_flat` (a
    kernel reading the weights in place from the flat ``[P, D]`` parameters)
    and, for recurrent layers, :attr:`state_sizes` plus :meth:`forward_state`.

    Attributes set on construction:
      layer: the Keras layer.
      input_shapes: Keras shapes (batch axis ``None`` first) of the call's inputs.
      output_shapes: Keras shapes of the call's outputs.
      name: ``"'<layer name>' (<class>)"`` for messages.
    """

    #: variable names (``v.name``) in the order :meth:`forward` receives them; ``()``: no weights.
    weight_names: Sequence[str] = ()
    #: names of weights that may be absent (e.g. ``bias`` with ``use_bias=False``).
    optional_weights: Sequence[str] = ("bias", "gamma", "beta")
    #: whether :meth:`forward_flat` accepts ``input_scale`` (reads raw uint8 input itself).
    takes_input_scale: bool = False
    #: per-sample sizes of the recurrent state vectors this call carries (empty: stateless).
    state_sizes: tuple = ()
    #: whether the layer reads a time axis left open (``keras.Input((None, features))``) on its own, without
    #: carrying state (a Bidirectional layer); recurrent layers (:attr:`state_sizes`) always may.
    open_time: bool = False
    #: number of inputs the layer call takes (``None``: any number, e.g. merge layers).
    num_inputs: int | None = 1
    #: names of variables Keras marks non-trainable that are evolved all the same while the layer is
    #: trainable (BatchNormalization's moving statistics); any other non-trainable variable, and every
    #: variable of a layer with ``trainable=False``, is a frozen constant of the template.
    evolved_statistics: Sequence[str] = ()

    def __init__(self, layer, input_shapes, output_shapes, conv_method: str = "auto", call_kwargs=None,
                 input_roles=None):
        self.layer = layer
        self.input_shapes = [tuple(s) for s in input_shapes]
        self.output_shapes = [tuple(s) for s in output_shapes]
        self.conv_method = conv_method
        #: the call's keyword arguments that are not tensors (e.g. ``use_causal_mask=True``)
        self.call_kwargs = dict(call_kwargs or {})
        #: per input tensor, the name of the call argument it was given as (``"query"``, ``"mask"``...),
        #: or ``None`` where unknown
        self.input_roles = tuple(input_roles) if input_roles is not None else (None,) * len(self.input_shapes)
        self.name = f"{layer.name!r} ({type(layer).__name__})"
        if self.num_inputs is not None and len(self.input_shapes) != self.num_inputs:
            extra = (" (tensors given as call arguments, e.g. a recurrent layer's initial_state= or a mask=, "
                     "are not supported)" if len(self.input_shapes) > self.num_inputs else "")
            raise ConfigError(f"layer {self.name}: takes {self.num_inputs} input(s), called on "
                              f"{len(self.input_shapes)}{extra}")
        self.check()

    # -------------------------------------------------------------- contract
    def check(self) -> None:
        """Raise :class:`ConfigError` for a configuration the forward does not compute exactly."""

    def weight_order(self) -> list:
        """The layer's variables in the order :meth:`forward` expects them."""
        by_name = {v.name: v for v in self.layer.weights}
        names = [n for n in self.weight_names if n in by_name or n not in self.optional_weights]
        if set(names) != set(by_name):
            raise ConfigError(
                f"layer {self.name} has weights {sorted(by_name)}; expected {names} "
                "(LoRA, quantized or custom variants are not supported)")
        return [by_name[n] for n in names]

    def initializer(self, variable):
        """Initializer of one of the layer's variables: a Keras initializer or a :class:`PopulationInit`."""
        return getattr(self.layer, f"{variable.name}_initializer")

    @abc.abstractmethod
    def forward(self, inputs: list, weights: list, indices):
        """``inputs`` (list of ``[n, B, ...]``), ``weights`` (list, see module doc) -> output(s)."""

    #: ``forward_flat(inputs, params [P, D], offsets, indices, input_scale=None)`` reading the
    #: weights in place from flat parameters (``offsets``: column of each weight), or ``None``.
    forward_flat = None

    def forward_state(self, inputs: list, weights: list, indices, states: list):
        """Recurrent layers: ``(output(s), new_states)`` starting from ``states`` (``[n, B, size]`` each)."""
        raise ConfigError(f"layer {self.name} carries no state")

    #: the layer's data_format is channels_first: a convolution then computes channels last between
    #: :meth:`to_channels_last` and :meth:`from_channels_last`
    channels_first: bool = False

    def to_channels_last(self, x):
        """``[n, B, C, *spatial] -> [n, B, *spatial, C]`` for a channels-first layer, else ``x``."""
        if not self.channels_first:
            return x
        r = x.shape.rank
        return tf.transpose(x, [0, 1, *range(3, r), 2])

    def from_channels_last(self, y):
        """The inverse of :meth:`to_channels_last` (back to the layer's channels-first output)."""
        if not self.channels_first:
            return y
        r = y.shape.rank
        return tf.transpose(y, [0, 1, r - 1, *range(2, r - 1)])

    @functools.cached_property
    def keras_layer(self):
        """The Keras layer a translator calls on population tensors: :func:`float32_layer` of :attr:`layer`."""
        return float32_layer(self.layer)

    def __repr__(self):
        return f"{type(self).__name__}({self.name})"


# ---------------------------------------------------------------- helpers
def select(w, indices):
    """The members' rows of a weight: ``w`` itself without ``indices``."""
    return w if indices is None else tf.gather(w, indices)


def per_member(v, rank: int, axes: Sequence[int] | None = None):
    """``v [n, *s]`` reshaped to broadcast against ``[n, B, ...]`` of ``rank``: the dims of ``s`` go to
    ``axes`` (population-tensor axes; default the last ones), every other axis is 1."""
    s = v.shape.as_list()[1:]
    if axes is None:
        axes = list(range(rank - len(s), rank))
    shape = [tf.shape(v)[0]] + [1] * (rank - 1)
    for j, a in enumerate(axes):
        shape[a] = s[j]
    return tf.reshape(v, shape)


def merge_leading(x):
    """``[n, B, ...] -> [n*B, ...]`` (a Keras batch)."""
    return tf.reshape(x, tf.concat([[-1], tf.shape(x)[2:]], 0))


def split_leading(y, like):
    """``[n*B, ...] -> [n, B, ...]`` with ``n, B`` taken from ``like``."""
    out = tf.reshape(y, tf.concat([tf.shape(like)[:2], tf.shape(y)[1:]], 0))
    out.set_shape(like.shape[:2].concatenate(y.shape[1:]))
    return out


def float32_layer(layer):
    """``layer`` itself when it computes in float32, else a copy of the weightless ``layer`` with
    ``dtype="float32"``: the population computes in float32 whatever the template's dtype policy
    (``mixed_float16``, ``mixed_bfloat16``, ``float64``), and the template's own layer would cast its
    float32 input to its compute dtype and return that dtype.  A layer with weights, or one its config
    cannot rebuild, is returned as it is (its output is then cast back to float32 by the caller)."""
    if keras.backend.standardize_dtype(layer.compute_dtype) == "float32" or layer.weights:
        return layer
    try:
        cfg = layer.get_config()
        cfg["dtype"] = "float32"
        return type(layer).from_config(cfg)
    except (TypeError, ValueError, NotImplementedError, KeyError):
        return layer


def call_float32(layer, x):
    """``layer(x)`` with every float output cast to ``x``'s dtype (a list or one tensor)."""
    y = layer(x)
    dtype = (x[0] if isinstance(x, (list, tuple)) else x).dtype

    def cast(t):
        return tf.cast(t, dtype) if t.dtype.is_floating and t.dtype != dtype else t

    return [cast(t) for t in y] if isinstance(y, (list, tuple)) else cast(y)


class PerSampleTranslator(Translator):
    """A weightless layer that maps each sample on its own (pooling, padding, merges...): the members'
    batches are merged into one Keras batch ``[n*B, ...]``, the Keras layer itself runs on it, and the
    result is split back -- so the population op is the layer's own computation."""

    def forward(self, inputs, weights, indices):
        merged = [merge_leading(x) for x in inputs]
        y = call_float32(self.keras_layer, merged if self.num_inputs != 1 else merged[0])
        return split_leading(y, inputs[0])
