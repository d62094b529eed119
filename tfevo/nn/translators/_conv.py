"""Convolutions of any rank, dilation and groups, and transposed convolutions, for a whole population.

The translators of plain convolutions keep their own fast paths (the C++ direct convolution, im2col by
``tf.image.extract_patches``); the forms those cannot compute run here as one tensor program:

* the input ``[n, B, *spatial, C]`` is padded explicitly (TensorFlow's SAME rule with the dilated
  kernel, or causal), then each kernel offset is one strided slice of it, so the patches
  ``[n, B, *out, K, C]`` carry any stride and dilation;
* one batched matrix product per member (:func:`tfevo.nn.population_dense`, which reads only the
  members ``indices`` of the weights) maps the patches to the outputs; with ``groups > 1`` the groups
  are folded into the members' axis (member ``i``, group ``g`` -> row ``i * G + g``);
* a transposed convolution at stride 1 (dilated or not) is the convolution of the input with the
  spatially flipped kernel, its in/out channels swapped, padded so that the output has the size Keras
  computes; with strides (Keras then allows no dilation) it runs in sub-pixel form: kernel offset
  ``t = a * s + phase`` of input ``i`` lands at output ``(i + a) * s + phase``, so all output phases are
  one stride-1 convolution with ``ceil(k / s)`` taps and ``prod(s) * F`` output channels whose outputs
  interleave (:func:`strided_transpose`); no inserted zeros are multiplied.
"""

from __future__ import annotations

import itertools
import math

import tensorflow as tf

from tfevo.core import ConfigError
from tfevo.nn.layers import population_dense, sample_activation
from tfevo.nn.translators.base import per_member, select


def effective(k: int, d: int) -> int:
    """Extent of a kernel of ``k`` taps dilated by ``d``."""
    return (k - 1) * d + 1


