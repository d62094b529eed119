"""In-graph, batched TensorFlow versions of Gymnasium's classic control tasks.

Five environments, each a :class:`~tfevo.envs.base.TFEnv` that reproduces
Gymnasium 1.4 step for step -- dynamics, rewards, termination, truncation
(the ``max_episode_steps`` of Gymnasium's registry), initial-state
distributions, observation dtypes and bounds and action semantics:

==============================  =========  ==========  =====================
id                              obs        actions     max_episode_steps
==============================  =========  ==========  =====================
``CartPole-v1``                 float32 4  int {0,1}   500
``Acrobot-v1``                  float32 6  int {0,1,2} 500
``MountainCar-v0``              float32 2  int {0,1,2} 200
``MountainCarContinuous-v0``    float32 2  float [1]   999
``Pendulum-v1``                 float32 3  float [1]   200
==============================  =========  ==========  =====================

The environments are *functional*: ``reset(seed)`` returns ``(state, obs)``
and ``step(state, action)`` returns a :class:`~tfevo.envs.base.StepResult`
with the next state, so a whole batch (and a whole population) is stepped
inside one ``tf.function``/``tf.while_loop`` and can be XLA compiled.  The
state is a :class:`ClassicState` of tensors with a leading batch axis ``N``;
it carries the step counter, so truncation is decided in-graph.

Numerics follow Gymnasium exactly: the physical state is kept in float64
where Gymnasium keeps numpy float64, and float32 rounding is applied where
Gymnasium's arithmetic happens in float32 (for example the float32 state of
MountainCarContinuous after its first step, or the float32 action terms of
Pendulum).  Observations are float32, rewards float32 (rounded from the
float64 value Gymnasium returns), flags bool.

Like Gymnasium, stepping an environment after its episode has ended is
undefined (the physics simply continue); evaluators mask finished episodes.
Environments do not reset automatically.

Example:

>>> import tensorflow as tf
>>> from tfevo.envs import make
>>> env = make("CartPole-v1", 8)
>>> state, obs = env.reset(tf.constant([0, 1]))
>>> res = env.step(state, tf.ones([8], tf.int32))
>>> res.obs.shape, res.reward.dtype
(TensorShape([8, 4]), tf.float32)
"""

from __future__ import annotations

import abc

import functools
import inspect
import math
from typing import NamedTuple

import numpy as np
import tensorflow as tf

from tfevo.core import ConfigError, ShapeError
from tfevo.envs.base import ActionSpec, StepResult, TFEnv
from tfevo.ops import in_xla_context
from tfevo.registry import register

__all__ = [
    "ClassicState",
    "ClassicControlEnv",
    "CartPole",
    "Acrobot",
    "MountainCar",
    "MountainCarContinuous",
    "Pendulum",
    "CLASSIC_ENV_IDS",
]

_F64 = tf.float64
_PI = np.pi


class ClassicState(NamedTuple):
    """State of a batch of classic control environments.

    Attributes:
      physics: float64 ``[N, k]``, the Gymnasium ``env.unwrapped.state`` of
        each environment (k = 4, 4, 2, 2, 2 for CartPole, Acrobot,
        MountainCar, MountainCarContinuous, Pendulum).
      steps: int32 ``[N]``, steps taken in the current episode (truncation
        happens when it reaches ``max_episode_steps``).
      fresh: bool ``[N]``, True while the state still holds the float64
        values drawn by ``reset`` (Gymnasium's MountainCarContinuous switches
        to a float32 state after its first step; the other tasks ignore it).
    """

    physics: tf.Tensor
    steps: tf.Tensor
    fresh: tf.Tensor


def _f32(x: tf.Tensor) -> tf.Tensor:
    """Rounds a float64 tensor to float32 precision, keeping dtype float64."""
    return tf.cast(tf.cast(x, tf.float32), _F64)


