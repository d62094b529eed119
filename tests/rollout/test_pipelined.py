"""PipelinedEvaluator: exact agreement with a one-member-at-a-time serial loop."""

import numpy as np
import pytest
import tensorflow as tf

from tfevo.core import ConfigError, ShapeError
from tfevo.envs.gym import GymVectorEnv
from tfevo.rollout.normalization import ObservationNormalizer
from tfevo.rollout.pipelined import PipelinedEvaluator

OBS, ACT = 4, 2


class LinearPolicy:
    """Stand-in policy: logits = obs @ W_m + b_m; counts the rows it computes."""

    def __init__(self):
        self.rows = tf.Variable(0, dtype=tf.int64, trainable=False)
        self.num_params = OBS * ACT + ACT

    def forward(self, params, obs, indices=None):
        w = params if indices is None else tf.gather(params, indices)
        W = tf.reshape(w[:, : OBS * ACT], [-1, OBS, ACT])
        b = w[:, None, OBS * ACT:]
        self.rows.assign_add(tf.cast(tf.shape(obs)[0], tf.int64))
        # elementwise products summed in a fixed order: identical for any batch size
        logits = tf.reduce_sum(obs[..., :, None] * W[:, None], axis=-2) + b
        return tf.argmax(logits, axis=-1, output_type=tf.int32)


class DescEnv(GymVectorEnv):
    """CartPole whose behaviour descriptor is the final (cart position, pole angle)."""

    def __init__(self, n):
        super().__init__("CartPole-v1", num_envs=n)
        self.last = np.zeros((n, 2), np.float32)

    def recv(self):
        out = super().recv()
        self.last[out[0]] = out[1][:, [0, 2]]
        return out

    def descriptors(self, indices):
        return self.last[np.asarray(indices)]


def serial_reference(policy, params, seeds, max_steps=None, obs_log=None):
    """One member, one episode at a time through a 1-slot env with the same seeds."""
    env = DescEnv(1)
    P, E = seeds.shape
    fit = np.zeros((P, E))
    desc = np.zeros((P, E, 2))
    for m in range(P):
        for e in range(E):
            obs = env.reset([0], [seeds[m, e]])
            t = 0
            while True:
                if obs_log is not None:
                    obs_log.append(obs[0].copy())
                a = policy.forward(params, tf.constant(obs[:, None]), tf.constant([m])).numpy().reshape(-1)
                env.send(a, [0])
                _, obs, r, te, tr = env.recv()
                fit[m, e] += r[0]
                t += 1
                if te[0] or tr[0] or (max_steps is not None and t >= max_steps):
                    break
            desc[m, e] = env.descriptors([0])[0]
    env.close()
    return fit.mean(1).astype(np.float32), desc.mean(1).astype(np.float32)


@pytest.fixture(scope="module")
def population():
    # varied members: some balance for long, some fall at once
    return tf.random.stateless_normal([11, OBS * ACT + ACT], seed=[4, 2]) * 2.0


@pytest.fixture(scope="module")
def reference(population):
    ev = PipelinedEvaluator(DescEnv, LinearPolicy(), num_envs=1, num_subsets=1, episodes=2, max_steps=120, seed=7)
    seeds = ev.episode_seeds(population.shape[0], call=0)
    return seeds, serial_reference(LinearPolicy(), population, seeds, max_steps=120)


@pytest.mark.parametrize("K,slots", [(1, 4), (2, 4), (3, 5), (2, 30)])
def test_equals_serial_reference(population, reference, K, slots):
    seeds, (ref_fit, ref_desc) = reference
    policy = LinearPolicy()
    ev = PipelinedEvaluator(DescEnv, policy, num_envs=slots, num_subsets=K, episodes=2, max_steps=120, seed=7,
                            descriptors=True, bucket="none")
    np.testing.assert_array_equal(ev.episode_seeds(population.shape[0]), seeds)
    fit, desc = ev.evaluate(population)
    assert fit.dtype == tf.float32 and fit.shape == (11,) and desc.shape == (11, 2)
    np.testing.assert_array_equal(fit.numpy(), ref_fit)
    np.testing.assert_allclose(desc.numpy(), ref_desc, rtol=0, atol=1e-6)
    assert len(np.unique(ref_fit)) > 3  # the population really is varied
    st = ev.last_stats
    # only active members were forwarded: one policy row per member-step, no more
    assert int(policy.rows.numpy()) == st["forward_rows"] == st["steps"]
    assert st["steps"] == st["frames"]
    assert ev.traces == 1  # varying active counts never retrace


