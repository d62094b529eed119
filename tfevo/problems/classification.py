"""Classification problems for multi-output GP trees.

A tree with ``K`` outputs (one per class) scores every sample; the predicted
class is the arg-max.  Fitness is the training accuracy (default) or the
negated softmax cross-entropy (``fitness="crossentropy"``); either way higher
is better.  Data sets come from scikit-learn's bundled copies (no download):
``iris``, ``wine``, ``breast_cancer``, ``digits`` (registered as problems).
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from tfevo.core import ConfigError, ShapeError
from tfevo.registry import register

__all__ = ["Classification", "iris", "wine", "breast_cancer", "digits", "CLASSIFICATION_DATASETS"]


class Classification:
    """Fitness of multi-output GP trees on a labelled data set.

    Args:
      x: float ``[N, F]`` features (standardise them for best results).
      labels: int ``[N]`` class ids in ``[0, K)``.
      num_classes: ``K`` (default: ``max(labels) + 1``).
      fitness: ``"accuracy"`` or ``"crossentropy"``.
      x_test, y_test: optional held-out split (:meth:`test_accuracy`).
      functions: recommended function set.
      use_op: the C++ evaluator (``None`` where allowed, ``True``, ``False``; :mod:`tfevo.kernels`).

    Trees must have ``num_outputs = K`` (use ``GPConfig(num_outputs=K)``).
    """

    def __init__(self, x, labels, num_classes: int | None = None, fitness: str = "accuracy",
                 x_test=None, y_test=None, functions=("add", "sub", "mul", "div"),
                 use_op: bool | None = None, name: str = "classification"):
        x = np.asarray(x, np.float32)
        labels = np.asarray(labels)
        if x.ndim != 2:
            raise ShapeError(f"x must be [N, F], got shape {x.shape}")
        if labels.shape != (x.shape[0],) or not np.issubdtype(labels.dtype, np.integer):
            raise ShapeError(f"labels must be integer [N] with N = {x.shape[0]}, got {labels.dtype} {labels.shape}")
        K = int(num_classes if num_classes is not None else labels.max() + 1)
        if K < 2 or labels.min() < 0 or labels.max() >= K:
            raise ConfigError(f"labels must lie in [0, {K}) with K >= 2")
        if fitness not in ("accuracy", "crossentropy"):
            raise ConfigError(f"fitness must be 'accuracy' or 'crossentropy', got {fitness!r}")
        self.x, self.labels = tf.constant(x), tf.constant(labels.astype(np.int32))
        self.x_test = None if x_test is None else tf.constant(np.asarray(x_test, np.float32))
        self.y_test = None if y_test is None else tf.constant(np.asarray(y_test, np.int32))
        self.num_classes = K
        self.num_outputs = K
        self.num_vars = int(x.shape[1])
        self.fitness_kind = fitness
        self.functions = tuple(functions)
        self.use_op = use_op
        self.name = name

    def outputs(self, trees, x=None) -> tf.Tensor:
        """Class scores ``[P, K, N]``."""
        from tfevo.gp.evaluate import evaluate

        names = list(self.functions) + (["add"] if "add" not in self.functions else [])
        return evaluate(trees, self.x if x is None else x, self.num_classes, names, self.use_op)

    @staticmethod
    def _accuracy(scores, labels):
        pred = tf.argmax(tf.where(tf.math.is_nan(scores), -np.inf, scores), axis=1, output_type=tf.int32)
        return tf.reduce_mean(tf.cast(tf.equal(pred, labels[None, :]), tf.float32), axis=1)

    def accuracy(self, trees) -> tf.Tensor:
        """Training accuracy per tree, ``[P]``."""
        return self._accuracy(self.outputs(trees), self.labels)

    def test_accuracy(self, trees) -> tf.Tensor:
        """Held-out accuracy per tree (training accuracy if no split)."""
        if self.x_test is None:
            return self.accuracy(trees)
        return self._accuracy(self.outputs(trees, self.x_test), self.y_test)

    def evaluate(self, trees) -> tf.Tensor:
        """Fitness per tree ``[P]`` (accuracy or -cross-entropy)."""
        scores = self.outputs(trees)
        if self.fitness_kind == "accuracy":
            return self._accuracy(scores, self.labels)
        logits = tf.transpose(scores, [0, 2, 1])  # [P, N, K]
        lab = tf.broadcast_to(self.labels[None, :], tf.shape(logits)[:2])
        ce = tf.nn.sparse_softmax_cross_entropy_with_logits(lab, logits)
        loss = tf.reduce_mean(ce, axis=1)
        return tf.where(tf.math.is_finite(loss), -loss, -np.inf)

    __call__ = evaluate

    def __repr__(self):
        return f"Classification({self.name!r}, N={int(self.x.shape[0])}, F={self.num_vars}, K={self.num_classes})"


def _load(loader_name: str, test_size: float, seed: int, standardize: bool, name: str, **kw):
    from sklearn import datasets
    from sklearn.model_selection import train_test_split

    d = getattr(datasets, loader_name)()
    x, y = d.data.astype(np.float32), d.target.astype(np.int32)
    if test_size and test_size > 0:
        xtr, xte, ytr, yte = train_test_split(x, y, test_size=test_size, random_state=seed, stratify=y)
    else:
        xtr, xte, ytr, yte = x, None, y, None
    if standardize:
        mu, sd = xtr.mean(0), xtr.std(0) + 1e-8
        xtr = (xtr - mu) / sd
        xte = None if xte is None else (xte - mu) / sd
    return Classification(xtr, ytr, int(y.max() + 1), x_test=xte, y_test=yte, name=name, **kw)


@register("problem", "iris", "Iris classification (4 features, 3 classes), accuracy")
def iris(test_size: float = 0.0, seed: int = 0, standardize: bool = True, **kw) -> Classification:
    """Iris (150 samples); ``test_size`` > 0 holds out a stratified split."""
    return _load("load_iris", test_size, seed, standardize, "iris", **kw)


@register("problem", "wine", "Wine classification (13 features, 3 classes), accuracy")
def wine(test_size: float = 0.0, seed: int = 0, standardize: bool = True, **kw) -> Classification:
    """Wine (178 samples)."""
    return _load("load_wine", test_size, seed, standardize, "wine", **kw)


@register("problem", "breast_cancer", "Breast-cancer classification (30 features, 2 classes), accuracy")
def breast_cancer(test_size: float = 0.0, seed: int = 0, standardize: bool = True, **kw) -> Classification:
    """Breast Cancer Wisconsin (569 samples)."""
    return _load("load_breast_cancer", test_size, seed, standardize, "breast_cancer", **kw)


@register("problem", "digits", "Digits classification (64 features, 10 classes), accuracy")
def digits(test_size: float = 0.0, seed: int = 0, standardize: bool = True, **kw) -> Classification:
    """8x8 digits (1797 samples)."""
    return _load("load_digits", test_size, seed, standardize, "digits", **kw)


CLASSIFICATION_DATASETS = {"iris": iris, "wine": wine, "breast_cancer": breast_cancer, "digits": digits}
