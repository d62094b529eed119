"""tfevo.neat vs neat-python 2.x on the same machine.

Seconds per generation (median of a few generations after warm-up; trace /
compile time of the first generation reported separately) on XOR and
CartPole-v1 at several population sizes, with neat-python serial and with its
ParallelEvaluator; and generations to solve XOR (threshold 3.9, pop 150,
<= 300 generations) over seeds.

    python benchmarks/bench_neat.py                 # full table (a few minutes)
    python benchmarks/bench_neat.py --quick         # smaller

tfevo and neat-python generations alternate (3 rounds per size), so both
see the same machine load.  neat-python runs serially and with its
ParallelEvaluator (one worker per core) unless ``--no-serial-above`` /
``--no-parallel-above`` skip them; ``--np-gens`` sets how many of its
generations are timed (a serial CartPole generation at pop 10000 takes
~8 s, so 2 by default there, and 2 with the ParallelEvaluator at pop 10000).  ``--kernels 1000,10000`` adds the speciation
kernels (C++ op against its pure-TF reference, same inputs).  Which NEAT
custom ops are built is printed first; ``TFEVO_DISABLE_CUSTOM_OPS=1`` runs
the pure-TensorFlow references everywhere.
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import numpy as np  # noqa: E402

NEAT_PY_CFG = """
[NEAT]
fitness_criterion     = max
fitness_threshold     = {thr}
pop_size              = {pop}
reset_on_extinction   = False
no_fitness_termination = {noterm}

[DefaultGenome]
activation_default      = sigmoid
activation_mutate_rate  = 0.0
activation_options      = sigmoid
aggregation_default     = sum
aggregation_mutate_rate = 0.0
aggregation_options     = sum
bias_init_mean          = 0.0
bias_init_stdev         = 1.0
bias_max_value          = 30.0
bias_min_value          = -30.0
bias_mutate_power       = 0.5
bias_mutate_rate        = 0.7
bias_replace_rate       = 0.1
compatibility_disjoint_coefficient = 1.0
compatibility_weight_coefficient   = 0.5
conn_add_prob           = 0.5
conn_delete_prob        = 0.5
enabled_default         = True
enabled_mutate_rate     = 0.01
feed_forward            = True
initial_connection      = full
node_add_prob           = 0.2
node_delete_prob        = 0.2
num_hidden              = 0
num_inputs              = {nin}
num_outputs             = {nout}
response_init_mean      = 1.0
response_init_stdev     = 0.0
response_max_value      = 30.0
response_min_value      = -30.0
response_mutate_power   = 0.0
response_mutate_rate    = 0.0
response_replace_rate   = 0.0
weight_init_mean        = 0.0
weight_init_stdev       = 1.0
weight_max_value        = 30
weight_min_value        = -30
weight_mutate_power     = 0.5
weight_mutate_rate      = 0.8
weight_replace_rate     = 0.1

[DefaultSpeciesSet]
compatibility_threshold = 3.0

[DefaultStagnation]
species_fitness_func = max
max_stagnation       = 20
species_elitism      = 2

[DefaultReproduction]
elitism            = 2
survival_threshold = 0.2
"""

XOR_IN = [(0.0, 0.0), (0.0, 1.0), (1.0, 0.0), (1.0, 1.0)]
XOR_OUT = [0.0, 1.0, 1.0, 0.0]


# ---------------------------------------------------------------- neat-python

def _speciated_state(algo, prob, cfg, p_, pop):
    """The species state of ``algo``, the population ``p_`` speciated against it, its fitness and
    the plan kernel's uniforms: the inputs for timing the tell kernels one by one."""
    import tensorflow as tf

    from tfevo.core import sanitize_fitness, worst_to_finite
    from tfevo.neat import _speciate_op as so

    names = ["species_rep_nodes", "species_rep_conns", "species_active", "species_key", "species_created",
             "species_best_fitness", "species_last_improved", "next_species_key", "generation"]
    st = [getattr(algo, n).read_value() for n in names]
    ff = worst_to_finite(sanitize_fitness(prob(p_, cfg)))
    sp, alive, keys, _, best_f, last_imp, _, _ = so.speciate(cfg, p_.nodes, p_.conns, *st)
    u = tf.random.stateless_uniform([pop, 5], [1, 2])
    return st, ff, sp, alive, keys, best_f, last_imp, u, algo.member_key.read_value()

def _np_config(pop, nin, nout, thr=3.9, noterm=True):
    import neat

    text = NEAT_PY_CFG.format(pop=pop, nin=nin, nout=nout, thr=thr, noterm=noterm)
    fd, path = tempfile.mkstemp(suffix=".cfg")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    cfg = neat.Config(neat.DefaultGenome, neat.DefaultReproduction, neat.DefaultSpeciesSet, neat.DefaultStagnation, path)
    os.unlink(path)
    return cfg


