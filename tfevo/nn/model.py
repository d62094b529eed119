"""``PopulationModel``: an ordinary Keras model turned into P networks at once.

Given a *template* Keras model, :class:`PopulationModel` knows the layout of
its weights as one flat vector of length ``D`` and runs the forward pass of a
whole population ``params [P, D]`` on inputs ``[P, B, *input_shape]`` as one
TensorFlow program (batched matrix products; convolutions through the C++
direct population convolution, or im2col where that cannot run).

Supported layers: ``InputLayer``, ``Dense``, ``Conv2D`` (channels last,
no dilation/groups), ``Flatten``, ``Reshape``, ``Activation`` and the
activation layers ``ReLU``/``LeakyReLU``/``ELU``/``Softmax``,
``LayerNormalization`` and ``Dropout`` (identity at inference).  Anything
else raises :class:`tfevo.core.ConfigError` naming the layer.

Flat layout: the template's weights in ``template.weights`` order (the order of
``template.get_weights()``), each flattened row-major and concatenated.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Sequence

import numpy as np
import keras
import tensorflow as tf

from tfevo.core import ConfigError, ShapeError, TraceCounter
from tfevo.nn.init import as_seed, sample_population
from tfevo.nn.layers import CONV_METHODS, population_conv2d, population_dense

__all__ = ["PopulationModel"]


def _op_available() -> bool:
    from tfevo.nn.indexed import indexed_matmul_op_available

    return indexed_matmul_op_available()

L = keras.layers

# Rows per member up to which a plain MLP runs as the fused kernel (a rollout
# step has one); with more rows the layer-by-layer path's GEMMs are faster.
_FUSED_MAX_ROWS = 4


@dataclasses.dataclass
class _Step:
    """One layer of the template as a population op."""

    name: str
    fn: Callable  # (x, weights list, indices) -> y
    weights: tuple  # indices into the template weight list
    inp: int  # id of the input symbolic tensor
    out: int  # id of the output symbolic tensor
    flat_fn: Callable | None = None  # (x, params [P, D], weight offsets, indices) -> y, reading params in place
    layer: Any = None  # the template layer


def _dense_fn(layer):
    act = layer.activation

    def fn(x, w, idx):
        return population_dense(x, w[0], w[1] if len(w) > 1 else None, act, idx)

    return fn


def _flat_ops():
    """``(dense, conv)`` in-place op functions, or ``None`` when they cannot run here.

    The in-place path needs both C++ modules built, a caller that is not
    XLA-compiled and no GPU to place ops on.
    """
    from tfevo import ops

    if ops.in_xla_context():
        return None
    dense = ops.op_module("indexed_matmul", "tfevo_indexed_dense_flat")
    conv = ops.op_module("pop_conv", "tfevo_population_conv2d_flat")
    if dense is None or conv is None or tf.config.list_logical_devices("GPU"):
        return None
    return dense.tfevo_indexed_dense_flat, conv.tfevo_population_conv2d_flat


def _fused_activation(act):
    """(op activation attr, activation still to apply afterwards or None)."""
    if act is None or act is keras.activations.linear:
        return "none", None
    if act is keras.activations.relu:
        return "relu", None
    return "none", act


def _dense_flat_fn(layer):
    units, use_bias = int(layer.units), bool(layer.use_bias)
    attr, after = _fused_activation(layer.activation)

    def fn(x, params, offs, idx):
        dense = _flat_ops()[0]
        k = x.shape[-1]
        x3 = x if x.shape.rank == 3 else tf.reshape(x, [tf.shape(x)[0], -1, k])
        y = dense(x3, params, idx, w_offset=int(offs[0]), units=units,
                  bias_offset=int(offs[1]) if use_bias else -1, activation=attr)
        if x.shape.rank != 3:
            y = tf.reshape(y, tf.concat([tf.shape(x)[:-1], [units]], 0))
        return after(y) if after is not None else y

    return fn


def _conv_flat_fn(layer):
    filters, use_bias = int(layer.filters), bool(layer.use_bias)
    ksize, strides = [int(k) for k in layer.kernel_size], [int(s) for s in layer.strides]
    padding = layer.padding.upper()
    attr, after = _fused_activation(layer.activation)

    def fn(x, params, offs, idx, input_scale=None):
        conv = _flat_ops()[1]
        extra = {} if input_scale is None else {"input_scale": float(input_scale)}  # x may then be uint8
        y = conv(x, params, idx, kernel_offset=int(offs[0]), kernel_size=ksize, filters=filters,
                 bias_offset=int(offs[1]) if use_bias else -1, strides=strides, padding=padding, activation=attr,
                 **extra)
        return after(y) if after is not None else y

    return fn


def _conv_fn(layer, method):
    if layer.data_format != "channels_last":
        raise ConfigError(f"layer {layer.name!r} (Conv2D): only data_format='channels_last' is supported")
    if tuple(layer.dilation_rate) != (1, 1):
        raise ConfigError(f"layer {layer.name!r} (Conv2D): dilation_rate {layer.dilation_rate} is not supported")
    if int(getattr(layer, "groups", 1)) != 1:
        raise ConfigError(f"layer {layer.name!r} (Conv2D): groups={layer.groups} is not supported")
    if layer.padding not in ("same", "valid"):
        raise ConfigError(f"layer {layer.name!r} (Conv2D): padding {layer.padding!r} is not supported")
    act, strides, padding = layer.activation, tuple(layer.strides), layer.padding

    def fn(x, w, idx):
        return population_conv2d(x, w[0], w[1] if len(w) > 1 else None, strides, padding, act, idx, method)

    return fn


def _layernorm_fn(layer, sample_rank):
    """``sample_rank``: rank of the layer input including Keras's batch axis."""
    axes = layer.axis if isinstance(layer.axis, (list, tuple)) else [layer.axis]
    axes = sorted(a % sample_rank for a in axes)
    if 0 in axes:
        raise ConfigError(f"layer {layer.name!r} (LayerNormalization): normalizing over the batch axis is not supported")
    paxes = [a + 1 for a in axes]  # population axis in front
    eps = float(layer.epsilon)
    rms = bool(getattr(layer, "rms_scaling", False))
    has_gamma = layer.gamma is not None
    has_beta = getattr(layer, "beta", None) is not None

    def bshape(v):
        # [P, *param] -> [P, 1 (batch), ..] with the param dims at their axes
        shape = [tf.shape(v)[0]] + [1] * sample_rank
        for j, a in enumerate(paxes):
            shape[a] = v.shape[1 + j]
        return tf.reshape(v, shape)

    def fn(x, w, idx):
        i = 0
        gamma = beta = None
        if has_gamma:
            gamma = w[i] if idx is None else tf.gather(w[i], idx)
            i += 1
        if has_beta:
            beta = w[i] if idx is None else tf.gather(w[i], idx)
        mean, var = tf.nn.moments(x, paxes, keepdims=True)
        inv = tf.math.rsqrt(var + eps)
        if rms:
            out = x * inv
            return out * bshape(gamma) if gamma is not None else out
        if gamma is not None:
            inv = inv * bshape(gamma)
        res = -mean * inv
        if beta is not None:
            res = res + bshape(beta)
        return x * inv + res

    return fn


