"""Every use of TensorFlow's private API in tfevo, in one place.

TensorFlow's public API has no way to call a traced function without its
Python layers, to run one registered op with little overhead, to ask whether
the graph being built will be XLA-compiled, or to list the devices an op has
kernels for.  tfevo needs those, so they live here and nowhere else: when a
TensorFlow release moves one of them, this module is the only one to change,
and each helper degrades to the public, slower equivalent (never to a wrong
answer).

The *fast paths* (:class:`FastCall`'s direct execution, :func:`eager_op_runner`,
:func:`flat_caller`, :func:`inline_caller`) were measured on CPUs only.  They
are off whenever a GPU is visible, while :func:`tfevo.kernels.assume_gpu` is
active, with ``TFEVO_DISABLE_TF_PRIVATE=1`` and inside :func:`fast_paths`
``(False)``; then every caller takes TensorFlow's ordinary call, with the same
results.  The introspection helpers (:func:`in_xla_context`,
:func:`registered_kernel_devices`, :func:`graph_building_seconds`,
:func:`is_eager_tensor`, :func:`is_trackable`, :func:`in_multi_worker_mode`)
change no computation and stay on.

Keras has no public API to read a built model's layer graph either: the
functional-graph readers (:func:`keras_functional_graph`, :func:`keras_nodes_by_depth`,
:func:`keras_io_structure`, :func:`keras_all_layers`, :func:`keras_node_call_kwargs`) are here too.
"""

from __future__ import annotations

import contextlib
import itertools
import os

import numpy as np
import tensorflow as tf

__all__ = [
    "fast_paths_enabled", "fast_paths", "FastCall", "eager_op_runner", "flat_caller", "inline_caller",
    "in_xla_context", "registered_kernel_devices", "graph_building_seconds", "is_eager_tensor",
    "eager_matches", "EagerTensor", "function_names", "function_def", "is_trackable", "in_multi_worker_mode",
]

try:  # the type of eager tensors (tf.Tensor's concrete eager subclass)
    from tensorflow.python.framework.ops import EagerTensor
except Exception:  # noqa: BLE001 - private API moved  # pragma: no cover
    EagerTensor = None

_FORCED_OFF: list = []  # a stack of fast_paths(False) contexts


def fast_paths_enabled() -> bool:
    """Whether the private-API fast paths may run now: no GPU visible (real or
    assumed), ``TFEVO_DISABLE_TF_PRIVATE`` unset and no ``fast_paths(False)`` context."""
    if _FORCED_OFF or os.environ.get("TFEVO_DISABLE_TF_PRIVATE", "") not in ("", "0"):
        return False
    from tfevo.kernels.device import gpu_present

    return not gpu_present()


@contextlib.contextmanager
def fast_paths(enabled: bool):
    """Turns the fast paths off (``enabled=False``) for the objects created and
    the calls made inside the block; ``True`` changes nothing (they still need
    a GPU-free machine)."""
    if enabled:
        yield
        return
    _FORCED_OFF.append(True)
    try:
        yield
    finally:
        _FORCED_OFF.pop()


def is_eager_tensor(x) -> bool:
    """``x`` is an eager (concrete, not symbolic) tensor."""
    if EagerTensor is not None:
        return type(x) is EagerTensor
    return isinstance(x, tf.Tensor) and not tf.is_symbolic_tensor(x)  # pragma: no cover


def eager_matches(x, dtype, shape: tuple) -> bool:
    """``x`` is an eager tensor of exactly ``dtype`` and ``shape`` (nothing to convert or check)."""
    if EagerTensor is None:  # pragma: no cover
        return False
    return type(x) is EagerTensor and x.dtype is dtype and x._shape_tuple() == shape


def in_xla_context() -> bool:
    """Whether the function being traced will be XLA-compiled (``jit_compile=True``)."""
    try:
        from tensorflow.python.ops import control_flow_util

        return bool(control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph()))
    except Exception:  # noqa: BLE001 - private API moved: assume no XLA  # pragma: no cover
        return False


def is_trackable(obj) -> bool:
    """Whether ``tf.train.Checkpoint`` can track ``obj`` (TensorFlow's base class of trackable
    objects; if it moved, the public ones: a ``tf.Module`` or a ``tf.Variable``)."""
    base = getattr(getattr(getattr(tf, "__internal__", None), "tracking", None), "Trackable", None)
    return isinstance(obj, base if base is not None else (tf.Module, tf.Variable))


