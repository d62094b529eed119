"""``keras.layers.Bidirectional`` and ``TimeDistributed``: run through the translators of the layers
they wrap.

A wrapper's weights are its inner layers' weights in ``layer.weights`` order (a variable shared by two
inner calls appears once), each initialized by the inner layer's own translator.

* ``Bidirectional(rnn)`` runs the forward and the backward layer (the backward one is Keras's copy with
  ``go_backwards`` flipped, or the ``backward_layer`` given) over the whole sequence, flips the backward
  outputs back in time when ``return_sequences``, and merges them (``concat``, ``sum``, ``mul``, ``ave``
  or ``None``: both outputs).  Both directions start from zeros at every call: it carries no state
  across calls (a recurrent :class:`tfevo.nn.Policy` refuses it where it sees the time axis).
* ``TimeDistributed(layer)`` folds the time axis into the members' batch, ``[n, B, T, ...] ->
  [n, B*T, ...]``, runs the inner layer's translator (any supported layer, or a nested Sequential or
  functional model walked layer by layer), and unfolds the result.
"""

from __future__ import annotations

import keras
import tensorflow as tf

from tfevo.core import ConfigError
from tfevo.nn.translators.base import Translator, register_translator, translator_for
from tfevo.nn.translators.graph import check_inference_call, layer_nodes, make_translator

L = keras.layers


class _Composite(Translator):
    """A translator built from the translators of inner layers (:meth:`_set_parts`)."""

    def _set_parts(self, parts) -> None:
        self.parts = list(parts)
        self._variables, self._slots, self._owner = [], [], {}
        pos = {}
        for tr in self.parts:
            slot = []
            for v in tr.weight_order():
                if id(v) not in pos:
                    pos[id(v)] = len(self._variables)
                    self._variables.append(v)
                    self._owner[id(v)] = tr
                slot.append(pos[id(v)])
            self._slots.append(slot)
        self.evolved_statistics = tuple(sorted({n for tr in self.parts for n in tr.evolved_statistics}))

    def weight_order(self) -> list:
        mine = {id(v) for v in self._variables}
        extra = [v.path for v in self.layer.weights if id(v) not in mine]
        if extra:
            raise ConfigError(f"layer {self.name} has weights its inner layers do not use: {extra}")
        return list(self._variables)  # (the flat layout keeps template.weights order whatever this one is)

    def initializer(self, variable):
        return self._owner[id(variable)].initializer(variable)

    def part_weights(self, k: int, weights: list) -> list:
        """The weights of part ``k`` out of this translator's ``weights`` (in :meth:`weight_order`)."""
        return [weights[i] for i in self._slots[k]]


def _inner_translator(owner, layer, input_shapes, output_shapes, conv_method):
    """The translator of a wrapped layer (a nested model: :class:`ModelTranslator`)."""
    if isinstance(layer, keras.Model):
        return ModelTranslator(layer, input_shapes, output_shapes, conv_method=conv_method)
    cls = translator_for(layer)
    if cls is None:
        from tfevo.nn.translators.base import supported_layers

        raise ConfigError(f"layer {owner.name} wraps {layer.name!r} ({type(layer).__name__}), which has no "
                          f"translator; supported: {', '.join(supported_layers())}")
    return cls(layer, input_shapes, output_shapes, conv_method=conv_method)


class ModelTranslator(_Composite):
    """A nested Sequential or functional model inside a wrapper, walked node by node (not registered: a
    model nested directly in the template is inlined by the template reader instead)."""

    num_inputs = None

    def check(self):
        from tfevo._tf_private import keras_functional_graph

        graph = keras_functional_graph(self.layer)
        if graph is None:
            raise ConfigError(f"nested model {self.name}: only built Sequential and functional models can be "
                              "wrapped (start a Sequential with keras.Input(shape))")
        self._in_keys = [id(t) for t in graph.inputs]
        self._out_keys = [id(t) for t in graph.outputs]
        self._steps = []
        for op, node in layer_nodes(graph):
            if isinstance(op, keras.Model):
                check_inference_call(f"{op.name!r} ({type(op).__name__})", node)
                tr = ModelTranslator(op, [t.shape for t in node.input_tensors], [t.shape for t in node.outputs],
                                     conv_method=self.conv_method)
            else:
                tr = make_translator(op, node, self.conv_method)
            self._steps.append((tr, [id(t) for t in node.input_tensors], [id(t) for t in node.outputs]))
        self._set_parts([tr for tr, _, _ in self._steps])

    def forward(self, inputs, weights, indices):
        tensors = dict(zip(self._in_keys, inputs))
        for k, (tr, ins, outs) in enumerate(self._steps):
            y = tr.forward([tensors[i] for i in ins], self.part_weights(k, weights), indices)
            for key, t in zip(outs, y if isinstance(y, (list, tuple)) else [y]):
                tensors[key] = t
        ys = [tensors[k] for k in self._out_keys]
        return ys[0] if len(ys) == 1 else ys


