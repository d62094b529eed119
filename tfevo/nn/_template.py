"""Reading a Keras template into the steps of a :class:`tfevo.nn.PopulationModel`.

The functional graph (a Sequential's inner one) is walked node by node in
dependency order; each layer call becomes one ``_Step`` with the translator of
its Keras class (:mod:`tfevo.nn.translators`), the indices of its weights in
the flat layout and the ids of its input and output tensors.

Frozen weights (a layer with ``trainable=False``, or a variable Keras marks
non-trainable other than BatchNormalization's moving statistics) are not in the
flat layout: their values are read from the template once, here, and every
member shares them.  A step whose weights are all frozen runs a copy of its
Keras layer holding those values on the members' merged batch (one weight set,
broadcast by construction); a step with some frozen weights gives its
translator the constants broadcast to the members' rows.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from tfevo._tf_private import keras_functional_graph, keras_io_structure
from tfevo.core import ConfigError
from tfevo.nn.translators.graph import check_inference_call, layer_nodes, make_translator

L = keras.layers


@dataclasses.dataclass
class _Step:
    """One call of a template layer as a population op."""

    name: str
    tr: Any  # the layer's Translator
    weights: tuple  # indices into the flat layout's weight list (None: a frozen weight)
    inputs: tuple  # ids of the input symbolic tensors
    outputs: tuple  # ids of the output symbolic tensors
    layer: Any = None  # the template layer
    template_weights: tuple = ()  # indices into the template's weight list (``weights``: into the flat layout)
    consts: tuple = ()  # per weight of the step: None (evolved) or the frozen constant; () if none is frozen
    frozen_layer: Any = None  # all weights frozen: a copy of the Keras layer holding the constants (or None)

    @property
    def frozen(self) -> bool:
        """All of the step's weights are frozen constants (and it has some)."""
        return bool(self.consts) and all(c is not None for c in self.consts)

    def run_frozen(self, inputs):
        """The frozen layer on the members' inputs ``[n, B, ...]`` merged into one Keras batch."""
        from tfevo.nn.translators.base import call_float32, merge_leading, split_leading

        merged = [merge_leading(x) for x in inputs]
        y = call_float32(self.frozen_layer, merged[0] if len(merged) == 1 else merged)
        if isinstance(y, (list, tuple)):
            return [split_leading(t, inputs[0]) for t in y]
        return split_leading(y, inputs[0])

    def weights_for(self, get, inputs, indices):
        """``(weights, indices)`` for the translator: evolved weight ``i`` is ``get(i)``, a frozen one its
        constant broadcast to the rows of the evolved ones (to the ``n`` input rows, without
        ``indices``, when every weight is frozen)."""
        if not self.consts:
            return [get(i) for i in self.weights], indices
        ev = [get(i) for i in self.weights if i is not None]
        rows = tf.shape(ev[0])[0] if ev else tf.shape(inputs[0])[0]
        if not ev:
            indices = None
        it = iter(ev)
        return [next(it) if c is None else tf.broadcast_to(c[None], tf.concat([[rows], tf.shape(c)], 0))
                for c in self.consts], indices

    @property
    def inp(self) -> int:
        return self.inputs[0]

    @property
    def out(self) -> int:
        return self.outputs[0]

    @property
    def flat_fn(self):
        return self.tr.forward_flat


