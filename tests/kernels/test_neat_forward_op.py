"""NEAT inference kernels (custom_ops/neat_forward.cc, issue #5) against their pure-TF reference
(tfevo.neat.network.transform / forward / recurrent_step) and the per-genome Python evaluators."""

import numpy as np
import pytest
import tensorflow as tf

from tfevo import kernels
from tfevo.neat import XOR, NEATConfig
from tfevo.neat import _forward_op as fo
from tfevo.neat import functions as F
from tfevo.neat import network as net

needs_op = pytest.mark.skipif(not kernels.built("TfevoNeatForward"), reason="NEAT inference custom op not built (no compiler)")

ALL_ACT = tuple(fo._BUILTIN_ACT)
ALL_AGG = tuple(fo._BUILTIN_AGG)
# Values agree to float rounding (sum order, C library vs Eigen exp/tanh), amplified a little
# through the layers of a random network.
RTOL, ATOL = 1e-5, 1e-5


def random_genomes(P, N, C, I, O, *, feed_forward=True, seed=0, act_ids=(0,), agg_ids=(0,), dup=True):
    """Random NaN-padded genomes: hidden nodes with shuffled keys in random slots (empty slots
    between them), connections between random pairs (acyclic in a random rank order for
    feed-forward genomes), some disabled, some duplicated, a few into input nodes."""
    rng = np.random.default_rng(seed)
    nodes = np.full([P, N, 5], np.nan, np.float32)
    conns = np.full([P, C, 5], np.nan, np.float32)
    for p in range(P):
        H = rng.integers(0, N - I - O + 1)
        hslots = rng.choice(np.arange(I + O, N), size=H, replace=False)
        hkeys = rng.choice(np.arange(I + O, 4 * N), size=H, replace=False)
        slots = list(range(I + O)) + list(hslots)
        keys = list(range(I + O)) + list(hkeys)
        for s, k in zip(slots, keys):
            nodes[p, s] = [k, rng.normal(), rng.normal(1.0, 0.3), rng.choice(agg_ids), rng.choice(act_ids)]
        nodes[p, :I, 1:3] = [0.0, 1.0]
        rank = {k: r for r, k in enumerate(rng.permutation(keys))}
        for k in range(I):
            rank[k] = -1  # inputs come first
        dst_keys = [k for k in keys if k >= I]
        rows = []
        for _ in range(rng.integers(0, C + 1)):
            a, b = rng.choice(keys), rng.choice(dst_keys)
            if feed_forward and rank[a] >= rank[b]:
                continue
            rows.append([a, b, float(rng.random() > 0.15), rng.normal(0, 1.5), len(rows)])
        if dup and rows and len(rows) < C:
            rows.append(list(rows[rng.integers(len(rows))]))  # a duplicate pair (weights add up)
        if not feed_forward and len(rows) < C:
            rows.append([I + O - 1, rng.integers(0, I), 1.0, 0.7, len(rows)])  # into an input: ignored
        order = rng.permutation(C)[: len(rows)]  # connection rows in random slots
        for r, c in zip(rows, order):
            conns[p, c] = r
    return nodes, conns


def _dense_levels(nodes, conns, I):
    n = net.transform(nodes, conns, I, True)
    return n.level.numpy(), n.mask.numpy(), n.weights.numpy()


@needs_op
@pytest.mark.parametrize("seed", [0, 1])
def test_programs_make_the_reference_decisions(seed):
    """Order = valid non-inputs by (the reference's level, slot); edges = the dense enabled mask,
    weights = the dense (duplicate-summed) weights, sources in slot order."""
    I, O, N, C = 3, 2, 12, 24
    nodes, conns = random_genomes(64, N, C, I, O, seed=seed)
    prog = fo.compile_programs(nodes, conns, I)
    pr, cf, src, w, cnt = (t.numpy() for t in prog)
    level, mask, W = _dense_levels(nodes, conns, I)
    for p in range(len(nodes)):
        ev = [s for s in range(N) if level[p, s] > 0]
        want = sorted(ev, key=lambda s: (level[p, s], s))
        assert cnt[p] == len(want)
        assert list(pr[p, : cnt[p], 0]) == want
        assert (pr[p, cnt[p]:, 0] == -1).all()
        e0 = 0
        for k, s in enumerate(want):
            e1 = pr[p, k, 3]
            srcs = list(src[p, e0:e1])
            assert srcs == sorted(srcs) == list(np.nonzero(mask[p, :, s])[0])
            np.testing.assert_allclose(w[p, e0:e1], W[p, srcs, s], rtol=1e-6)
            e0 = e1
        np.testing.assert_array_equal(cf[p, : cnt[p], 0], nodes[p, want, 1])


