"""Small Keras templates shared by the tests of the in-place population kernels."""

import keras

L = keras.layers


def small_conv(num_actions=5, layer_norm=False):
    """Two Conv2D layers (SAME stride 2, VALID stride 1), Dense 16, optional LayerNormalization
    (a layer the in-place path runs on sliced weights), Dense ``num_actions``; input 20x20x3."""
    layers = [
        keras.Input((20, 20, 3)),
        L.Conv2D(6, 4, strides=2, padding="same", activation="relu"),
        L.Conv2D(5, 3, strides=1, padding="valid", activation="relu"),
        L.Flatten(),
        L.Dense(16, activation="relu"),
    ]
    if layer_norm:
        layers.append(L.LayerNormalization())
    return keras.Sequential(layers + [L.Dense(num_actions)])
