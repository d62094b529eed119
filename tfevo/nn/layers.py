"""Population-batched Keras layers and their functional forms.

A *population layer* holds one set of weights per member, stacked on a leading
axis ``P``, and maps inputs ``[P, B, ...]`` to outputs ``[P, B, ...]``: member
``p`` applies its own weights to its own batch ``x[p]``.  Everything is one
batched matrix product, so ``P`` different networks cost one kernel launch.

Each layer has a functional twin that takes the weights as arguments
(:func:`population_dense`, :func:`population_conv2d`), which is what evolution
uses: the weights of a whole population come from a parameter tensor, not from
layer variables.  With ``indices`` (int32 ``[n]``) the functional forms run
only members ``indices`` of a larger population (inputs are then ``[n, B,
...]``) through :func:`tfevo.nn.indexed.indexed_matmul`.
"""

from __future__ import annotations

import numpy as np
import keras
import tensorflow as tf

from tfevo import kernels
from tfevo.core import ConfigError, ShapeError
from tfevo.nn.indexed import indexed_matmul
from tfevo.nn.init import sample_population

__all__ = [
    "population_dense",
    "population_conv2d",
    "conv_output_size",
    "CONV_METHODS",
    "PopulationDense",
    "PopulationConv2D",
]


def _activation(activation):
    return sample_activation(keras.activations.get(activation)) if activation is not None else None


def builtin_activation(act) -> bool:
    """Whether ``act`` is one of Keras's built-in activations (elementwise or over the last axis)."""
    return getattr(act, "__module__", "").startswith("keras.src.activations")


def sample_activation(act):
    """``act`` as applied to population tensors ``[n, B, ...]`` with Keras's meaning.

    The built-in Keras activations act elementwise or over the last axis, so they run on the population
    tensor as it is (softmax on the merged ``[n*B, ...]`` beyond rank 5, which TensorFlow's CPU softmax
    kernel refuses while Keras's rank-5 tensor passes).  Anything else (a user function, a layer) may
    reduce over or index sample axes counted from Keras's batch axis (``softmax(x, axis=1)``), so it runs
    on the members' batches merged into one Keras batch ``[n*B, ...]`` and is split back.
    """
    if act is None or (builtin_activation(act) and act is not keras.activations.softmax):
        return act

    def per_sample(x):
        if builtin_activation(act) and x.shape.rank is not None and x.shape.rank <= 5:
            return act(x)  # (softmax: the population tensor as it is, as before)
        y = act(tf.reshape(x, tf.concat([[-1], tf.shape(x)[2:]], 0)))
        if y.dtype != x.dtype:  # a layer under a mixed or float64 dtype policy
            y = tf.cast(y, x.dtype)
        out = tf.reshape(y, tf.concat([tf.shape(x)[:2], tf.shape(y)[1:]], 0))
        out.set_shape(x.shape[:2].concatenate(y.shape[1:]))
        return out

    return per_sample


def _dim(x, i):
    d = x.shape[i]
    return d if d is not None else tf.shape(x)[i]


def _bmm(x3, kernel, indices):
    """[n, N, k] x ([n, k, m] | [M, k, m] with indices) -> [n, N, m]."""
    if indices is None:
        if x3.shape[1] is not None and x3.shape[1] <= 4 and kernels.kernel("TfevoIndexedMatmul", None,
                                                                             [x3, kernel]) is not None:
            # one to four rows per member: memory-bound; the C++ streaming kernel
            # reads each member's weights once (same op as the subset path)
            return indexed_matmul(x3, kernel, tf.range(_dim(x3, 0), dtype=tf.int32))
        return tf.matmul(x3, kernel)
    return indexed_matmul(x3, kernel, indices)


def _add_bias(y, bias, indices, ndim_between):
    if bias is None:
        return y
    b = bias if indices is None else tf.gather(bias, indices)
    b = tf.reshape(b, [_dim(b, 0)] + [1] * ndim_between + [b.shape[-1]])
    return y + b


