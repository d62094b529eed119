"""The seams every tfevo algorithm shares.

An *algorithm* is a :class:`tf.Module` whose whole state lives in
``tf.Variable`` attributes, so ``tf.train.Checkpoint(algorithm=algo)`` saves and
restores a run.  It follows the ask/tell protocol::

    population = algo.ask()            # tensors with a leading axis P
    fitness = evaluate(population)     # [P], higher is better (cast to the algorithm's dtype)
    algo.tell(population, fitness)

Fitness is maximised everywhere (a minimisation problem returns the negated
loss).  Any non-finite fitness (NaN, ``+inf``, ``-inf``) means "worst" and
never corrupts state: use :func:`sanitize_fitness` before any arithmetic on
fitness values.  ``tell`` warns once per algorithm object
(:class:`NonFiniteFitnessWarning`) when members had non-finite fitness; the
rule is documented in ``docs/strategies.md`` ("Non-finite fitness").

Randomness comes from :class:`SeedStream`, a counter-based stream of seeds for
TensorFlow's *stateless* random ops.  The stream is a variable, so it is
checkpointed with the algorithm; the same seed gives the same run on any device
and a restored run continues exactly like the uninterrupted one.
"""

from __future__ import annotations

import functools
import inspect
import math
import numbers
from typing import Any, Callable

import numpy as np
import tensorflow as tf

# FastCall and eager_op_runner are re-exported: every private TensorFlow API lives in _tf_private
from tfevo._tf_private import FastCall, eager_matches, eager_op_runner, is_eager_tensor

__all__ = [
    "TfevoError",
    "ConfigError",
    "ShapeError",
    "AskTellError",
    "check_last_ask",
    "NonFiniteFitnessWarning",
    "note_nonfinite",
    "SeedStream",
    "check_seed",
    "Algorithm",
    "sanitize_fitness",
    "worst_to_finite",
    "check_fitness",
    "check_population",
    "check_dtype",
    "TraceCounter",
    "FastCall",
    "eager_op_runner",
    "suggest_argument",
    "close_names",
]


class TfevoError(Exception):
    """Base class of tfevo's own errors."""


class ConfigError(TfevoError, ValueError):
    """An impossible or unknown configuration value."""


class ShapeError(TfevoError, ValueError):
    """A tensor with the wrong shape or dtype was passed in."""


class AskTellError(ShapeError):
    """``tell`` got a population that is not the one the last ``ask`` returned,
    for an algorithm whose update relies on what it stored at ``ask`` time."""


def check_last_ask(ok, message: str, graph_message: str | None = None) -> None:
    """``AskTellError(message)`` unless ``ok`` (a bool tensor: the told batch is the one the last
    ask returned); inside a ``tf.function`` an assertion that fails when the graph runs."""
    if is_eager_tensor(ok):
        if not bool(ok):
            raise AskTellError(message)
    else:
        tf.debugging.Assert(ok, [tf.constant(graph_message or message)])


class NonFiniteFitnessWarning(RuntimeWarning):
    """Members had non-finite fitness (NaN, ``+inf``, ``-inf``); they were treated as the worst.

    Issued (through Python's :mod:`warnings`) at most once per algorithm
    object; :attr:`Algorithm.num_nonfinite` keeps counting afterwards.
    """


def check_int(value: Any, name: str, minimum: int | None = None, *, integral_float: bool = False) -> int:
    """``value`` as an int (``>= minimum`` if given); anything else is a :class:`ConfigError` naming ``name``.

    Integers (also NumPy ones) are accepted, with ``integral_float`` also floats holding an integer
    (``4.0``); ``int()`` would silently truncate ``2.5``, parse ``"3"`` or take ``True`` as 1."""
    ok = not isinstance(value, bool) and (isinstance(value, numbers.Integral) or (
        integral_float and isinstance(value, (float, np.floating)) and float(value).is_integer()))
    if not ok or (minimum is not None and value < minimum):
        raise ConfigError(f"{name} must be an integer{'' if minimum is None else f' >= {minimum}'}, got {value!r}")
    return int(value)


