#!/bin/bash
# Same seed = same run through the command line, each run in its own process: every shipped config at a
# toy budget (3 generations) with --seed 0 twice and --seed 1; compare with benchmarks/check_cli_seeds.py.
# Usage (from the repository root): PYTHONPATH=$PWD bash benchmarks/check_cli_seeds.sh [RUNS_DIR]
C=examples/configs
R=${1:-/tmp/cli_seeds}; rm -rf $R; mkdir -p $R
H="--set evaluator.kind=pipelined --set evaluator.num_envs=4"
declare -A OV
OV[cartpole_es.toml]="--set algorithm.popsize=8 --set env.max_steps=30 --set env.episodes=1"
OV[cartpole_ga.yaml]="--set algorithm.popsize=8 --set algorithm.params.truncation=3 --set algorithm.params.num_elite_candidates=2 --set env.max_steps=30 --set env.episodes=1"
OV[pendulum_es.toml]="--set algorithm.popsize=8 --set env.max_steps=30 --set env.episodes=1"
OV[neat_cartpole.toml]="--set algorithm.popsize=6 --set env.max_steps=12 --set env.episodes=1 $H"
OV[neat_recurrent_acrobot.toml]="--set algorithm.popsize=6 --set env.max_steps=12 --set env.episodes=1 $H"
OV[hyperneat_cartpole.toml]="--set algorithm.popsize=6 --set env.max_steps=12 --set env.episodes=1 $H"
OV[gp_cartpole.toml]="--set algorithm.popsize=8 --set env.max_steps=12 --set env.episodes=1 $H"
OV[map_elites_rastrigin.toml]="--set algorithm.popsize=8"
OV[cma_me_sphere.toml]="--set algorithm.popsize=12 --set algorithm.params.num_emitters=2 --set problem.num_dims=6"
OV[mujoco_es_hopper.toml]="--set algorithm.popsize=4 --set env.max_steps=10 --set evaluator.num_envs=2 --set policy.hidden=[4]"
for c in "${!OV[@]}"; do
  for tag in s0a s0b s1; do
    seed=0; [ $tag = s1 ] && seed=1
    timeout 300 python -m tfevo.cli train $C/$c --run-dir $R/$c.$tag --generations 3 --seed $seed --no-progress ${OV[$c]} > $R/$c.$tag.log 2>&1
    echo "$c $tag rc=$?"
  done
done