def population_dense(x, kernel, bias=None, activation=None, indices=None):
    """Dense layer of every member: ``y[p] = activation(x[p] @ kernel[p] + bias[p])``.

    Args:
      x: float32 ``[P, B, ..., in]`` (or ``[n, B, ..., in]`` with ``indices``).
      kernel: float32 ``[P, in, units]`` (``[M, in, units]`` with ``indices``).
      bias: optional float32 ``[P, units]`` (``[M, units]``).
      activation: a Keras activation (name or callable) or ``None``.
      indices: optional int32 ``[n]``; row ``i`` of ``x`` uses member
        ``indices[i]`` of ``kernel``/``bias``.

    Returns:
      float32 ``[P or n, B, ..., units]``.

    Example:

    >>> x = tf.random.normal([16, 32, 8])          # 16 members, batch 32
    >>> k = tf.random.normal([16, 8, 4])
    >>> y = population_dense(x, k, tf.zeros([16, 4]), "tanh")   # [16, 32, 4]
    """
    x = tf.convert_to_tensor(x, tf.float32)
    if x.shape.rank is None or x.shape.rank < 3:
        raise ShapeError(f"population_dense expects inputs [P, B, ..., in], got {x.shape}")
    if kernel.shape.rank != 3:
        raise ShapeError(f"population_dense expects a kernel [P, in, units], got {kernel.shape}")
    if x.shape[-1] is not None and kernel.shape[1] is not None and x.shape[-1] != kernel.shape[1]:
        raise ShapeError(f"population_dense: inputs have {x.shape[-1]} features, kernel expects {kernel.shape[1]}")
    rank = x.shape.rank
    units = kernel.shape[-1]
    if rank == 3:
        y = _bmm(x, kernel, indices)
    else:
        lead = tf.shape(x)[:-1]
        y = _bmm(tf.reshape(x, [_dim(x, 0), -1, x.shape[-1]]), kernel, indices)
        y = tf.reshape(y, tf.concat([lead, [units]], 0))
    y = _add_bias(y, bias, indices, rank - 2)
    act = _activation(activation)
    return act(y) if act is not None else y


def _pair(v, name):
    if isinstance(v, int):
        return (v, v)
    v = tuple(int(a) for a in v)
    if len(v) != 2:
        raise ConfigError(f"{name} must be an int or a pair of ints, got {v}")
    return v


