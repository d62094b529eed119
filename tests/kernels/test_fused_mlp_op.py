"""The fused population-MLP kernel (TfevoPopulationMlp) against its references.

References: the model's layer-by-layer path (the model without its MLP plan, the
path PopulationModel ran before the kernel) and ordinary per-member Keras
models (``to_keras``).
"""

import numpy as np
import pytest
import keras
import tensorflow as tf

from tfevo.core import ShapeError
from tfevo import kernels
from tfevo.nn import fused_mlp
from tfevo.nn.model import PopulationModel
from tfevo.nn.policy import mlp

pytestmark = pytest.mark.skipif(not kernels.built("TfevoPopulationMlp"), reason="TfevoPopulationMlp not built")


def _layered(template):
    """The layer-by-layer path with the other kernels on (the model without its MLP plan)."""
    pm = PopulationModel(template)
    pm._mlp_plan = None
    return pm


def _pair(template):
    return PopulationModel(template), _layered(template)


def _params(pm, P, seed, scale=0.5):
    base = pm.init_params(P, seed=seed)
    return base + scale * tf.random.stateless_normal(base.shape, [seed, 7])


@pytest.mark.parametrize("act", ["tanh", "relu", None, "sigmoid", "elu"])
@pytest.mark.parametrize("obs_shape,hidden,out,B", [((17,), (64, 64), 6, 1), ((5,), (3, 70, 33), 2, 3),
                                                     ((4, 3), (16,), 1, 2), ((8,), (), 4, 1)])
def test_matches_layer_by_layer_and_keras(act, obs_shape, hidden, out, B):
    template = mlp(obs_shape, out, hidden=hidden, activation=act)
    pm, ref = _pair(template)
    assert pm.fused_mlp and not ref.fused_mlp
    P = 37
    params = _params(pm, P, seed=len(hidden) + B)
    x = 2.0 * tf.random.stateless_normal([P, B, *obs_shape], [B, 3])
    y, y_ref = pm(params, x).numpy(), ref(params, x).numpy()
    assert y.shape == (P, B, out)
    idx = tf.constant([36, 0, 5, 5, 17], tf.int32)  # a subset, out of order, with a repeat
    xs = tf.gather(x, idx)
    ys, ys_ref = pm(params, xs, idx).numpy(), ref(params, xs, idx).numpy()
    if act in ("tanh", "relu", None):
        # same products as the in-place Dense op and TensorFlow's tanh roundings: bit for bit
        np.testing.assert_array_equal(y, y_ref)
        np.testing.assert_array_equal(ys, ys_ref)
    else:
        np.testing.assert_allclose(y, y_ref, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(ys, ys_ref, rtol=1e-5, atol=1e-6)
    # a member's result does not depend on the batch it is computed in
    np.testing.assert_array_equal(ys, y[idx.numpy()])
    for i in (0, 17, 36):
        k = pm.to_keras(params[i])(x[i]).numpy()
        # Keras (oneDNN) sums in its own order, which depends on the CPU's vector width: an output
        # near zero then differs by more than 1e-5 of itself (seen on an AVX2 CPU: 1.7e-5 on an
        # output of 5e-5).  So rtol 1e-5 is checked against the scale of the member's outputs.
        np.testing.assert_allclose(y[i], k, rtol=1e-5, atol=1e-5 * max(1.0, float(np.abs(k).max())))


def test_threaded_split_equals_one_member_at_a_time():
    # P * b * MACs above the kernel's inline threshold: members are split over
    # the intra-op pool; each must equal its own single-member (inline) call.
    template = mlp((32,), 8, hidden=(128, 128), activation="tanh")
    pm = PopulationModel(template)
    P, B = 96, 8
    params = _params(pm, P, seed=3)
    x = tf.random.stateless_normal([P, B, 32], [1, 2])
    plan = pm._mlp_plan
    assert P * B * plan.macs > 2 * (1 << 21)
    full = fused_mlp.population_mlp(x, params, tf.range(P), plan, use_op=True).numpy()
    for i in (0, 1, 47, 95):
        one = fused_mlp.population_mlp(x[i:i + 1], params, tf.constant([i]), plan, use_op=True).numpy()
        np.testing.assert_array_equal(full[i], one[0])


def test_standalone_reference_agrees():
    template = mlp((6,), 3, hidden=(20, 20), activation="relu")
    pm = PopulationModel(template)
    params = _params(pm, 10, seed=5)
    x = tf.random.stateless_normal([4, 2, 6], [4, 4])
    idx = tf.constant([9, 2, 2, 0])
    a = fused_mlp.population_mlp(x, params, idx, pm._mlp_plan, use_op=True)
    b = fused_mlp.population_mlp(x, params, idx, pm._mlp_plan, use_op=False)
    np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)


def test_plan_only_for_plain_mlps():
    assert PopulationModel(mlp((4,), 2, hidden=(8,)))._mlp_plan is not None
    assert PopulationModel(mlp((4, 2), 2, hidden=(8,)))._mlp_plan.flatten
    assert PopulationModel(mlp((4,), 2, hidden=(8,), layer_norm=True))._mlp_plan is None
    soft = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="softmax"), keras.layers.Dense(2)])
    assert PopulationModel(soft)._mlp_plan is None
    drop = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="tanh"), keras.layers.Dropout(0.5),
                             keras.layers.Dense(2, use_bias=False)])
    plan = PopulationModel(drop)._mlp_plan
    assert plan is not None and plan.bias_offsets[1] == -1 and plan.activations == ("tanh", "none")
    # rank-2 inputs without Flatten: Dense acts on the last axis; the kernel is not used
    seq = keras.Sequential([keras.Input((3, 4)), keras.layers.Dense(5)])
    assert PopulationModel(seq)._mlp_plan is None


