"""The one dispatch every call site of a C++ kernel goes through.

``kernel(op, use_op, inputs)`` returns the op's Python function when the
kernel runs at this call site, else ``None`` (the caller then runs its
pure-TensorFlow reference).  It decides once per call site (at trace time,
or per eager call) with one rule:

* the op is built and loaded (``tfevo.ops.load``; never with
  ``TFEVO_DISABLE_CUSTOM_OPS=1``),
* the function being traced is not XLA-compiled (the ops have no XLA kernel),
* its inputs live on the host (:func:`tfevo.kernels.on_host`: always without
  a GPU; with one only for tensors placed on a CPU) -- the ops have CPU
  kernels only,
* and the caller's own condition (``unsupported``: e.g. a dtype or an
  activation the kernel lacks) does not rule it out.

``use_op`` is the one switch name every public entry point takes: ``None``
(default) applies the rule, ``False`` always takes the reference, ``True``
requires the kernel (:class:`KernelUnavailableError` naming the reason when
the rule says no).  Each decision is logged once per op and outcome at debug
level on the ``tfevo.kernels`` logger.
"""

from __future__ import annotations

import contextlib
import logging
from os import environ as _environ

import tensorflow as tf

from tfevo import ops
from tfevo._tf_private import in_xla_context
from tfevo.core import ConfigError
from tfevo.kernels.device import on_host

__all__ = ["KERNELS", "KernelUnavailableError", "kernel", "built", "check_use_op", "decisions", "use_ops"]

log = logging.getLogger("tfevo.kernels")

#: every registered C++ op: ``{op type: (library in custom_ops/, Python function name)}``
KERNELS: dict[str, tuple[str, str]] = {
    "GpEval": ("gp_eval", "gp_eval"),
    "GpMse": ("gp_eval", "gp_mse"),
    "TfevoIndexedMatmul": ("indexed_matmul", "tfevo_indexed_matmul"),
    "TfevoIndexedDenseFlat": ("indexed_matmul", "tfevo_indexed_dense_flat"),
    "TfevoToHalf": ("indexed_matmul", "tfevo_to_half"),
    "TfevoNeatBreed": ("neat_breed", "tfevo_neat_breed"),
    "TfevoNeatBreedWidths": ("neat_breed", "tfevo_neat_breed_widths"),
    "TfevoNeatBreedShapes": ("neat_breed", "tfevo_neat_breed_shapes"),
    "TfevoNeatCompile": ("neat_forward", "tfevo_neat_compile"),
    "TfevoNeatForward": ("neat_forward", "tfevo_neat_forward"),
    "TfevoNeatEvaluate": ("neat_forward", "tfevo_neat_evaluate"),
    "TfevoNeatCartPoleRollout": ("neat_forward", "tfevo_neat_cart_pole_rollout"),
    "TfevoNeatRecurrentStep": ("neat_forward", "tfevo_neat_recurrent_step"),
    "TfevoNeatSpeciate": ("neat_speciate", "tfevo_neat_speciate"),
    "TfevoNeatPlan": ("neat_speciate", "tfevo_neat_plan"),
    "TfevoGaussianPopulation": ("normal", "tfevo_gaussian_population"),
    "TfevoGaussianFromState": ("normal", "tfevo_gaussian_from_state"),
    "TfevoStatelessUniform": ("normal", "tfevo_stateless_uniform"),
    "TfevoPopulationConv2D": ("pop_conv", "tfevo_population_conv2d"),
    "TfevoPopulationConv2DFlat": ("pop_conv", "tfevo_population_conv2d_flat"),
    "TfevoPopulationMlp": ("pop_mlp", "tfevo_population_mlp"),
    "TfevoIsoLineEmit": ("qd_emit", "tfevo_iso_line_emit"),
    "TfevoArchiveInsert": ("qd_emit", "tfevo_archive_insert"),
    "TfevoNearestCentroid": ("qd_emit", "tfevo_nearest_centroid"),
    "TfevoSepCmaTell": ("sep_cma", "tfevo_sep_cma_tell"),
    "TfevoSymEig": ("sym_eig", "tfevo_sym_eig"),
    "TfevoCholesky": ("sym_eig", "tfevo_cholesky"),
    "TfevoTriangular": ("sym_eig", "tfevo_triangular"),
    "TfevoSyrkUpdate": ("sym_eig", "tfevo_syrk_update"),
    "TfevoCovarianceRefresh": ("sym_eig", "tfevo_covariance_refresh"),
    "TfevoEigenRefresh": ("sym_eig", "tfevo_eigen_refresh"),
}

