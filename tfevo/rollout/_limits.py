"""Episode length: how an evaluator's ``max_steps`` and an environment's own time limit combine.

The rule (Gymnasium's ``gym.make(id, max_episode_steps=N)`` is the reference):

* ``max_steps=N`` is the episode's time limit in *agent steps*: an episode ends at its
  first termination or after exactly ``N`` steps (truncation), whether ``N`` is below
  or above the limit the environment is registered with.  It *replaces* that default
  limit, as ``gym.make(id, max_episode_steps=N)`` replaces the registered ``TimeLimit``.
* A limit the user set explicitly on the environment (``make(id, max_episode_steps=L)``,
  ``env_kwargs={"max_episode_steps": L}``, Atari's ``max_num_frames_per_episode=F``,
  or the limit of an environment built by the user's own ``env_fn``) is kept.  ``N``
  below it ends episodes at ``N``; ``N`` above it cannot be honoured and is a
  :class:`~tfevo.core.ConfigError` naming both values -- never a silently shorter episode.
* Atari limits are emulator *frames*: ``max_num_frames_per_episode=F`` truncates at the
  first agent step that reaches ``F`` frames, after ``ceil(F / frameskip)`` steps (the
  no-op steps of the "fast" seed mode are agent steps and count; the no-op frames the
  "exact" mode plays at reset do not).  With ``max_steps=N`` and no explicit frame limit,
  the frame limit is raised where needed to ``(N + noop_max) * frameskip`` so that the
  ``N`` steps fit.
* ``max_steps=None`` uses the environment's own limit.  An environment without one
  (``max_episode_steps=0``, a Gymnasium id registered without ``TimeLimit``,
  ``max_num_frames_per_episode=0``) is a :class:`~tfevo.core.ConfigError` asking for
  ``max_steps``; episodes never run unbounded.
"""

from __future__ import annotations

import copy

from tfevo.core import ConfigError, check_int

__all__ = ["check_max_steps", "ingraph_limit", "host_limit_kwargs", "host_limit"]


def check_max_steps(max_steps):
    """``max_steps`` as an int >= 1, or None; anything else is a ConfigError naming it."""
    return None if max_steps is None else check_int(max_steps, "max_steps", 1, integral_float=True)


def limit_too_short(max_steps: int, cause: str, fix: str, most: int) -> ConfigError:
    """The error for a ``max_steps`` that a limit the user set (``cause``) would cut short at ``most``
    agent steps; ``fix`` says how to lift that limit."""
    return ConfigError(f"max_steps={max_steps} cannot be honoured: {cause}; {fix}, or pass max_steps <= {most}")


def _explicit_limit(env) -> bool:
    """Whether an in-graph env's ``max_episode_steps`` was set on the instance (not the class default)."""
    return "max_episode_steps" in getattr(env, "__dict__", {})


def ingraph_limit(env, max_steps):
    """``(env, limit)`` for an in-graph rollout of ``env`` (a TFEnv) capped at ``max_steps``.

    With ``max_steps`` above or below the env's *default* limit, returns a shallow copy of
    ``env`` whose ``max_episode_steps`` is ``max_steps`` (so its ``truncated`` flag is set at
    that step, as Gymnasium's ``TimeLimit`` would); the caller's env is not changed.  A limit
    set on the instance is kept and ``max_steps`` above it raises ConfigError.
    """
    max_steps = check_max_steps(max_steps)
    own = int(getattr(env, "max_episode_steps", 0) or 0)
    if max_steps is None:
        if own < 1:
            raise ConfigError(
                f"max_steps=None asks for the environment's own episode limit, but {env.env_id} has none "
                f"(max_episode_steps={own}); pass max_steps >= 1")
        return env, own
    if own == max_steps:
        return env, max_steps
    if _explicit_limit(env) and own > 0:
        if max_steps > own:
            raise limit_too_short(
                max_steps, f"the {env.env_id} env was made with max_episode_steps={own}, which truncates every "
                f"episode at step {own}", f"make the env with max_episode_steps >= {max_steps} (or without it)", own)
        return env, max_steps
    if _explicit_limit(env):  # explicitly unlimited (0): the evaluator's cap is the only limit
        return env, max_steps
    env = copy.copy(env)
    env.max_episode_steps = max_steps
    return env, max_steps


def _is_atari(env_id: str) -> bool:
    return env_id.startswith("ALE/")


def host_limit_kwargs(env_id: str, max_steps: int | None, kwargs: dict) -> dict:
    """The keyword arguments to make the host env ``env_id`` with, so that it lets episodes run
    ``max_steps`` agent steps (see the module docstring); ``kwargs`` are the user's."""
    kwargs = dict(kwargs)
    if max_steps is None:
        if not _is_atari(env_id) and kwargs.get("max_episode_steps") == 0:
            raise ConfigError(
                f"max_steps=None asks for the environment's own episode limit, but env kwargs "
                f"max_episode_steps=0 gives {env_id} none; pass max_steps >= 1")
        return kwargs
    if _is_atari(env_id):
        from tfevo.envs.atari import PRESETS

        preset = PRESETS.get(kwargs.get("preset", "deep_neuroevolution"), {})
        skip, noops = (kwargs.get(k, preset.get(k, d)) for k, d in (("frameskip", 1), ("noop_max", 0)))
        if not (isinstance(skip, int) and isinstance(noops, int) and skip >= 1 and noops >= 0):
            return kwargs  # bad values are AtariEnv's to refuse
        need = (max_steps + noops) * skip
        frames = kwargs.get("max_num_frames_per_episode")
        if frames is not None:
            most = -(-frames // skip) if isinstance(frames, int) else 0  # ALE truncates at the first step
            if 0 < most < max_steps:                                    # that reaches the frame limit
                raise limit_too_short(
                    max_steps, f"env kwargs max_num_frames_per_episode={frames} emulator frames end every episode "
                    f"after at most {most} agent steps (frameskip={skip})",
                    f"raise max_num_frames_per_episode to at least {need} or drop it", most)
            return kwargs
        if "max_num_frames_per_episode" in preset and int(preset["max_num_frames_per_episode"]) < need:
            kwargs["max_num_frames_per_episode"] = need
        return kwargs
    if kwargs.get("max_episode_steps") is not None:
        own = kwargs["max_episode_steps"]
        if isinstance(own, int) and 0 < own < max_steps:  # (a bad value is the env's to refuse)
            raise limit_too_short(
                max_steps, f"env kwargs max_episode_steps={own} truncates every episode at step {own}",
                f"raise max_episode_steps to >= {max_steps} or drop it", own)
        if own != 0:  # 0 (no limit of its own): max_steps is the only limit
            return kwargs
    kwargs["max_episode_steps"] = max_steps
    return kwargs


def host_limit(env) -> int | None:
    """The agent-step limit of a built host env, 0 if it has none, None if it does not say."""
    if _is_atari(getattr(env, "env_id", "") or "") and hasattr(env, "config"):
        frames = int(env.config.get("max_num_frames_per_episode", 0))
        return -(-frames // max(int(getattr(env, "frames_per_step", 1)), 1)) if frames > 0 else 0
    own = getattr(env, "max_episode_steps", None)
    return None if own is None else int(own)
