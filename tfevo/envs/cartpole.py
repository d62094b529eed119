"""CartPole-v1 in-graph: balance a pole on a cart (Gymnasium 1.4, step for step)."""

from __future__ import annotations

import math

import numpy as np
import tensorflow as tf

from tfevo.envs.base import ActionSpec
from tfevo.envs.classic_base import _F64, ClassicControlEnv, _check_bounds, _uniform
from tfevo.registry import register

__all__ = ["CartPole"]


@register("env", "CartPole-v1")
class CartPole(ClassicControlEnv):
    """CartPole-v1: push a cart left/right to keep a pole upright.

    Observation float32 ``[N, 4]`` (cart position, cart velocity, pole angle,
    pole angular velocity); action int32 ``[N]`` in {0: left, 1: right};
    reward +1 per step (including the terminating one); terminates when the
    angle leaves +-12 degrees or the cart leaves +-2.4; truncates at 500 steps.

    Args:
      num_envs: batch size.
      max_episode_steps: default 500.
      sutton_barto_reward: Gymnasium's option: reward 0 per step and -1 on
        the terminating step.
      reset_low, reset_high: bounds of the uniform initial state (default
        -0.05, 0.05), as Gymnasium's ``reset(options={"low", "high"})``.
    """

    env_id = "CartPole-v1"
    observation_shape = (4,)
    action_spec = ActionSpec(discrete=True, num_actions=2)
    max_episode_steps = 500
    gymnasium_options = {"sutton_barto_reward": ("make", "sutton_barto_reward"),
                         "reset_low": ("reset", "low"), "reset_high": ("reset", "high")}
    state_size = 4

    gravity = 9.8
    masscart = 1.0
    masspole = 0.1
    length = 0.5
    force_mag = 10.0
    tau = 0.02

    def __init__(self, num_envs=1, max_episode_steps=None, sutton_barto_reward=False,
                 reset_low=-0.05, reset_high=0.05):
        super().__init__(num_envs, max_episode_steps)
        self.sutton_barto_reward = bool(sutton_barto_reward)
        self.reset_low, self.reset_high = _check_bounds(reset_low, reset_high)
        self.total_mass = self.masspole + self.masscart
        self.polemass_length = self.masspole * self.length
        self.theta_threshold_radians = 12 * 2 * math.pi / 360
        self.x_threshold = 2.4
        self._opaque_constants([1], **self._constant_values())  # creates the variable eagerly

    def _constant_values(self) -> dict:
        return dict(
            force_mag=self.force_mag,
            polemass_length=self.polemass_length,
            total_mass=self.total_mass,
            gravity=self.gravity,
            length=self.length,
            four_thirds=4.0 / 3.0,
            masspole=self.masspole,
            tau=self.tau,
        )

    @property
    def observation_high(self):
        return np.array([self.x_threshold * 2, np.inf, self.theta_threshold_radians * 2, np.inf], np.float32)

    def _sample(self, seed, n):
        return _uniform(self, seed, [n, 4], self.reset_low, self.reset_high)

    def _dynamics(self, physics, fresh, action):
        x, x_dot, theta, theta_dot = tf.unstack(physics, axis=1)
        # Physical constants are read from a variable and broadcast to [N] so
        # that neither Grappler nor XLA rewrites ``x / 1.1`` into
        # ``x * (1 / 1.1)`` or reorders constant products: this keeps results
        # bit-identical to Gymnasium's NumPy float64 arithmetic.
        c = self._opaque_constants(tf.shape(x), **self._constant_values())
        force = tf.where(tf.equal(action, 1), c["force_mag"], -c["force_mag"])
        rmul = self._rmul
        costheta = tf.cos(theta)
        sintheta = tf.sin(theta)
        temp = (force + rmul(c["polemass_length"] * tf.square(theta_dot), sintheta)) / c["total_mass"]
        thetaacc = (rmul(c["gravity"], sintheta) - rmul(costheta, temp)) / (
            c["length"] * (c["four_thirds"] - c["masspole"] * tf.square(costheta) / c["total_mass"])
        )
        xacc = temp - c["polemass_length"] * thetaacc * costheta / c["total_mass"]
        x = x + rmul(c["tau"], x_dot)
        x_dot = x_dot + rmul(c["tau"], xacc)
        theta = theta + rmul(c["tau"], theta_dot)
        theta_dot = theta_dot + rmul(c["tau"], thetaacc)
        terminated = (
            (x < -self.x_threshold)
            | (x > self.x_threshold)
            | (theta < -self.theta_threshold_radians)
            | (theta > self.theta_threshold_radians)
        )
        if self.sutton_barto_reward:
            reward = tf.where(terminated, tf.constant(-1.0, _F64), 0.0)
        else:
            reward = tf.ones_like(x)
        return tf.stack([x, x_dot, theta, theta_dot], axis=1), reward, terminated

    def _observe(self, physics):
        return tf.cast(physics, tf.float32)
