"""A tiny but real training script used by the Trainer tests (run as a subprocess).

usage: python _toy_run.py RUN_DIR GENERATIONS [SLEEP_AT_GEN]
A (1+lambda)-style Gaussian search on a noisy sphere whose noise comes from the
evaluator's own checkpointed seed stream, so exact resumption needs both the
algorithm's and the evaluator's RNG state.
"""

import sys
import time

import numpy as np
import tensorflow as tf

from tfevo.core import Algorithm, SeedStream
from tfevo.training import Trainer


class ToyES(Algorithm):
    def __init__(self, **kw):
        super().__init__(**kw)
        self.m = tf.Variable(tf.ones([self.num_dims]) * 3.0)
        self.sigma = tf.Variable(1.0)

    def _ask(self):
        eps = tf.random.stateless_normal([self.popsize, self.num_dims], seed=self.seeds.next())
        return self.m + self.sigma * eps

    def _tell(self, x, fitness):
        top = tf.argsort(fitness, direction="DESCENDING")[: self.popsize // 4]
        self.m.assign(tf.reduce_mean(tf.gather(x, top), 0))
        self.sigma.assign(self.sigma * 0.97)


class NoisySphere(tf.Module):
    def __init__(self, seed, sleep_at=None):
        super().__init__()
        self.seeds = SeedStream(seed)
        self.sleep_at = sleep_at
        self.calls = 0

    def evaluate(self, x):
        self.calls += 1
        if self.sleep_at is not None and self.calls == self.sleep_at:
            print("SLEEPING", flush=True)
            time.sleep(60)  # killed here, mid-generation
        noise = tf.random.stateless_normal([x.shape[0]], seed=self.seeds.next()) * 0.01
        return -tf.reduce_sum(x * x, 1) + noise


def build(run_dir, generations, sleep_at=None):
    algo = ToyES(num_dims=5, popsize=16, seed=1)
    ev = NoisySphere(seed=2, sleep_at=sleep_at)
    return Trainer(algo, ev, run_dir=run_dir, generations=generations, progress=False, verbose=False), algo


if __name__ == "__main__":
    run_dir, gens = sys.argv[1], int(sys.argv[2])
    sleep_at = int(sys.argv[3]) if len(sys.argv) > 3 else None
    trainer, algo = build(run_dir, gens, sleep_at)
    if sleep_at is not None:
        # calls counts evaluations in this process; resumed processes start at 1.
        trainer._evaluator.sleep_at = sleep_at
    trainer.run()
    np.save(f"{run_dir}/final_mean.npy", algo.m.numpy())
    print("DONE", int(trainer.generation.numpy()), flush=True)
