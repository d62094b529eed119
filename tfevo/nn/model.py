"""``PopulationModel``: an ordinary Keras model turned into P networks at once.

Given a *template* Keras model, :class:`PopulationModel` knows the layout of
its weights as one flat vector of length ``D`` and runs the forward pass of a
whole population ``params [P, D]`` on inputs ``[P, B, *input_shape]`` as one
TensorFlow program (batched matrix products; convolutions through the C++
direct population convolution, or im2col where that cannot run).

The template is any Sequential or functional graph (several inputs, a dict of
inputs, several outputs, merge layers, shared layers, recurrent layers) of the
layers that have a translator (:mod:`tfevo.nn.translators`, one module per
layer type, registered by Keras class); anything else raises
:class:`tfevo.core.ConfigError` naming the layer and listing the supported ones.

Flat layout: the template's evolved weights in ``template.weights`` order (the
order of ``template.get_weights()``), each flattened row-major and
concatenated.  Frozen weights (``trainable=False``) are left out: they are
constants read from the template at construction and shared by every member.
"""

from __future__ import annotations

from typing import Sequence

import keras
import tensorflow as tf

from tfevo import kernels
from tfevo._tf_private import keras_all_layers
from tfevo.core import ConfigError, ShapeError, TraceCounter
from tfevo.nn._kernel_paths import _FUSED_MAX_ROWS, KernelPaths
from tfevo.nn._template import TemplateParser, finalize_states
from tfevo.nn.init import as_seed, sample_population
from tfevo.nn.layers import CONV_METHODS

__all__ = ["PopulationModel"]


L = keras.layers



