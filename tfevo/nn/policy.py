"""Policies: a :class:`PopulationModel` plus an action space.

:class:`Policy` maps ``(params [P, D], obs [P, B, *obs_shape])`` to actions for
every member at once -- the *policy family* seam of tfevo's rollouts -- and
:func:`mlp` / :func:`nature_dqn` build the usual Keras templates.
"""

from __future__ import annotations

import numpy as np
import keras
import tensorflow as tf

from tfevo.core import ConfigError, ShapeError, TraceCounter
from tfevo.envs.base import ActionSpec
from tfevo.nn.model import PopulationModel
from tfevo.registry import register

__all__ = ["Policy", "mlp", "linear", "nature_dqn"]


@register("policy", "mlp", doc="Multi-layer perceptron template: mlp(obs_shape, out, hidden=(64, 64), activation='tanh')")
def mlp(obs_shape, out: int, hidden=(64, 64), activation="tanh", output_activation=None,
        layer_norm: bool = False, name: str = "mlp") -> keras.Model:
    """A Keras MLP template ``obs_shape -> out`` (inputs of rank > 1 are flattened).

    Args:
      obs_shape: per-sample observation shape, e.g. ``(4,)``.
      out: number of outputs (logits for discrete actions, A for continuous).
      hidden: sizes of the hidden layers (``()`` gives a linear policy).
      activation: activation of the hidden layers.
      output_activation: activation of the output layer (default linear).
      layer_norm: add a ``LayerNormalization`` after each hidden Dense.

    Example:

    >>> template = mlp((8,), 2, hidden=(32, 32))
    >>> pm = PopulationModel(template)
    """
    obs_shape = tuple(int(d) for d in (obs_shape if isinstance(obs_shape, (tuple, list)) else (obs_shape,)))
    if int(out) < 1:
        raise ConfigError(f"mlp: out must be >= 1, got {out}")
    if any(int(h) < 1 for h in hidden):
        raise ConfigError(f"mlp: hidden sizes must be >= 1, got {tuple(hidden)}")
    layers = [keras.Input(obs_shape)]
    if len(obs_shape) > 1:
        layers.append(keras.layers.Flatten(data_format="channels_last"))  # whatever keras.json says
    for h in hidden:
        layers.append(keras.layers.Dense(int(h), activation=activation))
        if layer_norm:
            layers.append(keras.layers.LayerNormalization())
    layers.append(keras.layers.Dense(int(out), activation=output_activation))
    return keras.Sequential(layers, name=name)


@register("policy", "linear", doc="Linear policy template: linear(obs_shape, out) = mlp(obs_shape, out, hidden=())")
def linear(obs_shape, out: int, name: str = "linear") -> keras.Model:
    """A linear Keras template ``obs_shape -> out``: :func:`mlp` without hidden layers."""
    return mlp(obs_shape, out, hidden=(), name=name)


@register("policy", "nature_dqn", doc="Nature-DQN conv net template (32 8x8/4, 64 4x4/2, 64 3x3/1, SAME, 512, actions)")
def nature_dqn(num_actions: int, input_shape=(84, 84, 4), name: str = "nature_dqn") -> keras.Model:
    """The Nature-DQN network (Mnih et al. 2015) as used by the Deep GA.

    Conv 32 8x8 stride 4, conv 64 4x4 stride 2, conv 64 3x3 stride 1 (ReLU,
    SAME padding), Dense 512 ReLU, Dense ``num_actions`` (linear logits).
    On 84x84x4 inputs with 18 actions it has exactly 4,052,658 parameters
    (feature maps 21x21x32 -> 11x11x64 -> 11x11x64 = 7744 features).

    Example:

    >>> template = nature_dqn(18)
    >>> template.count_params()
    4052658
    """
    if int(num_actions) < 1:
        raise ConfigError(f"nature_dqn: num_actions must be >= 1, got {num_actions}")
    input_shape = tuple(int(d) for d in input_shape)
    if len(input_shape) != 3:
        raise ConfigError(f"nature_dqn: input_shape must be (H, W, C), got {input_shape}")
    L = keras.layers
    return keras.Sequential(
        [
            keras.Input(input_shape),
            # channels last whatever keras.json's image_data_format: input_shape is (H, W, C)
            L.Conv2D(32, 8, strides=4, padding="same", activation="relu", data_format="channels_last"),
            L.Conv2D(64, 4, strides=2, padding="same", activation="relu", data_format="channels_last"),
            L.Conv2D(64, 3, strides=1, padding="same", activation="relu", data_format="channels_last"),
            L.Flatten(data_format="channels_last"),
            L.Dense(512, activation="relu"),
            L.Dense(int(num_actions)),
        ],
        name=name,
    )


