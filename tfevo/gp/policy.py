"""GP trees as a policy family for control (in-graph rollouts)."""

from __future__ import annotations

import tensorflow as tf

from tfevo.core import ConfigError
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
    * continuous: ``float32 [P, B, action_dim]``, ``tanh`` of one output per
      dimension scaled to ``[low, high]``.

    ``forward_subset(params, obs, indices)`` runs only the members
    ``indices`` (finished episodes cost nothing).

    Args:
      num_outputs: outputs per tree (``K``); trees must be generated with it.
      num_actions: number of discrete actions, or 0 for continuous.
      low, high: action bounds for continuous control.
      functions: the function set of the run (to pick the evaluator).
      backend: ``"auto"``, ``"op"`` or ``"tf"``.
    """

    def __init__(self, num_outputs: int, num_actions: int = 0, low=-1.0, high=1.0,
                 functions=None, backend: str = "auto"):
        if int(num_outputs) < 1:
            raise ConfigError(f"num_outputs must be >= 1, got {num_outputs}")
        if int(num_actions) > 0 and int(num_outputs) == 1 and int(num_actions) != 2:
            raise ConfigError("a single-output tree can only drive 2 discrete actions")
        if int(num_actions) > 0 and int(num_outputs) not in (1, int(num_actions)):
            raise ConfigError(f"num_outputs ({num_outputs}) must equal num_actions ({num_actions})")
        self.num_outputs = int(num_outputs)
        self.num_actions = int(num_actions)
        self.low, self.high = low, high
        self.functions = None if functions is None else FunctionSet(functions)
        self.backend = backend

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
        obs = tf.convert_to_tensor(obs, tf.float32)
        y = evaluate(self.unpack(params), obs, self.num_outputs, self.functions, self.backend)
        if self.num_outputs == 1:
            y = y[:, None, :]
        y = tf.where(tf.math.is_finite(y), y, 0.0)
        return tf.transpose(y, [0, 2, 1])  # [P, B, K]

    def forward(self, params, obs) -> tf.Tensor:
        """Actions of every member for its observations ``[P, B, obs_dim]``."""
        y = self._outputs(params, obs)
        if self.num_actions > 0:
            if self.num_outputs == 1:
                return tf.cast(y[..., 0] > 0, tf.int32)
            return tf.argmax(y, axis=-1, output_type=tf.int32)
        a = tf.tanh(y)
        return self.low + (a + 1.0) * 0.5 * (self.high - self.low)

    __call__ = forward

    def forward_subset(self, params, obs, indices) -> tf.Tensor:
        """``forward`` for the members ``indices`` only (obs ``[n, B, obs_dim]``)."""
        sub = Trees(*(tf.gather(a, indices) for a in self.unpack(params)))
        return self.forward(sub, obs)
