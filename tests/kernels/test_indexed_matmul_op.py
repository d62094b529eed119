"""TfevoIndexedMatmul (custom_ops/indexed_matmul.cc) against its pure-TF reference."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

from tfevo import ops

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def op():
    mod = ops.load("indexed_matmul")
    if mod is None:
        pytest.skip("no C++ compiler / TensorFlow headers: the reference is used (see test_fallback_*)")
    return mod.tfevo_indexed_matmul


def reference(x, w, idx):
    return tf.matmul(x, tf.gather(w, idx))


@pytest.mark.parametrize(
    "n,b,k,m,M",
    [(1, 1, 1, 1, 1), (7, 1, 33, 5, 9), (5, 3, 7, 300, 12), (16, 8, 64, 64, 16), (3, 1, 3136, 512, 6), (0, 2, 4, 3, 5),
     (4, 2, 300, 700, 4), (2, 4, 130, 1500, 3), (3, 5, 40, 17, 4)],
)
def test_equals_reference(op, n, b, k, m, M):
    rng = np.random.default_rng(n * 1000 + k)
    x = tf.constant(rng.normal(size=(n, b, k)), tf.float32)
    w = tf.constant(rng.normal(size=(M, k, m)), tf.float32)
    idx = tf.constant(rng.integers(0, M, n), tf.int32)
    got = op(x, w, idx)
    assert got.shape == (n, b, m) and got.dtype == tf.float32
    want = reference(x, w, idx)
    if n == 0:
        return
    # Both kernels sum k float32 products in different orders; the products
    # themselves are exact, so agreement is limited by float32 rounding of the
    # sums.  Entry-wise rtol 1e-6 (plus an absolute term for sums that cancel),
    # and the op must be as accurate as the reference against float64.
    exact = np.einsum("nbk,nkm->nbm", x.numpy().astype(np.float64), w.numpy().astype(np.float64)[idx.numpy()])
    err_op = np.abs(got.numpy() - exact).max()
    err_ref = np.abs(want.numpy() - exact).max()
    assert err_op <= 2.0 * err_ref + 1e-6 * np.sqrt(k), (err_op, err_ref)
    atol = 4 * np.finfo(np.float32).eps * np.sqrt(k) * np.abs(exact).max()
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6, atol=atol)


def test_xla_compiled_caller_uses_reference(op):
    """Inside jit_compile=True the op (no XLA kernel) is replaced by the reference."""
    from tfevo.nn.indexed import indexed_matmul

    rng = np.random.default_rng(3)
    x = tf.constant(rng.normal(size=(4, 1, 20)), tf.float32)
    w = tf.constant(rng.normal(size=(6, 20, 9)), tf.float32)
    idx = tf.constant([5, 0, 5, 2], tf.int32)
    f = tf.function(indexed_matmul, jit_compile=True, autograph=False)
    graph_ops = {n.op for n in f.get_concrete_function(x, w, idx).graph.as_graph_def().node}
    assert "TfevoIndexedMatmul" not in graph_ops
    np.testing.assert_allclose(f(x, w, idx).numpy(), reference(x, w, idx).numpy(), rtol=1e-5, atol=1e-5)
    graph_ops = {n.op for n in tf.function(indexed_matmul).get_concrete_function(x, w, idx).graph.as_graph_def().node}
    assert "TfevoIndexedMatmul" in graph_ops


def test_repeated_and_subset_indices(op):
    rng = np.random.default_rng(5)
    w = tf.constant(rng.normal(size=(10, 6, 4)), tf.float32)
    x = tf.constant(rng.normal(size=(10, 2, 6)), tf.float32)
    full = op(x, w, tf.range(10))
    sub = op(tf.gather(x, [9, 9, 0]), w, tf.constant([9, 9, 0]))
    np.testing.assert_array_equal(sub.numpy(), tf.gather(full, [9, 9, 0]).numpy())


def test_shape_function_and_graph_use(op):
    f = tf.function(lambda x, w, i: op(x, w, i),
                    input_signature=[tf.TensorSpec([None, 1, 8]), tf.TensorSpec([4, 8, 3]), tf.TensorSpec([None], tf.int32)])
    cf = f.get_concrete_function()
    assert cf.structured_outputs.shape.as_list() == [None, 1, 3]
    out = f(tf.ones([2, 1, 8]), tf.ones([4, 8, 3]), tf.constant([0, 3]))
    np.testing.assert_allclose(out.numpy(), np.full((2, 1, 3), 8.0))


def test_errors(op):
    w = tf.zeros([4, 3, 2])
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"idx\[1\] = 4 is out of range \[0, 4\)"):
        op(tf.zeros([2, 1, 3]), w, tf.constant([0, 4]))
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"idx\[0\] = -1"):
        op(tf.zeros([1, 1, 3]), w, tf.constant([-1]))
    with pytest.raises((tf.errors.InvalidArgumentError, ValueError)):
        op(tf.zeros([2, 1, 5]), w, tf.constant([0, 1]))  # k mismatch
    with pytest.raises((tf.errors.InvalidArgumentError, ValueError)):
        op(tf.zeros([2, 1, 3]), w, tf.constant([0]))  # n mismatch


def _start(code, **env):
    full = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="3", **env)
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=full)


CHECK = """
    import logging, numpy as np, tensorflow as tf
    logging.basicConfig(level=logging.WARNING, format="LOG %(name)s %(message)s")
    from tfevo import ops
    assert ops.load("indexed_matmul") is None
    assert ops.load("indexed_matmul") is None  # asked twice, warned once
    from tfevo.nn.indexed import indexed_matmul
    x, w, i = tf.random.normal([3, 2, 4]), tf.random.normal([5, 4, 6]), tf.constant([4, 0, 4])
    np.testing.assert_array_equal(indexed_matmul(x, w, i).numpy(), tf.matmul(x, tf.gather(w, i)).numpy())
    print("FALLBACK-OK")
