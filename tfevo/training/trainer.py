"""The generation loop: ask -> evaluate -> tell, with logging and checkpoints.

:class:`Trainer` only loops, logs and checkpoints; the algorithm and the
evaluator do the work.  Everything that decides what happens next is saved in
one ``tf.train.Checkpoint`` after each generation (or every
``checkpoint_every`` generations):

* the algorithm (``tf.Module``: its variables, including its seed stream),
* the evaluator, if it is trackable (its seed stream, observation statistics),
* the best individual seen so far and its fitness,
* counters: generation, environment frames, evaluations, wall time.

Re-running with the same ``run_dir`` resumes; because every random number
comes from a checkpointed counter-based stream, the resumed run continues
exactly as the uninterrupted one would have (:mod:`tfevo.training.checkpoints`:
what a kill leaves behind is cleaned up; under ``MultiWorkerMirroredStrategy``
every worker restores the chief's checkpoint).

Logs: one JSON line per generation in ``run_dir/progress.jsonl`` and
TensorBoard scalars in ``run_dir/tensorboard``; progress on stdout
(:mod:`tfevo.training.progress`).  The time TensorFlow spends building graphs
(``tf.function`` tracing, read from TensorFlow's own graph-building counter)
is reported as ``compile_seconds`` and left out of ``generation_seconds`` and
frames/s.
"""

from __future__ import annotations

import math
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import tensorflow as tf

from tfevo._tf_private import in_multi_worker_mode, is_trackable
from tfevo.core import ConfigError, TfevoError, check_int
from tfevo.training.checkpoints import CheckpointMixin, run_signature
from tfevo.training.progress import GenerationLog, ProgressMixin, _bar_fits, _isatty

__all__ = ["Trainer", "GenerationLog", "FitnessError"]


class FitnessError(TfevoError):
    """The evaluator returned something that is not a fitness vector."""


def frames_of(evaluator, default: int) -> int:
    """Environment frames an evaluator reports for its last call.

    Reads ``last_frames`` or ``last_stats["frames"]``; ``default`` otherwise.
    """
    frames = getattr(evaluator, "last_frames", None)
    if frames is None:
        stats = getattr(evaluator, "last_stats", None)
        if isinstance(stats, dict):
            frames = stats.get("frames")
    return int(frames) if frames is not None else int(default)


def _graph_building_seconds() -> float:
    """Seconds TensorFlow has spent building tf.function graphs in this process (0.0 if unavailable).

    Reads the counter TensorFlow keeps for its own monitoring
    (``/tensorflow/core/tf_function/graph_building_time_usecs``).
    """
    from tfevo._tf_private import graph_building_seconds

    return graph_building_seconds()


def _check_budget(name: str, value, integer: bool):
    """A budget is None or a finite number > 0 (an integer for generations and frames)."""
    if value is None:
        return None
    ok = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))
    if ok and integer:
        ok = float(value) == int(value)
    if not ok or not math.isfinite(float(value)) or float(value) <= 0:
        kind = "an integer" if integer else "a finite number of seconds"
        raise ConfigError(f"{name} budget must be {kind} > 0, got {value!r}")
    return int(value) if integer else float(value)


def _distribute(strategy, algorithm, evaluator, seconds):
    """(evaluator sharded over ``strategy``, whether the strategy spans several workers)."""
    from tfevo.distribute import DistributedEvaluator

    if not isinstance(strategy, tf.distribute.Strategy):
        raise ConfigError(f"strategy must be a tf.distribute.Strategy, got {type(strategy).__name__}")
    if isinstance(evaluator, DistributedEvaluator):
        if evaluator.strategy is not strategy:
            raise ConfigError("the DistributedEvaluator was built for a different strategy than Trainer(strategy=)")
    elif hasattr(evaluator, "evaluate") or not callable(evaluator):
        raise ConfigError(
            f"with strategy=, pass a per-shard evaluate_fn(shard, indices, seeds) (ShardedRollout, HostShards) "
            f"or a DistributedEvaluator, not a whole-population {type(evaluator).__name__}")
    else:
        decode = getattr(algorithm, "decode", None)
        evaluator = DistributedEvaluator(strategy, evaluator, decode_fn=decode if callable(decode) else None)
    multi_worker = in_multi_worker_mode(strategy)
    if multi_worker and seconds is not None:
        raise ConfigError("a seconds budget is not allowed with a multi-worker strategy (workers would stop "
                          "at different generations and wait forever); use generations or frames")
    return evaluator, multi_worker


