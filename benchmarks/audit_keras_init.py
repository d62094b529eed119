"""Keras-template audit, initial populations: ``PopulationModel.init_params`` against the template's own
Keras initializers.

For each template, ``K`` members from ``init_params`` (seed 0) and ``K`` fresh Keras initializations
(``keras.models.clone_model`` re-runs every initializer; ``keras.utils.set_random_seed(0)``) are compared
weight by weight: mean, standard deviation, min and max, and a two-sample Kolmogorov-Smirnov test on the
pooled values (flagged when p < 1e-3). Orthogonal kernels are also checked member by member (W^T W = g^2 I
on the smaller side). K and the seeds were fixed before any run.

Usage: ``PYTHONPATH=$PWD python benchmarks/audit_keras_init.py``
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras

import numpy as np
from scipy import stats

from tfevo import nn

L, I = keras.layers, keras.initializers
K = 100


def seq(shape, *layers):
    return keras.Sequential([keras.Input(shape), *layers])


TEMPLATES = {
    "dense_defaults": lambda: seq((6,), L.Dense(8), L.Dense(3, activation="tanh")),
    "dense_inits": lambda: seq((6,), L.Dense(8, kernel_initializer=I.RandomNormal(0.5, 3.0),
                                             bias_initializer=I.RandomUniform(-2, 3)),
                               L.Dense(5, kernel_initializer="he_normal", bias_initializer=I.Constant(0.7)),
                               L.Dense(4, kernel_initializer="lecun_uniform", bias_initializer=I.TruncatedNormal(1, 2)),
                               L.Dense(3, kernel_initializer=I.VarianceScaling(2.0, "fan_out", "untruncated_normal"))),
    "orthogonal": lambda: seq((6,), L.Dense(9, kernel_initializer=I.Orthogonal(gain=1.5)),
                              L.Dense(4, kernel_initializer="orthogonal")),
    "conv_depthwise_separable": lambda: seq((8, 8, 3), L.Conv2D(4, 3), L.DepthwiseConv2D(3, depth_multiplier=2),
                                            L.SeparableConv2D(5, 2), L.Flatten(),
                                            L.Dense(2)),
    "conv1d_conv3d": lambda: seq((4, 4, 4, 2), L.Conv3D(3, 2), L.Reshape((27, 3)), L.Conv1D(4, 3), L.Flatten(),
                                 L.Dense(2)),
    "conv_transposes": lambda: seq((4, 4, 2), L.Conv2DTranspose(3, 3, strides=2, kernel_initializer="he_normal",
                                                                bias_initializer=I.RandomUniform(-1, 1)),
                                   L.Reshape((9, 9, 3, 1)), L.Conv3DTranspose(2, 2), L.Flatten(), L.Dense(2)),
    "conv1d_forms": lambda: seq((8, 3), L.Conv1DTranspose(4, 3, strides=2), L.DepthwiseConv1D(3, depth_multiplier=2),
                                L.SeparableConv1D(6, 2, pointwise_initializer="lecun_normal"),
                                L.Conv1D(4, 3, groups=2, dilation_rate=2), L.Flatten(), L.Dense(2)),
    "norms_embedding_prelu": lambda: seq((5,), L.Embedding(20, 6), L.LayerNormalization(), L.BatchNormalization(),
                                         L.PReLU(alpha_initializer=I.RandomNormal(0.25, 0.1)), L.Flatten(),
                                         L.Dense(2)),
    "recurrent": lambda: seq((5, 3), L.SimpleRNN(4, return_sequences=True), L.GRU(5, return_sequences=True),
                             L.GRU(4, reset_after=False, return_sequences=True), L.LSTM(6), L.Dense(2)),
    "lstm_no_unit_forget": lambda: seq((5, 3), L.LSTM(6, unit_forget_bias=False,
                                                      bias_initializer=I.RandomNormal(0, 1)), L.Dense(2)),
    "sequence_attention": lambda: _sequence_attention(),
}


def _sequence_attention():
    inp = keras.Input((4, 6))
    x = L.MultiHeadAttention(2, 5, value_dim=3, output_shape=4, use_gate=True)(inp, inp)
    x = L.Attention(use_scale=True, score_mode="concat")([x, x])
    x = L.AdditiveAttention()([x, x])
    x = L.TimeDistributed(L.Dense(5, kernel_initializer="he_uniform"))(x)
    x = L.Bidirectional(L.LSTM(3, return_sequences=True), backward_layer=L.GRU(3, return_sequences=True,
                                                                              go_backwards=True))(x)
    return keras.Model(inp, L.Dense(2)(L.Flatten()(x)))


def keras_draws(template):
    draws = []
    for _ in range(K):
        m = keras.models.clone_model(template)
        draws.append([np.asarray(w) for w in m.get_weights()])
    return [np.stack([d[i] for d in draws]) for i in range(len(draws[0]))]


def main():
    only = sys.argv[1:]  # template names (default: all)
    keras.utils.set_random_seed(0)
    flagged = 0
    print(f"K={K} members per side; columns: weight, shape, mean (tfevo / keras), std, min, max, KS p")
    for name, build in TEMPLATES.items():
        if only and name not in only:
            continue
        template = build()
        pm = nn.PopulationModel(template)
        pop = pm.unflatten(pm.init_params(K, seed=0))
        ref = keras_draws(template)
        print(f"== {name} (D={pm.num_params})")
        for wname, a, b in zip(pm.weight_names, pop, ref):
            a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
            fa, fb = a.ravel(), b.ravel()
            if np.ptp(fa) == 0 and np.ptp(fb) == 0:
                p = 1.0 if fa[0] == fb[0] else 0.0
            else:
                p = float(stats.ks_2samp(fa, fb).pvalue)
            flag = p < 1e-3
            flagged += flag
            print(f"  {wname:42s} {str(a.shape[1:]):14s} {fa.mean():+.4f}/{fb.mean():+.4f} "
                  f"{fa.std():.4f}/{fb.std():.4f} {fa.min():+.3f}/{fb.min():+.3f} {fa.max():+.3f}/{fb.max():+.3f} "
                  f"p={p:.3g}{'  <-- FLAG' if flag else ''}")
        for layer in template.layers:
            init = getattr(layer, "kernel_initializer", None)
            if isinstance(init, I.Orthogonal):
                i = pm.weight_names.index(layer.kernel.path)
                w = np.asarray(pop[i], np.float64)
                r, c = w.shape[1:]
                gram = np.einsum("pij,pik->pjk", w, w) if r >= c else np.einsum("pji,pki->pjk", w, w)
                err = np.abs(gram - init.gain ** 2 * np.eye(min(r, c))).max()
                print(f"  orthogonality of {layer.kernel.path}: max |W^T W - g^2 I| over {K} members = {err:.2e}")
    print(f"flagged weights (KS p < 1e-3): {flagged}")


if __name__ == "__main__":
    main()
