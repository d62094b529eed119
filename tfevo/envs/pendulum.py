"""Pendulum-v1 in-graph: swing up and hold a pendulum (Gymnasium 1.4, step for step)."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from tfevo.envs.base import ActionSpec
from tfevo.envs.classic_base import _F64, _PI, ClassicControlEnv, _uniform01
from tfevo.registry import register

__all__ = ["Pendulum"]


@register("env", "Pendulum-v1")
class Pendulum(ClassicControlEnv):
    """Pendulum-v1: swing up and balance a torque-limited pendulum.

    Observation float32 ``[N, 3]`` (cos theta, sin theta, angular velocity);
    action float32 ``[N, 1]``, the torque clipped to [-2, 2]; reward
    ``-(angle_normalize(theta)**2 + 0.1 * thdot**2 + 0.001 * u**2)``; never
    terminates; truncates at 200 steps.

    Args:
      num_envs: batch size.
      max_episode_steps: default 200.
      g: gravity (Gymnasium's option, default 10.0).
      x_init, y_init: initial angle / angular velocity are uniform in
        [-x_init, x_init] x [-y_init, y_init] (default pi, 1.0).
    """

    env_id = "Pendulum-v1"
    observation_shape = (3,)
    action_spec = ActionSpec(discrete=False, shape=(1,), low=np.float32(-2.0), high=np.float32(2.0))
    max_episode_steps = 200
    gymnasium_options = {"g": ("make", "g"), "x_init": ("reset", "x_init"), "y_init": ("reset", "y_init")}
    state_size = 2

    max_speed = 8
    max_torque = 2.0
    dt = 0.05
    m = 1.0
    l = 1.0  # noqa: E741

    def __init__(self, num_envs=1, max_episode_steps=None, g=10.0, x_init=np.pi, y_init=1.0):
        super().__init__(num_envs, max_episode_steps)
        self.g = float(g)
        self.x_init, self.y_init = float(x_init), float(y_init)

    @property
    def observation_high(self):
        return np.array([1.0, 1.0, self.max_speed], np.float32)

    def _sample(self, seed, n):
        high = tf.constant([self.x_init, self.y_init], _F64)
        u = _uniform01(seed, [n, 2])
        return -high + self._rmul(u, 2 * high)

    def _dynamics(self, physics, fresh, action):
        th, thdot = tf.unstack(physics, axis=1)
        g, m, l, dt = self.g, self.m, self.l, self.dt
        u32 = tf.clip_by_value(action[:, 0], -self.max_torque, self.max_torque)  # float32
        norm = tf.math.floormod(th + _PI, 2 * _PI) - _PI
        # ``0.001 * u**2`` and ``3.0 * u`` are float32 operations in Gymnasium.
        rmul = self._rmul  # products rounded before the sums they feed (no FMA)
        costs = rmul(norm, norm) + rmul(tf.square(thdot), 0.1) + tf.cast(0.001 * tf.square(u32), _F64)
        accel = rmul(tf.sin(th), 3 * g / (2 * l)) + tf.cast(3.0 / (m * l**2) * u32, _F64)
        newthdot = thdot + rmul(accel, dt)
        newthdot = tf.clip_by_value(newthdot, -float(self.max_speed), float(self.max_speed))
        newth = th + rmul(newthdot, dt)
        return tf.stack([newth, newthdot], axis=1), -costs, tf.zeros(tf.shape(th), tf.bool)

    def _observe(self, physics):
        th, thdot = tf.unstack(physics, axis=1)
        return tf.cast(tf.stack([tf.cos(th), tf.sin(th), thdot], axis=1), tf.float32)