_LOGGED: set = set()
_DEFAULT: list = []  # a stack of use_ops() values
_DECISIONS: dict = {}


class KernelUnavailableError(ConfigError, RuntimeError):
    """``use_op=True`` asked for a C++ kernel that cannot run at this call site."""


def check_use_op(use_op, name: str = "use_op"):
    """``use_op`` itself if it is ``None``, ``True`` or ``False``, else a :class:`ConfigError`."""
    if use_op is None or use_op is True or use_op is False:
        return use_op
    raise ConfigError(f"{name} must be None (automatic), True (the C++ kernel) or False (the pure-TensorFlow "
                      f"reference), got {use_op!r}")


_FUNCTIONS: dict = {}  # op -> its loaded Python function (cleared if ops.op_module is replaced, e.g. by a test)
_LOADER: list = [None]


def _function(op: str):
    """The op's Python function once its library is loaded, else ``None``."""
    if _environ.get("TFEVO_DISABLE_CUSTOM_OPS", "") not in ("", "0"):
        return None
    if _LOADER[0] is not ops.op_module:
        _FUNCTIONS.clear()
        _LOADER[0] = ops.op_module
    fn = _FUNCTIONS.get(op)
    if fn is None:
        try:
            library, symbol = KERNELS[op]
        except KeyError:
            raise ConfigError(f"unknown kernel {op!r}; known: {', '.join(sorted(KERNELS))}") from None
        mod = ops.op_module(library, symbol)
        if mod is None:
            return None
        fn = _FUNCTIONS[op] = getattr(mod, symbol)
    return fn


def built(op: str) -> bool:
    """Whether the kernel ``op`` is built and loaded (whatever the call site; ``False`` with
    ``TFEVO_DISABLE_CUSTOM_OPS=1`` or without a compiler)."""
    return _function(op) is not None


def _note(op: str, why: str | None) -> None:
    _DECISIONS[op] = why
    key = (op, why)
    if key not in _LOGGED:
        _LOGGED.add(key)
        log.debug("tfevo kernel %s: %s", op, "the C++ kernel" if why is None else f"the pure-TF reference ({why})")


def kernel(op: str, use_op=None, inputs=(), unsupported: str | None = None):
    """The Python function of the C++ op ``op`` when it runs at this call site, else ``None``.

    Args:
      op: the registered op type (a key of :data:`KERNELS`).
      use_op: ``None`` apply the rule (module docstring; inside
        :func:`use_ops`, that block's value), ``False`` never, ``True``
        always (:class:`KernelUnavailableError` naming why not).
      inputs: the tensors or variables the op would read (their placement
        decides "on the host" when a GPU is present).
      unsupported: the caller's reason the kernel cannot serve this call
        (``None``: no reason).
    """
    fn = None
    if use_op is None and _DEFAULT:
        use_op = _DEFAULT[-1]
    if use_op is False:
        why = "use_op=False"
    elif use_op is not None and use_op is not True:
        check_use_op(use_op)
    elif unsupported is not None:
        why = unsupported
    elif not tf.executing_eagerly() and in_xla_context():
        why = "inside an XLA-compiled function"
    elif not on_host(*inputs):
        why = "a GPU is present and the inputs are not on the host"
    else:
        fn = _function(op)
        why = None if fn is not None else "not built, or disabled by TFEVO_DISABLE_CUSTOM_OPS"
    if _DECISIONS.get(op, 0) is not why:
        _note(op, why)
    if fn is not None:
        return fn
    if use_op is True:
        raise KernelUnavailableError(f"use_op=True but the {op} kernel is not available here: {why}")
    return None


@contextlib.contextmanager
def use_ops(use_op):
    """Within the block, call sites that pass ``use_op=None`` take ``use_op`` instead.

    An object with its own ``use_op`` (a :class:`tfevo.nn.PopulationModel`)
    builds its graphs inside this, so its choice reaches every kernel call in
    them without being passed down; ``None`` changes nothing.
    """
    check_use_op(use_op)
    _DEFAULT.append(use_op)
    try:
        yield
    finally:
        _DEFAULT.pop()


def decisions() -> dict[str, str | None]:
    """The last decision per op in this process: ``None`` = the kernel ran, else why the reference did."""
    return dict(_DECISIONS)