def check_seed(seed: Any, name: str = "seed") -> int:
    """``seed`` as an int in ``[0, 2**31)``; anything else is a :class:`ConfigError` naming it.

    Integers (also NumPy ones) and integral floats are accepted; ``1.5`` or ``"1"`` would otherwise
    silently become another run's seed."""
    try:
        if isinstance(seed, (bool, str, bytes)) or (isinstance(seed, (float, np.floating))
                                                  and not float(seed).is_integer()):
            raise TypeError
        value = int(seed)
    except (TypeError, ValueError, OverflowError):
        raise ConfigError(f"{name} must be an integer in [0, 2**31), got {seed!r}") from None
    if not (0 <= value < 2**31):
        raise ConfigError(f"{name} must be an integer in [0, 2**31), got {value}")
    return value


class SeedStream(tf.Module):
    """A checkpointable stream of seeds for stateless random ops.

    ``next()`` returns an ``int32 [2]`` seed (usable by every
    ``tf.random.stateless_*`` op) and advances an internal counter.  It works
    eagerly and inside ``tf.function``.

    Example:

    >>> s = SeedStream(0)
    >>> x = tf.random.stateless_normal([3], seed=s.next())
    """

    def __init__(self, seed: int, name: str | None = None):
        super().__init__(name=name)
        seed = check_seed(seed)
        self.seed = tf.Variable(seed, dtype=tf.int64, trainable=False, name="seed")
        self.counter = tf.Variable(0, dtype=tf.int64, trainable=False, name="counter")

    def next(self) -> tf.Tensor:
        return self._key(self.counter.assign_add(1))

    def last(self) -> tf.Tensor:
        """The seed the last ``next()`` returned (nothing drawn since), without advancing."""
        return self._key(self.counter.read_value())

    def _key(self, c) -> tf.Tensor:
        return SeedStream.mix(self.seed, c)

    @staticmethod
    def mix(seed, counter) -> tf.Tensor:
        """The key of ``counter`` in the stream of ``seed``: the two mixed into two int32 words
        (stateless ops take ``[2]``)."""
        return tf.stack([tf.cast(seed, tf.int32), tf.cast(tf.math.floormod(counter, 2**31 - 1), tf.int32)])

    def split(self, n: int) -> tf.Tensor:
        """Returns ``n`` independent seeds ``int32 [n, 2]`` from one draw."""
        return tf.random.experimental.stateless_split(self.next(), num=n)


def _fitness_dtype(fitness: tf.Tensor, dtype) -> tf.DType:
    if dtype is not None:
        return tf.as_dtype(dtype)
    return fitness.dtype if fitness.dtype in (tf.float32, tf.float64) else tf.float32


def sanitize_fitness(fitness: tf.Tensor, dtype=None) -> tf.Tensor:
    """Maps every non-finite fitness (NaN, +inf, -inf) to -inf, the worst value.

    A diverged evaluation that returns ``+inf`` is a failure, not a record: it
    ranks below every finite value.  The result orders correctly and is safe
    for ranking.  Use :func:`worst_to_finite` before arithmetic on raw values.
    ``dtype`` defaults to the input's (float32 or float64; float32 for others).
    """
    fitness = tf.convert_to_tensor(fitness)
    fitness = tf.cast(fitness, _fitness_dtype(fitness, dtype))
    return tf.where(tf.math.is_finite(fitness), fitness, tf.constant(-np.inf, fitness.dtype))


def worst_to_finite(fitness: tf.Tensor, dtype=None) -> tf.Tensor:
    """Replaces non-finite (worst) fitness by the smallest finite value present.

    If no value is finite, every entry becomes 0.  The result is always finite.
    """
    fitness = sanitize_fitness(fitness, dtype)
    finite = tf.math.is_finite(fitness)
    lowest = tf.reduce_min(tf.where(finite, fitness, fitness.dtype.max))
    lowest = tf.where(tf.reduce_any(finite), lowest, tf.zeros([], fitness.dtype))
    return tf.where(finite, fitness, lowest)