def in_multi_worker_mode(strategy) -> bool:
    """Whether the ``tf.distribute`` strategy spans several workers (its own private test; if that
    moved, ``False``, as for every single-worker strategy)."""
    try:
        return bool(strategy.extended._in_multi_worker_mode())
    except Exception:  # noqa: BLE001 - private API moved  # pragma: no cover
        return False


def registered_kernel_devices(op_type: str) -> set[str]:
    """The device types (``"CPU"``, ``"GPU"``, ...) with a kernel registered for ``op_type``.

    Reads TensorFlow's kernel registry (the ops loaded so far, custom ops
    included); an unknown op gives an empty set.
    """
    from tensorflow.python.framework import kernels

    try:
        return {k.device_type for k in kernels.get_registered_kernels_for_op(op_type).kernel}
    except Exception:  # noqa: BLE001 - not registered
        return set()


def function_names() -> set[str]:
    """Names of the functions registered in the eager context (every traced function that
    ran, and the wrappers of single eager ops)."""
    from tensorflow.python.eager import context as tf_context

    return set(tf_context.context().list_function_names())


def function_def(name: str):
    """The ``FunctionDef`` of a function registered in the eager context, or ``None``."""
    from tensorflow.python.eager import context as tf_context

    ctx = tf_context.context()
    return ctx.get_function_def(name) if ctx.has_function(name) else None


def graph_building_seconds() -> float:
    """Seconds TensorFlow has spent building ``tf.function`` graphs in this process (0.0 if unknown).

    Reads the counter TensorFlow keeps for its own monitoring
    (``/tensorflow/core/tf_function/graph_building_time_usecs``).
    """
    try:
        from tensorflow.python.eager.polymorphic_function import tracing_compilation

        return tracing_compilation._graph_building_time_counter.get_cell().value() / 1e6
    except Exception:  # noqa: BLE001 - private API moved: report no compile time  # pragma: no cover
        return 0.0


class FastCall:
    """Calls a ``tf.function`` that has a fixed ``input_signature`` with little Python overhead.

    A ``tf.function`` call binds its arguments against the signature and looks
    up the traced program on every call (about 0.1-0.3 ms on a 2-core CPU,
    more than the whole graph of a small strategy step).  With a fixed
    signature there is exactly one concrete function, so this wrapper traces
    it once, keeps its captured inputs and, when running eagerly with the fast
    paths on (:func:`fast_paths_enabled`), executes the traced program directly
    as one eager operation.  Inside another ``tf.function`` (graph building),
    under a recording gradient tape, with a GPU visible or if the TensorFlow
    internals it relies on are missing, it makes the ordinary call, so results
    are identical either way.

    Args:
      fn: a ``tf.function`` created with ``input_signature``.
      inline: run the program's kernels one after the other on one thread
        (TensorFlow's single-threaded executor) instead of scheduling each on
        the inter-op pool: cheaper for graphs of a few small kernels.

    Example:

    >>> f = tf.function(lambda x: 2.0 * x, input_signature=[tf.TensorSpec([3], tf.float32)])
    >>> call = FastCall(f)
    >>> call(tf.ones([3])).numpy()
    array([2., 2., 2.], dtype=float32)
    """

    __slots__ = ("fn", "_flat", "_captures", "_run", "_keep")

    def __init__(self, fn, inline: bool = False):
        self.fn = fn
        concrete = fn.get_concrete_function()
        self._keep = concrete  # the traced program stays registered while this lives
        self._flat = getattr(concrete, "_call_flat", None) if fast_paths_enabled() else None
        self._captures = list(concrete.captured_inputs) if self._flat is not None else None
        self._run = _direct_runner(concrete, self._captures, inline) if self._flat is not None else None

    def __call__(self, *args):
        if self._flat is not None and tf.executing_eagerly() and not _FORCED_OFF:
            run = self._run
            if run is not None:
                out = run(args)
                if out is not _FALLBACK:
                    return out
            return self._flat(list(args), self._captures)
        return self.fn(*args)


_FALLBACK = object()


