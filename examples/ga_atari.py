"""The deep GA (Such et al. 2017) on Atari with seed-list genomes; Nature-DQN policies."""
from tfevo import envs, nn
from tfevo.rollout import GenomeEvaluator, PipelinedEvaluator
from tfevo.strategies import SeedGA
from tfevo.training import Trainer

game = "ALE/Frostbite-v5"
spec = envs.make(game, 1)                                     # deep_neuroevolution preset
model = nn.PopulationModel(nn.nature_dqn(spec.action_spec.num_actions))
ga = SeedGA(model.num_params, popsize=64, truncation=10, sigma=0.002, num_elite_candidates=3,
            init_fn=lambda s: model.init_params(1, s)[0])
inner = PipelinedEvaluator(game, nn.Policy(model, spec.action_spec), num_envs=16, num_subsets=2, seed=1)
evaluator = GenomeEvaluator(inner, ga.decode, chunk_size=32)  # at most 32 x 4M parameters at once
Trainer(ga, evaluator, run_dir="runs/example-ga-frostbite", frames=2_000_000).run()