def _check_stepwise(model) -> None:
    """A recurrent policy runs one time step per call, which equals the whole-sequence forward only
    if every layer that sees the time axis (before a recurrent layer consumes it) treats the time
    steps one by one: raise :class:`ConfigError` for a layer that mixes them (e.g. Conv1D or pooling
    over time, Flatten)."""
    from tfevo.nn.layers import builtin_activation
    from tfevo.nn.translators.recurrent import _RecurrentBase

    L = keras.layers
    elementwise = (L.Dense, L.Activation, L.ReLU, L.LeakyReLU, L.ELU, L.Embedding, L.Dropout, L.GaussianNoise,
                   L.GaussianDropout, L.AlphaDropout, L.ActivityRegularization, L.Add, L.Subtract, L.Multiply,
                   L.Average, L.Maximum, L.Minimum, L.TimeDistributed)
    timed = {model._input_id}
    for step in model._steps:
        if not any(i in timed for i in step.inputs):
            continue
        layer = step.layer
        backwards = "a Bidirectional layer" if isinstance(layer, L.Bidirectional) else (
            "go_backwards=True" if isinstance(step.tr, _RecurrentBase) and layer.go_backwards else None)
        if backwards:
            raise ConfigError(
                f"layer {step.name} reads the sequence backwards from its last step ({backwards}); a recurrent "
                "Policy steps one observation at a time and carries only forward state: use a forward "
                "SimpleRNN/GRU/LSTM in a policy, or evaluate whole sequences with PopulationModel")
        if isinstance(step.tr, _RecurrentBase):
            if layer.return_sequences:
                timed.add(step.outputs[0])
            continue
        rank = len(step.tr.input_shapes[0])
        ok = type(layer) in elementwise
        act = getattr(layer, "activation", None)
        if act is not None and not builtin_activation(act):
            ok = False  # a user activation sees Keras's [batch, time, ...] and may reduce over time
        if type(layer) in (L.Softmax, L.Concatenate):
            ok = int(layer.axis) % rank != 1
        elif type(layer) in (L.LayerNormalization, L.BatchNormalization):
            axes = layer.axis if isinstance(layer.axis, (list, tuple)) else [layer.axis]
            ok = all(int(a) % rank != 1 for a in axes)
        if not ok:
            raise ConfigError(
                f"layer {step.name} sees the time axis of a recurrent policy but does not treat time steps one "
                "by one; a recurrent Policy steps one observation at a time (use it after the recurrent layer, "
                "or evaluate the model on whole sequences with PopulationModel)")
        timed.update(step.outputs)


