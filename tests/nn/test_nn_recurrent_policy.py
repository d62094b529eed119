"""Recurrent Keras templates as policies: the state is carried across environment steps, starts from
zeros at each episode and at each refill of a pipelined slot, and checkpoints continue exactly."""

import numpy as np
import pytest
import keras
import tensorflow as tf

from tfevo import nn
from tfevo.core import ConfigError, SeedStream
from tfevo.envs import make
from tfevo.rollout.ingraph import InGraphEvaluator

L = keras.layers


def lstm_template(obs=4, act=2):
    return keras.Sequential([keras.Input((None, obs)), L.LSTM(6, return_sequences=True), L.GRU(5),
                             L.Dense(act)])


def _params(pm, P, seed=0, scale=2.0):
    params = pm.init_params(P, seed)
    return params + tf.random.stateless_normal(params.shape, [seed, 1]) * scale  # members whose history matters


def test_policy_state_shape_and_errors():
    pm = nn.PopulationModel(lstm_template())
    env = make("CartPole-v1", 1)
    policy = nn.Policy(pm, env.action_spec)
    assert policy.state_shape == (6 + 6 + 5,) and policy.obs_shape == (4,)
    assert nn.Policy(nn.PopulationModel(nn.mlp((4,), 2)), env.action_spec).state_shape is None
    with pytest.raises(ConfigError, match="time axis first"):
        nn.Policy(nn.PopulationModel(keras.Sequential([keras.Input((3, 4)), L.SimpleRNN(2)])), env.action_spec)
    # a layer mixing time steps before the recurrent layer cannot be stepped one observation at a time
    with pytest.raises(ConfigError, match="'mix' .*time steps one by one"):
        nn.Policy(nn.PopulationModel(keras.Sequential([keras.Input((None, 4)), L.Conv1D(4, 2, padding="causal",
                                                                                         name="mix"),
                                                       L.GRU(3), L.Dense(2)])), env.action_spec)
    # per-step layers around the recurrent one are fine
    inp = keras.Input((None, 4))
    h = L.LayerNormalization()(L.Dense(8, activation="relu")(inp))
    seq = L.LSTM(5, return_sequences=True)(L.Concatenate()([h, inp]))
    ok = nn.Policy(nn.PopulationModel(keras.Model(inp, L.Dense(2)(L.Flatten()(L.SimpleRNN(3)(seq))))),
                   env.action_spec)
    assert ok.state_shape == (13,)


def test_user_activation_before_the_recurrent_layer_is_refused():
    """A user activation sees Keras's [batch, time, ...]: softmax over axis 1 mixes the time steps, which one
    observation per step cannot reproduce (stepping gave actions 1.2 away from the whole sequence)."""
    env = make("CartPole-v1", 1)

    def over_time(x):
        return keras.activations.softmax(x, axis=1)

    for layer in (L.Dense(4, activation=over_time, name="mix"), L.Activation(over_time, name="mix")):
        with pytest.raises(ConfigError, match="'mix' .*time steps one by one"):
            nn.Policy(nn.PopulationModel(keras.Sequential([keras.Input((None, 4)), layer, L.SimpleRNN(3),
                                                           L.Dense(2)])), env.action_spec)
    # after the recurrent layer the time axis is gone: fine
    nn.Policy(nn.PopulationModel(keras.Sequential([keras.Input((None, 4)), L.SimpleRNN(3),
                                                   L.Dense(2, activation=over_time)])), env.action_spec)


def test_ingraph_rollout_carries_state_like_rerunning_the_history():
    """Reference: at each step, the whole observation history from the zero state (no carried state)."""
    P, B, T = 5, 2, 25
    env = make("CartPole-v1", 1)
    pm = nn.PopulationModel(lstm_template())
    policy = nn.Policy(pm, env.action_spec, obs_scale=10.0)
    params = _params(pm, P)
    ev = InGraphEvaluator(env, policy, episodes=B, max_steps=T, seed=4, jit_compile=False)
    res = ev.evaluate_episodes(params)

    class Forgetful(nn.Policy):  # starts every step from the zero state
        def forward_state(self, params, obs, state, indices=None):
            return super().forward_state(params, obs, tf.zeros_like(state), indices)

    forgetful = InGraphEvaluator(env, Forgetful(pm, env.action_spec, obs_scale=10.0), episodes=B, max_steps=T,
                                 seed=4, jit_compile=False).evaluate_episodes(params)
    assert not np.array_equal(forgetful.returns.numpy(), res.returns.numpy())  # the carried state matters here

    state, obs = env.reset(SeedStream(4).next(), num_envs=P * B)
    hist, done = [], np.zeros(P * B, bool)
    returns = np.zeros(P * B)
    for t in range(T):
        hist.append(tf.reshape(tf.cast(obs, tf.float32), [P, B, 1, 4]) * 10.0)
        logits = pm.forward_graph(params, tf.concat(hist, 2))  # [P, B, 2]: last step of the full history (eager)
        actions = tf.reshape(tf.argmax(logits, -1, output_type=tf.int32), [-1])
        step = env.step(state, actions)
        returns += np.where(done, 0.0, step.reward.numpy())
        done |= step.terminated.numpy() | step.truncated.numpy() | (t + 1 >= T)
        state, obs = step.state, step.obs
    np.testing.assert_allclose(res.returns.numpy(), returns.reshape(P, B).astype(np.float32))
    assert len(set(res.returns.numpy().ravel())) > 1