def _direct_runner(concrete, captures, inline: bool):
    """``run(args)``: executes ``concrete``'s program as one eager op, or ``None``
    when TensorFlow's internals differ from what this relies on.  ``run`` returns
    ``_FALLBACK`` when a gradient tape could record the call (the ordinary call
    then records it)."""
    try:
        from tensorflow.python import pywrap_tfe
        from tensorflow.python.eager import context as tf_context
        from tensorflow.python.eager import core as tf_core
        from tensorflow.python.eager import record

        atomic = concrete._inference_function
        name = atomic.name.decode("utf-8") if isinstance(atomic.name, bytes) else str(atomic.name)
        num_outputs = len(atomic.function_type.flat_outputs)
        structured = concrete.structured_outputs
        flat_structured = tf.nest.flatten(structured)
        if len(flat_structured) != num_outputs or not all(isinstance(t, tf.Tensor) for t in flat_structured):
            return None
        execute = pywrap_tfe.TFE_Py_Execute
        not_ok, to_exception = tf_core._NotOkStatusException, tf_core._status_to_exception
        could_record = record.could_possibly_record
        ctx = tf_context.context()
        ctx.ensure_initialized()
        local = ctx._thread_local_data
        _ = ctx._handle, ctx.device_name, local.function_call_options
    except Exception:  # noqa: BLE001 - private API moved: keep the ordinary call  # pragma: no cover
        return None
    if num_outputs == 0:
        def pack(out):
            return None
    elif not isinstance(structured, (tuple, list, dict)) and num_outputs == 1:
        def pack(out):
            return out[0]
    else:
        def pack(out):
            return tf.nest.pack_sequence_as(structured, out)
    cache = [None, None]  # (the context's call options, their attrs): rebuilt if the options change

    def run(args):
        if could_record():
            return _FALLBACK
        opts = local.function_call_options
        if opts is None or opts is not cache[0]:
            opts = ctx.function_call_options
            attrs = dict(opts.as_attrs())
            if inline:
                attrs["executor_type"] = "SINGLE_THREADED_EXECUTOR"
            cache[0], cache[1] = opts, tuple(itertools.chain(*attrs.items()))
        try:
            out = execute(ctx._handle, ctx.device_name, name, list(args) + captures, cache[1], num_outputs)
        except not_ok as e:
            raise to_exception(e) from None
        return pack(out)

    return run


def eager_op_runner(op_name: str, num_outputs: int = 1, attrs: tuple = ()):
    """``run(inputs)``: executes the registered op ``op_name`` (``attrs``: a flat
    tuple of names and values) eagerly on the calling thread with little Python
    overhead, or ``None`` when the fast paths are off (:func:`fast_paths_enabled`)
    or the TensorFlow internals this relies on are missing.

    A single eager op skips what a function call costs (an executor on the
    inter-op pool and its thread hand-offs: ~0.05-0.1 ms on a 2-core CPU).
    Errors raise the usual ``tf.errors`` exceptions.
    """
    if not fast_paths_enabled():
        return None
    try:
        from tensorflow.python import pywrap_tfe
        from tensorflow.python.eager import context as tf_context
        from tensorflow.python.eager import core as tf_core

        execute = pywrap_tfe.TFE_Py_Execute
        not_ok, to_exception = tf_core._NotOkStatusException, tf_core._status_to_exception
        ctx = tf_context.context()
        ctx.ensure_initialized()
        _ = ctx._handle, ctx.device_name
    except Exception:  # noqa: BLE001 - private API moved  # pragma: no cover
        return None

    def run(inputs):
        try:
            return execute(ctx._handle, ctx.device_name, op_name, inputs, attrs, num_outputs)
        except not_ok as e:
            raise to_exception(e) from None

    return run


def flat_caller(concrete):
    """``call(params, *rest)`` of a concrete function through its flat entry point
    (skips ``tf.function``'s dispatch and argument binding: ~1 ms per rollout step at
    P=256 on a 2-core CPU), or the ordinary call when the fast paths are off."""
    flat = getattr(concrete, "_call_flat", None) if fast_paths_enabled() else None
    if flat is None:
        return lambda params, *rest: concrete(params, *(tf.convert_to_tensor(a) for a in rest))
    captures = list(concrete.captured_inputs)
    return lambda params, *rest: flat(tf.nest.flatten(params) + [tf.convert_to_tensor(a) for a in rest], captures)


def module_items(module, predicate, with_path: bool = False):
    """``tf.Module``'s own walk of its attribute tree (what ``.variables`` uses), filtered by
    ``predicate``; with ``with_path``, ``(path, object)`` pairs."""
    return module._flatten(predicate=predicate, with_path=with_path)