class ClassicControlEnv(TFEnv):
    """Common machinery of the in-graph classic control tasks.

    Subclasses set ``env_id``, ``observation_shape``, ``action_spec``,
    ``max_episode_steps``, ``state_size`` and implement ``_sample(seed, n)``
    (initial physics, float64 ``[n, k]``), ``_dynamics(physics, fresh,
    action) -> (physics, reward float64, terminated)`` and
    ``_observe(physics) -> float32 obs``.

    Args:
      num_envs: batch size ``N`` used by :meth:`reset`.
      max_episode_steps: truncation limit; defaults to Gymnasium's registry
        value for the id.  ``0`` disables truncation.
    """

    state_size: int = 0

    def __init_subclass__(cls, **kwargs):
        # Unknown options (e.g. a typo in a config's env.kwargs) -> ConfigError
        # listing the options the task has, instead of a bare TypeError.
        super().__init_subclass__(**kwargs)
        init = cls.__dict__.get("__init__")
        if init is None:
            return
        known = [k for k in inspect.signature(init).parameters if k != "self"]

        @functools.wraps(init)
        def checked_init(self, *args, **kw):
            unknown = sorted(k for k in kw if k not in known)
            if unknown:
                raise ConfigError(f"{cls.env_id}: unknown option(s) {unknown}; known options: {known}")
            init(self, *args, **kw)

        cls.__init__ = checked_init

    def __init__(self, num_envs: int = 1, max_episode_steps: int | None = None):
        if int(num_envs) < 1:
            raise ConfigError(f"num_envs must be >= 1, got {num_envs}")
        super().__init__(int(num_envs))
        if max_episode_steps is not None:
            if int(max_episode_steps) < 0:
                raise ConfigError(f"max_episode_steps must be >= 0, got {max_episode_steps}")
            self.max_episode_steps = int(max_episode_steps)
        with tf.init_scope():
            # int64 zeros that no compiler can prove to be zero (see _rounded_mul).
            self._zero_bits = tf.Variable(0, dtype=tf.int64, trainable=False, name="zero_bits")

    def _rmul(self, a, b):
        """``a * b`` rounded exactly like NumPy before it is added to anything."""
        return _rounded_mul(a, b, self._zero_bits.read_value())

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.env_id}, num_envs={self.num_envs})"

    # -- to implement ------------------------------------------------------
    @abc.abstractmethod
    def _sample(self, seed: tf.Tensor, n: int) -> tf.Tensor:  # pragma: no cover
        raise NotImplementedError

    @abc.abstractmethod
    def _dynamics(self, physics, fresh, action):  # pragma: no cover
        raise NotImplementedError

    @abc.abstractmethod
    def _observe(self, physics: tf.Tensor) -> tf.Tensor:  # pragma: no cover
        raise NotImplementedError

    # -- public API --------------------------------------------------------
    @property
    def observation_low(self) -> np.ndarray:
        """Lower bounds of Gymnasium's observation space (float32)."""
        return -self.observation_high

    @property
    @abc.abstractmethod
    def observation_high(self) -> np.ndarray:  # pragma: no cover - overridden
        raise NotImplementedError

    def _opaque_constants(self, shape, **values) -> dict:
        """float64 tensors of ``shape`` holding ``values``, opaque to optimizers.

        The values live in a (lazily created, non-trainable) variable, which
        graph optimizers and XLA cannot constant-fold, so divisions by them
        and products with them are evaluated exactly as written.
        """
        names = tuple(values)
        if getattr(self, "_const_names", None) != names:
            with tf.init_scope():
                self._const_var = tf.Variable(
                    np.array([values[k] for k in names], np.float64), trainable=False, name="constants"
                )
            self._const_names = names
        vals = tf.unstack(self._const_var.read_value())
        return {k: tf.fill(shape, v) for k, v in zip(names, vals)}

    def reset(self, seed, num_envs: int | None = None) -> tuple[ClassicState, tf.Tensor]:
        """Draws initial states from Gymnasium's initial-state distribution.

        Args:
          seed: int32 ``[2]`` seed for stateless random ops.
          num_envs: batch size; defaults to ``self.num_envs``.

        Returns:
          ``(state, obs)`` with ``obs`` float32 ``[N, *observation_shape]``.
        """
        n = self.num_envs if num_envs is None else int(num_envs)
        if n < 1:
            raise ConfigError(f"num_envs must be >= 1, got {n}")
        seed = tf.convert_to_tensor(seed)
        if seed.shape.rank != 1 or seed.shape[0] != 2 or not seed.dtype.is_integer:
            raise ShapeError(
                f"{self.env_id}.reset: seed must be an integer tensor of shape [2], "
                f"got {seed.dtype.name} {seed.shape.as_list()}"
            )
        physics = self._sample(tf.cast(seed, tf.int32), n)
        state = ClassicState(physics, tf.zeros([n], tf.int32), tf.ones([n], tf.bool))
        return state, self._observe(physics)

    def observe(self, state: ClassicState) -> tf.Tensor:
        """The float32 observation of a state (what Gymnasium would return)."""
        return self._observe(state.physics)

    def check_action(self, action, num_envs: int | None = None) -> tf.Tensor:
        """Validates an action batch (Python side) and returns it as a tensor.

        Discrete tasks take integer ``[N]``; continuous tasks float ``[N, 1]``.
        Raises :class:`~tfevo.core.ShapeError` naming what was expected.
        """
        action = tf.convert_to_tensor(action)
        spec = self.action_spec
        n = "N" if num_envs is None else num_envs
        if spec.discrete:
            want = f"int32 [{n}]"
            ok_dtype = action.dtype.is_integer
            ok_shape = action.shape.rank == 1 and (num_envs is None or action.shape[0] in (None, num_envs))
        else:
            want = f"float32 [{n}, {spec.shape[0]}]"
            ok_dtype = action.dtype.is_floating
            ok_shape = (
                action.shape.rank == 2
                and action.shape[1] == spec.shape[0]
                and (num_envs is None or action.shape[0] in (None, num_envs))
            )
        if not (ok_dtype and ok_shape):
            raise ShapeError(
                f"{self.env_id}: action must be {want}, got {action.dtype.name} {action.shape.as_list()}"
            )
        if spec.discrete:
            return self._check_range(tf.cast(action, tf.int32))
        return tf.cast(action, tf.float32)

    def _check_range(self, action: tf.Tensor) -> tf.Tensor:
        """Refuses discrete actions outside ``[0, num_actions)``, as Gymnasium's ``action_space.contains``.

        Values known when tracing (constants, eager tensors) are checked in
        Python; others get one ``tf.debugging`` assertion on the batch (XLA drops
        assertions: inside ``jit_compile`` functions give valid actions).
        """
        n = self.action_spec.num_actions
        known = tf.get_static_value(action)
        if known is not None:
            known = np.asarray(known)
            bad = known[(known < 0) | (known >= n)]
            if bad.size:
                raise ShapeError(f"{self.env_id}: actions must be integers in [0, {n}) (Gymnasium's action space "
                                 f"Discrete({n})), got {bad[:5].tolist()}")
            return action
        in_range = tf.reduce_all((action >= 0) & (action < n))
        check = tf.debugging.Assert(in_range, [f"{self.env_id}: actions must be integers in [0, {n}), got",
                                               tf.reduce_min(action), tf.reduce_max(action)], summarize=5)
        with tf.control_dependencies([check]):
            return tf.identity(action)

    def step(self, state: ClassicState, action) -> StepResult:
        """Advances every environment by one step.

        Args:
          state: a :class:`ClassicState` with leading axis ``N``.
          action: int32 ``[N]`` (discrete tasks) or float32 ``[N, 1]``.

        Returns:
          :class:`~tfevo.envs.base.StepResult` ``(state, obs, reward,
          terminated, truncated)``; ``truncated`` is True when the step counter
          reaches ``max_episode_steps`` (also on a terminating step, as
          Gymnasium's ``TimeLimit`` does).
        """
        if not isinstance(state, ClassicState):
            state = ClassicState(*state)
        n = state.physics.shape[0]
        action = self.check_action(action, n)
        physics, reward, terminated = self._dynamics(state.physics, state.fresh, action)
        steps = state.steps + 1
        if self.max_episode_steps > 0:
            truncated = steps >= self.max_episode_steps
        else:
            truncated = tf.zeros_like(terminated)
        new_state = ClassicState(physics, steps, tf.zeros_like(state.fresh))
        return StepResult(new_state, self._observe(physics), tf.cast(reward, tf.float32), terminated, truncated)

    def state_from_numpy(self, physics, steps=0, fresh=None) -> tuple[ClassicState, tf.Tensor]:
        """Builds a state from Gymnasium states, e.g. ``env.unwrapped.state``.

        Args:
          physics: array ``[N, k]`` (or ``[k]`` for one environment) of
            Gymnasium states.
          steps: steps already taken in the episode (scalar or ``[N]``).
          fresh: whether the states are fresh float64 reset states; by default
            True exactly when ``physics`` has dtype float64 (this matters only
            for MountainCarContinuous, whose state becomes float32 after one
            step).

        Returns:
          ``(state, obs)`` like :meth:`reset`.
        """
        arr = np.asarray(physics)
        if arr.ndim == 1:
            arr = arr[None]
        if arr.ndim != 2 or arr.shape[1] != self.state_size:
            raise ShapeError(
                f"{self.env_id}: physics must have shape [N, {self.state_size}], got {list(np.shape(physics))}"
            )
        if fresh is None:
            fresh = arr.dtype == np.float64
        n = arr.shape[0]
        phys = tf.constant(arr.astype(np.float64))
        steps_t = tf.constant(np.broadcast_to(np.asarray(steps, np.int32), (n,)))
        fresh_t = tf.constant(np.broadcast_to(np.asarray(fresh, bool), (n,)))
        return ClassicState(phys, steps_t, fresh_t), self._observe(phys)