@needs_op
@pytest.mark.parametrize("acts,aggs", [(("sigmoid",), ("sum",)), (ALL_ACT, ALL_AGG), (("tanh", "relu"), ("max",))])
def test_forward_matches_reference(acts, aggs):
    I, O, N, C = 3, 2, 14, 30
    act_ids = [F.activation_id(a) for a in ALL_ACT[:8]] + [F.activation_id(a) for a in acts]
    agg_ids = [F.aggregation_id(a) for a in ALL_AGG] if len(aggs) > 1 else [0, 1]
    nodes, conns = random_genomes(200, N, C, I, O, seed=len(acts), act_ids=act_ids, agg_ids=agg_ids)
    rng = np.random.default_rng(3)
    x = rng.uniform(-1, 1, size=(200, 5, I)).astype(np.float32)
    ref = fo.forward(net.transform(nodes, conns, I, True), x, I, O, acts, aggs).numpy()
    prog = fo.prepare(nodes, conns, I, True, acts, aggs, use_op=True)
    assert isinstance(prog, fo.Program)
    got = fo.forward(prog, x, I, O).numpy()
    ok = np.isfinite(ref)
    assert ok.mean() > 0.95
    np.testing.assert_allclose(got[ok], ref[ok], rtol=RTOL, atol=ATOL)
    # many rows take the node-major path of the kernel: same values as the reference
    x16 = rng.uniform(-1, 1, size=(200, 16, I)).astype(np.float32)
    ref16 = fo.forward(net.transform(nodes, conns, I, True), x16, I, O, acts, aggs).numpy()
    got16 = fo.forward(prog, x16, I, O).numpy()
    ok16 = np.isfinite(ref16)
    np.testing.assert_allclose(got16[ok16], ref16[ok16], rtol=RTOL, atol=ATOL)
    # inputs shared by all members ([B, I]) give the same as broadcast per-member inputs
    shared = fo.forward(prog, x[0], I, O).numpy()
    np.testing.assert_array_equal(shared, fo.forward(prog, np.broadcast_to(x[:1], x.shape), I, O).numpy())
    # and the per-genome Python evaluator agrees (genomes whose own functions are the options)
    if acts == ("sigmoid",):
        n2, c2 = random_genomes(40, N, C, I, O, seed=9)
        y2 = fo.forward(fo.prepare(n2, c2, I, use_op=True), x[:40], I, O).numpy()
        for p in range(40):
            want = net.reference_forward(n2[p], c2[p], x[p], I, O)
            np.testing.assert_allclose(y2[p], want, rtol=1e-4, atol=1e-5)


