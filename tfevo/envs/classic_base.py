"""The machinery shared by the in-graph classic control tasks (:mod:`tfevo.envs.classic`).

:class:`ClassicState` (the functional state of a batch), :class:`ClassicControlEnv`
(reset/step/masking, option checks, Gymnasium's truncation) and the exact
float64 helpers the tasks use to reproduce Gymnasium's numerics bit for bit.
"""

from __future__ import annotations

import abc
import functools
import inspect
from typing import NamedTuple

import numpy as np
import tensorflow as tf

from tfevo.core import ConfigError, ShapeError
from tfevo.envs.base import StepResult, TFEnv

__all__ = ["ClassicState", "ClassicControlEnv"]

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
    # Each option that has a Gymnasium counterpart: ("make", name) is a ``gym.make`` keyword,
    # ("reset", name) a key of ``env.reset(options=...)``; see :func:`tfevo.envs.gymnasium_twin`.
    gymnasium_options: dict = {}

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
