"""Convolutions of any rank, dilation and groups, and transposed convolutions, for a whole population.

The translators of plain convolutions keep their own fast paths (the C++ direct convolution, im2col by
``tf.image.extract_patches``); the forms those cannot compute run here as one tensor program:

* the input ``[n, B, *spatial, C]`` is padded explicitly (TensorFlow's SAME rule with the dilated
  kernel, or causal), then each kernel offset is one strided slice of it, so the patches
  ``[n, B, *out, K, C]`` carry any stride and dilation;
* one batched matrix product per member (:func:`tfevo.nn.population_dense`, which reads only the
  members ``indices`` of the weights) maps the patches to the outputs; with ``groups > 1`` the groups
  are folded into the members' axis (member ``i``, group ``g`` -> row ``i * G + g``);
* a transposed convolution is the convolution of the stride-dilated input (``s - 1`` zeros between
  samples) with the spatially flipped kernel, its in/out channels swapped, padded so that the output
  has the size Keras computes (strides, padding, ``output_padding`` and dilation).
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
    return tf.stack(cols, -2) if len(cols) > 1 else cols[0][..., None, :]


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


def stride_dilate(x, strides):
    """``x [n, B, *spatial, C]`` with ``s - 1`` zeros between neighbours on each spatial axis."""
    r = len(strides)
    for i, s in enumerate(strides):
        if s == 1:
            continue
        a = 2 + i
        shape = x.shape.as_list()
        size = shape[a]
        y = tf.expand_dims(x, a + 1)
        pad = [[0, 0]] * (r + 4)
        pad[a + 1] = [0, s - 1]
        y = tf.pad(y, pad)  # [..., size, s, ...]
        dyn = tf.unstack(tf.shape(y))
        y = tf.reshape(y, tf.stack(dyn[:a] + [size * s] + dyn[a + 2:]))
        x = y[(slice(None),) * a + (slice(0, (size - 1) * s + 1),)]
        shape[a] = (size - 1) * s + 1
        x.set_shape(shape)
    return x


def transpose_pads(spatial, out_spatial, ksize, strides, dilation, padding, name, output_padding=None) -> list:
    """Padding of the stride-dilated input so that the stride-1 convolution with the flipped kernel gives
    TensorFlow's ``conv_transpose`` of output size ``out_spatial`` (Keras's, from its ``output_padding``)."""
    pads = []
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
        pads.append((left, o + ek - 1 - left - ((h - 1) * s + 1)))
    return pads


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
