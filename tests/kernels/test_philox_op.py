"""tfevo.random_ops: TensorFlow's stateless uniform draws on the Philox kernel
(custom_ops/normal.cc, TfevoStatelessUniform), bit for bit against
tf.random.stateless_uniform, and their use by NEAT's breeding (issue #5)."""

import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from tfevo import kernels, ops, random_ops as R
from tfevo.core import ShapeError

needs_op = pytest.mark.skipif(not kernels.built("TfevoStatelessUniform"), reason="Philox custom op not built (no compiler)")

# empty, scalar, odd sizes, sizes around the 4-word Philox group and the 2048-element chunk, 1-D to 3-D,
# and draws large enough to be split over the thread pool
SHAPES = [[0], [], [1], [2], [3], [4], [5], [7, 0], [0, 9], [13], [3, 5], [2047], [2048], [2049], [4, 513],
          [17, 1, 3], [8193, 3], [64, 2048], [64, 2049], [1000, 1237], [3, 333_333]]
SEEDS = [(0, 0), (7, 99), (-1, 2**31 - 1), (-(2**31), 5), (123456789, -987654321)]


def _bits(x):
    x = np.asarray(x)
    return x.view(np.uint32) if x.dtype == np.float32 else x


def _same(got, ref):
    got, ref = np.asarray(got), np.asarray(ref)
    assert got.shape == ref.shape and got.dtype == ref.dtype, (got.shape, got.dtype, ref.shape, ref.dtype)
    np.testing.assert_array_equal(_bits(got), _bits(ref))


@needs_op
@pytest.mark.parametrize("seed", SEEDS)
def test_op_bit_identical_to_tensorflow(seed):
    """Float uniforms and full-range int32 bits equal TensorFlow's draws for every shape (int32 and int64 shape
    tensors) and seed (int32 and int64: equal values give equal streams in both)."""
    for i, shape in enumerate(SHAPES):
        sd = tf.int32 if i % 2 == 0 else tf.int64
        sh = tf.constant(shape, tf.int64 if i % 3 == 0 else tf.int32)
        s = tf.constant(seed, sd)
        _same(R.stateless_uniform(sh, s, use_op=True), tf.random.stateless_uniform(shape, s))
        _same(R.stateless_int32_bits(sh, s, use_op=True),
              tf.random.stateless_uniform(shape, s, minval=None, maxval=None, dtype=tf.int32))


@needs_op
def test_int64_seeds_beyond_int32_and_python_arguments():
    for seed in ([2**40 + 3, -(2**50)], [-1, 2**63 - 1], [2**31, 0]):
        s = tf.constant(seed, tf.int64)
        _same(R.stateless_uniform([5, 77], s, use_op=True), tf.random.stateless_uniform([5, 77], s))
        _same(R.stateless_int32_bits([5, 77], s, use_op=True),
              tf.random.stateless_uniform([5, 77], s, minval=None, maxval=None, dtype=tf.int32))
    # Python lists for shape and seed
    _same(R.stateless_uniform([6, 5], [4, 2], use_op=True), tf.random.stateless_uniform([6, 5], [4, 2]))


@needs_op
def test_run_time_shape_in_tf_function():
    """The shape is a tensor computed inside the graph (as the NEAT breed-widths kernel computes it); the static
    part of the shape is kept when it is known."""
    fn = tf.function(lambda x, s: (R.stateless_uniform(tf.shape(x) * 3 + 1, s),
                                   R.stateless_int32_bits(tf.stack([4, tf.shape(x)[0]]), s)),
                     input_signature=[tf.TensorSpec([None], tf.float32), tf.TensorSpec([2], tf.int64)],
                     autograph=False)
    graph = fn.get_concrete_function().graph
    types = {op.type for op in graph.get_operations()}
    assert "TfevoStatelessUniform" in types and not any(t.startswith("StatelessRandomUniform") for t in types)
    assert graph.outputs[1].shape.as_list() == [4, None]
    for n in (0, 1, 6, 4001):
        s = tf.constant([n, 3], tf.int64)
        u, w = fn(tf.zeros([n]), s)
        _same(u, tf.random.stateless_uniform([3 * n + 1], s))
        _same(w, tf.random.stateless_uniform([4, n], s, minval=None, maxval=None, dtype=tf.int32))


