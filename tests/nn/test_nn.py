"""Tests of tfevo.nn: population layers, PopulationModel, Policy."""

import numpy as np
import pytest
import keras
import tensorflow as tf

from tfevo import nn
from tfevo.core import ConfigError, ShapeError
from tfevo.envs.base import ActionSpec

L = keras.layers
RTOL, ATOL = 1e-5, 1e-6


def per_member(pm, params, x):
    """Reference: one ordinary Keras model per member, called on its own batch."""
    outs = []
    for p in range(params.shape[0]):
        model = pm.to_keras(params[p])
        outs.append(np.asarray(model(x[p])))
    return np.stack(outs)


def perturbed(pm, popsize, seed=0, scale=0.3):
    """Initial params plus noise, so biases / LayerNorm gains are not trivial."""
    params = pm.init_params(popsize, seed)
    noise = tf.random.stateless_normal(params.shape, [seed, 7]) * scale
    return params + noise


def seq_mlp():
    return keras.Sequential([
        keras.Input((3, 4)),
        L.Flatten(),
        L.Dense(16, activation="tanh"),
        L.LayerNormalization(),
        L.Dense(12, activation="relu"),
        L.Reshape((3, 4)),
        L.Dense(5),
        L.Activation("softmax"),
    ])


def functional_mlp():
    inp = keras.Input((6,))
    h = L.Dense(8, activation="elu", kernel_initializer="he_normal", bias_initializer="random_normal")(inp)
    h = L.LayerNormalization(epsilon=1e-3)(h)
    h = L.Reshape((2, 4))(h)
    h = L.Dense(3, use_bias=False)(h)
    h = L.LayerNormalization(axis=[1, 2])(h)
    h = L.ReLU()(h)
    h = L.Flatten()(h)
    out = L.Dense(2, activation="sigmoid")(h)
    return keras.Model(inp, out)


def mixed_layers():
    return keras.Sequential([
        keras.Input((24,)),
        L.Dense(32, kernel_initializer="orthogonal", bias_initializer="random_uniform"),
        L.LeakyReLU(negative_slope=0.1),
        L.Dropout(0.5),
        L.Reshape((4, 4, 2)),
        L.Conv2D(3, 2, padding="same", kernel_initializer="lecun_normal"),
        L.ELU(),
        L.LayerNormalization(axis=[1, 2, 3], center=False),
        L.Flatten(),
        L.Dense(4, kernel_initializer="truncated_normal"),
        L.Softmax(),
    ])


@pytest.mark.parametrize("build", [seq_mlp, functional_mlp, mixed_layers], ids=["sequential", "functional", "mixed"])
def test_mlp_matches_per_member_keras(build):
    template = build()
    pm = nn.PopulationModel(template)
    assert pm.num_params == template.count_params()
    P, B = 4, 5
    params = perturbed(pm, P)
    x = tf.random.stateless_normal((P, B) + pm.input_shape, [1, 2])
    y = pm(params, x)
    assert y.shape == (P, B) + pm.output_shape
    np.testing.assert_allclose(y.numpy(), per_member(pm, params, x), rtol=RTOL, atol=ATOL)


def test_nature_dqn_matches_per_member_keras():
    template = nn.nature_dqn(18)
    assert template.count_params() == 4_052_658
    pm = nn.PopulationModel(template)
    assert pm.num_params == 4_052_658
    P, B = 2, 2
    params = perturbed(pm, P, scale=0.01)
    x = tf.random.stateless_uniform((P, B, 84, 84, 4), [3, 4])
    y = pm(params, x)
    assert y.shape == (P, B, 18)
    np.testing.assert_allclose(y.numpy(), per_member(pm, params, x), rtol=RTOL, atol=1e-5)


CONV_CASES = [(3, 1, "same", (9, 10)), (3, 1, "valid", (9, 10)), (8, 4, "same", (84, 84)), (8, 4, "valid", (30, 33)),
              (4, 2, "same", (21, 21)), (4, 2, "valid", (11, 12)), ((3, 5), (2, 1), "same", (10, 9)),
              (1, 2, "valid", (7, 7))]


