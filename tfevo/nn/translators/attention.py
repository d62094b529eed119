"""``keras.layers.Attention``, ``AdditiveAttention`` and ``MultiHeadAttention``.

Every member's scores, softmax and weighted sum are one batched product over the population tensor
``[n, B, ...]``; the projections of ``MultiHeadAttention`` are per-member Dense products
(:func:`tfevo.nn.population_dense`, so ``indices`` read the chosen members' kernels in place).
``use_causal_mask=True`` (and ``MultiHeadAttention``'s ``sliding_window``) masks scores as Keras does;
``return_attention_scores=True`` gives the scores as a second output.  Dropout inside attention is the
identity, as at Keras inference.  Mask tensors given to the call (``mask=``, ``attention_mask=``,
``query_mask=``...) are refused.
"""

from __future__ import annotations

import math

import keras
import numpy as np
import tensorflow as tf

from tfevo.core import ConfigError
from tfevo.nn.init import as_seed, sample_population
from tfevo.nn.layers import population_dense
from tfevo.nn.translators.base import PopulationInit, Translator, per_member, register_translator, select

L = keras.layers
_NEG = 1.0e9  # what Keras subtracts from masked float32 scores


def _softmax_last(s):
    """Softmax over the last axis of a population tensor of any rank (CPU softmax takes rank <= 5)."""
    if s.shape.rank <= 5:
        return tf.nn.softmax(s, -1)
    flat = tf.nn.softmax(tf.reshape(s, [-1, tf.shape(s)[-1]]), -1)
    return tf.reshape(flat, tf.shape(s))


def _position_mask(tq, tk, causal: bool, window):
    """``[tq, tk]`` bool, True where query ``i`` may attend to key ``j`` (Keras: ``i >= j`` when causal,
    ``|i - j| < window`` with a sliding window), or ``None`` without either."""
    if not causal and window is None:
        return None
    i = tf.range(tq)[:, None]
    j = tf.range(tk)[None, :]
    mask = tf.ones([tq, tk], tf.bool)
    if causal:
        mask = mask & (i >= j)
    if window is not None:
        mask = mask & (tf.abs(i - j) < int(window))
    return mask


def _masked(scores, mask):
    return scores if mask is None else tf.where(mask, scores, scores - _NEG)


def _refuse_mask_tensors(tr, accepted, what: str) -> None:
    if None in tr.input_roles and len(tr.input_roles) > 2:  # (Keras's call record could not be matched)
        raise ConfigError(f"layer {tr.name}: called on {len(tr.input_roles)} tensors whose call arguments could not "
                          f"be told apart (a mask would pass for a key); accepted: {what}")
    for role in tr.input_roles:
        if role is not None and role not in accepted:
            raise ConfigError(f"layer {tr.name}: a tensor given as {role}= is not supported (masks are not "
                              f"propagated); accepted: {what}, and use_causal_mask=True")


class _AttentionBase(Translator):
    num_inputs = None
    optional_weights = ("scale", "concat_score_weight")

    def check(self):
        _refuse_mask_tensors(self, ("inputs",), "the [query, value] or [query, value, key] list")
        n = len(self.input_shapes)
        if n not in (2, 3):
            raise ConfigError(f"layer {self.name}: called on {n} tensors; accepted: [query, value] or "
                              "[query, value, key]")
        self.causal = bool(self.call_kwargs.get("use_causal_mask", False))
        self.return_scores = bool(self.call_kwargs.get("return_attention_scores", False))

    def forward(self, inputs, weights, indices):
        q, v = inputs[0], inputs[1]
        k = inputs[2] if len(inputs) > 2 else v
        scores = self._scores(q, k, [select(w, indices) for w in weights])  # [n, B, ..., Tq, Tv]
        mask = _position_mask(tf.shape(scores)[-2], tf.shape(scores)[-1], self.causal, None)
        w = _softmax_last(_masked(scores, mask))
        out = tf.matmul(w, v)
        return [out, w] if self.return_scores else out


