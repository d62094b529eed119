"""Population fitness of the scikit-learn estimators' metrics.

Every function here scores the whole population in one tensor program:
per-sample errors ``[P, N]`` reduced per tree, optionally under a per-tree
row mask (gplearn's ``max_samples`` subsampling: each tree sees its own rows).
Unmasked ``"mse"``/``"rmse"`` use the fused C++ MSE (predictions never
materialised); the other cases evaluate predictions in chunks of trees.
A tree whose error is not finite on its rows gets ``inf``.

``"pearson"`` and ``"spearman"`` are gplearn's (absolute weighted correlation
of the predictions with ``y``, Spearman's on average ranks over all rows;
higher is better, 0 when not finite).  :func:`make_fitness` wraps a custom
metric as gplearn's ``make_fitness`` does.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from tfevo.core import ConfigError
from tfevo.gp.evaluate import evaluate, mse
from tfevo.gp.trees import Trees

__all__ = ["REGRESSION_METRICS", "Fitness", "make_fitness", "check_metric", "greater_is_better",
           "regression_loss", "subsample_mask", "classification_raw", "CLASSIFICATION_FITNESS",
           "LOG_LOSS_EPS", "LOG_LOSS_MIN", "LOG_LOSS_MAX"]

#: gplearn's regression metric names accepted by ``SymbolicRegressor(metric=...)``.
REGRESSION_METRICS = ("mean absolute error", "mse", "rmse", "pearson", "spearman")
_GREATER = ("pearson", "spearman")
_ALIASES = {"mae": "mean absolute error"}
_CHUNK_BYTES = 64 << 20


class Fitness:
    """A custom raw-fitness metric (see :func:`make_fitness`).

    Pickles (a function pickle cannot store, such as a lambda or a closure,
    is stored with cloudpickle, as gplearn's ``wrap=True`` does), deep-copies
    and compares equal by function and direction, so an estimator holding it
    survives ``clone``, ``pickle`` and ``joblib``.
    """

    def __init__(self, function, greater_is_better: bool, batched: bool = False):
        self.function = function
        self.greater_is_better = bool(greater_is_better)
        self.batched = bool(batched)

    def __call__(self, y, y_pred, sample_weight):
        return self.function(y, y_pred, sample_weight)

    def __repr__(self):
        name = getattr(self.function, "__qualname__", repr(self.function))
        extra = ", batched=True" if self.batched else ""
        return f"make_fitness(function={name}, greater_is_better={self.greater_is_better}{extra})"

    def __eq__(self, other):
        return (isinstance(other, Fitness) and other.function is self.function
                and other.greater_is_better == self.greater_is_better and other.batched == self.batched)

    def __hash__(self):
        return hash((id(self.function), self.greater_is_better, self.batched))

    def __deepcopy__(self, memo):
        return Fitness(self.function, self.greater_is_better, self.batched)

    def __getstate__(self):
        import pickle

        state = dict(self.__dict__)
        try:
            pickle.dumps(self.function)
        except Exception:  # lambdas, closures, functions of __main__ run elsewhere
            try:
                import cloudpickle
            except ImportError:  # older joblib versions vendor it
                try:
                    from joblib.externals import cloudpickle
                except ImportError:
                    raise pickle.PicklingError(
                        f"cannot pickle the make_fitness function {self.function!r}: pickle cannot store it and "
                        f"cloudpickle is not installed (pip install cloudpickle, or use a module-level function)"
                    ) from None

            state["function"] = None
            state["_cloudpickled"] = cloudpickle.dumps(self.function)
        return state

    def __setstate__(self, state):
        import pickle

        blob = state.pop("_cloudpickled", None)
        self.__dict__.update(state)
        if blob is not None:
            self.function = pickle.loads(blob)


def make_fitness(*, function, greater_is_better, wrap=True, batched=False) -> Fitness:
    """A custom metric for ``SymbolicRegressor(metric=...)``, like gplearn's
    ``make_fitness``.

    Args:
      function: ``function(y, y_pred, sample_weight) -> float`` on float64
        NumPy arrays ``[n]`` (gplearn's signature: ``sample_weight`` is 1 on
        the rows the tree is scored on, 0 on the others with ``max_samples``).
        With ``batched=True`` it scores a chunk of trees at once:
        ``y [n]``, ``y_pred [C, n]``, ``sample_weight [C, n]`` -> ``[C]``.
      greater_is_better: True for a score (higher is better), False for an
        error.  A non-finite value counts as the worst fitness.
      wrap: accepted for gplearn compatibility; a function pickle cannot
        store is always stored with cloudpickle.
      batched: see ``function``.

    Example:

    >>> import numpy as np
    >>> def mape(y, y_pred, w):
    ...     return np.average(np.abs((y_pred - y) / y), weights=w)
    >>> m = make_fitness(function=mape, greater_is_better=False)
    >>> float(m(np.array([1.0, 2.0]), np.array([1.5, 2.0]), np.ones(2)))
    0.25
    """
    if not isinstance(greater_is_better, bool):
        raise ConfigError(f"make_fitness: greater_is_better must be a bool, got {greater_is_better!r}")
    if not isinstance(wrap, bool) or not isinstance(batched, bool):
        raise ConfigError(f"make_fitness: wrap and batched must be bools, got wrap={wrap!r}, batched={batched!r}")
    if not callable(function):
        raise ConfigError(f"make_fitness: function must be callable, got {function!r}")
    y = np.array([1.0, 1.0])
    probe = function(y, np.array([[2.0, 2.0]]) if batched else np.array([2.0, 2.0]),
                     np.ones((1, 2)) if batched else np.ones(2))
    shape = np.shape(probe)
    if (batched and shape != (1,)) or (not batched and shape != ()):
        want = "an array [C] (one value per tree)" if batched else "a number"
        raise ConfigError(f"make_fitness: function must return {want}, got {probe!r}")
    return Fitness(function, greater_is_better, batched)


def is_gplearn_fitness(metric) -> bool:
    """True for a ``gplearn.fitness.make_fitness`` object (its ``function(y,
    y_pred, sample_weight)`` is the signature of :func:`make_fitness`)."""
    return (type(metric).__module__.startswith("gplearn.") and callable(getattr(metric, "function", None))
            and isinstance(getattr(metric, "greater_is_better", None), bool))


def check_metric(metric):
    """The canonical metric name or the :class:`Fitness`, or a ConfigError
    listing the accepted ones."""
    if isinstance(metric, Fitness):
        return metric
    if is_gplearn_fitness(metric):  # same signature and direction: scored on the host like make_fitness's
        return Fitness(metric.function, metric.greater_is_better)
    name = _ALIASES.get(metric, metric) if isinstance(metric, str) else metric
    if name not in REGRESSION_METRICS:
        raise ConfigError(f"metric must be one of {', '.join(map(repr, REGRESSION_METRICS))} "
                          f"(or 'mae') or a make_fitness(...) metric, got {metric!r}")
    return name


def greater_is_better(metric) -> bool:
    """Direction of a metric accepted by :func:`check_metric`."""
    metric = check_metric(metric)
    return metric.greater_is_better if isinstance(metric, Fitness) else metric in _GREATER


def subsample_mask(seed, popsize: int, n_rows: int, n_in: int) -> tf.Tensor:
    """``bool [P, N]`` with exactly ``n_in`` rows per tree, drawn uniformly
    without replacement (independently per tree) from the stateless ``seed``."""
    u = tf.random.stateless_uniform([popsize, n_rows], seed)
    k = min(n_in, n_rows - n_in)  # top_k is fast for a small k: draw the smaller side
    if k == 0:
        return tf.fill([popsize, n_rows], n_in > 0)
    idx = tf.math.top_k(u, k, sorted=False).indices  # [P, k], distinct per row
    rows = tf.repeat(tf.range(popsize), k)
    picked = tf.scatter_nd(tf.stack([rows, tf.reshape(idx, [-1])], 1), tf.ones([popsize * k], tf.bool),
                           [popsize, n_rows])
    return picked if k == n_in else ~picked


def _finite(loss):
    return tf.where(tf.math.is_finite(loss), loss, tf.constant(np.inf, loss.dtype))


def row_weights(mask, sample_weight):
    """The weight of every (tree, row) pair: the rows of ``mask`` (``bool
    [P, N]`` or None = all) times ``sample_weight`` (``[N]`` or None = 1),
    None when both are None (plain means)."""
    if sample_weight is None:
        return mask
    w = tf.convert_to_tensor(sample_weight)[None, :]
    return w if mask is None else tf.where(mask, w, tf.zeros_like(w))


def _masked_mean(per, mask):
    """Mean of ``per [C, N]`` over the rows of ``mask`` (all rows if None), or
    its weighted mean when ``mask`` is a float weight ``[C or 1, N]``; rows of
    mask False or weight 0 never reach the sum (an inf there is ignored)."""
    if mask is None:
        return tf.reduce_mean(per, axis=1)
    if mask.dtype == tf.bool:
        w = tf.cast(mask, per.dtype)
        return tf.reduce_sum(tf.where(mask, per, 0.0), axis=1) / tf.reduce_sum(w, axis=1)
    w = tf.broadcast_to(tf.cast(mask, tf.float64), tf.shape(per))
    wp = tf.where(w > 0, w * tf.cast(per, tf.float64), 0.0)
    return tf.cast(tf.reduce_sum(wp, axis=1) / tf.reduce_sum(w, axis=1), per.dtype)


def _average_ranks(a):
    """Average ranks (1-based, ties share their mean rank) along the last
    axis of float64 ``a``; a row holding NaN is all NaN (scipy's
    ``rankdata`` with its default ``nan_policy="propagate"``)."""
    srt = tf.sort(a, axis=-1)
    lo = tf.searchsorted(srt, a, side="left")
    hi = tf.searchsorted(srt, a, side="right")
    r = tf.cast(lo + hi + 1, tf.float64) / 2.0
    bad = tf.reduce_any(tf.math.is_nan(a), axis=-1, keepdims=True)
    return tf.where(bad, tf.constant(np.nan, tf.float64), r)


def _weighted_abs_pearson(p, y, w):
    """gplearn's ``_weighted_pearson`` for every row of ``p [C, N]`` against
    ``y [N]`` under weights ``w [C, N]`` (float64): ``|corr|``, 0 when not finite.
    Like gplearn, a NaN or inf prediction anywhere (also at weight 0) gives 0."""
    sw = tf.reduce_sum(w, axis=1)
    pd = p - (tf.reduce_sum(w * p, axis=1) / sw)[:, None]
    yd = y[None, :] - (tf.reduce_sum(w * y[None, :], axis=1) / sw)[:, None]
    cov = tf.reduce_sum(w * pd * yd, axis=1) / sw
    den = tf.sqrt(tf.reduce_sum(w * pd * pd, axis=1) * tf.reduce_sum(w * yd * yd, axis=1) / (sw * sw))
    corr = cov / den
    return tf.where(tf.math.is_finite(corr), tf.abs(corr), tf.zeros_like(corr))


def _custom(metric: Fitness, pred, y, w):
    """A :class:`Fitness` over a chunk: float64 NumPy in, ``[C]`` out (NaN
    and infinities left for the caller)."""
    p, yv, wv = pred.numpy().astype(np.float64), y.numpy().astype(np.float64), w.numpy()
    if metric.batched:
        out = np.asarray(metric.function(yv, p, wv), np.float64).reshape(-1)
        if out.shape != (p.shape[0],):
            raise ValueError(f"a batched make_fitness function must return one value per tree ({p.shape[0]}), "
                             f"got shape {out.shape}")
        return out
    with np.errstate(all="ignore"):
        return np.array([float(metric.function(yv, p[i], wv[i])) for i in range(p.shape[0])], np.float64)


def custom_scores(metric: Fitness, pred, y, mask=None, sample_weight=None) -> tf.Tensor:
    """A :class:`Fitness` of every row of ``pred [P, N]`` against ``y [N]``
    (float64 ``[P]``), each weighted by the rows of ``mask`` times
    ``sample_weight``; a non-finite value is the worst fitness."""
    sub = row_weights(mask, sample_weight)
    w = tf.ones(tf.shape(pred), tf.float64) if sub is None else \
        tf.broadcast_to(tf.cast(sub, tf.float64), tf.shape(pred))
    out = tf.constant(_custom(metric, pred, tf.cast(y, tf.float64), w))
    worst = -np.inf if metric.greater_is_better else np.inf
    return tf.where(tf.math.is_finite(out), out, tf.constant(worst, tf.float64))


def regression_loss(trees: Trees, x, y, metric, functions, use_op=None, mask=None, sample_weight=None) -> tf.Tensor:
    """Raw fitness ``[P]`` of every tree under ``metric``: an error (lower is
    better, ``inf`` when not finite) or, for ``"pearson"``, ``"spearman"`` and
    ``make_fitness(..., greater_is_better=True)``, a score (higher is better;
    gplearn's correlations give 0 when not finite, a custom score ``-inf``).

    Args:
      trees: the population; x ``[N, F]``, y ``[N]`` float32 tensors.
      metric: a name of :data:`REGRESSION_METRICS` or a :class:`Fitness`.
      functions, use_op: as for :func:`tfevo.gp.evaluate.evaluate`.
      mask: None (all rows) or ``bool [P, N]``, the rows each tree is scored on.
      sample_weight: None or float64 ``[N]``, non-negative row weights: the
        error is the weighted mean over the tree's rows (gplearn's
        ``np.average(..., weights=w)``), the correlations weighted likewise.
    """
    if mask is None and sample_weight is None and metric in ("mse", "rmse"):
        loss = mse(trees, x, y, functions, use_op)
        return tf.sqrt(loss) if metric == "rmse" else loss
    t, v, s = (tf.convert_to_tensor(a) for a in trees)
    P, N = int(t.shape[0]), int(x.shape[0])
    per_chunk = max(1, _CHUNK_BYTES // (8 * max(N, 1)))
    y64 = tf.cast(y, tf.float64)
    y_ranks = _average_ranks(y64) if metric == "spearman" else None
    out = []
    for a in range(0, P, per_chunk):
        b = min(P, a + per_chunk)
        pred = evaluate(Trees(t[a:b], v[a:b], s[a:b]), x, 1, functions, use_op)  # [C, N]
        sub = row_weights(None if mask is None else mask[a:b], sample_weight)
        if isinstance(metric, Fitness) or metric in _GREATER:
            w = tf.ones(tf.shape(pred), tf.float64) if sub is None else \
                tf.broadcast_to(tf.cast(sub, tf.float64), tf.shape(pred))
            if isinstance(metric, Fitness):
                out.append(tf.constant(_custom(metric, pred, y, w)))
            elif metric == "pearson":
                out.append(_weighted_abs_pearson(tf.cast(pred, tf.float64), y64, w))
            else:
                out.append(_weighted_abs_pearson(_average_ranks(tf.cast(pred, tf.float64)), y_ranks, w))
            continue
        err = pred - y[None, :]
        per = tf.abs(err) if metric == "mean absolute error" else tf.square(err)
        out.append(_masked_mean(per, sub))
    loss = tf.concat(out, 0)
    if isinstance(metric, Fitness):
        worst = -np.inf if metric.greater_is_better else np.inf
        return tf.where(tf.math.is_finite(loss), loss, tf.constant(worst, tf.float64))
    if metric in _GREATER:
        return loss
    if metric == "rmse":
        loss = tf.sqrt(loss)
    return _finite(loss)


#: gplearn's ``_log_loss`` clips probabilities to ``[eps, 1 - eps]``: every
#: row's log loss lies in ``[-log(1 - eps), -log(eps)]``.
LOG_LOSS_EPS = 1e-15
LOG_LOSS_MIN = float(-np.log1p(-LOG_LOSS_EPS))
LOG_LOSS_MAX = float(-np.log(LOG_LOSS_EPS))
#: ``kind`` values of :func:`classification_raw`.
CLASSIFICATION_FITNESS = ("accuracy", "crossentropy", "crossentropy_unclipped")


def classification_raw(scores, labels, kind: str, mask=None, sample_weight=None) -> tf.Tensor:
    """Raw fitness ``[P]`` from class scores ``[P, K, N]``: training accuracy
    (``kind="accuracy"``, higher is better) or mean softmax cross-entropy
    (lower is better, ``inf`` when not finite), over the rows of ``mask``
    (``bool [P, N]``) or all rows, weighted by ``sample_weight`` (``[N]``)
    if given.

    ``"crossentropy"`` is gplearn's log loss: each row's cross-entropy is
    clipped to ``[LOG_LOSS_MIN, LOG_LOSS_MAX]`` (the probability of the true
    class to ``[1e-15, 1 - 1e-15]``), so one confidently wrong row costs at
    most 34.5; with two classes it is gplearn's ``_log_loss`` of the sigmoid
    of the score difference.  ``"crossentropy_unclipped"`` leaves every row's
    cross-entropy as it is (a confidently wrong row costs its full margin)."""
    mask = row_weights(mask, sample_weight)
    if kind == "accuracy":
        pred = tf.argmax(tf.where(tf.math.is_nan(scores), -np.inf, scores), axis=1, output_type=tf.int32)
        return _masked_mean(tf.cast(tf.equal(pred, labels[None, :]), tf.float32), mask)
    logits = tf.transpose(scores, [0, 2, 1])  # [P, N, K]
    lab = tf.broadcast_to(labels[None, :], tf.shape(logits)[:2])
    ce = tf.nn.sparse_softmax_cross_entropy_with_logits(lab, logits)
    if kind == "crossentropy":  # clip_by_value keeps NaN: a NaN row stays the worst fitness
        ce = tf.clip_by_value(ce, LOG_LOSS_MIN, LOG_LOSS_MAX)
    return _finite(_masked_mean(ce, mask))
