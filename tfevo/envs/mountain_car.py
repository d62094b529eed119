"""MountainCar-v0 and MountainCarContinuous-v0 in-graph (Gymnasium 1.4, step for step)."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from tfevo.envs.base import ActionSpec
from tfevo.envs.classic_base import _F64, ClassicControlEnv, _check_bounds, _f32, _uniform
from tfevo.registry import register

__all__ = ["MountainCar", "MountainCarContinuous"]


class _MountainCarBase(ClassicControlEnv):
    """What MountainCar-v0 and MountainCarContinuous-v0 share: options, bounds, start states."""

    gymnasium_options = {"goal_velocity": ("make", "goal_velocity"),
                         "reset_low": ("reset", "low"), "reset_high": ("reset", "high")}

    def __init__(self, num_envs=1, max_episode_steps=None, goal_velocity=0, reset_low=-0.6, reset_high=-0.4):
        super().__init__(num_envs, max_episode_steps)
        self.goal_velocity = float(goal_velocity)
        self.reset_low, self.reset_high = _check_bounds(reset_low, reset_high)

    @property
    def observation_low(self):
        return np.array([self.min_position, -self.max_speed], np.float32)

    @property
    def observation_high(self):
        return np.array([self.max_position, self.max_speed], np.float32)

    def _sample(self, seed, n):
        pos = _uniform(self, seed, [n], self.reset_low, self.reset_high)
        return tf.stack([pos, tf.zeros_like(pos)], axis=1)


@register("env", "MountainCar-v0")
class MountainCar(_MountainCarBase):
    """MountainCar-v0: drive an under-powered car up the right hill.

    Observation float32 ``[N, 2]`` (position, velocity); action int32 ``[N]``
    in {0: accelerate left, 1: none, 2: right}; reward -1 per step;
    terminates at position >= 0.5 (with velocity >= ``goal_velocity``);
    velocity is clipped to +-0.07 and the left wall at -1.2 stops the car;
    truncates at 200 steps.

    Args:
      num_envs: batch size.
      max_episode_steps: default 200.
      goal_velocity: Gymnasium's option (default 0).
      reset_low, reset_high: bounds of the initial position (default -0.6,
        -0.4); the initial velocity is 0.
    """

    env_id = "MountainCar-v0"
    observation_shape = (2,)
    action_spec = ActionSpec(discrete=True, num_actions=3)
    max_episode_steps = 200
    state_size = 2

    min_position = -1.2
    max_position = 0.6
    max_speed = 0.07
    goal_position = 0.5
    force = 0.001
    gravity = 0.0025

    def _dynamics(self, physics, fresh, action):
        position, velocity = tf.unstack(physics, axis=1)
        push = self._rmul(tf.cast(action - 1, _F64), self.force)
        velocity = velocity + (push + self._rmul(tf.cos(3 * position), -self.gravity))
        velocity = tf.clip_by_value(velocity, -self.max_speed, self.max_speed)
        position = position + velocity
        position = tf.clip_by_value(position, self.min_position, self.max_position)
        velocity = tf.where((position == self.min_position) & (velocity < 0), tf.zeros_like(velocity), velocity)
        terminated = (position >= self.goal_position) & (velocity >= self.goal_velocity)
        reward = tf.fill(tf.shape(position), tf.constant(-1.0, _F64))
        return tf.stack([position, velocity], axis=1), reward, terminated

    def _observe(self, physics):
        return tf.cast(physics, tf.float32)


# ---------------------------------------------------------------------------
@register("env", "MountainCarContinuous-v0")
class MountainCarContinuous(_MountainCarBase):
    """MountainCarContinuous-v0: the mountain car with a continuous force.

    Observation float32 ``[N, 2]`` (position, velocity); action float32
    ``[N, 1]``, the force clipped to [-1, 1]; reward ``-0.1 * action**2`` per
    step (of the unclipped action) plus 100 on reaching position >= 0.45;
    truncates at 999 steps.  Gymnasium stores this task's state in float32
    after the first step and mixes float32 and float64 arithmetic; the same
    roundings are applied here, so trajectories agree exactly.

    Args:
      num_envs: batch size.
      max_episode_steps: default 999.
      goal_velocity: Gymnasium's option (default 0).
      reset_low, reset_high: bounds of the initial position (default -0.6,
        -0.4); the initial velocity is 0.
    """

    env_id = "MountainCarContinuous-v0"
    observation_shape = (2,)
    action_spec = ActionSpec(discrete=False, shape=(1,), low=np.float32(-1.0), high=np.float32(1.0))
    max_episode_steps = 999
    state_size = 2

    min_action = -1.0
    max_action = 1.0
    min_position = -1.2
    max_position = 0.6
    max_speed = 0.07
    goal_position = 0.45
    power = 0.0015

    def _dynamics(self, physics, fresh, action):
        # While ``fresh`` the state is numpy float64 (after reset); afterwards
        # Gymnasium holds it in float32, so operations on position/velocity
        # round to float32 and comparisons with Python constants happen in
        # float32 (NumPy 2 "weak scalar" rules).
        def fr(x):
            return tf.where(fresh, x, _f32(x))

        def thr(c):
            return tf.where(fresh, tf.constant(c, _F64), tf.constant(float(np.float32(c)), _F64))

        position, velocity = tf.unstack(physics, axis=1)
        a = tf.cast(action[:, 0], _F64)  # exact (float32 -> float64)
        clipped = (a < self.min_action) | (a > self.max_action)
        force = tf.clip_by_value(a, self.min_action, self.max_action)
        cos_term = self._rmul(tf.cos(fr(3 * position)), 0.0025)
        # float32 action: float32 product and difference; clipped: Python floats.
        d_f32 = _f32(_f32(force * float(np.float32(self.power))) - _f32(cos_term))
        d_f64 = self._rmul(force, self.power) - cos_term
        d = tf.where(clipped, d_f64, d_f32)
        velocity = fr(velocity + fr(d))
        velocity = tf.where(velocity > thr(self.max_speed), tf.constant(self.max_speed, _F64), velocity)
        velocity = tf.where(velocity < thr(-self.max_speed), tf.constant(-self.max_speed, _F64), velocity)
        position = fr(position + fr(velocity))
        position = tf.where(position > thr(self.max_position), tf.constant(self.max_position, _F64), position)
        position = tf.where(position < thr(self.min_position), tf.constant(self.min_position, _F64), position)
        at_wall = fr(position) == thr(self.min_position)
        velocity = tf.where(at_wall & (velocity < 0), tf.zeros_like(velocity), velocity)
        terminated = (fr(position) >= thr(self.goal_position)) & (velocity >= thr(self.goal_velocity))
        reward = tf.where(terminated, tf.constant(100.0, _F64), 0.0) - self._rmul(tf.square(a), 0.1)
        physics = _f32(tf.stack([position, velocity], axis=1))
        return physics, reward, terminated

    def _observe(self, physics):
        return tf.cast(physics, tf.float32)