class Policy:
    """Actions of a whole population from a :class:`PopulationModel`.

    Args:
      model: the population model (its output size must equal
        ``action_spec.policy_output_size``).
      action_spec: the environment's :class:`tfevo.envs.base.ActionSpec`.
      continuous: for continuous actions, ``"tanh"`` maps the raw outputs
        ``y`` to ``low + (tanh(y) + 1) / 2 * (high - low)`` (needs finite
        bounds; no bounds means [-1, 1]); ``"clip"`` clips ``y`` to
        ``[low, high]`` (identity when the spec has no bounds).
      obs_scale: ``"auto"`` (default) divides uint8 observations (Atari
        frames) by 255 and leaves float observations as they are, and
        leaves uint8 alone too when the template's input is integer-typed
        (``keras.Input(..., dtype="int32")``) or feeds an ``Embedding``
        (token ids, e.g. Atari RAM bytes), a ``Rescaling`` or a
        ``Normalization`` (the template scales the frames itself); a number
        multiplies every observation by it; ``None`` disables scaling.
      weight_dtype: ``"float32"`` (default) or ``"float16"``: the precision
        of the weights the rollouts compute with.  With ``"float16"``,
        :meth:`prepare` rounds each generation's parameters to float16 once;
        the forward is still float32 arithmetic (each float16 weight is
        converted exactly), so the actions are those of the float32 network
        whose weights are the float16-rounded parameters.  The strategy's
        parameters stay float32.  Where the in-place C++ ops run (Conv2D and
        Dense layers, e.g. Nature-DQN on Atari), every step streams half the
        weight bytes: the Dense layer of a 4M-parameter Atari net is bound by
        memory bandwidth, so this is the fast setting for large networks.
        A parameter outside float16's range (|x| > 65504) raises
        ``ValueError``.

    Discrete actions are the argmax of the logits, ``int32 [P, B]``;
    continuous actions are ``float32 [P, B, *action_shape]``.

    Example:

    >>> from tfevo.envs.base import ActionSpec
    >>> pm = PopulationModel(mlp((4,), 2, hidden=(16,)))
    >>> policy = Policy(pm, ActionSpec(discrete=True, num_actions=2))
    >>> params = pm.init_params(32, seed=0)
    >>> actions = policy.forward(params, tf.zeros([32, 1, 4]))              # int32 [32, 1]
    >>> some = policy.forward(params, tf.zeros([3, 1, 4]), tf.constant([0, 7, 9]))  # [3, 1]
    """

    def __init__(self, model: PopulationModel, action_spec: ActionSpec, continuous: str = "tanh",
                 obs_scale="auto", weight_dtype="float32"):
        if not isinstance(model, PopulationModel):
            raise ConfigError(f"Policy needs a PopulationModel, got {type(model).__name__}")
        if not isinstance(action_spec, ActionSpec):
            raise ConfigError(f"Policy needs an ActionSpec, got {type(action_spec).__name__}")
        if continuous not in ("tanh", "clip"):
            raise ConfigError(f"continuous must be 'tanh' or 'clip', got {continuous!r}")
        if not (obs_scale is None or obs_scale == "auto" or isinstance(obs_scale, (int, float))):
            raise ConfigError(f"obs_scale must be 'auto', a number or None, got {obs_scale!r}")
        try:
            wd = tf.as_dtype(weight_dtype)
        except TypeError:
            wd = None
        if wd not in (tf.float32, tf.float16):
            raise ConfigError(f"weight_dtype must be 'float32' or 'float16', got {weight_dtype!r}")
        self.weight_dtype = wd
        self.model = model
        self.action_spec = action_spec
        self.continuous = continuous
        self.obs_scale = obs_scale
        if not isinstance(model.output_shape, tuple) or not isinstance(model.input_shape, tuple):
            raise ConfigError(f"Policy needs a template with one input and one output, got inputs "
                              f"{model.input_shape} and outputs {model.output_shape}")
        out_shape = model.output_shape
        # "auto" scales uint8 frames, never token ids, nor what the template scales itself: not for an
        # integer template input, nor one an Embedding, Rescaling or Normalization reads directly
        in_dtype = tf.as_dtype(getattr(model.template.inputs[0], "dtype", "float32") or "float32")
        self._scale_uint8 = in_dtype.is_floating and not any(
            type(s.layer).__name__ in ("Embedding", "Rescaling", "Normalization") and model._input_id in s.inputs
            for s in model._steps)
        #: per-sample observation shape the policy takes
        self.obs_shape = tuple(model.input_shape)
        #: recurrent templates: shape of the state carried per episode (all layers' states concatenated)
        self.state_shape = None
        self._time_out = False
        if not model.state_sizes and None in tuple(model.input_shape):
            raise ConfigError(
                f"the template's input {model.input_shape} leaves its time axis open but has no recurrent layer "
                "carrying state (a Bidirectional layer reads whole sequences): a Policy needs a fixed observation "
                "shape, or a forward SimpleRNN/GRU/LSTM to step through time")
        if model.state_sizes:
            t_in = model.input_shape[0] if len(model.input_shape) >= 2 else "missing"
            if t_in not in (None, 1):
                raise ConfigError(
                    f"a recurrent policy template takes one observation per step: its input must be (None or 1, "
                    f"*obs_shape) (time axis first), got {model.input_shape}")
            self.obs_shape = tuple(model.input_shape[1:])
            self.state_shape = (int(sum(model.state_sizes)),)
            _check_stepwise(model)
            if len(out_shape) >= 2 and out_shape[0] in (None, 1):  # return_sequences: one step per call
                self._time_out = True
                out_shape = tuple(out_shape[1:])
        need = action_spec.policy_output_size
        have = int(np.prod(out_shape)) if None not in out_shape else -1
        if need < 1:
            raise ConfigError(f"action spec needs {need} outputs; check num_actions/shape")
        if have != need or (action_spec.discrete and out_shape[-1:] != (need,)):
            raise ConfigError(
                f"the model outputs shape {model.output_shape} but the action spec needs {need} "
                f"({'logits' if action_spec.discrete else 'action values'})"
            )
        self._low = self._high = None
        if not action_spec.discrete:
            shape = tuple(action_spec.shape)
            low, high = action_spec.low, action_spec.high
            if low is None and high is None:
                if continuous == "tanh":
                    low, high = -1.0, 1.0
            if low is not None:
                self._low = np.broadcast_to(np.asarray(low, np.float32), shape).copy()
                self._high = np.broadcast_to(np.asarray(high, np.float32), shape).copy()
                if continuous == "tanh" and not (np.all(np.isfinite(self._low)) and np.all(np.isfinite(self._high))):
                    raise ConfigError("continuous='tanh' needs finite action bounds; use continuous='clip'")
                if np.any(self._high < self._low):
                    raise ConfigError("action spec has high < low")
        self._trace_counter = TraceCounter()
        self._fns: dict = {}

    @property
    def num_params(self) -> int:
        """D, the parameter count of one member."""
        return self.model.num_params

    @property
    def traces(self) -> dict:
        """How many times each forward variant was traced."""
        return dict(self._trace_counter.counts)

    def init_params(self, popsize: int, seed=0) -> tf.Tensor:
        """``[popsize, D]`` initial parameters (see :meth:`PopulationModel.init_params`)."""
        return self.model.init_params(popsize, seed)

    def prepare(self, params):
        """Per-generation preparation of ``params [P, D]`` for many forward steps (a rollout).

        When the C++ in-place ops can run (:meth:`PopulationModel.in_place_available`)
        this returns ``params`` itself: each step's subset forward then reads
        the active members' weights in place, with no copy of the population
        at all.  Otherwise it splits ``params`` into per-layer weights once
        (:meth:`PopulationModel.unflatten`), so the steps do not re-split them.
        Either result is what :meth:`forward` / :meth:`forward_graph` accept.

        With ``weight_dtype="float16"`` the parameters are rounded to float16
        here (once per generation): the in-place ops then get the float16
        ``[P, D]`` itself (half the bytes per step); every other path gets the
        rounded values as float32.
        """
        params = self.model._check_params(params)
        if self.weight_dtype == tf.float16:
            half = self._to_half(params)
            if self.model.in_place_available() and not self.model.fused_mlp:
                return half
            params = tf.cast(half, tf.float32)
        if self.model.in_place_available():
            return params
        return self.model.unflatten(params)

    def _rounded(self, params):
        """float32 ``params [P, D]`` through float16 with ``weight_dtype="float16"`` (what
        :meth:`prepare` gives the rollouts), so the direct calls compute what training did."""
        if self.weight_dtype == tf.float16 and params.dtype == tf.float32:
            return tf.cast(self._to_half(params), tf.float32)
        return params

    def _to_half(self, params):
        from tfevo.nn.indexed import to_half

        half, big = to_half(params)  # one pass (C++ op with F16C); NaN and inf pass through
        if tf.executing_eagerly() and float(big) >= 65520.0:  # rounds to inf (65504 is float16's largest)
            raise ValueError(f"weight_dtype='float16': a parameter is outside float16's range (max |x| = "
                             f"{float(big):.6g} > 65504); use weight_dtype='float32'")
        return half

    def prepare_graph(self, params):
        """:meth:`prepare` as graph ops for in-graph rollouts (no checks): the per-layer
        weights of ``params [P, D]``, rounded through float16 first with
        ``weight_dtype="float16"`` (the same values the host rollouts use)."""
        if self.weight_dtype == tf.float16:
            params = tf.cast(tf.cast(params, tf.float16), tf.float32)
        return self.model.unflatten_graph(params)

    def preprocess(self, obs) -> tf.Tensor:
        """Observations -> float32 model inputs (uint8 frames scaled to [0, 1] by default)."""
        obs = tf.convert_to_tensor(obs)
        scale = self.obs_scale
        if scale == "auto":
            scale = 1.0 / 255.0 if obs.dtype == tf.uint8 and self._scale_uint8 else None
        x = tf.cast(obs, tf.float32)
        return x * scale if scale is not None else x

    def actions_from_outputs(self, y) -> tf.Tensor:
        """Raw model outputs ``[n, B, out]`` -> actions (argmax, tanh-squash or clip)."""
        spec = self.action_spec
        if spec.discrete:
            return tf.argmax(y, axis=-1, output_type=tf.int32)
        y = tf.reshape(y, tf.concat([tf.shape(y)[:2], list(spec.shape)], 0))
        if self._low is None:
            return y
        low, high = tf.constant(self._low), tf.constant(self._high)
        if self.continuous == "tanh":
            return low + (tf.tanh(y) + 1.0) * 0.5 * (high - low)
        return tf.clip_by_value(y, low, high)

    def _fn(self, split: bool, indexed: bool):
        key = (split, indexed)
        if key in self._fns:
            return self._fns[key]

        def body(params, obs, idx=None):
            return self.forward_graph(params, obs, idx)

        name = ("split" if split else "flat") + ("_idx" if indexed else "")
        wrapped = self._trace_counter.wrap(name, body)
        fn = tf.function(wrapped, jit_compile=False, reduce_retracing=False, autograph=False)
        self._fns[key] = fn
        return fn

    def _model_graph(self, params, obs, indices, states=None):
        """Raw outputs ``[n, B, *out]`` (and new states) of the model on observations ``[n, B, *obs]``."""
        obs = tf.convert_to_tensor(obs)
        if self.state_shape is None:
            if obs.dtype == tf.uint8:
                # uint8 frames go to the model as they are, with the scale: a first Conv2D layer of the
                # in-place path converts them itself (same values as preprocess, no float copies)
                scale = (1.0 / 255.0 if self._scale_uint8 else None) if self.obs_scale == "auto" else self.obs_scale
                return self.model.forward_graph(params, obs, indices, input_scale=1.0 if scale is None else scale)
            return self.model.forward_graph(params, self.preprocess(obs), indices)
        x = self.preprocess(obs)[:, :, None]  # one time step
        if states is None:
            y = self.model.forward_graph(params, x, indices)
        else:
            parts = tf.split(states, list(self.model.state_sizes), axis=-1)
            y, new = self.model.forward_graph(params, x, indices, states=parts)
        if self._time_out:
            y = y[:, :, 0]
        return y if states is None else (y, tf.concat(new, -1))

    @tf.autograph.experimental.do_not_convert
    def forward_state(self, params, obs, state, indices=None):
        """Recurrent policies: ``(actions, new_state)`` for one environment step.

        ``obs [n, B, *obs_shape]``, ``state float32 [n, B, *state_shape]`` (zeros
        at an episode's start: every recurrent layer's state, concatenated);
        ``params`` as for :meth:`forward_graph`.  Plain TensorFlow ops, for the
        rollout evaluators, which carry the state across steps and reset it when
        an episode (or a pipelined slot's new member) starts.
        """
        if self.state_shape is None:
            raise ConfigError("forward_state: the template has no recurrent layers (state_shape is None)")
        y, new = self._model_graph(params, obs, indices, tf.convert_to_tensor(state, tf.float32))
        return self.actions_from_outputs(y), new

    @tf.autograph.experimental.do_not_convert
    def forward_graph(self, params, obs, indices=None) -> tf.Tensor:
        """:meth:`forward` as plain TensorFlow ops (no checks, no ``tf.function``).

        Use inside your own ``tf.function``; ``params`` may be ``[P, D]`` or the
        list from :meth:`prepare` (then pass ``model.weight_signature()`` as the
        matching ``input_signature`` entry).
        """
        return self.actions_from_outputs(self._model_graph(params, obs, indices))

    def outputs(self, params, obs, indices=None) -> tf.Tensor:
        """Raw network outputs ``[P or n, B, *output_shape]`` (after obs preprocessing; a recurrent
        template runs one step from the zero state; float32 ``params [P, D]`` rounded through
        float16 first with ``weight_dtype="float16"``, as the rollouts compute)."""
        if not isinstance(params, (list, tuple)):
            params = self._rounded(self.model._check_params(params))
        if self.state_shape is not None:
            y = self.model(params, self.preprocess(obs)[:, :, None], indices)
            return y[:, :, 0] if self._time_out else y
        return self.model(params, self.preprocess(obs), indices)

    def forward(self, params, obs, indices=None) -> tf.Tensor:
        """Actions of every member (or of members ``indices``).

        Args:
          params: float32 ``[P, D]`` (rounded through float16 first with
            ``weight_dtype="float16"``, as the rollouts compute) or the list
            from :meth:`prepare`.
          obs: ``[P, B, *obs_shape]`` (``[n, B, ...]`` with ``indices``), float
            or uint8.
          indices: optional int32 ``[n]``, the members to run.

        Returns:
          int32 ``[P or n, B]`` (discrete) or float32 ``[P or n, B, *action_shape]``.
        """
        split = isinstance(params, (list, tuple))
        if split:
            params = self.model._check_weights(params)
        else:
            params = self._rounded(self.model._check_params(params))
        obs = tf.convert_to_tensor(obs)
        want = self.obs_shape
        if obs.shape.rank != 2 + len(want) or tuple(obs.shape[2:]) != want:
            raise ShapeError(f"obs must have shape [P, B, {', '.join(map(str, want))}], got {obs.shape.as_list()}")
        popsize = params[0].shape[0] if split else params.shape[0]
        if indices is None:
            if obs.shape[0] is not None and popsize is not None and obs.shape[0] != popsize:
                raise ShapeError(f"obs have {obs.shape[0]} members on axis 0 but params have {popsize} "
                                 "(pass indices to run some of the members)")
            return self._fn(split, False)(params, obs)
        idx = tf.cast(tf.convert_to_tensor(indices), tf.int32)
        if idx.shape.rank != 1:
            raise ShapeError(f"indices must be an int32 vector [n], got shape {idx.shape.as_list()}")
        if obs.shape[0] is not None and idx.shape[0] is not None and obs.shape[0] != idx.shape[0]:
            raise ShapeError(f"with indices, obs must have n={idx.shape[0]} rows on axis 0, got {obs.shape[0]}")
        if tf.executing_eagerly() and idx.shape[0] and popsize is not None:
            iv = idx.numpy()
            if iv.min() < 0 or iv.max() >= popsize:
                raise ShapeError(f"indices must lie in [0, {popsize}), got values in [{iv.min()}, {iv.max()}]")
        return self._fn(split, True)(params, obs, idx)

    __call__ = forward
