"""Frozen layers (trainable=False) in a PopulationModel template: constants of the template shared by every
member, not evolved parameters; the reference is plain Keras on the template with a member's evolved weights."""

import numpy as np
import pytest
import keras
import tensorflow as tf

from tfevo import nn
from tfevo.core import ConfigError
from tfevo.strategies.open_es import OpenES

L = keras.layers


def _pretrained(model, seed):
    """Gives every weight of ``model`` distinct non-initializer values (a 'pretrained' state)."""
    rng = np.random.default_rng(seed)
    model.set_weights([rng.normal(0.0, 0.5, w.shape).astype(np.float32) for w in model.get_weights()])
    for layer in model.layers:
        if isinstance(layer, L.BatchNormalization):
            layer.moving_variance.assign(rng.uniform(0.5, 2.0, layer.moving_variance.shape).astype(np.float32))


def dense_template():
    enc = keras.Sequential([keras.Input((6,)), L.Dense(8, activation="tanh"), L.Dense(5, activation="relu")],
                           name="encoder")
    i = keras.Input((6,))
    model = keras.Model(i, L.Dense(3, name="head")(L.Dense(4, activation="elu", name="mid")(enc(i))))
    _pretrained(model, 1)
    enc.trainable = False
    return model


def conv_template():
    model = keras.Sequential([
        keras.Input((6, 6, 2)),
        L.Conv2D(3, 3, padding="same", activation="relu", name="conv"),
        L.BatchNormalization(name="bn"),
        L.Conv2D(4, 2, strides=2, name="conv_head"),
        L.Flatten(),
        L.Dense(3, name="head"),
    ])
    _pretrained(model, 2)
    for name in ("conv", "bn"):
        model.get_layer(name).trainable = False
    return model


def keras_reference(template, pm, row, x):
    """The template itself, with the member's evolved weights assigned to its trainable variables."""
    evolved = [v for v in template.weights if v.path in pm.weight_names]
    assert [v.path for v in evolved] == pm.weight_names
    saved = [v.numpy() for v in evolved]
    for v, w in zip(evolved, pm.unflatten(row[None])):
        v.assign(w[0])
    try:
        return np.asarray(template(x))
    finally:
        for v, w in zip(evolved, saved):
            v.assign(w)


def _check_forwards(template, x, atol=2e-5, **kw):
    pm = nn.PopulationModel(template, **kw)
    P = x.shape[0]
    params = pm.init_params(P, seed=3) + tf.random.stateless_normal([P, pm.num_params], [4, 5]) * 0.3
    ref = np.stack([keras_reference(template, pm, params[p], x[p]) for p in range(P)])
    np.testing.assert_allclose(pm(params, x).numpy(), ref, atol=atol)
    np.testing.assert_allclose(pm(pm.unflatten(params), x).numpy(), ref, atol=atol)
    for idx in ([5, 0], [1, 4, 2, 3, 5, 0, 2]):  # a small subset (gathered rows) and a large one (in place)
        sub = pm(params, tf.gather(x, [i % P for i in range(len(idx))]), indices=tf.constant(idx))
        np.testing.assert_allclose(sub.numpy(), ref_rows(template, pm, params, x, idx), atol=atol)
    return pm, params


def ref_rows(template, pm, params, x, idx):
    return np.stack([keras_reference(template, pm, params[m], x[r % x.shape[0]]) for r, m in enumerate(idx)])


@pytest.mark.parametrize("kw", [{}, {"use_op": False}, {"jit_compile": True}], ids=["default", "tf", "xla"])
def test_frozen_dense_block_matches_keras_and_leaves_d(kw):
    template = dense_template()
    frozen = [w.copy() for w in template.get_layer("encoder").get_weights()]
    x = tf.random.stateless_normal([6, 5, 6], [1, 2])
    pm, params = _check_forwards(template, x, **kw)
    # D: mid (5*4+4) and head (4*3+3) only; the encoder's 6*8+8 + 8*5+5 are frozen
    assert pm.num_params == 39 and pm.num_frozen == 101
    assert pm.weight_shapes == [(5, 4), (4,), (4, 3), (3,)] and len(pm.frozen_weight_names) == 4
    assert params.shape == (6, 39) and not pm.fused_mlp
    assert "D=39 (+101 frozen)" in pm.summary() and "(frozen)" in pm.summary()
    k = pm.to_keras(params[2])
    enc = k.get_layer("encoder")
    assert not enc.trainable and len(k.trainable_weights) == 4
    for a, b in zip(enc.get_weights(), frozen):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(np.asarray(k(x[2])), pm(params, x).numpy()[2], atol=2e-5)
    # from_keras takes the whole model (its frozen weights are the template's) or the evolved list
    np.testing.assert_array_equal(pm.from_keras(k).numpy(), params[2].numpy())
    np.testing.assert_array_equal(pm.flatten([w[0] for w in pm.unflatten(params[2:3])]).numpy(), params[2].numpy())


