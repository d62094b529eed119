"""scikit-learn style estimators over the tensorized GP engine."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from tfevo.core import ConfigError, ShapeError
from tfevo.gp.algorithm import GeneticProgramming, GPConfig
from tfevo.gp.evaluate import evaluate, mse
from tfevo.gp.trees import to_infix

__all__ = ["SymbolicRegressor", "SymbolicClassifier"]


class _Base:
    def __init__(self, population_size=1000, generations=20, max_len=128,
                 function_set=("add", "sub", "mul", "div"), const_range=(-1.0, 1.0), p_const=0.3,
                 init_depth=(2, 6), init_method="half_and_half", selection="tournament",
                 tournament_size=20, elite=1, parsimony_coefficient=0.0, operators=None,
                 backend="auto", random_state=0, verbose=0, **config):
        self.population_size = population_size
        self.generations = generations
        self.max_len = max_len
        self.function_set = function_set
        self.const_range = const_range
        self.p_const = p_const
        self.init_depth = init_depth
        self.init_method = init_method
        self.selection = selection
        self.tournament_size = tournament_size
        self.elite = elite
        self.parsimony_coefficient = parsimony_coefficient
        self.operators = operators
        self.backend = backend
        self.random_state = random_state
        self.verbose = verbose
        self.config = config

    def get_params(self, deep=True):
        """Constructor arguments (scikit-learn protocol)."""
        keys = ["population_size", "generations", "max_len", "function_set", "const_range", "p_const",
                "init_depth", "init_method", "selection", "tournament_size", "elite",
                "parsimony_coefficient", "operators", "backend", "random_state", "verbose"]
        return {k: getattr(self, k) for k in keys}

    def set_params(self, **params):
        """Sets constructor arguments (scikit-learn protocol)."""
        for k, v in params.items():
            setattr(self, k, v)
        return self

    def _engine(self, num_vars, num_outputs):
        kw = dict(popsize=int(self.population_size), max_len=int(self.max_len), num_vars=num_vars,
                  num_outputs=num_outputs, functions=tuple(self.function_set), p_const=self.p_const,
                  const_range=self.const_range, init_depth=tuple(self.init_depth),
                  init_method=self.init_method, selection=self.selection,
                  tournament_size=self.tournament_size, elite=self.elite,
                  parsimony=self.parsimony_coefficient, **self.config)
        if self.operators is not None:
            kw["operators"] = dict(self.operators)
        if int(self.generations) < 1:
            raise ConfigError(f"generations must be >= 1, got {self.generations}")
        return GeneticProgramming(GPConfig(**kw), seed=int(self.random_state))

    @staticmethod
    def _x(X, num_vars=None):
        X = np.asarray(X, np.float32)
        if X.ndim != 2:
            raise ShapeError(f"X must be [n_samples, n_features], got shape {X.shape}")
        if num_vars is not None and X.shape[1] != num_vars:
            raise ShapeError(f"X has {X.shape[1]} features, the model was fitted with {num_vars}")
        return X

    def _check_fitted(self):
        if not hasattr(self, "program_"):
            raise ConfigError("this estimator is not fitted yet; call fit(X, y) first")

    def __str__(self):
        return to_infix(self.program_) if hasattr(self, "program_") else type(self).__name__ + "()"

    def to_sympy(self, simplify=True):
        """The best program as a (simplified) sympy expression."""
        from tfevo.gp.export import to_sympy

        self._check_fitted()
        return to_sympy(self.program_, 0, self._k, simplify)

    def to_keras(self, model=True):
        """The best program as a Keras model (or layer) with the same outputs."""
        from tfevo.gp.export import to_keras

        self._check_fitted()
        return to_keras(self.program_, 0, self._k, self.n_features_in_, model=model)


class SymbolicRegressor(_Base):
    """Symbolic regression with tensorized GP (gplearn-like API).

    Example:

    >>> X = np.random.uniform(-1, 1, (200, 2)).astype(np.float32)
    >>> y = X[:, 0] * X[:, 1] + X[:, 0]
    >>> est = SymbolicRegressor(population_size=500, generations=10).fit(X, y)
    >>> est.score(X, y) > 0.9
    True

    After ``fit``: ``program_`` (best tree, a one-row ``Trees``),
    ``best_mse_``, ``history_`` (best MSE per generation), ``engine_``.
    """

    _k = 1

    def fit(self, X, y):
        """Evolves programs for ``generations`` generations."""
        X = self._x(X)
        y = np.asarray(y, np.float32).reshape(-1)
        if y.shape[0] != X.shape[0]:
            raise ShapeError(f"y has {y.shape[0]} samples, X has {X.shape[0]}")
        self.n_features_in_ = X.shape[1]
        gp = self._engine(X.shape[1], 1)
        xt, yt = tf.constant(X), tf.constant(y)
        fs = gp.eval_functions
        self.history_ = []
        for g in range(int(self.generations)):
            trees = gp.ask()
            loss = mse(trees, xt, yt, fs, self.backend)
            gp.tell(trees, -loss)
            self.history_.append(float(tf.reduce_min(loss)))
            if self.verbose:
                print(f"gen {g}: best mse {self.history_[-1]:.6g}")
        self.engine_ = gp
        self.program_, best = gp.best
        self.best_mse_ = float(-best)
        return self

    def predict(self, X):
        """Predictions of the best program, ``[n_samples]``."""
        self._check_fitted()
        X = self._x(X, self.n_features_in_)
        return evaluate(self.program_, X, 1, self.engine_.eval_functions, self.backend).numpy()[0]

    def score(self, X, y):
        """Coefficient of determination R^2 of the best program."""
        y = np.asarray(y, np.float64).reshape(-1)
        p = self.predict(X).astype(np.float64)
        ss = np.sum((y - y.mean()) ** 2)
        return float(1.0 - np.sum((y - p) ** 2) / ss) if ss > 0 else float(np.allclose(y, p))


class SymbolicClassifier(_Base):
    """Classification with multi-output GP trees (one output per class).

    ``fit(X, y)`` maximises training accuracy (``fitness="crossentropy"``
    in the constructor switches to the softmax cross-entropy);
    ``predict`` returns the arg-max class label, ``predict_proba`` the
    softmax of the outputs, ``score`` the accuracy.
    """

    def __init__(self, *args, fitness="accuracy", **kw):
        super().__init__(*args, **kw)
        self.fitness = fitness

    def get_params(self, deep=True):
        """Constructor arguments (scikit-learn protocol)."""
        return {**super().get_params(deep), "fitness": self.fitness}

    def fit(self, X, y):
        """Evolves multi-output programs for ``generations`` generations."""
        from tfevo.problems.classification import Classification

        X = self._x(X)
        y = np.asarray(y)
        self.classes_, lab = np.unique(y, return_inverse=True)
        if len(self.classes_) < 2:
            raise ConfigError("SymbolicClassifier needs at least two classes")
        self._k = len(self.classes_)
        self.n_features_in_ = X.shape[1]
        prob = Classification(X, lab.astype(np.int32), self._k, self.fitness,
                              functions=tuple(self.function_set), backend=self.backend)
        gp = self._engine(X.shape[1], self._k)
        self.history_ = []
        for g in range(int(self.generations)):
            trees = gp.ask()
            fit = prob.evaluate(trees)
            gp.tell(trees, fit)
            self.history_.append(float(tf.reduce_max(fit)))
            if self.verbose:
                print(f"gen {g}: best fitness {self.history_[-1]:.6g}")
        self.engine_ = gp
        self.program_, _ = gp.best
        return self

    def decision_function(self, X):
        """Class scores of the best program, ``[n_samples, n_classes]``."""
        self._check_fitted()
        X = self._x(X, self.n_features_in_)
        s = evaluate(self.program_, X, self._k, self.engine_.eval_functions, self.backend).numpy()[0]
        return s.T

    def predict_proba(self, X):
        """Softmax of the class scores."""
        s = self.decision_function(X).astype(np.float64)
        s = np.where(np.isfinite(s), s, -1e30)
        e = np.exp(s - s.max(1, keepdims=True))
        return e / e.sum(1, keepdims=True)

    def predict(self, X):
        """Predicted class labels."""
        s = self.decision_function(X)
        s = np.where(np.isnan(s), -np.inf, s)
        return self.classes_[np.argmax(s, axis=1)]

    def score(self, X, y):
        """Accuracy."""
        return float(np.mean(self.predict(X) == np.asarray(y)))