def _reshape_fn(layer):
    target = [int(t) for t in layer.target_shape]

    def fn(x, w, idx):
        return tf.reshape(x, tf.concat([tf.shape(x)[:2], target], 0))

    return fn


def _flatten_fn(layer):
    if getattr(layer, "data_format", "channels_last") == "channels_first":
        raise ConfigError(f"layer {layer.name!r} (Flatten): data_format='channels_first' is not supported")

    def fn(x, w, idx):
        n = math.prod(x.shape[2:]) if None not in x.shape[2:] else -1
        return tf.reshape(x, tf.concat([tf.shape(x)[:2], [n]], 0))

    return fn


def _elementwise_fn(layer):
    if isinstance(layer, L.Softmax) and layer.axis not in (-1,):
        raise ConfigError(f"layer {layer.name!r} (Softmax): only axis=-1 is supported")
    if isinstance(layer, L.Activation):
        act = layer.activation
        return lambda x, w, idx: act(x)
    return lambda x, w, idx: layer(x)


def _identity_fn(layer):
    return lambda x, w, idx: x


_SUPPORTED = "InputLayer, Dense, Conv2D, Flatten, Reshape, Activation, ReLU, LeakyReLU, ELU, Softmax, LayerNormalization, Dropout"


def _weight_order(layer) -> list:
    """The layer's variables in the order its population op expects."""
    by_name = {v.name: v for v in layer.weights}
    if isinstance(layer, (L.Dense, L.Conv2D)):
        names = ["kernel"] + (["bias"] if layer.use_bias else [])
    elif isinstance(layer, L.LayerNormalization):
        names = [n for n in ("gamma", "beta") if n in by_name]
    else:
        names = []
    if set(names) != set(by_name):
        raise ConfigError(
            f"layer {layer.name!r} ({type(layer).__name__}) has weights {sorted(by_name)}; expected {names} "
            "(LoRA, quantized or custom variants are not supported)"
        )
    return [by_name[n] for n in names]


