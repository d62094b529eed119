"""The pieces every family builds from: the Keras policy over flat members, the registered
algorithm with the run's params, and the descriptor layout of a MAP-Elites run.

They sit below both :mod:`tfevo.training.families` (which calls them from its hooks) and
:mod:`tfevo.training.builders` (which dispatches to the families), so neither imports the other
back.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import re
from typing import Any

from tfevo import registry
from tfevo.core import ConfigError, suggest_argument

__all__ = ["QDLayout", "qd_layout", "make_policy", "make_algorithm"]


@dataclasses.dataclass
class QDLayout:
    """The descriptors of a MAP-Elites run: names, archive ranges, the evaluator's columns,
    and the solutions' box (QD tasks; ``None`` over policy weights)."""

    names: tuple
    ranges: list
    columns: Any = None
    init_bounds: Any = None


def check_numbers(where: str, owner: str, fn, params: dict) -> None:
    """:class:`ConfigError` for a string or a boolean given for an argument of ``fn`` whose default is a
    number: ``--set`` leaves values that are no JSON as strings, and Python reads ``true`` as 1
    (``inf``/``nan`` spelled as words pass, for the callee's own check)."""
    defaults = {k: v.default for k, v in inspect.signature(fn).parameters.items()}
    for k, v in params.items():
        d = defaults.get(k)
        if isinstance(d, (int, float)) and not isinstance(d, bool) and (isinstance(v, bool) or (
                isinstance(v, str) and v.strip().lower().lstrip("+-") not in ("inf", "infinity", "nan"))):
            raise ConfigError(f"{where}.{k}: {owner} takes a number (default {d!r}), got {v!r}")


def _key_named(keys, error) -> str | None:
    """The first of ``keys`` an error message starts with (``"sigma must be > 0"`` names ``sigma``)."""
    return next((k for k in keys if re.match(rf"{re.escape(k)}\b", str(error))), None)


def make_env(env_id: str, num_envs: int, kwargs: dict):
    """``envs.make`` for a config: an error about an option names ``env.kwargs.<option>`` (the environment's
    own ConfigError, or a TypeError/ValueError of a value it could not read, e.g. ``int('abc')``)."""
    from tfevo import envs

    try:
        return envs.make(env_id, num_envs, **kwargs)
    except ConfigError as e:
        key = _key_named(kwargs, e)
        if key is not None:
            raise ConfigError(f"env.kwargs.{key}: {e}") from None
        if str(e).startswith(("unknown environment id", "unknown Atari game")):
            raise ConfigError(f"env.id: {e}") from None
        if kwargs and any(repr(k) in str(e) or repr(v) in str(e) for k, v in kwargs.items()):
            raise ConfigError(f"env.kwargs: {e}") from None  # an option (or its value) the environment refused
        raise
    except (TypeError, ValueError) as e:
        raise ConfigError(f"env.kwargs: {env_id} could not take {kwargs}: {e}") from None


