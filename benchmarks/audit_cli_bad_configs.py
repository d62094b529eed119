"""Bad configs through the config path (`parse_config` + `build`, what `tfevo train` runs before any work).

Each case changes the base config (CartPole-v1, OpenAI-ES, popsize 8) at dotted keys (` ;; ` between
changes, values as JSON, DEL removes) and prints what it gives: a ConfigError (its message), ACCEPTED, or a
traceback (a defect). usage: PYTHONPATH=$PWD python benchmarks/audit_cli_bad_configs.py > OUT.txt
"""

import copy
import json
import time
import traceback

from tfevo.core import ConfigError
from tfevo.training import config as C
from tfevo.training.builders import build

BASE = {"name": "b", "run": {"seed": 0, "generations": 1}, "env": {"id": "CartPole-v1", "episodes": 1, "max_steps": 10},
        "policy": {"kind": "mlp", "hidden": [4]}, "algorithm": {"name": "openai_es", "popsize": 8}}
DEL = object()
CASES = r"""
algoritm={"name": "cma_es"}
run.generation=3
env.episode=2
policy.hiden=[4]
evaluator.num_env=4
algorithm.popsiz=8
algorithm.name="openai-es"
algorithm.name="cmaes"
algorithm.name="CMA_ES"
env.id="CartPol-v1"
env.id="cartpole-v1"
env.id="ALE/Pongg-v5"
env.id="Hopper-v4"
env.id="NoSuch-v0"
policy.kind="mpl"
evaluator.kind="pipeline"
policy.activation="rleu"
policy.continuous="tan"
algorithm.popsize="64"
algorithm.popsize=6.5
algorithm.popsize=1
env.episodes="three"
policy.hidden=16
env.kwargs=3
algorithm.params=[]
algorithm.params={"sigma": "0.1"}
algorithm.params={"sigma": [0.1]}
algorithm.params={"sigma": -1}
algorithm.params={"sigma": 0}
algorithm.params={"learning_rate": 0}
algorithm.params={"learning_rate": -0.1}
algorithm.params={"sigma": null}
env.max_steps=0
env.episodes=0
run.seed=-1
evaluator.num_envs=0
evaluator.num_subsets=0
evaluator.num_subsets="two"
policy.hidden=[0]
policy.hidden=[]
policy.kind="nature_dqn" ;; policy.hidden=DEL
evaluator.kind="pipelined" ;; evaluator.num_envs=1000
problem={"name": "bbob_f1", "num_dims": 5}
problem={"name": "bbob_f1", "num_dims": 5} ;; env=DEL ;; policy=DEL
policy.kind="neat"
algorithm.name="neat" ;; policy.kind="mlp"
algorithm.name="gp" ;; policy.kind="neat"
algorithm.name="map_elites"
algorithm.name="map_elites" ;; env.id="Hopper-v5"
algorithm.name="map_elites" ;; env.id="Hopper-v5" ;; archive={"descriptors": ["contact:foot"]}
algorithm.name="map_elites" ;; env.id="Hopper-v5" ;; evaluator={"kind": "ingraph"} ;; archive={"descriptors": ["contact:foot_geom"], "cells": [4]}
env.id="ALE/Pong-v5" ;; evaluator={"kind": "ingraph"} ;; policy.kind="nature_dqn" ;; policy.hidden=DEL
env.id="Pendulum-v1" ;; policy.kind="nature_dqn" ;; policy.hidden=DEL
algorithm.name="neat" ;; policy={"kind": "neat"} ;; algorithm.params={"max_nodes": 3}
algorithm.name="neat" ;; policy={"kind": "neat"} ;; algorithm.params={"max_conns": 0}
algorithm.name="neat" ;; policy={"kind": "neat"} ;; algorithm.params={"activation_default": "rleu"}
algorithm.name="neat" ;; policy={"kind": "neat"} ;; algorithm.params={"conn_add_prob": 1.5}
algorithm.name="neat" ;; policy={"kind": "neat"} ;; algorithm.params={"compatibility_threshold": -1}
algorithm.name="neat" ;; policy={"kind": "neat"} ;; algorithm.params={"max_nodes": "12"}
algorithm.name="neat" ;; policy={"kind": "neat"} ;; algorithm.params={"feed_forward": "no"}
algorithm.name="neat" ;; policy={"kind": "neat"} ;; algorithm.params={"elitism": 100}
algorithm.name="neat" ;; policy={"kind": "neat"} ;; algorithm.params={"survival_threshold": 0}
algorithm.name="neat" ;; policy={"kind": "neat", "params": {"settle_steps": 0}}
algorithm.name="neat" ;; policy={"kind": "hyperneat", "params": {"weight_threshold": -1}}
algorithm.name="neat" ;; policy={"kind": "hyperneat", "activation": "rleu"}
algorithm.name="neat" ;; policy={"kind": "hyperneat", "params": {"output_activation": "sigmod"}}
algorithm.name="neat" ;; policy={"kind": "neat"} ;; env.id="ALE/Pong-v5"
algorithm.name="neat" ;; policy={"kind": "hyperneat"} ;; env.id="ALE/Pong-v5"
algorithm.name="gp" ;; policy={"kind": "gp_tree"} ;; env.id="ALE/Pong-v5"
algorithm.name="gp" ;; policy={"kind": "gp_tree"} ;; algorithm.params={"max_len": 1}
algorithm.name="gp" ;; policy={"kind": "gp_tree"} ;; algorithm.params={"functions": ["add", "sinn"]}
algorithm.name="gp" ;; policy={"kind": "gp_tree"} ;; algorithm.params={"max_depth": 0}
algorithm.name="gp" ;; policy={"kind": "gp_tree"} ;; algorithm.params={"tournament_size": 100}
algorithm.name="gp" ;; policy={"kind": "gp_tree"} ;; algorithm.params={"crossover_prob": 2}
algorithm.name="gp" ;; policy={"kind": "gp_tree"} ;; algorithm.params={"max_len": "64"}
algorithm.name="gp" ;; policy={"kind": "gp_tree"} ;; algorithm.params={"max_len": 64.5}
algorithm.name="gp" ;; policy={"kind": "gp_tree"} ;; algorithm.params={"popsize": 4}
algorithm.name="gp" ;; policy={"kind": "gp_tree"} ;; algorithm.params={"max_lenn": 4}
algorithm.name="cma_es" ;; algorithm.params={"sigma0": 0.5}
algorithm.name="cma_es" ;; algorithm.params={"sigma": -0.5}
algorithm.name="cma_es" ;; algorithm.params={"popsize": 4}
algorithm.name="cma_es" ;; algorithm.popsize=3
algorithm.name="ga" ;; algorithm.params={"truncation": 100}
algorithm.name="ga" ;; algorithm.params={"truncation": 0}
algorithm.name="ga" ;; algorithm.params={"num_elite_candidates": 20}
algorithm.name="seed_ga" ;; algorithm.params={"max_generations": 0}
algorithm.name="seed_ga" ;; run.generations=500
algorithm.name="de" ;; algorithm.params={"cr": 2}
algorithm.name="de" ;; algorithm.params={"strategy": "rand/2"}
algorithm.name="de" ;; algorithm.popsize=3
algorithm.name="pso" ;; algorithm.params={"inertia": "high"}
algorithm.name="ars" ;; algorithm.params={"top_k": 100}
algorithm.name="ars" ;; algorithm.popsize=7
algorithm.name="openai_es" ;; algorithm.popsize=7
algorithm.name="pgpe" ;; algorithm.popsize=7
algorithm.name="xnes" ;; algorithm.popsize=3
algorithm.name="lm_ma_es" ;; algorithm.params={"memory": 0}
algorithm.name="ipop_cma_es" ;; algorithm.params={"inc_popsize": 0.5}
algorithm.name="bipop_cma_es" ;; algorithm.params={"max_restarts": -1}
algorithm.name="random_search" ;; algorithm.params={"low": 1, "high": 0}
env=DEL ;; policy=DEL ;; algorithm={"name": "map_elites", "popsize": 8} ;; problem={"name": "rastrigin_qd", "num_dims": 1}
env=DEL ;; policy=DEL ;; algorithm={"name": "map_elites", "popsize": 8} ;; problem={"name": "rastrigin_qd", "num_dims": 4, "init_bounds": [1, 0]}
env=DEL ;; policy=DEL ;; algorithm={"name": "map_elites", "popsize": 8} ;; problem={"name": "rastrigin_qd", "num_dims": 4, "init_bounds": [0, 0]}
env=DEL ;; policy=DEL ;; algorithm={"name": "map_elites", "popsize": 8} ;; problem={"name": "rastrigin_qd", "num_dims": 4} ;; archive={"cells": [8, 8, 8]}
env=DEL ;; policy=DEL ;; algorithm={"name": "map_elites", "popsize": 8} ;; problem={"name": "rastrigin_qd", "num_dims": 4} ;; archive={"cells": [0, 8]}
env=DEL ;; policy=DEL ;; algorithm={"name": "map_elites", "popsize": 8} ;; problem={"name": "rastrigin_qd", "num_dims": 4} ;; archive={"kind": "cvt", "cells": [8, 8]}
env=DEL ;; policy=DEL ;; algorithm={"name": "map_elites", "popsize": 8} ;; problem={"name": "rastrigin_qd", "num_dims": 4} ;; archive={"ranges": [[1, 0], [0, 1]]}
env=DEL ;; policy=DEL ;; algorithm={"name": "map_elites", "popsize": 8} ;; problem={"name": "rastrigin_qd", "num_dims": 4} ;; archive={"qd_offset": "x"}
env=DEL ;; policy=DEL ;; algorithm={"name": "map_elites", "popsize": 8, "params": {"emitter": "isoline"}} ;; problem={"name": "rastrigin_qd", "num_dims": 4}
env=DEL ;; policy=DEL ;; algorithm={"name": "map_elites", "popsize": 8, "params": {"emitter": "iso_line", "iso_sigma": -1}} ;; problem={"name": "rastrigin_qd", "num_dims": 4}
env=DEL ;; policy=DEL ;; algorithm={"name": "map_elites", "popsize": 8, "params": {"emitter": "iso_line", "sigma": 0.1}} ;; problem={"name": "rastrigin_qd", "num_dims": 4}
env=DEL ;; policy=DEL ;; algorithm={"name": "map_elites", "popsize": 8, "params": {"emitter": "gaussian", "sigma": -0.1}} ;; problem={"name": "rastrigin_qd", "num_dims": 4}
env=DEL ;; policy=DEL ;; algorithm={"name": "map_elites", "popsize": 8, "params": {"emitter": "cma_me", "num_emitters": 3}} ;; problem={"name": "rastrigin_qd", "num_dims": 4}
env=DEL ;; policy=DEL ;; algorithm={"name": "map_elites", "popsize": 8, "params": {"emitter": "cma_me", "ranker": "impp"}} ;; problem={"name": "rastrigin_qd", "num_dims": 4}
env=DEL ;; policy=DEL ;; algorithm={"name": "map_elites", "popsize": 8, "params": {"emitter": "cma_me", "sigma": 0}} ;; problem={"name": "rastrigin_qd", "num_dims": 4}
env=DEL ;; policy=DEL ;; algorithm={"name": "map_elites", "popsize": 8, "params": {"emitter": "cma_me", "selection_rule": "muu"}} ;; problem={"name": "rastrigin_qd", "num_dims": 4}
env=DEL ;; policy=DEL ;; algorithm={"name": "map_elites", "popsize": 8, "params": {"emitter": "cma_me", "x0": [0, 0]}} ;; problem={"name": "rastrigin_qd", "num_dims": 4}
env=DEL ;; policy=DEL ;; algorithm={"name": "map_elites", "popsize": 8, "params": {"emitter": "cma_me", "restart_rule": "never"}} ;; problem={"name": "rastrigin_qd", "num_dims": 4}
env=DEL ;; policy=DEL ;; algorithm={"name": "map_elites", "popsize": 8} ;; problem={"name": "rastrigin_qd", "num_dims": 4} ;; archive={"learning_rate": 2}
env=DEL ;; policy=DEL ;; algorithm={"name": "map_elites", "popsize": 8} ;; problem={"name": "rastrigin_qdd", "num_dims": 4}
env=DEL ;; policy=DEL ;; algorithm={"name": "cma_es", "popsize": 8} ;; problem={"name": "rastrigin_qd", "num_dims": 4}
env=DEL ;; algorithm={"name": "map_elites", "popsize": 8} ;; problem={"name": "rastrigin_qd", "num_dims": 4}
env=DEL ;; policy=DEL ;; algorithm={"name": "map_elites", "popsize": 8} ;; problem={"name": "rastrigin_qd", "num_dims": 4} ;; evaluator={"kind": "pipelined"}
env=DEL ;; policy=DEL ;; algorithm={"name": "map_elites", "popsize": 8} ;; problem={"name": "rastrigin_qd", "num_dims": 4} ;; evaluator={"obs_norm": true}
policy=DEL ;; algorithm={"name": "map_elites", "popsize": 8} ;; env.id="Walker2d-v5" ;; archive={"descriptors": ["x", "y"]}
policy=DEL ;; algorithm={"name": "map_elites", "popsize": 8} ;; env.id="Walker2d-v5" ;; archive={"descriptors": ["contact:foot_geom"], "cells": [4, 4]}
policy=DEL ;; algorithm={"name": "map_elites", "popsize": 8} ;; env.id="Walker2d-v5" ;; archive={"descriptors": ["contact:foot_geom"], "cells": [4]} ;; policy={"kind": "nature_dqn"}
policy=DEL ;; algorithm={"name": "map_elites", "popsize": 8} ;; env.id="ALE/Pong-v5" ;; policy={"kind": "nature_dqn"}
evaluator={"obs_norm": true}
evaluator={"decode_chunk": 4}
evaluator={"jit_compile": true, "kind": "pipelined"}
env.kwargs={"frame_skip": 4}
env.id="ALE/Pong-v5" ;; env.kwargs={"frameskip": 4} ;; policy={"kind": "nature_dqn"} ;; evaluator={"kind": "pipelined"}
env.id="ALE/Pong-v5" ;; env.kwargs={"preset": "dn"} ;; policy={"kind": "nature_dqn"} ;; evaluator={"kind": "pipelined"}
env.id="Hopper-v5" ;; env.kwargs={"ctrl_cost_weight": "a"} ;; evaluator={"kind": "pipelined"}
env.id="Hopper-v5" ;; env.kwargs={"ctrl_cost": 0.1} ;; evaluator={"kind": "pipelined"}
distribute={"devices": 0}
distribute={"strategy": "mirored"}
algorithm.name="neat" ;; policy={"kind": "neat", "params": {"settle_steps": 0}}
algorithm.name="neat" ;; policy={"kind": "neat", "params": {"settle_steps": 1.5}}
algorithm.name="gp" ;; policy={"kind": "gp_tree"} ;; algorithm.params={"max_len": 64.5}
algorithm.name="gp" ;; policy={"kind": "gp_tree"} ;; algorithm.params={"max_len": "64"}
algorithm.name="gp" ;; policy={"kind": "gp_tree"} ;; algorithm.params={"tournament_size": 2.5}
algorithm.name="gp" ;; policy={"kind": "gp_tree"} ;; algorithm.params={"init_depth": [2, 4.5]}
algorithm.name="gp" ;; policy={"kind": "gp_tree"} ;; algorithm.params={"init_depth": 3}
algorithm.name="gp" ;; policy={"kind": "gp_tree"} ;; algorithm.params={"max_len": 64.0}
evaluator={"obs_norm": true}
evaluator={"num_envs": 4}
evaluator={"num_subsets": 2}
evaluator={"kind": "ingraph", "obs_norm": true}
evaluator={"decode_chunk": 4}
evaluator={"jit_compile": true, "kind": "pipelined"}
evaluator={"jit_compile": true}
evaluator={"kind": "pipelined", "num_envs": 4, "obs_norm": true}
algorithm.name="seed_ga" ;; evaluator={"decode_chunk": 4}
env=DEL ;; policy=DEL ;; algorithm={"name": "map_elites", "popsize": 8} ;; problem={"name": "rastrigin_qd", "num_dims": 4} ;; evaluator={"obs_norm": true}
env=DEL ;; policy=DEL ;; algorithm={"name": "map_elites", "popsize": 8} ;; problem={"name": "rastrigin_qd", "num_dims": 4} ;; evaluator={"kind": "auto"}
env.id="Hopper-v5" ;; evaluator={"jit_compile": true}
policy.continuous="clip"
algorithm.name="neat" ;; policy={"kind": "neat", "weight_dtype": "float16"}
algorithm.name="neat" ;; policy={"kind": "neat", "continuous": "clip"} ;; env.id="Pendulum-v1"
algorithm.name="neat" ;; policy={"kind": "hyperneat", "weight_dtype": "float16"}
algorithm.name="gp" ;; policy={"kind": "gp_tree", "weight_dtype": "float16"}
algorithm.name="gp" ;; policy={"kind": "gp_tree", "continuous": "clip"} ;; env.id="Pendulum-v1"
policy.continuous="clip" ;; env.id="Pendulum-v1"
policy.weight_dtype="float16"
"""


def changed(data, key, value):
    data = copy.deepcopy(data)
    node, parts = data, key.split(".")
    for p in parts[:-1]:
        node = node.setdefault(p, {})
    if value is DEL:
        node.pop(parts[-1], None)
    else:
        node[parts[-1]] = value
    return data


def main():
    for line in [l for l in CASES.splitlines() if l.strip()]:
        data = BASE
        for kv in line.split(" ;; "):
            k, v = kv.split("=", 1)
            data = changed(data, k.strip(), DEL if v.strip() == "DEL" else json.loads(v))
        t = time.time()
        try:
            build(C.parse_config(data))
            msg = "ACCEPTED (built)"
        except ConfigError as e:
            msg = "ConfigError: " + str(e).replace("\n", " | ")
        except Exception as e:  # noqa: BLE001 - a traceback from deep inside is the finding
            tb = traceback.extract_tb(e.__traceback__)[-1]
            msg = f"TRACEBACK {type(e).__name__}: {str(e)[:300]} @ {tb.filename}:{tb.lineno}".replace("\n", " | ")
        print(f"[{time.time() - t:4.1f}s] {line}\n    -> {msg[:600]}", flush=True)


if __name__ == "__main__":
    main()