def test_pow2_buckets_pad_but_agree(population, reference):
    seeds, (ref_fit, _) = reference
    policy = LinearPolicy()
    ev = PipelinedEvaluator(DescEnv, policy, num_envs=6, num_subsets=2, episodes=2, max_steps=120, seed=7)
    fit = ev.evaluate(population)
    np.testing.assert_array_equal(fit.numpy(), ref_fit)
    st = ev.last_stats
    assert st["forward_rows"] == st["steps"] <= st["padded_rows"] < 2 * st["forward_rows"]
    assert int(policy.rows.numpy()) == st["padded_rows"]


def test_seeds_advance_and_checkpoint_continues(population, tmp_path):
    mk = lambda: PipelinedEvaluator(DescEnv, LinearPolicy(), num_envs=4, num_subsets=2, max_steps=60, seed=1)
    a = mk()
    s0 = a.episode_seeds(11)
    a.evaluate(population)
    assert not np.array_equal(a.episode_seeds(11), s0)
    path = tf.train.Checkpoint(ev=a).write(str(tmp_path / "ck"))
    f_next = a.evaluate(population).numpy()
    b = mk()
    tf.train.Checkpoint(ev=b).read(path).assert_consumed()
    np.testing.assert_array_equal(b.evaluate(population).numpy(), f_next)


def test_obs_norm_statistics_equal_numpy(population):
    seeds_ev = PipelinedEvaluator(DescEnv, LinearPolicy(), num_envs=1, num_subsets=1, max_steps=50, seed=5)
    seeds = seeds_ev.episode_seeds(11)
    log = []
    fresh = ObservationNormalizer((OBS,))  # the evaluator normalizes with the stats at call start

    class Normalized(LinearPolicy):
        def forward(self, params, obs, indices=None):
            return super().forward(params, fresh.normalize(obs), indices)

    ref_fit, _ = serial_reference(Normalized(), population, seeds, max_steps=50, obs_log=log)
    data = np.stack(log).astype(np.float64)
    norm = ObservationNormalizer((OBS,))
    ev = PipelinedEvaluator(DescEnv, LinearPolicy(), num_envs=4, num_subsets=2, max_steps=50, seed=5, obs_norm=norm,
                            bucket="none")
    np.testing.assert_array_equal(ev.evaluate(population).numpy(), ref_fit)
    assert norm.count.numpy() == len(data)
    np.testing.assert_allclose(norm.mean.numpy(), data.mean(0), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(norm.variance.numpy(), data.var(0), rtol=1e-9, atol=1e-12)


def test_with_tfevo_nn_policy(population):
    nn = pytest.importorskip("tfevo.nn.policy")
    from tfevo.nn.model import PopulationModel

    pm = PopulationModel(nn.mlp((OBS,), ACT, hidden=(8,)))
    policy = nn.Policy(pm, GymVectorEnv("CartPole-v1", 1).action_spec)
    params = pm.init_params(9, seed=3) * 3.0
    ev = PipelinedEvaluator(DescEnv, policy, num_envs=4, num_subsets=2, max_steps=80, seed=2)
    fit = ev.evaluate(params).numpy()
    seeds = ev.episode_seeds(9, call=0)
    ref, _ = serial_reference(policy, params, seeds, max_steps=80)
    np.testing.assert_array_equal(fit, ref)


def test_registered_and_errors(population):
    from tfevo import registry

    assert registry.get("evaluator", "pipelined") is PipelinedEvaluator
    with pytest.raises(ConfigError, match="num_subsets"):
        PipelinedEvaluator(DescEnv, LinearPolicy(), num_envs=4, num_subsets=0)
    with pytest.raises(ConfigError, match="num_envs"):
        PipelinedEvaluator(DescEnv, LinearPolicy(), num_envs=2, num_subsets=3)
    with pytest.raises(ConfigError, match="forward"):
        PipelinedEvaluator(DescEnv, object(), num_envs=2)
    ev = PipelinedEvaluator(lambda n: GymVectorEnv("CartPole-v1", n), LinearPolicy(), num_envs=2,
                            descriptors=True, max_steps=5)
    with pytest.raises(ConfigError, match="no behaviour descriptors"):
        ev.evaluate(population)
    with pytest.raises(ShapeError, match=r"\[P, D\]"):
        ev.evaluate(tf.zeros([3]))


@pytest.mark.parametrize("bad", [1.5, -1, "2", 2**31])
def test_a_non_integer_seed_is_refused(bad):
    """seed=1.5 used to run silently as seed 1 (int())."""
    with pytest.raises(ConfigError, match=r"seed must be an integer in \[0, 2\*\*31\)"):
        PipelinedEvaluator("CartPole-v1", LinearPolicy(), num_envs=2, seed=bad)