class PopulationModel(TemplateParser, KernelPaths):
    """P copies of a Keras template network with different weights, run at once.

    Args:
      template: a built Keras model (``Sequential`` with a known input shape, or
        functional) made of the supported layers (see module doc).
      jit_compile: XLA-compile the forward pass (default ``False``: on CPU the
        oneDNN batched matmul path is faster; XLA is never used when the C++
        ``indexed_matmul`` op would run, since it has no XLA kernel).
      conv_method: how ``Conv2D`` layers run: ``"auto"`` (default; the C++
        direct convolution ``TfevoPopulationConv2D`` where the kernel
        dispatch allows, else im2col), ``"im2col"`` (pure TensorFlow, the
        op's reference) or ``"grouped"``; see :func:`tfevo.nn.population_conv2d`.
      use_op: the C++ kernels of the forward (:mod:`tfevo.kernels`): ``None``
        (default) where the dispatch allows (built, not XLA-compiled, no GPU
        in the way) -- a plain MLP (Dense layers with none/relu/tanh/sigmoid/
        elu activations, optional leading Flatten) then runs as ONE kernel
        reading the members' weights in place (:mod:`tfevo.nn.fused_mlp`), and
        subset forwards read Dense/Conv2D weights in place; ``False``: the
        layer-by-layer TensorFlow path, which is the kernels' reference;
        ``True``: the kernels, or :class:`tfevo.kernels.KernelUnavailableError`.

    Attributes:
      num_params: D, the length of one member's flat parameter vector.
      input_shape: per-sample input shape (without batch); a list or dict of
        them for several inputs (``input_shapes``: always the list).
      output_shape: per-sample output shape; a list or dict for several
        outputs (``output_shapes``: always the list).
      state_sizes: per-sample sizes of the recurrent states the template
        carries (``()`` without recurrent layers; LSTM: h and c).
      weight_shapes: shapes of the evolved template weights, in flat-layout order.
      weight_names: their Keras paths.
      frozen_weight_names: paths of the frozen weights (layers with
        ``trainable=False``, other non-trainable variables): not in the flat
        vector; every member uses the template's values, read at construction.
      num_frozen: how many scalars those hold.
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
                 use_op: bool | None = None):
        if not isinstance(template, keras.Model):
            raise ConfigError(f"PopulationModel needs a keras.Model template, got {type(template).__name__}")
        if conv_method not in CONV_METHODS:
            raise ConfigError(f"conv_method must be one of {CONV_METHODS}, got {conv_method!r}")
        self.conv_method = conv_method
        self.use_op = kernels.check_use_op(use_op)
        self._ranges: dict = {}
        self.template = template
        self.jit_compile = bool(jit_compile)
        self._trace_counter = TraceCounter()
        self._fns: dict = {}
        self._parse(template)

    # ------------------------------------------------------------------ parse
    # -------------------------------------------------------------- reshaper
    def flatten(self, weights: Sequence) -> tf.Tensor:
        """One member's weights -> ``[D]``.

        ``weights``: the evolved weights in flat-layout order (:attr:`weight_shapes`), or all of a
        template-shaped model's weights (``template.get_weights()`` order), whose frozen ones are
        left out (the population always uses the template's own frozen values)."""
        weights = list(weights)
        if self.num_frozen and len(weights) == self._num_template_weights:
            weights = [weights[i] for i in self._evolved_index]
        if len(weights) != len(self.weight_shapes):
            extra = f" (or all {self._num_template_weights} of the template)" if self.num_frozen else ""
            raise ShapeError(f"expected {len(self.weight_shapes)} weight arrays{extra}, got {len(weights)}")
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
        """A Keras model with the template's architecture -> its ``[D]`` vector (its evolved weights;
        frozen weights stay the template's)."""
        return self.flatten(model.get_weights())

    def to_keras(self, params_row) -> keras.Model:
        """``[D]`` -> a new ordinary Keras model (template architecture, these weights)."""
        row = tf.convert_to_tensor(params_row, tf.float32)
        if row.shape.as_list() != [self.num_params]:
            raise ShapeError(f"to_keras expects one parameter row of shape [{self.num_params}], got {row.shape.as_list()}")
        try:
            model = keras.models.clone_model(self.template)
        except (TypeError, ValueError) as e:  # a config Keras cannot rebuild: e.g. an unregistered function
            raise ConfigError(
                f"to_keras: keras.models.clone_model cannot rebuild the template ({type(e).__name__}: "
                f"{str(e).splitlines()[0][:200]}); register custom functions and layers with "
                "keras.saving.register_keras_serializable, or copy the parameters with "
                "template.set_weights(pm.template_weights(row))") from e
        n = self._num_template_weights
        if len(model.weights) != n:
            raise ConfigError(
                f"to_keras: keras.models.clone_model gives {len(model.weights)} weights for the template's "
                f"{n} (a nested model shared inside another nested model is cloned once per use); copy the "
                "parameters with template.set_weights(pm.template_weights(row))")
        model.set_weights(self.template_weights(row))
        finalize_states(model)
        if self.num_frozen:
            # clone_model does not carry trainable flags: copy them, layers outermost first (a model's
            # setter sets its sublayers), then the variables' own
            mine, theirs = keras_all_layers(self.template), keras_all_layers(model)
            if [type(a) for a in mine] == [type(b) for b in theirs]:
                for a, b in zip(mine, theirs):
                    b.trainable = a.trainable
            for a, b in zip(self.template.weights, model.weights):
                b.trainable = a.trainable
        return model

    def template_weights(self, params_row) -> list:
        """``[D]`` -> the list of all template weights (``template.get_weights()`` order, numpy): the
        row's evolved weights with the template's frozen values in their places."""
        row = tf.convert_to_tensor(params_row, tf.float32)
        if row.shape.as_list() != [self.num_params]:
            raise ShapeError(f"expected one parameter row of shape [{self.num_params}], got {row.shape.as_list()}")
        ev = iter(w[0].numpy() for w in self.unflatten(row[None]))
        return [self._frozen_values[i] if i in self._frozen_values else next(ev)
                for i in range(self._num_template_weights)]

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
        from tfevo.nn.translators import PopulationInit

        cols = []
        for i, (init, shape) in enumerate(zip(self._initializers, self.weight_shapes)):
            try:
                w = (init(shape, popsize, seeds[i]) if isinstance(init, PopulationInit)
                     else sample_population(init, shape, popsize, seeds[i]))
            except ConfigError as e:
                raise ConfigError(f"init_params: weight {self.weight_names[i]}: {e}. Give that layer a supported "
                                  "initializer, or build the population from your own rows (from_keras)") from None
            cols.append(tf.reshape(w, [popsize, -1]))
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

    def _inputs_list(self, x) -> list:
        """The model input(s) as a list in the template's input order (a tensor, a list or a dict by key)."""
        if isinstance(x, dict):
            if self._input_keys is None:
                raise ShapeError("a dict of inputs needs a template built with a dict of keras.Input")
            missing = [k for k in self._input_keys if k not in x]
            if missing or len(x) != len(self._input_keys):
                raise ShapeError(f"inputs must have the keys {self._input_keys}, got {sorted(x)}")
            return [x[k] for k in self._input_keys]
        if isinstance(x, (list, tuple)):
            if len(x) != len(self._input_ids):
                raise ShapeError(f"the template has {len(self._input_ids)} inputs, got {len(x)}")
            return list(x)
        if len(self._input_ids) != 1:
            raise ShapeError(f"the template has {len(self._input_ids)} inputs; pass a list or dict of tensors")
        return [x]

    def _pack_outputs(self, ys):
        if len(ys) == 1:
            return ys[0]
        if self._output_keys is not None:
            return dict(zip(self._output_keys, ys))
        return list(ys)

    def _walk(self, xs, call, states=None):
        """Runs the steps in dependency order: ``call(step, inputs, step_states) -> (outputs, new_states)``.

        Returns ``(outputs packed like the template's, new_states)``; ``states`` (a list, one
        ``[n, B, size]`` tensor per entry of :attr:`state_sizes`) is given to the recurrent steps,
        ``None`` starts them from zeros."""
        tensors = dict(zip(self._input_ids, xs))
        new_states, k = [], 0
        for step in self._steps:
            ns = len(step.tr.state_sizes)
            st = None if (states is None or not ns) else list(states[k:k + ns])
            k += ns
            out, st_out = call(step, [tensors[i] for i in step.inputs], st)
            if ns:
                new_states.extend(st_out)
            outs = out if isinstance(out, (list, tuple)) else [out]
            for o, y in zip(step.outputs, outs):
                tensors[o] = y
        return self._pack_outputs([tensors[o] for o in self._output_ids]), new_states

    @staticmethod
    def _apply(step, ins, w, indices, st):
        if st is not None:
            return step.tr.forward_state(ins, w, indices, st)
        return step.tr.forward(ins, w, indices), ()

    def _run(self, weights, x, indices, states=None):
        xs = x if isinstance(x, list) else self._inputs_list(x)

        def call(step, ins, st):
            if step.frozen_layer is not None and st is None:
                return step.run_frozen(ins), ()
            w, idx = step.weights_for(weights.__getitem__, ins, indices)
            return self._apply(step, ins, w, idx, st)

        y, new = self._walk(xs, call, states)
        return y if states is None else (y, new)

    @tf.autograph.experimental.do_not_convert  # plain graph code (explicit tf.cond): nothing to convert
    def forward_graph(self, params, x, indices=None, input_scale=None, states=None):
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

        ``x`` may also be a list or dict of inputs (templates with several
        inputs); several outputs come back as a list or dict.  For recurrent
        templates, ``states`` (a list with one ``[n, B, size]`` tensor per entry
        of :attr:`state_sizes`) starts the recurrent layers and the result is
        ``(outputs, new_states)``; without it they start from zeros.
        """
        with kernels.use_ops(self.use_op):
            return self._forward_graph(params, x, indices, input_scale, states)

    def _forward_graph(self, params, x, indices, input_scale, states):
        xs = self._inputs_list(x)
        x0 = xs[0]
        in_place = (not isinstance(params, (list, tuple)) and not self.fused_mlp and self.in_place_available()
                    and (indices is not None or (x0.shape[1] is not None and x0.shape[1] <= 4)))
        if not isinstance(params, (list, tuple)) and params.dtype == tf.float16 and not in_place:
            # float16 weights (Policy(weight_dtype="float16")): only the in-place C++ ops read
            # them directly; every other path computes from the same values in float32
            params = tf.cast(params, tf.float32)
        if input_scale is not None and not in_place:
            xs, input_scale = [tf.cast(t, tf.float32) * input_scale for t in xs], None
        if isinstance(params, (list, tuple)):
            return self._run(params, xs, indices, states)
        if self.fused_mlp and (x0.shape[1] is None or x0.shape[1] <= _FUSED_MAX_ROWS):
            return self._run_fused(params, xs[0], indices)
        if indices is None:
            if in_place:
                # few rows per member: read every member in place (no split copy of [P, D])
                return self._run_in_place(params, xs, tf.range(tf.shape(params)[0], dtype=tf.int32), input_scale,
                                          states)
            return self._run(self.unflatten_graph(params), xs, None, states)
        if in_place:
            return self._run_in_place(params, xs, tf.cast(indices, tf.int32), input_scale, states)

        def gather_first():
            return self._run(self.unflatten_graph(tf.gather(params, indices)), xs, None, states)

        if kernels.kernel("TfevoIndexedMatmul", None, [params]) is None:
            return gather_first()

        def in_place():
            return self._run(self.unflatten_graph(params), xs, indices, states)

        return tf.cond(2 * tf.shape(indices)[0] <= tf.shape(params)[0], gather_first, in_place)

    def _fn(self, kind):
        fn = self._fns.get(kind)
        if fn is not None:
            return fn
        if kind.endswith("_idx") or "_st" in kind:
            body = lambda params, x, idx, states=None: self.forward_graph(params, x, idx, states=states)
        else:
            body = lambda params, x: self.forward_graph(params, x, None)
        op_runs = self.use_op is not False and kernels.built("TfevoIndexedMatmul") and not kernels.gpu_present()
        jit = self.jit_compile and not (kind.endswith("_idx") and op_runs)
        fn = tf.function(self._trace_counter.wrap(kind, body), jit_compile=jit, reduce_retracing=False, autograph=False)
        self._fns[kind] = fn
        return fn

    def unflatten_graph(self, params):
        """Like :meth:`unflatten` without Python-side checks (for use inside graphs)."""
        parts = tf.split(params, self._sizes, axis=1)
        p = tf.shape(params)[:1]
        return [tf.reshape(t, tf.concat([p, s], 0)) for t, s in zip(parts, self.weight_shapes)]

    def _check_inputs(self, inputs) -> list:
        xs = []
        for j, (t, want) in enumerate(zip(self._inputs_list(inputs), self.input_shapes)):
            t = tf.convert_to_tensor(t)
            if t.dtype != tf.float32:
                t = tf.cast(t, tf.float32)
            ok = t.shape.rank == 2 + len(want) and all(w is None or w == d for w, d in zip(want, t.shape[2:]))
            if not ok:
                which = "" if len(self.input_shapes) == 1 else f" (input {j})"
                raise ShapeError(f"inputs{which} must have shape [P, B, {', '.join(map(str, want))}], "
                                 f"got {t.shape.as_list()}")
            if j and (t.shape[0] != xs[0].shape[0] or t.shape[1] != xs[0].shape[1]):
                raise ShapeError(f"all inputs must share the leading [P, B] axes, got {xs[0].shape.as_list()[:2]} "
                                 f"and {t.shape.as_list()[:2]} (input {j})")
            xs.append(t)
        return xs

    def _check_states(self, states, n, b) -> list:
        if not self.state_sizes:
            raise ConfigError("states given, but the template has no recurrent layers")
        states = [tf.convert_to_tensor(t, tf.float32) for t in states]
        if len(states) != len(self.state_sizes) or any(
                t.shape.as_list() != [n, b, sz] for t, sz in zip(states, self.state_sizes)):
            raise ShapeError(f"states must be {len(self.state_sizes)} tensors of shapes "
                             f"{[[n, b, sz] for sz in self.state_sizes]}, got {[t.shape.as_list() for t in states]}")
        return states

    def zero_states(self, n: int, b: int) -> list:
        """Initial recurrent states: one zero ``[n, b, size]`` tensor per entry of :attr:`state_sizes`."""
        return [tf.zeros([n, b, sz], tf.float32) for sz in self.state_sizes]

    def __call__(self, params, inputs, indices=None, states=None):
        """Forward pass of the population.

        Args:
          params: float32 ``[P, D]``, or the list returned by :meth:`unflatten`.
          inputs: ``[P, B, *input_shape]``; with ``indices``, ``[n, B, *input_shape]``.
            For a template with several inputs, a list (template order) or a
            dict (templates built with a dict of inputs) of such tensors.
          indices: optional int32 ``[n]``: run only members ``indices`` (row
            ``i`` of ``inputs`` goes to member ``indices[i]``); the result
            equals running all members and gathering rows ``indices``.
          states: recurrent templates only: the states to start from (a list,
            one ``[P or n, B, size]`` tensor per entry of :attr:`state_sizes`);
            the call then returns ``(outputs, new_states)``.  Without it the
            recurrent layers start from zeros, as Keras does.

        Returns:
          float32 ``[P or n, B, *output_shape]`` (a list or dict of them for
          several outputs).
        """
        if isinstance(params, (list, tuple)):
            params = self._check_weights(params)
            popsize = params[0].shape[0]
            kind = "split"
        else:
            params = self._check_params(params)
            popsize = params.shape[0]
            kind = "flat"
        xs = self._check_inputs(inputs)
        x = xs[0] if len(xs) == 1 else xs
        n, b = xs[0].shape[0], xs[0].shape[1]
        if states is not None:
            states = self._check_states(states, n, b)
            kind += "_st"
        single = len(xs) == 1 and states is None
        if indices is None:
            if popsize is not None and n != popsize:
                raise ShapeError(f"inputs have {n} members on axis 0 but params have {popsize}")
            if single and kind == "flat" and b <= _FUSED_MAX_ROWS and tf.executing_eagerly() and self.fused_mlp:
                return self._eager_fused(params, x, None)
            return self._fn(kind)(params, x) if states is None else self._fn(kind)(params, x, None, states)
        idx = tf.convert_to_tensor(indices)
        if not idx.dtype.is_integer or idx.shape.rank != 1:
            raise ShapeError(f"indices must be an int32 vector [n], got {idx.dtype.name} {idx.shape.as_list()}")
        idx = tf.cast(idx, tf.int32)
        if n != idx.shape[0]:
            raise ShapeError(f"with indices, inputs must have n={idx.shape[0]} rows on axis 0, got {n}")
        if tf.executing_eagerly() and idx.shape[0] and popsize is not None:
            iv = idx.numpy()
            lo, hi = int(iv.min()), int(iv.max())
            if lo < 0 or hi >= popsize:
                raise ShapeError(f"indices must lie in [0, {popsize}), got values in [{lo}, {hi}]")
        if single and kind == "flat" and b <= _FUSED_MAX_ROWS and tf.executing_eagerly() and self.fused_mlp:
            return self._eager_fused(params, x, idx)
        return self._fn(kind + "_idx")(params, x, idx) if states is None else self._fn(kind + "_idx")(params, x, idx, states)

    def summary(self) -> str:
        """A one-line-per-layer description of the population program."""
        frozen = f" (+{self.num_frozen} frozen)" if self.num_frozen else ""
        lines = [f"PopulationModel: input {self.input_shape} -> output {self.output_shape}, D={self.num_params}"
                 + frozen]
        for s in self._steps:
            if s.consts:
                shapes = [tuple(c.shape) if c is not None else self.weight_shapes[i] for i, c in zip(s.weights, s.consts)]
                which = "frozen" if s.frozen else f"frozen {[c is not None for c in s.consts]}"
                lines.append(f"  {s.name}: weights {shapes} ({which})")
            else:
                lines.append(f"  {s.name}: weights {[self.weight_shapes[i] for i in s.weights]}")
        return "\n".join(lines)
