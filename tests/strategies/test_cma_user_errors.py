"""What a pycma user tries that tfevo's CMA family does not do: a clear error naming it."""

import copy
import pickle

import numpy as np
import pytest
import tensorflow as tf

from tfevo.core import ConfigError
from tfevo.strategies import CMAES, SepCMAES
from tfevo.strategies.minimize import fmin


@pytest.mark.parametrize("cls", [CMAES, SepCMAES])
def test_per_coordinate_sigma_is_a_config_error(cls):
    with pytest.raises(ConfigError, match="sigma must be a positive finite number.*CMA_stds"):
        cls(2, sigma=np.array([0.5, 0.1]))


def test_an_objective_returning_no_number_is_named():
    with pytest.raises(ConfigError, match="objective must return numbers"):
        fmin(lambda x: "1.0x", np.zeros(2), 0.5, max_evals=50)


@pytest.mark.filterwarnings("ignore::tfevo.core.NonFiniteFitnessWarning")
def test_none_counts_as_the_worst_also_for_the_final_mean():
    # (pycma's default is_feasible: None and NaN are infeasible); the final mean's None raised a TypeError
    r = fmin(lambda x: None if x[0] > 0 else float(np.sum(x ** 2)), np.zeros(2), 0.5, max_evals=300)
    assert np.isfinite(r.f) and r.x[0] <= 0
    r = fmin(lambda x: None, np.zeros(2), 0.5, max_evals=50)
    assert r.f == np.inf and "tolflatfitness" in r.stop


def test_pickling_or_copying_a_strategy_says_to_use_a_checkpoint(tmp_path):
    es = CMAES(3, sigma=0.5, seed=0)
    x = es.ask()
    es.tell(x, -tf.reduce_sum(x ** 2, 1))
    for attempt in (pickle.dumps, copy.deepcopy, copy.copy):
        with pytest.raises(TypeError, match="tf.train.Checkpoint"):
            attempt(es)
    # the way the message gives: a checkpoint restored into a new strategy continues identically
    path = tf.train.Checkpoint(es=es).write(str(tmp_path / "ck"))
    twin = CMAES(3, sigma=0.5, seed=0)
    tf.train.Checkpoint(es=twin).read(path).assert_consumed()
    xa, xb = es.ask(), twin.ask()
    np.testing.assert_array_equal(xa.numpy(), xb.numpy())
