"""The inference side of :class:`tfevo.rollout.PipelinedEvaluator`: one traced step.

Each simulator step of a subset runs the policy on the rows of the members
still playing: the step is one ``tf.function`` with a fixed signature (rows
padded to a bucket size), called through TensorFlow's flat entry point or,
with ``inline_forward``, its single-threaded executor (both in
:mod:`tfevo._tf_private`, the ordinary call when those fast paths are off).
"""

from __future__ import annotations

import time

import numpy as np
import tensorflow as tf

from tfevo._tf_private import flat_caller, inline_caller


def _bucket_sizes(max_n: int, mode: str) -> np.ndarray:
    if mode == "none":
        return np.arange(1, max_n + 1)
    if mode == "full":
        return np.array([max_n])
    sizes, b = [], 1
    while b < max_n:
        sizes.append(b)
        b *= 2
    sizes.append(max_n)
    return np.array(sizes)



class InferenceStep:
    """Builds and calls the pipelined evaluator's per-step forward (a mixin of the evaluator)."""

    # -- forward --------------------------------------------------------------
    def _prepare(self, params_t):
        """Policy-specific per-call preparation (e.g. ``Policy.prepare`` splits params once)."""
        prep = getattr(self.policy, "prepare", None)
        return prep(params_t) if callable(prep) else params_t

    def _build_forward(self, prepared):
        spec = self.action_spec
        policy = self.policy
        norm = self.obs_norm
        scale = self.obs_scale
        in_dtype = tf.as_dtype(self.observation_dtype)

        state_shape = self.state_shape

        def fwd(params, obs, idx, state):
            self.traces += 1
            x = obs
            if scale != 1.0 or norm is not None:
                x = tf.cast(x, tf.float32)
            if scale != 1.0:
                x = x * scale
            if norm is not None:
                x = norm.normalize(x)
            # Inside our own tf.function: a policy's graph-level entry point
            # (no Python-side checks, no nested tf.function) when it has one.
            new_state = None
            if state_shape is not None:
                out, new_state = policy.forward_state(params, x, state, idx)
                new_state = tf.ensure_shape(tf.cast(new_state, tf.float32), [None, 1, *state_shape])
            else:
                fg = getattr(policy, "forward_graph", None)
                out = fg(params, x, idx) if callable(fg) else policy.forward(params, x, idx)
            out = tf.convert_to_tensor(out)
            if spec.discrete:
                if out.dtype.is_floating and out.shape.rank >= 3 and out.shape[-1] == spec.num_actions:
                    out = tf.argmax(out, axis=-1, output_type=tf.int32)
                out = tf.cast(out, tf.int32)
                out = tf.reshape(out, [-1])
            else:
                out = tf.reshape(tf.cast(out, tf.float32), [-1, *spec.shape])
                if spec.low is not None:
                    out = tf.clip_by_value(out, np.asarray(spec.low, np.float32), np.asarray(spec.high, np.float32))
            return out if new_state is None else (out, new_state)

        p_sig = tf.nest.map_structure(lambda t: tf.TensorSpec(t.shape, t.dtype), prepared)
        sig = [
            p_sig,
            tf.TensorSpec([None, 1, *self.observation_shape], in_dtype),
            tf.TensorSpec([None], tf.int32),
        ]
        body = fwd
        if state_shape is not None:
            sig.append(tf.TensorSpec([None, 1, *state_shape], tf.float32))
        else:
            body = lambda params, obs, idx: fwd(params, obs, idx, None)  # noqa: E731
        fn = tf.function(body, input_signature=sig, jit_compile=self.jit_compile, autograph=False)
        concrete = fn.get_concrete_function()
        self.forward_concrete = concrete  # the traced inference step (read by the GPU-readiness test)
        ordinary = self._ordinary_caller(concrete)
        self.forward_executor = "default"
        # A model whose forward runs as concurrent chains (Conv2D nets: one chain's Dense weight
        # streaming overlaps another's convolutions) needs the multi-threaded executor.
        concurrent = bool(getattr(getattr(policy, "model", None), "concurrent_forward", False))
        inline = self._inline_caller(concrete) if self.inline_forward and not concurrent else None
        if inline is None:
            return ordinary
        first = [True]

        def call(params, *rest):
            if not first[0]:
                return inline(params, *rest)
            # The first call instantiates the graph for the single-threaded
            # executor, which rejects graphs it cannot run before any kernel
            # runs; then the ordinary call takes over for good.
            first[0] = False
            try:
                out = inline(params, *rest)
            except tf.errors.OpError:
                self._forward_fn = ordinary
                self.forward_executor = "default"
                return ordinary(params, *rest)
            self._forward_fn = inline
            self.forward_executor = "inline"
            return out

        return call

    @staticmethod
    def _ordinary_caller(concrete):
        # the flat entry point skips tf.function's dispatch and argument binding
        return flat_caller(concrete)

    @staticmethod
    def _inline_caller(concrete):
        """The forward graph run inline on one thread (TensorFlow's single-threaded executor:
        one thread hand-off per step instead of one per op, which costs most when the
        simulators' threads keep the cores busy), or ``None`` (fast paths off)."""
        return inline_caller(concrete)

    def _forward(self, params_t, k: int, obs: np.ndarray, members: np.ndarray, stats: dict, state=None):
        """Actions for the active rows (and their new state for a recurrent policy)."""
        n = members.size
        sizes = self._buckets[k]
        b = int(sizes[np.searchsorted(sizes, n)])
        if b > n:  # pad with copies of the first row; the results are dropped
            obs = np.concatenate([obs, np.broadcast_to(obs[:1], (b - n, *obs.shape[1:]))])
            members = np.concatenate([members, np.full(b - n, members[0], members.dtype)])
            if state is not None:
                state = np.concatenate([state, np.broadcast_to(state[:1], (b - n, *state.shape[1:]))])
        stats["forward_rows"] += n
        stats["padded_rows"] += b
        stats["forward_calls"] += 1
        t0 = time.perf_counter()
        # The member indices rarely change between steps (only when episodes
        # end or slots refill): reuse the last tensor of this subset then.
        cached = self._member_tensors.get(k)
        if cached is not None and cached[0] is members:
            mt = cached[2]
        elif cached is not None and cached[1].shape == members.shape and np.array_equal(cached[1], members):
            mt = cached[2]
            self._member_tensors[k] = (members, cached[1], mt)  # next time the identity test suffices
        else:
            m32 = members.astype(np.int32)
            mt = tf.convert_to_tensor(m32)
            self._member_tensors[k] = (members, m32, mt)
        if state is None:
            out = self._forward_fn(params_t, obs[:, None], mt).numpy()[:n]
        else:
            a, h = self._forward_fn(params_t, obs[:, None], mt, state[:, None].astype(np.float32))
            out = (a.numpy()[:n], h.numpy()[:n, 0])
        stats["forward_seconds"] += time.perf_counter() - t0
        return out