def check_fitness(fitness: Any, popsize: int, name: str = "fitness", dtype=tf.float32) -> tf.Tensor:
    """Validates a fitness vector (Python-side, before any compiled call) and casts it to ``dtype``."""
    if eager_matches(fitness, dtype, (popsize,)):
        return fitness
    fitness = tf.convert_to_tensor(fitness)
    if not (fitness.dtype.is_floating or fitness.dtype.is_integer):
        raise ShapeError(f"{name} must be a float tensor, got dtype {fitness.dtype.name}")
    fitness = tf.cast(fitness, dtype)
    if fitness.shape.rank != 1 or (fitness.shape[0] is not None and fitness.shape[0] != popsize):
        raise ShapeError(
            f"{name} must have shape [{popsize}] (one value per member), got {fitness.shape.as_list()}"
        )
    return fitness


def check_dtype(dtype: Any, name: str = "dtype") -> tf.DType:
    """The float dtype of an algorithm's state and populations: ``float32`` or ``float64``.

    Accepts a name (``"float64"``), a NumPy or a TensorFlow dtype; anything else
    is a :class:`ConfigError` naming the field, the value and what is accepted.
    """
    try:
        dt = tf.as_dtype(dtype)
    except (TypeError, ValueError):
        raise ConfigError(f"{name} must be 'float32' or 'float64', got {dtype!r}") from None
    if dt not in (tf.float32, tf.float64):
        raise ConfigError(f"{name} must be 'float32' or 'float64', got {dt.name!r}")
    return dt


def check_population(x: Any, shape: tuple, name: str = "population", dtype=tf.float32) -> tf.Tensor:
    """Validates a population tensor against a fully known shape."""
    if eager_matches(x, dtype, tuple(shape)):
        return x
    x = tf.convert_to_tensor(x)
    if x.dtype != dtype:
        if x.dtype.is_floating and dtype.is_floating:
            x = tf.cast(x, dtype)
        else:
            raise ShapeError(f"{name} must have dtype {dtype.name}, got {x.dtype.name}")
    if x.shape.as_list() != list(shape):
        raise ShapeError(f"{name} must have shape {list(shape)}, got {x.shape.as_list()}")
    return x


class TraceCounter:
    """Counts how often a Python function body is traced by ``tf.function``."""

    def __init__(self):
        self.counts: dict[str, int] = {}

    def wrap(self, name: str, fn: Callable) -> Callable:
        @functools.wraps(fn)
        def inner(*args, **kwargs):
            self.counts[name] = self.counts.get(name, 0) + 1
            return fn(*args, **kwargs)

        return inner


def _public_name(cls) -> str:
    """The first non-private class in ``cls``'s MRO (the name a user typed)."""
    for klass in cls.__mro__:
        if not klass.__name__.startswith("_"):
            return klass.__name__
    return cls.__name__


def close_names(name: str, candidates, n: int = 1, cutoff: float = 0.6) -> list[str]:
    """The ``candidates`` closest to a mistyped ``name``, compared without case (``CMA_ES`` and
    ``cartpole-v1`` find ``cma_es`` and ``CartPole-v1``), in their own spelling."""
    import difflib

    by_lower = {}
    for c in candidates:
        by_lower.setdefault(str(c).lower(), str(c))
    return [by_lower[c] for c in difflib.get_close_matches(str(name).lower(), list(by_lower), n=n, cutoff=cutoff)]


def suggest_argument(name: str, accepted) -> list[str]:
    """The accepted argument names closest to ``name`` (the one-vocabulary name first, if
    ``name`` is another library's word for it; else :func:`close_names`)."""
    accepted = list(accepted)
    if _OTHER_NAMES.get(name) in accepted:
        return [_OTHER_NAMES[name]]
    return close_names(name, accepted, n=2, cutoff=0.5)