@needs_op
def test_uniform_properties_and_seed_sensitivity():
    u = R.stateless_uniform([400_000], tf.constant([1, 2], tf.int64)).numpy()
    assert u.min() >= 0.0 and u.max() < 1.0
    assert abs(u.mean() - 0.5) < 0.003 and abs(u.var() - 1 / 12) < 0.002
    v = R.stateless_uniform([400_000], tf.constant([1, 3], tf.int64)).numpy()
    assert np.mean(u == v) < 1e-3
    w = R.stateless_int32_bits([200_000], tf.constant([1, 2], tf.int64)).numpy()
    bits = np.unpackbits(w.view(np.uint8))
    assert abs(bits.mean() - 0.5) < 0.002 and (w < 0).any() and (w > 0).any()
    # the float is the low 23 bits of the same word (TensorFlow's uint32 -> float mapping)
    np.testing.assert_array_equal(((w[:1000].view(np.uint32) & 0x7FFFFF) * 2.0**-23).astype(np.float32),
                                  R.stateless_uniform([1000], tf.constant([1, 2], tf.int64)).numpy())


def test_dispatch_reference_xla_and_disabled(monkeypatch):
    s = tf.constant([5, 6], tf.int64)
    _same(R.stateless_uniform([3, 4], s, use_op=False), tf.random.stateless_uniform([3, 4], s))
    _same(R.stateless_uniform([3, 4], s), tf.random.stateless_uniform([3, 4], s))  # op or reference: same bits
    seen = []

    @tf.function(jit_compile=True, autograph=False)
    def xla(s):
        seen.append(kernels.kernel("TfevoStatelessUniform") is not None)
        return R.stateless_uniform([3, 4], s), R.stateless_int32_bits([3, 4], s)

    @tf.function(jit_compile=True, autograph=False)
    def xla_ref(s):
        return (tf.random.stateless_uniform([3, 4], s),
                tf.random.stateless_uniform([3, 4], s, minval=None, maxval=None, dtype=tf.int32))

    for a, b in zip(xla(s), xla_ref(s)):  # under XLA: exactly what TensorFlow's call compiles to
        _same(a, b)
    assert seen == [False]
    if kernels.built("TfevoStatelessUniform"):
        with pytest.raises(RuntimeError, match="not available"):
            tf.function(lambda s: R.stateless_uniform([3], s, use_op=True), jit_compile=True, autograph=False)(s)
    # kernel missing (no compiler / TFEVO_DISABLE_CUSTOM_OPS): the TensorFlow call
    monkeypatch.setattr(ops, "op_module", lambda name, symbol: None)
    assert kernels.kernel("TfevoStatelessUniform") is None
    _same(R.stateless_int32_bits([7], s), tf.random.stateless_uniform([7], s, minval=None, maxval=None,
                                                                     dtype=tf.int32))
    with pytest.raises(RuntimeError, match="not available"):
        R.stateless_uniform([3], s, use_op=True)


@needs_op
def test_bad_inputs_raise_clear_errors():
    s = tf.constant([1, 2], tf.int64)
    with pytest.raises(ShapeError, match="seed must have shape"):
        R.stateless_uniform([3], tf.constant([1, 2, 3], tf.int64), use_op=True)
    with pytest.raises(ShapeError, match="seed must be int32 or int64"):
        R.stateless_uniform([3], tf.constant([1.0, 2.0]), use_op=True)
    with pytest.raises(ShapeError, match="1-D"):
        R.stateless_uniform(tf.constant([[3]]), s, use_op=True)
    with pytest.raises(ShapeError, match="int32/int64"):
        R.stateless_uniform(tf.constant([3.0]), s, use_op=True)
    with pytest.raises(tf.errors.InvalidArgumentError, match="negative dimension -2 at index 1"):
        R.stateless_uniform(tf.constant([3, -2]), s, use_op=True)
    fn = tf.function(lambda sh, sd: R.stateless_uniform(sh, sd, use_op=True), autograph=False,
                     input_signature=[tf.TensorSpec([None], tf.int32), tf.TensorSpec([None], tf.int64)])
    with pytest.raises(tf.errors.InvalidArgumentError, match="seed must have shape \\[2\\]"):
        fn(tf.constant([3]), tf.constant([1, 2, 3], tf.int64))


_THREADS_SCRIPT = r"""
import sys, numpy as np, tensorflow as tf
tf.config.threading.set_intra_op_parallelism_threads(1)
from tfevo import kernels, random_ops as R
assert kernels.kernel("TfevoStatelessUniform") is not None
s = tf.constant([11, -12], tf.int64)
u = R.stateless_uniform([3001, 401], s).numpy()
w = R.stateless_int32_bits([777, 1999], s).numpy()
np.savez(sys.argv[1], u=u, w=w)
"""


