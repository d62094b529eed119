"""MAP-Elites as ask/tell (Mouret & Clune 2015; batched as in QDax 2022).

::

    me = MAPElites(archive, [IsoLineEmitter(D, 1000, bounds=(0, 1))], init_bounds=(0, 1), seed=0)
    for _ in range(100):
        x = me.ask()
        fitness, descriptors = task(x)
        me.tell(x, fitness, descriptors)
    me.metrics()   # coverage, qd_score, norm_qd_score, max/mean fitness, size

The first ``ask`` (archive empty) returns ``batch_size`` solutions drawn
uniformly in ``init_bounds`` (or from ``init_solutions``).  Each later ``ask``
concatenates the emitters' batches in order; ``tell`` inserts them all in one
batched insertion and hands each emitter its slice of the outcome.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from tfevo._holder import Untracked
from tfevo.core import (ConfigError, SeedStream, ShapeError, arguments_checked, check_fitness, check_last_ask,
                        note_nonfinite)
from tfevo.qd import _shared_step
from tfevo.qd.archives import Archive
from tfevo.qd.emitters import Emitter
from tfevo.registry import register

__all__ = ["MAPElites"]


@register("strategy", "map_elites")
@arguments_checked
class MAPElites(tf.Module):
    """MAP-Elites with any archive and a mix of emitters.

    Args:
      archive: a :class:`~tfevo.qd.GridArchive` or :class:`~tfevo.qd.CVTArchive`.
      emitters: list of :class:`~tfevo.qd.emitters.Emitter` (their
        ``solution_dim`` must equal the archive's).
      init_bounds: ``(low, high)`` for the random initial batch.
      init_solutions: or an explicit ``[B, D]`` initial batch.
      seed: the run's seed.
      result_archive: optionally, a second archive that receives every
        batch too (as pyribs' ``Scheduler(result_archive=...)``): with
        CMA-MAE's soft ``archive`` (``learning_rate``/``threshold_min``) it
        holds the true elites, and :meth:`metrics` and :attr:`best` read it.
        The emitters only see ``archive``.
      jit_compile: compile the graph-safe ``ask``/``tell`` programs with XLA.
        ``None`` (default): tfevo's measured CPU choice -- plain graphs
        running the C++ kernels (``custom_ops/qd_emit.cc``) when they build,
        else an XLA-compiled grid insertion; ``True``: XLA everywhere (the
        kernels are then replaced by their TensorFlow references); ``False``:
        no XLA.  See ``benchmarks/results/qd.md``.
    """

    def __init__(self, archive: Archive, emitters: list[Emitter], init_bounds=None, init_solutions=None,
                 seed: int = 0, jit_compile: bool | None = None, name: str | None = None,
                 result_archive: Archive | None = None):
        super().__init__(name=name)
        if result_archive is not None:
            if result_archive is archive:
                raise ConfigError("result_archive is the archive itself; leave result_archive=None to read the "
                                  "archive's metrics")
            if not isinstance(result_archive, Archive):
                raise ConfigError(f"result_archive must be a GridArchive or CVTArchive, got "
                                  f"{type(result_archive).__name__}")
            if (result_archive.solution_dim, result_archive.descriptor_dim) != (archive.solution_dim,
                                                                                 archive.descriptor_dim):
                raise ConfigError(
                    f"result_archive has solution_dim {result_archive.solution_dim} and descriptor_dim "
                    f"{result_archive.descriptor_dim}, the archive {archive.solution_dim} and {archive.descriptor_dim}")
        if not emitters:
            raise ConfigError("MAPElites needs at least one emitter")
        for e in emitters:
            if e.solution_dim != archive.solution_dim:
                raise ConfigError(
                    f"emitter {type(e).__name__} has solution_dim {e.solution_dim}, archive has {archive.solution_dim}")
        if init_bounds is None and init_solutions is None:
            raise ConfigError("give init_bounds=(low, high) or init_solutions for the first batch")
        self.archive = archive
        self._result_archive = result_archive
        for e in emitters:
            if hasattr(e, "attach"):
                e.attach(archive)
        self.emitters = list(emitters)
        self.batch_size = sum(e.batch_size for e in emitters)
        self.num_dims = archive.solution_dim
        self.popsize = self.batch_size
        self.seeds = SeedStream(seed)
        self.generation = tf.Variable(0, dtype=tf.int64, trainable=False, name="generation")
        self.evaluations = tf.Variable(0, dtype=tf.int64, trainable=False, name="evaluations")
        if init_solutions is not None:
            init = tf.convert_to_tensor(init_solutions, tf.float32)
            if init.shape.as_list() != [self.batch_size, self.num_dims]:
                raise ShapeError(f"init_solutions must have shape [{self.batch_size}, {self.num_dims}], "
                                 f"got {init.shape.as_list()}")
            self._init = init
            self._init_bounds = None
        else:
            try:
                lo, hi = init_bounds
                lo = np.broadcast_to(np.asarray(lo, np.float32), [self.num_dims]).astype(np.float32)
                hi = np.broadcast_to(np.asarray(hi, np.float32), [self.num_dims]).astype(np.float32)
            except (TypeError, ValueError):
                raise ConfigError(f"init_bounds must be (low, high), scalars or [{self.num_dims}] arrays, "
                                  f"got {init_bounds!r}") from None
            if not (np.all(np.isfinite(lo)) and np.all(np.isfinite(hi)) and np.all(hi > lo)):
                raise ConfigError(f"init_bounds needs finite values with high > low in every dimension, got "
                                  f"{init_bounds!r}")
            self._init = None
            self._init_bounds = (lo, hi)
        # Emitters whose update relies on what they emitted (CMA-ME's searches): then tell accepts only the
        # batch the last ask returned, once (pyribs' scheduler tells its stored batch).
        self.tell_needs_last_ask = any(getattr(e, "tell_needs_last_ask", False) for e in self.emitters)
        if self.tell_needs_last_ask:
            self.last_ask = tf.Variable(tf.zeros([self.batch_size, self.num_dims]), trainable=False,
                                        name="last_ask")
            self.asked = tf.Variable(False, trainable=False, name="asked")
        self.jit_compile = jit_compile
        self._ask_fn = None
        self._tell_fn = None
        self._step_fns = Untracked(fns={})  # compiled task per task_fn (kept out of checkpoints)

    def _initial(self, seed):
        if self._init is not None:
            return self._init
        lo, hi = self._init_bounds
        u = tf.random.stateless_uniform([self.batch_size, self.num_dims], seed=seed)
        return lo + u * (hi - lo)

    def _emit_all(self, seed):
        seeds = tf.random.experimental.stateless_split(seed, len(self.emitters))
        return tf.concat([e.emit(self.archive, seeds[i]) for i, e in enumerate(self.emitters)], axis=0)

    def _ask_graph(self, xla: bool = False):
        seed = self.seeds.next()
        archive = self.archive
        # The parent samples of all emitters share one filled-cell count (computed lazily).
        archive._share_running_count(True)
        archive._trace.xla = xla
        try:
            empty = tf.logical_not(tf.reduce_any(archive.occupied[: archive.num_cells]))
            return self._remember(tf.cond(empty, lambda: self._initial(seed), lambda: self._emit_all(seed)))
        finally:
            archive._share_running_count(False)
            archive._trace.xla = False

    def _remember(self, x):
        if not self.tell_needs_last_ask:
            return x
        self.last_ask.assign(x)
        self.asked.assign(True)
        return tf.identity(x)

    def _check_last_ask(self, solutions):
        """AskTellError unless ``solutions`` is the batch the last ``ask`` returned and it was not told yet."""
        if not self.tell_needs_last_ask:
            return
        ok = self.asked & tf.reduce_all(tf.equal(solutions, self.last_ask))
        msg = ("MAPElites.tell: the solutions are not the batch the last ask() returned (in the same order), or "
               "that batch was already told; an emitter ("
               + ", ".join(type(e).__name__ for e in self.emitters if getattr(e, "tell_needs_last_ask", False))
               + ") updates its search from what it emitted, so tell exactly that batch, once.  Nothing was updated.")
        check_last_ask(ok, msg)

    def _tell_graph(self, solutions, fitness, descriptors, xla: bool = False):
        if self.tell_needs_last_ask:
            self.asked.assign(False)
        archive = self.archive
        for a in self._archives:
            a._trace.xla = xla  # the C++ insertion kernel cannot be compiled by XLA
        try:
            feedback = [e for e in self.emitters if type(e).tell is not Emitter.tell]
            if feedback:
                was_empty = tf.logical_not(tf.reduce_any(archive.occupied[: archive.num_cells]))
            if any(getattr(e, "wants_incumbent", False) for e in feedback):
                # What each candidate's cell held before this batch (improvement-ranked emitters need it).
                incumbent = archive.incumbents(descriptors)
            result, *_ = [a._add(solutions, fitness, descriptors) for a in self._archives]
        finally:
            for a in self._archives:
                a._trace.xla = False
        if feedback:
            def tell_all():
                start = 0
                for e in self.emitters:
                    sl = slice(start, start + e.batch_size)
                    start += e.batch_size
                    if e not in feedback:
                        continue
                    whole = len(self.emitters) == 1  # one emitter: its slice is the batch (no slicing ops)

                    def take(t):
                        return t if whole else t[sl]

                    part = type(result)(*(take(t) for t in result))
                    extra = {"incumbent": (take(incumbent[0]), take(incumbent[1]))} if getattr(
                        e, "wants_incumbent", False) else {}
                    e.tell(take(solutions), take(fitness), take(descriptors), part, **extra)
                return tf.constant(True)

            # The first batch (drawn uniformly, not by the emitters) is not told to them.
            tf.cond(was_empty, lambda: tf.constant(False), tell_all)
        self.generation.assign_add(1)
        self.evaluations.assign_add(self.batch_size)
        return result

    @property
    def _jit_ask(self) -> bool:
        return bool(self.jit_compile) and all(getattr(e, "xla_ask", True) for e in self.emitters)

    @property
    def _jit_tell(self) -> bool:
        if self.jit_compile is None:
            return all(bool(getattr(a, "xla_insert", False)) for a in self._archives)
        return bool(self.jit_compile)

    @property
    def _compiled(self) -> bool:
        return all(getattr(e, "graph_safe", False) for e in self.emitters)

    def ask(self) -> tf.Tensor:
        """The next batch ``[batch_size, D]``."""
        # The compiled programs are traced with autograph=False: they are explicit TensorFlow (tf.cond, no
        # Python decisions on tensors), so tracing never re-reads a source file (autograph would).
        if self._compiled:
            if self._ask_fn is None:
                xla = self._jit_ask
                self._ask_fn = tf.function(lambda: self._ask_graph(xla), input_signature=[], jit_compile=xla,
                                           autograph=False)
            return self._ask_fn()
        seed = self.seeds.next()
        if int(self.archive.size.numpy()) == 0:
            return self._remember(self._initial(seed))
        return self._remember(self._emit_all(seed))

    def tell(self, solutions, fitness, descriptors):
        """Inserts the evaluated batch, informs the emitters, returns the :class:`AddResult`."""
        fitness = check_fitness(fitness, self.batch_size)
        solutions, fitness, descriptors = self.archive._check(solutions, fitness, descriptors)
        self._check_last_ask(solutions)
        note_nonfinite(self, fitness)
        if self._compiled:
            if self._tell_fn is None:
                xla = self._jit_tell
                self._tell_fn = tf.function(lambda x, f, d: self._tell_graph(x, f, d, xla), input_signature=[
                    tf.TensorSpec([self.batch_size, self.num_dims], tf.float32),
                    tf.TensorSpec([self.batch_size], tf.float32),
                    tf.TensorSpec([self.batch_size, self.archive.descriptor_dim], tf.float32)],
                    jit_compile=xla, autograph=False)
            return self._tell_fn(solutions, fitness, descriptors)
        was_empty = int(self.archive.size.numpy()) == 0
        if self.tell_needs_last_ask:
            self.asked.assign(False)
        if any(getattr(e, "wants_incumbent", False) for e in self.emitters):
            incumbent = self.archive.incumbents(descriptors)
        result, *_ = [a.add(solutions, fitness, descriptors) for a in self._archives]
        if not was_empty:
            start = 0
            for e in self.emitters:
                sl = slice(start, start + e.batch_size)
                extra = {"incumbent": (incumbent[0][sl], incumbent[1][sl])} if getattr(
                    e, "wants_incumbent", False) else {}
                e.tell(solutions[sl], fitness[sl], descriptors[sl],
                       type(result)(result.status[sl], result.value[sl], result.cell[sl]), **extra)
                start += e.batch_size
        self.generation.assign_add(1)
        self.evaluations.assign_add(self.batch_size)
        return result

    def step(self, task_fn, iterations: int = 1):
        """Runs ``iterations`` whole MAP-Elites iterations: ask, evaluate, tell.

        ``task_fn(x [B, D]) -> (fitness [B], descriptors [B, k])`` must be
        TensorFlow-traceable (e.g. :func:`~tfevo.qd.rastrigin_qd`); it is
        compiled once with a fixed input signature.  Exactly equivalent to
        ``x = ask(); tell(x, *task_fn(x))`` (same seeds, same archive), but one
        iteration is a single compiled program (ask graph, the task as a nested
        function, the insertion) with no host round trip and no Python-side
        validation (nothing is read back until you read the result).  One call
        instead of three measured 10-15% faster per iteration at batch 1000 on
        CPU (see ``benchmarks/results/qd.md``).  Needs graph-safe emitters
        (all of tfevo's are).

        Returns the :class:`~tfevo.qd.archives.AddResult` of the last iteration.
        """
        if not self._compiled:
            raise ConfigError("step() needs graph-safe emitters (graph_safe = True); use ask()/tell() with the others")
        iterations = int(iterations)
        if iterations < 1:
            raise ConfigError(f"iterations must be >= 1, got {iterations}")
        fn = self._step_fns.fns.get(task_fn)
        if fn is None:
            key = _shared_step.config_key(self, task_fn, (self._jit_tell, self._jit_ask))
            fn = _shared_step.lookup(key, self)
            if fn is not None:
                self._step_fns.fns[task_fn] = fn
        if fn is None:
            b, k = self.batch_size, self.archive.descriptor_dim
            evaluate = tf.function(task_fn, input_signature=[tf.TensorSpec([b, self.num_dims], tf.float32)])
            # The insertion as a nested XLA function (one compiled cluster inside the step).
            xla_tell = self._jit_tell
            insert = tf.function(lambda x, f, d: self._tell_graph(x, f, d, xla_tell), jit_compile=xla_tell,
                                 autograph=False)
            xla_ask = self._jit_ask

            def iteration():
                x = self._ask_graph(xla_ask)
                f, d = evaluate(x)
                f = tf.ensure_shape(tf.cast(f, tf.float32), [b])
                d = tf.ensure_shape(tf.cast(d, tf.float32), [b, k])
                return insert(x, f, d)

            # The concrete function is called directly: ~50 us less Python per call than the tf.function.
            fn = tf.function(iteration, input_signature=[], autograph=False).get_concrete_function()
            self._step_fns.fns[task_fn] = fn
            _shared_step.remember(key, self, fn)
        result = None
        for _ in range(iterations):
            result = fn()
        return result

    @property
    def _archives(self) -> tuple[Archive, ...]:
        """The archives every batch goes into: ``archive``, then ``result_archive`` if given
        (a property, so the checkpoint keeps its dependencies as they are)."""
        return (self.archive,) if self._result_archive is None else (self.archive, self._result_archive)

    @property
    def result_archive(self) -> Archive:
        """The archive of the true elites: ``result_archive`` when given, else ``archive``."""
        return self.archive if self._result_archive is None else self._result_archive

    def metrics(self) -> dict[str, float]:
        """The :meth:`~tfevo.qd.archive_base.Archive.metrics` of :attr:`result_archive`."""
        return self.result_archive.metrics()

    @property
    def num_nonfinite(self) -> int:
        """How many members had non-finite fitness in the ``tell`` calls made eagerly so far."""
        return getattr(self, "_num_nonfinite", 0)

    @property
    def best(self):
        return self.result_archive.best()
