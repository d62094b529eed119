"""``keras.layers.SimpleRNN``, ``GRU`` (``reset_after`` either way) and ``LSTM``, with
``return_sequences``, ``return_state`` and ``go_backwards`` either way (``stateful=True`` is refused).

The input projection of all time steps is one batched product per member; the recurrence then
multiplies each member's state by its own recurrent kernel step by step (a Python loop for a
static number of steps, ``tf.scan`` for an open time axis).  As a layer call of a population
forward, the state starts from zeros as in Keras; through :meth:`forward_state` it starts from the
given states and the final states come back -- what a recurrent :class:`tfevo.nn.Policy` carries
across environment steps.
"""

from __future__ import annotations

import abc

import keras
import tensorflow as tf

from tfevo.core import ConfigError
from tfevo.nn.init import as_seed, sample_population
from tfevo.nn.layers import population_dense, sample_activation
from tfevo.nn.translators.base import PopulationInit, Translator, register_translator, select

L = keras.layers


def _act(fn):
    return sample_activation(fn) if fn is not None else (lambda v: v)


class _RecurrentBase(Translator):
    weight_names = ("kernel", "recurrent_kernel", "bias")
    gates = 1  # blocks of `units` columns in the kernels

    def check(self):
        layer = self.layer
        if getattr(layer, "stateful", False):
            raise ConfigError(f"layer {self.name}: stateful=True is not supported (a recurrent tfevo.nn.Policy "
                              "carries the state across environment steps itself)")
        if len(self.input_shapes[0]) != 3:
            raise ConfigError(f"layer {self.name}: expects inputs (batch, time, features), got {self.input_shapes[0]}")
        self.units = int(layer.cell.units)
        self.cell = layer.cell

    def initializer(self, variable):
        cell = self.cell
        return {"kernel": cell.kernel_initializer, "recurrent_kernel": cell.recurrent_initializer,
                "bias": cell.bias_initializer}[variable.name]

    @property
    def state_sizes(self):
        return (self.units,)

    @abc.abstractmethod
    def _step(self, xp, states, rk, rb):
        """One time step: ``xp [n, B, G*u]`` (input projection incl. its bias), the states, the
        members' recurrent kernels ``rk [n, u, G*u]`` and recurrent bias -> the new states."""

    def _split_bias(self, bias):
        return bias, None

    def forward(self, inputs, weights, indices):
        x = inputs[0]
        n, b = tf.shape(x)[0], tf.shape(x)[1]
        zeros = [tf.zeros(tf.stack([n, b, sz]), x.dtype) for sz in self.state_sizes]
        out, _ = self.forward_state(inputs, weights, indices, zeros)
        return out

    def forward_state(self, inputs, weights, indices, states):
        x = inputs[0]  # [n, B, T, F]
        if self.layer.go_backwards:  # Keras: the reversed sequence, outputs in the order they are computed
            x = tf.reverse(x, [2])
        kernel, rk = weights[0], select(weights[1], indices)
        bias = weights[2] if len(weights) > 2 else None
        in_bias, rb = self._split_bias(bias)
        xp = population_dense(x, kernel, in_bias, None, indices)  # [n, B, T, G*u]
        if rb is not None:
            rb = select(rb, indices)[:, None, :]
        states = list(states)
        T = x.shape[2]
        if T is not None:
            seq = []
            for t in range(T):
                states = self._step(xp[:, :, t], states, rk, rb)
                seq.append(states[0])
            seq_out = tf.stack(seq, 2) if self.layer.return_sequences else None
        else:
            xs = tf.transpose(xp, [2, 0, 1, 3])  # time first

            def body(carry, xt):
                return tuple(self._step(xt, list(carry), rk, rb))

            hist = tf.scan(body, xs, initializer=tuple(states))
            states = [h[-1] for h in hist]
            seq_out = tf.transpose(hist[0], [1, 2, 0, 3]) if self.layer.return_sequences else None
        out = seq_out if seq_out is not None else states[0]
        if self.layer.return_state:
            return [out] + list(states), states
        return out, states


@register_translator(L.SimpleRNN)
class SimpleRNNTranslator(_RecurrentBase):
    def _step(self, xp, states, rk, rb):
        h = xp + tf.matmul(states[0], rk)
        return [_act(self.cell.activation)(h)]


@register_translator(L.GRU)
class GRUTranslator(_RecurrentBase):
    gates = 3

    def _split_bias(self, bias):
        if bias is None or not self.cell.reset_after:
            return bias, None
        return bias[:, 0], bias[:, 1]  # input bias, recurrent bias

    def _step(self, xp, states, rk, rb):
        u, cell = self.units, self.cell
        h_tm1 = states[0]
        x_z, x_r, x_h = xp[..., :u], xp[..., u:2 * u], xp[..., 2 * u:]
        if cell.reset_after:
            inner = tf.matmul(h_tm1, rk)
            if rb is not None:
                inner = inner + rb
            r_z, r_r, r_h = inner[..., :u], inner[..., u:2 * u], inner[..., 2 * u:]
        else:
            inner = tf.matmul(h_tm1, rk[:, :, :2 * u])
            r_z, r_r = inner[..., :u], inner[..., u:]
        z = _act(cell.recurrent_activation)(x_z + r_z)
        r = _act(cell.recurrent_activation)(x_r + r_r)
        if cell.reset_after:
            r_h = r * r_h
        else:
            r_h = tf.matmul(r * h_tm1, rk[:, :, 2 * u:])
        hh = _act(cell.activation)(x_h + r_h)
        return [z * h_tm1 + (1 - z) * hh]


@register_translator(L.LSTM)
class LSTMTranslator(_RecurrentBase):
    gates = 4

    @property
    def state_sizes(self):
        return (self.units, self.units)  # h, c

    def initializer(self, variable):
        cell = self.cell
        if variable.name == "bias" and cell.unit_forget_bias:
            u, base = self.units, cell.bias_initializer

            def init(shape, popsize, seed):  # Keras: [base(u), ones(u), base(2u)]
                s1, s2 = tf.unstack(tf.random.experimental.stateless_split(as_seed(seed), 2))
                return tf.concat([sample_population(base, (u,), popsize, s1), tf.ones([popsize, u]),
                                  sample_population(base, (2 * u,), popsize, s2)], 1)

            return PopulationInit(init, "unit_forget_bias")
        return super().initializer(variable)

    def _step(self, xp, states, rk, rb):
        u, cell = self.units, self.cell
        h_tm1, c_tm1 = states
        z = xp + tf.matmul(h_tm1, rk)
        ra, a = _act(cell.recurrent_activation), _act(cell.activation)
        i, f = ra(z[..., :u]), ra(z[..., u:2 * u])
        c = f * c_tm1 + i * a(z[..., 2 * u:3 * u])
        o = ra(z[..., 3 * u:])
        return [o * a(c), c]