def qd_layout(cfg) -> QDLayout:
    """Descriptors of a ``map_elites`` config: a QD task's two, or the named columns of the
    environment's behaviour descriptors (MuJoCo: ``x``, ``y``, ``contact:<foot geom>``)."""
    a = cfg.archive
    if cfg.problem is not None:
        name, dim = cfg.problem.name, cfg.problem.num_dims
        if name.endswith("_linproj"):
            from tfevo.qd.tasks import linproj_descriptor_bounds

            names, ranges, box = ("sum of x[:D/2]", "sum of x[D/2:]"), linproj_descriptor_bounds(dim), (-5.12, 5.12)
        else:
            names, ranges, box = ("x[0]", "x[1]"), [(0.0, 1.0), (0.0, 1.0)], (0.0, 1.0)
        if a is not None and a.ranges is not None:
            if len(a.ranges) != 2:
                raise ConfigError(f"archive.ranges has {len(a.ranges)} entries, {name} gives 2 descriptors")
            ranges = [tuple(r) for r in a.ranges]
        if a is not None and a.descriptors is not None:
            raise ConfigError(f"archive.descriptors names environment columns; {name} has fixed descriptors {names}")
        return QDLayout(names, list(ranges), None, tuple(cfg.problem.init_bounds or box))
    env = make_env(cfg.env.id, 1, cfg.env.kwargs)
    try:
        available = tuple(getattr(env, "descriptor_names", ()) or ())
    finally:
        if hasattr(env, "close"):
            env.close()
    if not available:
        raise ConfigError(f"map_elites needs behaviour descriptors; {cfg.env.id} provides none (MuJoCo locomotion "
                          "environments do), or use [problem] for a QD task")
    if a is None or a.descriptors is None:
        raise ConfigError(f"archive.descriptors: name the descriptor columns of {cfg.env.id}, from: "
                          + ", ".join(available))
    unknown = [n for n in a.descriptors if n not in available]
    if unknown:
        raise ConfigError(f"archive.descriptors: {cfg.env.id} has no descriptor {unknown[0]!r}; it has: "
                          + ", ".join(available))
    if a.ranges is not None:
        if len(a.ranges) != len(a.descriptors):
            raise ConfigError(f"archive.ranges has {len(a.ranges)} entries for {len(a.descriptors)} descriptors")
        ranges = [tuple(r) for r in a.ranges]
    elif all(n.startswith("contact:") for n in a.descriptors):
        ranges = [(0.0, 1.0)] * len(a.descriptors)  # fractions of steps in contact
    else:
        raise ConfigError(f"archive.ranges: give (low, high) for each of {list(a.descriptors)} (only contact "
                          "fractions default to [0, 1])")
    return QDLayout(tuple(a.descriptors), ranges, [available.index(n) for n in a.descriptors], None)


def _check_activation(name: str) -> None:
    """:class:`ConfigError` naming ``policy.activation`` when Keras does not know ``name``."""
    import keras

    try:
        keras.activations.get(name)
    except ValueError:
        known = sorted(n for n in dir(keras.activations) if not n.startswith("_") and n not in ("get", "serialize",
                                                                                                "deserialize"))
        close = suggest_argument(name, known)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ConfigError(f"policy.activation: unknown activation {name!r}{hint}; Keras activations: "
                          + ", ".join(known)) from None


def make_policy(cfg, obs_shape, action_spec):
    from tfevo import nn

    p = cfg.policy
    if p.params:
        raise ConfigError(f"policy.params.{next(iter(p.params))}: the {p.kind} policy takes no params (policy.params "
                          "is for neat, hyperneat and gp_tree)")
    if p.kind != "nature_dqn":
        _check_activation(p.activation)
    out = action_spec.policy_output_size
    if p.kind == "nature_dqn":
        if len(obs_shape) != 3:
            raise ConfigError(f"policy.kind 'nature_dqn' needs image observations, env gives shape {obs_shape}")
        template = nn.nature_dqn(out, input_shape=obs_shape)
    elif p.kind == "linear":
        template = nn.mlp(obs_shape, out, hidden=(), activation=p.activation)
    else:
        template = nn.mlp(obs_shape, out, hidden=tuple(p.hidden), activation=p.activation)
    model = nn.PopulationModel(template)
    policy = nn.Policy(model, action_spec, continuous=p.continuous, weight_dtype=p.weight_dtype)
    return policy, model