class Trainer(CheckpointMixin, ProgressMixin, tf.Module):
    """Runs ``algorithm`` with ``evaluator`` for a budget.

    Args:
      algorithm: anything with ``ask()`` and ``tell(population, fitness)``
        (a :class:`tfevo.core.Algorithm`, NEAT, GP, MAP-Elites).
      evaluator: a callable ``population -> fitness`` or an object with
        ``evaluate(population)``; it may return ``fitness`` or a tuple whose
        first item is fitness (the rest is passed to ``tell`` when the
        algorithm accepts it, e.g. descriptors for MAP-Elites).  If it has an
        attribute ``last_frames`` (int), frames are counted from it, otherwise
        one evaluation counts as one frame.
      run_dir: where checkpoints and logs go (``None``: nothing is written).
      generations / frames / seconds: budget; the run stops when any is reached.
      checkpoint_every: generations between checkpoints (>= 1).
      keep_checkpoints: how many of the newest checkpoints stay on disk (older
        ones are deleted); ``None`` keeps them all.
      progress: show progress: a tqdm bar when stdout is a terminal, plain
        lines on stdout otherwise.
      progress_every: with plain lines, at most one line every this many
        seconds (the first and the last generation always get one).
      callbacks: functions called with each :class:`GenerationLog`.
      extra_trackables: more objects to checkpoint (e.g. an observation normalizer).
      strategy: optional ``tf.distribute.Strategy`` (see
        :mod:`tfevo.distribute`): the population is then sharded over its
        replicas.  ``evaluator`` is either a
        :class:`~tfevo.distribute.DistributedEvaluator` over this strategy,
        or a per-shard ``evaluate_fn(shard, indices, seeds)`` such as
        :class:`~tfevo.distribute.ShardedRollout` or
        :class:`~tfevo.distribute.HostShards`, which the Trainer wraps in a
        ``DistributedEvaluator`` (seed 0; ``decode_fn=algorithm.decode`` for
        compact genomes such as ``SeedGA``).  Under
        ``MultiWorkerMirroredStrategy`` every worker runs the same loop; only
        the chief writes ``run_dir`` (on the others ``run_dir`` is ``None``
        and nothing is written), every worker resumes from the chief's
        latest checkpoint (sent over the collectives, so no shared file
        system is needed), and a ``seconds`` budget is refused (workers
        would stop at different generations).

    The best individual (:meth:`best_individual`, ``best_fitness``, logged as
    ``best_ever``, checkpointed, and what ``tfevo eval``/``export`` use) is the
    member with the highest single fitness seen, unless the algorithm has a
    ``reported_best()`` returning ``(member, fitness)``: then that is recorded
    after every ``tell`` (the Deep GA, ``GaussianGA`` and ``SeedGA``: its
    elite with the mean over all its evaluations, which can go down as the
    elite is re-evaluated).

    Example:

    >>> import tensorflow as tf
    >>> from tfevo.strategies import OpenES
    >>> es = OpenES(num_dims=5, popsize=16, seed=0)
    >>> trainer = Trainer(es, lambda x: -tf.reduce_sum(x ** 2, axis=1), run_dir="runs/demo",
    ...                   generations=3, progress=False)
    >>> history = trainer.run()
    >>> len(history), history[-1].generation
    (3, 3)
    """

    def __init__(
        self,
        algorithm,
        evaluator,
        run_dir: str | os.PathLike | None = None,
        generations: int | None = None,
        frames: int | None = None,
        seconds: float | None = None,
        checkpoint_every: int = 1,
        keep_checkpoints: int | None = 3,
        progress: bool = True,
        progress_every: float = 10.0,
        callbacks: list[Callable[[GenerationLog], Any]] | None = None,
        extra_trackables: dict | None = None,
        verbose: bool = True,
        strategy: tf.distribute.Strategy | None = None,
    ):
        super().__init__(name="trainer")
        if generations is None and frames is None and seconds is None:
            raise ConfigError("give the Trainer a budget: generations, frames or seconds")
        generations = _check_budget("generations", generations, integer=True)
        frames = _check_budget("frames", frames, integer=True)
        seconds = _check_budget("seconds", seconds, integer=False)
        if not (isinstance(progress_every, (int, float)) and math.isfinite(progress_every) and progress_every >= 0):
            raise ConfigError(f"progress_every must be a number of seconds >= 0, got {progress_every!r}")
        checkpoint_every = check_int(checkpoint_every, "checkpoint_every", 1)
        # None keeps every checkpoint, as tf.train.CheckpointManager(max_to_keep=None)
        keep_checkpoints = None if keep_checkpoints is None else check_int(keep_checkpoints, "keep_checkpoints", 1)
        if not (hasattr(algorithm, "ask") and hasattr(algorithm, "tell")):
            raise ConfigError(f"algorithm {type(algorithm).__name__} has no ask()/tell()")
        if not (callable(evaluator) or hasattr(evaluator, "evaluate")):
            raise ConfigError(f"evaluator {type(evaluator).__name__} is neither callable nor has evaluate()")
        self.multi_worker, self.is_chief = False, True
        if strategy is not None:
            evaluator, self.multi_worker = _distribute(strategy, algorithm, evaluator, seconds)
            self.is_chief = bool(strategy.extended.should_checkpoint)
            if not self.is_chief:  # only the chief writes: logs, TensorBoard, checkpoints
                run_dir, progress = None, False
        self.strategy = strategy
        self._algorithm = algorithm
        self._evaluator = evaluator
        self.run_dir = Path(run_dir) if run_dir is not None else None
        self.budget_generations = generations
        self.budget_frames = frames
        self.budget_seconds = seconds
        self.checkpoint_every = int(checkpoint_every)
        self.progress = progress
        self.progress_every = float(progress_every)
        self.verbose = verbose
        self.callbacks = list(callbacks or [])

        # the algorithm's class, popsize, dimension and seed: a resume with other ones is refused
        self.signature = tf.Variable(run_signature(algorithm), dtype=tf.string, trainable=False, name="signature")

        self.generation = tf.Variable(0, dtype=tf.int64, trainable=False, name="generation")
        self.frames = tf.Variable(0, dtype=tf.int64, trainable=False, name="frames")
        self.evaluations = tf.Variable(0, dtype=tf.int64, trainable=False, name="evaluations")
        self.wall_time = tf.Variable(0.0, dtype=tf.float64, trainable=False, name="wall_time")
        self.best_fitness = tf.Variable(-np.inf, dtype=tf.float32, trainable=False, name="best_fitness")
        self.best = None  # created on the first generation (structure of one member)

        objects = {"trainer": self, "algorithm": algorithm}
        if is_trackable(evaluator):
            objects["evaluator"] = evaluator
        elif hasattr(evaluator, "__dict__"):
            # Plain-Python evaluators: checkpoint their variables/modules (seed
            # counters, observation statistics) through a container.
            state = {k.lstrip("_") or k: v for k, v in vars(evaluator).items()
                     if isinstance(v, (tf.Variable, tf.Module))}
            if state:
                objects["evaluator"] = tf.train.Checkpoint(**state)
        for k, v in (extra_trackables or {}).items():
            objects[k] = v
        self._checkpoint = tf.train.Checkpoint(**objects)
        # checked equal on every worker of a multi-worker run (with the counters; not the wall time)
        object.__setattr__(self, "_state_sources", [o for k, o in objects.items() if k != "trainer"])
        self._manager = None
        self._writer = None
        self.history: list[GenerationLog] = []
        self.restored_from: str | None = None
        self._scratch = None
        if self.run_dir is not None:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            self._manager = tf.train.CheckpointManager(
                self._checkpoint, str(self.run_dir / "checkpoints"), max_to_keep=keep_checkpoints
            )
        if self.run_dir is not None or self.multi_worker:  # every worker restores what the chief has
            self._restore()
        check = getattr(algorithm, "check_generations", None)  # SeedGA: genomes hold max_generations tells
        if callable(check) and generations is not None:
            check(generations, done=int(self.generation.numpy()))

    # -- evaluation ---------------------------------------------------------
    def _evaluate(self, population):
        ev = self._evaluator
        out = ev.evaluate(population) if hasattr(ev, "evaluate") else ev(population)
        extras = ()
        if isinstance(out, (tuple, list)):
            out, extras = out[0], tuple(out[1:])
        fitness = tf.convert_to_tensor(out)
        if fitness.dtype.is_floating:
            # float32, or the algorithm's own fitness type (NEAT's fitness_dtype, float64 by default)
            fitness = tf.cast(fitness, getattr(self._algorithm, "fitness_dtype", tf.float32))
        else:
            raise FitnessError(f"evaluator returned fitness of dtype {fitness.dtype.name}; expected float32 [P]")
        if fitness.shape.rank != 1:
            raise FitnessError(f"evaluator returned fitness of shape {fitness.shape.as_list()}; expected [P]")
        return fitness, extras, frames_of(ev, fitness.shape[0])

    def _track_best(self, population, fitness):
        reported = getattr(self._algorithm, "reported_best", None)
        if callable(reported):
            # the algorithm's own rule (the Deep GA: the elite and its mean over its evaluations; it may go down)
            member, value = reported()
            self._best_slots(member)
            tf.nest.map_structure(lambda v, t: v.assign(t), self.best, member)
            self.best_fitness.assign(tf.cast(value, tf.float32))
            return
        f = np.nan_to_num(fitness.numpy().astype(np.float64), nan=-np.inf)
        i = int(np.argmax(f))
        member = tf.nest.map_structure(lambda t: tf.convert_to_tensor(t)[i], population)
        self._best_slots(member)
        if np.isfinite(f[i]) and f[i] > float(self.best_fitness.numpy()):
            tf.nest.map_structure(lambda v, t: v.assign(t), self.best, member)
            self.best_fitness.assign(np.float32(f[i]))

    def _best_slots(self, member):
        if self.best is None:
            self.best = tf.nest.map_structure(
                lambda t: tf.Variable(tf.zeros_like(t), trainable=False, name="best"), member
            )

    def best_individual(self):
        """The best member seen so far (same structure as one population row)."""
        if self.best is None:
            return None
        return tf.nest.map_structure(lambda v: v.read_value(), self.best)

    # -- the loop -----------------------------------------------------------
    def _done(self) -> bool:
        if self.budget_generations is not None and int(self.generation.numpy()) >= self.budget_generations:
            return True
        if self.budget_frames is not None and int(self.frames.numpy()) >= self.budget_frames:
            return True
        if self.budget_seconds is not None and float(self.wall_time.numpy()) >= self.budget_seconds:
            return True
        return False

    def step(self) -> GenerationLog:
        """Runs one generation and returns its log (does not checkpoint)."""
        t0 = time.perf_counter()
        built0 = _graph_building_seconds()
        population = self._algorithm.ask()
        fitness, extras, frames = self._evaluate(population)
        if extras:
            self._algorithm.tell(population, fitness, *extras)
        else:
            self._algorithm.tell(population, fitness)
        self._track_best(population, fitness)
        dt = time.perf_counter() - t0
        compile_dt = min(max(_graph_building_seconds() - built0, 0.0), dt)
        run_dt = dt - compile_dt
        self.generation.assign_add(1)
        self.frames.assign_add(frames)
        self.evaluations.assign_add(int(fitness.shape[0]))
        self.wall_time.assign_add(dt)
        f = fitness.numpy().astype(np.float64)
        finite = f[np.isfinite(f)]
        stats = (
            (float(finite.max()), float(finite.mean()), float(np.median(finite)), float(finite.std()))
            if finite.size else (float("nan"),) * 4
        )
        extra = {}
        if hasattr(self._algorithm, "metrics"):
            try:
                extra = {k: float(v) for k, v in self._algorithm.metrics().items()}
            except Exception:  # noqa: BLE001 - metrics are optional decoration
                extra = {}
        log = GenerationLog(
            generation=int(self.generation.numpy()),
            best=stats[0], mean=stats[1], median=stats[2], std=stats[3],
            best_ever=float(self.best_fitness.numpy()),
            frames=int(self.frames.numpy()), evaluations=int(self.evaluations.numpy()),
            frames_per_second=frames / run_dt if run_dt > 0 else float("nan"),
            generation_seconds=run_dt, wall_time=float(self.wall_time.numpy()),
            compile_seconds=compile_dt, extra=extra,
        )
        return log

    def _emit(self, log: GenerationLog):
        self.history.append(log)
        if self.run_dir is not None:
            if self._writer is None:
                self._writer = tf.summary.create_file_writer(str(self.run_dir / "tensorboard"))
            with self._writer.as_default(step=log.generation):
                for k in ("best", "mean", "median", "std", "best_ever", "frames_per_second", "generation_seconds",
                          "compile_seconds"):
                    tf.summary.scalar(f"fitness/{k}" if k in ("best", "mean", "median", "std", "best_ever") else f"speed/{k}", getattr(log, k))
                for k in ("frames", "evaluations", "wall_time"):
                    tf.summary.scalar(f"progress/{k}", getattr(log, k))
                for k, v in log.extra.items():
                    tf.summary.scalar(f"algorithm/{k}", v)
            self._writer.flush()
            with open(self.run_dir / "progress.jsonl", "a") as fh:
                fh.write(log.to_json() + "\n")
        for cb in self.callbacks:
            cb(log)

    # -- run ------------------------------------------------------------------
    def run(self) -> list[GenerationLog]:
        """Runs until the budget is used; returns the per-generation history."""
        bar = None
        if self.progress and _isatty(sys.stdout) and _bar_fits(sys.stderr):  # tqdm writes to stderr
            bar = self._make_bar()
        self._first_index = len(self.history)
        self._frames0 = int(self.frames.numpy())
        self._last_line = None
        self._last_saved = int(self.generation.numpy())
        try:
            while not self._done():
                log = self.step()
                # Log first, then checkpoint: on resume, log lines of generations
                # after the restored checkpoint are dropped, so both stay in step.
                self._emit(log)
                if self._manager is not None and log.generation % self.checkpoint_every == 0:
                    self.save()
                    self._last_saved = log.generation
                if self.progress:
                    self._show(bar, log, final=self._done())
            if self._manager is not None and self._last_saved != int(self.generation.numpy()):
                self.save()
        finally:
            if bar is not None:
                bar.close()
            if self._scratch is not None:  # a worker's copy of the chief's checkpoint
                self._scratch()
            if self._writer is not None:
                self._writer.flush()
        return self.history
