"""CMA-ME per-iteration cost of one code tree: 15 ESEmitter searches x 37, D=100, Sphere-QD, 100x100 grid.

Prints one JSON line: process CPU ms per ``step()`` (150 iterations after 5 warm-up ones), wall ms per
step, CPU ms per eager ask/evaluate/tell (30 iterations) and the final QD-score.  The code measured is
the one on ``PYTHONPATH``; ``label`` only names it in the output.  Run two trees alternately to compare
them under the same load:

    for r in 1 2 3; do for c in main branch; do PYTHONPATH=<tree of $c> python qd_step_ab.py $c; done; done
"""
import sys, time, json, os
import tensorflow as tf
from tfevo.qd import ESEmitter, GridArchive, MAPElites, sphere_qd
D = 100
a = GridArchive(D, [100, 100], [(0, 1), (0, 1)], qd_offset=-25.0 * D)
em = ESEmitter(D, 37, num_emitters=15, sigma=0.1, ranker="2imp", selection_rule="mu", seed=0)
me = MAPElites(a, [em], init_bounds=(0, 1), seed=0)
fn = tf.function(sphere_qd, input_signature=[tf.TensorSpec([555, D], tf.float32)])
for _ in range(5):
    me.step(fn).status.numpy()
c0, w0 = time.process_time(), time.perf_counter()
n = 150
for _ in range(n):
    me.step(fn).status.numpy()
c1, w1 = time.process_time(), time.perf_counter()
# ask/tell path too
c2 = time.process_time()
for _ in range(30):
    x = me.ask(); f, d = sphere_qd(x); me.tell(x, f, d)
c3 = time.process_time()
print(json.dumps({"code": sys.argv[1], "cpu_ms_step": 1e3 * (c1 - c0) / n, "wall_ms_step": 1e3 * (w1 - w0) / n,
                  "cpu_ms_asktell": 1e3 * (c3 - c2) / 30, "qd": a.metrics()["qd_score"]}))
