"""The deep GA (Such et al. 2017) on Atari with seed-list genomes; Nature-DQN policies."""
from tfevo import envs, nn
from tfevo.rollout import GenomeEvaluator, PipelinedEvaluator
from tfevo.strategies import SeedGA
from tfevo.training import Trainer
from _toy import budget  # TFEVO_EXAMPLE_TOY=1: a few seconds, for the test suite

game = "ALE/Frostbite-v5"
spec = envs.make(game, 1)                                     # deep_neuroevolution preset
model = nn.PopulationModel(nn.nature_dqn(spec.action_spec.num_actions))
ga = SeedGA(model.num_params, popsize=budget(64, 4), truncation=budget(10, 2), sigma=0.002,
            num_elite_candidates=budget(3, 1),
            init_fn=lambda s: model.init_params(1, s)[0])
inner = PipelinedEvaluator(game, nn.Policy(model, spec.action_spec), num_envs=budget(16, 2), num_subsets=2, seed=1,
                           max_steps=budget(None, 10))
evaluator = GenomeEvaluator(inner, ga.decode, chunk_size=32)  # at most 32 x 4M parameters at once
Trainer(ga, evaluator, run_dir="runs/example-ga-frostbite", frames=budget(2_000_000, None), generations=budget(None, 1)).run()
