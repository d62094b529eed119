"""Templates built under a non-float32 dtype policy (mixed_float16, mixed_bfloat16, float64).

The population computes in float32 whatever the template's policy: its output must equal the float32
build of the same architecture with the member's weights (float32 rounding), and stay within the
policy's precision of ``to_keras`` (which keeps the template's policy). The layers the population runs
through Keras itself (pooling, merges, ReLU/Softmax layers, a layer given as ``activation=``, a frozen
layer) are the ones that used to return the policy's dtype into a float32 graph.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfevo import nn

L = keras.layers
P, B = 3, 2


def _template():
    inp = keras.Input((6, 3))
    enc = L.Dense(4, name="enc", trainable=False)
    h = enc(inp)
    a = L.Dense(4, activation=L.ReLU(negative_slope=0.1))(h)
    b = L.Dense(4)(h)
    x = L.Add()([a, b])
    x = L.MaxPooling1D(2)(x)
    x = L.ReLU(max_value=2.0)(x)
    x = L.Softmax(axis=1)(x)
    x = L.GlobalAveragePooling1D()(x)
    return keras.Model(inp, L.Dense(2)(x))


@pytest.fixture
def policy():
    def use(name):
        keras.utils.set_random_seed(0)
        keras.config.set_dtype_policy(name)

    yield use
    keras.config.set_dtype_policy("float32")


@pytest.mark.parametrize("name, tol", [("mixed_float16", 2e-2), ("mixed_bfloat16", 1e-1), ("float64", 1e-5)])
def test_population_computes_in_float32_under_any_policy(policy, name, tol):
    policy(name)
    template = _template()
    assert template.layers[-1].compute_dtype == name.replace("mixed_", "")
    pm = nn.PopulationModel(template)
    policy("float32")
    reference = _template()
    params = pm.init_params(P, seed=1) + 0.05 * tf.random.stateless_normal([P, pm.num_params], [1, 2])
    x = np.random.default_rng(0).standard_normal((P, B, 6, 3)).astype(np.float32)
    runs = [pm(params, x), pm(pm.unflatten(params), x), pm(params, x[::-1], indices=[2, 1, 0])[::-1]]
    for y in runs:
        assert y.dtype == tf.float32
    for p in range(P):
        weights = pm.template_weights(params[p])
        reference.set_weights(weights)
        want = reference(x[p]).numpy()
        for y in runs:
            np.testing.assert_allclose(y[p].numpy(), want, rtol=1e-5, atol=1e-6)
        policy_out = np.asarray(pm.to_keras(params[p])(x[p]), np.float32)
        np.testing.assert_allclose(runs[0][p].numpy(), policy_out, rtol=tol, atol=tol)