@needs_op
def test_result_does_not_depend_on_thread_count(tmp_path):
    """Draws large enough to be split over the intra-op pool give the same bits with one thread (fresh process)
    as with this process's pool."""
    s = tf.constant([11, -12], tf.int64)
    u = R.stateless_uniform([3001, 401], s).numpy()
    w = R.stateless_int32_bits([777, 1999], s).numpy()
    script = tmp_path / "run.py"
    script.write_text(_THREADS_SCRIPT)
    out = tmp_path / "one_thread.npz"
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    proc = subprocess.run([sys.executable, str(script), str(out)], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    z = np.load(out)
    _same(z["u"], u)
    _same(z["w"], w)
    _same(u, tf.random.stateless_uniform([3001, 401], s))


# -- NEAT breeding ---------------------------------------------------------------------------------------------

@needs_op
def test_neat_draws_are_tensorflows_numbers():
    from tfevo.neat import NEATConfig
    from tfevo.neat import operators as O

    cfg = NEATConfig(num_inputs=3, num_outputs=2, pop_size=37, max_nodes=12, max_conns=24)
    _, kn, _, kc = O._attr_columns(cfg)
    for P, N, C in ((37, 5, 9), (37, 12, 24), (1, 1, 1)):
        s = tf.constant([P, N], tf.int64)
        _same(O.crossover_words(P, N, C, s), tf.random.stateless_uniform(
            [P, (4 * N + 4 * C + 31) // 32], s, minval=None, maxval=None, dtype=tf.int32))
        _same(O.mutation_uniforms(cfg, P, N, C, s), tf.random.stateless_uniform([P, 13 + N * kn + C * kc], s))


@needs_op
def test_neat_breed_uses_the_kernel_and_runs_are_unchanged(monkeypatch):
    """breed_population draws with TfevoStatelessUniform (no TensorFlow RNG op left in its graph), and whole
    NEAT runs give the same populations, keys, markers and counters as with TensorFlow's draws."""
    from tfevo.neat import NEAT, NEATConfig
    from tfevo.neat import _breed_op as B
    from tfevo.neat import neat as neat_mod

    if not kernels.built("TfevoNeatBreed"):
        pytest.skip("NEAT breed kernel not built")
    cfg = NEATConfig(num_inputs=3, num_outputs=2, pop_size=40, max_nodes=12, max_conns=24, node_add_prob=0.5,
                     conn_add_prob=0.7, node_delete_prob=0.1, conn_delete_prob=0.1)
    P, N, C = cfg.pop_size, cfg.max_nodes, cfg.max_conns
    sig = [tf.TensorSpec([P, N, 5], tf.float32), tf.TensorSpec([P, C, 5], tf.float32),
           tf.TensorSpec([P], tf.int32), tf.TensorSpec([P], tf.int32), tf.TensorSpec([P], tf.bool),
           tf.TensorSpec([2], tf.int64), tf.TensorSpec([2], tf.int64), tf.TensorSpec([], tf.int64),
           tf.TensorSpec([], tf.int64)]
    graph = tf.function(lambda *a: B.breed_population(cfg, *a), input_signature=sig,
                        autograph=False).get_concrete_function().graph
    types = [op.type for op in graph.get_operations()]
    assert types.count("TfevoStatelessUniform") == 2
    assert not any(t.startswith("StatelessRandom") for t in types)

    rng = np.random.default_rng(3)
    fit = [tf.constant(rng.normal(size=P), tf.float32) for _ in range(5)]
    out = []
    for use in (True, False):
        if not use:
            real = kernels.kernel  # TensorFlow's stateless kernels draw
            monkeypatch.setattr(kernels, "kernel", lambda op, use_op=None, *a, **k: None if (
                op == "TfevoStatelessUniform" and use_op is None) else real(op, use_op, *a, **k))
        neat_mod._TELL_CACHE.clear()  # retrace tell
        algo = NEAT(cfg, seed=4)
        for f in fit:
            algo.tell(algo.ask(), f)
        out.append([v.numpy() for v in (algo.nodes, algo.conns, algo.next_node_key, algo.next_marker,
                                         algo.member_species)])
    neat_mod._TELL_CACHE.clear()
    for a, b in zip(*out):
        np.testing.assert_array_equal(a, b)
    assert np.isfinite(out[0][0][..., 0]).sum() > 0
