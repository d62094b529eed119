"""The two kinds of batched environment behind ``tfevo.envs.make``.

Both are batched: the leading axis of every observation, action, reward and
flag is the environment index ``[N]``.

* :class:`TFEnv` -- *in-graph* environments written in TensorFlow.  They are
  functional (the state is an explicit tuple of tensors), so a whole rollout of
  a population runs inside one ``tf.function``/``tf.while_loop`` and can be XLA
  compiled.

* :class:`HostVectorEnv` -- simulators that run on CPU threads outside the
  graph (ale-py's native vector env, batched MuJoCo, any Gymnasium env).  They
  expose asynchronous ``send``/``recv`` so the pipelined evaluator can step one
  group of simulators while TensorFlow runs inference for another.
"""

from __future__ import annotations

import abc

import dataclasses
from typing import Any, NamedTuple

import numpy as np
import tensorflow as tf


@dataclasses.dataclass(frozen=True)
class ActionSpec:
    """What an environment accepts.

    Discrete: ``num_actions`` > 0, actions are ``int32 [N]``.
    Continuous: ``shape`` = (A,), actions are ``float32 [N, A]`` in [low, high].
    """

    discrete: bool
    num_actions: int = 0
    shape: tuple = ()
    low: Any = None
    high: Any = None

    @property
    def policy_output_size(self) -> int:
        """Outputs a policy network needs (logits for discrete, A for continuous)."""
        return self.num_actions if self.discrete else int(np.prod(self.shape))


class StepResult(NamedTuple):
    state: Any
    obs: tf.Tensor  # float32 [N, ...]
    reward: tf.Tensor  # float32 [N]
    terminated: tf.Tensor  # bool [N]
    truncated: tf.Tensor  # bool [N]


class TFEnv:
    """Base class of in-graph batched environments.

    Subclasses define ``observation_shape`` (per env), ``action_spec``,
    ``max_episode_steps`` and implement ``reset``/``step`` with TensorFlow ops.
    The state must contain the step counter so truncation is in-graph.
    """

    env_id: str = ""
    observation_shape: tuple = ()
    action_spec: ActionSpec
    max_episode_steps: int = 0

    def __init__(self, num_envs: int):
        self.num_envs = int(num_envs)

    @abc.abstractmethod
    def reset(self, seed: tf.Tensor) -> tuple[Any, tf.Tensor]:
        """``seed``: int32 [2] for stateless random ops. Returns (state, obs)."""
        raise NotImplementedError

    @abc.abstractmethod
    def step(self, state: Any, action: tf.Tensor) -> StepResult:
        raise NotImplementedError


class HostVectorEnv:
    """Base class of host-side batched simulators with async send/recv.

    ``send(actions, indices)`` starts stepping the environments ``indices``
    (int array [n]) with ``actions`` ([n] ints or [n, A] floats) and returns at
    once; ``recv()`` waits and returns ``(indices, obs, reward, terminated,
    truncated)`` for those environments.  ``reset(indices, seeds)`` resets some
    slots and returns their first observations.  Observations are numpy
    float32 (uint8 for Atari frames).  Episodes do not auto-reset: the caller
    decides what a slot runs next.
    """

    env_id: str = ""
    num_envs: int = 0
    observation_shape: tuple = ()
    observation_dtype = np.float32
    action_spec: ActionSpec

    @abc.abstractmethod
    def reset(self, indices: np.ndarray, seeds: np.ndarray | None = None) -> np.ndarray:
        raise NotImplementedError

    @abc.abstractmethod
    def send(self, actions: np.ndarray, indices: np.ndarray) -> None:
        raise NotImplementedError

    @abc.abstractmethod
    def recv(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        raise NotImplementedError

    def step(self, actions, indices):
        self.send(actions, indices)
        return self.recv()

    def descriptors(self, indices: np.ndarray) -> np.ndarray | None:
        """Optional behaviour descriptors of the episodes in ``indices``."""
        return None

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