def check_population_fits(cfg, num_params: int) -> None:
    """:class:`ConfigError` before any work when one float32 population ``[popsize, D]`` alone is
    larger than the machine's physical memory (a mistyped popsize would otherwise fail much later,
    out of memory). Seed-GA decoding in chunks never holds the whole population."""
    if cfg.algorithm.name == "seed_ga" and cfg.evaluator.decode_chunk > 0:
        return
    try:
        ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # no sysconf (Windows): nothing to compare with
        return
    need = 4 * int(cfg.algorithm.popsize) * int(num_params)
    if need > ram:
        raise ConfigError(f"algorithm.popsize={cfg.algorithm.popsize}: one population of {cfg.algorithm.popsize} x "
                          f"{num_params} float32 parameters needs {need / 2**30:.1f} GiB, more than this machine's "
                          f"{ram / 2**30:.1f} GiB of memory; use a smaller popsize (or, for seed_ga, "
                          "evaluator.decode_chunk)")


def _all_arguments(cls) -> list[str]:
    return cls.accepted_arguments() if hasattr(cls, "accepted_arguments") else [
        k for k in inspect.signature(cls.__init__).parameters if k != "self"]


def strategy_class(name: str):
    """The registered algorithm ``name``; :class:`ConfigError` naming ``algorithm.name``, the closest
    registered name and all of them for an unknown one."""
    try:
        return registry.get("strategy", name)
    except ConfigError as e:
        raise ConfigError(f"algorithm.name: {str(e).replace('unknown strategy', 'unknown algorithm', 1)}") from None


def strategy_arguments(name: str) -> list[str]:
    """The ``algorithm.params`` keys of the registered strategy ``name`` (its constructor's
    arguments but those set outside params); :class:`ConfigError` for an unknown name."""
    return [a for a in _all_arguments(strategy_class(name)) if a not in ("num_dims", "popsize", "seed", "name")]


def make_algorithm(name: str, num_dims: int, popsize: int | None, seed: int, params: dict, init=None,
                   init_fn=None):
    """Builds the registered algorithm ``name`` with ``algorithm.params``.

    ``init`` (a start point ``[D]``) goes to ``init_params`` and ``init_fn``
    (a per-member initializer) to ``init_fn``, when the algorithm takes them
    and the params do not set them.  Unknown params raise :class:`ConfigError`
    naming the algorithm, what it accepts and the closest match.
    """
    cls = strategy_class(name)
    accepted = _all_arguments(cls)
    for k in params:
        if k in ("num_dims", "popsize", "seed"):
            raise ConfigError(f"algorithm.params.{k}: set it outside params (algorithm.popsize, run.seed)")
        if k not in accepted:
            close = suggest_argument(k, accepted)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(
                f"algorithm.params.{k}: {name} has no parameter {k!r}{hint}; {name} ({cls.__name__}) takes: "
                + ", ".join(strategy_arguments(name))
            )
    check_numbers("algorithm.params", name, cls, params)
    kwargs = dict(params)
    if "dtype" in accepted and "dtype" not in kwargs:
        kwargs["dtype"] = "float32"  # network weights are float32 (CMA-ES alone defaults to float64)
    if init_fn is not None and "init_fn" in accepted and "init_fn" not in kwargs and "init_params" not in kwargs:
        kwargs["init_fn"] = init_fn
    elif init is not None and "init_params" in accepted and "init_params" not in kwargs and "init_fn" not in kwargs:
        kwargs["init_params"] = init
    if popsize is not None:
        kwargs["popsize"] = popsize
    try:
        return cls(num_dims=num_dims, seed=seed, **kwargs)
    except ConfigError as e:  # the constructor's own check: say which config field it was about
        key = _key_named(params, e)
        if key is None and popsize is not None and re.search(r"\bpopsize\b", str(e)):
            raise ConfigError(f"algorithm.popsize: {name}: {e}") from None
        raise ConfigError(f"algorithm.params.{key}: {e}" if key else f"algorithm {name}: {e}") from None
    except (TypeError, ValueError) as e:  # a registered class that does not check its own arguments
        raise ConfigError(f"algorithm {name}: {e} (algorithm.params: {params})") from None


def _member_init_fn(model, name):
    """Per-member network initializer for algorithms that build their own population."""
    if name == "seed_ga":
        return lambda s: model.init_params(1, s)[0]
    return None