def conv_output_size(size: int, k: int, s: int, padding: str) -> int:
    """Spatial output size of a 2-D convolution (TensorFlow's SAME/VALID rules)."""
    return -(-size // s) if padding == "same" else (size - k) // s + 1


def _patches(x4, kh, kw, sh, sw, padding):
    """im2col: [N, H, W, C] -> [N, Ho, Wo, kh*kw*C] ordered (kh, kw, C)."""
    if kh == 1 and kw == 1:
        return x4[:, ::sh, ::sw, :] if (sh, sw) != (1, 1) else x4
    return tf.image.extract_patches(
        x4, sizes=[1, kh, kw, 1], strides=[1, sh, sw, 1], rates=[1, 1, 1, 1], padding=padding.upper()
    )


def _grouped_conv(x, kernel, sh, sw, padding):
    """All members as one grouped convolution: groups = members, channels stacked."""
    _, _, h, w, c = x.shape.as_list()
    p, b = _dim(x, 0), _dim(x, 1)
    kh, kw, _, f = kernel.shape.as_list()[1:]
    xg = tf.reshape(tf.transpose(x, [1, 2, 3, 0, 4]), [b, h, w, -1])  # [B, H, W, P*C]
    kg = tf.reshape(tf.transpose(kernel, [1, 2, 3, 0, 4]), [kh, kw, c, -1])  # [kh, kw, C, P*F]
    y = tf.nn.conv2d(xg, kg, [1, sh, sw, 1], padding.upper())  # [B, Ho, Wo, P*F]
    ho, wo = y.shape[1], y.shape[2]
    return tf.transpose(tf.reshape(y, [b, ho, wo, p, f]), [3, 0, 1, 2, 4])


CONV_METHODS = ("auto", "im2col", "grouped")


def _direct_conv(op, x, kernel, bias, sh, sw, padding, activation, indices):
    """The C++ kernel: conv + bias (+ ReLU fused) of the members ``indices`` (all when ``None``)."""
    act = _activation(activation)
    fused = act is keras.activations.relu
    if act is keras.activations.linear:
        act = None
    idx = tf.range(_dim(x, 0), dtype=tf.int32) if indices is None else tf.cast(indices, tf.int32)
    y = op(
        x, kernel, bias if bias is not None else tf.zeros([0, 0], tf.float32), idx,
        strides=[int(sh), int(sw)], padding=padding.upper(), activation="relu" if fused else "none",
        use_bias=bias is not None)
    return act(y) if (act is not None and not fused) else y


def population_conv2d(x, kernel, bias=None, strides=1, padding="same", activation=None, indices=None,
                      method="auto"):
    """2-D convolution of every member with its own kernel (channels last).

    Equals ``keras.layers.Conv2D`` applied to each member.  Three
    implementations (``method``):

    * ``"auto"`` (default): the C++ kernel ``TfevoPopulationConv2D``
      (``custom_ops/pop_conv.cc``), a direct convolution that reads each
      member's kernel in place and fuses bias and ReLU, on TensorFlow's
      intra-op threads.  Used when the op is built and the caller is not
      XLA-compiled, with inputs on the host (:func:`tfevo.kernels.kernel`); otherwise ``"im2col"``.
    * ``"im2col"``: ``tf.image.extract_patches`` followed by one batched matrix
      product ``[P, B*Ho*Wo, kh*kw*C] x [P, kh*kw*C, F]`` (through
      ``indexed_matmul`` with ``indices``) -- the pure-TensorFlow reference of
      the C++ kernel (same sums in the same (kh, kw, C) order; tests compare
      them).
    * ``"grouped"``: the members' channels are stacked and run as one grouped
      ``tf.nn.conv2d`` (groups = members); kernels of ``indices`` are gathered
      first.

    Args:
      x: float32 ``[P, B, H, W, C]`` (``[n, B, H, W, C]`` with ``indices``).
      kernel: float32 ``[P, kh, kw, C, F]`` (``[M, ...]`` with ``indices``).
      bias: optional float32 ``[P, F]``.
      strides: int or (sh, sw).
      padding: ``"same"`` or ``"valid"`` (TensorFlow semantics).
      activation: a Keras activation or ``None``.
      indices: optional int32 ``[n]``, see :func:`population_dense`.
      method: ``"auto"``, ``"im2col"`` or ``"grouped"`` (see above).

    Returns:
      float32 ``[P or n, B, Ho, Wo, F]``.

    Example:

    >>> x = tf.random.normal([4, 2, 84, 84, 4])
    >>> k = tf.random.normal([4, 8, 8, 4, 32])
    >>> y = population_conv2d(x, k, strides=4, padding="same")   # [4, 2, 21, 21, 32]
    """
    padding = str(padding).lower()
    if padding not in ("same", "valid"):
        raise ConfigError(f"padding must be 'same' or 'valid', got {padding!r}")
    x = tf.convert_to_tensor(x, tf.float32)
    kernel = tf.convert_to_tensor(kernel, tf.float32)
    bias = None if bias is None else tf.convert_to_tensor(bias, tf.float32)
    if x.shape.rank != 5:
        raise ShapeError(f"population_conv2d expects inputs [P, B, H, W, C], got {x.shape}")
    if kernel.shape.rank != 5:
        raise ShapeError(f"population_conv2d expects a kernel [P, kh, kw, C, F], got {kernel.shape}")
    _, _, h, w, c = x.shape.as_list()
    kh, kw, kc, f = kernel.shape.as_list()[1:]
    if None in (h, w, c):
        raise ShapeError(f"population_conv2d needs static H, W, C, got {x.shape}")
    if kc != c:
        raise ShapeError(f"population_conv2d: inputs have {c} channels, kernel expects {kc}")
    sh, sw = _pair(strides, "strides")
    ho, wo = conv_output_size(h, kh, sh, padding), conv_output_size(w, kw, sw, padding)
    if ho < 1 or wo < 1:
        raise ShapeError(f"population_conv2d: input {h}x{w} is smaller than the {kh}x{kw} kernel (padding='valid')")
    if method not in CONV_METHODS:
        raise ConfigError(f"method must be one of {CONV_METHODS}, got {method!r}")
    if method == "auto":
        op = kernels.kernel("TfevoPopulationConv2D", None, [x, kernel])
        if op is not None:
            return _direct_conv(op, x, kernel, bias, sh, sw, padding, activation, indices)
        method = "im2col"
    if method == "grouped":
        k = kernel if indices is None else tf.gather(kernel, indices)
        y = _grouped_conv(x, k, sh, sw, padding)
        y = _add_bias(y, bias, indices, 3)
        act = _activation(activation)
        return act(y) if act is not None else y
    p, b = _dim(x, 0), _dim(x, 1)
    cols = _patches(tf.reshape(x, [-1, h, w, c]), kh, kw, sh, sw, padding)
    cols = tf.reshape(cols, [p, -1, kh * kw * c])
    k2 = tf.reshape(kernel, [_dim(kernel, 0), kh * kw * c, f])
    y = _bmm(cols, k2, indices)
    y = tf.reshape(y, [p, b, ho, wo, f])
    y = _add_bias(y, bias, indices, 3)
    act = _activation(activation)
    return act(y) if act is not None else y


class _PopulationInitializer(keras.initializers.Initializer):
    """Samples ``[P, *member_shape]`` with per-member fans (stateless)."""

    def __init__(self, base, seed):
        self.base = keras.initializers.get(base)
        self.seed = seed

    def __call__(self, shape, dtype=None):
        seed = self.seed if self.seed is not None else int(np.random.randint(0, 2**31 - 1))
        return sample_population(self.base, shape[1:], shape[0], seed)

    def get_config(self):
        return {"base": keras.initializers.serialize(self.base), "seed": self.seed}


class _PopulationLayer(keras.layers.Layer):
    def __init__(self, population_size=None, seed=None, **kwargs):
        super().__init__(**kwargs)
        self.population_size = None if population_size is None else int(population_size)
        self.seed = seed

    def _popsize(self, input_shape):
        p = self.population_size if self.population_size is not None else input_shape[0]
        if p is None:
            raise ShapeError(
                f"{type(self).__name__} needs the population size: pass population_size= or an input "
                "with a known leading axis"
            )
        if input_shape[0] is not None and int(input_shape[0]) != int(p):
            raise ShapeError(f"{type(self).__name__}: population_size={p} but inputs have leading axis {input_shape[0]}")
        return int(p)

    def _seed(self, offset):
        return None if self.seed is None else int(self.seed) * 2 + offset


@keras.saving.register_keras_serializable(package="tfevo")
class PopulationDense(_PopulationLayer):
    """A Dense layer with one kernel per population member.

    Inputs ``[P, B, ..., in]``, kernel ``[P, in, units]``, bias ``[P, units]``,
    outputs ``[P, B, ..., units]``.  Initializers are Keras initializers
    applied per member (fans of one member's ``[in, units]`` kernel), sampled
    statelessly from ``seed`` when given.

    Args:
      units: output features per member.
      population_size: P; inferred from the input's leading axis when omitted.
      activation: Keras activation name or callable.
      use_bias: whether to add a per-member bias.
      kernel_initializer, bias_initializer: Keras initializers.
      seed: optional int, makes initialization deterministic.

    Example:

    >>> layer = PopulationDense(4, activation="relu")
    >>> y = layer(tf.random.normal([16, 32, 8]))   # 16 members -> [16, 32, 4]
    >>> layer.kernel.shape
    TensorShape([16, 8, 4])
    """

    def __init__(self, units, population_size=None, activation=None, use_bias=True,
                 kernel_initializer="glorot_uniform", bias_initializer="zeros", seed=None, **kwargs):
        super().__init__(population_size=population_size, seed=seed, **kwargs)
        if int(units) < 1:
            raise ConfigError(f"units must be >= 1, got {units}")
        self.units = int(units)
        self.activation = keras.activations.get(activation)
        self.use_bias = bool(use_bias)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)

    def build(self, input_shape):
        p = self._popsize(input_shape)
        if len(input_shape) < 3 or input_shape[-1] is None:
            raise ShapeError(f"PopulationDense expects inputs [P, B, ..., in] with known in, got {input_shape}")
        self.kernel = self.add_weight(
            name="kernel", shape=(p, int(input_shape[-1]), self.units),
            initializer=_PopulationInitializer(self.kernel_initializer, self._seed(0)),
        )
        self.bias = (
            self.add_weight(name="bias", shape=(p, self.units),
                            initializer=_PopulationInitializer(self.bias_initializer, self._seed(1)))
            if self.use_bias else None
        )

    def call(self, inputs, indices=None):
        return population_dense(inputs, tf.convert_to_tensor(self.kernel),
                                None if self.bias is None else tf.convert_to_tensor(self.bias),
                                self.activation, indices)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[:-1]) + (self.units,)

    def get_config(self):
        cfg = super().get_config()
        cfg.update(
            units=self.units, population_size=self.population_size,
            activation=keras.activations.serialize(self.activation), use_bias=self.use_bias,
            kernel_initializer=keras.initializers.serialize(self.kernel_initializer),
            bias_initializer=keras.initializers.serialize(self.bias_initializer), seed=self.seed,
        )
        return cfg