def np_xor_genome(genome, config):
    import neat

    net = neat.nn.FeedForwardNetwork.create(genome, config)
    f = 4.0
    for xi, xo in zip(XOR_IN, XOR_OUT):
        f -= (net.activate(xi)[0] - xo) ** 2
    return f


def np_cartpole_genome(genome, config, seed=0):
    import gymnasium as gym
    import neat

    net = neat.nn.FeedForwardNetwork.create(genome, config)
    env = gym.make("CartPole-v1")
    obs, _ = env.reset(seed=seed)
    total = 0.0
    while True:
        out = net.activate(obs)
        obs, r, term, trunc, _ = env.step(int(np.argmax(out)))
        total += r
        if term or trunc:
            break
    env.close()
    return total


def _serial(fn):
    def run(genomes, config):
        for _, g in genomes:
            g.fitness = fn(g, config)
    return run


class NeatPythonRun:
    """One neat-python population; ``step()`` runs one generation and returns its seconds."""

    def __init__(self, problem, pop, parallel):
        import neat

        nin, nout = (2, 1) if problem == "xor" else (4, 2)
        fn = np_xor_genome if problem == "xor" else np_cartpole_genome
        self.p = neat.Population(_np_config(pop, nin, nout))
        self.pe = neat.ParallelEvaluator(multiprocessing.cpu_count(), fn) if parallel else None
        self.ev = self.pe.evaluate if parallel else _serial(fn)

    def step(self):
        t = time.perf_counter()
        self.p.run(self.ev, 1)
        return time.perf_counter() - t

    def close(self):
        if self.pe is not None and hasattr(self.pe, "close"):
            self.pe.close()


def neat_python_gen_times(problem, pop, gens, parallel):
    r = NeatPythonRun(problem, pop, parallel)
    times = [r.step() for _ in range(gens)]
    r.close()
    return times


def neat_python_solve(seed, gens=300):
    import random

    import neat

    random.seed(seed)
    cfg = _np_config(150, 2, 1, thr=3.9, noterm=False)
    p = neat.Population(cfg)
    best = p.run(_serial(np_xor_genome), gens)
    solved = best.fitness >= 3.9
    return solved, p.generation


# ---------------------------------------------------------------------- tfevo
class TfevoRun:
    """One tfevo NEAT run; ``step()`` runs one generation (ask, evaluate,
    tell) and returns (seconds, evaluation seconds, tell seconds)."""

    def __init__(self, problem, pop, jit=False):
        from tfevo.neat import NEAT, XOR, NEATConfig
        from tfevo.neat.policy import ControlProblem

        if problem == "xor":
            prob = XOR()
            cfg = prob.config(pop_size=pop, max_nodes=32, max_conns=64)
            self.ev = lambda p: prob(p, cfg)  # noqa: E731
        else:
            cfg = NEATConfig(num_inputs=4, num_outputs=2, pop_size=pop, max_nodes=24, max_conns=48)
            self.ev = ControlProblem("CartPole-v1", cfg, episodes=1)
        self.algo = NEAT(cfg, seed=0, jit_compile=jit)

    def step(self):
        t = time.perf_counter()
        pop_ = self.algo.ask()
        f = self.ev(pop_)
        f.numpy()
        t1 = time.perf_counter()
        self.algo.tell(pop_, f)
        # wait for the generation to finish: read the generation counter that
        # tell assigns last (copying the whole [P, N, 5] population to NumPy,
        # as before, added ~0.3 ms at pop 1000 that is no part of a generation)
        self.algo.generation.numpy()
        t2 = time.perf_counter()
        return t2 - t, t1 - t, t2 - t1


def _summarise(steps):
    """(trace+compile s, kept totals, median eval, median tell) from the
    per-generation (total, eval, tell) of a run whose first generation traces."""
    times, evals, tells = zip(*steps)
    # with jit, a generation whose bucket width is new compiles the XLA breed
    # programs (seconds): counted as compile time, not in the median
    med = statistics.median(tells[1:])
    comp = [i for i in range(1, len(tells)) if tells[i] > max(1.0, 20 * med)]
    keep = [i for i in range(1, len(tells)) if i not in comp]
    recompile = sum(tells[i] - med for i in comp)
    return (times[0] + recompile, [times[i] for i in keep], statistics.median([evals[i] for i in keep]),
            statistics.median([tells[i] for i in keep]))


def tfevo_gen_times(problem, pop, gens, jit=False):
    r = TfevoRun(problem, pop, jit)
    return _summarise([r.step() for _ in range(gens + 1)])