@needs_op
@pytest.mark.parametrize("acts,aggs", [(("sigmoid",), ("sum",)), (ALL_ACT, ALL_AGG)])
def test_fused_evaluate_equals_compile_then_forward(acts, aggs):
    """TfevoNeatEvaluate (compile + forward per member, programs in scratch) gives the outputs
    of TfevoNeatCompile + TfevoNeatForward bit for bit: few rows (row loop) and many rows
    (node-major path), shared and per-member inputs, an active mask, several slices (thread
    split); the reference agrees to float rounding; bad inputs are named."""
    I, O, N, C = 3, 2, 14, 30
    act_ids = [F.activation_id(a) for a in ALL_ACT[:8]] + [F.activation_id(a) for a in acts]
    agg_ids = [F.aggregation_id(a) for a in ALL_AGG] if len(aggs) > 1 else [0, 1]
    nodes, conns = random_genomes(300, N, C, I, O, seed=21 + len(acts), act_ids=act_ids, agg_ids=agg_ids)
    rng = np.random.default_rng(4)
    prog = fo.prepare(nodes, conns, I, True, acts, aggs, use_op=True)
    active = rng.random(300) < 0.6
    for B in (4, 16):
        x = rng.uniform(-1, 1, size=(300, B, I)).astype(np.float32)
        for xin in (x[0], x):  # shared, then per-member inputs (kept for the checks below)
            want = fo.forward(prog, xin, I, O).numpy()
            got = fo.evaluate(nodes, conns, xin, I, O, acts, aggs, use_op=True).numpy()
            np.testing.assert_array_equal(got, want)
            np.testing.assert_array_equal(
                fo.evaluate(nodes[37:90], conns[37:90], xin if xin.ndim == 2 else xin[37:90], I, O, acts, aggs,
                            use_op=True).numpy(), want[37:90])
        masked = fo.evaluate(nodes, conns, x, I, O, acts, aggs, active=active, use_op=True).numpy()
        np.testing.assert_array_equal(masked[active], want[active])
        assert (masked[~active] == 0).all()
        ref = fo.evaluate(nodes, conns, x, I, O, acts, aggs, use_op=False).numpy()
        ok = np.isfinite(ref)
        assert ok.mean() > 0.95
        np.testing.assert_allclose(got[ok], ref[ok], rtol=RTOL, atol=ATOL)
    with pytest.raises(tf.errors.InvalidArgumentError, match="x must be"):
        fo.evaluate(nodes, conns, tf.ones([300, 3, 4]), I, O, acts, aggs, use_op=True)
    with pytest.raises(tf.errors.InvalidArgumentError, match="exceed"):
        fo.evaluate(nodes, conns, tf.ones([3, I]), I, 12, acts, aggs, use_op=True)
    with pytest.raises(tf.errors.InvalidArgumentError, match="conns must be"):
        fo.evaluate(nodes, conns[:5], tf.ones([3, I]), I, O, acts, aggs, use_op=True)


@needs_op
@pytest.mark.parametrize("settle", [1, 3])
def test_recurrent_steps_match_reference(settle):
    I, O, N, C = 2, 2, 10, 26
    agg_ids = [F.aggregation_id(a) for a in ALL_AGG]
    act_ids = [F.activation_id(a) for a in ("sigmoid", "tanh", "gauss", "clamped", "identity")]
    acts, aggs = ("sigmoid", "tanh", "gauss", "clamped", "identity"), ALL_AGG
    nodes, conns = random_genomes(100, N, C, I, O, feed_forward=False, seed=7, act_ids=act_ids, agg_ids=agg_ids)
    ref_net = net.transform(nodes, conns, I, False)
    prog = fo.prepare(nodes, conns, I, False, acts, aggs, use_op=True)
    xs = np.random.default_rng(5).uniform(-1, 1, size=(6, 100, 3, I)).astype(np.float32)
    s_ref = s_op = tf.zeros([100, 3, N])
    for x in xs:
        s_ref, y_ref = fo.recurrent_step(ref_net, s_ref, x, I, O, acts, aggs, settle)
        s_op, y_op = fo.recurrent_step(prog, s_op, x, I, O, settle_steps=settle)
        np.testing.assert_allclose(y_op.numpy(), y_ref.numpy(), rtol=RTOL, atol=ATOL)
        np.testing.assert_allclose(s_op.numpy(), s_ref.numpy(), rtol=RTOL, atol=ATOL)
    # the per-genome Python RNN over the sequence (batch row 0, sigmoid/sum genomes)
    n2, c2 = random_genomes(12, N, C, I, O, feed_forward=False, seed=8)
    p2 = fo.prepare(n2, c2, I, False, use_op=True)
    s = tf.zeros([12, 1, N])
    outs = []
    for x in xs[:, :12, :1]:
        s, y = fo.recurrent_step(p2, s, x, I, O, settle_steps=settle)
        outs.append(y.numpy()[:, 0])
    for p in range(12):
        want = net.reference_recurrent(n2[p], c2[p], xs[:, p, 0], I, O, settle)
        np.testing.assert_allclose(np.stack(outs)[:, p], want, rtol=1e-4, atol=1e-5)


