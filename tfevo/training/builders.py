"""Turns a validated :class:`~tfevo.training.config.Config` into live objects.

``build(config)`` returns a :class:`Setup` with the environment, the policy
family, the algorithm and the evaluator, ready for :class:`Trainer`.  The
run's :class:`~tfevo.training.families.Family` builds the policy and the
algorithm over flat members ``[P, D]``; the evaluators (in-graph, pipelined,
a QD task) are shared by every family.  All checks that can fail (unknown env
id, unknown algorithm or argument, action space the policy cannot drive) run
here, before any training work.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import tensorflow as tf

from tfevo import registry
from tfevo.core import ConfigError
from tfevo.training.parts import (QDLayout, _member_init_fn, check_population_fits, make_algorithm,  # noqa: F401
                                  make_env, make_policy, qd_layout)

__all__ = ["Setup", "build", "check_evaluator_settings", "make_policy", "make_algorithm", "make_run_strategy", "qd_layout", "load_run",
           "write_picture"]


@dataclasses.dataclass
class Setup:
    config: Any
    env: Any
    policy: Any
    model: Any  # tfevo.nn.PopulationModel (flat-vector policies), else None
    algorithm: Any
    evaluator: Any
    trackables: dict
    strategy: Any = None  # tf.distribute.Strategy when config.distribute is on
    num_params: int = 0  # D, the size of one flat member
    parts: Any = None  # the family's training.families.Parts


class DescriptorColumns(tf.Module):
    """An evaluator returning ``(fitness, descriptors)``, keeping the descriptor ``columns``."""

    def __init__(self, inner, columns):
        super().__init__(name="descriptor_columns")
        self.inner = inner
        self.columns = [int(c) for c in columns]

    @property
    def last_stats(self) -> dict:
        return dict(getattr(self.inner, "last_stats", {}) or {})

    def evaluate(self, population):
        fitness, desc = self.inner.evaluate(population)
        return fitness, tf.gather(tf.convert_to_tensor(desc, tf.float32), self.columns, axis=1)

    def close(self):
        if hasattr(self.inner, "close"):
            self.inner.close()


class TaskEvaluator:
    """A registered QD task ``x [P, D] -> (fitness [P], descriptors [P, 2])``, compiled once."""

    def __init__(self, name: str, num_dims: int):
        fn = registry.get("problem", name)
        self.name = name
        self._fn = tf.function(fn, input_signature=[tf.TensorSpec([None, int(num_dims)], tf.float32)],
                               autograph=False)

    def evaluate(self, population):
        fitness, desc = self._fn(tf.convert_to_tensor(population, tf.float32))
        return fitness, desc


class EnvSpec(NamedTuple):
    """What a run needs to know of its environment before building the policy."""
    obs_shape: tuple
    obs_dtype: str  # NumPy dtype name of an observation
    action_spec: object
    in_graph: bool  # a TFEnv (the rollout runs inside one graph)


def env_spec(env_id: str, kwargs: dict) -> EnvSpec:
    """Probes an environment (one slot) for its observation shape and dtype and its action spec."""
    from tfevo import envs

    env = make_env(env_id, 1, kwargs)
    try:
        return EnvSpec(tuple(int(d) for d in env.observation_shape),
                       np.dtype(getattr(env, "observation_dtype", np.float32)).name,
                       env.action_spec, isinstance(env, envs.TFEnv))
    finally:
        if hasattr(env, "close"):
            env.close()


def num_subsets_of(cfg) -> int:
    """``evaluator.num_subsets`` with ``"auto"`` resolved: 2 (pipelined) when a GPU runs the
    inference, 1 (serial) on a CPU-only machine, where simulators and inference share the
    cores and the serial loop measured faster (benchmarks/results/pipeline.md)."""
    k = cfg.evaluator.num_subsets
    if k != "auto":
        return int(k)
    import tensorflow as tf

    return 2 if tf.config.list_physical_devices("GPU") else 1


def check_evaluator_settings(cfg, kind: str) -> None:
    """:class:`ConfigError` for an ``evaluator`` setting the run's evaluator would not read (like a policy
    setting the network does not read): it would otherwise be dropped without a word, e.g. ``obs_norm``
    on an in-graph task, whose rollout has no observation statistics."""
    from tfevo.training.config import EvaluatorConfig

    e, default = cfg.evaluator, EvaluatorConfig()
    where = f"evaluator.kind {kind!r}" + (f" (auto: {cfg.env.id} runs in-graph)" if e.kind == "auto" and
                                          kind == "ingraph" else "")
    unread = []
    if kind == "ingraph":
        unread += [(f, "a setting of the pipelined evaluator (host simulators)") for f in ("obs_norm", "num_envs", "num_subsets")
                   if getattr(e, f) != getattr(default, f)]
    elif e.jit_compile:
        unread.append(("jit_compile", "a setting of the in-graph rollout (XLA)"))
    if e.decode_chunk and cfg.algorithm.name != "seed_ga":
        raise ConfigError(f"evaluator.decode_chunk={e.decode_chunk}: decodes seed-list genomes (algorithm.name "
                          f"'seed_ga'); {cfg.algorithm.name} members are parameter vectors: leave it out")
    if unread:
        field, what = unread[0]
        raise ConfigError(f"evaluator.{field}={getattr(e, field)!r} is not read by {where}: it is {what}; "
                          + ("leave it out" if kind == "pipelined" else
                             "leave it out, or set evaluator.kind = 'pipelined' (Gymnasium's version of the task)"))


def make_run_strategy(cfg):
    """The run's ``tf.distribute.Strategy`` (``None`` unless ``distribute`` is on).

    Must run before any other TensorFlow op when it splits the CPU into
    logical devices (``distribute.devices`` on a machine without GPUs).
    """
    d = cfg.distribute
    if not d.enabled:
        return None
    from tfevo.distribute import make_strategy

    kind = "auto" if d.strategy == "none" else d.strategy
    return make_strategy(kind, devices=d.devices)


def _distributed_evaluator(cfg, strategy, policy, algorithm, kind, popsize, policy_obs_shape, trackables):
    """Population sharded over ``strategy``: per-member-seeded rollouts on every replica."""
    from tfevo import envs, rollout
    from tfevo.distribute import DistributedEvaluator, HostShards, ShardedRollout

    if kind == "ingraph":
        fn = ShardedRollout(envs.make(cfg.env.id, 1, **cfg.env.kwargs), policy, episodes=cfg.env.episodes,
                            max_steps=cfg.env.max_steps, report_frames=True)
    else:
        normalizer = make_obs_norm(cfg, tuple(policy_obs_shape))
        if normalizer is not None:
            trackables["obs_norm"] = normalizer
        replicas = strategy.num_replicas_in_sync
        num_envs = cfg.evaluator.num_envs or min(-(-popsize // replicas), 64)
        num_subsets = min(num_subsets_of(cfg), num_envs)

        def make_evaluator():
            return rollout.PipelinedEvaluator(
                cfg.env.id, policy, num_envs=num_envs, num_subsets=num_subsets, episodes=cfg.env.episodes,
                max_steps=cfg.env.max_steps, seed=cfg.run.seed + 1, env_kwargs=cfg.env.kwargs,
                obs_norm=normalizer, update_obs_norm=False)

        # one set of observation statistics, updated from every replica's members in member order
        fn = HostShards(make_evaluator, episodes=cfg.env.episodes, report_frames=True, obs_norm=normalizer)
    decode = algorithm.decode if hasattr(algorithm, "decode") else None
    jit = bool(cfg.evaluator.jit_compile) and kind == "ingraph"
    return DistributedEvaluator(strategy, fn, decode_fn=decode, seed=cfg.run.seed + 1, jit_compile=jit)


def build(cfg) -> Setup:
    from tfevo import envs, rollout
    from tfevo.training.families import family_of

    seed = cfg.run.seed
    strategy = make_run_strategy(cfg)  # first: it may split the CPU before TensorFlow starts
    family = family_of(cfg)
    if cfg.problem is not None:  # a QD task: members are the solutions themselves
        parts = family.policy(cfg, None, None)
        check_population_fits(cfg, parts.num_params)
        algorithm = family.algorithm(cfg, parts)
        evaluator = TaskEvaluator(cfg.problem.name, parts.num_params)
        return Setup(cfg, None, None, None, algorithm, evaluator, {}, num_params=parts.num_params, parts=parts)
    obs_shape, _, action_spec, in_graph = env_spec(cfg.env.id, cfg.env.kwargs)
    if action_spec.discrete and cfg.policy.continuous != type(cfg.policy).model_fields["continuous"].default:
        raise ConfigError(f"policy.continuous={cfg.policy.continuous!r} is not used: {cfg.env.id} has discrete "
                          "actions (the argmax of the outputs); leave policy.continuous out")
    parts = family.policy(cfg, obs_shape, action_spec)
    check_population_fits(cfg, parts.num_params)
    policy, model = parts.policy, parts.model
    kind = cfg.evaluator.kind
    if kind == "auto":
        kind = "ingraph" if in_graph else "pipelined"
    if kind == "ingraph" and not in_graph:
        raise ConfigError(
            f"evaluator.kind 'ingraph' needs an in-graph TensorFlow env; {cfg.env.id} runs on the host: use 'pipelined'"
        )
    check_evaluator_settings(cfg, kind)
    qd = family.name == "map_elites"
    if qd and kind == "ingraph":
        raise ConfigError(f"map_elites over policies needs behaviour descriptors from a host simulator "
                          f"(evaluator.kind 'pipelined', e.g. MuJoCo); {cfg.env.id} runs in-graph")
    popsize = cfg.algorithm.popsize
    algorithm = family.algorithm(cfg, parts)
    check = getattr(algorithm, "check_generations", None)  # SeedGA: its genomes hold max_generations tells
    if callable(check) and cfg.run.generations is not None:
        try:
            check(cfg.run.generations, field="run.generations")
        except ConfigError as e:
            raise ConfigError(f"algorithm.params.max_generations: {e}") from None
    trackables = {}
    if strategy is not None:
        evaluator = _distributed_evaluator(cfg, strategy, policy, algorithm, kind, popsize, obs_shape, trackables)
        return Setup(cfg, None, policy, model, algorithm, evaluator, trackables, strategy, parts.num_params, parts)
    if kind == "ingraph":
        env = envs.make(cfg.env.id, popsize * cfg.env.episodes, **cfg.env.kwargs)
        evaluator = rollout.InGraphEvaluator(
            env, policy, episodes=cfg.env.episodes, max_steps=cfg.env.max_steps, seed=seed + 1,
            jit_compile=family.ingraph_jit if not cfg.evaluator.jit_compile else True,
        )
    else:
        # Vector observations (MuJoCo, classic control on Gymnasium): one slot per member up to 256
        # amortizes the per-step inference call; image observations: at most 64 emulators.
        num_envs = cfg.evaluator.num_envs or min(popsize, 64 if len(obs_shape) >= 3 else 256)
        normalizer = make_obs_norm(cfg, obs_shape)
        if normalizer is not None:
            trackables["obs_norm"] = normalizer
        evaluator = rollout.PipelinedEvaluator(
            cfg.env.id, policy, num_envs=num_envs, num_subsets=min(num_subsets_of(cfg), num_envs),
            episodes=cfg.env.episodes, max_steps=cfg.env.max_steps, seed=seed + 1,
            obs_norm=normalizer, env_kwargs=cfg.env.kwargs, descriptors=qd,
        )
        if qd:
            evaluator = DescriptorColumns(evaluator, qd_layout(cfg).columns)
        env = None
    if hasattr(algorithm, "decode"):  # compact genomes (seed GA): decode chunk by chunk
        inner = evaluator
        evaluator = rollout.GenomeEvaluator(inner, algorithm.decode,
                                            chunk_size=cfg.evaluator.decode_chunk or None)
        trackables["inner_evaluator"] = inner
    return Setup(cfg, env, policy, model, algorithm, evaluator, trackables, num_params=parts.num_params, parts=parts)


def _saved_config(run_dir):
    import json

    from tfevo.training import config as C

    saved = Path(run_dir) / "config.json"
    if not saved.exists():
        raise ConfigError(f"{run_dir} is not a tfevo run directory (no config.json)")
    return C.parse_config(json.loads(saved.read_text()), str(saved))


def load_run(run_dir, cfg=None):
    """``(config, parts, algorithm)`` of a run directory, the algorithm restored from its
    latest checkpoint (what ``tfevo plot`` draws the family's picture from)."""
    from tfevo.training.families import family_of

    cfg = cfg or _saved_config(run_dir)
    family = family_of(cfg)
    if cfg.problem is not None:
        parts = family.policy(cfg, None, None)
    else:
        obs_shape, _, action_spec, _ = env_spec(cfg.env.id, cfg.env.kwargs)
        parts = family.policy(cfg, obs_shape, action_spec)
    algorithm = family.algorithm(cfg, parts)
    path = tf.train.latest_checkpoint(str(run_dir) + "/checkpoints")
    if path is None:
        raise ConfigError(f"{run_dir}: no checkpoint found")
    tf.train.Checkpoint(algorithm=algorithm).restore(path).expect_partial()
    return cfg, parts, algorithm


def write_picture(run_dir, setup: Setup | None = None):
    """The family's own picture of a run (NEAT network, GP formula, archive heatmap), or ``None``
    for flat-vector strategies, whose learning curve is their picture.  ``setup``: the run's
    live objects (right after training), else they are rebuilt and restored from the run."""
    from tfevo.training.families import Family, family_of

    cfg = setup.config if setup is not None else _saved_config(run_dir)
    family = family_of(cfg)
    if type(family).picture is Family.picture:
        return None
    if setup is not None:
        parts, algorithm = setup.parts, setup.algorithm
    else:
        cfg, parts, algorithm = load_run(run_dir, cfg)
    best = tf.convert_to_tensor(best_params(run_dir, cfg), tf.float32)
    return family.picture(cfg, parts, algorithm, best, Path(run_dir))


def make_obs_norm(cfg, obs_shape, run_dir=None):
    """The run's observation normalizer (``None`` unless ``evaluator.obs_norm``).

    With ``run_dir``, its statistics are restored from the latest checkpoint.
    """
    import tensorflow as tf

    from tfevo import rollout

    if not cfg.evaluator.obs_norm:
        return None
    normalizer = rollout.ObservationNormalizer(obs_shape, clip=10.0)
    if run_dir is not None:
        path = tf.train.latest_checkpoint(str(run_dir) + "/checkpoints")
        if path is not None:
            tf.train.Checkpoint(obs_norm=normalizer).restore(path).expect_partial()
    return normalizer


def make_eval_evaluator(cfg, episodes: int, seed: int, run_dir=None):
    """An evaluator for scoring one member over ``episodes`` episodes (``tfevo eval``).

    In-graph envs: an ``InGraphEvaluator`` of ``episodes`` episodes per member
    (``evaluate_episodes`` gives each return).  Host envs: a
    ``PipelinedEvaluator`` of one episode per member, to be given ``episodes``
    copies of the member (each fitness is then one episode's return).
    Observation statistics saved with the run are restored and frozen.
    """
    from tfevo import rollout
    from tfevo.training.families import family_of

    obs_shape, _, action_spec, in_graph = env_spec(cfg.env.id, cfg.env.kwargs)
    parts = family_of(cfg).policy(cfg, obs_shape, action_spec)
    policy, model = parts.policy, parts.model
    if in_graph:
        from tfevo import envs

        env = envs.make(cfg.env.id, episodes, **cfg.env.kwargs)
        # one member: compiling the rollout with XLA would cost more than it saves
        return rollout.InGraphEvaluator(env, policy, episodes=episodes, max_steps=cfg.env.max_steps, seed=seed,
                                        jit_compile=False), model
    normalizer = make_obs_norm(cfg, obs_shape, run_dir)
    ev = rollout.PipelinedEvaluator(cfg.env.id, policy, num_envs=min(episodes, 16), num_subsets=1,
                                    episodes=1, max_steps=cfg.env.max_steps, seed=seed,
                                    obs_norm=normalizer, update_obs_norm=False, env_kwargs=cfg.env.kwargs)
    return ev, model


def best_params(run_dir, cfg=None) -> np.ndarray:
    """The best individual's parameters ``[D]`` from a run directory's latest checkpoint.

    Seed-list genomes (``seed_ga``) are rebuilt from their seeds.
    """
    import tensorflow as tf

    path = tf.train.latest_checkpoint(str(run_dir) + "/checkpoints")
    if path is None:
        raise ConfigError(f"{run_dir}: no checkpoint found")
    reader = tf.train.load_checkpoint(path)
    keys = [k for k in reader.get_variable_to_shape_map() if k.startswith("trainer/best/")]
    if not keys:
        raise ConfigError(f"{run_dir}: checkpoint has no best individual yet")
    best = reader.get_tensor(sorted(keys)[0])
    if best.dtype.kind in "iu" and cfg is not None:  # a genome: decode it
        obs_shape, _, action_spec, _ = env_spec(cfg.env.id, cfg.env.kwargs)
        _, model = make_policy(cfg, obs_shape, action_spec)
        algo = make_algorithm(cfg.algorithm.name, model.num_params, cfg.algorithm.popsize, cfg.run.seed,
                              cfg.algorithm.params, init_fn=_member_init_fn(model, cfg.algorithm.name))
        best = algo._rebuild(tf.constant(best)).numpy()
    return best