def _rounded_mul(a, b, zero_bits):
    """``a * b`` rounded to float64 before any following addition, also under XLA.

    XLA's CPU backend contracts ``a * b + c`` into a fused multiply-add, which
    rounds once where NumPy rounds twice.  XOR-ing the product's bits with
    ``zero_bits`` (int64 zeros read from a variable, so no compiler can prove
    they are zero) is an exact identity that no optimizer can see through.
    """
    bits = tf.bitcast(a * b, tf.int64)
    return tf.bitcast(tf.bitwise.bitwise_xor(bits, zero_bits), _F64)


def _uniform01(seed, shape) -> tf.Tensor:
    """float64 uniform in [0, 1) with 53 random bits, identical with and without XLA.

    (``stateless_uniform(dtype=float64)`` converts bits to doubles
    differently under XLA; the integer Philox stream is the same, so the
    conversion is done here, like NumPy's ``random()``.)
    """
    bits = tf.random.stateless_uniform(shape, seed=seed, minval=None, maxval=None, dtype=tf.int64, alg="philox")
    top = tf.bitwise.right_shift(tf.bitcast(bits, tf.uint64), tf.constant(11, tf.uint64))
    return tf.cast(top, _F64) * (1.0 / 9007199254740992.0)


def _uniform(env, seed, shape, low, high):
    return low + env._rmul(_uniform01(seed, shape), high - low)


def _check_bounds(low, high):
    low, high = float(low), float(high)
    if low > high:
        raise ConfigError(f"reset_low ({low}) must not exceed reset_high ({high})")
    return low, high


# ---------------------------------------------------------------------------
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


# ---------------------------------------------------------------------------
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


class _MountainCarBase(ClassicControlEnv):
    """What MountainCar-v0 and MountainCarContinuous-v0 share: options, bounds, start states."""

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


# ---------------------------------------------------------------------------
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


CLASSIC_ENV_IDS = (
    "CartPole-v1",
    "Acrobot-v1",
    "MountainCar-v0",
    "MountainCarContinuous-v0",
    "Pendulum-v1",
)
