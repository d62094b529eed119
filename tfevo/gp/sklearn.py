"""scikit-learn estimators over the tensorized GP engine.

:class:`SymbolicRegressor` and :class:`SymbolicClassifier` are ordinary
scikit-learn estimators: every setting is a constructor argument (so
``get_params`` / ``set_params`` / ``clone`` / grid searches see all of
them), input is checked with scikit-learn's own validation (NaN/inf, empty
or sparse data, feature counts and names are refused with scikit-learn's
errors), and a fitted estimator pickles, deep-copies and round-trips
through joblib.  The best program is kept as NumPy arrays; the engine
(``engine_``, the last :class:`~tfevo.gp.GeneticProgramming` run) holds
TensorFlow state and is not pickled (it is ``None`` after unpickling).
"""

from __future__ import annotations

import inspect
import numbers
import warnings

import numpy as np
import tensorflow as tf
from sklearn.base import BaseEstimator, ClassifierMixin, ClassNamePrefixFeaturesOutMixin, RegressorMixin, TransformerMixin
from sklearn.utils.class_weight import compute_sample_weight
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import _check_sample_weight, check_is_fitted, validate_data

from tfevo.core import ConfigError, check_int
from tfevo.gp.algorithm import GeneticProgramming, GPConfig
from tfevo import kernels
from tfevo.gp.evaluate import evaluate, mse
from tfevo.gp.generation import DEFAULT_DEPTH
from tfevo.gp.metrics import (CLASSIFICATION_FITNESS, Fitness, check_metric, classification_raw, custom_scores,
                              greater_is_better, is_gplearn_fitness, regression_loss, row_weights)
from tfevo.gp.sklearn_run import (check_best_program, evolve, final_program, hall_of_fame, least_correlated,
                                  operator_mix, point_replace, run_state)
from tfevo.gp.trees import FunctionSet, Trees, to_gplearn

__all__ = ["SymbolicRegressor", "SymbolicClassifier", "SymbolicTransformer", "SymbolicComponent"]


def _function_names(function_set) -> list:
    """Function names from a sequence or a comma-separated string."""
    if isinstance(function_set, str):
        names = [n.strip() for n in function_set.split(",") if n.strip()]
    else:
        try:
            names = list(function_set)
        except TypeError:
            raise ConfigError(f"function_set must be a sequence of function names or a comma-separated "
                              f"string, got {function_set!r}") from None
    for n in names:
        if type(n).__module__.startswith("gplearn.") and hasattr(n, "arity"):
            raise ConfigError(
                f"function_set: {getattr(n, 'name', n)!r} is a gplearn make_function object, which runs NumPy "
                f"on the host; tfevo evaluates whole populations as TensorFlow programs, so a custom "
                f"function needs a TensorFlow body: tfevo.gp.register_function({getattr(n, 'name', 'name')!r}, "
                f"arity={getattr(n, 'arity', '?')}, tf_fn=..., np_fn=<your NumPy function>) once, then put its "
                f"name in function_set")
        if not isinstance(n, str):
            raise ConfigError(f"function_set entries must be function names (str), got {n!r}")
    FunctionSet(names)  # unknown names -> ConfigError naming them and the known ones
    return names


def _finite32(a, what):
    """Refuses values that overflow to inf when stored as float32."""
    if not np.all(np.isfinite(a)):
        raise ValueError(f"Input {what} contains infinity or a value too large for dtype('float32').")
    return a


def _weights(sample_weight, X):
    """``sample_weight`` checked as scikit-learn checks it (length, finite,
    non-negative, not all zero) as a float64 tensor, or None when there are
    none or all are equal (then the run is the unweighted one, bit for bit)."""
    if sample_weight is None:
        return None
    w = _check_sample_weight(sample_weight, X, dtype=np.float64, ensure_non_negative=True)
    return None if np.all(w == w[0]) else tf.constant(w, tf.float64)


def check_n_jobs(n_jobs):
    """gplearn's ``n_jobs`` (None or a nonzero int, joblib's convention)."""
    if n_jobs is not None and (isinstance(n_jobs, bool) or not isinstance(n_jobs, numbers.Integral) or n_jobs == 0):
        raise ConfigError(f"n_jobs must be None or a nonzero integer (joblib's convention, -1 = all cores), "
                          f"got {n_jobs!r}")


def _base_arguments(args: dict) -> dict:
    """A subclass constructor's arguments (its ``locals()``) that :class:`_BaseSymbolic` takes."""
    names = inspect.signature(_BaseSymbolic.__init__).parameters
    return {k: v for k, v in args.items() if k in names and k != "self"}


