"""OpenAI-ES (Salimans et al.) on HalfCheetah-v5: batched MuJoCo + pipelined inference + obs normalization."""
from tfevo import envs, nn
from tfevo.rollout import ObservationNormalizer, PipelinedEvaluator
from tfevo.strategies import OpenES
from tfevo.training import Trainer
from _toy import budget  # TFEVO_EXAMPLE_TOY=1: a few seconds, for the test suite

spec = envs.make("HalfCheetah-v5", 1)
model = nn.PopulationModel(nn.mlp(spec.observation_shape, spec.action_spec.policy_output_size, hidden=(64, 64)))
norm = ObservationNormalizer(spec.observation_shape, clip=10.0)
evaluator = PipelinedEvaluator("HalfCheetah-v5", nn.Policy(model, spec.action_spec), num_envs=budget(32, 4), num_subsets=2,
                               obs_norm=norm, seed=1, max_steps=budget(None, 10))
es = OpenES(model.num_params, popsize=budget(64, 4), sigma=0.02, learning_rate=0.01, init_params=model.init_params(1, 0)[0])
Trainer(es, evaluator, run_dir="runs/example-es-halfcheetah", seconds=budget(30 * 60, None), generations=budget(None, 1)).run()