@pytest.mark.parametrize(
    "kernel,strides,padding,hw,method",
    [c + ("im2col",) for c in CONV_CASES] + [c + ("grouped",) for c in CONV_CASES[1:7:2]] + [CONV_CASES[2] + ("grouped",), CONV_CASES[6] + ("grouped",)],
)
def test_population_conv2d_matches_keras_conv2d(kernel, strides, padding, hw, method):
    P, B, C, F = 3, 2, 4, 5
    layer = nn.PopulationConv2D(F, kernel, strides=strides, padding=padding, activation="relu",
                                bias_initializer="random_normal", seed=3, method=method)
    x = tf.random.stateless_normal((P, B) + hw + (C,), [5, 6])
    y = layer(x)
    for p in range(P):
        ref = L.Conv2D(F, kernel, strides=strides, padding=padding, activation="relu")
        ref.build((None,) + hw + (C,))
        ref.set_weights([layer.kernel[p].numpy(), layer.bias[p].numpy()])
        np.testing.assert_allclose(y[p].numpy(), ref(x[p]).numpy(), rtol=RTOL, atol=ATOL)


def test_population_dense_layer_matches_keras_dense_and_serializes(tmp_path):
    P, B = 5, 3
    layer = nn.PopulationDense(4, activation="tanh", bias_initializer="random_uniform", seed=1)
    x = tf.random.stateless_normal((P, B, 6), [1, 1])
    y = layer(x)
    assert layer.kernel.shape == (P, 6, 4)
    for p in range(P):
        ref = L.Dense(4, activation="tanh")
        ref.build((None, 6))
        ref.set_weights([layer.kernel[p].numpy(), layer.bias[p].numpy()])
        np.testing.assert_allclose(y[p].numpy(), ref(x[p]).numpy(), rtol=RTOL, atol=ATOL)
    # members are initialized independently, each with per-member Glorot fans
    k = layer.kernel.numpy()
    assert not np.allclose(k[0], k[1])
    assert np.abs(k).max() <= np.sqrt(6.0 / (6 + 4)) + 1e-6
    # config round trip and a saved Keras model containing population layers
    clone = nn.PopulationDense.from_config(layer.get_config())
    assert clone.units == 4 and clone.get_config()["activation"] == "tanh"
    inp = keras.Input((B, 6), batch_size=P)
    model = keras.Model(inp, nn.PopulationConv2D(2, 1)(L.Reshape((B, 2, 3, 1))(nn.PopulationDense(6, seed=2)(inp))))
    path = str(tmp_path / "pop.keras")
    model.save(path)
    again = keras.saving.load_model(path)
    np.testing.assert_allclose(again(x).numpy(), model(x).numpy(), rtol=RTOL, atol=ATOL)