def interleaved(problem, pop, modes, tf_gens, np_gens, serial=True, parallel=False, rounds=3, par_gens=None):
    """tfevo (each mode) and neat-python generations alternating in ``rounds``
    rounds, so both see the same machine load.  Returns ({mode: summary},
    neat-python serial times, parallel times)."""
    runs = {m: TfevoRun(problem, pop, jit=(m == "xla")) for m in modes}
    steps = {m: [runs[m].step()] for m in modes}  # trace + compile
    nps = NeatPythonRun(problem, pop, False) if serial else None
    npp = NeatPythonRun(problem, pop, True) if parallel else None
    t_s, t_p = [], []
    per = [tf_gens // rounds + (1 if i < tf_gens % rounds else 0) for i in range(rounds)]
    per_np = [np_gens // rounds + (1 if i < np_gens % rounds else 0) for i in range(rounds)]
    for r in range(rounds):
        for _ in range(per_np[r]):
            if nps is not None:
                t_s.append(nps.step())
            if npp is not None and (par_gens is None or len(t_p) < par_gens):
                t_p.append(npp.step())
        for m in modes:
            steps[m] += [runs[m].step() for _ in range(per[r])]
    if npp is not None:
        npp.close()
    return {m: _summarise(steps[m]) for m in modes}, t_s, t_p


def kernel_times(pop, gens=6, reps=10, rounds=5):
    """The speciation kernels against their pure-TF references on the
    population of generation ``gens`` of an XOR run (same inputs, alternating,
    ``reps`` calls per timed tf.function call; median ms per call)."""
    import tensorflow as tf

    from tfevo.neat import NEAT, XOR
    from tfevo.neat import _speciate_op as so

    prob = XOR()
    cfg = prob.config(pop_size=pop, max_nodes=32, max_conns=64)
    algo = NEAT(cfg, seed=1)
    for _ in range(gens):
        p_ = algo.ask()
        algo.tell(p_, prob(p_, cfg))
    p_ = algo.ask()
    st, ff, sp, alive, keys, best_f, last_imp, u, mk = _speciated_state(algo, prob, cfg, p_, pop)

    def speciate_fn(use):
        @tf.function(autograph=False)
        def f(nodes):
            acc = tf.constant(0)
            for _ in range(reps):
                acc = so.speciate(cfg, nodes + tf.cast(acc, tf.float32) * 0, p_.conns, *st, use_op=use)[0][0]
            return acc
        return lambda: f(p_.nodes)

    def plan_fn(use):
        @tf.function(autograph=False)
        def f(ff):
            acc = tf.constant(0)
            for _ in range(reps):
                acc = so.plan(cfg, sp, alive, keys, best_f, last_imp, ff + tf.cast(acc, tf.float32) * 0, mk, st[-1],
                              u, use_op=use)[7][0]
            return acc
        return lambda: f(ff)

    out = {}
    for name, mk_fn in (("speciate", speciate_fn), ("plan", plan_fn)):
        fo, fr = mk_fn(True), mk_fn(False)
        fo(), fr()
        to, tr = [], []
        for _ in range(rounds):
            t = time.perf_counter()
            fo().numpy()
            to.append(time.perf_counter() - t)
            t = time.perf_counter()
            fr().numpy()
            tr.append(time.perf_counter() - t)
        out[name] = (statistics.median(to) / reps * 1e3, statistics.median(tr) / reps * 1e3)
    return out, algo.num_species


_KERNELS_AT: dict = {}


def _kernel_at(rev, name, suffix):
    """The op library of custom_ops/<name>.cc at git revision ``rev``, built with every
    op renamed <Op><suffix> so it loads beside the working tree's kernels."""
    import re
    import subprocess

    import tensorflow as tf

    from tfevo import ops

    if (rev, name, suffix) in _KERNELS_AT:  # a library's ops register once per process
        return _KERNELS_AT[rev, name, suffix]
    root = os.path.join(os.path.dirname(__file__), "..")
    src = subprocess.run(["git", "show", f"{rev}:custom_ops/{name}.cc"], cwd=root, capture_output=True, text=True,
                         check=True).stdout
    src = re.sub(r'"(TfevoNeat\w+)"', lambda m: f'"{m.group(1)}{suffix}"', src)
    d = tempfile.mkdtemp()
    for h in ops.source_dir().glob("*.h"):
        with open(os.path.join(d, h.name), "w") as f:
            f.write(h.read_text())
    cc, so = os.path.join(d, f"{name}.cc"), os.path.join(d, f"{name}.so")
    with open(cc, "w") as f:
        f.write(src)
    subprocess.run(["g++", "-shared", "-fPIC", "-O3", "-march=native", cc, "-o", so, *tf.sysconfig.get_compile_flags(),
                    *tf.sysconfig.get_link_flags(), "-pthread"], check=True, capture_output=True)
    _KERNELS_AT[rev, name, suffix] = tf.load_op_library(so)
    return _KERNELS_AT[rev, name, suffix]


def speciate_ab(pop, rev, gens=6, reps=10, rounds=7):
    """TfevoNeatSpeciate of git revision ``rev`` against the working tree's, same inputs (the
    population and species state after ``gens`` XOR generations), alternating; checks equal
    outputs.  Returns median (old, new) ms per call and process CPU ms per call."""
    import resource

    import tensorflow as tf

    from tfevo.neat import NEAT, XOR
    from tfevo.neat import _speciate_op as so

    old_mod = _kernel_at(rev, "neat_speciate", "Old")
    prob = XOR()
    cfg = prob.config(pop_size=pop, max_nodes=32, max_conns=64)
    algo = NEAT(cfg, seed=1)
    for _ in range(gens):
        p_ = algo.ask()
        algo.tell(p_, prob(p_, cfg))
    p_ = algo.ask()
    names = ["species_rep_nodes", "species_rep_conns", "species_active", "species_key", "species_created",
             "species_best_fitness", "species_last_improved", "next_species_key", "generation"]
    st = [getattr(algo, n).read_value() for n in names]
    attrs = dict(num_inputs=cfg.num_inputs, threshold=float(cfg.compatibility_threshold),
                 disjoint_coefficient=float(cfg.compatibility_disjoint_coefficient),
                 weight_coefficient=float(cfg.compatibility_weight_coefficient))

    def make(old):
        def call(nodes):
            if old:
                return old_mod.tfevo_neat_speciate_old(nodes, p_.conns, *st, **attrs)
            return so.speciate(cfg, nodes, p_.conns, *st, use_op=True)

        @tf.function(autograph=False)
        def f(nodes):
            outs, acc = None, tf.constant(0)
            for _ in range(reps):  # chained, distinct inputs: no call is merged away (+ one add per call)
                outs = call(nodes + tf.cast(acc, tf.float32) * 0)
                acc = outs[0][0]
            return outs
        return f

    fo, fn = make(True), make(False)
    for a, b in zip(fo(p_.nodes), fn(p_.nodes)):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    t = {"old": [], "new": []}
    for _ in range(rounds):
        for k, f in (("old", fo), ("new", fn)):
            r0 = resource.getrusage(resource.RUSAGE_SELF)
            t0 = time.perf_counter()
            f(p_.nodes)[0].numpy()
            r1 = resource.getrusage(resource.RUSAGE_SELF)
            t[k].append(((time.perf_counter() - t0) / reps * 1e3,
                         (r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime) / reps * 1e3))
    return {k: (statistics.median(a for a, _ in v), statistics.median(c for _, c in v)) for k, v in t.items()}


def tell_ab(pop, gens=12):
    """XOR ``tell`` seconds with the speciation kernels (TfevoNeatSpeciate,
    TfevoNeatPlan) against their pure-TF references, the other kernels as
    built; two runs with the same seed, alternating generation by generation
    (they evolve the same populations).  Returns (kernels, references)
    median seconds and whether the runs stayed identical."""
    import numpy as np

    from tfevo.neat import NEAT, XOR
    from tfevo import kernels
    from tfevo.neat import neat as neat_mod

    prob = XOR()
    cfg = prob.config(pop_size=pop, max_nodes=32, max_conns=64)
    real = kernels.kernel

    def no_speciation_kernels(op, use_op=None, *args, **kw):
        return None if op in ("TfevoNeatSpeciate", "TfevoNeatPlan") else real(op, use_op, *args, **kw)

    def make(use):
        neat_mod._TELL_CACHE.pop((repr(cfg), False), None)  # trace again with this dispatcher
        kernels.kernel = real if use else no_speciation_kernels
        try:
            a = NEAT(cfg, seed=0)
            p_ = a.ask()
            a.tell(p_, prob(p_, cfg))
        finally:
            kernels.kernel = real
        return a

    runs = (make(True), make(False))
    ts = ([], [])
    for _ in range(gens):
        for a, t in zip(runs, ts):
            p_ = a.ask()
            f = prob(p_, cfg)
            f.numpy()
            t0 = time.perf_counter()
            a.tell(p_, f)
            a.nodes.numpy()
            t.append(time.perf_counter() - t0)
    same = np.array_equal(runs[0].conns.numpy(), runs[1].conns.numpy(), equal_nan=True)
    return statistics.median(ts[0]), statistics.median(ts[1]), same


def tell_phases(pop, gens=8, reps=10, rounds=5):
    """Milliseconds per call of each kernel a pop-``pop`` XOR ``tell`` runs,
    in isolation on the state after ``gens`` generations (speciation, plan,
    the slot-range kernel, the Philox draws, the breed kernel), plus the
    median ask / evaluation / whole tell of generations 3..gens.  For the
    phases inside the kernels run with ``TFEVO_KERNEL_PHASES=1``."""
    import tensorflow as tf

    from tfevo import kernels
    from tfevo import random_ops as ro
    from tfevo.neat import NEAT, XOR
    from tfevo.neat import _breed_op as bo
    from tfevo.neat import _speciate_op as so
    from tfevo.neat.genes import attr_columns

    prob = XOR()
    cfg = prob.config(pop_size=pop, max_nodes=32, max_conns=64, **_FITNESS_DTYPE)
    algo = NEAT(cfg, seed=0)
    whole = {"ask": [], "eval": [], "tell": []}
    for g in range(gens):
        t0 = time.perf_counter()
        p_ = algo.ask()
        t1 = time.perf_counter()
        f = prob(p_, cfg)
        f.numpy()
        t2 = time.perf_counter()
        algo.tell(p_, f)
        algo.generation.numpy()
        t3 = time.perf_counter()
        if g >= 2:
            for k, v in zip(("ask", "eval", "tell"), (t1 - t0, t2 - t1, t3 - t2)):
                whole[k].append(v)
    out = {k: statistics.median(v) * 1e3 for k, v in whole.items()}
    p_ = algo.ask()
    st, ff, sp, alive, keys, best_f, last_imp, u, mk = _speciated_state(algo, prob, cfg, p_, pop)
    plan_out = so.plan(cfg, sp, alive, keys, best_f, last_imp, ff, mk, st[-1], u)
    p1, p2, el = plan_out[7], plan_out[8], plan_out[9]
    nk, nm = algo.next_node_key.read_value(), algo.next_marker.read_value()
    _, kn, _, kc = attr_columns(cfg)
    w, ws, us = kernels.kernel("TfevoNeatBreedWidths", True)(p_.nodes, p_.conns, node_extra=1, conn_extra=3, kn=kn,
                                                             kc=kc)
    words, uall = ro.stateless_int32_bits(ws, [3, 4]), ro.stateless_uniform(us, [5, 6])
    op = kernels.kernel("TfevoNeatBreed", True)

    def timeit(fn, *a):
        f = tf.function(fn, autograph=False)
        f(*a)
        ts = []
        for _ in range(rounds):
            t = time.perf_counter()
            for _ in range(reps):
                r = f(*a)
            tf.nest.map_structure(lambda x: x.numpy(), r)
            ts.append((time.perf_counter() - t) / reps)
        return statistics.median(ts) * 1e3

    out["speciate kernel"] = timeit(lambda n, c: so.speciate(cfg, n, c, *st)[0], p_.nodes, p_.conns)
    out["plan kernel"] = timeit(lambda f: so.plan(cfg, sp, alive, keys, best_f, last_imp, f, mk, st[-1], u)[7], ff)
    out["widths scan kernel"] = timeit(lambda n, c: kernels.kernel("TfevoNeatBreedWidths", True)(
        n, c, node_extra=1, conn_extra=3, kn=kn, kc=kc)[0], p_.nodes, p_.conns)
    out["philox draws"] = timeit(lambda: (ro.stateless_int32_bits(ws, [3, 4]), ro.stateless_uniform(us, [5, 6])))
    out["breed kernel"] = timeit(lambda n, c: bo._call(op, cfg, n, c, w, p1, p2, el, words, uall, nk, nm)[1],
                                 p_.nodes, p_.conns)
    return out, algo.num_species


# --fitness-dtype of --gen-loop / --dump-run / --tell-phases (empty: NEATConfig's default)
_FITNESS_DTYPE = {}


def _timed_generation(prob, cfg, algo):
    """One ask / evaluate / tell generation: wall, evaluation and tell seconds, and CPU seconds."""
    t0, c0 = time.perf_counter(), time.process_time()
    p_ = algo.ask()
    f = prob(p_, cfg)
    f.numpy()
    t1 = time.perf_counter()
    algo.tell(p_, f)
    algo.generation.numpy()
    return time.perf_counter() - t0, t1 - t0, time.perf_counter() - t1, time.process_time() - c0


def gen_loop(pop, reps=6, gens=6):
    """Generations 1..``gens`` of a pop-``pop`` XOR run (the bench's config and
    generations), ``reps`` times on one NEAT object (its variables restored to
    the state after generation 0 before each repetition), without neat-python
    in between.  Medians in ms of the generation, its evaluation and tell, and
    the process CPU time of a generation (all threads; less sensitive to other
    jobs than wall time).  With ``TFEVO_KERNEL_PHASES=1`` the kernels print
    their phases too."""
    from tfevo.neat import NEAT, XOR

    prob = XOR()
    cfg = prob.config(pop_size=pop, max_nodes=32, max_conns=64, **_FITNESS_DTYPE)
    algo = NEAT(cfg, seed=0)

    def one():
        return _timed_generation(prob, cfg, algo)

    one()
    saved = [(v, v.numpy()) for v in algo.variables]
    steps = []
    for r in range(reps + 1):  # the first repetition warms up
        for v, x in saved:
            v.assign(x)
        out = [one() for _ in range(gens)]
        if r:
            steps += out
    return {k: statistics.median(v) * 1e3 for k, v in zip(("gen", "eval", "tell", "cpu"), zip(*steps))}


def dtype_ab(pop, reps=8, gens=6):
    """float32 against float64 ``fitness_dtype`` in one process: generations
    1..``gens`` of two pop-``pop`` XOR runs (one per type, seed 0), each
    restored to its state after generation 0 before every repetition, the two
    alternating repetition by repetition (which goes first alternates too), so
    both see the same machine load.  Medians in ms as :func:`gen_loop`."""
    from tfevo.neat import NEAT, XOR

    prob = XOR()
    runs = {}
    for dt in ("float32", "float64"):
        cfg = prob.config(pop_size=pop, max_nodes=32, max_conns=64, fitness_dtype=dt)
        algo = NEAT(cfg, seed=0)
        p_ = algo.ask()
        algo.tell(p_, prob(p_, cfg))
        runs[dt] = (cfg, algo, [(v, v.numpy()) for v in algo.variables])

    def one(cfg, algo):
        return _timed_generation(prob, cfg, algo)

    steps = {dt: [] for dt in runs}
    for r in range(reps + 1):  # the first repetition warms up (traces the later generations' widths)
        for dt in (("float32", "float64") if r % 2 else ("float64", "float32")):
            cfg, algo, saved = runs[dt]
            for v, x in saved:
                v.assign(x)
            out = [one(cfg, algo) for _ in range(gens)]
            if r:
                steps[dt] += out
    return {dt: {k: statistics.median(v) * 1e3 for k, v in zip(("gen", "eval", "tell", "cpu"), zip(*st))}
            for dt, st in steps.items()}


def dump_run(path, pop=1000, gens=30, seed=3, threads=0):
    """Every NEAT variable after ``gens`` XOR generations, the next population
    and its fitness, to ``path`` (.npz): two checkouts that must breed the
    same run are compared byte for byte with :func:`compare_runs`."""
    import tensorflow as tf

    if threads:
        tf.config.threading.set_intra_op_parallelism_threads(threads)
    from tfevo.neat import NEAT, XOR

    prob = XOR()
    cfg = prob.config(pop_size=pop, max_nodes=32, max_conns=64, **_FITNESS_DTYPE)
    algo = NEAT(cfg, seed=seed)
    for _ in range(gens):
        p_ = algo.ask()
        algo.tell(p_, prob(p_, cfg))
    p_ = algo.ask()
    out = {v.name.split(":")[0]: v.numpy() for v in algo.variables}
    out.update(fitness=prob(p_, cfg).numpy(), nodes_now=p_.nodes.numpy(), conns_now=p_.conns.numpy())
    np.savez(path, **out)


def compare_runs(a, b):
    """The names of the arrays that differ (bytes) between two dump_run files."""
    x, y = np.load(a), np.load(b)
    if sorted(x.files) != sorted(y.files):
        return sorted(set(x.files) ^ set(y.files))
    return [k for k in x.files if x[k].tobytes() != y[k].tobytes()]


def custom_op_status():
    """Which NEAT custom ops are built and used (else their TF references run)."""
    from tfevo import ops

    names = ("neat_speciate", "neat_breed", "neat_forward")
    disabled = os.environ.get("TFEVO_DISABLE_CUSTOM_OPS", "") not in ("", "0")
    return ", ".join(f"{n}: {'off' if disabled else ('built' if ops.available(n) else 'unavailable')}" for n in names)


def _git_commit():
    """The checkout's commit (and whether NEAT sources differ from it), for the results file."""
    import subprocess

    root = os.path.join(os.path.dirname(__file__), "..")
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True,
                              timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "custom_ops/neat_*", "tfevo/neat"], cwd=root,
                               capture_output=True, text=True, timeout=10).stdout.split()
        return head + (" + uncommitted: " + " ".join(dirty[1::2]) if dirty else "")
    except Exception:  # noqa: BLE001 - not a checkout
        return "unknown"