def capture_substituting_caller(concrete, captures):
    """``call()`` running ``concrete``'s graph (no arguments) with ``captures`` in place
    of the captured inputs it was traced with (same dtypes and order), or ``None``
    when the flat entry point is missing (the caller then traces its own program)."""
    flat = getattr(concrete, "_call_flat", None)
    if flat is None:  # pragma: no cover - TensorFlow internals moved
        return None
    captures = list(captures)
    return lambda: flat([], captures)


def inline_caller(concrete):
    """A caller running ``concrete``'s graph inline on one thread, or ``None``.

    It executes the graph as one eager call with TensorFlow's single-threaded
    executor: the graph's kernels run one after the other on one inter-op
    thread instead of each kernel being scheduled on the pool by itself (no
    Python layers of the function call, one thread hand-off per call).
    Results are identical (same graph, same kernels).  ``None`` when the fast
    paths are off or the TensorFlow internals it uses are missing.
    """
    if not fast_paths_enabled():
        return None
    try:
        from tensorflow.python.eager import context as tf_context
        from tensorflow.python.eager import execute as tf_execute

        atomic = concrete._inference_function
        name = atomic.name.decode("utf-8") if isinstance(atomic.name, bytes) else str(atomic.name)
        num_outputs = len(atomic.function_type.flat_outputs)
        ctx = tf_context.context()
        attrs = dict(ctx.function_call_options.as_attrs())
        attrs["executor_type"] = "SINGLE_THREADED_EXECUTOR"
        attrs = tuple(itertools.chain(*attrs.items()))
        captures = list(concrete.captured_inputs)
        execute = tf_execute.execute
        structured = concrete.structured_outputs
        ctx.ensure_initialized()
        device = ctx.device_name
        if EagerTensor is None:
            return None
    except Exception:  # noqa: BLE001 - private API moved: use the ordinary call  # pragma: no cover
        return None
    single = not isinstance(structured, (tuple, list))
    enums: dict = {}

    def as_tensor(a):
        # numpy step inputs become tensors through the EagerTensor constructor itself
        # (~10 us instead of ~60 us for tf.convert_to_tensor's dispatch layers)
        if type(a) is np.ndarray:
            e = enums.get(a.dtype)
            if e is None:
                e = enums[a.dtype] = tf.as_dtype(a.dtype).as_datatype_enum
            return EagerTensor(a, device, e)
        if isinstance(a, EagerTensor):
            return a
        return tf.convert_to_tensor(a)

    last = [None, None]  # the parameters of the last call and their flat list (the same every step)

    def call(params, *rest, _keep=(concrete, atomic)):  # the function stays registered while this lives
        if last[0] is not params:
            last[0], last[1] = params, tf.nest.flatten(params)
        flat = last[1] + [as_tensor(a) for a in rest] + captures
        out = execute(name, num_outputs=num_outputs, inputs=flat, attrs=attrs, ctx=ctx)
        return out[0] if single else tuple(out)

    return call


# -- Keras's functional graph (how a template is read layer by layer) -----------------------------------
def keras_functional_graph(model):
    """The functional graph of a Keras model: a built Sequential's inner functional model, a functional
    model itself; ``None`` for a Sequential that is not built or a subclassed model (no graph)."""
    import keras

    if isinstance(model, keras.Sequential):
        return getattr(model, "_functional", None)
    return model if hasattr(model, "_nodes_by_depth") else None


def keras_nodes_by_depth(graph) -> dict:
    """``{depth: [node, ...]}`` of a functional graph (depth 0: the output nodes)."""
    return graph._nodes_by_depth


def keras_io_structure(graph):
    """``(inputs, outputs)`` as the functional model was built: a tensor, a list or a dict of them
    (``None`` where Keras keeps no structure)."""
    return getattr(graph, "_inputs_struct", None), getattr(graph, "_outputs_struct", None)


def keras_all_layers(model) -> list:
    """Every layer of ``model``, itself and nested models included, outermost first."""
    return list(model._flatten_layers())


def keras_node_call_kwargs(node) -> dict:
    """The keyword arguments a functional-graph node's layer was called with (``{}`` if Keras keeps none),
    e.g. ``{"training": True}`` for ``Dropout(0.5)(x, training=True)``."""
    args = getattr(node, "arguments", None)
    return dict(getattr(args, "kwargs", None) or {})


def keras_node_call_arguments(node) -> tuple:
    """``(args, kwargs)`` a functional-graph node's layer was called with (``((), {})`` if Keras keeps none)."""
    args = getattr(node, "arguments", None)
    return tuple(getattr(args, "args", None) or ()), dict(getattr(args, "kwargs", None) or {})