def _has_fused_op(fn, *args):
    g = fn.get_concrete_function(*args).graph
    return any(op.type == "TfevoPopulationMlp" for op in g.get_operations())


def test_dispatcher_rules(monkeypatch):
    template = mlp((4,), 2, hidden=(8,))
    params = PopulationModel(template).init_params(5, seed=0)
    x = tf.zeros([5, 1, 4])
    pm = PopulationModel(template)
    assert _has_fused_op(tf.function(lambda p, v: pm.forward_graph(p, v)), params, x)
    # XLA: the reference (the op has no XLA kernel)
    xla = tf.function(lambda p, v: pm.forward_graph(p, v), jit_compile=True)
    assert not _has_fused_op(xla, params, x)  # traced only: compiling would cost seconds
    # split weights never take the kernel
    assert not _has_fused_op(tf.function(lambda w, v: pm.forward_graph(w, v)), pm.unflatten(params), x)
    monkeypatch.setenv("TFEVO_DISABLE_CUSTOM_OPS", "1")
    pm2 = PopulationModel(template)
    assert not pm2.fused_mlp
    assert not _has_fused_op(tf.function(lambda p, v: pm2.forward_graph(p, v)), params, x)


def test_bad_inputs_are_rejected():
    pm = PopulationModel(mlp((4,), 2, hidden=(8,)))
    params = pm.init_params(5, seed=0)
    with pytest.raises(ShapeError, match="features"):
        fused_mlp.population_mlp(tf.zeros([2, 1, 3]), params, tf.constant([0, 1]), pm._mlp_plan)
    with pytest.raises(ShapeError, match="idx"):
        fused_mlp.population_mlp(tf.zeros([2, 1, 4]), params, tf.constant([[0, 1]]), pm._mlp_plan)
    with pytest.raises(tf.errors.InvalidArgumentError, match="out of range"):
        fused_mlp.population_mlp(tf.zeros([2, 1, 4]), params, tf.constant([0, 5]), pm._mlp_plan, use_op=True)
    with pytest.raises(tf.errors.InvalidArgumentError, match="outside params"):
        fused_mlp.population_mlp(tf.zeros([2, 1, 4]), params[:, :20], tf.constant([0, 1]), pm._mlp_plan,
                                 use_op=True)


def test_non_finite_member_stays_isolated():
    pm, ref = _pair(mlp((4,), 3, hidden=(16, 16)))
    params = _params(pm, 6, seed=1).numpy()
    params[2, 7] = np.nan
    params[4, 0] = np.inf
    x = tf.random.stateless_normal([6, 2, 4], [0, 1])
    y = pm(params, x).numpy()
    assert np.isnan(y[2]).all()
    ok = [0, 1, 3, 5]
    assert np.isfinite(y[ok]).all()
    np.testing.assert_array_equal(y[ok], ref(params, x).numpy()[ok])


def test_eager_call_runs_the_kernel_without_tracing():
    pm, ref = _pair(mlp((4, 2), 3, hidden=(8,)))  # with a leading Flatten
    params = _params(pm, 6, seed=2)
    for B in (1, 4, 1):
        x = tf.random.stateless_normal([6, B, 4, 2], [B, 0])
        np.testing.assert_array_equal(pm(params, x).numpy(), ref(params, x).numpy())
        idx = tf.constant([5, 1])
        np.testing.assert_array_equal(pm(params, tf.gather(x, idx), idx).numpy(),
                                      ref(params, tf.gather(x, idx), idx).numpy())
    assert pm.traces == {}
    with pytest.raises(ShapeError, match=r"\[0, 6\)"):
        pm(params, tf.zeros([1, 1, 4, 2]), indices=[6])


def test_rows_grouped_equal_rows_alone():
    # up to 4 rows of a member share each weight load; a row's result must not depend on that
    template = mlp((10,), 5, hidden=(40, 70), activation="tanh")
    pm = PopulationModel(template)
    params = _params(pm, 3, seed=9)
    x = tf.random.stateless_normal([3, 7, 10], [7, 7])
    plan = pm._mlp_plan
    full = fused_mlp.population_mlp(x, params, tf.constant([2, 0, 1]), plan, use_op=True).numpy()
    for r in range(7):
        one = fused_mlp.population_mlp(x[:, r:r + 1], params, tf.constant([2, 0, 1]), plan, use_op=True).numpy()
        np.testing.assert_array_equal(full[:, r], one[:, 0])


def test_tanh_extremes_match_reference_bit_for_bit():
    # The kernel's tanh runs 8 lanes at a time on AVX2 machines plus a scalar tail: clamping
    # (+-inf, values beyond the clamp) and NaN must come out as TensorFlow's Tanh gives them,
    # in vector lanes and in the tail alike (hidden width 13 = one packet of 8 + 5 tail lanes).
    template = mlp((5,), 3, hidden=(13, 13), activation="tanh")
    pm, ref = _pair(template)
    P = 6
    params = _params(pm, P, seed=11, scale=20.0)  # large weights: many pre-activations past the clamp
    x = tf.random.stateless_normal([P, 1, 5], [5, 6]).numpy()
    x[1, 0, 2] = np.nan
    x[2, 0, 0] = np.inf
    x[3, 0, 4] = -np.inf
    x[4] *= 1e6
    y, y_ref = pm(params, tf.constant(x)).numpy(), ref(params, tf.constant(x)).numpy()
    np.testing.assert_array_equal(y, y_ref)
    assert np.isnan(y[1]).any() and np.isfinite(y[0]).all()