def test_indices_equal_full_run_gathered():
    pm = nn.PopulationModel(functional_mlp())
    P, B = 9, 4
    params = perturbed(pm, P)
    x = tf.random.stateless_normal((P, B, 6), [2, 2])
    full = pm(params, x).numpy()
    idx = tf.constant([7, 0, 3, 3, 8], tf.int32)
    xs = tf.gather(x, idx)
    np.testing.assert_allclose(pm(params, xs, idx).numpy(), full[idx.numpy()], rtol=RTOL, atol=ATOL)
    small = tf.constant([4, 4], tf.int32)  # 2n <= P: the gather-rows-first branch
    np.testing.assert_allclose(pm(params, tf.gather(x, small), small).numpy(), full[[4, 4]], rtol=RTOL, atol=ATOL)
    weights = pm.unflatten(params)  # pre-split path through indexed_matmul
    np.testing.assert_allclose(pm(weights, xs, idx).numpy(), full[idx.numpy()], rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(pm(weights, x).numpy(), full, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("method", ["im2col", "grouped"])
def test_indices_conv_net(method):
    template = keras.Sequential([keras.Input((12, 12, 2)), L.Conv2D(4, 3, strides=2, activation="relu"),
                                 L.Conv2D(3, 2, padding="valid"), L.Flatten(), L.Dense(3)])
    pm = nn.PopulationModel(template, conv_method=method)
    P = 6
    params = perturbed(pm, P)
    x = tf.random.stateless_normal((P, 2, 12, 12, 2), [3, 3])
    full = pm(params, x).numpy()
    np.testing.assert_allclose(full, per_member(pm, params, x), rtol=RTOL, atol=ATOL)
    for idx in (np.array([5, 1], np.int32), np.array([0, 2, 2, 5], np.int32)):
        got = pm(pm.unflatten(params), tf.gather(x, idx), idx)
        np.testing.assert_allclose(got.numpy(), full[idx], rtol=RTOL, atol=ATOL)
        got = pm(params, tf.gather(x, idx), idx)
        np.testing.assert_allclose(got.numpy(), full[idx], rtol=RTOL, atol=ATOL)


def test_indexed_matmul_reference_and_op_agree_with_numpy():
    w = tf.random.stateless_normal([7, 5, 3], [0, 1])
    x = tf.random.stateless_normal([4, 2, 5], [0, 2])
    idx = np.array([6, 0, 6, 2], np.int32)
    want = np.einsum("nbk,nkm->nbm", x.numpy(), w.numpy()[idx])
    np.testing.assert_allclose(nn.indexed_matmul(x, w, idx, use_op=False).numpy(), want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(nn.indexed_matmul(x, w, idx).numpy(), want, rtol=1e-5, atol=1e-6)
    with pytest.raises(ShapeError, match="k="):
        nn.indexed_matmul(x, tf.zeros([7, 4, 3]), idx)


def test_to_keras_round_trip_and_save(tmp_path):
    template = seq_mlp()
    pm = nn.PopulationModel(template)
    params = perturbed(pm, 3, seed=4)
    model = pm.to_keras(params[2])
    assert isinstance(model, keras.Model) and model is not template
    assert [tuple(w.shape) for w in model.get_weights()] == pm.weight_shapes
    np.testing.assert_array_equal(pm.from_keras(model).numpy(), params[2].numpy())
    x = tf.random.stateless_normal((3, 7, 3, 4), [9, 9])
    np.testing.assert_allclose(model(x[2]).numpy(), pm(params, x)[2].numpy(), rtol=RTOL, atol=ATOL)
    path = str(tmp_path / "best.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    np.testing.assert_allclose(loaded(x[2]).numpy(), model(x[2]).numpy(), rtol=RTOL, atol=ATOL)
    np.testing.assert_array_equal(pm.from_keras(loaded).numpy(), params[2].numpy())
    # flatten/unflatten are inverse
    rows = pm.unflatten(params)
    for p in range(3):
        np.testing.assert_array_equal(pm.flatten([w[p] for w in rows]).numpy(), params[p].numpy())


def test_init_params_deterministic_and_per_family():
    template = keras.Sequential([keras.Input((40,)), L.Dense(60, activation="tanh"), L.LayerNormalization(),
                                 L.Dense(30, kernel_initializer="he_normal", bias_initializer="ones")])
    pm = nn.PopulationModel(template)
    a = pm.init_params(200, seed=11)
    np.testing.assert_array_equal(a.numpy(), pm.init_params(200, seed=11).numpy())
    assert not np.allclose(a.numpy(), pm.init_params(200, seed=12).numpy())
    k1, b1, g, beta, k2, b2 = [w.numpy() for w in pm.unflatten(a)]
    limit = np.sqrt(6.0 / (40 + 60))
    assert np.abs(k1).max() <= limit and np.abs(k1).max() > 0.99 * limit  # glorot uniform
    assert abs(k1.std() - limit / np.sqrt(3)) < 0.01 * limit
    assert not np.allclose(k1[0], k1[1])
    np.testing.assert_array_equal(b1, 0.0)
    np.testing.assert_array_equal(g, 1.0)
    np.testing.assert_array_equal(beta, 0.0)
    np.testing.assert_array_equal(b2, 1.0)
    he_std = np.sqrt(2.0 / 60)  # truncated normal at 2 std, rescaled to this std
    assert abs(k2.std() - he_std) < 0.02 * he_std
    assert np.abs(k2).max() <= 2 * he_std / 0.87962566103423978 + 1e-6


def test_unsupported_layers_raise_clear_errors():
    with pytest.raises(ConfigError, match=r"'cl'.*ConvLSTM1D.*supported: .*Dense.*nn_translators.md"):
        nn.PopulationModel(keras.Sequential([keras.Input((3, 6, 2)), L.ConvLSTM1D(2, 3, name="cl")]))
    ct = L.Conv2DTranspose(2, 4, strides=2, padding="same", output_padding=0, name="ct")  # Keras cannot call it
    with pytest.raises(ConfigError, match=r"'ct'.*Conv2DTranspose.*output_padding=\(0, 0\)"):
        nn.PopulationModel(keras.Sequential([keras.Input((3, 4, 2)), ct]))
    with pytest.raises(ConfigError, match=r"'mask' \(Masking\) is not supported"):  # not "'not_equal' (NotEqual)"
        nn.PopulationModel(keras.Sequential([keras.Input((6, 3)), L.Masking(0.0, name="mask"), L.GRU(3)]))
    with pytest.raises(ConfigError, match="not built"):
        nn.PopulationModel(keras.Sequential([L.Dense(3)]))
    seq, h0, c0 = keras.Input((5, 3)), keras.Input((4,)), keras.Input((4,))
    with pytest.raises(ConfigError, match=r"'lstm0' \(LSTM\): takes 1 input\(s\), called on 3 .*initial_state="):
        nn.PopulationModel(keras.Model([seq, h0, c0], L.LSTM(4, name="lstm0")(seq, initial_state=[h0, c0])))
    x = keras.Input((4,))  # a keras.ops call named like the Multiply layer: not "unsupported layer ... (Multiply)"
    # Keras numbers auto-named ops per process ('multiply_255' after earlier tests)
    with pytest.raises(ConfigError, match=r"operation 'multiply(_\d+)?' \(Multiply\) in the template is a keras.ops"):
        nn.PopulationModel(keras.Model(x, L.Dense(2)(keras.ops.concatenate([x, keras.ops.multiply(x, x)]))))
    a = keras.Input((3,))
    b = keras.Input((3,))
    with pytest.raises(ConfigError, match="no weights"):
        nn.PopulationModel(keras.Model([a, b], L.Add()([a, b])))
    class Halves(keras.initializers.Initializer):
        def __call__(self, shape, dtype=None):
            return keras.ops.full(shape, 0.5, dtype=dtype)

    with pytest.raises(ConfigError, match="weight .*/halves/kernel: initializer Halves has no stateless population "
                       "sampler.*from_keras"):
        nn.PopulationModel(keras.Sequential([keras.Input((3,)), L.Dense(3, kernel_initializer=Halves(),
                                                                          name="halves")])).init_params(2)


def test_bad_shapes_raise():
    pm = nn.PopulationModel(nn.mlp((4,), 2, hidden=(8,)))
    params = pm.init_params(3)
    with pytest.raises(ShapeError, match=r"\[P, 58\]"):
        pm(params[:, :10], tf.zeros([3, 1, 4]))
    with pytest.raises(ShapeError, match="inputs must have shape"):
        pm(params, tf.zeros([3, 1, 5]))
    with pytest.raises(ShapeError, match="2 members on axis 0 but params have 3"):
        pm(params, tf.zeros([2, 1, 4]))
    with pytest.raises(ShapeError, match=r"\[0, 3\)"):
        pm(params, tf.zeros([1, 1, 4]), indices=[3])
    with pytest.raises(ShapeError, match="weight 0"):
        pm.flatten([np.zeros((5, 8))] + [w[0] for w in pm.unflatten(params)][1:])


def test_one_trace_per_shape():
    # the layer-by-layer path (a fused MLP called eagerly runs its kernel without tracing at all)
    pm = nn.PopulationModel(nn.mlp((4,), 2, hidden=(8,)), use_op=False)
    params = pm.init_params(6)
    for _ in range(3):
        pm(params + 1.0, tf.random.normal([6, 2, 4]))
    assert pm.traces == {"flat": 1}
    pm(params, tf.zeros([6, 5, 4]))
    assert pm.traces == {"flat": 2}
    for n in (2, 2, 2):
        pm(params, tf.zeros([n, 1, 4]), tf.range(n))
    assert pm.traces["flat_idx"] == 1
    policy = nn.Policy(pm, ActionSpec(discrete=True, num_actions=2))
    for _ in range(3):
        policy.forward(params, tf.random.normal([6, 1, 4]))
    assert policy.traces == {"flat": 1}


def test_policy_discrete_continuous_and_uint8():
    pm = nn.PopulationModel(nn.mlp((5,), 3, hidden=(8,)))
    params = perturbed(pm, 4)
    obs = tf.random.stateless_normal([4, 6, 5], [1, 3])
    logits = pm(params, obs).numpy()
    disc = nn.Policy(pm, ActionSpec(discrete=True, num_actions=3))
    a = disc.forward(params, obs)
    assert a.dtype == tf.int32 and a.shape == (4, 6)
    np.testing.assert_array_equal(a.numpy(), logits.argmax(-1))
    idx = tf.constant([2, 0])
    np.testing.assert_array_equal(disc.forward(params, tf.gather(obs, idx), idx).numpy(), logits.argmax(-1)[[2, 0]])
    np.testing.assert_array_equal(disc.forward(disc.prepare(params), tf.gather(obs, idx), idx).numpy(),
                                  logits.argmax(-1)[[2, 0]])

    low, high = np.array([-2.0, 0.0, 1.0], np.float32), np.array([2.0, 1.0, 5.0], np.float32)
    spec = ActionSpec(discrete=False, shape=(3,), low=low, high=high)
    tanh = nn.Policy(pm, spec, continuous="tanh").forward(params, obs).numpy()
    np.testing.assert_allclose(tanh, low + (np.tanh(logits) + 1) / 2 * (high - low), rtol=1e-5, atol=1e-6)
    clip = nn.Policy(pm, spec, continuous="clip").forward(params, obs).numpy()
    np.testing.assert_allclose(clip, np.clip(logits, low, high), rtol=1e-6)
    assert np.all(tanh >= low) and np.all(tanh <= high)

    frames = tf.constant(np.random.default_rng(0).integers(0, 256, (4, 6, 5)), tf.uint8)
    np.testing.assert_array_equal(disc.forward(params, frames).numpy(),
                                  pm(params, tf.cast(frames, tf.float32) / 255.0).numpy().argmax(-1))
    with pytest.raises(ShapeError, match=r"\[0, 4\)"):
        disc.forward(params, tf.gather(obs, [0]), [4])
    with pytest.raises(ConfigError, match="needs 4"):
        nn.Policy(pm, ActionSpec(discrete=True, num_actions=4))
    with pytest.raises(ConfigError, match="finite"):
        nn.Policy(pm, ActionSpec(discrete=False, shape=(3,), low=-np.inf * np.ones(3), high=np.inf * np.ones(3)))


def test_forward_inside_outer_function_with_unknown_sizes():
    """How the rollout evaluators call a policy: inside their own tf.function, P and n unknown."""
    pm = nn.PopulationModel(nn.mlp((4,), 2, hidden=(8,)))
    policy = nn.Policy(pm, ActionSpec(discrete=True, num_actions=2))
    params = perturbed(pm, 5)

    @tf.function(input_signature=[tf.TensorSpec([None, pm.num_params]), tf.TensorSpec([None, 1, 4]),
                                  tf.TensorSpec([None], tf.int32)])
    def outer(p, o, i):
        return policy.forward(p, o, i)

    obs = tf.random.stateless_normal([3, 1, 4], [4, 4])
    idx = tf.constant([4, 1, 2])
    want = policy.forward(params, tf.zeros([5, 1, 4]) + tf.scatter_nd(idx[:, None], obs, [5, 1, 4]))
    np.testing.assert_array_equal(outer(params, obs, idx).numpy(), tf.gather(want, idx).numpy())


def test_registry_names():
    from tfevo import registry

    # importing tfevo.nn registered them (registry.get would import every other part too)
    assert registry._REGISTRY["policy"]["mlp"] is nn.mlp
    assert registry._REGISTRY["policy"]["nature_dqn"] is nn.nature_dqn
    assert "Nature-DQN" in registry._DOCS["policy"]["nature_dqn"]


def test_orthogonal_members_are_orthogonal():
    w = nn.sample_population("orthogonal", (6, 4), popsize=5, seed=3).numpy()
    for p in range(5):
        np.testing.assert_allclose(w[p].T @ w[p], np.eye(4), atol=1e-5)
    assert not np.allclose(w[0], w[1])
    wide = nn.sample_population(keras.initializers.Orthogonal(gain=2.0), (3, 7), popsize=2, seed=3).numpy()
    np.testing.assert_allclose(wide[1] @ wide[1].T, 4 * np.eye(3), atol=1e-4)


def test_identity_initializer_gives_every_member_the_keras_matrix():
    """An IRNN template (SimpleRNN with recurrent_initializer='identity') initializes like Keras."""
    template = keras.Sequential([keras.Input((5, 3)), keras.layers.SimpleRNN(4, recurrent_initializer=
                                 keras.initializers.Identity(gain=0.5)), keras.layers.Dense(2)])
    pm = nn.PopulationModel(template)
    rec = pm.unflatten(pm.init_params(3, seed=0))[1].numpy()
    np.testing.assert_array_equal(rec, np.broadcast_to(template.layers[0].get_weights()[1], rec.shape))
    wide = nn.sample_population("identity", (2, 3), popsize=2, seed=0).numpy()
    np.testing.assert_array_equal(wide[1], keras.initializers.Identity()((2, 3)))


@pytest.mark.parametrize("input_dtype", ["uint8", "int32", "float32"])
def test_policy_does_not_scale_uint8_token_ids_read_by_an_embedding(input_dtype):
    """obs_scale='auto' divides uint8 frames by 255, but uint8 observations an Embedding reads are
    ids (e.g. Atari RAM bytes): the actions are those of the member's Keras model on the ids."""
    template = keras.Sequential([keras.Input((6,), dtype=input_dtype), L.Embedding(256, 3), L.Flatten(), L.Dense(4)])
    pm = nn.PopulationModel(template)
    params = pm.init_params(3, seed=0)
    policy = nn.Policy(pm, ActionSpec(discrete=True, num_actions=4))
    obs = tf.constant(np.random.default_rng(0).integers(0, 256, (3, 5, 6)), tf.uint8)
    want = np.stack([np.argmax(pm.to_keras(params[p])(obs[p].numpy().astype(input_dtype)), -1) for p in range(3)])
    np.testing.assert_array_equal(policy.forward(params, obs), want)
    np.testing.assert_array_equal(policy.forward(params, obs[1:], indices=tf.constant([1, 2])), want[1:])


@pytest.mark.parametrize("first", ["rescaling", "normalization"])
def test_policy_leaves_uint8_frames_to_a_template_that_scales_them(first):
    """obs_scale='auto' divides uint8 frames by 255 unless the template's own Rescaling / Normalization
    reads the observation: it gets the frames as they are, so the actions are those of the member's
    Keras model on the raw frames (not scaled twice)."""
    frames = np.random.default_rng(0).integers(0, 256, (3, 5, 4, 4, 1)).astype(np.uint8)
    if first == "rescaling":
        pre = L.Rescaling(1 / 255.0)
    else:
        pre = L.Normalization()
        pre.adapt(frames.reshape(-1, 4, 4, 1).astype(np.float32))
    template = keras.Sequential([keras.Input((4, 4, 1)), pre, L.Flatten(), L.Dense(4)])
    pm = nn.PopulationModel(template)
    params = pm.init_params(3, seed=0)
    policy = nn.Policy(pm, ActionSpec(discrete=True, num_actions=4))
    obs = tf.constant(frames)
    want = np.stack([np.argmax(pm.to_keras(params[p])(frames[p].astype(np.float32)), -1) for p in range(3)])
    np.testing.assert_array_equal(policy.forward(params, obs), want)
    np.testing.assert_array_equal(policy.forward(params, obs[1:], indices=tf.constant([1, 2])), want[1:])
    assert pm.num_params == 16 * 4 + 4  # the preprocessing statistics are not evolved


def test_inverted_normalization_is_refused():
    with pytest.raises(ConfigError, match=r"invert=True"):
        nn.PopulationModel(keras.Sequential([keras.Input((3,)), L.Normalization(mean=0.0, variance=1.0, invert=True),
                                             L.Dense(2)]))


def test_subclassed_template_is_refused_as_such():
    """A built subclassed model gets the error saying what it is and what is supported (not 'not built')."""

    class Net(keras.Model):
        def __init__(self):
            super().__init__()
            self.d = keras.layers.Dense(2)

        def call(self, x):
            return self.d(x)

    model = Net()
    model(np.zeros((1, 5), np.float32))
    with pytest.raises(ConfigError, match=r"'net' \(Net\) is a subclassed keras.Model.*Sequential and functional"):
        nn.PopulationModel(model)


@pytest.mark.parametrize("use_op", [True, False])
def test_policy_forward_refuses_obs_of_another_population_size(use_op):
    """obs [n, B, ...] with n != P and no indices: a ShapeError naming both sizes on every path (TensorFlow's
    own matmul broadcast n=1 to all members, the C++ ops failed inside the graph)."""
    pm = nn.PopulationModel(nn.mlp((4,), 2, hidden=(5,)), use_op=use_op)
    policy = nn.Policy(pm, ActionSpec(discrete=True, num_actions=2))
    params = pm.init_params(3, seed=0)
    for n in (1, 2):
        with pytest.raises(ShapeError, match=rf"obs have {n} members on axis 0 but params have 3"):
            policy.forward(params, tf.zeros([n, 1, 4]))
        with pytest.raises(ShapeError, match=rf"obs have {n} members on axis 0 but params have 3"):
            policy.forward(pm.unflatten(params), tf.zeros([n, 1, 4]))
    assert policy.forward(params, tf.zeros([3, 1, 4])).shape == (3, 1)


@pytest.fixture
def channels_first_config():
    before = keras.config.image_data_format()
    keras.config.set_image_data_format("channels_first")  # as a keras.json may set it
    yield
    keras.config.set_image_data_format(before)


def test_flatten_channels_first_and_builtin_templates_under_a_channels_first_config(channels_first_config):
    """A Flatten with data_format='channels_first' (the default under such a keras.json) moves the first sample
    axis last before flattening, as Keras does, on every path (fused MLP, layer by layer, subsets); the built-in
    mlp and nature_dqn templates stay channels last whatever the config."""
    template = keras.Sequential([keras.Input((3, 4, 2)), L.Flatten(), L.Dense(5, activation="tanh"), L.Dense(2)])
    assert template.layers[0].data_format == "channels_first"
    rng = np.random.default_rng(0)
    for b in (1, 6):  # the fused kernel's row counts and the GEMM path
        x = rng.standard_normal((3, b, 3, 4, 2)).astype(np.float32)
        for use_op in (None, False):
            pm = nn.PopulationModel(template, use_op=use_op)
            params = pm.init_params(3, seed=2)
            y = pm(params, x)
            y_sub = pm(params, x[[2, 0]], indices=[2, 0])
            for p in range(3):
                want = pm.to_keras(params[p])(x[p])
                np.testing.assert_allclose(y[p], want, rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(y_sub, tf.gather(y, [2, 0]), rtol=1e-5, atol=1e-6)
    mlp = nn.PopulationModel(nn.mlp((3, 4), 2, hidden=(8,)))
    assert mlp._mlp_plan is not None  # (the one-kernel MLP still applies)
    dqn = nn.PopulationModel(nn.nature_dqn(6, input_shape=(36, 36, 4)))
    assert dqn.output_shape == (6,)


def _unregistered_activation(x):
    return keras.activations.tanh(x) * 0.5


def test_to_keras_names_a_template_clone_model_cannot_rebuild():
    """keras.models.clone_model cannot deserialize an unregistered function (here an activation): to_keras
    says so and names the way around it; the population itself runs the function."""
    template = keras.Sequential([keras.Input((3,)), L.Dense(4, activation=_unregistered_activation), L.Dense(2)])
    pm = nn.PopulationModel(template)
    params = pm.init_params(2, seed=0)
    with pytest.raises(ConfigError, match=r"to_keras: keras.models.clone_model cannot rebuild the template .*"
                                          r"register_keras_serializable.*template.set_weights"):
        pm.to_keras(params[0])
    template.set_weights(pm.template_weights(params[1]))
    x = np.random.default_rng(0).standard_normal((2, 5, 3)).astype(np.float32)
    np.testing.assert_allclose(pm(params, x)[1], template(x[1]), rtol=1e-5, atol=1e-6)