def _initializer_of(layer, name):
    return getattr(layer, f"{name}_initializer")


class PopulationModel:
    """P copies of a Keras template network with different weights, run at once.

    Args:
      template: a built Keras model (``Sequential`` with a known input shape, or
        functional) made of the supported layers (see module doc), with one
        input and one output.
      jit_compile: XLA-compile the forward pass (default ``False``: on CPU the
        oneDNN batched matmul path is faster; XLA is never used when the C++
        ``indexed_matmul`` op would run, since it has no XLA kernel).
      fuse_mlp: run plain-MLP templates (Dense layers with none/relu/tanh/
        sigmoid/elu activations, optional leading Flatten) as ONE C++ kernel
        reading the members' weights in place (:mod:`tfevo.nn.fused_mlp`)
        whenever the forward gets flat ``params [P, D]`` and the op may run
        (built, not XLA-compiled, no GPU); ``False`` keeps the layer-by-layer
        TensorFlow path, which is the kernel's reference.
      conv_method: how ``Conv2D`` layers run: ``"auto"`` (default; the C++
        direct convolution ``TfevoPopulationConv2D`` when it is built and the
        forward is not XLA-compiled, else im2col), ``"im2col"`` (pure
        TensorFlow, the op's reference) or ``"grouped"``; see
        :func:`tfevo.nn.population_conv2d`.

    Attributes:
      num_params: D, the length of one member's flat parameter vector.
      input_shape: per-sample input shape (without batch).
      output_shape: per-sample output shape.
      weight_shapes: shapes of the template weights, in flat-layout order.
      traces: ``{name: count}`` of ``tf.function`` traces of the forward pass.

    Example:

    >>> template = keras.Sequential([keras.Input((4,)), keras.layers.Dense(16, activation="tanh"),
    ...                              keras.layers.Dense(2)])
    >>> pm = PopulationModel(template)
    >>> params = pm.init_params(popsize=64, seed=0)          # [64, 114]
    >>> y = pm(params, tf.zeros([64, 8, 4]))                   # [64, 8, 2]
    >>> y_sub = pm(params, tf.zeros([3, 8, 4]), indices=tf.constant([5, 9, 60]))  # [3, 8, 2]
    >>> best = pm.to_keras(params[0])                          # an ordinary keras.Model
    """

    def __init__(self, template: keras.Model, jit_compile: bool = False, conv_method: str = "auto", *,
                 fuse_mlp: bool = True):
        if not isinstance(template, keras.Model):
            raise ConfigError(f"PopulationModel needs a keras.Model template, got {type(template).__name__}")
        if conv_method not in CONV_METHODS:
            raise ConfigError(f"conv_method must be one of {CONV_METHODS}, got {conv_method!r}")
        self.conv_method = conv_method
        self.fuse_mlp = bool(fuse_mlp)
        self._ranges: dict = {}
        self.template = template
        self.jit_compile = bool(jit_compile)
        self._trace_counter = TraceCounter()
        self._fns: dict = {}
        self._parse(template)

    # ------------------------------------------------------------------ parse
    def _parse(self, model):
        if isinstance(model, keras.Sequential):
            graph = getattr(model, "_functional", None)
            if graph is None:
                raise ConfigError(
                    f"the Sequential template {model.name!r} is not built: start it with keras.Input(shape) "
                    "or call model.build((None, *input_shape))"
                )
            self._parse_graph(model, graph)
        else:
            self._parse_graph(model, model)

    def _parse_graph(self, model, graph):
        try:
            inputs, outputs = graph.inputs, graph.outputs
        except (AttributeError, ValueError):
            inputs = outputs = None
        if not inputs or not outputs:
            raise ConfigError(
                "the template model must be built with a known input shape "
                "(start a Sequential with keras.Input(shape) or use the functional API)"
            )
        if len(inputs) != 1 or len(outputs) != 1:
            raise ConfigError(f"the template must have one input and one output, got {len(inputs)} and {len(outputs)}")
        self.input_shape = tuple(inputs[0].shape[1:])
        self.output_shape = tuple(outputs[0].shape[1:])
        if None in self.input_shape:
            raise ConfigError(f"the template's input shape must be fully known, got {self.input_shape}")
        self._input_id = id(inputs[0])
        self._output_id = id(outputs[0])

        if not hasattr(graph, "_nodes_by_depth"):
            raise ConfigError(f"template {model.name!r}: subclassed models are not supported (use Sequential or functional)")
        all_weights = list(model.weights)
        index_of = {id(v): i for i, v in enumerate(all_weights)}
        used = set()
        steps = []
        nodes_by_depth = graph._nodes_by_depth
        for depth in sorted(nodes_by_depth, reverse=True):
            for node in nodes_by_depth[depth]:
                op = node.operation
                if op is None or node.is_input or isinstance(op, L.InputLayer):
                    continue
                steps.append(self._step_for(op, node, index_of, used))
        if len(used) != len(all_weights):
            missing = [all_weights[i].path for i in range(len(all_weights)) if i not in used]
            raise ConfigError(f"template weights not used by any supported layer: {missing}")
        # Layers must run in dependency order; depth order guarantees that.
        self._steps = steps
        self.weight_shapes = [tuple(int(d) for d in v.shape) for v in all_weights]
        self.weight_names = [v.path for v in all_weights]
        self._sizes = [int(np.prod(s)) if s else 1 for s in self.weight_shapes]
        self._offsets = np.concatenate([[0], np.cumsum(self._sizes)]).astype(int).tolist()
        self.num_params = int(self._offsets[-1])
        self._initializers = [None] * len(all_weights)
        for layer in model.layers:
            if isinstance(layer, (L.Dense, L.Conv2D, L.LayerNormalization)):
                for v in _weight_order(layer):
                    self._initializers[index_of[id(v)]] = _initializer_of(layer, v.name)
        if self.num_params == 0:
            raise ConfigError("the template has no weights to evolve")
        self._mlp_plan = self._make_mlp_plan()

    def _make_mlp_plan(self):
        """The :class:`~tfevo.nn.fused_mlp.MlpPlan` when the template is a plain MLP, else ``None``.

        Plain: a chain of ``Dense`` layers (activations the fused kernel has),
        optionally starting with ``Flatten``, ``Dropout`` anywhere (identity at
        inference).
        """
        from tfevo.nn.fused_mlp import MlpPlan, activation_name

        prev, flatten = self._input_id, False
        units, w_offs, b_offs, acts = [], [], [], []
        k = int(self.input_shape[-1]) if self.input_shape else 1
        for s in self._steps:
            if s.inp != prev:
                return None
            layer = s.layer
            if type(layer) is L.Flatten and not units and not flatten:
                flatten, k = True, int(np.prod(self.input_shape))
            elif type(layer) is L.Dropout:
                pass
            elif type(layer) is L.Dense:
                act = activation_name(layer.activation)
                if act is None or (not flatten and len(self.input_shape) != 1):
                    return None
                units.append(int(layer.units))
                w_offs.append(int(self._offsets[s.weights[0]]))
                b_offs.append(int(self._offsets[s.weights[1]]) if len(s.weights) > 1 else -1)
                acts.append(act)
            else:
                return None
            prev = s.out
        if not units or prev != self._output_id:
            return None
        return MlpPlan(in_features=k, flatten=flatten, units=tuple(units), w_offsets=tuple(w_offs),
                       bias_offsets=tuple(b_offs), activations=tuple(acts))

    @property
    def fused_mlp(self) -> bool:
        """Whether flat-parameter forwards run as the one-kernel ``TfevoPopulationMlp`` op here.

        True for plain-MLP templates (see :mod:`tfevo.nn.fused_mlp`) when
        ``fuse_mlp`` is on and the op is built (not under XLA, no GPU).
        """
        from tfevo.nn.fused_mlp import can_fuse

        return self._mlp_plan is not None and self.fuse_mlp and can_fuse()

    def _run_fused(self, params, x, indices):
        from tfevo.nn.fused_mlp import population_mlp

        plan = self._mlp_plan
        n, B = tf.shape(x)[0], tf.shape(x)[1]
        x3 = tf.reshape(x, [n, B, plan.in_features])
        idx = tf.range(tf.shape(params)[0], dtype=tf.int32) if indices is None else tf.cast(indices, tf.int32)
        return population_mlp(x3, params, idx, plan, use_op=True)

    def _step_for(self, op, node, index_of, used):
        name = f"{op.name!r} ({type(op).__name__})"
        if not isinstance(op, L.Layer) or isinstance(op, keras.Model):
            raise ConfigError(f"unsupported layer {name} in the template; supported: {_SUPPORTED}")
        ins = node.input_tensors
        if len(ins) != 1 or len(node.outputs) != 1:
            raise ConfigError(f"layer {name}: only single-input, single-output layers are supported")
        sample_rank = len(ins[0].shape)
        # exact type checks first: subclasses of supported layers may change call()
        flat_fn = None
        if type(op) is L.Dense:
            if getattr(op, "lora_enabled", False):
                raise ConfigError(f"layer {name}: LoRA Dense layers are not supported")
            fn = _dense_fn(op)
            flat_fn = _dense_flat_fn(op)
        elif type(op) is L.Conv2D:
            fn = _conv_fn(op, self.conv_method)
            flat_fn = _conv_flat_fn(op) if self.conv_method == "auto" else None
        elif type(op) is L.LayerNormalization:
            fn = _layernorm_fn(op, sample_rank)
        elif type(op) is L.Flatten:
            fn = _flatten_fn(op)
        elif type(op) is L.Reshape:
            fn = _reshape_fn(op)
        elif type(op) in (L.Activation, L.ReLU, L.LeakyReLU, L.ELU, L.Softmax):
            fn = _elementwise_fn(op)
        elif type(op) is L.Dropout:
            fn = _identity_fn(op)
        else:
            raise ConfigError(f"unsupported layer {name} in the template; supported: {_SUPPORTED}")
        widx = []
        for v in _weight_order(op):
            if id(v) not in index_of:
                raise ConfigError(f"layer {name}: weight {v.path} is not among the model's weights")
            i = index_of[id(v)]
            if i in used:
                raise ConfigError(f"layer {name}: shared layers (weights used twice) are not supported")
            used.add(i)
            widx.append(i)
        return _Step(name=name, fn=fn, weights=tuple(widx), inp=id(ins[0]), out=id(node.outputs[0]),
                     flat_fn=flat_fn, layer=op)

    # -------------------------------------------------------------- reshaper
    def flatten(self, weights: Sequence) -> tf.Tensor:
        """One member's weights (``template.get_weights()`` order) -> ``[D]``."""
        weights = list(weights)
        if len(weights) != len(self.weight_shapes):
            raise ShapeError(f"expected {len(self.weight_shapes)} weight arrays, got {len(weights)}")
        flat = []
        for i, (w, s) in enumerate(zip(weights, self.weight_shapes)):
            w = tf.convert_to_tensor(w, tf.float32)
            if tuple(w.shape) != s:
                raise ShapeError(f"weight {i} ({self.weight_names[i]}) must have shape {list(s)}, got {w.shape.as_list()}")
            flat.append(tf.reshape(w, [-1]))
        return tf.concat(flat, 0)

    def unflatten(self, params) -> list:
        """``params [P, D]`` -> per-weight tensors ``[P, *weight_shape]``.

        The result can be passed to :meth:`__call__` instead of ``params``; do
        that once per generation when the same parameters run many steps (a
        rollout), so the per-step forward pass does not re-split them.
        """
        params = self._check_params(params)
        parts = tf.split(params, self._sizes, axis=1)
        return [tf.reshape(t, tf.concat([tf.shape(params)[:1], s], 0)) if s else tf.reshape(t, [-1])
                for t, s in zip(parts, self.weight_shapes)]

    def weight_signature(self, popsize=None) -> list:
        """``tf.TensorSpec`` list matching :meth:`unflatten`'s output (for ``input_signature``)."""
        return [tf.TensorSpec((popsize,) + s, tf.float32) for s in self.weight_shapes]

    def from_keras(self, model: keras.Model) -> tf.Tensor:
        """A Keras model with the template's architecture -> its ``[D]`` vector."""
        return self.flatten(model.get_weights())

    def to_keras(self, params_row) -> keras.Model:
        """``[D]`` -> a new ordinary Keras model (template architecture, these weights)."""
        row = tf.convert_to_tensor(params_row, tf.float32)
        if row.shape.as_list() != [self.num_params]:
            raise ShapeError(f"to_keras expects one parameter row of shape [{self.num_params}], got {row.shape.as_list()}")
        model = keras.models.clone_model(self.template)
        ws = self.unflatten(row[None])
        model.set_weights([w[0].numpy() for w in ws])
        return model

    def init_params(self, popsize: int, seed=0) -> tf.Tensor:
        """``[popsize, D]`` fresh members, each initialized like the template's layers.

        Every weight is sampled from its layer's initializer family (e.g.
        Glorot-uniform kernels, zero biases, unit LayerNorm gains) with
        stateless ops, so the same ``seed`` (int or ``int32 [2]``) always gives
        the same population.
        """
        popsize = int(popsize)
        if popsize < 1:
            raise ConfigError(f"popsize must be >= 1, got {popsize}")
        seeds = tf.random.experimental.stateless_split(as_seed(seed), num=len(self.weight_shapes))
        cols = [
            tf.reshape(sample_population(init, shape, popsize, seeds[i]), [popsize, -1])
            for i, (init, shape) in enumerate(zip(self._initializers, self.weight_shapes))
        ]
        return tf.concat(cols, 1)

    # ---------------------------------------------------------------- forward
    @property
    def traces(self) -> dict:
        """How many times each forward variant was traced."""
        return dict(self._trace_counter.counts)

    def _check_params(self, params):
        params = tf.convert_to_tensor(params)
        if params.dtype != tf.float32:
            if not params.dtype.is_floating:
                raise ShapeError(f"params must be float32, got {params.dtype.name}")
            params = tf.cast(params, tf.float32)
        if params.shape.rank != 2 or params.shape[1] != self.num_params:
            raise ShapeError(f"params must have shape [P, {self.num_params}], got {params.shape.as_list()}")
        return params

    def _check_weights(self, weights):
        weights = [tf.convert_to_tensor(w, tf.float32) for w in weights]
        if len(weights) != len(self.weight_shapes):
            raise ShapeError(f"expected {len(self.weight_shapes)} weight tensors (from unflatten), got {len(weights)}")
        p = weights[0].shape[0]
        for i, (w, s) in enumerate(zip(weights, self.weight_shapes)):
            if tuple(w.shape[1:]) != s or w.shape[0] != p:
                raise ShapeError(f"weight {i} ({self.weight_names[i]}) must have shape [{p}, {', '.join(map(str, s))}], got {w.shape.as_list()}")
        return weights

    def _run(self, weights, x, indices):
        tensors = {self._input_id: x}
        for step in self._steps:
            w = [weights[i] for i in step.weights]
            tensors[step.out] = step.fn(tensors[step.inp], w, indices)
        return tensors[self._output_id]

    #: Independent chains the in-place subset forward of a model with Conv2D layers is cut into
    #: (members ``[n*g/G, n*(g+1)/G)`` form chain ``g``).  TensorFlow's executor runs ready ops of
    #: different chains at the same time, so one chain's memory-bound Dense layer (it streams each
    #: member's weights, 16 MB per member for Nature-DQN) overlaps another chain's compute-bound
    #: convolutions.  Every member's result is the same for any value (tested); 1 = one chain.
    #: Default 1: on the quiet 2-core machine one chain with the single-threaded inline executor
    #: measured 1,064 against 1,003 steps/s for 4 chains (benchmarks/results/pipeline.md, run L5).
    inference_chains: int = 1

    def _run_in_place(self, params, x, indices, input_scale=None):
        """Members ``indices`` straight from ``params [P, D]``: Dense and Conv2D read their weights in
        place (C++ ops with column offsets); other weights are sliced out (small: LayerNorm gains).
        Models with Conv2D layers run as ``inference_chains`` independent chains of members."""
        G = int(self.inference_chains)
        if self.concurrent_forward:
            n = tf.shape(indices)[0]
            cuts = [(n * g) // G for g in range(G + 1)]
            return tf.concat([self._run_in_place_rows(params, x[cuts[g]:cuts[g + 1]], indices[cuts[g]:cuts[g + 1]],
                                                      input_scale) for g in range(G)], 0)
        return self._run_in_place_rows(params, x, indices, input_scale)

    @property
    def concurrent_forward(self) -> bool:
        """Whether the in-place subset forward has independent chains worth running concurrently
        (``inference_chains > 1`` and Conv2D layers): a caller should then use TensorFlow's
        multi-threaded graph executor rather than a single-threaded one."""
        return int(self.inference_chains) > 1 and any(s.name.endswith("(Conv2D)") for s in self._steps)

    def _run_in_place_rows(self, params, x, indices, input_scale=None):
        fused = None  # the Conv2D step that takes raw (uint8) x and applies input_scale itself
        if input_scale is not None:
            first = [s for s in self._steps if s.inp == self._input_id]
            if len(first) == 1 and first[0].flat_fn is not None and first[0].name.endswith("(Conv2D)"):
                fused = first[0]
            else:
                x = tf.cast(x, tf.float32) * input_scale
        tensors = {self._input_id: x}
        for step in self._steps:
            offs = [self._offsets[i] for i in step.weights]
            if step is fused:
                y = step.flat_fn(tensors[step.inp], params, offs, indices, input_scale=input_scale)
            elif step.flat_fn is not None:
                y = step.flat_fn(tensors[step.inp], params, offs, indices)
            else:
                w = [tf.reshape(tf.cast(params[:, o:o + self._sizes[i]], tf.float32), (-1,) + self.weight_shapes[i])
                     for o, i in zip(offs, step.weights)]
                y = step.fn(tensors[step.inp], w, indices)
            tensors[step.out] = y
        return tensors[self._output_id]

    def in_place_available(self) -> bool:
        """Whether a subset forward with flat ``params [P, D]`` reads the weights in place (no copy).

        True when the C++ ops are built, ``conv_method="auto"`` (for Conv2D
        layers) and no GPU is visible; then :meth:`Policy.prepare
        <tfevo.nn.Policy.prepare>` keeps the flat parameters instead of
        splitting them.
        """
        if self.fused_mlp:
            return True
        return _flat_ops() is not None and all(
            s.flat_fn is not None for s in self._steps if s.name.endswith("(Conv2D)"))

    def forward_graph(self, params, x, indices=None, input_scale=None):
        """The forward pass as plain TensorFlow ops, without checks or ``tf.function``.

        For use inside a caller's own ``tf.function`` (rollouts).  ``params`` is
        ``[P, D]`` or the list from :meth:`unflatten`; ``x`` float32, or (with
        ``input_scale``) any numeric input used as ``tf.cast(x, float32) *
        input_scale`` -- e.g. uint8 Atari frames and ``1/255``: in the in-place
        path a first Conv2D layer then reads the uint8 frames itself (same
        result, no float copies of the frames).

        ``params`` may be float16 (see :class:`tfevo.nn.Policy`'s
        ``weight_dtype``): the in-place C++ ops then stream the weights at half
        the bytes and convert them to float32 exactly as they read them; other
        paths cast them to float32 first.  Either way the result is the float32
        forward of the float16 values.

        With flat ``params`` and ``indices``, the subset reads the chosen
        members' Dense/Conv2D weights in place from ``params`` through the C++
        ops (:meth:`in_place_available`); without them it runs either by
        gathering its parameter rows first (cheaper when ``2 n <= P`` or
        without the C++ op), or by splitting all parameters and letting
        ``indexed_matmul`` read the chosen members' weights in place.
        """
        in_place = (not isinstance(params, (list, tuple)) and not self.fused_mlp and self.in_place_available()
                    and (indices is not None or (x.shape[1] is not None and x.shape[1] <= 4)))
        if not isinstance(params, (list, tuple)) and params.dtype == tf.float16 and not in_place:
            # float16 weights (Policy(weight_dtype="float16")): only the in-place C++ ops read
            # them directly; every other path computes from the same values in float32
            params = tf.cast(params, tf.float32)
        if input_scale is not None and not in_place:
            x, input_scale = tf.cast(x, tf.float32) * input_scale, None
        if isinstance(params, (list, tuple)):
            return self._run(params, x, indices)
        if self.fused_mlp and (x.shape[1] is None or x.shape[1] <= _FUSED_MAX_ROWS):
            return self._run_fused(params, x, indices)
        if indices is None:
            if in_place:
                # few rows per member: read every member in place (no split copy of [P, D])
                return self._run_in_place(params, x, tf.range(tf.shape(params)[0], dtype=tf.int32), input_scale)
            return self._run(self.unflatten_graph(params), x, None)
        if in_place:
            return self._run_in_place(params, x, tf.cast(indices, tf.int32), input_scale)

        def gather_first():
            return self._run(self.unflatten_graph(tf.gather(params, indices)), x, None)

        if not _op_available():
            return gather_first()

        def in_place():
            return self._run(self.unflatten_graph(params), x, indices)

        return tf.cond(2 * tf.shape(indices)[0] <= tf.shape(params)[0], gather_first, in_place)

    def _fn(self, kind):
        fn = self._fns.get(kind)
        if fn is not None:
            return fn
        if kind.endswith("_idx"):
            body = lambda params, x, idx: self.forward_graph(params, x, idx)
        else:
            body = lambda params, x: self.forward_graph(params, x, None)
        jit = self.jit_compile and not (kind.endswith("_idx") and _op_available())
        fn = tf.function(self._trace_counter.wrap(kind, body), jit_compile=jit, reduce_retracing=False, autograph=False)
        self._fns[kind] = fn
        return fn

    def unflatten_graph(self, params):
        """Like :meth:`unflatten` without Python-side checks (for use inside graphs)."""
        parts = tf.split(params, self._sizes, axis=1)
        p = tf.shape(params)[:1]
        return [tf.reshape(t, tf.concat([p, s], 0)) for t, s in zip(parts, self.weight_shapes)]

    def __call__(self, params, inputs, indices=None) -> tf.Tensor:
        """Forward pass of the population.

        Args:
          params: float32 ``[P, D]``, or the list returned by :meth:`unflatten`.
          inputs: ``[P, B, *input_shape]``; with ``indices``, ``[n, B, *input_shape]``.
          indices: optional int32 ``[n]``: run only members ``indices`` (row
            ``i`` of ``inputs`` goes to member ``indices[i]``); the result
            equals running all members and gathering rows ``indices``.

        Returns:
          float32 ``[P or n, B, *output_shape]``.
        """
        if isinstance(params, (list, tuple)):
            params = self._check_weights(params)
            popsize = params[0].shape[0]
            kind = "split"
        else:
            params = self._check_params(params)
            popsize = params.shape[0]
            kind = "flat"
        x = tf.convert_to_tensor(inputs)
        if not x.dtype.is_floating:
            x = tf.cast(x, tf.float32)
        elif x.dtype != tf.float32:
            x = tf.cast(x, tf.float32)
        if x.shape.rank != 2 + len(self.input_shape) or tuple(x.shape[2:]) != self.input_shape:
            raise ShapeError(
                f"inputs must have shape [P, B, {', '.join(map(str, self.input_shape))}], got {x.shape.as_list()}"
            )
        if indices is None:
            if popsize is not None and x.shape[0] != popsize:
                raise ShapeError(f"inputs have {x.shape[0]} members on axis 0 but params have {popsize}")
            if kind == "flat" and x.shape[1] <= _FUSED_MAX_ROWS and tf.executing_eagerly() and self.fused_mlp:
                return self._eager_fused(params, x, None)
            return self._fn(kind)(params, x)
        idx = tf.convert_to_tensor(indices)
        if not idx.dtype.is_integer or idx.shape.rank != 1:
            raise ShapeError(f"indices must be an int32 vector [n], got {idx.dtype.name} {idx.shape.as_list()}")
        idx = tf.cast(idx, tf.int32)
        if x.shape[0] != idx.shape[0]:
            raise ShapeError(f"with indices, inputs must have n={idx.shape[0]} rows on axis 0, got {x.shape[0]}")
        if tf.executing_eagerly() and idx.shape[0] and popsize is not None:
            iv = idx.numpy()
            lo, hi = int(iv.min()), int(iv.max())
            if lo < 0 or hi >= popsize:
                raise ShapeError(f"indices must lie in [0, {popsize}), got values in [{lo}, {hi}]")
        if kind == "flat" and x.shape[1] <= _FUSED_MAX_ROWS and tf.executing_eagerly() and self.fused_mlp:
            return self._eager_fused(params, x, idx)
        return self._fn(kind + "_idx")(params, x, idx)

    def _eager_fused(self, params, x, idx):
        """Eager call of a plain MLP: the one kernel, no ``tf.function`` dispatch (no trace either).

        One op dispatch costs tens of microseconds against ~0.1-0.3 ms for a
        ``tf.function`` call, which is most of a small MLP's forward time.
        """
        from tfevo.nn.fused_mlp import run_op

        plan = self._mlp_plan
        if x.shape.rank != 3 or x.shape[2] != plan.in_features:
            x = tf.reshape(x, [x.shape[0], x.shape[1], plan.in_features])
        if idx is None:
            P = int(params.shape[0])
            idx = self._ranges.get(P)
            if idx is None:
                idx = self._ranges[P] = tf.range(P, dtype=tf.int32)
        y = run_op(x, params, idx, plan)
        return y if len(self.output_shape) == 1 else tf.reshape(y, [y.shape[0], y.shape[1], *self.output_shape])

    def summary(self) -> str:
        """A one-line-per-layer description of the population program."""
        lines = [f"PopulationModel: input {self.input_shape} -> output {self.output_shape}, D={self.num_params}"]
        for s in self._steps:
            lines.append(f"  {s.name}: weights {[self.weight_shapes[i] for i in s.weights]}")
        return "\n".join(lines)