@needs_op
def test_active_mask_and_thread_independence():
    I, O, N, C = 3, 2, 12, 24
    nodes, conns = random_genomes(300, N, C, I, O, seed=11)
    prog = fo.prepare(nodes, conns, I, use_op=True)
    x = np.random.default_rng(0).normal(size=(300, 4, I)).astype(np.float32)
    full = fo.forward(prog, x, I, O).numpy()
    # members split differently over the pool (slices) give bit-identical outputs
    part = fo.prepare(nodes[100:137], conns[100:137], I, use_op=True)
    np.testing.assert_array_equal(fo.forward(part, x[100:137], I, O).numpy(), full[100:137])
    active = np.random.default_rng(1).random(300) < 0.5
    got = fo.forward(prog, x, I, O, active=active).numpy()
    np.testing.assert_array_equal(got[active], full[active])
    assert (got[~active] == 0).all()
    np.testing.assert_array_equal(
        fo.forward(net.transform(nodes, conns, I), x, I, O, active=active).numpy()[~active], 0.0)
    st = np.random.default_rng(2).normal(size=(300, 4, N)).astype(np.float32)
    rp = fo.prepare(nodes, conns, I, False, use_op=True)
    s1, y1 = fo.recurrent_step(rp, st, x, I, O, active=active)
    np.testing.assert_array_equal(s1.numpy()[~active], st[~active])
    s2, _ = fo.recurrent_step(rp, st, x, I, O)
    np.testing.assert_array_equal(s1.numpy()[active], s2.numpy()[active])


def test_dispatch_rules():
    """Reference under XLA and for user-registered functions; kernels otherwise (when built)."""
    nodes, conns = random_genomes(4, 8, 8, 2, 1, seed=1)
    kinds = []

    @tf.function(jit_compile=True, autograph=False)
    def xla(a, b):
        p = fo.prepare(a, b, 2)
        kinds.append(type(p))
        return fo.forward(p, tf.ones([3, 2]), 2, 1)

    xla(nodes, conns)
    assert kinds == [net.Network]
    assert not fo.op_enabled(("sigmoid", "my_user_fn"), ("sum",))
    assert not fo.op_enabled(use_op=False)
    with pytest.raises(RuntimeError, match="user-registered"):
        fo.op_enabled(("sigmoid", "my_user_fn"), ("sum",), use_op=True)
    assert isinstance(fo.prepare(nodes, conns, 2, use_op=False), net.Network)
    if kernels.built("TfevoNeatForward"):
        assert isinstance(fo.prepare(nodes, conns, 2), fo.Program)


def test_disabled_by_environment(monkeypatch):
    """TFEVO_DISABLE_CUSTOM_OPS=1: the reference runs (also inside the supervised problems)."""
    monkeypatch.setenv("TFEVO_DISABLE_CUSTOM_OPS", "1")
    nodes, conns = random_genomes(3, 8, 8, 2, 1, seed=3)
    assert not kernels.built("TfevoNeatForward") and not fo.op_enabled()
    assert isinstance(fo.prepare(nodes, conns, 2), net.Network)
    ops_in = tf.function(lambda a, b: fo.forward(fo.prepare(a, b, 2), tf.ones([3, 2]), 2, 1),
                         autograph=False).get_concrete_function(nodes, conns).graph.get_operations()
    assert not [o for o in ops_in if o.type.startswith("TfevoNeat")]


@needs_op
def test_bad_programs_and_inputs_raise():
    nodes, conns = random_genomes(5, 8, 8, 2, 1, seed=2)
    prog = fo.prepare(nodes, conns, 2, use_op=True)
    with pytest.raises(tf.errors.InvalidArgumentError, match="x must be"):
        fo.forward(prog, tf.ones([5, 3, 4]), 2, 1)
    bad = prog._replace(src=tf.fill(tf.shape(prog.src), 99))
    if int(tf.reduce_max(prog.prog[..., 3])) > 0:
        with pytest.raises(tf.errors.InvalidArgumentError, match="malformed"):
            fo.forward(bad, tf.ones([3, 2]), 2, 1)
    with pytest.raises(tf.errors.InvalidArgumentError, match="exceed"):
        fo.forward(prog, tf.ones([3, 2]), 2, 7)
    with pytest.raises(tf.errors.InvalidArgumentError, match="nodes must be"):
        fo.compile_programs(tf.ones([5, 8, 4]), conns, 2)
    with pytest.raises((tf.errors.InvalidArgumentError, ValueError), match="state must be|rank|Shape"):
        fo.recurrent_step(fo.prepare(nodes, conns, 2, False, use_op=True), tf.zeros([5, 3, 7]), tf.ones([3, 2]), 2, 1)


