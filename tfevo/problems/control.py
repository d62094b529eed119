"""Control tasks as fitness problems: an MLP policy family + the in-graph evaluator.

:func:`control_problem` wires the usual pieces together for the in-graph
control environments (CartPole-v1, Acrobot-v1, MountainCar-v0,
MountainCarContinuous-v0, Pendulum-v1)::

    policy, evaluator, num_params = control_problem("CartPole-v1", hidden=(16,))
    es = tfevo.strategies.OpenES(num_dims=num_params, popsize=64, sigma=0.1)
    for _ in range(50):
        x = es.ask()
        es.tell(x, evaluator.evaluate(x))
"""

from __future__ import annotations

from tfevo.core import ConfigError
from tfevo.registry import register

__all__ = ["control_problem"]


@register("problem", "control", doc="In-graph control task: control_problem(env_id, hidden=(64, 64)) -> (policy, evaluator, D)")
def control_problem(env_id: str, hidden=(64, 64), activation: str = "tanh", episodes: int = 1,
                    max_steps: int | None = None, seed: int = 0, common_random_numbers: bool = False,
                    continuous: str = "tanh", jit_compile="auto"):
    """A population MLP policy and an :class:`~tfevo.rollout.ingraph.InGraphEvaluator`.

    Args:
      env_id: an in-graph environment id (see ``tfevo.envs.list_envs()``).
      hidden: hidden layer sizes of the MLP (``()`` for a linear policy).
      activation: hidden activation.
      episodes: episodes per member (fitness = mean return).
      max_steps: the episode's time limit in steps (default: the env's own);
        replaces the env's limit, above or below it (see
        :class:`~tfevo.rollout.InGraphEvaluator`).
      seed: seed of the evaluator's start-state stream.
      common_random_numbers: same start states for every member of a call.
      continuous: how continuous actions are bounded (``"tanh"`` or
        ``"clip"``, see :class:`tfevo.nn.Policy`).
      jit_compile: XLA for the rollout (``"auto"``, True, False).

    Returns:
      ``(policy, evaluator, num_params)``; ``evaluator.evaluate(params [P,
      num_params]) -> fitness [P]``.

    Example:

    >>> policy, ev, d = control_problem("Pendulum-v1", hidden=(32, 32), episodes=2)
    >>> fitness = ev.evaluate(policy.init_params(128, seed=0))
    """
    from tfevo.envs import make
    from tfevo.envs.base import TFEnv
    from tfevo.nn import Policy, PopulationModel, mlp
    from tfevo.rollout.ingraph import InGraphEvaluator

    env = make(env_id, 1)
    if not isinstance(env, TFEnv):
        raise ConfigError(
            f"control_problem needs an in-graph environment; {env_id!r} is a host simulator "
            "(use tfevo.rollout.PipelinedEvaluator)"
        )
    template = mlp(env.observation_shape, env.action_spec.policy_output_size, hidden=tuple(hidden),
                   activation=activation)
    policy = Policy(PopulationModel(template), env.action_spec, continuous=continuous)
    evaluator = InGraphEvaluator(env, policy, episodes=episodes, max_steps=max_steps, seed=seed,
                                 common_random_numbers=common_random_numbers, jit_compile=jit_compile)
    return policy, evaluator, policy.num_params
