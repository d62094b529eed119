"""In-graph, batched TensorFlow versions of Gymnasium's classic control tasks.

Five environments, each a :class:`~tfevo.envs.base.TFEnv` that reproduces
Gymnasium 1.4 step for step -- dynamics, rewards, termination, truncation
(the ``max_episode_steps`` of Gymnasium's registry), initial-state
distributions, observation dtypes and bounds and action semantics:

==============================  =========  ==========  =====================
id                              obs        actions     max_episode_steps
==============================  =========  ==========  =====================
``CartPole-v1``                 float32 4  int {0,1}   500
``Acrobot-v1``                  float32 6  int {0,1,2} 500
``MountainCar-v0``              float32 2  int {0,1,2} 200
``MountainCarContinuous-v0``    float32 2  float [1]   999
``Pendulum-v1``                 float32 3  float [1]   200
==============================  =========  ==========  =====================

The environments are *functional*: ``reset(seed)`` returns ``(state, obs)``
and ``step(state, action)`` returns a :class:`~tfevo.envs.base.StepResult`
with the next state, so a whole batch (and a whole population) is stepped
inside one ``tf.function``/``tf.while_loop`` and can be XLA compiled.  The
state is a :class:`ClassicState` of tensors with a leading batch axis ``N``;
it carries the step counter, so truncation is decided in-graph.

Numerics follow Gymnasium exactly: the physical state is kept in float64
where Gymnasium keeps numpy float64, and float32 rounding is applied where
Gymnasium's arithmetic happens in float32 (for example the float32 state of
MountainCarContinuous after its first step, or the float32 action terms of
Pendulum).  Observations are float32, rewards float32 (rounded from the
float64 value Gymnasium returns), flags bool.

Like Gymnasium, stepping an environment after its episode has ended is
undefined (the physics simply continue); evaluators mask finished episodes.
Environments do not reset automatically.

Example:

>>> import tensorflow as tf
>>> from tfevo.envs import make
>>> env = make("CartPole-v1", 8)
>>> state, obs = env.reset(tf.constant([0, 1]))
>>> res = env.step(state, tf.ones([8], tf.int32))
>>> res.obs.shape, res.reward.dtype
(TensorShape([8, 4]), tf.float32)
"""

from tfevo.envs.acrobot import Acrobot
from tfevo.envs.cartpole import CartPole
from tfevo.envs.classic_base import ClassicControlEnv, ClassicState
from tfevo.envs.mountain_car import MountainCar, MountainCarContinuous
from tfevo.envs.pendulum import Pendulum

__all__ = [
    "ClassicState",
    "ClassicControlEnv",
    "CartPole",
    "Acrobot",
    "MountainCar",
    "MountainCarContinuous",
    "Pendulum",
    "CLASSIC_ENV_IDS",
]


CLASSIC_ENV_IDS = (
    "CartPole-v1",
    "Acrobot-v1",
    "MountainCar-v0",
    "MountainCarContinuous-v0",
    "Pendulum-v1",
)