@needs_op
@pytest.mark.parametrize("feed_forward", [True, False])
def test_supervised_problem_kernels_equal_reference(feed_forward):
    from tfevo.neat import NEAT

    prob = XOR()
    cfg = prob.config(pop_size=150, max_nodes=16, max_conns=32, feed_forward=feed_forward)
    algo = NEAT(cfg, seed=1)
    ref = XOR()
    ref.use_op = False
    ref.jit_compile = False
    for _ in range(4):
        pop = algo.ask()
        f_op, f_ref = prob(pop, cfg).numpy(), ref(pop, cfg).numpy()
        np.testing.assert_allclose(f_op, f_ref, rtol=1e-5, atol=1e-5)
        algo.tell(pop, f_op)


@needs_op
@pytest.mark.parametrize("feed_forward", [True, False])
def test_control_problem_kernel_rollout_equals_xla_reference(feed_forward):
    """CartPole through the kernels' rollout (graph loop, finished members skipped) gives the
    XLA reference rollout's returns for the same start states (the same seed stream)."""
    from tfevo.neat import NEAT
    from tfevo.neat._op_rollout import KernelRolloutEvaluator
    from tfevo.neat.policy import ControlProblem
    from tfevo.rollout.ingraph import InGraphEvaluator

    cfg = NEATConfig(num_inputs=4, num_outputs=2, pop_size=40, max_nodes=16, max_conns=32, feed_forward=feed_forward,
                     node_add_prob=0.6, conn_add_prob=0.6)
    algo = NEAT(cfg, seed=3)
    rng = np.random.default_rng(0)
    for _ in range(3):
        algo.tell(algo.ask(), rng.normal(size=40).astype(np.float32))
    pop = algo.ask()
    op = ControlProblem("CartPole-v1", cfg, episodes=2, max_steps=120, seed=9)
    ref = ControlProblem("CartPole-v1", cfg, episodes=2, max_steps=120, seed=9, use_op=False)
    ev_op, ev_ref = op._evaluator_for(*pop)[0], ref._evaluator_for(*pop)[0]
    assert isinstance(ev_op, KernelRolloutEvaluator) and type(ev_ref) is InGraphEvaluator
    ev_ref.jit_compile = False  # the same reference program as a graph (CartPole is bit-exact in both): no XLA wait
    for _ in range(2):  # two calls: the seed streams advance alike
        f_op, f_ref = op(pop).numpy(), ref(pop).numpy()
        np.testing.assert_array_equal(f_op, f_ref)
        np.testing.assert_array_equal(ev_op.last_lengths.numpy(), ev_ref.last_lengths.numpy())
    assert np.ptp(f_op) > 0 and ev_op.last_frames == ev_ref.last_frames
    assert int(ev_op.total_frames.numpy()) == int(ev_ref.total_frames.numpy())


@needs_op
@pytest.mark.parametrize("feed_forward", [True, False])
def test_program_under_xla_runs_as_its_dense_network(feed_forward):
    """A Program that meets XLA (e.g. prepared eagerly, forwarded in a jit_compile function)
    runs as to_network(program) on the reference code, with the kernels' values."""
    I, O, N, C = 3, 2, 12, 24
    acts, aggs = ("sigmoid", "tanh", "relu", "identity"), ("sum", "max", "maxabs")
    nodes, conns = random_genomes(60, N, C, I, O, feed_forward=feed_forward, seed=4,
                                  act_ids=[F.activation_id(a) for a in acts],
                                  agg_ids=[F.aggregation_id(a) for a in aggs])
    prog = fo.prepare(nodes, conns, I, feed_forward, acts, aggs, use_op=True)
    x = np.random.default_rng(0).uniform(-1, 1, size=(60, 4, I)).astype(np.float32)
    st = np.random.default_rng(1).normal(size=(60, 4, N)).astype(np.float32)
    if feed_forward:
        run = lambda: fo.forward(prog, x, I, O, acts, aggs)  # noqa: E731
    else:
        run = lambda: fo.recurrent_step(prog, st, x, I, O, acts, aggs, 2)[0]  # noqa: E731
    got = tf.function(run, jit_compile=True, autograph=False)().numpy()
    want = run().numpy()
    ok = np.isfinite(want)
    np.testing.assert_allclose(got[ok], want[ok], rtol=1e-4, atol=1e-5)