"""


def test_fallback_without_compiler_in_process(tmp_path, monkeypatch, caplog):
    """No compiler (CXX=/nonexistent, empty PATH, empty cache): None, exactly one warning."""
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("CXX", "/nonexistent")
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.setenv("TFEVO_CACHE", str(tmp_path / "c0"))
    monkeypatch.delenv("TFEVO_DISABLE_CUSTOM_OPS", raising=False)
    monkeypatch.setattr(ops, "_CACHE", {})
    monkeypatch.setattr(ops, "_WARNED", set())
    with caplog.at_level("WARNING", logger="tfevo.ops"):
        assert ops.load("indexed_matmul") is None
        assert ops.load("indexed_matmul") is None
    recs = [r for r in caplog.records if r.name == "tfevo.ops"]
    assert len(recs) == 1 and "indexed_matmul" in recs[0].getMessage() and "compiler" in recs[0].getMessage()


@pytest.mark.slow
def test_fallback_without_compiler(tmp_path):
    """A fresh process with no compiler anywhere: one log line, reference results."""
    empty = tmp_path / "bin"
    empty.mkdir()
    proc = _start(CHECK, CXX="/nonexistent", PATH=str(empty), TFEVO_CACHE=str(tmp_path / "c1"))
    out, err = proc.communicate(timeout=300)
    assert "FALLBACK-OK" in out, err[-3000:]
    lines = [l for l in err.splitlines() if l.startswith("LOG tfevo.ops")]
    assert len(lines) == 1, err[-3000:]
    assert "indexed_matmul" in lines[0] and "compiler" in lines[0]


def test_fallback_when_disabled(tmp_path, monkeypatch, caplog):
    """TFEVO_DISABLE_CUSTOM_OPS=1: nothing is compiled or loaded, the reference runs."""
    monkeypatch.setenv("TFEVO_DISABLE_CUSTOM_OPS", "1")
    monkeypatch.setenv("TFEVO_CACHE", str(tmp_path / "c2"))
    assert ops.load("indexed_matmul") is None
    assert not list(tmp_path.rglob("*.so"))
    from tfevo.nn import indexed

    x, w, i = tf.random.normal([3, 2, 4]), tf.random.normal([5, 4, 6]), tf.constant([4, 0, 4])
    np.testing.assert_array_equal(indexed.indexed_matmul(x, w, i, use_op=False).numpy(), reference(x, w, i).numpy())
    assert len([r for r in caplog.records if r.name == "tfevo.ops"]) <= 1


FAKE_CXX = """#!{python}
import sys
args = sys.argv[1:]
with open({log!r}, "a") as f:
    f.write(" ".join(a for a in args if a.startswith("-m")) + "\\n")
if any(a in args for a in {reject!r}):
    sys.stderr.write("error: unrecognized command-line option\\n")
    sys.exit(1)
