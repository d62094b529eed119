"""Acrobot-v1 in-graph: swing up a two-link chain (Gymnasium 1.4, step for step)."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from tfevo.envs.base import ActionSpec
from tfevo.envs.classic_base import _F64, _PI, ClassicControlEnv, _check_bounds, _f32, _uniform
from tfevo.ops import in_xla_context
from tfevo.registry import register

__all__ = ["Acrobot"]


def _wrap(x, m, big_m, times=3):
    """Gymnasium's ``wrap`` (repeated +-(M-m)) unrolled ``times`` times."""
    diff = big_m - m
    for _ in range(times):
        x = tf.where(x > big_m, x - diff, x)
    for _ in range(times):
        x = tf.where(x < m, x + diff, x)
    return x


@register("env", "Acrobot-v1")
class Acrobot(ClassicControlEnv):
    """Acrobot-v1: swing a two-link chain up by torquing the middle joint.

    Observation float32 ``[N, 6]`` (cos/sin of both joint angles and the two
    angular velocities); action int32 ``[N]`` in {0, 1, 2} for torque
    {-1, 0, +1}; reward -1 per step and 0 on the terminating step;
    terminates when the free end rises above the bar height; truncates at 500
    steps.  Dynamics are Gymnasium's "book" equations integrated with one
    4th-order Runge-Kutta step of 0.2 s, in float64.

    Args:
      num_envs: batch size.
      max_episode_steps: default 500.
      reset_low, reset_high: bounds of the uniform initial state (default
        -0.1, 0.1); Gymnasium rounds the draw to float32, so does this.
    """

    env_id = "Acrobot-v1"
    observation_shape = (6,)
    action_spec = ActionSpec(discrete=True, num_actions=3)
    max_episode_steps = 500
    gymnasium_options = {"reset_low": ("reset", "low"), "reset_high": ("reset", "high")}
    state_size = 4

    dt = 0.2
    LINK_LENGTH_1 = 1.0
    LINK_MASS_1 = 1.0
    LINK_MASS_2 = 1.0
    LINK_COM_POS_1 = 0.5
    LINK_COM_POS_2 = 0.5
    LINK_MOI = 1.0
    MAX_VEL_1 = 4 * _PI
    MAX_VEL_2 = 9 * _PI

    def __init__(self, num_envs=1, max_episode_steps=None, reset_low=-0.1, reset_high=0.1):
        super().__init__(num_envs, max_episode_steps)
        self.reset_low, self.reset_high = _check_bounds(reset_low, reset_high)
        self._opaque_constants([1], **self._constant_values())  # creates the variable eagerly

    @property
    def observation_high(self):
        return np.array([1.0, 1.0, 1.0, 1.0, self.MAX_VEL_1, self.MAX_VEL_2], np.float32)

    def _sample(self, seed, n):
        return _f32(_uniform(self, seed, [n, 4], self.reset_low, self.reset_high))

    def _constant_values(self) -> dict:
        m1, m2 = self.LINK_MASS_1, self.LINK_MASS_2
        l1 = self.LINK_LENGTH_1
        lc1, lc2 = self.LINK_COM_POS_1, self.LINK_COM_POS_2
        I1 = I2 = self.LINK_MOI
        g = 9.8
        dt = self.dt - 0.0
        # Constant prefixes folded by Python exactly as in Gymnasium's source.
        return dict(
            d1_a=m1 * lc1**2,
            d1_b=l1**2 + lc2**2,
            d1_c=2 * l1 * lc2,
            m2=m2,
            i1=I1,
            i2=I2,
            d2_a=lc2**2,
            d2_b=l1 * lc2,
            phi2_k=m2 * lc2 * g,
            half_pi=np.pi / 2.0,
            phi1_a=-m2 * l1 * lc2,
            phi1_b=2 * m2 * l1 * lc2,
            phi1_c=(m1 * lc1 + m2 * l1) * g,
            dd2_k=m2 * l1 * lc2,
            den_a=m2 * lc2**2 + I2,
            dt=dt,
            dt2=dt / 2.0,
            dt6=dt / 6.0,
            two=2.0,
        )

    def _dsdt(self, s, a, c):
        # Gymnasium's "book" equations, same association order; constants are
        # opaque [N] tensors and every product feeding a sum is rounded first
        # (``_rmul``), so graph mode and XLA both round exactly like NumPy.
        rmul = self._rmul
        theta1, theta2, dtheta1, dtheta2 = s
        if in_xla_context():
            # Gymnasium squares NumPy float64 scalars (``d2**2``), which calls C pow(); pow is not
            # always x*x in the last bit.  XLA lowers pow with an exponent it cannot see to the same
            # libm pow, so compiled rollouts square exactly as Gymnasium does.
            def square(x):
                return tf.pow(x, c["two"])
        else:  # TensorFlow's own vectorized pow differs from libm's far more often than x*x does
            square = tf.square
        cos2 = tf.cos(theta2)
        sin2 = tf.sin(theta2)
        d1 = c["d1_a"] + rmul(c["m2"], c["d1_b"] + rmul(c["d1_c"], cos2)) + c["i1"] + c["i2"]
        d2 = rmul(c["m2"], c["d2_a"] + rmul(c["d2_b"], cos2)) + c["i2"]
        phi2 = rmul(c["phi2_k"], tf.cos(theta1 + theta2 - c["half_pi"]))
        phi1 = (
            rmul(c["phi1_a"] * square(dtheta2), sin2)
            - rmul(c["phi1_b"] * dtheta2 * dtheta1, sin2)
            + rmul(c["phi1_c"], tf.cos(theta1 - c["half_pi"]))
            + phi2
        )
        ddtheta2 = (a + rmul(d2 / d1, phi1) - rmul(c["dd2_k"] * square(dtheta1), sin2) - phi2) / (
            c["den_a"] - square(d2) / d1
        )
        ddtheta1 = -(rmul(d2, ddtheta2) + phi1) / d1
        return (dtheta1, dtheta2, ddtheta1, ddtheta2)

    def _dynamics(self, physics, fresh, action):
        torque = tf.cast(action, _F64) - 1.0
        y0 = tuple(tf.unstack(physics, axis=1))
        c = self._opaque_constants(tf.shape(torque), **self._constant_values())
        rmul = self._rmul

        def axpy(y, h, k):
            return tuple(yi + rmul(h, ki) for yi, ki in zip(y, k))

        k1 = self._dsdt(y0, torque, c)
        k2 = self._dsdt(axpy(y0, c["dt2"], k1), torque, c)
        k3 = self._dsdt(axpy(y0, c["dt2"], k2), torque, c)
        k4 = self._dsdt(axpy(y0, c["dt"], k3), torque, c)
        two = c["two"]
        ns = [
            y + rmul(c["dt6"], k_1 + rmul(two, k_2) + rmul(two, k_3) + k_4)
            for y, k_1, k_2, k_3, k_4 in zip(y0, k1, k2, k3, k4)
        ]
        ns[0] = _wrap(ns[0], -_PI, _PI)
        ns[1] = _wrap(ns[1], -_PI, _PI)
        ns[2] = tf.minimum(tf.maximum(ns[2], -self.MAX_VEL_1), self.MAX_VEL_1)
        ns[3] = tf.minimum(tf.maximum(ns[3], -self.MAX_VEL_2), self.MAX_VEL_2)
        terminated = -tf.cos(ns[0]) - tf.cos(ns[1] + ns[0]) > 1.0
        reward = tf.where(terminated, tf.constant(0.0, _F64), -1.0)
        return tf.stack(ns, axis=1), reward, terminated

    def _observe(self, physics):
        s0, s1, s2, s3 = tf.unstack(physics, axis=1)
        obs = tf.stack([tf.cos(s0), tf.sin(s0), tf.cos(s1), tf.sin(s1), s2, s3], axis=1)
        return tf.cast(obs, tf.float32)


# ---------------------------------------------------------------------------