@register_translator(L.TimeDistributed)
class TimeDistributedTranslator(_Composite):
    def check(self):
        shape = self.input_shapes[0]
        if len(shape) < 3:
            raise ConfigError(f"layer {self.name}: expects inputs (batch, time, ...), got {shape}")
        out = self.output_shapes[0] if self.output_shapes else ()
        inner = _inner_translator(self, self.layer.layer, [(None, *shape[2:])], [(None, *out[2:])] if out else [],
                                  self.conv_method)
        self._set_parts([inner])

    def forward(self, inputs, weights, indices):
        x = inputs[0]  # [n, B, T, ...]
        lead = tf.shape(x)[:3]
        folded = tf.reshape(x, tf.concat([lead[:1], [-1], tf.shape(x)[3:]], 0))
        folded.set_shape(x.shape[:1].concatenate([None]).concatenate(x.shape[3:]))
        y = self.parts[0].forward([folded], self.part_weights(0, weights), indices)
        if isinstance(y, (list, tuple)):
            raise ConfigError(f"layer {self.name}: the wrapped layer returns {len(y)} tensors; one is supported")
        out = tf.reshape(y, tf.concat([lead, tf.shape(y)[2:]], 0))
        out.set_shape(x.shape[:3].concatenate(y.shape[2:]))
        return out


_MERGE_MODES = ("concat", "sum", "mul", "ave", None)


@register_translator(L.Bidirectional)
class BidirectionalTranslator(_Composite):
    open_time = True

    def check(self):
        from tfevo.nn.translators.recurrent import _RecurrentBase

        layer = self.layer
        if layer.merge_mode not in _MERGE_MODES:
            raise ConfigError(f"layer {self.name}: merge_mode={layer.merge_mode!r}; accepted: {_MERGE_MODES}")
        if getattr(layer, "stateful", False):
            raise ConfigError(f"layer {self.name}: stateful=True is not supported (a Bidirectional layer reads "
                              "whole sequences; it carries no state across calls)")
        parts = []
        for sub in (layer.forward_layer, layer.backward_layer):
            cls = translator_for(sub)
            if cls is None or not issubclass(cls, _RecurrentBase):
                raise ConfigError(f"layer {self.name}: wraps {sub.name!r} ({type(sub).__name__}); accepted: "
                                  "SimpleRNN, GRU, LSTM")
            parts.append(cls(sub, self.input_shapes[:1], [], conv_method=self.conv_method))
        self._set_parts(parts)

    def forward(self, inputs, weights, indices):
        y = self.parts[0].forward(inputs, self.part_weights(0, weights), indices)
        y_rev = self.parts[1].forward(inputs, self.part_weights(1, weights), indices)
        states = []
        if self.layer.return_state:
            states = list(y[1:]) + list(y_rev[1:])
            y, y_rev = y[0], y_rev[0]
        if self.layer.return_sequences:
            y_rev = tf.reverse(y_rev, [2])
        mode = self.layer.merge_mode
        if mode == "concat":
            out = [tf.concat([y, y_rev], -1)]
        elif mode == "sum":
            out = [y + y_rev]
        elif mode == "ave":
            out = [(y + y_rev) / 2]
        elif mode == "mul":
            out = [y * y_rev]
        else:
            out = [y, y_rev]
        out += states
        return out[0] if len(out) == 1 else out
