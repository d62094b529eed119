"""Population layers train by gradient like ordinary Keras layers: every C++ kernel they (or
PopulationModel's in-place forward) reach has the gradient of its pure-TensorFlow reference."""

import numpy as np
import pytest
import keras
import tensorflow as tf

from tfevo import nn, ops
from tfevo.nn import PopulationConv2D, PopulationDense

L = keras.layers
TOL = 2e-5

needs_ops = pytest.mark.skipif(ops.op_module("pop_conv", "tfevo_population_conv2d") is None
                               or ops.op_module("indexed_matmul", "tfevo_indexed_matmul") is None,
                               reason="C++ ops not built")


def _dense_ref(x, k, b, act):
    return act(tf.matmul(x, k) + b[:, None, :])


def _conv_ref(x, k, b, strides, padding, act):
    """Member by member ``tf.nn.conv2d`` (pure TF, independent of the population code)."""
    ys = [tf.nn.conv2d(x[p], k[p], [1, *strides, 1], padding.upper()) + b[p] for p in range(x.shape[0])]
    return act(tf.stack(ys))


def _train(layer_fn, ref_fn, shapes, x, target, steps=4, lr=0.05):
    """Runs a few SGD steps on the layer and on the reference from the same weights; returns both
    histories of (loss, gradients)."""
    layer = layer_fn()
    layer(x)  # build
    ws = [tf.Variable(v.numpy()) for v in layer.trainable_weights]
    hist_l, hist_r = [], []
    for _ in range(steps):
        with tf.GradientTape() as t:
            t.watch(x)
            loss = tf.reduce_mean((layer(x) - target) ** 2)
        g = t.gradient(loss, layer.trainable_weights + [x])
        with tf.GradientTape() as t:
            t.watch(x)
            loss_r = tf.reduce_mean((ref_fn(x, *ws) - target) ** 2)
        gr = t.gradient(loss_r, ws + [x])
        hist_l.append((loss.numpy(), [a.numpy() for a in g]))
        hist_r.append((loss_r.numpy(), [a.numpy() for a in gr]))
        for v, gv in zip(layer.trainable_weights, g[:-1]):
            v.assign_sub(lr * gv)
        for v, gv in zip(ws, gr[:-1]):
            v.assign_sub(lr * gv)
    for (ll, gl), (lr_, gr_) in zip(hist_l, hist_r):
        np.testing.assert_allclose(ll, lr_, rtol=1e-5)
        for a, b in zip(gl, gr_):
            np.testing.assert_allclose(a, b, atol=TOL, rtol=1e-4)


@needs_ops
@pytest.mark.parametrize("rows", [2, 9])  # <= 4 rows per member: the C++ streaming matmul; more: tf.matmul
def test_population_dense_trains_like_reference(rows):
    x = tf.random.stateless_normal([3, rows, 5], [1, 2])
    target = tf.random.stateless_normal([3, rows, 4], [1, 3])
    _train(lambda: PopulationDense(4, activation="tanh", seed=1),
           lambda x, k, b: _dense_ref(x, k, b, tf.tanh), None, x, target)


@needs_ops
@pytest.mark.parametrize("strides,padding,act", [((2, 2), "same", "relu"), ((1, 2), "valid", None)])
def test_population_conv2d_trains_like_reference(strides, padding, act):
    x = tf.random.stateless_normal([3, 2, 9, 8, 2], [2, 2])
    layer = PopulationConv2D(4, 3, strides=strides, padding=padding, activation=act, seed=2)
    ho = layer.compute_output_shape(x.shape)
    target = tf.random.stateless_normal([3, 2, *ho[2:]], [2, 3])
    fn = tf.nn.relu if act == "relu" else (lambda v: v)
    _train(lambda: PopulationConv2D(4, 3, strides=strides, padding=padding, activation=act, seed=2),
           lambda x, k, b: _conv_ref(x, k, b, strides, padding, fn), None, x, target)


@needs_ops
def test_shipped_example_model_fits(tmp_path):
    """The layout of examples/keras_population_layers.py: Conv2D + Dense population layers, model.fit."""
    P = 4
    inputs = keras.Input((8, 16, 16, 3), batch_size=P)
    x = PopulationConv2D(6, 3, strides=2, padding="same", activation="relu", seed=0)(inputs)
    x = L.Reshape((8, 8 * 8 * 6))(x)
    model = keras.Model(inputs, PopulationDense(10, seed=1)(x))
    model.compile(keras.optimizers.SGD(0.02), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    rng = np.random.default_rng(0)
    xs = rng.random((P, 8, 16, 16, 3)).astype("float32")
    ys = rng.integers(0, 10, size=(P, 8))
    before = model.evaluate(xs, ys, batch_size=P, verbose=0)
    # Full-batch steps without shuffling: the run is deterministic and each small step lowers the loss.
    model.fit(xs, ys, batch_size=P, epochs=15, shuffle=False, verbose=0)
    assert model.evaluate(xs, ys, batch_size=P, verbose=0) < before - 0.05
    model.save(str(tmp_path / "m.keras"))
    np.testing.assert_allclose(keras.models.load_model(str(tmp_path / "m.keras"))(xs), model(xs), atol=1e-6)


@needs_ops
@pytest.mark.parametrize("kind", ["mlp", "conv"])
def test_population_model_in_place_forward_gradient_equals_keras(kind):
    if kind == "mlp":  # the one-kernel TfevoPopulationMlp
        template = nn.mlp((5,), 3, hidden=(8,), activation="relu")
        x = tf.random.stateless_normal([3, 2, 5], [3, 1])
    else:  # TfevoPopulationConv2DFlat + TfevoIndexedDenseFlat
        template = keras.Sequential([keras.Input((8, 8, 2)), L.Conv2D(3, 3, strides=2, activation="relu"),
                                     L.Flatten(), L.Dense(4, activation="relu"), L.Dense(2)])
        x = tf.random.stateless_normal([3, 2, 8, 8, 2], [3, 1])
    pm = nn.PopulationModel(template)
    params = pm.init_params(5, seed=0) + 0.1
    idx = tf.constant([4, 1, 1], tf.int32)
    with tf.GradientTape() as t:
        t.watch(params)
        t.watch(x)
        y = pm.forward_graph(params, x, idx)
        loss = tf.reduce_sum(y * y)
    gp, gx = t.gradient(loss, [params, x])
    ref_p = np.zeros(params.shape, np.float32)
    for i, m in enumerate(idx.numpy()):
        model = pm.to_keras(params[m])
        xi = tf.convert_to_tensor(x[i])
        with tf.GradientTape() as t:
            t.watch(xi)
            loss_i = tf.reduce_sum(model(xi) ** 2)
        gw = t.gradient(loss_i, model.trainable_weights + [xi])
        ref_p[m] += pm.flatten([g.numpy() for g in gw[:-1]]).numpy()
        np.testing.assert_allclose(gx[i], gw[-1], atol=TOL, rtol=1e-4)
    np.testing.assert_allclose(gp, ref_p, atol=TOL, rtol=1e-4)