@keras.saving.register_keras_serializable(package="tfevo")
class PopulationConv2D(_PopulationLayer):
    """A Conv2D layer (channels last) with one kernel per population member.

    Inputs ``[P, B, H, W, C]``, kernel ``[P, kh, kw, C, filters]``, bias
    ``[P, filters]``, outputs ``[P, B, Ho, Wo, filters]``; member ``p`` equals
    ``keras.layers.Conv2D`` with ``kernel[p]``, ``bias[p]`` on ``x[p]``.
    Computed by the C++ direct convolution when available (``method="auto"``),
    else by im2col patches and one batched matrix product.

    Args:
      filters: output channels.
      kernel_size: int or (kh, kw).
      strides: int or (sh, sw).
      padding: ``"same"`` or ``"valid"``.
      population_size: P; inferred from the input when omitted.
      activation, use_bias, kernel_initializer, bias_initializer, seed: as in
        :class:`PopulationDense`.
      method: ``"auto"`` (default), ``"im2col"`` or ``"grouped"``, see
        :func:`population_conv2d`.

    Example:

    >>> conv = PopulationConv2D(32, 8, strides=4, padding="same", activation="relu")
    >>> y = conv(tf.random.normal([4, 2, 84, 84, 4]))   # [4, 2, 21, 21, 32]
    """

    def __init__(self, filters, kernel_size, strides=1, padding="same", population_size=None,
                 activation=None, use_bias=True, kernel_initializer="glorot_uniform",
                 bias_initializer="zeros", seed=None, method="auto", **kwargs):
        super().__init__(population_size=population_size, seed=seed, **kwargs)
        if method not in CONV_METHODS:
            raise ConfigError(f"method must be one of {CONV_METHODS}, got {method!r}")
        self.method = method
        if int(filters) < 1:
            raise ConfigError(f"filters must be >= 1, got {filters}")
        self.filters = int(filters)
        self.kernel_size = _pair(kernel_size, "kernel_size")
        self.strides = _pair(strides, "strides")
        self.padding = str(padding).lower()
        if self.padding not in ("same", "valid"):
            raise ConfigError(f"padding must be 'same' or 'valid', got {padding!r}")
        self.activation = keras.activations.get(activation)
        self.use_bias = bool(use_bias)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)

    def build(self, input_shape):
        p = self._popsize(input_shape)
        if len(input_shape) != 5 or input_shape[-1] is None:
            raise ShapeError(f"PopulationConv2D expects inputs [P, B, H, W, C], got {input_shape}")
        self.kernel = self.add_weight(
            name="kernel", shape=(p,) + self.kernel_size + (int(input_shape[-1]), self.filters),
            initializer=_PopulationInitializer(self.kernel_initializer, self._seed(0)),
        )
        self.bias = (
            self.add_weight(name="bias", shape=(p, self.filters),
                            initializer=_PopulationInitializer(self.bias_initializer, self._seed(1)))
            if self.use_bias else None
        )

    def call(self, inputs, indices=None):
        return population_conv2d(inputs, tf.convert_to_tensor(self.kernel),
                                 None if self.bias is None else tf.convert_to_tensor(self.bias),
                                 self.strides, self.padding, self.activation, indices, self.method)

    def compute_output_shape(self, input_shape):
        p, b, h, w, _ = input_shape
        ho = None if h is None else conv_output_size(h, self.kernel_size[0], self.strides[0], self.padding)
        wo = None if w is None else conv_output_size(w, self.kernel_size[1], self.strides[1], self.padding)
        return (p, b, ho, wo, self.filters)

    def get_config(self):
        cfg = super().get_config()
        cfg.update(
            filters=self.filters, kernel_size=self.kernel_size, strides=self.strides, padding=self.padding,
            population_size=self.population_size, activation=keras.activations.serialize(self.activation),
            use_bias=self.use_bias, kernel_initializer=keras.initializers.serialize(self.kernel_initializer),
            bias_initializer=keras.initializers.serialize(self.bias_initializer), seed=self.seed, method=self.method,
        )
        return cfg
