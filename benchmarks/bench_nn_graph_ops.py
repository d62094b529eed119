"""Op types of the traced PopulationModel forward graphs (flat and subset), as JSON, for comparing two checkouts:

    PYTHONPATH=/tmp/tfevo-base python benchmarks/bench_nn_graph_ops.py > base.json
    PYTHONPATH=. python benchmarks/bench_nn_graph_ops.py > new.json
"""
import json, sys
import tensorflow as tf
from tfevo import nn
out = {}
for net, P, B in [("mlp", 256, 32), ("mlp", 64, 1), ("dqn", 16, 1), ("dqn", 16, 8)]:
    pm = nn.PopulationModel(nn.mlp((8,), 2, hidden=(64, 64)) if net == "mlp" else nn.nature_dqn(18))
    params = pm.init_params(P, seed=0)
    x = tf.zeros((P, B) + pm.input_shape)
    for kind, args in [("flat", (params, x)), ("flat_idx", (params, x[:3], tf.constant([0, 2, 5])))]:
        if kind == "flat_idx":
            args = (params, tf.zeros((3, B) + pm.input_shape), tf.constant([0, 2, 5]))
        cf = pm._fn(kind).get_concrete_function(*args)
        ops = [op.type for op in cf.graph.get_operations()]
        out[f"{net} P={P} B={B} {kind}"] = ops
print(json.dumps(out))