def _argument_error(cls, problem: str, unknown: list) -> ConfigError:
    """A :class:`ConfigError` naming the public class, its arguments and close matches."""
    return _unknown_argument_error(_public_name(cls), problem, unknown, cls.accepted_arguments())


def _unknown_argument_error(name: str, problem: str, unknown: list, accepted) -> ConfigError:
    """``name: problem; did you mean ...? name accepts: ...`` as a :class:`ConfigError`."""
    hints = []
    for k in unknown:
        close = suggest_argument(k, accepted)
        if close:
            hints.append(f"did you mean {' or '.join(repr(c) for c in close)} instead of {k!r}?")
    msg = f"{name}: {problem};"
    if hints:
        msg += " " + " ".join(hints)
    return ConfigError(msg + f" {name} accepts: {', '.join(accepted)}")


#: names other libraries (and older tfevo) use for the one vocabulary: suggested in
#: errors, never accepted (init_params = start point, sigma = step size,
#: learning_rate = learning rate of the mean)
_OTHER_NAMES = {
    "mean_init": "init_params", "init_mean": "init_params", "x0": "init_params", "mean": "init_params",
    "sigma_init": "sigma", "sigma0": "sigma", "noise_std": "sigma", "step_size": "learning_rate",
    "center_learning_rate": "learning_rate", "lr_mean": "learning_rate", "lr": "learning_rate",
    "lr_sigma": "sigma_learning_rate", "sigma_lr": "sigma_learning_rate", "lr_B": "B_learning_rate",
}


def arguments_checked(cls):
    """Class decorator: an unknown keyword argument to ``cls(...)`` raises a
    :class:`ConfigError` naming the class, the closest accepted names and all of them,
    instead of Python's bare ``TypeError`` (other binding errors stay ``TypeError``)."""
    init = cls.__init__
    sig = inspect.signature(init)
    params = list(sig.parameters.values())[1:]
    named = [p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]

    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        unknown = [k for k in kwargs if k not in named]
        if unknown and not any(p.kind is p.VAR_KEYWORD for p in params):
            raise _unknown_argument_error(cls.__name__, f"unknown argument(s) {', '.join(map(repr, unknown))}",
                                          unknown, named)
        init(self, *args, **kwargs)

    cls.__init__ = __init__
    return cls


#: the size arguments every algorithm's constructor checks (:func:`check_int`, integral floats allowed;
#: ``seed`` is checked too, by :func:`check_seed`)
_SIZES = ("num_dims", "popsize")


def _checked_init(cls, init):
    """Wraps ``cls.__init__`` so that wrong arguments raise a :class:`ConfigError`
    naming the class the user built (not a raw ``TypeError`` from a base class)."""
    sig = inspect.signature(init)
    params = list(sig.parameters.values())[1:]
    named = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    var_kw = any(p.kind is p.VAR_KEYWORD for p in params)

    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        try:
            bound = sig.bind(self, *args, **kwargs)
        except TypeError as e:
            unknown = [k for k in kwargs if k not in named] if not var_kw else []
            problem = f"unknown argument(s) {', '.join(map(repr, unknown))}" if unknown else str(e)
            raise _argument_error(type(self), problem, unknown) from None
        if var_kw and kwargs and type(self)._kwargs_forwarded_to is not None:
            # **kwargs that go to another object (a wrapper's inner strategy): checked here so the
            # error names the class the user built; **kwargs passed to a base class are checked there
            accepted = type(self).accepted_arguments(resolved_only=True)
            if accepted is not None:
                unknown = [k for k in kwargs if k not in accepted]
                if unknown:
                    raise _argument_error(type(self), f"unknown argument(s) {', '.join(map(repr, unknown))}",
                                          unknown)
        # before any work or int() (2.5 or "8" would silently become another size); the messages
        # start with the field's name
        for size in _SIZES:
            value = bound.arguments.get(size)
            if value is not None:
                check_int(value, size, 1, integral_float=True)
        if bound.arguments.get("seed") is not None:
            check_seed(bound.arguments["seed"])
        init(self, *args, **kwargs)

    __init__._tfevo_checked_init = True
    return __init__