def tfevo_solve(seed, gens=300, jit=False):
    from tfevo.neat import NEAT, XOR

    prob = XOR()
    cfg = prob.config(pop_size=150, fitness_threshold=3.9)
    algo = NEAT(cfg, seed=seed, jit_compile=jit)
    r = algo.run(lambda p: prob(p, cfg), gens)
    return r["solved"], r["generations"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--tell-ab", default="",
                    help="also time XOR tell with the speciation kernels vs their references at these populations")
    ap.add_argument("--tell-phases", default="", metavar="POPS",
                    help="only time each kernel of an XOR tell in isolation at these populations (e.g. 10000)")
    ap.add_argument("--gen-loop", default="", metavar="POPS",
                    help="only time generations 1-6 of XOR runs at these populations, repeated on one NEAT object "
                         "(median wall and CPU ms; no neat-python in between)")
    ap.add_argument("--dtype-ab", default="", metavar="POPS",
                    help="only time generations 1-6 of XOR runs with fitness_dtype float32 and float64 in one process, "
                         "alternating, at these populations")
    ap.add_argument("--dump-run", default="", metavar="PATH",
                    help="only save the state after 30 XOR generations at pop 1000, seed 3 (.npz; with --threads)")
    ap.add_argument("--threads", type=int, default=0, help="intra-op threads of --dump-run (0: TensorFlow's default)")
    ap.add_argument("--fitness-dtype", default=None, choices=["float64", "float32"],
                    help="NEATConfig.fitness_dtype of --gen-loop, --tell-phases and --dump-run (default: the config's)")
    ap.add_argument("--compare-runs", nargs=2, default=None, metavar=("A", "B"),
                    help="only compare two --dump-run files byte for byte")
    ap.add_argument("--kernels", default="",
                    help="also time the speciation kernels vs their references at these populations (e.g. 1000,10000)")
    ap.add_argument("--speciate-ab", default="", metavar="REV",
                    help="also time TfevoNeatSpeciate of git revision REV against the working tree's (same inputs, "
                         "alternating, outputs checked equal) at the --kernels populations (default 1000,10000)")
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--skip-solve", action="store_true")
    ap.add_argument("--problems", default="xor,cartpole")
    ap.add_argument("--sizes", default="150,1000,10000")
    ap.add_argument("--modes", default="graph",
                    help="tfevo tell modes to run: graph (default NEAT) and/or xla (NEAT(jit_compile=True))")
    ap.add_argument("--solve-mode", default="graph", help="tfevo tell mode of the solve-rate runs (graph or xla)")
    ap.add_argument("--tf-gens", type=int, default=0, help="tfevo generations per size (0: 7, 7, 5)")
    ap.add_argument("--np-gens", type=int, default=0,
                    help="neat-python generations per size and evaluator (0: 6 at pop 150, 3 at 1000 and 10000, "
                         "2 for CartPole at 10000, where a serial generation takes ~8 s)")
    ap.add_argument("--no-serial-above", type=int, default=10**9,
                    help="skip serial neat-python above this population")
    ap.add_argument("--no-parallel-above", type=int, default=10**9,
                    help="skip neat-python's ParallelEvaluator above this population")
    args = ap.parse_args()
    if args.fitness_dtype:
        _FITNESS_DTYPE["fitness_dtype"] = args.fitness_dtype
    if args.dump_run:
        dump_run(args.dump_run, threads=args.threads)
        return
    if args.compare_runs:
        bad = compare_runs(*args.compare_runs)
        print("identical" if not bad else f"differ: {', '.join(bad)}")
        sys.exit(1 if bad else 0)
    if args.gen_loop:
        print("# code:", _git_commit(), "| load average:", open("/proc/loadavg").read().split()[:3], flush=True)
        for pop in (int(x) for x in args.gen_loop.split(",")):
            ms = gen_loop(pop)
            print(f"# XOR pop {pop}, generations 1-6{', ' + args.fitness_dtype if args.fitness_dtype else ''}: "
                  + ", ".join(f"{k} {v:.2f} ms" for k, v in ms.items()),
                  flush=True)
        return
    if args.dtype_ab:
        print("# code:", _git_commit(), "| load average:", open("/proc/loadavg").read().split()[:3], flush=True)
        for pop in (int(x) for x in args.dtype_ab.split(",")):
            res = dtype_ab(pop)
            for dt, ms in res.items():
                print(f"# XOR pop {pop}, generations 1-6, {dt}: " + ", ".join(f"{k} {v:.2f} ms" for k, v in ms.items()),
                      flush=True)
            print(f"# XOR pop {pop}: float64 / float32 = " + ", ".join(
                f"{k} {res['float64'][k] / res['float32'][k]:.3f}" for k in res["float32"]), flush=True)
        return
    if args.tell_phases:
        print("# code:", _git_commit(), "| load average:", open("/proc/loadavg").read().split()[:3], flush=True)
        for pop in (int(x) for x in args.tell_phases.split(",")):
            ms, ns = tell_phases(pop)
            print(f"# XOR pop {pop} ({ns} species): " + ", ".join(f"{k} {v:.2f} ms" for k, v in ms.items()),
                  flush=True)
        return
    with open("/proc/loadavg") as f:
        load_before = f.read().split()[:3]
    rows = []
    sizes = [int(s) for s in args.sizes.split(",")]
    np_gens = {150: 6, 1000: 3, 10000: 3}
    tf_gens = {150: 9, 1000: 9, 10000: 6}
    print("# custom ops:", custom_op_status(), flush=True)
    print("# code:", _git_commit(), "| load average before:", " ".join(load_before), flush=True)
    for problem in args.problems.split(","):
        for pop in sizes:
            if args.quick and pop > 1000:
                continue
            skip_serial = pop > args.no_serial_above
            modes = args.modes.split(",")
            n_np = args.np_gens or (2 if (problem == "cartpole" and pop >= 10000) else np_gens.get(pop, 1))
            # ParallelEvaluator: at most 2 generations at pop >= 10000 (it ships every genome to a
            # worker; on a busy 2-core machine its XOR generation took 23 s at pop 10000)
            summ, ts, tp = interleaved(problem, pop, modes, args.tf_gens or tf_gens.get(pop, 3), n_np,
                                       serial=not skip_serial, parallel=pop <= args.no_parallel_above,
                                       par_gens=args.np_gens or (2 if pop >= 10000 else None))
            t_np = statistics.median(ts) if ts else math.nan
            t_pp = statistics.median(tp) if tp else math.nan
            for mode in modes:
                trace, tt, t_ev, t_tell = summ[mode]
                t_tf = statistics.median(tt)
                rows.append((problem, pop, mode, t_tf, trace, t_ev, t_tell, t_np, t_pp))
                print(f"# {problem} pop {pop} [{mode}]: tfevo {t_tf:.4f}s (compile {trace:.2f}s; eval {t_ev:.4f} "
                      f"tell {t_tell:.4f}; {len(tt)} gens) neat-python {t_np:.4f}s ({len(ts)} gens: "
                      f"{', '.join(f'{t:.3f}' for t in ts)}) parallel {t_pp:.4f}s ({len(tp)} gens)", flush=True)
    print()
    print("| problem | pop | tfevo mode | tfevo s/gen | tfevo eval s | tfevo tell s | tfevo trace+compile s (first gen + XLA recompiles) | neat-python serial s/gen | neat-python parallel (2 proc) s/gen | speedup vs serial | speedup vs parallel |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for problem, pop, mode, t_tf, trace, t_ev, t_tell, t_np, t_pp in rows:
        print(f"| {problem} | {pop} | {mode} | {t_tf:.4f} | {t_ev:.4f} | {t_tell:.4f} | {trace:.2f} | {t_np:.4f} | {t_pp:.4f} | "
              f"{t_np / t_tf:.1f}x | {t_pp / t_tf:.1f}x |")
    if args.kernels:
        print()
        print("| kernel | pop | live species | C++ op ms/call | pure-TF reference ms/call | ratio |")
        print("|---|---|---|---|---|---|")
        for pop in (int(x) for x in args.kernels.split(",")):
            res, ns = kernel_times(pop)
            for name, (a, b) in res.items():
                print(f"| {name} | {pop} | {ns} | {a:.3f} | {b:.3f} | {b / a:.1f}x |", flush=True)
        print()
    if args.speciate_ab:
        print()
        print(f"| XOR pop | TfevoNeatSpeciate at {args.speciate_ab}: ms/call (CPU ms) | working tree: ms/call (CPU ms) "
              "| wall ratio | CPU ratio |")
        print("|---|---|---|---|---|")
        for pop in (int(x) for x in (args.kernels or "1000,10000").split(",")):
            r = speciate_ab(pop, args.speciate_ab)
            (wo, co), (wn, cn) = r["old"], r["new"]
            print(f"| {pop} | {wo:.3f} ({co:.3f}) | {wn:.3f} ({cn:.3f}) | {wo / wn:.2f}x | {co / cn:.2f}x |", flush=True)
    if args.tell_ab:
        print()
        print("| XOR pop | tell, speciation kernels (ms) | tell, speciation references (ms) | ratio | same run |")
        print("|---|---|---|---|---|")
        for pop in (int(x) for x in args.tell_ab.split(",")):
            a, b, same = tell_ab(pop)
            print(f"| {pop} | {a * 1e3:.2f} | {b * 1e3:.2f} | {b / a:.2f}x | {same} |", flush=True)
    if not args.skip_solve:
        print()
        res_tf = [tfevo_solve(s, jit=args.solve_mode == "xla") for s in range(args.seeds)]
        res_np = [neat_python_solve(s) for s in range(args.seeds)]
        print("| library | XOR solved (of %d) | median generations (solved runs) | median evaluations |" % args.seeds)
        print("|---|---|---|---|")
        for name, res in (("tfevo.neat", res_tf), ("neat-python", res_np)):
            g = [n for ok, n in res if ok]
            med = statistics.median(g) if g else math.nan
            print(f"| {name}{' (' + args.solve_mode + ')' if name == 'tfevo.neat' else ''} | {sum(ok for ok, _ in res)} | {med} | {med * 150:.0f} |")
        print()
        print("per-seed generations tfevo:", [n if ok else None for ok, n in res_tf])
        print("per-seed generations neat-python:", [n if ok else None for ok, n in res_np])
    with open("/proc/loadavg") as f:
        print(f"\nload average before: {' '.join(load_before)}; after: {' '.join(f.read().split()[:3])}")


if __name__ == "__main__":
    main()
