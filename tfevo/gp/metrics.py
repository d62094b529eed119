"""Population fitness of the scikit-learn estimators' metrics.

Every function here scores the whole population in one tensor program:
per-sample errors ``[P, N]`` reduced per tree, optionally under a per-tree
row mask (gplearn's ``max_samples`` subsampling: each tree sees its own rows).
Unmasked ``"mse"``/``"rmse"`` use the fused C++ MSE (predictions never
materialised); the other cases evaluate predictions in chunks of trees.
A tree whose error is not finite on its rows gets ``inf``.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from tfevo.core import ConfigError
from tfevo.gp.evaluate import evaluate, mse
from tfevo.gp.trees import Trees

__all__ = ["REGRESSION_METRICS", "check_metric", "regression_loss", "subsample_mask", "classification_raw"]

#: gplearn's regression metric names accepted by ``SymbolicRegressor(metric=...)`` (all lower is better).
REGRESSION_METRICS = ("mean absolute error", "mse", "rmse")
_ALIASES = {"mae": "mean absolute error"}
_CHUNK_BYTES = 64 << 20


def check_metric(metric) -> str:
    """The canonical metric name, or a ConfigError listing the accepted ones."""
    name = _ALIASES.get(metric, metric) if isinstance(metric, str) else metric
    if name not in REGRESSION_METRICS:
        raise ConfigError(f"metric must be one of {', '.join(map(repr, REGRESSION_METRICS))} "
                          f"(or 'mae'), got {metric!r}")
    return name


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


def _masked_mean(per, mask):
    """Mean of ``per [C, N]`` over the rows of ``mask`` (all rows if None);
    values outside the mask never reach the sum (an inf there is ignored)."""
    if mask is None:
        return tf.reduce_mean(per, axis=1)
    w = tf.cast(mask, per.dtype)
    return tf.reduce_sum(tf.where(mask, per, 0.0), axis=1) / tf.reduce_sum(w, axis=1)


def regression_loss(trees: Trees, x, y, metric: str, functions, use_op=None, mask=None) -> tf.Tensor:
    """Loss ``[P]`` (lower is better) of every tree under ``metric``.

    Args:
      trees: the population; x ``[N, F]``, y ``[N]`` float32 tensors.
      metric: one of :data:`REGRESSION_METRICS`.
      functions, use_op: as for :func:`tfevo.gp.evaluate.evaluate`.
      mask: None (all rows) or ``bool [P, N]``, the rows each tree is scored on.
    """
    if mask is None and metric in ("mse", "rmse"):
        loss = mse(trees, x, y, functions, use_op)
        return tf.sqrt(loss) if metric == "rmse" else loss
    t, v, s = (tf.convert_to_tensor(a) for a in trees)
    P, N = int(t.shape[0]), int(x.shape[0])
    per_chunk = max(1, _CHUNK_BYTES // (4 * max(N, 1)))
    out = []
    for a in range(0, P, per_chunk):
        b = min(P, a + per_chunk)
        pred = evaluate(Trees(t[a:b], v[a:b], s[a:b]), x, 1, functions, use_op)  # [C, N]
        err = pred - y[None, :]
        per = tf.abs(err) if metric == "mean absolute error" else tf.square(err)
        out.append(_masked_mean(per, None if mask is None else mask[a:b]))
    loss = tf.concat(out, 0)
    if metric == "rmse":
        loss = tf.sqrt(loss)
    return _finite(loss)


def classification_raw(scores, labels, kind: str, mask=None) -> tf.Tensor:
    """Raw fitness ``[P]`` from class scores ``[P, K, N]``: training accuracy
    (``kind="accuracy"``, higher is better) or mean softmax cross-entropy
    (``"crossentropy"``, lower is better, ``inf`` when not finite), over the
    rows of ``mask`` (``bool [P, N]``) or all rows."""
    if kind == "accuracy":
        pred = tf.argmax(tf.where(tf.math.is_nan(scores), -np.inf, scores), axis=1, output_type=tf.int32)
        return _masked_mean(tf.cast(tf.equal(pred, labels[None, :]), tf.float32), mask)
    logits = tf.transpose(scores, [0, 2, 1])  # [P, N, K]
    lab = tf.broadcast_to(labels[None, :], tf.shape(logits)[:2])
    ce = tf.nn.sparse_softmax_cross_entropy_with_logits(lab, logits)
    return _finite(_masked_mean(ce, mask))
