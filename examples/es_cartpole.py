"""OpenAI-ES on the in-graph CartPole-v1: the whole population's episodes run in one tf.function."""
from tfevo import envs, nn
from tfevo.rollout import InGraphEvaluator
from tfevo.strategies import OpenES
from tfevo.training import Trainer
from _toy import budget  # TFEVO_EXAMPLE_TOY=1: a few seconds, for the test suite

env = envs.make("CartPole-v1", budget(64, 8) * 3)
model = nn.PopulationModel(nn.mlp(env.observation_shape, env.action_spec.policy_output_size, hidden=(16,)))
evaluator = InGraphEvaluator(env, nn.Policy(model, env.action_spec), episodes=3, seed=1)
es = OpenES(model.num_params, popsize=budget(64, 8), sigma=0.1, learning_rate=0.05, init_params=model.init_params(1, 0)[0])
Trainer(es, evaluator, run_dir="runs/example-es-cartpole", generations=budget(60, 2)).run()
model.to_keras(es.mean).save("runs/example-es-cartpole/policy.keras")   # a plain Keras model
