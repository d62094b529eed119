"""Export of one NEAT genome: Keras model, sympy expression, graph picture,
neat-python genome.

All three take a single genome ``nodes [N, 5]``, ``conns [C, 5]`` (e.g.
``algo.best[:2]``) and the :class:`~tfevo.neat.config.NEATConfig`.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from tfevo.core import ConfigError, ShapeError
from tfevo.neat import functions as F
from tfevo.neat import network as net
from tfevo.neat.config import NEATConfig

__all__ = ["NEATNetworkLayer", "to_keras", "to_sympy", "draw", "to_neat_python"]

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


def _keras_act(name, z):
    """The activation ``name`` of :mod:`tfevo.neat.functions` in built-in Keras ops."""
    from keras import ops

    c = ops.clip
    L, A = 1.0507009873554804934193349852946, 1.6732632423543772848170429916717
    table = {
        "sigmoid": lambda z: ops.sigmoid(c(5.0 * z, -60.0, 60.0)),
        "tanh": lambda z: ops.tanh(c(2.5 * z, -60.0, 60.0)),
        "sin": lambda z: ops.sin(c(5.0 * z, -60.0, 60.0)),
        "gauss": lambda z: ops.exp(-5.0 * c(z, -3.4, 3.4) * c(z, -3.4, 3.4)),
        "relu": lambda z: ops.maximum(z, 0.0),
        "elu": lambda z: ops.where(z > 0.0, z, ops.expm1(ops.minimum(z, 0.0))),
        "lelu": lambda z: ops.where(z > 0.0, z, 0.005 * z),
        "selu": lambda z: ops.where(z > 0.0, L * z, L * A * ops.expm1(ops.minimum(z, 0.0))),
        "softplus": lambda z: 0.2 * ops.softplus(c(5.0 * z, -60.0, 60.0)),
        "identity": lambda z: z,
        "clamped": lambda z: c(z, -1.0, 1.0),
        "inv": lambda z: ops.where(ops.equal(z, 0.0), 0.0, 1.0 / ops.where(ops.equal(z, 0.0), 1.0, z)),
        "log": lambda z: ops.log(ops.maximum(z, 1e-7)),
        "exp": lambda z: ops.exp(c(z, -60.0, 60.0)),
        "abs": lambda z: ops.abs(z),
        "hat": lambda z: ops.maximum(0.0, 1.0 - ops.abs(z)),
        "square": lambda z: z * z,
        "cube": lambda z: z * z * z,
    }
    return table[name](z)


def _keras_agg(name, terms):
    """The aggregation ``name`` over the list of ``[batch]`` terms in built-in Keras ops."""
    from keras import ops

    if len(terms) == 1 and name != "median":
        return terms[0]
    t = ops.stack(terms, axis=-1)  # [batch, k], incoming values in source-slot order
    k = len(terms)
    if name == "sum":
        return ops.sum(t, axis=-1)
    if name == "product":
        return ops.prod(t, axis=-1)
    if name == "max":
        return ops.max(t, axis=-1)
    if name == "min":
        return ops.min(t, axis=-1)
    if name == "mean":
        return ops.sum(t, axis=-1) / float(k)
    if name == "maxabs":  # the first term of largest magnitude
        i = ops.argmax(ops.abs(t), axis=-1)
        return ops.take_along_axis(t, ops.expand_dims(i, -1), axis=-1)[:, 0]
    if name == "median":  # mean of the two middle values (one when k is odd)
        srt = ops.sort(t, axis=-1)
        return 0.5 * (srt[:, (k - 1) // 2] + srt[:, k // 2])
    raise ConfigError(f"aggregation {name!r} has no Keras form")


_KERAS_AGGS = ("sum", "product", "max", "min", "mean", "maxabs", "median")
_KERAS_ACTS = ("sigmoid", "tanh", "sin", "gauss", "relu", "elu", "lelu", "selu", "softplus", "identity", "clamped",
               "inv", "log", "exp", "abs", "hat", "square", "cube")


def _genome_graph(nodes, conns, config):
    """(node dict key -> (bias, response, agg, act), incoming key -> [(src, weight)] in
    source-slot order with duplicate pairs summed, as the dense networks have them)."""
    nodes = np.asarray(nodes, np.float32)
    conns = np.asarray(conns, np.float32)
    nd, cd = net._genome_dicts(nodes, conns)
    slot = {int(r[0]): i for i, r in enumerate(nodes) if not np.isnan(r[0])}
    acc: dict[int, dict[int, float]] = {}
    for a, b, w in cd:
        if a in nd and b in nd and b >= config.num_inputs:
            d = acc.setdefault(b, {})
            d[a] = float(np.float32(d.get(a, 0.0) + w)) if a in d else w
    incoming = {b: sorted(d.items(), key=lambda aw: slot[aw[0]]) for b, d in acc.items()}
    return nd, incoming


def to_keras(nodes, conns, config: NEATConfig) -> "keras.Model":
    """A Keras model ``[batch, I] -> [batch, O]`` computing this genome.

    The model is built from Keras' own operations (``keras.ops``), node by
    node in topological order, so a saved ``.keras`` file loads with plain
    ``keras.models.load_model`` in a process that has never imported tfevo.
    Outputs match the population inference to float rounding.  A genome
    using a user-registered activation or aggregation is exported as a
    :class:`NEATNetworkLayer` instead (loading it needs ``tfevo.neat``
    imported and the function registered).

    Example::

        model = to_keras(*algo.best[:2], cfg)
        model.save("best.keras")
    """
    n = _single(nodes, conns, config)
    I, O = config.num_inputs, config.num_outputs
    nd, incoming = _genome_graph(nodes, conns, config)
    if not ({nd[k][2] for k in nd if k >= I} <= set(_KERAS_AGGS)
            and {nd[k][3] for k in nd if k >= I} <= set(_KERAS_ACTS)):
        layer = NEATNetworkLayer(I, O, n.weights[0].numpy(), n.bias[0].numpy(), n.response[0].numpy(),
                                 n.act[0].numpy(), n.agg[0].numpy(), n.level[0].numpy(), config.activation_options,
                                 config.aggregation_options, mask=n.mask[0].numpy(), name="neat_network")
        inp = keras.Input((I,), name="inputs")
        return keras.Model(inp, layer(inp), name="neat_genome")
    from keras import ops

    inp = keras.Input((I,), name="inputs")
    values = {i: inp[:, i] for i in range(I)}

    def node(k, stack=()):
        if k in values:
            return values[k]
        if k in stack:
            raise ConfigError("genome has a cycle")
        bias, resp, agg, act = nd[k]
        terms = [node(a, stack + (k,)) * float(w) for a, w in incoming.get(k, [])]
        if terms:
            z = float(bias) + float(resp) * _keras_agg(agg, terms)
        else:  # no enabled input: the empty aggregation (functions.empty_aggregation)
            z = ops.zeros_like(inp[:, 0]) + float(bias)
            if F.empty_aggregation(agg):
                z = z + float(resp) * F.empty_aggregation(agg)
        values[k] = _keras_act(act, z)
        return values[k]

    out = ops.stack([node(k) for k in range(I, I + O)], axis=-1)
    return keras.Model(inp, out, name="neat_genome")


def _sympy_act(name, z):
    """The activation ``name`` as a sympy expression (the clipping of
    :mod:`tfevo.neat.functions` kept where it changes the value: sin, exp, log,
    inv, softplus).  Branches are written with Max/Min/sign instead of
    Piecewise, which sympy folds through the whole (shared) argument."""
    import sympy as sp

    def mx(*a):
        return sp.Max(*a, evaluate=False)

    def mn(*a):
        return sp.Min(*a, evaluate=False)

    def clip(v, lo, hi):
        return mx(lo, mn(hi, v))

    L, A = sp.Float(1.0507009873554805), sp.Float(1.6732632423543772)
    table = {
        "sigmoid": lambda z: 1 / (1 + sp.exp(-5 * z)),
        "tanh": lambda z: sp.tanh(sp.Rational(5, 2) * z),
        "sin": lambda z: sp.sin(clip(5 * z, -60, 60)),
        "gauss": lambda z: sp.exp(-5 * clip(z, sp.Rational(-17, 5), sp.Rational(17, 5)) ** 2),
        "relu": lambda z: mx(z, 0),
        "elu": lambda z: mx(z, 0) + sp.exp(mn(z, 0)) - 1,
        "lelu": lambda z: mx(z, 0) + sp.Rational(1, 200) * mn(z, 0),
        "selu": lambda z: L * mx(z, 0) + L * A * (sp.exp(mn(z, 0)) - 1),
        "softplus": lambda z: sp.Rational(1, 5) * sp.log(1 + sp.exp(clip(5 * z, -60, 60))),
        "identity": lambda z: z,
        "clamped": lambda z: clip(z, -1, 1),
        "inv": lambda z: sp.sign(z) ** 2 / (z + 1 - sp.sign(z) ** 2),  # 1/z, and 0 at 0
        "log": lambda z: sp.log(mx(z, sp.Float(1e-7))),
        "exp": lambda z: sp.exp(clip(z, -60, 60)),
        "abs": lambda z: sp.Abs(z),
        "hat": lambda z: mx(0, 1 - sp.Abs(z)),
        "square": lambda z: z ** 2,
        "cube": lambda z: z ** 3,
    }
    if name in table:
        return table[name](z)
    return _implemented(name, "activation")(z)


def _implemented(name, kind):
    """A user-registered function as a sympy function that ``lambdify`` evaluates
    (its Python definition, ``py_fn`` of ``register_activation``/``register_aggregation``)."""
    from sympy.utilities.lambdify import implemented_function
    import sympy as sp

    py = (F.PY_ACTIVATIONS if kind == "activation" else F.PY_AGGREGATIONS).get(name)
    if py is None:
        raise ConfigError(f"{kind} {name!r} has no Python definition for to_sympy; register it with py_fn=")
    if kind == "activation":
        return implemented_function(sp.Function(name), py)
    return implemented_function(sp.Function(name), lambda *v: py(list(v)))


def _sorted_terms(terms):
    """``terms`` in increasing order as Min/Max expressions (odd-even transposition
    network: k passes of adjacent compare-exchanges, O(k^2) shared subexpressions)."""
    import sympy as sp

    v = list(terms)
    for step in range(len(v)):
        for i in range(step % 2, len(v) - 1, 2):
            v[i], v[i + 1] = sp.Min(v[i], v[i + 1], evaluate=False), sp.Max(v[i], v[i + 1], evaluate=False)
    return v


def _sympy_agg(name, terms):
    import sympy as sp

    k = len(terms)
    if k == 1 and name != "product":
        return terms[0]
    if name == "sum":
        return sp.Add(*terms, evaluate=False)
    if name == "product":
        return sp.Mul(*terms, evaluate=False)
    if name == "max":
        return sp.Max(*terms, evaluate=False)
    if name == "min":
        return sp.Min(*terms, evaluate=False)
    if name == "mean":
        return sp.Mul(sp.Add(*terms, evaluate=False), sp.Rational(1, k), evaluate=False)
    if name == "maxabs":  # the first term of largest magnitude
        r = terms[0]
        for t in terms[1:]:
            # the larger of (r, t) when r + t > 0, the smaller when r + t < 0, r when r + t = 0
            # (equal magnitudes: the earlier term); no Piecewise (see _sympy_act)
            add = lambda *a: sp.Add(*a, evaluate=False)  # noqa: E731
            mul = lambda *a: sp.Mul(*a, evaluate=False)  # noqa: E731
            sg = sp.sign(add(r, t))
            r = add(mul(sp.Rational(1, 2), add(r, t, mul(sg, sp.Abs(add(r, mul(-1, t)))))),
                    mul(add(1, mul(-1, sp.Abs(sg))), r))
        return r
    if name == "median":  # mean of the two middle values
        srt = _sorted_terms(terms)
        lo, hi = (k - 1) // 2, k // 2
        return srt[lo] if lo == hi else sp.Mul(sp.Add(srt[lo], srt[hi], evaluate=False), sp.Rational(1, 2),
                                                evaluate=False)
    return _implemented(name, "aggregation")(*terms)


def to_sympy(nodes, conns, config: NEATConfig, precision: int = 6):
    """sympy expressions (one per output) of a feed-forward genome, in symbols
    ``x0..x{I-1}``.  Every built-in activation and aggregation has a closed
    form (``maxabs`` a piecewise choice, ``median`` order statistics as
    min/max), so ``sympy.lambdify`` evaluates the result; activations use
    neat-python's definitions (e.g. ``sigmoid(z) = 1/(1+exp(-5z))``), with
    the clipping that changes values (sin, exp, log, inv, softplus).
    User-registered functions become sympy functions that ``lambdify``
    evaluates through their Python definition."""
    import sympy as sp

    if not config.feed_forward:
        raise ConfigError("to_sympy needs a feed-forward genome")
    nd, incoming = _genome_graph(nodes, conns, config)
    I, O = config.num_inputs, config.num_outputs
    xs = sp.symbols(f"x0:{I}")
    expr = {i: xs[i] for i in range(I)}
    f = lambda v: sp.Float(round(v, precision))  # noqa: E731

    def node(k, stack=()):
        if k in expr:
            return expr[k]
        if k in stack:
            raise ConfigError("genome has a cycle")
        bias, resp, agg, act = nd[k]
        # products and sums unevaluated: sympy would distribute a number over a
        # sum, copying a shared subexpression once per use (exponential in depth)
        terms = [sp.Mul(f(w), node(a, stack + (k,)), evaluate=False) for a, w in incoming.get(k, [])]
        s = _sympy_agg(agg, terms) if terms else sp.Integer(int(F.empty_aggregation(agg)))
        expr[k] = _sympy_act(act, sp.Add(f(bias), sp.Mul(f(resp), s, evaluate=False), evaluate=False))
        return expr[k]

    return [node(k) for k in range(I, I + O)]


def draw(nodes, conns, config: NEATConfig, path: str | None = None, show_disabled: bool = True,
         title: str | None = None):
    """Draws the genome with matplotlib (no graphviz): inputs at the bottom,
    outputs on top, hidden nodes by topological level; edge width ~ |weight|,
    red negative / blue positive, disabled edges dashed.  A legend explains
    the node and edge colours; the title (default: the genome's node and
    enabled-connection counts) sits on top.  Saves to ``path`` (format from
    the extension, e.g. ``.png`` or ``.svg``) and returns the figure."""
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
    from matplotlib.lines import Line2D

    def node_mark(color, label):
        return Line2D([], [], marker="o", ls="", markersize=11, markerfacecolor=color, markeredgecolor="k",
                      label=label)

    handles = [node_mark("lightgreen", "input"), node_mark("lightgray", "hidden"), node_mark("lightsalmon", "output"),
               Line2D([], [], color="tab:blue", lw=2, label="weight > 0"),
               Line2D([], [], color="tab:red", lw=2, label="weight < 0")]
    if show_disabled and any(not en for *_, en in edges):
        handles.append(Line2D([], [], color="gray", lw=1.5, ls="--", label="disabled"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False,
              title="width ~ |weight|", title_fontsize=8)
    if title is None:
        hidden = sum(1 for k in keys if k >= I + O)
        title = f"NEAT genome: {hidden} hidden nodes, {sum(1 for *_, en in edges if en)} enabled connections"
    ax.set_title(title)
    if path:
        fig.savefig(path, bbox_inches="tight")
    return fig


def to_neat_python(nodes, conns, config: NEATConfig, key: int = 0):
    """One genome as a neat-python ``DefaultGenome`` (needs ``neat-python`` installed).

    Node keys follow neat-python's numbering: input ``i`` is ``-(i + 1)``, node ``k >= I``
    (outputs first, then hidden nodes) is ``k - I``.  Biases, responses and weights are the
    genome's float32 values as doubles; activation and aggregation carry their names;
    disabled connections stay, with ``enabled=False``; a connection's innovation marker is
    its tfevo marker (a pair held twice, under two markers, becomes one gene carrying the
    sum of its enabled weights, which is what both networks compute).  Works for feed-forward and recurrent genomes, e.g.
    ``neat.nn.FeedForwardNetwork.create(to_neat_python(*algo.best[:2], cfg), neat_config)``
    computes the network with neat-python, and neat-python's ``distance``,
    ``visualize`` helpers or pickles take it as any of their own genomes.
    """
    try:
        import neat
    except ImportError as e:  # pragma: no cover - neat-python is a test extra
        raise ConfigError("to_neat_python needs neat-python (pip install neat-python)") from e
    from tfevo.neat.genome import (CONN_ENABLED, CONN_IN, CONN_MARKER, CONN_OUT, CONN_WEIGHT, NODE_ACT, NODE_AGG,
                                   NODE_BIAS, NODE_KEY, NODE_RESPONSE)

    nodes = np.asarray(nodes, np.float32)
    conns = np.asarray(conns, np.float32)
    if nodes.ndim != 2 or conns.ndim != 2:
        raise ShapeError(f"to_neat_python takes ONE genome: nodes [N, 5] and conns [C, 5], got shapes "
                         f"{list(nodes.shape)} and {list(conns.shape)}")
    I = int(config.num_inputs)

    def nkey(k):
        k = int(k)
        return -(k + 1) if k < I else k - I

    g = neat.DefaultGenome(int(key))
    for row in nodes:
        if np.isnan(row[NODE_KEY]) or row[NODE_KEY] < I:
            continue
        ng = neat.genes.DefaultNodeGene(nkey(row[NODE_KEY]))
        ng.bias, ng.response = float(row[NODE_BIAS]), float(row[NODE_RESPONSE])
        ng.aggregation = F.aggregation_name(int(row[NODE_AGG]))
        ng.activation = F.activation_name(int(row[NODE_ACT]))
        ng.time_constant = 1.0  # (neat-python 2.0's CTRNN field; unused by its feed-forward and recurrent nets)
        g.nodes[ng.key] = ng
    for row in conns:
        if np.isnan(row[CONN_IN]):
            continue
        pair = (nkey(row[CONN_IN]), nkey(row[CONN_OUT]))
        enabled, w = bool(row[CONN_ENABLED] > 0.5), float(row[CONN_WEIGHT])
        cg = g.connections.get(pair)
        if cg is None:
            cg = neat.genes.DefaultConnectionGene(pair, innovation=int(row[CONN_MARKER]))
            cg.weight, cg.enabled = w, enabled
            g.connections[pair] = cg
        elif enabled:  # one pair twice (two markers): one gene whose weight is the enabled ones' sum
            cg.weight, cg.enabled = (cg.weight + w if cg.enabled else w), True
    return g