@register_translator(L.Attention)
class AttentionTranslator(_AttentionBase):
    weight_names = ("scale", "concat_score_weight")

    def initializer(self, variable):
        return keras.initializers.Ones()  # both scalars start at one in Keras

    def _scores(self, q, k, weights):
        layer = self.layer
        scale = weights[0] if layer.use_scale else None
        if layer.score_mode == "dot":
            s = tf.matmul(q, k, transpose_b=True)
            return s if scale is None else s * per_member(scale, s.shape.rank)
        if layer.score_mode != "concat":
            raise ConfigError(f"layer {self.name}: score_mode={layer.score_mode!r}; accepted: 'dot', 'concat'")
        summed = q[..., :, None, :] + k[..., None, :, :]
        if scale is not None:
            summed = summed * per_member(scale, summed.shape.rank)
        s = tf.reduce_sum(tf.tanh(summed), -1)
        return s * per_member(weights[-1], s.shape.rank)


@register_translator(L.AdditiveAttention)
class AdditiveAttentionTranslator(_AttentionBase):
    weight_names = ("scale",)

    def initializer(self, variable):
        return keras.initializers.GlorotUniform()  # Keras's initializer of the [dim] scale

    def _scores(self, q, k, weights):
        t = tf.tanh(q[..., :, None, :] + k[..., None, :, :])
        if self.layer.use_scale:
            t = t * per_member(weights[0], t.shape.rank)
        return tf.reduce_sum(t, -1)


