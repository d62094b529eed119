"""PopulationModel on graphs (several inputs and outputs, shared layers), every built-in activation,
and recurrent layers stepped with carried states -- each checked against plain Keras per member."""

import numpy as np
import pytest
import keras
import tensorflow as tf

from tfevo import nn
from tfevo.core import ConfigError, ShapeError

L = keras.layers
TOL = 1e-5


def _members(pm, P, seed=0):
    params = pm.init_params(P, seed)
    return params + tf.random.stateless_normal(params.shape, [seed, 5]) * 0.2


def test_dict_inputs_shared_layer_and_dict_outputs():
    pos, vel = keras.Input((3,), name="pos"), keras.Input((2,), name="vel")
    shared = L.Dense(4, activation="tanh", name="shared")
    a = shared(L.Dense(3, name="pa")(pos))  # the shared layer is called twice
    b = shared(L.Dense(3, name="pb")(vel))
    h = L.Concatenate()([a, b, L.Add()([a, b])])
    template = keras.Model({"pos": pos, "vel": vel}, {"logits": L.Dense(2)(h), "value": L.Dense(1)(h)})
    pm = nn.PopulationModel(template)
    assert pm.input_shape == {"pos": (3,), "vel": (2,)}
    assert pm.output_shape == {"logits": (2,), "value": (1,)}
    P, B = 4, 3
    params = _members(pm, P)
    rng = np.random.default_rng(0)
    obs = {"pos": rng.normal(size=(P, B, 3)).astype(np.float32), "vel": rng.normal(size=(P, B, 2)).astype(np.float32)}
    y = pm(params, obs)
    y_idx = pm(params, {k: v[[3, 1]] for k, v in obs.items()}, indices=[3, 1])
    for p in range(P):
        ref = pm.to_keras(params[p])({k: v[p] for k, v in obs.items()})
        for key in ("logits", "value"):
            np.testing.assert_allclose(y[key][p], ref[key], atol=TOL)
    for key in ("logits", "value"):
        np.testing.assert_allclose(y_idx[key], np.asarray(y[key])[[3, 1]], atol=TOL)
    with pytest.raises(ShapeError, match="keys"):
        pm(params, {"pos": obs["pos"]})
    with pytest.raises(ShapeError, match=r"input 1"):
        pm(params, [obs["pos"], obs["pos"]])


def test_list_inputs_and_list_outputs_with_subtract_multiply_average_maximum():
    a, b = keras.Input((4,)), keras.Input((4,))
    ha, hb = L.Dense(5)(a), L.Dense(5)(b)
    outs = [L.Subtract()([ha, hb]), L.Multiply()([ha, hb]), L.Average()([ha, hb]), L.Maximum()([ha, hb])]
    template = keras.Model([a, b], [L.Dense(2)(o) for o in outs])
    pm = nn.PopulationModel(template)
    params = _members(pm, 3)
    rng = np.random.default_rng(1)
    xs = [rng.normal(size=(3, 2, 4)).astype(np.float32) for _ in range(2)]
    ys = pm(params, xs)
    assert isinstance(ys, list) and len(ys) == 4
    for p in range(3):
        refs = pm.to_keras(params[p])([x[p] for x in xs])
        for y, r in zip(ys, refs):
            np.testing.assert_allclose(y[p], r, atol=TOL)


ACTIVATIONS = [n for n in dir(keras.activations) if not n.startswith("_")
               and n not in ("get", "serialize", "deserialize", "threshold")]  # threshold needs arguments


def test_every_builtin_activation_matches_keras():
    assert len(ACTIVATIONS) >= 30
    inp = keras.Input((6,))
    h = L.Dense(6)(inp)
    outs = [L.Activation(name)(h) for name in ACTIVATIONS] + [L.Dense(4, activation=name)(h) for name in ACTIVATIONS]
    template = keras.Model(inp, L.Concatenate()(outs))
    pm = nn.PopulationModel(template)
    params = _members(pm, 3)
    x = np.random.default_rng(2).normal(size=(3, 5, 6)).astype(np.float32) * 3
    y = np.asarray(pm(params, x))
    for p in range(3):
        np.testing.assert_allclose(y[p], pm.to_keras(params[p])(x[p]), atol=TOL)


