"""OpenAI-ES on host simulators (MuJoCo or any Gymnasium env), every replica with its own
pipelined simulators, driven by the Trainer.

Each replica of the strategy (a GPU, a logical CPU device, or the devices of
each worker under TF_CONFIG) owns a ``PipelinedEvaluator`` with ``--num-envs``
simulator slots and runs its shard's inference on its own device.  Episode
seeds come from each member's global index, so the run is bit-identical for
any replica count:

    python examples/distributed_host.py --devices 1 --generations 3
    python examples/distributed_host.py --devices 2 --generations 3     # same numbers
    python examples/distributed_host.py --env Hopper-v5 --devices 4     # 4 GPUs (or 4 logical CPUs)

Run it again with the same --run-dir to resume (on any number of devices).
"""

import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
from _toy import budget  # TFEVO_EXAMPLE_TOY=1: a few seconds, for the test suite


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--env", default=budget("HalfCheetah-v5", "Swimmer-v5"))
    ap.add_argument("--devices", type=int, default=1, help="local replicas (GPUs, or logical CPUs without GPUs)")
    ap.add_argument("--generations", type=int, default=budget(5, 2))
    ap.add_argument("--popsize", type=int, default=budget(32, 4))
    ap.add_argument("--num-envs", type=int, default=16, help="simulator slots per replica")
    ap.add_argument("--max-steps", type=int, default=budget(200, 10))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--run-dir", default=None)
    args = ap.parse_args()

    from tfevo.distribute import DistributedEvaluator, HostShards, make_strategy

    strategy = make_strategy(devices=args.devices)  # first: it may split the CPU before TensorFlow starts

    from tfevo.envs import make
    from tfevo.nn import Policy, PopulationModel, mlp
    from tfevo.rollout import PipelinedEvaluator
    from tfevo.strategies import OpenES
    from tfevo.training import Trainer

    probe = make(args.env, 1)
    obs_shape, spec = tuple(probe.observation_shape), probe.action_spec
    probe.close()
    model = PopulationModel(mlp(obs_shape, spec.policy_output_size, hidden=(32, 32)))
    policy = Policy(model, spec)

    def make_evaluator():  # called once per local replica
        return PipelinedEvaluator(args.env, policy, num_envs=args.num_envs, num_subsets=2, episodes=1,
                                  max_steps=args.max_steps, seed=args.seed)

    evaluator = DistributedEvaluator(strategy, HostShards(make_evaluator, episodes=1, report_frames=True),
                                     seed=args.seed + 1)
    es = OpenES(model.num_params, popsize=args.popsize, sigma=0.05, learning_rate=0.02, seed=args.seed,
                init_params=model.init_params(1, args.seed)[0])
    trainer = Trainer(es, evaluator, run_dir=args.run_dir, generations=args.generations, progress=False,
                      strategy=strategy)
    print(f"{strategy.num_replicas_in_sync} replica(s): {strategy.extended.worker_devices}")
    for log in trainer.run():
        print(f"gen {log.generation:3d}  best {log.best:9.3f}  mean {log.mean:9.3f}  frames {log.frames}")


if __name__ == "__main__":
    main()