class _BaseSymbolic(BaseEstimator):
    """Shared settings and machinery (see :class:`SymbolicRegressor`)."""

    _k = 1

    def __init__(self, *, population_size=1000, generations=20, max_len=128,
                 function_set=("add", "sub", "mul", "div"), const_range=(-1.0, 1.0), constants=(),
                 p_const="auto", init_depth=DEFAULT_DEPTH, init_method="half and half", grow_p_func="deap",
                 selection="tournament",
                 tournament_size=20, truncation_ratio=0.2, rank_pressure=1.5, survival_rate=1.0,
                 elite=1, elite_fitness="raw", parsimony_coefficient=0.001, p_crossover=0.9,
                 p_subtree_mutation=0.01,
                 p_hoist_mutation=0.01, p_point_mutation=0.01, p_point_replace=0.05, operators=None,
                 crossover_p_func=0.9, subtree_depth=None, p_point=None, p_leaf=0.1, const_sigma=0.1,
                 p_multi_constant=0.5, hoist_root_only=False, demote_duplicates=True,
                 stopping_criteria=0.0, max_samples=1.0,
                 warm_start=False, feature_names=None, jit_compile=False, use_op=None, random_state=None,
                 verbose=0, n_jobs=1, low_memory=False):
        self.population_size = population_size
        self.generations = generations
        self.max_len = max_len
        self.function_set = function_set
        self.const_range = const_range
        self.constants = constants
        self.p_const = p_const
        self.init_depth = init_depth
        self.init_method = init_method
        self.grow_p_func = grow_p_func
        self.selection = selection
        self.tournament_size = tournament_size
        self.truncation_ratio = truncation_ratio
        self.rank_pressure = rank_pressure
        self.survival_rate = survival_rate
        self.elite = elite
        self.elite_fitness = elite_fitness
        self.parsimony_coefficient = parsimony_coefficient
        self.p_crossover = p_crossover
        self.p_subtree_mutation = p_subtree_mutation
        self.p_hoist_mutation = p_hoist_mutation
        self.p_point_mutation = p_point_mutation
        self.p_point_replace = p_point_replace
        self.operators = operators
        self.crossover_p_func = crossover_p_func
        self.subtree_depth = subtree_depth
        self.p_point = p_point
        self.p_leaf = p_leaf
        self.const_sigma = const_sigma
        self.p_multi_constant = p_multi_constant
        self.hoist_root_only = hoist_root_only
        self.demote_duplicates = demote_duplicates
        self.stopping_criteria = stopping_criteria
        self.max_samples = max_samples
        self.warm_start = warm_start
        self.feature_names = feature_names
        self.jit_compile = jit_compile
        self.use_op = use_op
        self.random_state = random_state
        self.verbose = verbose
        self.n_jobs = n_jobs
        self.low_memory = low_memory

    # -- settings -> engine ------------------------------------------------
    def _seed(self) -> int:
        rs = self.random_state
        if rs is None:
            return int(np.random.randint(0, 2**31 - 1))
        if isinstance(rs, np.random.RandomState):
            return int(rs.randint(0, 2**31 - 1))
        if isinstance(rs, numbers.Integral) and not isinstance(rs, bool) and 0 <= int(rs) < 2**31:
            return int(rs)
        raise ConfigError(f"random_state must be None, an integer in [0, 2**31) or a "
                          f"numpy RandomState, got {rs!r}")

    def _config(self, num_vars: int, num_outputs: int) -> GPConfig:
        """Checks every setting (before any data work) and builds the GPConfig."""
        check_int(self.generations, "generations", 1)
        check_int(self.population_size, "population_size", 2)
        check_int(self.max_len, "max_len", 3)
        check_n_jobs(self.n_jobs)
        if not isinstance(self.low_memory, (bool, np.bool_)):
            raise ConfigError(f"low_memory must be a bool, got {self.low_memory!r}")
        kernels.check_use_op(self.use_op)
        if not isinstance(self, TransformerMixin):  # the transformer keeps components, not one program
            check_best_program(self.best_program)
        names = _function_names(self.function_set)
        mix = operator_mix(self)
        p_point = point_replace(self)
        init_method = "half_and_half" if self.init_method == "half and half" else self.init_method
        if self.feature_names is not None:
            names_ok = not isinstance(self.feature_names, str) and all(isinstance(n, str) for n in self.feature_names)
            if not names_ok:
                raise ConfigError(f"feature_names must be None or a sequence of str, got {self.feature_names!r}")
            if len(self.feature_names) != num_vars:
                raise ValueError(f"The supplied feature_names has {len(self.feature_names)} names but X has "
                                 f"{num_vars} features")
        need = 3 * num_outputs - 1 + num_outputs
        if num_outputs > 1 and int(self.max_len) < need:
            raise ConfigError(f"max_len={self.max_len} is too small for {num_outputs} classes "
                              f"(multi-output trees need max_len >= {need})")
        kw = dict(popsize=int(self.population_size), max_len=int(self.max_len), num_vars=num_vars,
                  num_outputs=num_outputs, functions=tuple(names), p_const=self.p_const,
                  const_range=None if self.const_range is None else tuple(self.const_range),
                  constants=tuple(self.constants or ()), init_depth=tuple(self.init_depth),
                  init_method=init_method, grow_p_func=self.grow_p_func, selection=self.selection,
                  tournament_size=self.tournament_size, truncation_ratio=self.truncation_ratio,
                  rank_pressure=self.rank_pressure, survival_rate=self.survival_rate, elite=self.elite,
                  elite_fitness=self.elite_fitness,
                  parsimony=self.parsimony_coefficient, crossover_p_func=self.crossover_p_func,
                  subtree_depth=None if self.subtree_depth is None else tuple(self.subtree_depth),
                  operators=mix, p_point=p_point, p_leaf=self.p_leaf, const_sigma=self.const_sigma,
                  p_multi_constant=self.p_multi_constant, hoist_root_only=bool(self.hoist_root_only),
                  demote_duplicates=self.demote_duplicates,
                  jit_compile=bool(self.jit_compile))
        try:
            cfg = GPConfig(**kw)
            cfg.validate()
        except (TypeError, ValueError) as e:
            if isinstance(e, ConfigError):
                raise
            raise ConfigError(f"invalid setting: {e}") from e
        return cfg

    def _evolve_regression(self, X, y, sample_weight, metric, keep_population=False):
        """The regressor's and the transformer's run: validates ``X``, ``y``
        and ``sample_weight``, evolves programs under the regression
        ``metric`` (a checked name or :class:`~tfevo.gp.Fitness`) and returns
        ``(engine, X tensor, y tensor, lower_is_better)``."""
        X, y = validate_data(self, X, y, dtype=np.float32, y_numeric=True)
        _finite32(X, "X")
        y = _finite32(np.asarray(y, np.float32).reshape(-1), "y")
        sw = _weights(sample_weight, X)
        lower = not greater_is_better(metric)
        cfg = self._config(X.shape[1], 1)
        xt, yt = tf.constant(X), tf.constant(y)
        fs = FunctionSet(cfg.functions)
        crit = self.stopping_criteria
        if not lower and isinstance(crit, numbers.Real) and not isinstance(crit, bool) and crit <= 0.0:
            warnings.warn(f"stopping_criteria={crit!r} with the greater-is-better metric {metric!r} stops after "
                          f"the first generation (gplearn's rule: stop once the best score is >= it); pass "
                          f"stopping_criteria=None or a reachable score such as 1.0 for pearson/spearman")

        worst = tf.constant(np.inf if lower else -np.inf, tf.float32)

        def score(trees, mask):
            raw = tf.cast(regression_loss(trees, xt, yt, metric, fs, self.use_op, mask, sw), tf.float32)
            return tf.where(tf.math.is_finite(raw), raw, worst)  # a custom score beyond float32 is no winner

        gp = evolve(self, cfg, score, len(y), lower_is_better=lower, keep_population=keep_population)
        self.history_ = list(self.run_details_["best_fitness"])
        return gp, xt, yt, lower

    def _store(self, gp: GeneticProgramming):
        self.program_, fit = final_program(self, gp)
        self.engine_ = gp
        self._run_state = None
        self._eval_names = list(gp.eval_functions.names)
        return float(fit)

    # -- fitted-model helpers ------------------------------------------------
    def _outputs(self, X):
        """Validated X -> tree outputs ``[K, n]`` (``[n]`` for K == 1)."""
        check_is_fitted(self, "program_")
        X = validate_data(self, X, reset=False, dtype=np.float32)
        _finite32(X, "X")
        y = evaluate(self.program_, X, self._k, self._eval_names, self.use_op).numpy()[0]
        return y

    def _keep_generation(self, gp, trees, raw):
        """Appends one evaluated generation to ``_programs`` (gplearn's list
        of generations, here every program of each, 12 bytes per node up to
        the generation's longest tree); with ``low_memory`` the previous one
        becomes None."""
        programs = self.__dict__.setdefault("_programs", [])
        if self.low_memory and programs:
            programs[-1] = None
        width = max(1, int(np.max(trees.sizes[:, 0].numpy())))  # the padding past the longest tree is not kept
        programs.append(SymbolicPopulation(type(trees)(*(np.array(a[:, :width]) for a in trees)), raw,
                                           self._var_names(),
                                                 list(gp.eval_functions.names), self.use_op, gp.config.num_outputs))

    @property
    def _program(self):
        """gplearn's fitted program: ``program_`` as a :class:`SymbolicComponent`
        (``str`` in gplearn's syntax, ``raw_fitness_``, ``oob_fitness_``,
        ``length_``, ``execute``)."""
        check_is_fitted(self, "program_")
        rd = getattr(self, "run_details_", {})
        oob = rd["best_oob_fitness"][-1] if rd.get("best_oob_fitness") and self.best_program == "last_generation" \
            else np.nan
        return SymbolicComponent(self.program_, self.best_fitness_, self._var_names(), self._eval_names, self.use_op,
                                 k=self._k, oob_fitness=oob)

    def _var_names(self):
        names = self.feature_names if self.feature_names is not None else getattr(self, "feature_names_in_", None)
        return None if names is None else [str(n) for n in names]

    def __getstate__(self):
        state = super().__getstate__()
        state = dict(state)
        if state.get("engine_") is not None:
            # TensorFlow state: kept as NumPy arrays (for a later warm start), rebuilt on demand
            state["_run_state"] = run_state(state["engine_"])
            state["engine_"] = None
        return state

    def __str__(self):
        if not hasattr(self, "program_"):
            return super().__repr__()
        return to_gplearn(self.program_, var_names=self._var_names())

    def to_sympy(self, simplify=True, **kw):
        """The best program as a sympy expression (a list of expressions, one
        per class, for a classifier), with ``feature_names_in_`` as symbol
        names when the training data had them.

        ``simplify=False`` returns the literal translation at once;
        otherwise simplification is bounded (see
        :func:`tfevo.gp.export.to_sympy` for ``max_simplify_nodes`` and
        ``simplify_timeout``).  ``exact=True`` keeps the protected
        operators' guards (``Piecewise``) and full-precision constants, so
        the expression computes what ``predict`` computes; by default it is
        written for reading (``div`` as ``a/b``, 6-digit constants).
        """
        from tfevo.gp.export import to_sympy

        check_is_fitted(self, "program_")
        return to_sympy(self.program_, 0, self._k, simplify, var_names=self._var_names(), **kw)

    def to_keras(self, model=True):
        """The best program as a Keras model (or layer): the regressor's
        prediction ``[n]``, the classifier's class scores
        ``[n, n_classes]`` (argmax = ``predict``; not probabilities).  The
        model is made of Keras' own operations, so a saved ``.keras`` file
        loads with plain Keras (see :func:`tfevo.gp.export.to_keras`); the
        layer of ``model=False`` needs ``import tfevo.gp`` first."""
        from tfevo.gp.export import to_keras

        check_is_fitted(self, "program_")
        return to_keras(self.program_, 0, self._k, self.n_features_in_, model=model)