def note_nonfinite(owner, fitness, stacklevel: int = 3) -> None:
    """Counts the members of ``fitness`` that are not finite into ``owner._num_nonfinite`` and
    warns once per ``owner`` (a :class:`NonFiniteFitnessWarning` naming its class and
    ``owner.generation``).  Eager tensors only: a ``tell`` traced inside a user's
    ``tf.function`` applies the same rule silently.  ``stacklevel`` is passed to :func:`warnings.warn` as is
    (3: the caller of the method that calls this function)."""
    if not is_eager_tensor(fitness):
        return  # symbolic (tell traced inside a user's tf.function): nothing to count here
    f = fitness._numpy()
    with np.errstate(over="ignore", invalid="ignore"):  # huge finite values: overflow falls through to the count
        square_sum = f.dot(f)
    if math.isfinite(square_sum):  # the cheapest all-finite test (~1 us)
        return
    bad = int(f.size - np.count_nonzero(np.isfinite(f)))
    if bad == 0:  # finite values whose squares overflowed
        return
    owner._num_nonfinite = getattr(owner, "_num_nonfinite", 0) + bad
    if not getattr(owner, "_nonfinite_warned", False):
        owner._nonfinite_warned = True
        import warnings

        warnings.warn(
            f"{_public_name(type(owner))}: {bad} of {f.size} members had non-finite fitness (NaN or +-inf) "
            f"at generation {int(owner.generation.numpy())}; they count as the worst members.  This "
            "warning is shown once per algorithm; `num_nonfinite` keeps counting.",
            NonFiniteFitnessWarning, stacklevel=stacklevel)


