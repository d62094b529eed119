"""Reading the layer calls of a Keras functional graph: the calls in dependency order, each call's translator,
and the checks every call passes (shared by the template reader, :mod:`tfevo.nn._template`, and by the
translator of a model nested in a wrapper layer, :mod:`tfevo.nn.translators.wrappers`)."""

from __future__ import annotations

import keras

from tfevo._tf_private import keras_node_call_arguments, keras_node_call_kwargs, keras_nodes_by_depth
from tfevo.core import ConfigError
from tfevo.nn.translators.base import TRANSLATOR_DOCS, supported_layers, translator_for

L = keras.layers


def unsupported_error(name, op=None) -> ConfigError:
    if op is not None and not isinstance(op, L.Layer):
        # a keras.ops call on symbolic tensors (keras.ops.multiply(x, y), x * 2.0): a graph node that is
        # no layer, often named like one (Multiply), so "unsupported layer" would contradict the list
        return ConfigError(
            f"operation {name} in the template is a keras.ops call on symbolic tensors, not a layer; only layers "
            f"are translated: use the equivalent layer (supported: {', '.join(supported_layers())}). "
            f"A new layer type takes one translator module: see {TRANSLATOR_DOCS}")
    return ConfigError(f"unsupported layer {name} in the template; supported: {', '.join(supported_layers())}. "
                       f"A new layer type takes one translator module: see {TRANSLATOR_DOCS}")


def layer_nodes(graph):
    """``(operation, node)`` of every call in a functional graph but its inputs, in dependency order."""
    nodes_by_depth = keras_nodes_by_depth(graph)
    for depth in sorted(nodes_by_depth, reverse=True):
        for node in nodes_by_depth[depth]:
            op = node.operation
            if op is not None and not node.is_input and not isinstance(op, L.InputLayer):
                yield op, node


def make_translator(op, node, conv_method):
    """The translator of one layer call of the graph (a nested model is the caller's business)."""
    name = f"{op.name!r} ({type(op).__name__})"
    cls = translator_for(op) if isinstance(op, L.Layer) and not isinstance(op, keras.Model) else None
    if cls is None:
        raise unsupported_error(name, op)
    check_inference_call(name, node)
    kwargs, roles = call_arguments(op, node)
    return cls(op, [t.shape for t in node.input_tensors], [t.shape for t in node.outputs], conv_method=conv_method,
               call_kwargs=kwargs, input_roles=roles)


def call_arguments(op, node) -> tuple:
    """``(kwargs, roles)`` of a layer call in the graph: its keyword arguments that hold no tensor, and per
    input tensor of ``node`` the name of the call argument it came in (``None`` throughout where they
    cannot be matched)."""
    import inspect

    args, kwargs = keras_node_call_arguments(node)

    def tensors(v):
        return [t for t in keras.tree.flatten(v) if isinstance(t, keras.KerasTensor)]

    plain = {k: v for k, v in kwargs.items() if not tensors(v)}
    try:
        names = [n for n, p in inspect.signature(op.call).parameters.items()
                 if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        names = []
    roles = []
    for i, a in enumerate(args):
        roles += [names[i] if i < len(names) else None] * len(tensors(a))
    for k in sorted(kwargs):
        roles += [k] * len(tensors(kwargs[k]))
    if len(roles) != len(node.input_tensors):
        roles = [None] * len(node.input_tensors)
    return plain, tuple(roles)


def check_inference_call(name, node) -> None:
    """A layer (or nested model) called with ``training=True`` in the graph is refused: ``model(x)``
    honours that argument (dropout and noise applied, BatchNormalization on batch statistics), which the
    population's inference forward does not compute."""
    if keras_node_call_kwargs(node).get("training") is True:
        raise ConfigError(
            f"layer {name} is called with training=True in the template; the population computes the "
            "inference forward (as model.predict and model(x, training=False) do: dropout and noise are the "
            "identity, BatchNormalization uses its moving statistics), which model(x) with that call argument "
            "does not: call the layer without training=True")
