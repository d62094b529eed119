"""CPPNs and HyperNEAT on top of tensorized NEAT.

A CPPN is an ordinary NEAT genome whose inputs are coordinates and whose nodes
may use many activation functions (:func:`cppn_config`).  :func:`query_cppn`
evaluates a whole CPPN population at any set of coordinates in one call.

HyperNEAT (Stanley et al. 2009) uses the CPPN to paint the weights of a fixed
*substrate* network: for each substrate connection ``(src, dst)`` the CPPN is
queried at ``(coords[src], coords[dst])`` (plus a constant bias input); a raw
output ``w``, clipped to [-1, 1] (the CPPN's output node may mutate to an
unbounded activation such as identity or square), becomes the weight
``sign(w) * (|w| - threshold) / (1 - threshold) * max_weight`` when
``|w| > threshold`` and 0 otherwise (no connection), so every weight lies in
``[-max_weight, max_weight]``.  The substrate then runs
batched for the whole population: a *layered* substrate as an MLP (one batched
matmul per layer pair), a *full* or *custom* substrate as a recurrent network
updated ``activation_steps`` times with the inputs clamped.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple, Sequence

import numpy as np
import tensorflow as tf

from tfevo.core import ConfigError, ShapeError, arguments_checked, check_int
from tfevo.neat import functions as F
from tfevo.neat import _forward_op as _fo
from tfevo.neat.config import NEATConfig

__all__ = ["cppn_config", "query_cppn", "Substrate", "HyperNEAT", "SubstrateNetwork", "HyperNEATProblem"]

CPPN_ACTIVATIONS = ("sigmoid", "tanh", "sin", "gauss", "identity", "abs", "relu", "square")


def cppn_config(num_coords: int, num_outputs: int = 1, **kw) -> NEATConfig:
    """A NEATConfig for CPPNs with ``num_coords`` coordinate inputs: several
    activation functions (:data:`CPPN_ACTIVATIONS`, mutated at rate 0.1 on every
    node, the output included), ``tanh`` for new nodes; override anything in
    ``kw``. A recurrent config (``feed_forward=False``) is a ConfigError."""
    base = dict(num_inputs=num_coords, num_outputs=num_outputs, activation_default="tanh",
                activation_options=CPPN_ACTIVATIONS, activation_mutate_rate=0.1)
    base.update(kw)
    return check_cppn_config(NEATConfig(**base))


def check_cppn_config(config: NEATConfig) -> NEATConfig:
    """``config`` if it can describe CPPNs: a CPPN is queried once per coordinate, so it is a
    feed-forward network; a recurrent config (whose genomes may hold cycles, which have no
    one-shot value) is a ConfigError."""
    if isinstance(config, NEATConfig) and not config.feed_forward:
        raise ConfigError("feed_forward=False: a CPPN is evaluated once per coordinate query, as a feed-forward "
                          "network; use feed_forward=True")
    return config


def query_cppn(population, coords, config: NEATConfig) -> tf.Tensor:
    """Evaluates every CPPN of ``population = (nodes, conns)`` at ``coords
    [Q, num_inputs]`` -> ``[P, Q, num_outputs]``."""
    check_cppn_config(config)
    nodes, conns = population
    coords = tf.convert_to_tensor(coords, tf.float32)
    if coords.shape.rank is not None and (coords.shape.rank != 2 or coords.shape[1] not in (None, config.num_inputs)):
        raise ShapeError(f"coords must be [Q, {config.num_inputs}] (num_inputs of the CPPN config), got "
                         f"{coords.shape.as_list()}")
    acts, aggs = config.activation_options, config.aggregation_options
    # C++ inference kernels where they run (coords shared by all members), else the dense reference
    n = _fo.prepare(nodes, conns, config.num_inputs, True, acts, aggs)
    return _fo.forward(n, coords, config.num_inputs, config.num_outputs, acts, aggs)


def _coords(what: str, x, allow_flat: bool, allow_empty: bool) -> np.ndarray:
    """``x`` as float32 ``[n, dims]`` node coordinates (``allow_flat``: a list of numbers is
    ``n`` 1-D coordinates); ConfigError naming ``what`` unless finite and of that shape."""
    try:
        a = np.asarray(x, np.float32)
    except (TypeError, ValueError) as e:
        raise ConfigError(f"{what} must be an [n, dims] array of coordinates, got {x!r} ({e})") from None
    if a.size == 0 and allow_empty:
        return a.reshape(0, 0)  # no nodes: takes the other groups' dims
    shape = list(a.shape)
    if allow_flat and a.ndim == 1:
        a = a.reshape(-1, 1)
    if a.ndim != 2 or a.shape[0] < 1 or a.shape[1] < 1:
        raise ConfigError(f"{what} must be an [n, dims] array of coordinates with n >= 1, got shape {shape}")
    if not np.all(np.isfinite(a)):
        raise ConfigError(f"{what} must be finite, got {a.tolist()}")
    return a


def _same_dims(groups) -> list:
    """The ``(what, coords)`` groups with one coordinate width (empty groups take it)."""
    dims = {what: a.shape[1] for what, a in groups if len(a)}
    if len(set(dims.values())) != 1:
        raise ConfigError("all substrate coordinates must have the same number of dimensions, got "
                          + ", ".join(f"{k}: {v}" for k, v in dims.items()))
    d = next(iter(dims.values()))
    return [a if len(a) else np.zeros([0, d], np.float32) for _, a in groups]


@dataclasses.dataclass
class Substrate:
    """Node coordinates and the connections HyperNEAT paints.

    Nodes are ordered inputs, hidden, outputs; ``conns`` are ``(src, dst)``
    index pairs into that order.  Build one with :meth:`layered` (an MLP:
    every node of layer l to every node of layer l+1), :meth:`full` (inputs
    to hidden and outputs, hidden to hidden and outputs, optionally outputs
    back to hidden) or :meth:`custom`.
    """

    input_coords: np.ndarray
    hidden_coords: np.ndarray
    output_coords: np.ndarray
    conns: np.ndarray  # int [Q, 2]
    layers: tuple | None = None  # node counts per layer for layered substrates

    @property
    def num_inputs(self) -> int:
        return len(self.input_coords)

    @property
    def num_outputs(self) -> int:
        return len(self.output_coords)

    @property
    def coords(self) -> np.ndarray:
        return np.concatenate([self.input_coords, self.hidden_coords, self.output_coords]).astype(np.float32)

    @property
    def num_nodes(self) -> int:
        return len(self.coords)

    @property
    def coord_dims(self) -> int:
        return self.coords.shape[1]

    def queries(self, bias_input: bool = True) -> np.ndarray:
        """CPPN inputs ``[Q, 2*dims (+1)]`` for every substrate connection."""
        c = self.coords
        q = np.concatenate([c[self.conns[:, 0]], c[self.conns[:, 1]]], 1)
        if bias_input:
            q = np.concatenate([q, np.ones([len(q), 1], np.float32)], 1)
        return q.astype(np.float32)

    @classmethod
    def layered(cls, layers: Sequence) -> "Substrate":
        """MLP substrate from a list of coordinate arrays (input layer first,
        output layer last)."""
        if isinstance(layers, (str, bytes)) or not hasattr(layers, "__len__") or len(layers) < 2:
            raise ConfigError(f"a layered substrate needs a list of >= 2 layers (input first, output last), got "
                              f"{layers!r}")
        layers = _same_dims([(f"layer {k}", _coords(f"layer {k}", l, False, False)) for k, l in enumerate(layers)])
        offs = np.cumsum([0] + [len(l) for l in layers])
        conns = [(offs[k] + i, offs[k + 1] + j) for k in range(len(layers) - 1)
                 for i in range(len(layers[k])) for j in range(len(layers[k + 1]))]
        hidden = np.concatenate(layers[1:-1]) if len(layers) > 2 else np.zeros([0, layers[0].shape[1]], np.float32)
        return cls(layers[0], hidden, layers[-1], np.asarray(conns, np.int32), tuple(len(l) for l in layers))

    @classmethod
    def full(cls, input_coords, hidden_coords, output_coords, recurrent: bool = False) -> "Substrate":
        """Inputs to hidden and outputs, hidden to hidden (both directions, no self-loops) and to
        outputs; ``recurrent`` adds self-loops and outputs to hidden and outputs. ``hidden_coords``
        may be empty. Evaluated as a recurrent network (``HyperNEAT.activation_steps``)."""
        i, h, o = cls._groups(input_coords, hidden_coords, output_coords)
        I, H, O = len(i), len(h), len(o)
        ins = range(I)
        hid = range(I, I + H)
        outs = range(I + H, I + H + O)
        pairs = [(a, b) for a in ins for b in list(hid) + list(outs)]
        pairs += [(a, b) for a in hid for b in list(hid) + list(outs) if recurrent or a != b]
        if recurrent:
            pairs += [(a, b) for a in outs for b in list(hid) + list(outs)]
        return cls(i, h, o, np.asarray(pairs, np.int32))

    @classmethod
    def custom(cls, input_coords, hidden_coords, output_coords, conns) -> "Substrate":
        """Any coordinates and any ``(src, dst)`` connection list."""
        return cls(input_coords, hidden_coords, output_coords, conns)

    def __post_init__(self):
        """Checks a substrate however it was built (also ``Substrate(...)`` directly, as a
        dataclass): coordinates as in :meth:`custom`, ``conns`` a non-empty integer ``[Q, 2]``
        list into the nodes, none ending in an input, no pair twice; ``layers`` (if given) node
        counts whose connections go from one layer to the next."""
        i, h, o = self._groups(self.input_coords, self.hidden_coords, self.output_coords)
        self.input_coords, self.hidden_coords, self.output_coords = i, h, o
        self.conns = self._checked_conns(self.conns, len(i), len(i) + len(h) + len(o))
        if self.layers is not None:
            self.layers = self._checked_layers(self.layers, self.conns, len(i), len(o), len(i) + len(h) + len(o))

    @staticmethod
    def _checked_conns(conns, num_inputs: int, n: int) -> np.ndarray:
        try:
            raw = np.asarray(conns, np.float64)
        except (TypeError, ValueError):
            raw = np.zeros([0])
        if (raw.ndim != 2 or raw.shape[0] < 1 or raw.shape[1] != 2 or not np.all(np.isfinite(raw))
                or np.any(raw != np.round(raw)) or raw.min() < 0 or raw.max() >= n):
            raise ConfigError(f"conns must be a non-empty [Q, 2] list of integer (src, dst) indices in [0, {n}) "
                              f"(the {n} substrate nodes), got {np.asarray(conns, object).tolist()}")
        conns = raw.astype(np.int32)
        if np.any(conns[:, 1] < num_inputs):
            raise ConfigError(f"substrate connections cannot end in an input node (indices 0..{num_inputs - 1}), "
                              f"got {conns[conns[:, 1] < num_inputs].tolist()}")
        keys, counts = np.unique(conns[:, 0].astype(np.int64) * n + conns[:, 1], return_counts=True)
        if np.any(counts > 1):
            twice = keys[counts > 1]
            raise ConfigError(f"conns lists a (src, dst) pair more than once (its weights would add up): "
                              f"{np.stack([twice // n, twice % n], 1).tolist()}")
        return conns

    @staticmethod
    def _checked_layers(layers, conns, num_inputs: int, num_outputs: int, n: int) -> tuple:
        try:
            sizes = tuple(int(k) for k in layers)
            ok = all(k == l for k, l in zip(sizes, layers))
        except (TypeError, ValueError):
            sizes, ok = (), False
        if not (ok and len(sizes) >= 2 and min(sizes) >= 1 and sum(sizes) == n and sizes[0] == num_inputs
                and sizes[-1] == num_outputs):
            raise ConfigError(f"layers must be the node counts of >= 2 layers ({num_inputs} inputs first, "
                              f"{num_outputs} outputs last, {n} nodes in all), got {layers!r}")
        layer_of = np.searchsorted(np.cumsum(sizes), np.arange(n), side="right")
        if np.any(layer_of[conns[:, 1]] != layer_of[conns[:, 0]] + 1):
            raise ConfigError("a layered substrate's conns must each go from one layer to the next (other "
                              "connections would be ignored); use layers=None for any connections")
        return sizes

    @staticmethod
    def _groups(input_coords, hidden_coords, output_coords):
        """Input, hidden and output coordinates of one width (no hidden nodes is fine)."""
        return _same_dims([("input_coords", _coords("input_coords", input_coords, True, False)),
                           ("hidden_coords", _coords("hidden_coords", hidden_coords, True, True)),
                           ("output_coords", _coords("output_coords", output_coords, True, False))])


class SubstrateNetwork(NamedTuple):
    """Decoded substrate weights for a population."""

    weights: tf.Tensor  # [P, M, M] dense (src, dst)


@arguments_checked
class HyperNEAT:
    """Decodes CPPN populations into substrate networks and runs them batched.

    Args:
      substrate: a :class:`Substrate`.
      weight_threshold: CPPN outputs with ``|w| <= threshold`` give no connection.
      max_weight: the largest substrate weight magnitude (a CPPN output of +-1 or beyond).
      activation: substrate node activation (name).
      activation_steps: updates of non-layered substrates per input.
      bias_input: feed a constant 1 to the CPPN as an extra input.
      output_activation: activation of output nodes (default: ``activation``).

    Example::

        sub = Substrate.layered([[(-1, -1), (1, -1), (0, -1)], [(-1, 0), (0, 0), (1, 0)], [(0, 1)]])
        hn = HyperNEAT(sub)
        cfg = hn.cppn_config(pop_size=150)
        algo = NEAT(cfg, seed=0)
        y = hn.forward(hn.decode(algo.ask(), cfg), x)   # x [P, B, 3]
    """

    def __init__(self, substrate: Substrate, weight_threshold: float = 0.2, max_weight: float = 5.0,
                 activation: str = "sigmoid", activation_steps: int = 10, bias_input: bool = True,
                 output_activation: str | None = None):
        if not isinstance(substrate, Substrate):
            raise ConfigError(f"substrate must be a Substrate (Substrate.layered, .full or .custom), got "
                              f"{type(substrate).__name__}")
        real = lambda v: isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)  # noqa: E731
        if not (real(weight_threshold) and 0.0 <= weight_threshold < 1.0):
            raise ConfigError(f"weight_threshold must be a number in [0, 1), got {weight_threshold!r}")
        if not (real(max_weight) and 0.0 < max_weight < np.inf):
            raise ConfigError(f"max_weight must be a finite number > 0, got {max_weight!r}")
        activation_steps = check_int(activation_steps, "activation_steps", 1, integral_float=True)
        if not isinstance(bias_input, (bool, np.bool_)):
            raise ConfigError(f"bias_input must be True or False, got {bias_input!r}")
        for field, name in (("activation", activation), ("output_activation", output_activation or activation)):
            if not isinstance(name, str):
                raise ConfigError(f"{field} must be an activation name, got {name!r}")
            try:
                F.activation_id(name)
            except ConfigError as e:
                raise ConfigError(f"{field}: {e}") from None
        self.substrate = substrate
        self.weight_threshold = float(weight_threshold)
        self.max_weight = float(max_weight)
        self.activation = activation
        self.output_activation = output_activation or activation
        self.activation_steps = int(activation_steps)
        self.bias_input = bool(bias_input)
        self._queries = tf.constant(substrate.queries(bias_input))

    @property
    def cppn_inputs(self) -> int:
        """Inputs of the CPPN: 2 x coordinate dims (+1 bias)."""
        return 2 * self.substrate.coord_dims + int(self.bias_input)

    def cppn_config(self, **kw) -> NEATConfig:
        """A CPPN NEATConfig sized for this substrate (override with ``kw``)."""
        return cppn_config(self.cppn_inputs, 1, **kw)

    def scale(self, w: tf.Tensor) -> tf.Tensor:
        """Raw CPPN outputs -> substrate weights in ``[-max_weight, max_weight]`` (clip to [-1, 1],
        threshold, scale)."""
        t = self.weight_threshold
        w = tf.clip_by_value(w, -1.0, 1.0)
        a = tf.abs(w)
        return tf.where(a > t, tf.sign(w) * (a - t) / (1.0 - t) * self.max_weight, 0.0)

    def decode(self, population, config: NEATConfig) -> SubstrateNetwork:
        """CPPN population -> dense substrate weights ``[P, M, M]``."""
        from tfevo.neat.problems import check_config_io, check_population

        check_config_io(config, self.cppn_inputs, 1, "this HyperNEAT's CPPN (one weight output)")
        population = check_population(population, config)
        raw = query_cppn(population, self._queries, config)[..., 0]  # [P, Q]
        w = self.scale(raw)
        M = self.substrate.num_nodes
        P = tf.shape(w)[0]
        c = self.substrate.conns
        flat = tf.constant(c[:, 0] * M + c[:, 1], tf.int32)
        dense = tf.scatter_nd(flat[:, None], tf.transpose(w), [M * M, P])
        return SubstrateNetwork(tf.reshape(tf.transpose(dense), [P, M, M]))

    def forward(self, decoded: SubstrateNetwork, x) -> tf.Tensor:
        """Runs the substrate: ``x [P, B, num_inputs]`` (or ``[B, num_inputs]``, the same inputs for
        every member) -> ``[P, B, num_outputs]``."""
        s = self.substrate
        W = decoded.weights
        x = tf.convert_to_tensor(x, tf.float32)
        I, O, M = s.num_inputs, s.num_outputs, s.num_nodes
        if x.shape.rank is not None and (x.shape.rank not in (2, 3) or x.shape[-1] not in (None, I)):
            raise ShapeError(f"x must be [P, B, {I}] or [B, {I}] ({I} = the substrate's inputs), got "
                             f"{x.shape.as_list()}")
        if W.shape.rank != 3 or W.shape[1:].as_list() != [M, M]:
            raise ShapeError(f"decoded weights must be [P, {M}, {M}] ({M} = the substrate's nodes), got "
                             f"{W.shape.as_list()}")
        if x.shape.rank == 3 and None not in (x.shape[0], W.shape[0]) and x.shape[0] != W.shape[0]:
            raise ShapeError(f"x has {x.shape[0]} members (x {x.shape.as_list()}), the decoded weights "
                             f"{W.shape[0]}")
        act = F.ACTIVATIONS[self.activation]
        oact = F.ACTIVATIONS[self.output_activation]
        if s.layers is not None:
            offs = np.cumsum([0] + list(s.layers))
            h = x
            for k in range(len(s.layers) - 1):
                Wk = W[:, offs[k]:offs[k + 1], offs[k + 1]:offs[k + 2]]
                z = tf.linalg.matmul(h, Wk)
                h = oact(z) if k == len(s.layers) - 2 else act(z)
            return h
        if x.shape.rank == 2:
            x = tf.broadcast_to(x[None], tf.concat([tf.shape(W)[:1], tf.shape(x)], 0))
        P = tf.shape(x)[0]
        B = tf.shape(x)[1]
        v = tf.concat([x, tf.zeros(tf.stack([P, B, M - I]))], -1)
        is_out = tf.range(M) >= M - O
        for _ in range(self.activation_steps):
            z = tf.linalg.matmul(v, W)
            y = tf.where(is_out, oact(z), act(z))
            v = tf.concat([x, y[..., I:]], -1)
        return v[..., M - O:]

    def to_keras(self, decoded: SubstrateNetwork, index: int = 0):
        """Member ``index`` of ``decoded`` as a Keras model ``[batch, num_inputs] -> [batch, num_outputs]``.

        A layered substrate becomes bias-free ``Dense`` layers holding its weights, each followed by the
        substrate's activation in built-in Keras ops, so a saved ``.keras`` file loads with plain
        ``keras.models.load_model`` in a process that never imports tfevo; outputs equal
        :meth:`forward` to float rounding.  Non-layered substrates (``full``, ``custom``) are refused.
        """
        import keras

        from tfevo.neat.export import _KERAS_ACTS, _keras_act

        s = self.substrate
        if s.layers is None:
            raise ConfigError("to_keras exports layered substrates (Substrate.layered); this one is full or custom")
        for name in {self.activation, self.output_activation}:
            if name not in _KERAS_ACTS:
                raise ConfigError(f"to_keras: activation {name!r} has no built-in Keras form; built-in: "
                                  + ", ".join(_KERAS_ACTS))
        W = np.asarray(decoded.weights)
        if W.ndim != 3 or not 0 <= int(index) < W.shape[0]:
            raise ShapeError(f"to_keras takes decoded weights [P, M, M] and an index in [0, P), got shape "
                             f"{list(W.shape)} and index {index}")
        W = W[int(index)]
        offs = np.cumsum([0] + list(s.layers))
        inp = keras.Input((s.num_inputs,), name="inputs")
        h, n = inp, len(s.layers) - 1
        for k in range(n):
            dense = keras.layers.Dense(int(s.layers[k + 1]), use_bias=False, name=f"substrate_{k}")
            z = dense(h)
            dense.set_weights([W[offs[k]:offs[k + 1], offs[k + 1]:offs[k + 2]]])
            h = _keras_act(self.output_activation if k == n - 1 else self.activation, z)
        return keras.Model(inp, h, name="hyperneat_substrate")


@arguments_checked
class HyperNEATProblem:
    """Supervised fitness of HyperNEAT substrates: ``max_fitness - SSE``
    (``max_fitness`` = number of cases by default)."""

    def __init__(self, hyperneat: HyperNEAT, inputs, targets, max_fitness: float | None = None):
        self.hn = hyperneat
        self.inputs = np.asarray(inputs, np.float32)
        self.targets = np.asarray(targets, np.float32)
        self.max_fitness = float(len(self.inputs) if max_fitness is None else max_fitness)
        sub = hyperneat.substrate
        if self.inputs.ndim != 2 or self.inputs.shape[1] != sub.num_inputs:
            raise ShapeError(f"inputs must be [B, {sub.num_inputs}] (the substrate's inputs), "
                             f"got {list(self.inputs.shape)}")
        if self.targets.shape != (self.inputs.shape[0], sub.num_outputs):
            raise ShapeError(f"targets must be [{self.inputs.shape[0]}, {sub.num_outputs}] (B, the substrate's "
                             f"outputs), got {list(self.targets.shape)}")
        self._fns = {}

    def __call__(self, population, config: NEATConfig) -> tf.Tensor:
        """Fitness ``[P]`` of a CPPN population."""
        from tfevo.neat.problems import check_config_io, check_population

        check_config_io(config, self.hn.cppn_inputs, 1, "this HyperNEAT's CPPN (one weight output)")
        population = check_population(population, config)
        if population[0].shape[0] != config.pop_size:
            raise ShapeError(f"population must have pop_size={config.pop_size} members, got {population[0].shape[0]}")
        key = repr(config)  # one compiled fitness per config (shapes and options)
        if key not in self._fns:
            P, N, C = config.pop_size, config.max_nodes, config.max_conns

            @tf.function(autograph=False, input_signature=[tf.TensorSpec([P, N, 5]), tf.TensorSpec([P, C, 5])])
            def fit(nodes, conns):
                d = self.hn.decode((nodes, conns), config)
                x = tf.broadcast_to(tf.constant(self.inputs)[None], [P, *self.inputs.shape])
                y = self.hn.forward(d, x)
                f = self.max_fitness - tf.reduce_sum(tf.square(y - self.targets[None]), [1, 2])
                return tf.where(tf.math.is_finite(f), f, -np.inf)

            self._fns[key] = fit
        return self._fns[key](*population)