open(args[args.index("-o") + 1], "wb").close()
"""


def _fake_compiler(tmp_path, reject):
    """A 'compiler' that records its -m flags, rejects the listed ones and writes an empty library."""
    log = tmp_path / "cxx.log"
    cxx = tmp_path / "fakecxx"
    cxx.write_text(FAKE_CXX.format(python=sys.executable, log=str(log), reject=list(reject)))
    cxx.chmod(0o755)
    return str(cxx), log


@pytest.mark.parametrize("reject,expect,attempts", [
    ((), ["-march=native", "-mno-avx512fp16"], 1),
    (("-mno-avx512fp16",), ["-march=native"], 2),  # a compiler that does not know the flag
    (("-march=native",), [], 3),  # one that rejects both: the generic target, with a warning
])
def test_build_tries_cpu_tuned_flags_first(tmp_path, monkeypatch, caplog, reject, expect, attempts):
    cxx, log = _fake_compiler(tmp_path, reject)
    monkeypatch.setenv("CXX", cxx)
    monkeypatch.setenv("TFEVO_CACHE", str(tmp_path / "cache"))
    with caplog.at_level("WARNING", logger="tfevo.ops"):
        path = ops.build("indexed_matmul")
    assert path.is_file() and path.parent.parent.parent == tmp_path / "cache"
    assert len(log.read_text().splitlines()) == attempts
    assert ops.build_flags("indexed_matmul") == expect
    warned = [r for r in caplog.records if "generic CPU target" in r.getMessage()]
    assert bool(warned) == (expect == [])
    assert ops.build("indexed_matmul") == path and len(log.read_text().splitlines()) == attempts  # cached


def test_cache_key_includes_cpu(tmp_path, monkeypatch):
    """A library built on one CPU (-march=native) is never loaded on another."""
    monkeypatch.setenv("TFEVO_CACHE", str(tmp_path))
    a = ops._library_path("normal")
    monkeypatch.setattr(ops, "_cpu_key", lambda: "x86_64 avx2 fma")
    b = ops._library_path("normal")
    monkeypatch.setattr(ops, "_cpu_key", lambda: "x86_64 avx2 avx512f fma")
    c = ops._library_path("normal")
    assert len({a, b, c}) == 3 and a.parent == b.parent == c.parent


def test_build_ops_command_builds_every_op(tmp_path, monkeypatch, capsys):
    from tfevo import cli

    cxx, log = _fake_compiler(tmp_path, ())
    monkeypatch.setenv("CXX", cxx)
    monkeypatch.setenv("TFEVO_CACHE", str(tmp_path / "cache"))
    assert cli.main(["build-ops", "--jobs", "2"]) == 0
    out = capsys.readouterr().out
    names = ops.names()
    assert {"indexed_matmul", "normal", "pop_conv", "sym_eig"} <= set(names)
    assert len(log.read_text().splitlines()) == len(names)
    for n in names:
        assert n in out and ops._library_path(n).is_file()
    # a compiler that fails every build: exit status 1 and the failed ops named
    (tmp_path / "failing").mkdir()
    cxx2, _ = _fake_compiler(tmp_path / "failing", ("-O3",))
    monkeypatch.setenv("CXX", cxx2)
    assert cli.main(["build-ops", "--force"]) == 1
    assert "failed to build" in capsys.readouterr().err


def test_ops_are_built_for_this_cpu():
    """The kernels' vector paths (AVX2 / AVX-512) need -march=native: a compiler and
    TensorFlow headers that only build for the generic target are a slow-down to surface."""
    import platform

    if ops._compiler() is None or platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip("no compiler, or not x86-64")
    if ops.load("indexed_matmul") is None:
        pytest.skip("custom ops disabled")
    assert ops.build_flags("indexed_matmul")[:1] == ["-march=native"]


def test_build_ops_without_compiler_builds_nothing_and_says_so(tmp_path, monkeypatch, capsys):
    """No compiler is not an error (the references run), so the README's
    `tfevo build-ops && pytest` still runs the tests there."""
    from tfevo import cli

    (tmp_path / "bin").mkdir()
    monkeypatch.setenv("CXX", "/nonexistent")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    monkeypatch.setenv("TFEVO_CACHE", str(tmp_path / "cache"))
    assert cli.main(["build-ops"]) == 0
    assert "no C++ compiler" in capsys.readouterr().err
    assert not (tmp_path / "cache").exists()
