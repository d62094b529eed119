"""The generation loop: ask -> evaluate -> tell, with logging and checkpoints.

:class:`Trainer` only loops, logs and checkpoints; the algorithm and the
evaluator do the work.  Everything that decides what happens next is saved in
one ``tf.train.Checkpoint`` after each generation (or every
``checkpoint_every`` generations):

* the algorithm (``tf.Module``: its variables, including its seed stream),
* the evaluator, if it is trackable (its seed stream, observation statistics),
* the best individual seen so far and its fitness,
* counters: generation, environment frames, evaluations, wall time.

``tf.train.CheckpointManager`` writes the data files first and only then
points the ``checkpoint`` index at them, so a run killed at any moment
(SIGKILL included) resumes from the last complete checkpoint.  Re-running
with the same ``run_dir`` resumes; because every random number comes from a
checkpointed counter-based stream, the resumed run continues exactly as the
uninterrupted one would have.

Logs: one JSON line per generation in ``run_dir/progress.jsonl`` (lines from
generations after the restored checkpoint are dropped on resume) and
TensorBoard scalars in ``run_dir/tensorboard``.
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import tensorflow as tf

from tfevo.core import ConfigError, TfevoError

__all__ = ["Trainer", "GenerationLog", "FitnessError"]


class FitnessError(TfevoError):
    """The evaluator returned something that is not a fitness vector."""


@dataclass
class GenerationLog:
    generation: int
    best: float
    mean: float
    median: float
    std: float
    best_ever: float
    frames: int
    evaluations: int
    frames_per_second: float
    generation_seconds: float
    wall_time: float
    extra: dict = field(default_factory=dict)

    def to_json(self) -> str:
        d = {k: v for k, v in self.__dict__.items() if k != "extra"}
        d.update(self.extra)
        return json.dumps({k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in d.items()})


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


def _distribute(strategy, algorithm, evaluator, run_dir, seconds):
    """(evaluator sharded over ``strategy``, this worker's run directory)."""
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
    extended = strategy.extended
    if bool(getattr(extended, "_in_multi_worker_mode", lambda: False)()):
        if seconds is not None:
            raise ConfigError("a seconds budget is not allowed with a multi-worker strategy (workers would stop "
                              "at different generations and wait forever); use generations or frames")
        if run_dir is not None and not extended.should_checkpoint:
            resolver = getattr(strategy, "cluster_resolver", None)
            task = getattr(resolver, "task_id", None)
            run_dir = Path(run_dir) / f"worker-{task if task is not None else 'other'}"
    return evaluator, run_dir


def _is_trackable(obj) -> bool:
    return isinstance(obj, tf.__internal__.tracking.Trackable) if hasattr(tf, "__internal__") else isinstance(obj, tf.Module)


class Trainer(tf.Module):
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
      keep_checkpoints: how many checkpoints the manager keeps.
      progress: show a tqdm progress bar.
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
        the chief writes ``run_dir`` (the others write ``run_dir/worker-<i>``,
        so each can resume), and a ``seconds`` budget is refused (workers
        would stop at different generations).

    Example:

    >>> trainer = Trainer(algo, evaluator, run_dir="runs/demo", generations=20)
    >>> history = trainer.run()
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
        keep_checkpoints: int = 3,
        progress: bool = True,
        callbacks: list[Callable[[GenerationLog], Any]] | None = None,
        extra_trackables: dict | None = None,
        verbose: bool = True,
        strategy: tf.distribute.Strategy | None = None,
    ):
        super().__init__(name="trainer")
        if generations is None and frames is None and seconds is None:
            raise ConfigError("give the Trainer a budget: generations, frames or seconds")
        for nm, v in (("generations", generations), ("frames", frames), ("seconds", seconds)):
            if v is not None and v <= 0:
                raise ConfigError(f"{nm} budget must be > 0, got {v}")
        if int(checkpoint_every) < 1:
            raise ConfigError(f"checkpoint_every must be >= 1, got {checkpoint_every}")
        if not (hasattr(algorithm, "ask") and hasattr(algorithm, "tell")):
            raise ConfigError(f"algorithm {type(algorithm).__name__} has no ask()/tell()")
        if not (callable(evaluator) or hasattr(evaluator, "evaluate")):
            raise ConfigError(f"evaluator {type(evaluator).__name__} is neither callable nor has evaluate()")
        if strategy is not None:
            evaluator, run_dir = _distribute(strategy, algorithm, evaluator, run_dir, seconds)
            progress = progress and bool(strategy.extended.should_checkpoint)
        self.strategy = strategy
        self._algorithm = algorithm
        self._evaluator = evaluator
        self.run_dir = Path(run_dir) if run_dir is not None else None
        self.budget_generations = generations
        self.budget_frames = frames
        self.budget_seconds = seconds
        self.checkpoint_every = int(checkpoint_every)
        self.progress = progress
        self.verbose = verbose
        self.callbacks = list(callbacks or [])

        self.generation = tf.Variable(0, dtype=tf.int64, trainable=False, name="generation")
        self.frames = tf.Variable(0, dtype=tf.int64, trainable=False, name="frames")
        self.evaluations = tf.Variable(0, dtype=tf.int64, trainable=False, name="evaluations")
        self.wall_time = tf.Variable(0.0, dtype=tf.float64, trainable=False, name="wall_time")
        self.best_fitness = tf.Variable(-np.inf, dtype=tf.float32, trainable=False, name="best_fitness")
        self.best = None  # created on the first generation (structure of one member)

        objects = {"trainer": self, "algorithm": algorithm}
        if _is_trackable(evaluator):
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
        self._manager = None
        self._writer = None
        self.history: list[GenerationLog] = []
        self.restored_from: str | None = None
        if self.run_dir is not None:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            self._manager = tf.train.CheckpointManager(
                self._checkpoint, str(self.run_dir / "checkpoints"), max_to_keep=int(keep_checkpoints)
            )
            self._restore()

    # -- checkpoints --------------------------------------------------------
    def _restore(self):
        path = self._manager.latest_checkpoint
        if path is None:
            return
        self._checkpoint.restore(path).expect_partial()
        self.restored_from = path
        gen = int(self.generation.numpy())
        log_path = self.run_dir / "progress.jsonl"
        if log_path.exists():  # drop log lines of generations after the checkpoint
            kept = []
            for line in log_path.read_text().splitlines():
                try:
                    if json.loads(line)["generation"] <= gen:
                        kept.append(line)
                except (ValueError, KeyError):
                    continue
            tmp = log_path.with_suffix(".tmp")
            tmp.write_text("".join(k + "\n" for k in kept))
            os.replace(tmp, log_path)
            for line in kept:
                d = json.loads(line)
                self.history.append(
                    GenerationLog(**{k: (d.get(k) if d.get(k) is not None else float("nan"))
                                     for k in GenerationLog.__dataclass_fields__ if k != "extra"})
                )
        if self.verbose:
            print(f"tfevo: resumed from {path} (generation {gen})")

    def save(self) -> str | None:
        if self._manager is None:
            return None
        return self._manager.save(checkpoint_number=int(self.generation.numpy()))

    # -- evaluation ---------------------------------------------------------
    def _evaluate(self, population):
        ev = self._evaluator
        out = ev.evaluate(population) if hasattr(ev, "evaluate") else ev(population)
        extras = ()
        if isinstance(out, (tuple, list)):
            out, extras = out[0], tuple(out[1:])
        fitness = tf.convert_to_tensor(out)
        if fitness.dtype.is_floating:
            fitness = tf.cast(fitness, tf.float32)
        else:
            raise FitnessError(f"evaluator returned fitness of dtype {fitness.dtype.name}; expected float32 [P]")
        if fitness.shape.rank != 1:
            raise FitnessError(f"evaluator returned fitness of shape {fitness.shape.as_list()}; expected [P]")
        return fitness, extras, frames_of(ev, fitness.shape[0])

    def _track_best(self, population, fitness):
        f = np.nan_to_num(fitness.numpy().astype(np.float64), nan=-np.inf)
        i = int(np.argmax(f))
        member = tf.nest.map_structure(lambda t: tf.convert_to_tensor(t)[i], population)
        if self.best is None:
            self.best = tf.nest.map_structure(
                lambda t: tf.Variable(tf.zeros_like(t), trainable=False, name="best"), member
            )
        if np.isfinite(f[i]) and f[i] > float(self.best_fitness.numpy()):
            tf.nest.map_structure(lambda v, t: v.assign(t), self.best, member)
            self.best_fitness.assign(np.float32(f[i]))

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
        population = self._algorithm.ask()
        fitness, extras, frames = self._evaluate(population)
        if extras:
            self._algorithm.tell(population, fitness, *extras)
        else:
            self._algorithm.tell(population, fitness)
        self._track_best(population, fitness)
        dt = time.perf_counter() - t0
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
            frames_per_second=frames / dt if dt > 0 else float("nan"),
            generation_seconds=dt, wall_time=float(self.wall_time.numpy()), extra=extra,
        )
        return log

    def _emit(self, log: GenerationLog):
        self.history.append(log)
        if self.run_dir is not None:
            if self._writer is None:
                self._writer = tf.summary.create_file_writer(str(self.run_dir / "tensorboard"))
            with self._writer.as_default(step=log.generation):
                for k in ("best", "mean", "median", "std", "best_ever", "frames_per_second", "generation_seconds"):
                    tf.summary.scalar(f"fitness/{k}" if k in ("best", "mean", "median", "std", "best_ever") else f"speed/{k}", getattr(log, k))
                tf.summary.scalar("progress/frames", log.frames)
                for k, v in log.extra.items():
                    tf.summary.scalar(f"algorithm/{k}", v)
            self._writer.flush()
            with open(self.run_dir / "progress.jsonl", "a") as fh:
                fh.write(log.to_json() + "\n")
        for cb in self.callbacks:
            cb(log)

    def run(self) -> list[GenerationLog]:
        """Runs until the budget is used; returns the per-generation history."""
        bar = None
        total = self.budget_generations
        if self.progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=total, initial=int(self.generation.numpy()), unit="gen", dynamic_ncols=True,
                       disable=None)
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
                if bar is not None:
                    bar.update(1)
                    bar.set_postfix(best=f"{log.best:.4g}", mean=f"{log.mean:.4g}", fps=f"{log.frames_per_second:.0f}")
            if self._manager is not None and self._last_saved != int(self.generation.numpy()):
                self.save()
        finally:
            if bar is not None:
                bar.close()
            if self._writer is not None:
                self._writer.flush()
        return self.history