class Algorithm(tf.Module):
    """Base class of every ask/tell algorithm on flat parameter vectors.

    Subclasses implement ``_ask() -> [P, D]`` and ``_tell(x, fitness)`` with
    TensorFlow ops only, and the ``mean`` property; this class compiles them
    once (fixed signatures), validates inputs with clear errors, sanitizes
    fitness (every non-finite value becomes the worst, ``-inf``), warns once
    per object about non-finite fitness and counts traces (``self.traces``).
    Subclasses keep all state in ``tf.Variable`` attributes.

    A wrong constructor argument raises :class:`ConfigError` naming the class,
    the arguments it accepts (:meth:`accepted_arguments`) and close matches.

    Attributes:
      num_dims: D, the length of one parameter vector.
      popsize: P, the number of members returned by ``ask``.
      dtype: the float dtype (``tf.float32`` or ``tf.float64``) of the state,
        of ``ask()``'s population, of the population and the fitness ``tell``
        takes (other float dtypes are cast) and of ``best``.
      seeds: the :class:`SeedStream` used for all randomness.
      num_nonfinite: how many members had non-finite fitness so far (counted
        when ``tell`` runs eagerly; not checkpointed).
    """

    #: whether ``_ask``/``_tell`` may be XLA-compiled (``jit_compile_ask`` /
    #: ``jit_compile_tell`` override it per function, e.g. XLA for a tell
    #: without random ops and graph mode for an ask full of random draws).
    jit_compile: bool = False
    jit_compile_ask: bool | None = None
    jit_compile_tell: bool | None = None
    #: the update relies on what ``ask`` stored (samples, evaluation history),
    #: so ``tell`` accepts only the population the last ``ask`` returned
    #: (:meth:`_last_asked`), rows in the same order; any other raises
    #: :class:`AskTellError` and changes nothing.
    tell_needs_last_ask: bool = False
    #: with ``tell_needs_last_ask``: ``tell`` spends the samples ``ask`` stored (beside a
    #: state that ``tell`` changes), so a second ``tell`` of the same population before the
    #: next ``ask`` is refused too (as pycma refuses a second ``tell`` per iteration); the
    #: variable ``ask_pending`` says whether the last ``ask`` is still to be told.
    tell_once_per_ask: bool = False
    #: a class whose constructor receives this class's ``**kwargs`` (for
    #: :meth:`accepted_arguments`)
    _kwargs_forwarded_to = None

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        init = cls.__dict__.get("__init__")
        if init is not None and not getattr(init, "_tfevo_checked_init", False):
            cls.__init__ = _checked_init(cls, init)

    @classmethod
    def accepted_arguments(cls, resolved_only: bool = False):
        """The constructor's keyword arguments, in order (through ``**kwargs`` forwarding).

        With ``resolved_only``, ``None`` when some ``**kwargs`` go to a callee
        that cannot be inspected (it checks them itself).
        """
        names: list[str] = []
        for klass in cls.__mro__:
            init = klass.__dict__.get("__init__")
            if init is None or klass is tf.Module or klass is object:
                continue
            params = list(inspect.signature(inspect.unwrap(init)).parameters.values())[1:]
            for p in params:
                if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name not in names:
                    names.append(p.name)
            if not any(p.kind is p.VAR_KEYWORD for p in params):
                return names
            target = klass.__dict__.get("_kwargs_forwarded_to")
            if target is not None:
                return names + [n for n in target.accepted_arguments() if n not in names]
        return None if resolved_only else names

    def __init__(self, num_dims: int, popsize: int, seed: int = 0, name: str | None = None, dtype="float32"):
        super().__init__(name=name)
        self.dtype = check_dtype(dtype)
        if int(num_dims) < 1:
            raise ConfigError(f"num_dims must be >= 1, got {num_dims}")
        if int(popsize) < 1:
            raise ConfigError(f"popsize must be >= 1, got {popsize}")
        self.num_dims = int(num_dims)
        self.popsize = int(popsize)
        self.seeds = SeedStream(seed)
        self.generation = tf.Variable(0, dtype=tf.int64, trainable=False, name="generation")
        if self.tell_once_per_ask:
            self.ask_pending = tf.Variable(False, trainable=False, name="ask_pending")
        self._trace_counter = TraceCounter()
        self._ask_fn = None
        self._tell_fn = None
        self._ask_call = None  # FastCall of _ask_fn / _tell_fn (rebuilt if those change)
        self._tell_call = None
        self._num_nonfinite = 0
        self._nonfinite_warned = False

    # -- public API ---------------------------------------------------------
    @property
    def traces(self) -> dict[str, int]:
        """How many times ``ask`` and ``tell`` were traced."""
        return dict(self._trace_counter.counts)

    @property
    def stop_reasons(self) -> list[str]:
        """Names of the termination criteria met at the last ``tell`` (none for
        algorithms without stop criteria)."""
        return []

    @property
    def num_nonfinite(self) -> int:
        """How many members had non-finite fitness in the ``tell`` calls made eagerly so far."""
        return self._num_nonfinite

    def ask(self) -> tf.Tensor:
        """Returns the next population, ``[popsize, num_dims]`` in :attr:`dtype`."""
        if self._ask_fn is None:
            def ask_body():
                x = self._ask()
                if not self.tell_once_per_ask:
                    return x
                with tf.control_dependencies([x]):
                    self.ask_pending.assign(True)
                    return tf.identity(x)

            self._ask_fn = tf.function(
                self._trace_counter.wrap("ask", ask_body),
                input_signature=[],
                jit_compile=self.jit_compile if self.jit_compile_ask is None else self.jit_compile_ask,
            )
        call = self._ask_call
        if call is None or call.fn is not self._ask_fn:
            call = self._ask_call = FastCall(self._ask_fn)
        return call()

    def tell(self, x, fitness) -> None:
        """Updates the state from a population (``[popsize, num_dims]``, cast to
        :attr:`dtype`) and its fitness (``[popsize]``, higher is better).

        Non-finite fitness (NaN, +inf, -inf) counts as the worst value.
        """
        x = check_population(x, (self.popsize, self.num_dims), "population", self.dtype)
        fitness = check_fitness(fitness, self.popsize, dtype=self.dtype)
        self._note_nonfinite(fitness)
        if self._tell_fn is None:
            check = self.tell_needs_last_ask

            def tell_body(x, fitness):
                def learn():
                    self._tell(x, sanitize_fitness(fitness))
                    self.generation.assign_add(1)
                    return tf.constant(True)

                def update():
                    # a generation in which every member failed carries no information:
                    # the state stays as it is (only the generation counter advances)
                    return tf.cond(tf.reduce_any(tf.math.is_finite(fitness)), learn, skip)

                def skip():
                    self.generation.assign_add(1)
                    return tf.constant(True)

                if not check:
                    return update()

                same = tf.reduce_all(tf.equal(x, self._last_asked()))
                if not self.tell_once_per_ask:
                    return tf.cond(same, update, lambda: tf.constant(False))

                def update_once():
                    done = update()
                    with tf.control_dependencies([done]):
                        self.ask_pending.assign(False)  # told: the samples are spent until the next ask
                        return tf.identity(done)

                return tf.cond(same & self.ask_pending, update_once, lambda: tf.constant(False))

            self._tell_fn = tf.function(
                self._trace_counter.wrap("tell", tell_body),
                input_signature=[
                    tf.TensorSpec([self.popsize, self.num_dims], self.dtype),
                    tf.TensorSpec([self.popsize], self.dtype),
                ],
                jit_compile=self.jit_compile if self.jit_compile_tell is None else self.jit_compile_tell,
            )
        call = self._tell_call
        if call is None or call.fn is not self._tell_fn:
            call = self._tell_call = FastCall(self._tell_fn)
        ok = call(x, fitness)
        if self.tell_needs_last_ask:
            self._raise_if_not_last_ask(ok)

    def _last_asked(self) -> tf.Tensor:
        """The population the last ``ask`` returned (for ``tell_needs_last_ask``)."""
        raise AskTellError(f"{type(self).__name__} sets tell_needs_last_ask but does not keep the last ask")

    def _raise_if_not_last_ask(self, ok) -> None:
        name = _public_name(type(self))
        check_last_ask(ok, f"{name}.tell: the population is not the one the last ask() returned (in the same "
                           "order), or it was told already; this algorithm's update uses what ask() stored, so "
                           "tell it exactly that population, once.  Nothing was updated.",
                       f"{name}.tell: the population is not the one the last ask() returned; nothing was updated")

    def _note_nonfinite(self, fitness) -> None:
        """Counts members with non-finite fitness (eager calls) and warns once per object."""
        note_nonfinite(self, fitness, stacklevel=4)

    @property
    def best(self) -> tuple[tf.Tensor, tf.Tensor]:
        """(best parameters seen, its fitness); subclasses track these."""
        return self.best_params, self.best_fitness

    def _init_best(self):
        self.best_params = tf.Variable(tf.zeros([self.num_dims], self.dtype), trainable=False, name="best_params")
        self.best_fitness = tf.Variable(-np.inf, dtype=self.dtype, trainable=False, name="best_fitness")

    def _update_best(self, x: tf.Tensor, fitness: tf.Tensor) -> None:
        """Call from ``_tell`` with sanitized fitness to keep the best member."""
        i = tf.argmax(fitness, output_type=tf.int32)
        f_i = tf.gather(fitness, i)  # gather (not x[i]): no XLA recompilation per population
        better = f_i > self.best_fitness
        self.best_params.assign(tf.where(better, tf.gather(x, i), self.best_params))
        self.best_fitness.assign(tf.where(better, f_i, self.best_fitness))