class SymbolicRegressor(RegressorMixin, _BaseSymbolic):
    """Symbolic regression with tensorized GP (gplearn-like API).

    Example:

    >>> X = np.random.uniform(-1, 1, (200, 2)).astype(np.float32)
    >>> y = X[:, 0] * X[:, 1] + X[:, 0]
    >>> est = SymbolicRegressor(population_size=500, generations=10, random_state=0).fit(X, y)
    >>> est.score(X, y) > 0.9
    True

    Args (all keyword-only; see :class:`~tfevo.gp.GPConfig` for the engine
    settings they map to):
      population_size, generations: ``P`` and the number of generations.
      max_len: ``L_max``, node budget of every tree.
      function_set: function names, a sequence or a comma-separated string
        (``"add,sub,mul"``).
      const_range, constants, p_const: leaves (ephemeral constants from
        ``const_range``, or the fixed ``constants``; ``p_const`` the
        probability of a constant leaf, default ``"auto"``: gplearn's
        ``1 / (n_features + 1)``).
      init_depth, init_method, grow_p_func: initial trees (``init_depth``
        includes both ends, as gplearn's; the default ``(2, 5)`` is one
        level shallower than gplearn's ``(2, 6)``, see docs/gp.md;
        ``grow_p_func`` is grow's probability of a function
        node, default ``"deap"``: ``n_functions / (n_functions +
        n_terminals)``; gplearn's rule ``"gplearn"``, ``min(1, (n_functions
        + 1) / (n_functions + n_features))``, recovers fewer Nguyen-1
        targets, see docs/gp.md; or a number).
      selection, tournament_size, truncation_ratio, rank_pressure,
      survival_rate, elite, parsimony_coefficient: selection
        (``parsimony_coefficient`` a number, default 0.001 as gplearn's, or
        ``"auto"``, gplearn's covariant parsimony recomputed every generation).
      p_crossover, p_subtree_mutation, p_hoist_mutation, p_point_mutation:
        gplearn's operator probabilities (.9, .01, .01, .01; the engine's
        ``crossover``, ``subtree``, ``hoist``, ``multi_point``).
      p_point_replace: per-node probability of gplearn's point mutation
        (``p_point`` is its older tfevo name).
      operators: ``{name: probability}`` of the operators gplearn lacks
        (``point``, ``insert``, ``delete``, ``constant``, ...).
      crossover_p_func, subtree_depth, p_leaf, const_sigma, p_multi_constant,
      hoist_root_only: operator parameters.
      elite_fitness: the elite's ranking: ``"raw"`` (default: the most
        accurate tree, whatever its length) or ``"selection"`` (the fitness
        gplearn's tournaments compare, with the parsimony penalty).
      demote_duplicates: parent selection ranks a program of the same raw
        fitness as a better one, or as an equally good shorter one, below
        every distinct program (default True; ``"error_and_length"``: equal
        fitness and length only; False: off, as gplearn).
      best_program: the fitted ``program_``: ``"last_generation"``
        (default, gplearn's: the best raw fitness of the last generation) or
        ``"all_time"`` (the best raw fitness of any generation).
      stopping_criteria: stop after the first generation whose best raw
        fitness reaches it (``<=`` for errors; None: never).
      max_samples: fraction of rows each tree is scored on per generation
        (out-of-bag fitness in ``run_details_``).
      warm_start: continue the stored run up to ``generations``.
      feature_names: names for ``str(est)`` / ``to_sympy()``.
      metric: gplearn's raw fitness: ``"mean absolute error"`` (the default,
        gplearn's), ``"mse"`` (the fastest: fused with evaluation), ``"rmse"`` (errors), ``"pearson"`` or ``"spearman"`` (gplearn's absolute
        weighted correlations, higher is better; ``predict`` returns the
        program's raw output, which such a fit only correlates with y), or
        a :func:`~tfevo.gp.make_fitness` metric.  ``stopping_criteria``
        compares ``>=`` for a higher-is-better metric, as in gplearn (so the
        default 0.0 stops after one generation there: give None or 1.0).
      jit_compile: XLA-compile the generation step.
      use_op: the C++ evaluator (:mod:`tfevo.kernels`): ``None`` where allowed,
        ``True`` required, ``False`` the pure-TensorFlow reference.
      random_state: None (the default, scikit-learn's convention: a fresh
        seed from NumPy's global random state at every fit), an int seed
        (same seed and data = same program, bit for bit) or a
        ``RandomState`` (each fit draws its seed from it).
      verbose: print the best fitness of each generation.
      n_jobs: gplearn's; accepted (None or a nonzero int) and without effect
        on the result: evaluation runs on TensorFlow's intra-op thread pool.
      low_memory: gplearn's: keep only the last generation in ``_programs``
        (default False: every generation).

    After ``fit``: ``program_`` (best tree, a one-row ``Trees`` of NumPy
    arrays), ``_program`` (gplearn's: it as a :class:`SymbolicComponent`),
    ``_programs`` (gplearn's list of generations, :class:`SymbolicPopulation`
    s), ``best_fitness_`` (its metric), ``best_mse_``, ``run_details_``
    (gplearn's per-generation lists), ``history_`` (best fitness per generation),
    ``n_features_in_``, ``feature_names_in_`` (when X had column names),
    ``engine_`` (the run; None after unpickling).
    """

    def __init__(self, *, population_size=1000, generations=20, max_len=128,
                 function_set=("add", "sub", "mul", "div"), const_range=(-1.0, 1.0), constants=(),
                 p_const="auto", init_depth=DEFAULT_DEPTH, init_method="half and half", grow_p_func="deap",
                 selection="tournament",
                 tournament_size=20, truncation_ratio=0.2, rank_pressure=1.5, survival_rate=1.0,
                 elite=1, elite_fitness="raw", parsimony_coefficient=0.001, p_crossover=0.9,
                 p_subtree_mutation=0.01,
                 p_hoist_mutation=0.01, p_point_mutation=0.01, p_point_replace=0.05, operators=None,
                 crossover_p_func=0.9, subtree_depth=None, p_point=None, p_leaf=0.1, const_sigma=0.1,
                 p_multi_constant=0.5, hoist_root_only=False, demote_duplicates=True, best_program="last_generation",
                 stopping_criteria=0.0, max_samples=1.0,
                 warm_start=False, feature_names=None, jit_compile=False, use_op=None, random_state=None,
                 verbose=0, n_jobs=1, low_memory=False, metric="mean absolute error"):
        super().__init__(**_base_arguments(locals()))
        self.best_program = best_program
        self.metric = metric

    def fit(self, X, y, sample_weight=None):
        """Evolves programs for ``generations`` generations (or, with
        ``warm_start``, continues the stored run up to ``generations``).
        ``sample_weight`` (``[n_samples]``, non-negative) weights every row's
        error, as gplearn's."""
        gp, xt, yt, lower = self._evolve_regression(X, y, sample_weight, check_metric(self.metric))
        fit = self._store(gp)
        self.best_fitness_ = -fit if lower else fit
        self.best_mse_ = float(mse(self.program_, xt, yt, gp.eval_functions, self.use_op).numpy()[0])
        return self

    def predict(self, X):
        """Predictions of the best program, ``[n_samples]``."""
        return self._outputs(X)