@pytest.mark.parametrize("kw", [{}, {"use_op": False}, {"conv_method": "im2col"}], ids=["default", "tf", "im2col"])
def test_frozen_conv_and_batchnorm_block_matches_keras(kw):
    template = conv_template()
    x = tf.random.stateless_normal([6, 3, 6, 6, 2], [3, 4])
    pm, _ = _check_forwards(template, x, **kw)
    # conv_head 2*2*3*4+4 and head 36*3+3 evolve; conv (3*3*2*3+3) and all four bn vectors (4*3) are frozen
    assert pm.num_params == 52 + 111 and pm.num_frozen == 57 + 12


def test_trainable_batchnorm_still_evolves_its_moving_statistics():
    m = keras.Sequential([keras.Input((4,)), L.BatchNormalization(), L.Dense(2)])
    assert nn.PopulationModel(m).num_params == 16 + 10 and nn.PopulationModel(m).num_frozen == 0


def test_non_trainable_variable_of_a_trainable_layer_is_frozen():
    m = keras.Sequential([keras.Input((3,)), L.Dense(4, activation="tanh", name="d"), L.Dense(2)])
    _pretrained(m, 5)
    m.get_layer("d").kernel.trainable = False
    x = tf.random.stateless_normal([6, 5, 3], [5, 6])
    for kw in ({}, {"use_op": False}):
        pm, _ = _check_forwards(m, x, **kw)
        assert pm.num_params == 4 + 10 and pm.num_frozen == 12
        assert "'d' (Dense): weights [(3, 4), (4,)] (frozen [True, False])" in pm.summary()


def test_frozen_weights_are_read_once_and_never_change_through_evolution(tmp_path):
    template = dense_template()
    pm = nn.PopulationModel(template)
    frozen = [w.copy() for w in template.get_layer("encoder").get_weights()]
    x = tf.random.stateless_normal([1, 16, 6], [7, 8])
    target = tf.random.stateless_normal([1, 16, 3], [9, 9])

    def fitness(params):
        y = pm(params, tf.tile(x, [params.shape[0], 1, 1]))
        return -tf.reduce_mean(tf.square(y - target), axis=[1, 2])

    def run(es, gens):
        out = []
        for _ in range(gens):
            pop = es.ask()
            out.append(pop.numpy())
            es.tell(pop, fitness(pop))
        return out

    es = OpenES(pm.num_params, popsize=8, sigma=0.1, learning_rate=0.05, init_params=pm.init_params(1)[0], seed=1)
    run(es, 3)
    ck = tf.train.Checkpoint(algorithm=es).write(str(tmp_path / "ck"))
    cont = run(es, 2)
    es2 = OpenES(pm.num_params, popsize=8, sigma=0.1, learning_rate=0.05, seed=1)
    tf.train.Checkpoint(algorithm=es2).read(ck).assert_consumed()
    np.testing.assert_array_equal(np.stack(run(es2, 2)), np.stack(cont))
    # the template changing afterwards does not reach the population: its frozen values were read at construction
    before = pm(cont[-1], tf.tile(x, [8, 1, 1])).numpy()
    template.get_layer("encoder").set_weights([w + 1.0 for w in frozen])
    np.testing.assert_array_equal(pm(cont[-1], tf.tile(x, [8, 1, 1])).numpy(), before)
    best = pm.to_keras(cont[-1][0])
    for a, b in zip(best.get_layer("encoder").get_weights(), frozen):
        np.testing.assert_array_equal(a, b)
    assert not best.get_layer("encoder").trainable


def test_shared_frozen_layer_and_all_frozen_template():
    shared = L.Dense(4, activation="tanh", name="shared")
    a, b = keras.Input((3,)), keras.Input((3,))
    m = keras.Model([a, b], L.Dense(2)(L.Add()([shared(a), shared(b)])))
    _pretrained(m, 6)
    shared.trainable = False
    pm = nn.PopulationModel(m)
    assert pm.num_params == 10 and pm.num_frozen == 16
    params = pm.init_params(3, seed=1)
    xa, xb = tf.random.stateless_normal([3, 2, 3], [1, 1]), tf.random.stateless_normal([3, 2, 3], [2, 2])
    ref = np.stack([keras_reference(m, pm, params[p], [xa[p], xb[p]]) for p in range(3)])
    np.testing.assert_allclose(pm(params, [xa, xb]).numpy(), ref, atol=2e-5)
    m.trainable = False
    with pytest.raises(ConfigError, match="every weight of the template is frozen.*nothing to evolve"):
        nn.PopulationModel(m)
    flat = L.Flatten()
    flat.trainable = False  # a weightless frozen layer changes nothing
    assert nn.PopulationModel(keras.Sequential([keras.Input((3, 1)), flat, L.Dense(2)])).num_params == 8


