"""``ControlProblem(dtype="float64")``: the networks of a control rollout computed in
double, as neat-python computes them with Python floats.  Its episodes are neat-python's
episodes (the same genome, the same start state, neat-python's ``FeedForwardNetwork`` and
Gymnasium's environment give the same return), the float32 networks' episodes differ where
saturated outputs tie in float32, and each member gets its own start state (the protocol
of a neat-python fitness function that resets the environment per genome)."""

import numpy as np
import pytest
import tensorflow as tf

from tfevo.core import ConfigError, SeedStream
from tfevo.neat import NEAT, NEATConfig
from tfevo.neat.policy import ControlProblem, NEATPolicy

P = 32


def _evolved(I, O, seed=0):
    """Genomes with large weights and biases (saturating sigmoids) and some hidden nodes."""
    cfg = NEATConfig(num_inputs=I, num_outputs=O, pop_size=P, max_nodes=24, max_conns=60, node_add_prob=0.5,
                     conn_add_prob=0.7, weight_init_stdev=5.0, bias_init_stdev=5.0)
    algo = NEAT(cfg, seed=seed)
    rng = np.random.default_rng(seed)
    for _ in range(6):
        algo.tell(algo.ask(), rng.normal(size=P))
    return cfg, algo.ask()


def _neat_python_net(nodes, conns, I, O, path):
    """The tfevo genome as a neat-python genome (keys: inputs 0..I-1 -> -1..-I, outputs and
    hidden k -> k - I) and its ``neat.nn.FeedForwardNetwork``."""
    neat = pytest.importorskip("neat")
    key = lambda k: -(k + 1) if k < I else k - I  # noqa: E731
    g = neat.DefaultGenome(0)
    for row in nodes:
        if np.isnan(row[0]) or row[0] < I:
            continue
        ng = neat.genes.DefaultNodeGene(key(int(row[0])))
        ng.bias, ng.response, ng.time_constant = float(row[1]), float(row[2]), 1.0
        ng.aggregation, ng.activation = "sum", "sigmoid"
        g.nodes[ng.key] = ng
    for j, row in enumerate(conns):
        if np.isnan(row[0]):
            continue
        cg = neat.genes.DefaultConnectionGene((key(int(row[0])), key(int(row[1]))), innovation=j)
        cg.weight, cg.enabled = float(row[3]), bool(row[2] > 0.5)
        g.connections[cg.key] = cg
    cfg = neat.Config(neat.DefaultGenome, neat.DefaultReproduction, neat.DefaultSpeciesSet, neat.DefaultStagnation,
                      path)
    return neat.nn.FeedForwardNetwork.create(g, cfg)


def _config_file(tmp_path, I, O):
    import sys
    import os

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks"))
    from bench_neat import NEAT_PY_CFG

    path = tmp_path / "neat.cfg"
    path.write_text(NEAT_PY_CFG.format(pop=P, nin=I, nout=O, thr=0.0, noterm=False))
    return str(path)


def _start_positions(seed):
    """The MountainCar start positions of a ControlProblem's first call (its seed stream's first seed)."""
    from tfevo.envs import make

    state, _ = make("MountainCar-v0", 1).reset(SeedStream(seed).next(), num_envs=P)
    return state.physics.numpy()


def test_float64_rollouts_are_neat_python_episodes(tmp_path):
    """Every member's MountainCar-v0 episode with dtype="float64" (kernels and XLA reference)
    is neat-python's FeedForwardNetwork in Gymnasium from the same start state: the same
    return and the same last observation after up to 200 steps.  float32 networks end
    elsewhere for some of these saturated genomes."""
    gym = pytest.importorskip("gymnasium")
    cfg, pop = _evolved(2, 3, seed=2)  # 6 of its 32 members end elsewhere with float32 networks
    seed = 5
    got = {}
    for name, kw in [("f64", dict(dtype="float64")), ("f64_xla", dict(dtype="float64", use_op=False)),
                     ("f32", dict())]:
        prob = ControlProblem("MountainCar-v0", cfg, seed=seed, trim=False, **kw)
        res = prob.evaluator.evaluate_episodes(prob.policy.flatten(pop))  # the problem's first call
        got[name] = (res.returns.numpy()[:, 0], res.final_obs.numpy()[:, 0])
    physics = _start_positions(seed)
    assert len(set(physics[:, 0].tolist())) == P, "each member has its own start state"
    path = _config_file(tmp_path, 2, 3)
    env = gym.make("MountainCar-v0")
    nodes, conns = pop.nodes.numpy(), pop.conns.numpy()
    returns, last = [], []
    for i in range(P):
        net = _neat_python_net(nodes[i], conns[i], 2, 3, path)
        env.reset(seed=0)
        env.unwrapped.state = physics[i].astype(np.float64)
        obs, total = np.array(env.unwrapped.state, np.float32), 0.0
        while True:
            obs, r, term, trunc, _ = env.step(int(np.argmax(net.activate(obs))))
            total += r
            if term or trunc:
                break
        returns.append(total)
        last.append(obs)
    returns, last = np.array(returns), np.array(last)
    for name in ("f64", "f64_xla"):
        np.testing.assert_array_equal(got[name][0], returns, err_msg=name)
        np.testing.assert_array_equal(got[name][1], last, err_msg=name)
    assert (got["f32"][1] != last).any(axis=1).sum() >= 1, "float32 networks should tie where these saturate"


def test_float64_control_runs_are_reproducible_and_keep_the_state_type():
    """The same seed gives the same fitness call after call (fresh start states each call);
    a recurrent population carries its state in double."""
    cfg, pop = _evolved(2, 3)
    a = ControlProblem("MountainCar-v0", cfg, seed=3, dtype="float64", max_steps=60)
    b = ControlProblem("MountainCar-v0", cfg, seed=3, dtype="float64", max_steps=60)
    fa = [a(pop).numpy() for _ in range(2)]
    fb = [b(pop).numpy() for _ in range(2)]
    np.testing.assert_array_equal(fa, fb)
    rcfg = NEATConfig(num_inputs=2, num_outputs=3, pop_size=8, max_nodes=16, max_conns=32, feed_forward=False)
    prob = ControlProblem("MountainCar-v0", rcfg, seed=1, dtype="float64", max_steps=20)
    assert prob.policy.state_dtype == tf.float64
    ref = ControlProblem("MountainCar-v0", rcfg, seed=1, dtype="float64", max_steps=20, use_op=False)
    rpop = NEAT(rcfg, seed=0).ask()
    np.testing.assert_array_equal(prob(rpop).numpy(), ref(rpop).numpy())


@pytest.mark.parametrize("dtype", ["float16", "double", 64, None])
def test_network_dtype_is_checked(dtype):
    cfg = NEATConfig(num_inputs=2, num_outputs=3, pop_size=8)
    with pytest.raises(ConfigError, match="dtype must be 'float32' or 'float64'"):
        ControlProblem("MountainCar-v0", cfg, dtype=dtype)
    from tfevo.envs import make

    with pytest.raises(ConfigError, match="dtype"):
        NEATPolicy(cfg, make("MountainCar-v0", 1).action_spec, dtype=dtype)