class SymbolicClassifier(ClassifierMixin, _BaseSymbolic):
    """Classification with multi-output GP trees (one output per class).

    ``fit(X, y)`` minimises the softmax cross-entropy of the outputs (the
    default ``fitness="crossentropy"``: gplearn's log loss, each row's loss
    clipped at ``-log(1e-15)`` as gplearn clips the probabilities; it trains
    the outputs as logits, so ``predict_proba`` and ROC AUC are meaningful;
    ``"crossentropy_unclipped"`` does not clip, so a confidently wrong row
    costs its whole margin); ``fitness="accuracy"`` maximises training accuracy
    instead, which leaves the scale of the outputs untrained (their
    probabilities often saturate at exactly 0 or 1).  ``predict`` returns the
    arg-max class label, ``predict_proba`` the softmax of the outputs,
    ``decision_function`` the output difference ``[n]`` for two classes
    (positive = ``classes_[1]``) and the outputs ``[n, n_classes]``
    otherwise.  A NaN output counts as the lowest score.  The other
    arguments are those of :class:`SymbolicRegressor` (``stopping_criteria``
    compares with the accuracy, ``>=``, or the cross-entropy, ``<=``; default
    None; ``elite_fitness`` defaults to ``"selection"``: the elite is the tree
    gplearn's tournaments rank first, log loss plus the parsimony penalty,
    which keeps the returned programs shorter on small data sets; ``"raw"``
    keeps the most accurate tree whatever its length).  ``best_fitness_`` is the best tree's accuracy or cross-entropy.
    ``class_weight`` (None, ``"balanced"`` or ``{label: weight}``, as
    gplearn's) multiplies the weight of every row of a class, and with it
    any ``sample_weight`` given to ``fit``.  gplearn's ``metric`` is
    ``"log loss"`` (the default: ``fitness`` decides) or a make_fitness
    metric (gplearn's or tfevo's; two classes) scored on gplearn's
    probability of ``classes_[1]``, ``predict_proba(X)[:, 1]``; gplearn's
    ``transformer`` is ``"sigmoid"`` only.
    """

    def __init__(self, *, population_size=1000, generations=20, max_len=128,
                 function_set=("add", "sub", "mul", "div"), const_range=(-1.0, 1.0), constants=(),
                 p_const="auto", init_depth=DEFAULT_DEPTH, init_method="half and half", grow_p_func="deap",
                 selection="tournament",
                 tournament_size=20, truncation_ratio=0.2, rank_pressure=1.5, survival_rate=1.0,
                 elite=1, elite_fitness="selection", parsimony_coefficient=0.001, p_crossover=0.9,
                 p_subtree_mutation=0.01,
                 p_hoist_mutation=0.01, p_point_mutation=0.01, p_point_replace=0.05, operators=None,
                 crossover_p_func=0.9, subtree_depth=None, p_point=None, p_leaf=0.1, const_sigma=0.1,
                 p_multi_constant=0.5, hoist_root_only=False, demote_duplicates=True, best_program="last_generation",
                 stopping_criteria=None, max_samples=1.0,
                 warm_start=False, feature_names=None, jit_compile=False, use_op=None, random_state=None,
                 verbose=0, n_jobs=1, low_memory=False, fitness="crossentropy", class_weight=None,
                 metric="log loss", transformer="sigmoid"):
        super().__init__(**_base_arguments(locals()))
        self.best_program = best_program
        self.fitness = fitness
        self.class_weight = class_weight
        self.metric = metric
        self.transformer = transformer

    def fit(self, X, y, sample_weight=None):
        """Evolves multi-output programs for ``generations`` generations;
        ``sample_weight`` (``[n_samples]``, non-negative) weights every row's
        loss or hit."""
        from tfevo.problems.classification import Classification

        X, y = validate_data(self, X, y, dtype=np.float32)
        _finite32(X, "X")
        check_classification_targets(y)
        if self.class_weight is not None:  # gplearn's rule: the class weight multiplies the sample weight
            cw = compute_sample_weight(self.class_weight, y)
            sample_weight = cw if sample_weight is None else \
                cw * _check_sample_weight(sample_weight, X, dtype=np.float64, ensure_non_negative=True)
        sw = _weights(sample_weight, X)
        classes, lab = np.unique(y, return_inverse=True)
        if len(classes) < 2:
            raise ValueError(f"{type(self).__name__} needs samples of at least 2 classes in the data, "
                             f"but the data contains only one class: {classes[0]!r}")
        if self.fitness not in CLASSIFICATION_FITNESS:
            raise ConfigError(f"fitness must be one of {', '.join(map(repr, CLASSIFICATION_FITNESS))}, "
                              f"got {self.fitness!r}")
        metric = self._gplearn_metric()
        k = len(classes)
        if metric is not None and k != 2:
            raise ConfigError(f"metric={self.metric!r} (a make_fitness metric) scores gplearn's binary "
                              f"probabilities, but y has {k} classes; use fitness= for more than two classes")
        cfg = self._config(X.shape[1], k)
        if self.warm_start and hasattr(self, "classes_") and not np.array_equal(classes, self.classes_) \
                and getattr(self, "program_", None) is not None:
            raise ValueError(f"warm_start cannot continue the stored run on other classes "
                             f"({list(self.classes_)!r} -> {list(classes)!r}); set warm_start=False")
        kind = "accuracy" if self.fitness == "accuracy" else "crossentropy"
        prob = Classification(X, lab.astype(np.int32), k, kind, functions=tuple(cfg.functions), use_op=self.use_op)

        def score(trees, mask):
            if metric is None:
                return classification_raw(prob.outputs(trees), prob.labels, self.fitness, mask, sw)
            s = tf.cast(prob.outputs(trees), tf.float64)  # gplearn's transformer: sigmoid of the program output
            p1 = tf.sigmoid(s[:, 1] - s[:, 0])
            return tf.cast(custom_scores(metric, p1, tf.cast(prob.labels, tf.float64), mask, sw), tf.float32)

        lower = self.fitness != "accuracy" if metric is None else not metric.greater_is_better
        gp = evolve(self, cfg, score, len(lab), lower_is_better=lower)
        self.classes_ = classes
        self._k = k
        self.history_ = list(self.run_details_["best_fitness"])
        fit = self._store(gp)
        self.best_fitness_ = -fit if lower else fit
        return self

    def _gplearn_metric(self):
        """gplearn's ``metric`` and ``transformer``: None when they leave the
        fitness to ``fitness`` (``"log loss"`` and ``"sigmoid"``, gplearn's
        defaults), or the make_fitness metric that replaces it."""
        tr = self.transformer
        if not (isinstance(tr, str) and tr == "sigmoid"):
            raise ConfigError(
                f"transformer must be 'sigmoid' (gplearn's default), got {tr!r}: the classifier evolves one "
                f"output per class and its probabilities are their softmax (for two classes the sigmoid of the "
                f"output difference, gplearn's 'sigmoid'); another transformer, such as a make_function one, "
                f"is not supported")
        m = self.metric
        if isinstance(m, str) and m == "log loss":
            return None
        if isinstance(m, Fitness) or is_gplearn_fitness(m):
            if self.fitness != "crossentropy":
                raise ConfigError(f"metric={m!r} and fitness={self.fitness!r} both set the classifier's fitness "
                                  f"(metric is gplearn's name); give one of them")
            return check_metric(m)
        raise ConfigError(f"metric must be 'log loss' (gplearn's; the same as fitness='crossentropy') or a "
                          f"make_fitness(...) metric (scored on gplearn's sigmoid probability of classes_[1]), "
                          f"got {m!r}; tfevo's other fitnesses are set with fitness="
                          f"{', '.join(map(repr, CLASSIFICATION_FITNESS))}")

    def _scores(self, X):
        """Class scores ``[n, K]`` (float64) with NaN as -inf."""
        s = np.asarray(self._outputs(X), np.float64).T
        return np.where(np.isnan(s), -np.inf, s)

    @staticmethod
    def _binary(s):
        """Two-class decision ``s1 - s0``; equal infinite scores are a tie (0)."""
        with np.errstate(invalid="ignore"):
            d = s[:, 1] - s[:, 0]
        return np.where(np.isnan(d), 0.0, d)

    def decision_function(self, X):
        """``[n]`` (two classes: score of ``classes_[1]`` minus that of
        ``classes_[0]``) or ``[n, n_classes]`` class scores."""
        s = self._scores(X)
        return self._binary(s) if s.shape[1] == 2 else s

    def predict_proba(self, X):
        """Class probabilities: the logistic of the decision function (two
        classes) or the softmax of the class scores."""
        s = self._scores(X)
        if s.shape[1] == 2:
            with np.errstate(over="ignore"):
                p1 = 1.0 / (1.0 + np.exp(-self._binary(s)))
            return np.stack([1.0 - p1, p1], axis=1)
        m = s.max(axis=1, keepdims=True)
        with np.errstate(invalid="ignore", over="ignore"):
            e = np.exp(s - np.where(np.isfinite(m), m, 0.0))
        e = np.where(np.isposinf(m), np.isposinf(s).astype(np.float64), e)  # +inf scores share it all
        e = np.where(np.isneginf(m), 1.0, e)  # no usable score: uniform
        return e / e.sum(axis=1, keepdims=True)

    def predict(self, X):
        """Predicted class labels."""
        s = self._scores(X)
        if s.shape[1] == 2:
            return self.classes_[(self._binary(s) > 0).astype(int)]
        return self.classes_[np.argmax(s, axis=1)]


