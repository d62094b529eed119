"""Variation emitters: Gaussian, Iso+LineDD and polynomial mutation of archive elites."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from tfevo.core import ConfigError, arguments_checked
from tfevo.qd.emitter_base import Emitter, standard_normal

__all__ = ["GaussianEmitter", "IsoLineEmitter", "PolynomialMutationEmitter"]


@arguments_checked
class GaussianEmitter(Emitter):
    """Parent + ``sigma`` * N(0, I), parents uniform among filled cells (Mouret & Clune 2015).

    ``sigma``: a number or, as in pyribs, one per dimension (``[D]``), finite and > 0."""

    def __init__(self, solution_dim, batch_size, sigma: float = 0.1, bounds=None, name=None):
        super().__init__(solution_dim, batch_size, bounds, name)
        try:
            if isinstance(sigma, (str, bytes, bool)):
                raise TypeError
            arr = np.asarray(sigma, np.float64)
        except (TypeError, ValueError):
            arr = np.array(np.nan)
        if arr.ndim > 1 or (arr.ndim == 1 and arr.shape[0] != self.solution_dim) or not (
                np.all(np.isfinite(arr)) and np.all(arr > 0)):
            raise ConfigError(f"sigma must be a finite number > 0 or [{self.solution_dim}] of them "
                              f"(solution_dim={self.solution_dim}), got {sigma!r}")
        self.sigma = float(arr) if arr.ndim == 0 else arr.astype(np.float32)

    def emit(self, archive, seed):
        s = tf.random.experimental.stateless_split(seed, 2)
        parents = archive.sample(self.batch_size, s[0])
        eps = standard_normal([self.batch_size, self.solution_dim], s[1])
        return self._clip(parents + self.sigma * eps)


@arguments_checked
class IsoLineEmitter(Emitter):
    """Iso+LineDD (Vassiliades & Mouret 2018): ``x1 + iso_sigma*N(0,I) + line_sigma*N(0,1)*(x2 - x1)``.

    Defaults follow QDax's Rastrigin/Sphere experiments (iso 0.005, line 0.05).

    Args:
      use_op: ``None`` (default) runs the fused C++ kernel
        ``custom_ops/qd_emit.cc`` (op ``TfevoIsoLineEmit``) where
        :func:`tfevo.kernels.kernel` allows (built, archive on the host) and
        the emit is not being compiled with XLA, else the
        pure-TensorFlow reference; ``False`` forces the reference; ``True``
        requires the kernel.  Both draw the same uniforms (the kernel
        re-implements TensorFlow's stateless Philox stream bit for bit), so the
        parents are identical and the candidates agree to float rounding of
        the log/sin/cos.
    """

    def __init__(self, solution_dim, batch_size, iso_sigma: float = 0.005, line_sigma: float = 0.05,
                 bounds=None, use_op: bool | None = None, name=None):
        super().__init__(solution_dim, batch_size, bounds, name)
        for field, v in (("iso_sigma", iso_sigma), ("line_sigma", line_sigma)):
            if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) \
                    or not (np.isfinite(v) and v >= 0):
                raise ConfigError(f"{field} must be a finite number >= 0, got {v!r}")
        self.iso_sigma = float(iso_sigma)
        self.line_sigma = float(line_sigma)
        from tfevo import kernels

        self.use_op = kernels.check_use_op(use_op)
        if use_op:
            kernels.kernel("TfevoIsoLineEmit", True)  # KernelUnavailableError (a ConfigError) naming why not

    def _kernel(self, archive):
        from tfevo import kernels

        if self.use_op is False or getattr(archive._trace, "xla", False):
            return None
        return kernels.kernel("TfevoIsoLineEmit", self.use_op, [archive.solutions, archive.occupied])

    def _op_enabled(self, archive) -> bool:
        return self._kernel(archive) is not None

    def emit(self, archive, seed):
        op = self._kernel(archive)
        if op is not None:
            lo, hi = self.bounds if self.bounds is not None else (tf.zeros([0]), tf.zeros([0]))
            return op(
                archive.solutions.handle, archive.occupied.handle, tf.cast(seed, tf.int32), lo, hi,
                batch_size=self.batch_size, dim=self.solution_dim, iso_sigma=self.iso_sigma, line_sigma=self.line_sigma)
        return self.emit_reference(archive, seed)

    def emit_reference(self, archive, seed):
        """The pure-TensorFlow Iso+LineDD batch (what the kernel computes)."""
        s = tf.random.experimental.stateless_split(seed, 4)
        x1 = archive.sample(self.batch_size, s[0])
        x2 = archive.sample(self.batch_size, s[1])
        # one Box-Muller draw for the iso noise [B, D] and the line coefficient [B, 1]
        z = standard_normal([self.batch_size, self.solution_dim + 1], s[2])
        iso, line = z[:, :-1], z[:, -1:]
        return self._clip(x1 + self.iso_sigma * iso + self.line_sigma * line * (x2 - x1))


@arguments_checked
class PolynomialMutationEmitter(Emitter):
    """Deb's polynomial mutation (distribution index ``eta``, per-gene rate), bounded.

    Each gene mutates with probability ``rate`` (default 1/D)."""

    def __init__(self, solution_dim, batch_size, bounds, eta: float = 20.0, rate: float | None = None, name=None):
        if bounds is None:
            raise ConfigError("polynomial mutation needs bounds")
        super().__init__(solution_dim, batch_size, bounds, name)
        if not all(np.all(np.isfinite(b.numpy())) for b in self.bounds):
            raise ConfigError(f"polynomial mutation needs finite bounds (it scales by high - low), got {bounds!r}")
        self.eta = float(eta)
        self.rate = float(rate) if rate is not None else 1.0 / self.solution_dim
        if not self.eta >= 0.0 or self.eta == float("inf"):
            raise ConfigError(f"eta (the distribution index) must be a finite number >= 0, got {eta}")
        if not 0.0 <= self.rate <= 1.0:
            raise ConfigError(f"rate (each gene's mutation probability) must be in [0, 1], got {rate}")

    def emit(self, archive, seed):
        s = tf.random.experimental.stateless_split(seed, 3)
        x = archive.sample(self.batch_size, s[0])
        lo, hi = self.bounds
        span = hi - lo
        u = tf.random.stateless_uniform([self.batch_size, self.solution_dim], seed=s[1])
        d1 = (x - lo) / span
        d2 = (hi - x) / span
        p = 1.0 / (self.eta + 1.0)
        left = tf.pow(2.0 * u + (1.0 - 2.0 * u) * tf.pow(1.0 - d1, self.eta + 1.0), p) - 1.0
        right = 1.0 - tf.pow(2.0 * (1.0 - u) + 2.0 * (u - 0.5) * tf.pow(1.0 - d2, self.eta + 1.0), p)
        delta = tf.where(u < 0.5, left, right)
        mutate = tf.random.stateless_uniform([self.batch_size, self.solution_dim], seed=s[2]) < self.rate
        return self._clip(tf.where(mutate, x + delta * span, x))