@pytest.mark.parametrize("cls", [L.SimpleRNN, L.GRU, L.LSTM], ids=lambda c: c.__name__)
def test_recurrent_step_by_step_with_carried_state_equals_whole_sequence(cls):
    T, F, P, B = 6, 3, 3, 2
    seq = keras.Sequential([keras.Input((None, F)), cls(5, return_sequences=True), cls(4, return_sequences=True),
                            L.Dense(2)])
    pm = nn.PopulationModel(seq)
    params = _members(pm, P)
    x = np.random.default_rng(3).normal(size=(P, B, T, F)).astype(np.float32)
    whole = np.asarray(pm(params, x))  # [P, B, T, 2], open time axis (tf.scan)
    states = pm.zero_states(P, B)
    steps = []
    for t in range(T):
        y, states = pm(params, x[:, :, t:t + 1], states=states)
        steps.append(np.asarray(y)[:, :, 0])
    np.testing.assert_allclose(np.stack(steps, 2), whole, atol=TOL)
    for p in range(P):
        np.testing.assert_allclose(whole[p], pm.to_keras(params[p])(x[p]), atol=TOL)
    # subset of members with their own carried states
    idx = [2, 0]
    y_idx, _ = pm(params, x[idx, :, :1], indices=idx, states=[s.numpy()[idx] * 0 for s in pm.zero_states(P, B)])
    np.testing.assert_allclose(y_idx[:, :, 0], whole[idx][:, :, 0], atol=TOL)


def test_lstm_return_state_outputs():
    inp = keras.Input((4, 3))
    y, h, c = L.LSTM(5, return_state=True)(inp)
    template = keras.Model(inp, [L.Dense(2)(y), h, c])
    pm = nn.PopulationModel(template)
    assert pm.state_sizes == (5, 5)
    params = _members(pm, 3)
    x = np.random.default_rng(4).normal(size=(3, 2, 4, 3)).astype(np.float32)
    ys = pm(params, x)
    for p in range(3):
        for a, r in zip(ys, pm.to_keras(params[p])(x[p])):
            np.testing.assert_allclose(a[p], r, atol=TOL)


def test_new_layer_takes_one_translator_as_in_the_docs():
    """The example of docs/nn_translators.md: a custom Keras layer plus one translator class."""
    from tfevo.nn.translators import Translator, register_translator, select
    from tfevo.nn.translators import base

    class Scale(L.Layer):
        def build(self, input_shape):
            self.scale = self.add_weight(name="scale", shape=(input_shape[-1],), initializer="ones")

        def call(self, x):
            return x * self.scale

    def template():
        return keras.Sequential([keras.Input((4,)), L.Dense(8), Scale(), L.Dense(2)])

    with pytest.raises(Exception, match=r"unsupported layer .*Scale.*nn_translators.md"):
        nn.PopulationModel(template())

    @register_translator(Scale)
    class ScaleTranslator(Translator):
        weight_names = ("scale",)

        def initializer(self, variable):
            return keras.initializers.Ones()

        def forward(self, inputs, weights, indices):
            return inputs[0] * select(weights[0], indices)[:, None, :]

    try:
        t = template()
        pm = nn.PopulationModel(t)
        assert pm.num_params == 4 * 8 + 8 + 8 + 8 * 2 + 2
        np.testing.assert_array_equal(pm.init_params(2).numpy()[:, 40:48], 1.0)
        params = _members(pm, 3)
        x = np.random.default_rng(5).normal(size=(3, 2, 4)).astype(np.float32)
        y = np.asarray(pm(params, x))
        for p in range(3):
            m = keras.models.clone_model(t)
            m.set_weights([w[p].numpy() for w in pm.unflatten(params)])
            np.testing.assert_allclose(y[p], m(x[p]), atol=TOL)
    finally:
        base._REGISTRY.pop(Scale, None)


