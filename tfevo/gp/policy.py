"""GP trees as a policy family for control.

Works with both rollout paths: the in-graph evaluator
(``forward(params, obs)``, e.g. CartPole) and the pipelined host-simulator
evaluator (``forward(params, obs, indices)``, e.g. MuJoCo), with the tree
population packed into float32 ``[P, 3 L_max]`` by :meth:`GPPolicy.pack`.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from tfevo.core import ConfigError, ShapeError
from tfevo.gp.evaluate import evaluate
from tfevo.gp.trees import FunctionSet, Trees
from tfevo.registry import register

__all__ = ["GPPolicy"]


@register("policy", "gp_tree")
class GPPolicy:
    """Multi-output GP trees mapping observations to actions.

    ``forward(params, obs)`` takes the population's trees ``params``
    (:class:`Trees` ``[P, L]``, or packed by :meth:`pack` into float32
    ``[P, 3L]``) and observations ``obs`` ``[P, B, obs_dim]``
    (``B`` environments per member) and returns actions:

    * discrete (``num_actions`` > 0): ``int32 [P, B]``, arg-max over one
      output per action (a single output ``K = 1`` with ``num_actions = 2``
      means ``action = output > 0``);
    * continuous: ``float32 [P, B, action_dim]``, one output per dimension
      squashed to ``[low, high]`` (``squash="tanh"``: ``tanh`` scaled to the
      bounds; ``"clip"``: the raw output clipped to them).

    ``forward(params, obs, indices)`` (or ``forward_subset``) runs only the
    members ``indices`` on ``obs [n, B, obs_dim]`` (finished episodes cost
    nothing); that is the signature of
    :class:`tfevo.rollout.PipelinedEvaluator`, so packed tree populations
    drive host simulators such as MuJoCo directly::

        pol = GPPolicy(num_outputs=2, low=-1.0, high=1.0)     # Swimmer: A = 2
        ev = PipelinedEvaluator("Swimmer-v5", pol, num_envs=16, max_steps=1000)
        fitness = ev.evaluate(GPPolicy.pack(trees))           # float32 [P]

    Args:
      num_outputs: outputs per tree (``K``); trees must be generated with it.
      num_actions: number of discrete actions, or 0 for continuous.
      low, high: action bounds for continuous control.
      functions: the function set of the run (to pick the evaluator).
      use_op: the C++ evaluator: ``None`` where allowed, ``True``, ``False`` (:mod:`tfevo.kernels`).
      squash: ``"tanh"`` or ``"clip"`` (continuous actions only).
    """

    def __init__(self, num_outputs: int, num_actions: int = 0, low=-1.0, high=1.0,
                 functions=None, use_op: bool | None = None, squash: str = "tanh"):
        if int(num_outputs) < 1:
            raise ConfigError(f"num_outputs must be >= 1, got {num_outputs}")
        if int(num_actions) > 0 and int(num_outputs) == 1 and int(num_actions) != 2:
            raise ConfigError("a single-output tree can only drive 2 discrete actions")
        if int(num_actions) > 0 and int(num_outputs) not in (1, int(num_actions)):
            raise ConfigError(f"num_outputs ({num_outputs}) must equal num_actions ({num_actions})")
        if squash not in ("tanh", "clip"):
            raise ConfigError(f"squash must be 'tanh' or 'clip', got {squash!r}")
        low_a, high_a = np.asarray(low, np.float32), np.asarray(high, np.float32)
        if int(num_actions) == 0:
            if low_a.ndim > 1 or high_a.ndim > 1 or (low_a.ndim == 1 and low_a.size != int(num_outputs)) or (
                    high_a.ndim == 1 and high_a.size != int(num_outputs)):
                raise ConfigError(f"low/high must be scalars or have num_outputs ({num_outputs}) entries")
            if np.any(~np.isfinite(low_a)) or np.any(~np.isfinite(high_a)) or np.any(low_a > high_a):
                raise ConfigError(f"action bounds must be finite with low <= high, got low={low}, high={high}")
        self.squash = squash
        self.num_outputs = int(num_outputs)
        self.num_actions = int(num_actions)
        self.low, self.high = low, high
        self.functions = None if functions is None else FunctionSet(functions)
        self.use_op = use_op

    @staticmethod
    def pack(trees) -> tf.Tensor:
        """Packs :class:`Trees` into one float32 ``[P, 3 * L]`` tensor (the
        flat ``params`` accepted by evaluators such as
        :class:`tfevo.rollout.ingraph.InGraphEvaluator`)."""
        t, v, s = trees
        return tf.concat([tf.cast(t, tf.float32), tf.cast(v, tf.float32), tf.cast(s, tf.float32)], axis=1)

    @staticmethod
    def unpack(params) -> Trees:
        """Inverse of :meth:`pack` (a :class:`Trees` passes through)."""
        if isinstance(params, (tuple, list)):
            return Trees(*params)
        params = tf.convert_to_tensor(params, tf.float32)
        L = params.shape[1] // 3
        return Trees(tf.cast(params[:, :L], tf.int32), params[:, L:2 * L], tf.cast(params[:, 2 * L:], tf.int32))

    def _outputs(self, params, obs):
        obs = tf.cast(tf.convert_to_tensor(obs), tf.float32)
        y = evaluate(self.unpack(params), obs, self.num_outputs, self.functions, self.use_op)
        if self.num_outputs == 1:
            y = y[:, None, :]
        y = tf.where(tf.math.is_finite(y), y, 0.0)
        return tf.transpose(y, [0, 2, 1])  # [P, B, K]

    @staticmethod
    def _gather(params, indices):
        """The rows ``indices`` of packed params or of a :class:`Trees`."""
        indices = tf.convert_to_tensor(indices, tf.int32)
        if isinstance(params, (tuple, list)):
            return Trees(*(tf.gather(tf.convert_to_tensor(a), indices) for a in params))
        return tf.gather(tf.convert_to_tensor(params), indices)

    def _check(self, params, obs, indices):
        """Shape checks (static shapes only, so they also hold in graphs)."""
        obs_shape = tf.TensorShape(getattr(obs, "shape", np.shape(obs)))
        if obs_shape.rank != 3:
            raise ShapeError(f"obs must be [P, B, obs_dim], got {obs_shape.as_list()}")
        if not isinstance(params, (tuple, list)):
            p_shape = tf.TensorShape(getattr(params, "shape", np.shape(params)))
            if p_shape.rank != 2 or (p_shape[1] is not None and p_shape[1] % 3 != 0):
                raise ShapeError(f"packed params must be float [P, 3 * L_max], got {p_shape.as_list()}")
        if indices is not None:
            i_shape = tf.TensorShape(getattr(indices, "shape", np.shape(indices)))
            if i_shape.rank != 1 or (i_shape[0] is not None and obs_shape[0] is not None
                                     and i_shape[0] != obs_shape[0]):
                raise ShapeError(f"indices must be [n] matching obs [n, B, obs_dim]; got indices "
                                 f"{i_shape.as_list()} and obs {obs_shape.as_list()}")

    def forward(self, params, obs, indices=None) -> tf.Tensor:
        """Actions for observations ``obs [P, B, obs_dim]`` (every member), or,
        with ``indices [n]``, for ``obs [n, B, obs_dim]`` of the members
        ``indices`` only (the :class:`tfevo.rollout.PipelinedEvaluator`
        signature)."""
        self._check(params, obs, indices)
        if indices is not None:
            params = self._gather(params, indices)
        y = self._outputs(params, obs)
        if self.num_actions > 0:
            if self.num_outputs == 1:
                return tf.cast(y[..., 0] > 0, tf.int32)
            return tf.argmax(y, axis=-1, output_type=tf.int32)
        low = tf.constant(np.asarray(self.low, np.float32))
        high = tf.constant(np.asarray(self.high, np.float32))
        if self.squash == "clip":
            return tf.clip_by_value(y, low, high)
        a = tf.tanh(y)
        return low + (a + 1.0) * 0.5 * (high - low)

    __call__ = forward

    def forward_subset(self, params, obs, indices) -> tf.Tensor:
        """``forward`` for the members ``indices`` only (obs ``[n, B, obs_dim]``)."""
        return self.forward(params, obs, indices)