class TemplateParser:
    """The template-reading half of :class:`tfevo.nn.PopulationModel` (a mixin)."""

    def _parse(self, model):
        graph = keras_functional_graph(model)
        if isinstance(model, keras.Sequential):
            if graph is None:
                raise ConfigError(
                    f"the Sequential template {model.name!r} is not built: start it with keras.Input(shape) "
                    "or call model.build((None, *input_shape))"
                )
            self._parse_graph(model, graph)
        elif isinstance(model, keras.Model) and graph is None:
            raise ConfigError(
                f"template {model.name!r} ({type(model).__name__}) is a subclassed keras.Model, whose call() "
                "cannot be read layer by layer; supported: keras.Sequential and functional keras.Model "
                "(keras.Model(inputs, outputs))")
        else:
            self._parse_graph(model, model)

    def _parse_graph(self, model, graph):
        import tfevo.nn.translators  # noqa: F401  (registers the built-in translators)

        def masking_layers(m):
            for layer in getattr(m, "layers", []):
                if isinstance(layer, L.Masking):
                    yield layer
                elif isinstance(layer, keras.Model):
                    yield from masking_layers(layer)

        for layer in masking_layers(model):  # (its mask ops would be reported as unsupported NotEqual/Any ops)
            raise ConfigError(f"layer {layer.name!r} (Masking) is not supported (masks are not propagated); pad "
                              "with values the network can read, or give sequences of the real length")

        try:
            inputs, outputs = graph.inputs, graph.outputs
        except (AttributeError, ValueError):
            inputs = outputs = None
        if not inputs or not outputs:
            raise ConfigError(
                "the template model must be built with a known input shape "
                "(start a Sequential with keras.Input(shape) or use the functional API)"
            )
        if keras_functional_graph(graph) is None:
            raise ConfigError(f"template {model.name!r}: subclassed models are not supported (use Sequential or functional)")
        # inputs and outputs: a single tensor, a list, or a dict (by key) as the template was built
        in_struct, out_struct = keras_io_structure(graph)
        if isinstance(in_struct, dict):
            self._input_keys = list(in_struct)
            in_tensors = [in_struct[k] for k in self._input_keys]
        else:
            self._input_keys = None
            in_tensors = list(inputs)
        self._input_ids = [id(t) for t in in_tensors]
        # several outputs come back as the template returns them: a dict by key, else a list
        self._output_keys = list(out_struct) if len(outputs) > 1 and isinstance(out_struct, dict) else None
        if self._output_keys is not None:
            outputs = [out_struct[k] for k in self._output_keys]
        self.input_shapes = [tuple(t.shape[1:]) for t in in_tensors]
        self.output_shapes = [tuple(t.shape[1:]) for t in outputs]
        self._input_id = self._input_ids[0]
        if len(in_tensors) == 1:
            self.input_shape = self.input_shapes[0]
        elif self._input_keys is not None:
            self.input_shape = dict(zip(self._input_keys, self.input_shapes))
        else:
            self.input_shape = list(self.input_shapes)
        if len(outputs) == 1:
            self.output_shape = self.output_shapes[0]
        elif self._output_keys is not None:
            self.output_shape = dict(zip(self._output_keys, self.output_shapes))
        else:
            self.output_shape = list(self.output_shapes)

        all_weights = list(model.weights)
        index_of = {id(v): i for i, v in enumerate(all_weights)}
        used = set()
        steps = []
        self._initializers = [None] * len(all_weights)
        self._frozen_values = {}  # template weight index -> its value (numpy), for frozen weights
        self._frozen_copies = {}  # id(template layer) -> its frozen copy (shared layers share it)
        alias = {}  # the output key of a nested model's call -> the key of the inner tensor computing it
        self._add_steps(graph, (), {}, alias, steps, index_of, used)
        self._output_ids = [alias.get(id(t), id(t)) for t in outputs]
        self._output_id = self._output_ids[0]
        if len(used) != len(all_weights):
            missing = [all_weights[i].path for i in range(len(all_weights)) if i not in used]
            raise ConfigError(f"template weights not used by any supported layer: {missing}")
        # Layers must run in dependency order; depth order guarantees that.
        self._steps = steps
        self.state_sizes = tuple(sz for st in steps for sz in st.tr.state_sizes)
        for shape in self.input_shapes:
            # a recurrent template may leave its time axis (the first sample axis) open
            open_ok = ((bool(self.state_sizes) or any(st.tr.open_time for st in steps)) and len(shape) >= 2
                       and None not in shape[1:])
            if None in shape and not open_ok:
                raise ConfigError(f"the template's input shape must be fully known, got {shape}"
                                  + (" (only a recurrent template's time axis may be None)" if len(shape) > 1 else ""))
        self._num_template_weights = len(all_weights)
        evolved = [i for i in range(len(all_weights)) if i not in self._frozen_values]
        if self._frozen_values and not evolved:
            raise ConfigError(
                f"every weight of the template is frozen (trainable=False, {len(all_weights)} weights): nothing "
                "to evolve; set trainable=True on the layers to evolve")
        self._evolved_index = evolved  # flat-layout weight j is template weight evolved[j]
        pos = {i: j for j, i in enumerate(evolved)}
        for st in steps:
            st.weights = tuple(pos.get(i) for i in st.weights)
            if st.consts:
                st.consts = tuple(None if i in pos else tf.constant(self._frozen_values[i])
                                  for i in st.template_weights)
        self._initializers = [self._initializers[i] for i in evolved]
        self.weight_shapes = [tuple(int(d) for d in all_weights[i].shape) for i in evolved]
        self.weight_names = [all_weights[i].path for i in evolved]
        self.frozen_weight_names = [all_weights[i].path for i in sorted(self._frozen_values)]
        self.num_frozen = int(sum(np.size(v) for v in self._frozen_values.values()))
        self._sizes = [int(np.prod(s)) if s else 1 for s in self.weight_shapes]
        self._offsets = np.concatenate([[0], np.cumsum(self._sizes)]).astype(int).tolist()
        self.num_params = int(self._offsets[-1])
        if self.num_params == 0:
            raise ConfigError("the template has no weights to evolve")
        self._mlp_plan = self._make_mlp_plan()

    def _add_steps(self, graph, prefix, bound, alias, steps, index_of, used):
        """Appends the steps of ``graph``'s nodes in dependency order.

        A tensor's key is ``id(tensor)`` in the template's own graph and ``(prefix, id(tensor))``
        inside a nested model (``prefix`` names the call, so a nested model called twice gets two
        sets of keys and one set of weights); ``bound`` maps a nested model's input keys to the
        keys of the tensors it was called on, and ``alias`` maps the keys of a nested call's
        outputs to the keys of the inner tensors that compute them."""

        def key(t):
            k = id(t) if not prefix else (prefix, id(t))
            k = bound.get(k, k)
            return alias.get(k, k)

        for op, node in layer_nodes(graph):
            ins, outs = [key(t) for t in node.input_tensors], [key(t) for t in node.outputs]
            if isinstance(op, keras.Model):
                self._add_nested(op, node, prefix, ins, outs, alias, steps, index_of, used)
                continue
            steps.append(self._step_for(op, node, index_of, used, ins, outs))

    def _add_nested(self, model, node, prefix, ins, outs, alias, steps, index_of, used):
        """Inlines a nested Sequential or functional model's layers (its weights are the template's)."""
        name = f"{model.name!r} ({type(model).__name__})"
        check_inference_call(name, node)
        inner = keras_functional_graph(model)
        if inner is None:
            raise ConfigError(f"nested model {name} in the template: only built Sequential and functional models "
                              "can be nested (start a Sequential with keras.Input(shape))")
        inner_in, inner_out = list(inner.inputs), list(inner.outputs)
        if len(inner_in) != len(ins) or len(inner_out) != len(outs):
            raise ConfigError(f"nested model {name}: called on {len(ins)} tensor(s) for {len(inner_in)} input(s), "
                              f"gives {len(outs)} output(s) for {len(inner_out)}")
        call = prefix + (id(node),)
        bound = {(call, id(t)): k for t, k in zip(inner_in, ins)}
        self._add_steps(inner, call, bound, alias, steps, index_of, used)
        for t, k in zip(inner_out, outs):
            ik = (call, id(t))
            alias[k] = alias.get(bound.get(ik, ik), bound.get(ik, ik))

    def _step_for(self, op, node, index_of, used, ins_keys, outs_keys):
        name = f"{op.name!r} ({type(op).__name__})"
        tr = make_translator(op, node, self.conv_method)
        widx, frozen = [], []
        for v in tr.weight_order():
            if id(v) not in index_of:
                raise ConfigError(f"layer {name}: weight {v.path} is not among the model's weights")
            i = index_of[id(v)]
            used.add(i)  # a shared layer's calls all read the same weights
            widx.append(i)
            if not op.trainable or (not v.trainable and v.name not in tr.evolved_statistics):
                frozen.append(True)
                self._frozen_values[i] = np.array(keras.ops.convert_to_numpy(v), np.float32)
            else:
                frozen.append(False)
                self._initializers[i] = tr.initializer(v)
        step = _Step(name=name, tr=tr, weights=tuple(widx), inputs=tuple(ins_keys), outputs=tuple(outs_keys),
                     layer=op, template_weights=tuple(widx))
        if any(frozen):
            step.consts = tuple(frozen)  # placeholders: the constants are made once the layout is known
            if all(frozen):
                if id(op) not in self._frozen_copies:
                    self._frozen_copies[id(op)] = _frozen_copy(op, tr)
                step.frozen_layer = self._frozen_copies[id(op)]
        return step


def finalize_states(layer) -> None:
    """Lets every layer of ``layer`` (nested models included) recompute what it derives from its
    weights after ``set_weights`` (Keras's ``finalize_state``, e.g. an adapted ``Normalization``'s
    mean and variance), as loading a saved model does."""
    for sub in getattr(layer, "layers", ()):
        finalize_states(sub)
    if hasattr(layer, "finalize_state"):  # (not an InputLayer)
        layer.finalize_state()


def _frozen_copy(layer, tr):
    """A copy of a frozen one-input Keras layer holding its current weights (constants from now on, whatever
    later happens to the template), or ``None`` where it cannot be rebuilt from its config (the step then
    runs its translator on the constants). The copy computes in float32, as the population does,
    whatever the template's dtype policy."""
    if len(tr.input_shapes) != 1:
        return None
    try:
        cfg = layer.get_config()
        cfg["dtype"] = "float32"
        copy = type(layer).from_config(cfg)
        copy.build(tr.input_shapes[0])
        values = layer.get_weights()
        if len(copy.weights) != len(values):
            return None
        copy.set_weights(values)
        finalize_states(copy)
    except (TypeError, ValueError, NotImplementedError, AttributeError):
        return None
    copy.trainable = False
    return copy