def test_frozen_lstm_with_and_without_states():
    """A frozen recurrent layer: the whole-sequence forward runs the layer copy, a forward from given states
    runs the translator on the broadcast constants; both equal Keras."""
    m = keras.Sequential([keras.Input((5, 3)), L.LSTM(4, return_sequences=True, name="lstm"), L.Dense(2)])
    _pretrained(m, 7)
    m.get_layer("lstm").trainable = False
    pm = nn.PopulationModel(m)
    assert pm.num_params == 10 and pm.num_frozen == 4 * (3 * 4 + 4 * 4 + 4)
    P = 3
    params = pm.init_params(P, seed=2)
    x = tf.random.stateless_normal([P, 2, 5, 3], [3, 3])
    ref = np.stack([keras_reference(m, pm, params[p], x[p]) for p in range(P)])
    np.testing.assert_allclose(pm(params, x).numpy(), ref, atol=2e-5)
    y, new = pm(params, x, states=pm.zero_states(P, 2))
    np.testing.assert_allclose(y.numpy(), ref, atol=2e-5)
    assert [s.shape for s in new] == [(P, 2, 4), (P, 2, 4)]


def test_layer_copy_and_translator_on_constants_agree():
    """Where the frozen layer cannot be copied, its translator runs on the broadcast constants: same result."""
    template = conv_template()
    x = tf.random.stateless_normal([4, 2, 6, 6, 2], [8, 8])
    pm = nn.PopulationModel(template)
    params = pm.init_params(4, seed=5)
    a, sub_a = pm(params, x).numpy(), pm(params, x[:3], indices=tf.constant([3, 0, 2])).numpy()
    pm2 = nn.PopulationModel(template)
    frozen_steps = [s for s in pm2._steps if s.frozen]
    assert len(frozen_steps) == 2 and all(s.frozen_layer is not None for s in frozen_steps)
    for s in frozen_steps:
        s.frozen_layer = None
    np.testing.assert_allclose(pm2(params, x).numpy(), a, atol=2e-5)
    np.testing.assert_allclose(pm2(params, x[:3], indices=tf.constant([3, 0, 2])).numpy(), sub_a, atol=2e-5)


def test_policy_rows_in_place_with_a_frozen_encoder():
    """One row per member (a rollout step): the in-place path reads the evolved weights from params."""
    template = dense_template()
    pm = nn.PopulationModel(template)
    params = pm.init_params(5, seed=9)
    x = tf.random.stateless_normal([5, 1, 6], [6, 6])
    ref = np.stack([keras_reference(template, pm, params[p], x[p]) for p in range(5)])
    np.testing.assert_allclose(pm(params, x).numpy(), ref, atol=2e-5)
    np.testing.assert_allclose(pm.forward_graph(params, x).numpy(), ref, atol=2e-5)


def test_policy_on_uint8_frames_with_a_frozen_first_conv():
    """A frozen first Conv2D does not read raw frames itself (that is the in-place kernel's shortcut): the
    frames are scaled first; actions equal the argmax of Keras on the scaled frames, also inside an outer
    tf.function with unknown sizes (how the rollout evaluators call it)."""
    from tfevo.envs.base import ActionSpec

    template = conv_template()
    pm = nn.PopulationModel(template)
    policy = nn.Policy(pm, ActionSpec(discrete=True, num_actions=3))
    params = pm.init_params(4, seed=4)
    frames = tf.constant(np.random.default_rng(1).integers(0, 256, (4, 1, 6, 6, 2)), tf.uint8)
    scaled = tf.cast(frames, tf.float32) / 255.0
    ref = np.stack([keras_reference(template, pm, params[p], scaled[p]) for p in range(4)]).argmax(-1)
    np.testing.assert_array_equal(policy.forward(params, frames).numpy(), ref)
    idx = tf.constant([3, 1])
    np.testing.assert_array_equal(policy.forward(policy.prepare(params), tf.gather(frames, idx), idx).numpy(),
                                  ref[[3, 1]])
    outer = tf.function(lambda p, f, i: policy.forward(policy.prepare(p), f, i),
                        input_signature=[tf.TensorSpec([None, pm.num_params]), tf.TensorSpec([None, 1, 6, 6, 2], tf.uint8),
                                         tf.TensorSpec([None], tf.int32)])
    np.testing.assert_array_equal(outer(params, tf.gather(frames, idx), idx).numpy(), ref[[3, 1]])


def test_gradient_reaches_only_the_evolved_weights_as_in_keras():
    """d loss / d params of one member equals Keras's gradient for the template's trainable weights."""
    template = dense_template()
    pm = nn.PopulationModel(template)
    params = tf.Variable(pm.init_params(3, seed=6))
    x = tf.random.stateless_normal([3, 4, 6], [2, 9])
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.square(pm(params, x)[1]))
    g = tape.gradient(loss, params).numpy()
    assert np.all(g[[0, 2]] == 0)
    for v, w in zip(template.trainable_weights, pm.unflatten(params[1:2])):
        v.assign(w[0])
    with tf.GradientTape() as tape:
        ref_loss = tf.reduce_sum(tf.square(template(x[1])))
    ref = tape.gradient(ref_loss, template.trainable_weights)
    np.testing.assert_allclose(g[1], np.concatenate([np.ravel(r) for r in ref]), rtol=1e-4, atol=1e-5)