def _einsum_kernel_init(init, shape, n_in: int):
    """A population initializer for an EinsumDense kernel whose first ``n_in`` axes are its inputs: Keras
    gives a VarianceScaling initializer those input and output axes (fans ``prod(shape[:n_in])`` and
    ``prod(shape[n_in:])``), sampled here as that 2-D matrix and reshaped."""
    if not isinstance(init, keras.initializers.VarianceScaling):
        return init
    cfg = init.get_config()
    cfg["input_axes"] = cfg["output_axes"] = None
    flat = type(init).from_config(cfg)
    fan_in = int(np.prod(shape[:n_in]))

    def sample(s, popsize, seed):
        w = sample_population(flat, (fan_in, int(np.prod(s)) // fan_in), popsize, as_seed(seed))
        return tf.reshape(w, (popsize, *s))

    return PopulationInit(sample, f"{type(init).__name__} with EinsumDense fans")


@register_translator(L.MultiHeadAttention)
class MultiHeadAttentionTranslator(Translator):
    num_inputs = None
    optional_weights = ("bias",)
    _PARTS = ("query", "key", "value", "gate", "attention_output")

    def check(self):
        layer = self.layer
        _refuse_mask_tensors(self, ("query", "value", "key"), "query, value and key tensors")
        n = len(self.input_shapes)
        if n not in (2, 3):
            raise ConfigError(f"layer {self.name}: called on {n} tensors; accepted: query, value and optionally "
                              "key")
        roles = self.input_roles
        if None in roles:  # two tensors: query and value (more are refused above)
            roles = ("query", "value")
        self.pos = {r: i for i, r in enumerate(roles)}
        self.causal = bool(self.call_kwargs.get("use_causal_mask", False))
        self.return_scores = bool(self.call_kwargs.get("return_attention_scores", False))
        self.window = layer.get_config().get("sliding_window")
        q_rank = len(self.input_shapes[self.pos["query"]])  # Keras rank, batch axis included
        axes = tuple(int(a) for a in layer.attention_axes)  # axes of the projected [B, ..., heads, dim]
        self.free = q_rank - 2  # sample axes before the features
        if not all(1 <= a <= self.free for a in axes):
            raise ConfigError(f"layer {self.name}: attention_axes={layer.attention_axes} for inputs of rank "
                              f"{q_rank}; accepted: sample axes 1..{self.free}")
        self.axes = axes
        if axes != (1,) and (self.causal or self.window is not None or self.return_scores):
            raise ConfigError(f"layer {self.name}: use_causal_mask, sliding_window and return_attention_scores "
                              f"are supported with attention over axis 1 only, got attention_axes={axes}")
        if self.return_scores and len(self.output_shapes) == 2:
            tq = self.input_shapes[self.pos["query"]][1]
            tk = self.input_shapes[self.pos.get("key", self.pos["value"])][1]
            want = (layer.num_heads, tq, tk)
            if tuple(self.output_shapes[1][1:]) != want:
                raise ConfigError(
                    f"layer {self.name}: Keras declares the attention scores as {tuple(self.output_shapes[1][1:])} "
                    f"but they are {want} (heads, query steps, key steps): Keras's symbolic shape is wrong when "
                    "the query and key lengths differ, so layers after it were built for a shape the scores do "
                    "not have; accepted: return_attention_scores with equal query and key lengths")
        self._index = {}
        for i, v in enumerate(layer.weights):
            part = v.path.split("/")[-2] if "/" in v.path else ""
            if part not in self._PARTS or v.name not in ("kernel", "bias"):
                raise ConfigError(f"layer {self.name}: unexpected weight {v.path} (LoRA, quantized or custom "
                                  "variants are not supported)")
            self._index[(part, v.name)] = i
        cfg = layer.get_config()
        self._kinit = keras.initializers.deserialize(cfg["kernel_initializer"])
        self._binit = keras.initializers.deserialize(cfg["bias_initializer"])

    def weight_order(self):
        return list(self.layer.weights)

    def initializer(self, variable):
        if variable.name == "bias":
            return self._binit
        part = variable.path.split("/")[-2]
        return _einsum_kernel_init(self._kinit, tuple(int(d) for d in variable.shape),
                                   2 if part == "attention_output" else 1)

    def _w(self, weights, part, name):
        i = self._index.get((part, name))
        return None if i is None else weights[i]

    def _project(self, x, weights, part, indices, activation=None):
        """EinsumDense ``[.., d] x [d, *out] (+ [*out])`` per member; ``bound`` input axes of ``x`` at its end."""
        kernel, bias = self._w(weights, part, "kernel"), self._w(weights, part, "bias")
        n_in = 2 if part == "attention_output" else 1
        ks = kernel.shape.as_list()[1:]
        d_in, out = int(np.prod(ks[:n_in])), ks[n_in:]
        x2 = tf.reshape(x, tf.concat([tf.shape(x)[:x.shape.rank - n_in], [d_in]], 0))
        y = population_dense(x2, tf.reshape(kernel, [-1, d_in, int(np.prod(out))]),
                             None if bias is None else tf.reshape(bias, [-1, int(np.prod(out))]), activation, indices)
        y = tf.reshape(y, tf.concat([tf.shape(x2)[:-1], out], 0))
        y.set_shape(x.shape[:x.shape.rank - n_in].concatenate(out))
        return y

    def _fold(self, t):
        """``[n, B, *free, N, H] -> [n, B, *other, N, T, H]`` (``T``: the attention axes, flattened)."""
        r = t.shape.rank
        att = [a + 1 for a in self.axes]  # population-tensor axes
        other = [a for a in range(2, 2 + self.free) if a not in att]
        perm = [0, 1, *other, r - 2, *att, r - 1]
        p = tf.transpose(t, perm)
        s = tf.shape(p)
        k = len(other)
        folded = tf.reshape(p, tf.concat([s[:3 + k], [-1], s[-1:]], 0))
        return folded, perm, s

    def forward(self, inputs, weights, indices):
        layer = self.layer
        query = inputs[self.pos["query"]]
        value = inputs[self.pos["value"]]
        key = inputs[self.pos["key"]] if "key" in self.pos else value
        q = self._project(query, weights, "query", indices)  # [n, B, *free, N, key_dim]
        k = self._project(key, weights, "key", indices)
        v = self._project(value, weights, "value", indices)
        q = q * (1.0 / math.sqrt(float(layer.key_dim)))
        qf, perm, q_shape = self._fold(q)
        kf, _, _ = self._fold(k)
        vf, _, _ = self._fold(v)
        scores = tf.matmul(qf, kf, transpose_b=True)  # [n, B, *other, N, Tq, Tk]
        mask = _position_mask(tf.shape(scores)[-2], tf.shape(scores)[-1], self.causal, self.window)
        w = _softmax_last(_masked(scores, mask))
        o = tf.matmul(w, vf)  # [n, B, *other, N, Tq, value_dim]
        o = tf.reshape(o, tf.concat([q_shape[:-1], tf.shape(o)[-1:]], 0))
        o = tf.transpose(o, np.argsort(perm).tolist())  # [n, B, *free, N, value_dim]
        if ("gate", "kernel") in self._index:
            o = o * self._project(query, weights, "gate", indices, activation="sigmoid")
        out = self._project(o, weights, "attention_output", indices)
        return [out, w] if self.return_scores else out