def forward_pads(spatial, ksize, strides, dilation, padding) -> list:
    """``(before, after)`` per spatial axis for ``padding`` ``"valid"``, ``"same"`` (TensorFlow's rule with
    the dilated kernel: the odd element after) or ``"causal"`` (all before)."""
    pads = []
    for size, k, s, d in zip(spatial, ksize, strides, dilation):
        ek = effective(k, d)
        if padding == "valid":
            pads.append((0, 0))
        elif padding == "causal":
            pads.append((ek - 1, 0))
        else:
            total = max((-(-size // s) - 1) * s + ek - size, 0)
            pads.append((total // 2, total - total // 2))
    return pads


def patches(x, ksize, strides, dilation, pads):
    """``x [n, B, *spatial, C]`` -> ``[n, B, *out, K, C]``: one strided slice per kernel offset (row-major
    over the kernel axes, as a Keras kernel ``[*ksize, C, F]`` reshapes to ``[K, C, F]``)."""
    r = len(ksize)
    if any(p for pr in pads for p in pr):
        x = tf.pad(x, [[0, 0], [0, 0], *[list(p) for p in pads], [0, 0]])
    size = x.shape.as_list()[2:2 + r]
    out = [(n - effective(k, d)) // s + 1 for n, k, s, d in zip(size, ksize, strides, dilation)]
    cols = []
    for offs in itertools.product(*[range(k) for k in ksize]):
        idx = tuple(slice(o * d, o * d + (m - 1) * s + 1, s) for o, d, s, m in zip(offs, dilation, strides, out))
        cols.append(x[(slice(None), slice(None)) + idx])
    return tf.stack(cols, -2)


def population_conv(x, kernel, strides, dilation, pads, groups, indices):
    """Convolution of every member (no bias): ``x [n, B, *spatial, C]``, ``kernel [M, *ksize, C/G, F]``
    -> ``[n, B, *out, F]``; Keras's grouped convolution (group ``g``: input channels ``g*C/G...``, output
    channels ``g*F/G...``) for ``groups`` G."""
    ksize = kernel.shape.as_list()[1:-2]
    cg, f = kernel.shape.as_list()[-2:]
    cols = patches(x, ksize, strides, dilation, pads)  # [n, B, *out, K, C]
    kk = math.prod(ksize)
    m = tf.shape(kernel)[0]
    if groups == 1:
        flat = tf.reshape(cols, tf.concat([tf.shape(cols)[:-2], [kk * cg]], 0))
        flat.set_shape(cols.shape[:-2].concatenate([kk * cg]))
        return population_dense(flat, tf.reshape(kernel, [m, kk * cg, f]), None, None, indices)
    g, fg = groups, f // groups
    n, b = tf.shape(x)[0], tf.shape(x)[1]
    out = cols.shape.as_list()[2:-2]
    # patches [n, B, *out, K, G, Cg] -> [n*G, B*prod(out), K*Cg]: the groups join the members' axis
    cg_cols = tf.reshape(cols, [n, -1, kk, g, cg])
    cg_cols = tf.reshape(tf.transpose(cg_cols, [0, 3, 1, 2, 4]), [n * g, -1, kk * cg])
    kg = tf.reshape(kernel, [m, kk, cg, g, fg])
    kg = tf.reshape(tf.transpose(kg, [0, 3, 1, 2, 4]), [m * g, kk * cg, fg])
    rows = None
    if indices is not None:
        rows = tf.reshape(tf.cast(indices, tf.int32)[:, None] * g + tf.range(g, dtype=tf.int32)[None], [-1])
    y = population_dense(cg_cols, kg, None, None, rows)  # [n*G, B*prod(out), Fg]
    y = tf.transpose(tf.reshape(y, [n, g, -1, fg]), [0, 2, 1, 3])  # [n, B*prod(out), G, Fg]
    y = tf.reshape(y, tf.concat([[n, b], out, [f]], 0))
    y.set_shape(x.shape[:2].concatenate(out + [f]))
    return y


def strided_transpose(x, kernel, out_spatial, strides, befores, indices):
    """Transposed convolution with strides (no dilation: Keras refuses both) of every member, no bias:
    ``x [n, B, *spatial, C]``, Keras's kernel ``[M, *ksize, F, C]`` -> ``[n, B, *out_spatial, F]``.

    Sub-pixel form: kernel offset ``t = a * s + phase`` of input sample ``i`` lands at output ``(i + a) * s
    + phase``, so each output phase is a stride-1 convolution of the input with ``ceil(k / s)`` taps; all
    phases are one :func:`population_conv` with ``prod(s) * F`` output channels (no inserted zeros are
    multiplied), whose outputs interleave into the full output, cropped from ``befores`` (TensorFlow's
    ``conv_transpose`` padding before, :func:`transpose_geometry`) to Keras's output size ``out_spatial``."""
    r = len(strides)
    ksize = kernel.shape.as_list()[1:1 + r]
    f, c = kernel.shape.as_list()[-2:]
    spatial = x.shape.as_list()[2:2 + r]
    taps = [-(-k // s) for k, s in zip(ksize, strides)]
    m = tf.shape(kernel)[0]
    w = tf.pad(kernel, [[0, 0]] + [[0, a * s - k] for a, s, k in zip(taps, strides, ksize)] + [[0, 0], [0, 0]])
    for i, (a, s) in enumerate(zip(taps, strides)):  # offset (a, phase) -> (tap u = a_n - 1 - a, phase)
        w = tf.gather(w, [(a - 1 - u) * s + ph for u in range(a) for ph in range(s)], axis=1 + i)
    w = tf.transpose(w, [0, *range(1, r + 1), r + 2, r + 1])  # [M, *(taps * s), C, F]
    u_n, p_n = 1, 1
    for i, (a, s) in enumerate(zip(taps, strides)):  # phases after C, one axis at a time (TF ops: rank <= 8)
        rest = math.prod(t * st for t, st in zip(taps[i + 1:], strides[i + 1:]))
        w = tf.reshape(w, [m, u_n, a, s, rest, c, p_n, f])
        w = tf.transpose(w, [0, 1, 2, 4, 5, 6, 3, 7])
        u_n, p_n = u_n * a, p_n * s
        w = tf.reshape(w, [m, u_n, rest, c, p_n, f])
    w = tf.reshape(w, [m, *taps, c, p_n * f])  # [M, *taps, C, (*phase, F)]
    y = population_conv(x, w, [1] * r, [1] * r, [(a - 1, a - 1) for a in taps], 1, indices)  # [n, B, *J, ..]
    jn = [n + a - 1 for n, a in zip(spatial, taps)]
    y = tf.reshape(y, [-1, *jn, *strides, f])  # (members and batch merged: transposes take rank <= 8)
    y = tf.transpose(y, [0] + [d for i in range(r) for d in (1 + i, 1 + r + i)] + [1 + 2 * r])
    full = [j * s for j, s in zip(jn, strides)]
    y = tf.reshape(y, [-1, *full, f])
    ends, pads = [], []
    for before, o, fl in zip(befores, out_spatial, full):
        ends.append((before, before + o))
        pads.append([0, max(before + o - fl, 0)])
    if any(p[1] for p in pads):
        y = tf.pad(y, [[0, 0], *pads, [0, 0]])
    y = y[(slice(None),) + tuple(slice(a, b) for a, b in ends)]
    y = tf.reshape(y, tf.concat([tf.shape(x)[:2], out_spatial, [f]], 0))
    y.set_shape(x.shape[:2].concatenate(list(out_spatial) + [f]))
    return y


def transpose_geometry(spatial, out_spatial, ksize, strides, dilation, padding, name, output_padding=None):
    """``(befores, pads)`` of a transposed convolution whose output size ``out_spatial`` (Keras's, from its
    ``output_padding``) TensorFlow's ``conv_transpose`` accepts, else a ConfigError: per spatial axis the
    padding ``conv_transpose`` puts before (where the full output is cropped from), and, for stride 1, the
    input padding that makes the convolution with the flipped kernel that transposed convolution."""
    befores, pads = [], []
    for h, o, k, s, d in zip(spatial, out_spatial, ksize, strides, dilation):
        ek = effective(k, d)
        if padding == "same":
            if -(-o // s) != h:  # Keras computes o = (h - 1) * s + ek % 2 + output_padding
                raise ConfigError(
                    f"layer {name}: padding='same' with output_padding={output_padding} gives an output of {o} for "
                    f"an input of {h} at stride {s}, which TensorFlow's conv_transpose (Keras's own computation) "
                    f"refuses; accepted: output_padding=None, or values with 1 <= (dilated kernel size) % 2 + "
                    f"output_padding <= stride (here kernel extent {ek})")
            before = max((h - 1) * s + ek - o, 0) // 2
        else:
            if not (h - 1) * s + ek <= o < (h - 1) * s + ek + s:
                raise ConfigError(f"layer {name}: output size {o} for an input of {h} (padding='valid', stride {s}, "
                                  f"kernel extent {ek}); accepted: {(h - 1) * s + ek} to {(h - 1) * s + ek + s - 1}")
            before = 0
        left = ek - 1 - before
        befores.append(before)
        pads.append((left, o + ek - 1 - left - ((h - 1) * s + 1)))
    return befores, pads


def finish(tr, y, bias, indices):
    """``y [n, B, *out, F]`` (channels last) plus the members' bias, in the layer's layout, with its activation."""
    if bias is not None:
        y = y + per_member(select(bias, indices), y.shape.rank)
    y = tr.from_channels_last(y)
    act = sample_activation(tr.layer.activation)  # on Keras's sample axes, in the layer's layout
    return act(y) if act is not None else y


def require_static_spatial(tr) -> None:
    """A ConfigError unless the call's input has known spatial sizes (an open time axis before a convolution
    of a recurrent template has none)."""
    shape = tr.input_shapes[0]
    spatial = shape[2:] if tr.channels_first else shape[1:-1]
    if None in spatial:
        raise ConfigError(f"layer {tr.name}: needs known spatial sizes, got input shape {shape}; give the "
                          "template's time axis a length")


def check_conv_settings(tr) -> bool:
    """Sets ``tr.channels_first``; ``True`` when the layer needs the general convolution (dilation or groups)."""
    layer = tr.layer
    tr.channels_first = layer.data_format == "channels_first"
    general = any(int(d) != 1 for d in layer.dilation_rate) or int(getattr(layer, "groups", 1)) != 1
    if general:
        require_static_spatial(tr)
    return general


def general_conv_forward(tr, inputs, weights, indices):
    """Conv1D/2D/3D with any strides, dilation, groups and padding (valid, same, causal), either layout."""
    layer = tr.layer
    x = tr.to_channels_last(inputs[0])
    ksize = [int(k) for k in layer.kernel_size]
    strides = [int(s) for s in layer.strides]
    dilation = [int(d) for d in layer.dilation_rate]
    pads = forward_pads(x.shape.as_list()[2:-1], ksize, strides, dilation, layer.padding)
    y = population_conv(x, weights[0], strides, dilation, pads, int(layer.groups), indices)
    return finish(tr, y, weights[1] if len(weights) > 1 else None, indices)
