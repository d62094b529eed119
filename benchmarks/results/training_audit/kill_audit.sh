#!/bin/bash
# SIGKILL a `tfevo train` run mid-way, resume it, and compare logs + TensorBoard with an uninterrupted run.
HERE=$(cd "$(dirname "$0")" && pwd); cd "$HERE/../../.."; export PYTHONPATH=$PWD
R=/tmp/auditdist/kill; rm -rf $R; mkdir -p $R
for fam in es neat; do
  if [ $fam = es ]; then A="--set algorithm.popsize=8 --set policy.hidden=[4] --set env.episodes=1 --set env.max_steps=40 --set evaluator.kind=pipelined --set evaluator.num_envs=4";
  else A="examples/configs/neat_cartpole.toml --set algorithm.popsize=6 --set env.max_steps=40 --set env.episodes=1 --set evaluator.kind=pipelined --set evaluator.num_envs=4"; fi
  A="$A --set run.checkpoint_every=3 --no-progress"
  python -m tfevo.cli train $A --run-dir $R/$fam-ref --generations 40 > $R/$fam-ref.log 2>&1
  python -m tfevo.cli train $A --run-dir $R/$fam-kill --generations 40 > $R/$fam-kill.log 2>&1 &
  pid=$!
  # kill once generation 10 is logged (mid-run, between checkpoints with checkpoint_every=3 most of the time)
  for i in $(seq 1 600); do n=$(cat $R/$fam-kill/progress.jsonl 2>/dev/null | wc -l); [ "$n" -ge 10 ] && break; sleep 0.05; done
  kill -9 $pid; wait $pid 2>/dev/null
  echo "$fam killed with $(wc -l < $R/$fam-kill/progress.jsonl) log lines; checkpoint: $(grep model_checkpoint_path $R/$fam-kill/checkpoints/checkpoint | head -1)"
  python "$HERE/tb_steps.py" $R/$fam-kill
  python -m tfevo.cli train $A --run-dir $R/$fam-kill --generations 40 > $R/$fam-resume.log 2>&1; echo "resume rc=$?"; grep resumed $R/$fam-resume.log
  python "$HERE/tb_steps.py" $R/$fam-kill $R/$fam-ref
done