def test_ingraph_xla_and_checkpoint_continue_exactly(tmp_path):
    env = make("CartPole-v1", 1)
    pm = nn.PopulationModel(lstm_template())
    policy = nn.Policy(pm, env.action_spec)
    params = _params(pm, 6, seed=2)
    a = InGraphEvaluator(env, policy, episodes=2, max_steps=40, seed=1)  # jit "auto": XLA when possible
    b = InGraphEvaluator(env, policy, episodes=2, max_steps=40, seed=1, jit_compile=False)
    np.testing.assert_allclose(a.evaluate(params).numpy(), b.evaluate(params).numpy())
    path = tf.train.Checkpoint(ev=b).write(str(tmp_path / "ck"))
    f2 = b.evaluate(params).numpy()
    c = InGraphEvaluator(env, policy, episodes=2, max_steps=40, seed=1, jit_compile=False)
    tf.train.Checkpoint(ev=c).read(path).assert_consumed()
    np.testing.assert_array_equal(c.evaluate(params).numpy(), f2)


def test_pipelined_resets_state_per_slot_refill():
    """More members than slots: every refill starts its member from the zero state, so the fitness
    equals a one-member-at-a-time serial loop that carries the state itself."""
    gym = pytest.importorskip("gymnasium")  # noqa: F841
    from tfevo.envs.gym import GymVectorEnv
    from tfevo.rollout.pipelined import PipelinedEvaluator

    pm = nn.PopulationModel(lstm_template())
    policy = nn.Policy(pm, GymVectorEnv("CartPole-v1", 1).action_spec)
    P, E, T = 7, 2, 60
    params = _params(pm, P, seed=3)
    ev = PipelinedEvaluator("CartPole-v1", policy, num_envs=3, num_subsets=2, episodes=E, max_steps=T, seed=5)
    fit = ev.evaluate(params).numpy()
    seeds = ev.episode_seeds(P, call=0)
    env = GymVectorEnv("CartPole-v1", num_envs=1)
    ref = np.zeros((P, E))
    prepared = policy.prepare(params)
    for m in range(P):
        for e in range(E):
            obs = env.reset([0], [seeds[m, e]])
            h = np.zeros((1, 1, policy.state_shape[0]), np.float32)
            for t in range(T):
                a, h = policy.forward_state(prepared, tf.constant(obs[:, None], tf.float32), h, tf.constant([m]))
                env.send(a.numpy().reshape(-1), [0])
                _, obs, r, te, tr = env.recv()
                ref[m, e] += r[0]
                if te[0] or tr[0]:
                    break
    env.close()
    ev.close()
    np.testing.assert_allclose(fit, ref.mean(1).astype(np.float32))
    assert len(set(fit)) > 1


def test_backwards_sequence_layers_in_policies_and_states():
    """Bidirectional and go_backwards layers read a sequence from its end: a recurrent Policy (one observation
    per step, forward state only) refuses them where they see the time axis; a PopulationModel runs them on
    whole sequences, an open time axis included, and a go_backwards layer started from given states equals
    Keras's ``initial_state=``. A TimeDistributed layer before the recurrent one steps like the whole sequence."""
    env = make("CartPole-v1", 1)
    for layer in (L.Bidirectional(L.LSTM(3), name="bi"), L.GRU(3, go_backwards=True, name="bi")):
        template = keras.Sequential([keras.Input((None, 4)), L.LSTM(4, return_sequences=True), layer, L.Dense(2)])
        with pytest.raises(ConfigError, match="'bi' .*reads the sequence backwards"):
            nn.Policy(nn.PopulationModel(template), env.action_spec)
    bi_only = nn.PopulationModel(keras.Sequential([keras.Input((None, 4)), L.Bidirectional(L.GRU(3)), L.Dense(2)]))
    assert bi_only.state_sizes == ()
    with pytest.raises(ConfigError, match="time axis open but has no recurrent layer"):
        nn.Policy(bi_only, env.action_spec)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(3, 2, 6, 4)).astype(np.float32)  # an open time axis, 6 steps
    y = np.asarray(bi_only(_params(bi_only, 3, scale=0.3), x))
    assert y.shape == (3, 2, 2) and np.isfinite(y).all()

    # go_backwards from given states == Keras's initial_state
    back = keras.Sequential([keras.Input((5, 4)), L.LSTM(3, go_backwards=True)])
    pm = nn.PopulationModel(back)
    params = _params(pm, 3, scale=0.5)
    h, c = (rng.normal(size=(3, 2, 3)).astype(np.float32) for _ in range(2))
    out, new = pm(params, x[:, :, :5], states=[h, c])
    for p in range(3):
        back.set_weights(pm.template_weights(params[p]))
        ref = back.layers[0](x[p, :, :5], initial_state=[h[p], c[p]])
        np.testing.assert_allclose(np.asarray(out[p]), np.asarray(ref), atol=1e-5)
        np.testing.assert_allclose(np.asarray(new[0][p]), np.asarray(ref), atol=1e-5)

    # TimeDistributed before the recurrent layer: stepping with carried states == the whole sequence
    td = keras.Sequential([keras.Input((None, 4)), L.TimeDistributed(L.Dense(5, activation="tanh")),
                           L.LSTM(3, return_sequences=True), L.Dense(2)])
    pm = nn.PopulationModel(td)
    assert nn.Policy(pm, env.action_spec).state_shape == (6,)
    params = _params(pm, 3, scale=0.5)
    whole = np.asarray(pm(params, x))
    states = pm.zero_states(3, 2)
    for t in range(x.shape[2]):
        y_t, states = pm(params, x[:, :, t:t + 1], states=states)
        np.testing.assert_allclose(np.asarray(y_t)[:, :, 0], whole[:, :, t], atol=1e-5)
