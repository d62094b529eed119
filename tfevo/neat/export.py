"""Export of one NEAT genome: Keras model, sympy expression, graph picture.

All three take a single genome ``nodes [N, 5]``, ``conns [C, 5]`` (e.g.
``algo.best[:2]``) and the :class:`~tfevo.neat.config.NEATConfig`.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from tfevo.core import ConfigError
from tfevo.neat import network as net
from tfevo.neat.config import NEATConfig

__all__ = ["NEATNetworkLayer", "to_keras", "to_sympy", "draw"]

try:
    import keras

    _serializable = keras.saving.register_keras_serializable(package="tfevo")
except Exception:  # pragma: no cover
    keras = None
    _serializable = lambda c: c  # noqa: E731


@_serializable
class NEATNetworkLayer(keras.layers.Layer):
    """A feed-forward NEAT network as a Keras layer.

    Holds the dense weight matrix ``[N, N]``, node biases and responses as
    (trainable) Keras weights and the per-node activation/aggregation ids and
    topological levels as config; ``call`` computes the nodes level by level
    exactly as :func:`tfevo.neat.network.forward` does, so outputs match the
    population inference.  Serializable (``model.save("x.keras")``).
    """

    def __init__(self, num_inputs, num_outputs, weights_init, bias_init, response_init, act_ids, agg_ids, levels,
                 activations=("sigmoid",), aggregations=("sum",), mask=None, **kw):
        super().__init__(**kw)
        self.num_inputs = int(num_inputs)
        self.num_outputs = int(num_outputs)
        self._w0 = np.asarray(weights_init, np.float32)
        self._b0 = np.asarray(bias_init, np.float32)
        self._r0 = np.asarray(response_init, np.float32)
        self._mask = np.asarray(mask if mask is not None else self._w0 != 0, bool)
        self.act_ids = [int(a) for a in act_ids]
        self.agg_ids = [int(a) for a in agg_ids]
        self.levels = [int(l) for l in levels]
        self.activations = tuple(activations)
        self.aggregations = tuple(aggregations)
        n = self._w0.shape[0]
        self.w = self.add_weight(name="w", shape=(n, n), initializer=keras.initializers.Constant(self._w0))
        self.b = self.add_weight(name="bias", shape=(n,), initializer=keras.initializers.Constant(self._b0))
        self.r = self.add_weight(name="response", shape=(n,), initializer=keras.initializers.Constant(self._r0))

    def call(self, x):
        x = tf.convert_to_tensor(x, tf.float32)
        n = self._w0.shape[0]
        netw = net.Network(tf.convert_to_tensor(self.w)[None], tf.constant(self._mask)[None],
                           tf.convert_to_tensor(self.b)[None], tf.convert_to_tensor(self.r)[None],
                           tf.constant(self.act_ids, tf.int32)[None], tf.constant(self.agg_ids, tf.int32)[None],
                           tf.constant(self.levels, tf.int32)[None], tf.constant(max(self.levels + [0]), tf.int32))
        values = tf.concat([x, tf.zeros([tf.shape(x)[0], n - self.num_inputs])], -1)[None]
        lev = netw.level[:, None, :]
        for l in range(1, max(self.levels + [0]) + 1):
            y = net._node_update(netw, values, self.activations, self.aggregations)
            values = tf.where(tf.equal(lev, l), y, values)
        return values[0, :, self.num_inputs:self.num_inputs + self.num_outputs]

    def compute_output_shape(self, input_shape):
        return (input_shape[0], self.num_outputs)

    def get_config(self):
        c = super().get_config()
        c.update(num_inputs=self.num_inputs, num_outputs=self.num_outputs, weights_init=self._w0.tolist(),
                 bias_init=self._b0.tolist(), response_init=self._r0.tolist(), act_ids=self.act_ids,
                 agg_ids=self.agg_ids, levels=self.levels, activations=list(self.activations),
                 aggregations=list(self.aggregations), mask=self._mask.tolist())
        return c


def _single(nodes, conns, cfg):
    nodes = tf.convert_to_tensor(nodes, tf.float32)
    conns = tf.convert_to_tensor(conns, tf.float32)
    if nodes.shape.rank != 2 or conns.shape.rank != 2:
        raise ConfigError("export takes ONE genome: nodes [N, 5] and conns [C, 5]")
    if not cfg.feed_forward:
        raise ConfigError("export supports feed-forward genomes")
    return net.transform(nodes[None], conns[None], cfg.num_inputs, True)


def to_keras(nodes, conns, config: NEATConfig) -> "keras.Model":
    """A Keras model ``[batch, I] -> [batch, O]`` computing this genome.

    Example::

        model = to_keras(*algo.best[:2], cfg)
        model.save("best.keras")
    """
    n = _single(nodes, conns, config)
    layer = NEATNetworkLayer(config.num_inputs, config.num_outputs, n.weights[0].numpy(), n.bias[0].numpy(),
                             n.response[0].numpy(), n.act[0].numpy(), n.agg[0].numpy(), n.level[0].numpy(),
                             config.activation_options, config.aggregation_options, mask=n.mask[0].numpy(),
                             name="neat_network")
    inp = keras.Input((config.num_inputs,), name="inputs")
    return keras.Model(inp, layer(inp), name="neat_genome")


def _sympy_act(name, z):
    import sympy as sp

    table = {
        "sigmoid": lambda z: 1 / (1 + sp.exp(-5 * z)),
        "tanh": lambda z: sp.tanh(sp.Rational(5, 2) * z),
        "sin": lambda z: sp.sin(5 * z),
        "gauss": lambda z: sp.exp(-5 * z ** 2),
        "relu": lambda z: sp.Max(z, 0),
        "elu": lambda z: sp.Piecewise((z, z > 0), (sp.exp(z) - 1, True)),
        "lelu": lambda z: sp.Piecewise((z, z > 0), (sp.Rational(1, 200) * z, True)),
        "selu": lambda z: sp.Piecewise((1.0507009873554805 * z, z > 0),
                                       (1.0507009873554805 * 1.6732632423543772 * (sp.exp(z) - 1), True)),
        "softplus": lambda z: sp.Rational(1, 5) * sp.log(1 + sp.exp(5 * z)),
        "identity": lambda z: z,
        "clamped": lambda z: sp.Max(-1, sp.Min(1, z)),
        "inv": lambda z: 1 / z,
        "log": lambda z: sp.log(z),
        "exp": lambda z: sp.exp(z),
        "abs": lambda z: sp.Abs(z),
        "hat": lambda z: sp.Max(0, 1 - sp.Abs(z)),
        "square": lambda z: z ** 2,
        "cube": lambda z: z ** 3,
    }
    if name not in table:
        return sp.Function(name)(z)
    return table[name](z)


def _sympy_agg(name, terms):
    import sympy as sp

    if name == "sum":
        return sp.Add(*terms)
    if name == "product":
        return sp.Mul(*terms)
    if name == "max":
        return sp.Max(*terms)
    if name == "min":
        return sp.Min(*terms)
    if name == "mean":
        return sp.Add(*terms) / len(terms)
    return sp.Function(name)(*terms)


def to_sympy(nodes, conns, config: NEATConfig, precision: int = 6):
    """sympy expressions (one per output) of a feed-forward genome, in symbols
    ``x0..x{I-1}``.  Activations use neat-python's definitions without the
    numerical clipping (e.g. ``sigmoid(z) = 1/(1+exp(-5z))``)."""
    import sympy as sp

    if not config.feed_forward:
        raise ConfigError("to_sympy needs a feed-forward genome")
    nd, cd = net._genome_dicts(np.asarray(nodes), np.asarray(conns))
    I, O = config.num_inputs, config.num_outputs
    xs = sp.symbols(f"x0:{I}")
    incoming: dict[int, list] = {}
    for a, b, w in cd:
        incoming.setdefault(b, []).append((a, w))
    expr = {i: xs[i] for i in range(I)}
    f = lambda v: sp.Float(round(v, precision))  # noqa: E731

    def node(k, stack=()):
        if k in expr:
            return expr[k]
        if k in stack:
            raise ConfigError("genome has a cycle")
        bias, resp, agg, act = nd[k]
        terms = [f(w) * node(a, stack + (k,)) for a, w in incoming.get(k, [])]
        s = _sympy_agg(agg, terms) if terms else sp.Integer(0)
        expr[k] = _sympy_act(act, f(bias) + f(resp) * s)
        return expr[k]

    return [node(k) for k in range(I, I + O)]


def draw(nodes, conns, config: NEATConfig, path: str | None = None, show_disabled: bool = True):
    """Draws the genome with matplotlib (no graphviz): inputs at the bottom,
    outputs on top, hidden nodes by topological level; edge width ~ |weight|,
    red negative / blue positive, disabled edges dashed.  Saves to ``path``
    (format from the extension, e.g. ``.png`` or ``.svg``) and returns the
    figure."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    nodes = np.asarray(nodes)
    conns = np.asarray(conns)
    I, O = config.num_inputs, config.num_outputs
    keys = [int(k) for k in nodes[:, 0] if not np.isnan(k)]
    # levels over all (also disabled) connections so the picture is stable
    lev = {k: 0 for k in keys if k < I}
    edges = [(int(r[0]), int(r[1]), float(r[3]), r[2] > 0.5) for r in conns if not np.isnan(r[0])]
    for _ in range(len(keys) + 1):
        for a, b, _, _ in edges:
            if b >= I and a in keys:
                lev[b] = max(lev.get(b, 1), lev.get(a, 0) + 1) if config.feed_forward else max(lev.get(b, 1), 1)
    top = max([lev.get(k, 1) for k in keys] + [1])
    for k in keys:
        lev.setdefault(k, 1)
        if I <= k < I + O:
            lev[k] = top + (0 if config.feed_forward else 1)
    rows: dict[int, list] = {}
    for k in sorted(keys):
        rows.setdefault(lev[k], []).append(k)
    pos = {}
    for l, ks in rows.items():
        for i, k in enumerate(ks):
            pos[k] = ((i + 1) / (len(ks) + 1), l)
    fig, ax = plt.subplots(figsize=(6, 1.5 + 1.2 * len(rows)))
    wmax = max([abs(w) for _, _, w, _ in edges] + [1e-6])
    for a, b, w, en in edges:
        if (not en and not show_disabled) or a not in pos or b not in pos:
            continue
        (x0, y0), (x1, y1) = pos[a], pos[b]
        ax.annotate("", xy=(x1, y1), xytext=(x0, y0),
                    arrowprops=dict(arrowstyle="->", color="tab:blue" if w >= 0 else "tab:red",
                                    lw=0.5 + 3 * abs(w) / wmax, ls="-" if en else "--", alpha=0.8 if en else 0.4,
                                    connectionstyle="arc3,rad=0.3" if a == b else "arc3,rad=0.0"))
    for k, (x, y) in pos.items():
        color = "lightgreen" if k < I else ("lightsalmon" if k < I + O else "lightgray")
        ax.scatter([x], [y], s=500, c=color, edgecolors="k", zorder=3)
        ax.text(x, y, str(k), ha="center", va="center", fontsize=8, zorder=4)
    ax.set_axis_off()
    ax.set_ylim(-0.5, max(rows) + 0.5)
    if path:
        fig.savefig(path, bbox_inches="tight")
    return fig