@needs_op
@pytest.mark.parametrize("num_outputs,sutton_barto,episodes,max_steps", [(2, False, 2, None), (1, True, 1, 150)])
def test_fused_cartpole_rollout_equals_step_loop_and_reference(num_outputs, sutton_barto, episodes, max_steps):
    """The whole-rollout CartPole kernel (TfevoNeatCartPoleRollout) gives the per-step kernel
    loop's and the XLA reference's returns, lengths and final observations bit for bit,
    with one or two outputs, both reward schemes, several episodes and a step cap.

    Two populations: one evolved on random fitness (compared with the dense reference too),
    one on summed weights, whose saturated outputs can tie within float rounding (the kernels
    and the dense reference may then pick different actions, see _forward_op), so it is
    compared with the per-step kernel loop only; it has long episodes."""
    from tfevo.envs.classic import CartPole
    from tfevo.neat import NEAT
    from tfevo.neat._op_rollout import KernelRolloutEvaluator
    from tfevo.neat.policy import NEATPolicy
    from tfevo.rollout.ingraph import InGraphEvaluator

    P = 64
    cfg = NEATConfig(num_inputs=4, num_outputs=num_outputs, pop_size=P, max_nodes=16, max_conns=32,
                     node_add_prob=0.6, conn_add_prob=0.6)
    env = CartPole(1, sutton_barto_reward=sutton_barto)
    pol = NEATPolicy(cfg, env.action_spec)
    rng = np.random.default_rng(1)
    longest = 0
    for weight_sum in (False, True):
        algo = NEAT(cfg, seed=5)
        for _ in range(3):
            pop = algo.ask()
            fit = (tf.reduce_sum(tf.where(tf.math.is_nan(pop[1][..., 3]), 0.0, pop[1][..., 3]), 1) if weight_sum
                   else rng.normal(size=P).astype(np.float32))
            algo.tell(pop, fit)
        params = pol.flatten(algo.ask())
        fused = KernelRolloutEvaluator(env, pol, episodes=episodes, max_steps=max_steps, seed=2)
        evs = [fused, KernelRolloutEvaluator(env, pol, episodes=episodes, max_steps=max_steps, seed=2, fused=False)]
        if not weight_sum:
            evs.append(InGraphEvaluator(env, NEATPolicy(cfg, env.action_spec, use_op=False),
                                        episodes=episodes, max_steps=max_steps, seed=2, jit_compile=False))
        assert fused._fused_cartpole and not evs[1]._fused_cartpole
        for _ in range(2):  # the seed streams advance alike
            outs = [ev.evaluate_episodes(params) for ev in evs]
            for o in outs[1:]:
                for a, b in zip(outs[0], o):
                    assert (a is None) == (b is None)
                    if a is not None:
                        np.testing.assert_array_equal(a.numpy(), b.numpy())
        lengths = outs[0].lengths.numpy()
        assert np.ptp(lengths) > 0
        longest = max(longest, lengths.max())
        assert int(fused.total_frames.numpy()) == int(evs[1].total_frames.numpy())
    assert longest > 60  # long episodes covered


@needs_op
def test_fused_cartpole_rollout_op_checks_inputs():
    nodes, conns = random_genomes(4, 8, 8, 4, 2, feed_forward=True, seed=0,
                                  act_ids=[F.activation_id("sigmoid")], agg_ids=[F.aggregation_id("sum")])
    prog = fo.prepare(nodes, conns, 4, True, use_op=True)
    rollout = kernels.kernel("TfevoNeatCartPoleRollout", True)
    with pytest.raises(tf.errors.InvalidArgumentError, match="physics must be"):
        rollout(*prog, tf.zeros([6, 4], tf.float64), tf.ones([10], tf.float64), num_inputs=4, num_outputs=2,
                max_steps=10, max_episode_steps=500)
    with pytest.raises(tf.errors.InvalidArgumentError, match="10 values"):
        rollout(*prog, tf.zeros([4, 4], tf.float64), tf.ones([3], tf.float64), num_inputs=4, num_outputs=2,
                max_steps=10, max_episode_steps=500)