#: the metrics of :class:`SymbolicTransformer` besides a make_fitness one.
TRANSFORMER_METRICS = ("pearson", "spearman")


def _count(name, value, lo, hi, hi_name):
    """``value`` (None = ``hi``) as an int in ``[lo, hi]``, or a ConfigError."""
    if value is None:
        return hi
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not lo <= int(value) <= hi:
        raise ConfigError(f"{name} must be None or an integer in [{lo}, {hi}] ({hi_name}={hi}), got {value!r}")
    return int(value)


def _position(i, n: int, what: str) -> int:
    """Index ``i`` (negative counts from the end) of ``n`` items, or an IndexError."""
    if isinstance(i, bool) or not isinstance(i, numbers.Integral) or not -n <= int(i) < n:
        raise IndexError(f"{what} index {i!r} out of range for {n} {what}s")
    return int(i) % n


class SymbolicComponent:
    """One fitted component of a :class:`SymbolicTransformer` (``est[i]``),
    the counterpart of a gplearn ``_Program``: ``str()`` is its formula
    (with the transformer's feature names), ``execute(X)`` its output
    ``[n]`` (float64), ``to_sympy()`` its sympy expression, ``raw_fitness_``
    and ``length_`` as gplearn's, ``program`` the one-row ``Trees``."""

    def __init__(self, program, raw_fitness, var_names, eval_names, use_op, k=1, oob_fitness=np.nan):
        self.program = program
        self.raw_fitness_ = float(raw_fitness)
        self.oob_fitness_ = float(oob_fitness)
        self.length_ = int(program.sizes[0, 0])
        self._var_names = var_names
        self._eval_names = eval_names
        self._use_op = use_op
        self._k = int(k)

    def __str__(self):
        return to_gplearn(self.program, var_names=self._var_names)

    def __repr__(self):
        return f"SymbolicComponent({self}, raw_fitness_={self.raw_fitness_:.6g})"

    def execute(self, X):
        """The program's output on ``X`` ``[n, n_features]``: ``[n]``
        (float64), ``[n_classes, n]`` for a classifier's program (no input
        checks: the estimator's ``predict`` / ``transform`` check theirs)."""
        x = tf.constant(np.asarray(X, np.float32))
        out = np.asarray(evaluate(self.program, x, self._k, self._eval_names, self._use_op).numpy()[0], np.float64)
        return out

    def to_sympy(self, simplify=True, **kw):
        """The formula as a sympy expression (see :meth:`SymbolicRegressor.to_sympy`)."""
        from tfevo.gp.export import to_sympy

        return to_sympy(self.program, 0, self._k, simplify, var_names=self._var_names, **kw)


