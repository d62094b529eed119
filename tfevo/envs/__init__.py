"""Batched environments behind one entry point, :func:`make`.

* In-graph TensorFlow control tasks (CartPole-v1, Acrobot-v1, MountainCar-v0,
  MountainCarContinuous-v0, Pendulum-v1) -> :class:`~tfevo.envs.base.TFEnv`.
* ``ALE/<Game>-v5`` -> ale-py's native threaded vector env.
* MuJoCo locomotion ``-v5`` ids -> batched MuJoCo stepped in native threads.
* Any other Gymnasium id -> Gymnasium's own vector env (fallback).
"""

from __future__ import annotations

from tfevo._lazy import import_parts
from tfevo.core import ConfigError, close_names
from tfevo.envs.base import ActionSpec, HostVectorEnv, StepResult, TFEnv

_MODULES = ("classic", "mujoco", "atari", "gym")
__all__ = ["make", "ActionSpec", "HostVectorEnv", "StepResult", "TFEnv", "list_envs"]
__all__ += import_parts(__name__, _MODULES, globals())


def list_envs() -> dict[str, str]:
    from tfevo import registry

    return registry.names("env")


def gymnasium_twin(env_id: str, kwargs: dict) -> tuple[dict, dict]:
    """``(make_kwargs, reset_options)`` that make Gymnasium's ``env_id`` the task tfevo builds from
    ``make(env_id, **kwargs)``: ``gym.make(env_id, **make_kwargs)`` reset with
    ``options=reset_options``.

    An in-graph control task maps each option it shares with Gymnasium (``sutton_barto_reward``,
    ``g``, ``goal_velocity``; the reset bounds become reset options) and has no other option that
    changes the task; the MuJoCo engine's options (threads, backend, reset stream) do not change the
    task either; any other id's kwargs are ``gym.make`` keywords already.  A positive
    ``max_episode_steps`` is kept (0, tfevo's "no limit", has no ``gym.make`` spelling).
    """
    from tfevo import registry

    kwargs = dict(kwargs)
    limit = kwargs.pop("max_episode_steps", None)
    limit = {"max_episode_steps": limit} if limit else {}
    if env_id in registry.names("env"):
        options = getattr(registry.get("env", env_id), "gymnasium_options", {})
        make_kwargs, reset_options = dict(limit), {}
        for key, value in kwargs.items():
            if key in options:
                where, name = options[key]
                (make_kwargs if where == "make" else reset_options)[name] = value
        return make_kwargs, reset_options
    if env_id.startswith("ALE/"):
        raise ConfigError(f"{env_id}: an Atari task is tfevo's own preprocessing over ALE; it has no "
                          "single Gymnasium twin")
    return {**{k: v for k, v in kwargs.items() if k not in ("asynchronous", "env_fn")}, **limit}, {}


def make(env_id: str, num_envs: int = 1, **kwargs):
    """Creates a batched environment of ``num_envs`` copies of ``env_id``.

    Registered ids (in-graph control tasks, MuJoCo) come first; ``ALE/...`` ids
    go to ale-py; any other id that Gymnasium knows is wrapped with Gymnasium's
    own vector environment.  An unknown id raises :class:`ConfigError`.
    """
    from tfevo import registry

    if not isinstance(env_id, str) or not env_id:
        raise ConfigError(f"env id must be a non-empty string, got {env_id!r}")
    if int(num_envs) < 1:
        raise ConfigError(f"num_envs must be >= 1, got {num_envs}")
    known = registry.names("env")
    if env_id in known:
        return registry.get("env", env_id)(num_envs=int(num_envs), **kwargs)
    if env_id.startswith("ALE/"):
        from tfevo.envs import atari

        return atari.make_atari(env_id, num_envs=int(num_envs), **kwargs)
    try:
        import gymnasium as gym

        gym_ids = tuple(gym.registry)
    except ImportError:  # pragma: no cover
        gym_ids = ()
    gym_known = env_id in gym_ids
    if gym_known:
        from tfevo.envs import gym as gym_env

        return gym_env.GymVectorEnv(env_id, num_envs=int(num_envs), **kwargs)
    close = close_names(env_id, [*known, *gym_ids])
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise ConfigError(
        f"unknown environment id {env_id!r}{hint}; tfevo knows {', '.join(sorted(known)) or '(none)'}, "
        "'ALE/<Game>-v5' Atari ids, and any id registered with Gymnasium"
    )