@needs_op
def test_bred_population_compiled_to_its_bred_widths():
    """A population the breed kernel made is read only up to its bred widths
    (custom_ops/neat_bred_record.h): programs and outputs equal those of a copy
    of it, which is read in full, and the reference's outputs."""
    from tfevo.neat import NEAT

    prob = XOR()
    cfg = prob.config(pop_size=200, max_nodes=32, max_conns=64)
    algo = NEAT(cfg, seed=4)
    for _ in range(6):
        pop = algo.ask()
        algo.tell(pop, prob(pop, cfg))
    nodes, conns = algo.ask()
    copy = [tf.constant(nodes.numpy()), tf.constant(conns.numpy())]
    x = tf.constant([[0.0, 0.0], [0.0, 1.0], [1.0, 0.0], [1.0, 1.0]])
    bred, full = (fo.evaluate(n, c, x, 2, 1, use_op=True).numpy() for n, c in ([nodes, conns], copy))
    np.testing.assert_array_equal(bred, full)
    np.testing.assert_allclose(bred, fo.evaluate(nodes, conns, x, 2, 1, use_op=False).numpy(), rtol=RTOL, atol=ATOL)
    for a, b in zip(fo.compile_programs(nodes, conns, 2), fo.compile_programs(*copy, 2)):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


@needs_op
@pytest.mark.parametrize("dtype", [tf.float32, tf.float64])
def test_nan_inputs_give_nan_on_both_paths(dtype):
    """A NaN among a node's inputs makes every aggregation NaN (max, min, maxabs and median as sum,
    product and mean), in the kernels and the reference alike, and hat(NaN) is NaN; an all-NaN
    input is NaN too (not max's -inf start value)."""
    I, O = 3, 1
    rows = [[np.nan, 1, 2], [1, np.nan, 2], [1, 2, np.nan], [-np.inf, np.nan, 5], [np.nan] * 3, [1, -4, 2]]
    x = np.array(rows, np.float32)[None]  # [P=1, B, I]
    for agg in ALL_AGG:
        for act in ("identity", "hat"):
            nodes = np.full([1, 4, 5], np.nan, np.float32)
            for k in range(4):
                nodes[0, k] = [k, 0.0, 1.0, F.aggregation_id(agg), F.activation_id(act)]
            conns = np.array([[[0, 3, 1, 1.0, 0], [1, 3, 1, 1.0, 1], [2, 3, 1, 1.0, 2]]], np.float32)
            ref = fo.forward(net.transform(nodes, conns, I, True), x, I, O, (act,), (agg,), dtype=dtype).numpy()
            got = fo.forward(fo.prepare(nodes, conns, I, True, (act,), (agg,), use_op=True), x, I, O,
                             dtype=dtype).numpy()
            assert np.isnan(ref[0, :5]).all() and np.isfinite(ref[0, 5]).all(), (agg, act, ref)
            np.testing.assert_allclose(got, ref, rtol=1e-6, err_msg=f"{agg} {act}")  # NaN where NaN


def test_problems_with_use_op_true_require_the_kernels():
    """use_op=True on a supervised problem or a ControlProblem means the kernels or a
    KernelUnavailableError naming why not (here: an assumed GPU), never a silent reference."""
    from tfevo.neat import NEAT, ControlProblem

    prob = XOR()
    cfg = prob.config(pop_size=8, max_nodes=8, max_conns=12)
    pop = NEAT(cfg, seed=0).ask()
    prob.use_op = True
    with kernels.assume_gpu():
        with pytest.raises(kernels.KernelUnavailableError, match="GPU"):
            prob.evaluate(pop, cfg)
        with pytest.raises(kernels.KernelUnavailableError, match="GPU"):
            ControlProblem("CartPole-v1", NEATConfig(num_inputs=4, num_outputs=2, pop_size=8), max_steps=5,
                           use_op=True)
    prob.use_op = None
    with kernels.assume_gpu():
        assert np.isfinite(prob.evaluate(pop, cfg).numpy()).all()  # automatic: the reference