class SymbolicPopulation:
    """One generation of ``_programs`` (gplearn's list of ``_Program``):
    ``len()``, ``[i]`` (a :class:`SymbolicComponent`), iteration,
    ``programs`` (the ``Trees``) and ``raw_fitness_`` ``[P]``."""

    def __init__(self, programs, raw_fitness, var_names, eval_names, use_op, k=1):
        self.programs = programs
        self.raw_fitness_ = np.asarray(raw_fitness, np.float64)
        self._args = (var_names, eval_names, use_op)
        self._k = int(k)

    def __len__(self):
        return int(self.programs.types.shape[0])

    def __getitem__(self, i):
        i = _position(i, len(self), "program")
        return SymbolicComponent(type(self.programs)(*(a[i:i + 1] for a in self.programs)), self.raw_fitness_[i],
                                 *self._args, k=self._k)

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def __repr__(self):
        return f"SymbolicPopulation({len(self)} programs)"


class SymbolicTransformer(ClassNamePrefixFeaturesOutMixin, TransformerMixin, _BaseSymbolic):
    """Genetic feature construction (gplearn's ``SymbolicTransformer``).

    ``fit(X, y)`` evolves programs that maximise the absolute correlation
    of their output with ``y`` (``metric="pearson"``, the default, or
    ``"spearman"``, gplearn's weighted correlations; or a
    :func:`~tfevo.gp.make_fitness` metric), then ranks the final generation
    by raw fitness, takes the ``hall_of_fame`` best and keeps the
    ``n_components`` of them that are least correlated with each other,
    with gplearn's greedy rule (:func:`~tfevo.gp.sklearn_run.least_correlated`:
    drop the less fit program of the most correlated pair until
    ``n_components`` remain).  ``transform(X)`` returns the components'
    outputs ``[n_samples, n_components]`` (float64, in fitness order),
    ready to be stacked with ``X`` for a linear model.

    Example:

    >>> X = np.random.RandomState(0).uniform(-1, 1, (200, 3))
    >>> y = X[:, 0] * X[:, 1] + np.sin(X[:, 2])
    >>> st = SymbolicTransformer(population_size=300, generations=5, hall_of_fame=20, n_components=3,
    ...                          random_state=0).fit(X, y)
    >>> st.transform(X).shape
    (200, 3)

    Args: those of :class:`SymbolicRegressor` (the population, operators,
    selection, ``parsimony_coefficient``, ``max_samples``, ``warm_start``,
    ``random_state``, ...), plus
      hall_of_fame: the number of best programs of the final generation the
        components are chosen from (default 100; None: the whole
        population); at most ``population_size``.
      n_components: the number of programs kept (default 10; None: the
        whole hall of fame); at most ``hall_of_fame``.
      metric: ``"pearson"`` (default), ``"spearman"`` or a
        :func:`~tfevo.gp.make_fitness` metric.  With ``"spearman"`` the
        components are also compared by the correlation of their ranks, as
        gplearn does.
      stopping_criteria: stop after the first generation whose best raw
        fitness reaches it (default 1.0, gplearn's; None: never).  A
        lower-is-better make_fitness metric stops once its error is ``<=``
        it, as in gplearn, so the default 1.0 may stop such a run early:
        pass None or a reachable error.

    After ``fit``: ``programs_`` (the components, a ``Trees`` of NumPy
    arrays with ``n_components`` rows, best fitness first; ``est[i]`` is
    component ``i`` as a :class:`SymbolicComponent`, gplearn's ``_Program``
    counterpart with ``str``, ``execute``, ``to_sympy``, ``raw_fitness_``;
    ``len(est)`` their number),
    ``fitness_`` (their raw fitness), ``run_details_``, ``history_``,
    ``n_features_in_``, ``feature_names_in_`` (when X had column names),
    ``engine_``.  ``str(est)`` lists the components' formulas,
    ``to_sympy()`` returns them as sympy expressions and
    ``get_feature_names_out()`` names them ``symbolictransformer0``, ...
    """

    def __init__(self, *, population_size=1000, hall_of_fame=100, n_components=10, generations=20, max_len=128,
                 function_set=("add", "sub", "mul", "div"), const_range=(-1.0, 1.0), constants=(),
                 p_const="auto", init_depth=DEFAULT_DEPTH, init_method="half and half", grow_p_func="deap",
                 selection="tournament",
                 tournament_size=20, truncation_ratio=0.2, rank_pressure=1.5, survival_rate=1.0,
                 elite=1, elite_fitness="raw", parsimony_coefficient=0.001, p_crossover=0.9,
                 p_subtree_mutation=0.01,
                 p_hoist_mutation=0.01, p_point_mutation=0.01, p_point_replace=0.05, operators=None,
                 crossover_p_func=0.9, subtree_depth=None, p_point=None, p_leaf=0.1, const_sigma=0.1,
                 p_multi_constant=0.5, hoist_root_only=False, demote_duplicates=True,
                 stopping_criteria=1.0, max_samples=1.0,
                 warm_start=False, feature_names=None, jit_compile=False, use_op=None, random_state=None,
                 verbose=0, n_jobs=1, low_memory=False, metric="pearson"):
        super().__init__(**_base_arguments(locals()))
        self.hall_of_fame = hall_of_fame
        self.n_components = n_components
        self.metric = metric

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.required = True
        return tags

    def _metric(self):
        if is_gplearn_fitness(self.metric):
            return check_metric(self.metric)
        if isinstance(self.metric, Fitness) or (isinstance(self.metric, str) and self.metric in TRANSFORMER_METRICS):
            return self.metric
        raise ConfigError(f"metric must be one of {', '.join(map(repr, TRANSFORMER_METRICS))} or a "
                          f"make_fitness(...) metric, got {self.metric!r}")

    def fit(self, X, y, sample_weight=None):
        """Evolves programs for ``generations`` generations (or, with
        ``warm_start``, continues the stored run up to ``generations``) and
        chooses the components among the final generation.
        ``sample_weight`` (``[n_samples]``, non-negative) weights every row
        in the fitness (the components' mutual correlations are unweighted,
        as gplearn's)."""
        metric = self._metric()
        P = check_int(self.population_size, "population_size", 2)
        hof = _count("hall_of_fame", self.hall_of_fame, 1, P, "population_size")
        n_comp = _count("n_components", self.n_components, 1, hof, "hall_of_fame")
        gp, xt, _, lower = self._evolve_regression(X, y, sample_weight, metric, keep_population=True)
        final = self.__dict__.pop("_final_population", None)
        self.engine_ = gp
        self._run_state = None
        self._eval_names = list(gp.eval_functions.names)
        if final is None:  # a warm start without new generations keeps its components
            return self
        trees, raw = final
        best = hall_of_fame(raw, hof, lower)
        cand = type(trees)(*(a[best] for a in trees))
        out = evaluate(cand, xt, 1, self._eval_names, self.use_op).numpy()
        keep = best[least_correlated(out, n_comp, spearman=metric == "spearman")]
        self.programs_ = type(trees)(*(np.array(a[keep]) for a in trees))
        self.fitness_ = raw[keep].astype(np.float64)
        return self

    def transform(self, X):
        """The components' outputs ``[n_samples, n_components]`` (float64)."""
        check_is_fitted(self, "programs_")
        X = validate_data(self, X, reset=False, dtype=np.float32)
        _finite32(X, "X")
        out = evaluate(self.programs_, X, 1, self._eval_names, self.use_op).numpy()
        return np.asarray(out, np.float64).T

    def fit_transform(self, X, y, sample_weight=None):
        """``fit(X, y, sample_weight).transform(X)``."""
        return self.fit(X, y, sample_weight).transform(X)

    @property
    def _n_features_out(self):
        return int(self.programs_.types.shape[0])

    def __len__(self):
        return int(self.programs_.types.shape[0]) if hasattr(self, "programs_") else 0

    def __getitem__(self, i):
        i = self._index(i)
        program = type(self.programs_)(*(a[i:i + 1] for a in self.programs_))
        return SymbolicComponent(program, self.fitness_[i], self._var_names(), self._eval_names, self.use_op)

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    @property
    def _best_programs(self):
        """gplearn's list of the components (``list(est)``)."""
        check_is_fitted(self, "programs_")
        return list(self)

    def __str__(self):
        if not hasattr(self, "programs_"):
            return super().__repr__()
        names = self._var_names()
        return "[" + ",\n ".join(to_gplearn(self.programs_, i, var_names=names) for i in range(len(self))) + "]"

    def to_sympy(self, simplify=True, component=None, **kw):
        """The components as a list of sympy expressions (one expression with
        ``component=i``), with ``feature_names_in_`` as symbol names when the
        training data had them; the other arguments are those of
        :meth:`SymbolicRegressor.to_sympy`."""
        from tfevo.gp.export import to_sympy

        check_is_fitted(self, "programs_")
        which = range(len(self)) if component is None else [self._index(component)]
        out = [to_sympy(self.programs_, int(i), 1, simplify, var_names=self._var_names(), **kw) for i in which]
        return out if component is None else out[0]

    def to_keras(self, model=True, component=0):
        """Component ``component`` as a Keras model (or layer) computing its
        output ``[n]`` (see :meth:`SymbolicRegressor.to_keras`)."""
        from tfevo.gp.export import to_keras

        check_is_fitted(self, "programs_")
        return to_keras(self.programs_, self._index(component), 1, self.n_features_in_, model=model)

    def _index(self, i):
        return _position(i, len(self), "component")