def _nested_templates():
    """Models used as layers: a Sequential in a Sequential, a functional block called twice (its
    weights once in the flat vector), one with two inputs and two outputs, and a recurrent encoder."""
    seq = keras.Sequential([keras.Input((4,)), keras.Sequential([keras.Input((4,)), L.Dense(3, activation="tanh")],
                                                                name="block"), L.Dense(2)])
    a = keras.Input((4,))
    block = keras.Model(a, L.Dense(3, activation="relu")(L.Dense(5)(a)), name="shared_block")
    b, c = keras.Input((4,)), keras.Input((4,))
    twice = keras.Model([b, c], L.Dense(2)(L.Concatenate()([block(b), block(c)])))
    u, v = keras.Input((3,)), keras.Input((2,))
    two = keras.Model([u, v], [L.Dense(4)(u), L.Dense(5, activation="tanh")(v)])
    p, q = keras.Input((3,)), keras.Input((2,))
    h1, h2 = two([p, q])
    multi = keras.Model([p, q], {"pi": L.Dense(2)(h1), "v": L.Dense(1)(L.Concatenate()([h1, h2]))})
    enc = keras.Sequential([keras.Input((None, 3)), L.GRU(4)])
    s = keras.Input((None, 3))
    recurrent = keras.Model(s, L.Dense(2)(enc(s)))
    return {"seq_in_seq": seq, "shared_twice": twice, "two_in_two_out": multi, "recurrent_encoder": recurrent}


@pytest.mark.parametrize("name", ["seq_in_seq", "shared_twice", "two_in_two_out", "recurrent_encoder"])
def test_nested_models_are_inlined_and_match_keras(name, tmp_path):
    template = _nested_templates()[name]
    pm = nn.PopulationModel(template)
    assert pm.num_params == sum(int(np.prod(w.shape)) for w in template.weights)
    P, B = 3, 2
    params = _members(pm, P)
    rng = np.random.default_rng(1)
    shapes = [[P, B] + [d or 4 for d in t.shape[1:]] for t in template.inputs]
    xs = [rng.normal(size=s).astype(np.float32) for s in shapes]
    y = pm(params, xs if len(xs) > 1 else xs[0])
    for p in range(P):
        member = pm.to_keras(params[p])
        ref = member([x[p] for x in xs] if len(xs) > 1 else xs[0][p])
        for key in (ref if isinstance(ref, dict) else [None]):
            got, want = (y[key][p], ref[key]) if key else (y[p], ref)
            np.testing.assert_allclose(got, want, atol=TOL)
        np.testing.assert_array_equal(pm.from_keras(member), params[p])


def _called_with_training(kind, training):
    inp = keras.Input((4,))
    h = L.Dense(5, name="d")(inp)
    if kind == "nested":
        block = keras.Sequential([keras.Input((5,)), L.Dropout(0.5), L.Dense(5)], name="block")
        h = block(h, training=training)
    else:
        layer = {"bn": L.BatchNormalization(name="layer"), "dropout": L.Dropout(0.5, name="layer"),
                 "noise": L.GaussianNoise(1.0, name="layer")}[kind]
        h = layer(h, training=training)
    return keras.Model(inp, L.Dense(2)(h))


@pytest.mark.parametrize("kind", ["bn", "dropout", "noise", "nested"])
def test_layer_called_with_training_true_is_refused(kind):
    """model(x) honours a call's training=True (dropout, noise, batch statistics): the population's inference
    forward would silently differ from it, so the template is refused naming the layer; training=False is the
    inference forward and agrees with Keras."""
    with pytest.raises(ConfigError, match=r"'(layer|block)' \(\w+\) is called with training=True"):
        nn.PopulationModel(_called_with_training(kind, True))
    template = _called_with_training(kind, False)
    pm = nn.PopulationModel(template)
    params = _members(pm, 2)
    x = np.random.default_rng(0).standard_normal((2, 8, 4)).astype(np.float32)
    y = pm(params, x)
    for p in range(2):
        template.set_weights(pm.template_weights(params[p]))
        np.testing.assert_allclose(y[p], template(x[p]), rtol=TOL, atol=TOL)
