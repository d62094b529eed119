"""Any Gymnasium environment as a :class:`~tfevo.envs.base.HostVectorEnv` (fallback).

:class:`GymVectorEnv` wraps Gymnasium's own vector environments
(``SyncVectorEnv`` in-process, or ``AsyncVectorEnv`` with one worker process
per slot) with ``autoreset_mode=DISABLED`` and drives their sub-environments
per slot, so that it follows tfevo's host-env contract:

* ``reset(indices, seeds)`` resets only the slots ``indices``;
* ``send(actions, indices)`` starts stepping only the slots ``indices`` and
  ``recv()`` returns their results (in the order they were sent);
* nothing resets by itself: the caller decides what a slot runs next.

It is the slow path for ids tfevo has no native batched simulator for; the
pipelined evaluator works with it unchanged.

Example:

>>> env = GymVectorEnv("CartPole-v1", num_envs=4)
>>> obs = env.reset(np.arange(4), seeds=np.arange(4))
>>> env.send(np.zeros(2, np.int32), np.array([0, 2]))
>>> idx, obs, rew, term, trunc = env.recv()
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np

from tfevo.core import ConfigError, ShapeError
from tfevo.envs.base import ActionSpec, HostVectorEnv

__all__ = ["GymVectorEnv"]


def _action_spec(space) -> ActionSpec:
    from gymnasium import spaces

    if isinstance(space, spaces.Discrete):
        return ActionSpec(discrete=True, num_actions=int(space.n))
    if isinstance(space, spaces.Box):
        return ActionSpec(
            discrete=False,
            shape=tuple(space.shape),
            low=np.asarray(space.low, np.float32),
            high=np.asarray(space.high, np.float32),
        )
    raise ConfigError(f"unsupported Gymnasium action space {space!r} (need Discrete or Box)")


class GymVectorEnv(HostVectorEnv):
    """A batch of ``num_envs`` copies of a Gymnasium environment.

    Args:
      env_id: a Gymnasium id (``gymnasium.registry``) or ``None`` when
        ``env_fn`` is given.
      num_envs: number of slots.
      asynchronous: ``False`` (default) steps the slots in this process
        through ``gymnasium.vector.SyncVectorEnv``; ``True`` uses
        ``AsyncVectorEnv`` (one worker process per slot), which overlaps the
        simulation with TensorFlow work but pays inter-process costs.
      env_fn: optional zero-argument callable creating one environment
        (instead of ``gymnasium.make(env_id, **make_kwargs)``).
      reset_options: ``options`` given to every slot's ``reset`` (e.g. the
        ``low``/``high`` start bounds of the classic control tasks).
      **make_kwargs: passed to ``gymnasium.make`` (``max_episode_steps=N``
        replaces the registered ``TimeLimit``, as in Gymnasium).

    Attributes:
      max_episode_steps: the slots' ``TimeLimit`` in agent steps (0: the id
        has none; None: an ``env_fn`` environment without a spec).

    Observations are ``float32 [n, *observation_shape]``; rewards
    ``float32 [n]``; terminated/truncated ``bool [n]``.
    """

    def __init__(
        self,
        env_id: str | None,
        num_envs: int = 1,
        *,
        asynchronous: bool = False,
        env_fn: Callable | None = None,
        reset_options: dict | None = None,
        **make_kwargs,
    ):
        import gymnasium as gym
        from gymnasium.vector import AutoresetMode

        if int(num_envs) < 1:
            raise ConfigError(f"num_envs must be >= 1, got {num_envs}")
        env_fn_given = env_fn is not None
        if env_fn is None:
            if not isinstance(env_id, str) or env_id not in gym.registry:
                raise ConfigError(
                    f"unknown Gymnasium environment id {env_id!r}; list valid ids with "
                    "`import gymnasium; print(sorted(gymnasium.registry))`"
                )

            def env_fn(env_id=env_id, kw=dict(make_kwargs)):
                return gym.make(env_id, **kw)

        self.env_id = env_id or getattr(env_fn, "__name__", "custom")
        self.num_envs = int(num_envs)
        self.asynchronous = bool(asynchronous)
        self.reset_options = dict(reset_options) if reset_options else None
        fns = [env_fn] * self.num_envs
        if self.asynchronous:
            self._vec = gym.vector.AsyncVectorEnv(
                fns, shared_memory=False, copy=False, autoreset_mode=AutoresetMode.DISABLED
            )
        else:
            self._vec = gym.vector.SyncVectorEnv(fns, copy=False, autoreset_mode=AutoresetMode.DISABLED)
        if not self.asynchronous:
            spec = getattr(self._vec.envs[0], "spec", None)
        else:
            spec = None if env_fn_given else gym.spec(env_id)
            if spec is not None and make_kwargs.get("max_episode_steps") is not None:
                spec = dataclasses.replace(spec, max_episode_steps=int(make_kwargs["max_episode_steps"]))
        # the TimeLimit of the slots' envs in agent steps (0: none; None: an env_fn's env that does not say)
        self.max_episode_steps = None if spec is None else int(spec.max_episode_steps or 0)
        space = self._vec.single_observation_space
        self.observation_shape = tuple(space.shape or ())
        self.observation_dtype = np.float32
        self.action_spec = _action_spec(self._vec.single_action_space)
        self._pending: np.ndarray | None = None
        self._sync_results = None

    # -- helpers ------------------------------------------------------------
    def _check_indices(self, indices) -> np.ndarray:
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        if idx.size and (idx.min() < 0 or idx.max() >= self.num_envs):
            raise ShapeError(f"slot indices must be in [0, {self.num_envs}), got {idx.tolist()}")
        if np.unique(idx).size != idx.size:
            raise ShapeError(f"slot indices must be distinct, got {idx.tolist()}")
        return idx

    def _convert_action(self, a):
        if self.action_spec.discrete:
            return int(a)
        return np.asarray(a, np.float32).reshape(self.action_spec.shape)

    def _raise(self, successes):
        if not all(successes):
            self._vec._raise_if_errors(successes)  # re-raises the worker's exception

    # -- HostVectorEnv API ----------------------------------------------------
    def reset(self, indices, seeds=None) -> np.ndarray:
        """Resets slots ``indices`` (with one seed each, if given); returns their observations."""
        if self._pending is not None:
            raise RuntimeError("reset() called between send() and recv()")
        idx = self._check_indices(indices)
        if seeds is None:
            seeds = [None] * idx.size
        else:
            seeds = [int(s) for s in np.asarray(seeds).reshape(-1)]
            if len(seeds) != idx.size:
                raise ShapeError(f"need one seed per reset slot ({idx.size}), got {len(seeds)}")
        obs = np.empty((idx.size, *self.observation_shape), np.float32)
        if self.asynchronous:
            pipes = self._vec.parent_pipes
            for i, s in zip(idx, seeds):
                pipes[i].send(("reset", {"seed": s, "options": self.reset_options}))
            succ = []
            for j, i in enumerate(idx):
                (res, ok) = pipes[i].recv()
                succ.append(ok)
                if ok:
                    obs[j] = res[0]
            self._raise(succ)
        else:
            for j, (i, s) in enumerate(zip(idx, seeds)):
                o, _ = self._vec.envs[i].reset(seed=s, options=self.reset_options)
                obs[j] = o
        return obs

    def send(self, actions, indices) -> None:
        """Starts stepping slots ``indices`` with ``actions`` (one row per slot)."""
        if self._pending is not None:
            raise RuntimeError("send() called twice without recv()")
        idx = self._check_indices(indices)
        actions = np.asarray(actions)
        if actions.shape[:1] != (idx.size,):
            raise ShapeError(f"need one action per slot ({idx.size}), got actions of shape {actions.shape}")
        self._pending = idx
        if self.asynchronous:
            pipes = self._vec.parent_pipes
            for i, a in zip(idx, actions):
                pipes[i].send(("step", self._convert_action(a)))
        else:  # stepped at recv(): in-process there is nothing to overlap with
            self._sync_actions = actions

    def recv(self):
        """Waits for the slots of the last ``send``; returns ``(indices, obs, reward, terminated, truncated)``."""
        idx = self._pending
        if idx is None:
            raise RuntimeError("recv() called without a pending send()")
        self._pending = None
        n = idx.size
        obs = np.empty((n, *self.observation_shape), np.float32)
        rew = np.empty(n, np.float32)
        term = np.empty(n, bool)
        trunc = np.empty(n, bool)
        if self.asynchronous:
            pipes = self._vec.parent_pipes
            succ = []
            for j, i in enumerate(idx):
                res, ok = pipes[i].recv()
                succ.append(ok)
                if ok:
                    obs[j], rew[j], term[j], trunc[j] = res[0], res[1], res[2], res[3]
            self._raise(succ)
        else:
            envs = self._vec.envs
            for j, (i, a) in enumerate(zip(idx, self._sync_actions)):
                o, r, te, tr, _ = envs[i].step(self._convert_action(a))
                obs[j], rew[j], term[j], trunc[j] = o, r, te, tr
        return idx, obs, rew, term, trunc

    def close(self) -> None:
        """Closes the Gymnasium vector env (and its worker processes)."""
        if getattr(self, "_vec", None) is not None:
            self._vec.close()
            self._vec = None
