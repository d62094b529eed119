"""The C++ kernel paths of :class:`tfevo.nn.PopulationModel`.

Two fast paths read the members' weights in place from the flat parameters
``[P, D]`` instead of splitting them into per-layer tensors:

* a plain MLP runs as ONE kernel (``TfevoPopulationMlp``, :mod:`tfevo.nn.fused_mlp`)
  for calls with few rows per member (a rollout step);
* Dense and Conv2D layers of a subset forward run as the in-place ops
  ``TfevoIndexedDenseFlat`` / ``TfevoPopulationConv2DFlat``.

Both are chosen through :func:`tfevo.kernels.kernel` under the model's
``use_op`` (:func:`tfevo.kernels.use_ops`), so they stand aside under XLA,
with a GPU present or with ``use_op=False``; the layer-by-layer TensorFlow
walk is their reference.
"""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from tfevo import kernels

L = keras.layers

# Rows per member up to which a plain MLP runs as the fused kernel (a rollout
# step has one); with more rows the layer-by-layer path's GEMMs are faster.
_FUSED_MAX_ROWS = 4


def _flat_ops():
    from tfevo.nn.translators._kernels import flat_ops

    return flat_ops()



class KernelPaths:
    """The kernel-path half of :class:`tfevo.nn.PopulationModel` (a mixin)."""

    def _make_mlp_plan(self):
        """The :class:`~tfevo.nn.fused_mlp.MlpPlan` when the template is a plain MLP, else ``None``.

        Plain: a chain of ``Dense`` layers (activations the fused kernel has),
        optionally starting with ``Flatten``, ``Dropout`` anywhere (identity at
        inference).
        """
        from tfevo.nn.fused_mlp import MlpPlan, activation_name

        if len(self._input_ids) != 1 or len(self._output_ids) != 1 or self.state_sizes or self.num_frozen:
            return None  # (frozen weights are not in params: the layer-by-layer path runs them)
        prev, flatten = self._input_id, False
        units, w_offs, b_offs, acts = [], [], [], []
        k = int(self.input_shape[-1]) if self.input_shape else 1
        for s in self._steps:
            if s.inputs != (prev,) or len(s.outputs) != 1:
                return None
            layer = s.layer
            if type(layer) is L.Flatten and not units and not flatten:
                if layer.data_format == "channels_first" and len(self.input_shape) > 1:
                    return None  # (a transpose before the flattening: not the kernel's row-major read)
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
        ``use_op`` is not ``False`` and the kernel dispatch allows it here.
        """
        from tfevo.nn.fused_mlp import can_fuse

        if self._mlp_plan is None or self.use_op is False:
            return False
        with kernels.use_ops(self.use_op):
            return can_fuse()

    def _run_fused(self, params, x, indices):
        from tfevo.nn.fused_mlp import population_mlp

        plan = self._mlp_plan
        n, B = tf.shape(x)[0], tf.shape(x)[1]
        x3 = tf.reshape(x, [n, B, plan.in_features])
        idx = tf.range(tf.shape(params)[0], dtype=tf.int32) if indices is None else tf.cast(indices, tf.int32)
        return population_mlp(x3, params, idx, plan, use_op=True)

    #: Independent chains the in-place subset forward of a model with Conv2D layers is cut into
    #: (members ``[n*g/G, n*(g+1)/G)`` form chain ``g``).  TensorFlow's executor runs ready ops of
    #: different chains at the same time, so one chain's memory-bound Dense layer (it streams each
    #: member's weights, 16 MB per member for Nature-DQN) overlaps another chain's compute-bound
    #: convolutions.  Every member's result is the same for any value (tested); 1 = one chain.
    #: Default 1: with the single-threaded inline executor one chain was at least as fast as four
    #: on two cores (benchmarks/results/pipeline.md).
    inference_chains: int = 1

    def _run_in_place(self, params, x, indices, input_scale=None, states=None):
        """Members ``indices`` straight from ``params [P, D]``: Dense and Conv2D read their weights in
        place (C++ ops with column offsets); other weights are sliced out (small: LayerNorm gains).
        Models with Conv2D layers run as ``inference_chains`` independent chains of members."""
        G = int(self.inference_chains)
        if self.concurrent_forward and states is None:
            n = tf.shape(indices)[0]
            cuts = [(n * g) // G for g in range(G + 1)]
            xs = x if isinstance(x, list) else [x]
            return tf.concat([self._run_in_place_rows(params, [t[cuts[g]:cuts[g + 1]] for t in xs],
                                                      indices[cuts[g]:cuts[g + 1]], input_scale)
                              for g in range(G)], 0)
        return self._run_in_place_rows(params, x, indices, input_scale, states)

    @property
    def concurrent_forward(self) -> bool:
        """Whether the in-place subset forward has independent chains worth running concurrently
        (``inference_chains > 1`` and Conv2D layers): a caller should then use TensorFlow's
        multi-threaded graph executor rather than a single-threaded one."""
        return (int(self.inference_chains) > 1 and len(self._input_ids) == 1 and len(self._output_ids) == 1
                and any(type(s.layer) is L.Conv2D for s in self._steps))

    def _run_in_place_rows(self, params, x, indices, input_scale=None, states=None):
        xs = x if isinstance(x, list) else self._inputs_list(x)
        fused = None  # the first step, when it takes raw (uint8) x and applies input_scale itself
        if input_scale is not None:
            first = [s for s in self._steps if self._input_id in s.inputs]
            if (len(xs) == 1 and len(first) == 1 and first[0].flat_fn is not None
                    and first[0].tr.takes_input_scale and not first[0].consts):
                fused = first[0]
            else:
                xs = [tf.cast(t, tf.float32) * input_scale for t in xs]

        def weight(i):
            o = self._offsets[i]
            return tf.reshape(tf.cast(params[:, o:o + self._sizes[i]], tf.float32), (-1,) + self.weight_shapes[i])

        def call(step, ins, st):
            if step.consts:  # frozen weights: not in params
                if step.frozen_layer is not None and st is None:
                    return step.run_frozen(ins), ()
                w, idx = step.weights_for(weight, ins, indices)
                return self._apply(step, ins, w, idx, st)
            offs = [self._offsets[i] for i in step.weights]
            if step is fused:
                return step.flat_fn(ins, params, offs, indices, input_scale=input_scale), ()
            if step.flat_fn is not None:
                return step.flat_fn(ins, params, offs, indices), ()
            return self._apply(step, ins, [weight(i) for i in step.weights], indices, st)

        y, new = self._walk(xs, call, states)
        return y if states is None else (y, new)

    def in_place_available(self) -> bool:
        """Whether a subset forward with flat ``params [P, D]`` reads the weights in place (no copy).

        True when the kernel dispatch allows the in-place ops (``use_op``; built,
        not XLA-compiled, no GPU in the way) and ``conv_method="auto"`` (for
        Conv2D layers); then :meth:`Policy.prepare
        <tfevo.nn.Policy.prepare>` keeps the flat parameters instead of
        splitting them.
        """
        if self.fused_mlp:
            return True
        if self.use_op is False or not all(s.flat_fn is not None for s in self._steps if type(s.layer) is L.Conv2D):
            return False
        with kernels.use_ops(self.use_op):
            return _flat_ops() is not None

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
