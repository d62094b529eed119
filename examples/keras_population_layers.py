"""Population layers as ordinary Keras layers: 8 members, each with its own kernel, trained by gradient."""
import keras
import numpy as np
import tensorflow as tf

from tfevo.nn import PopulationConv2D, PopulationDense
from _toy import budget  # TFEVO_EXAMPLE_TOY=1: a few seconds, for the test suite

P = 8
inputs = keras.Input((32, 16, 16, 3), batch_size=P)            # [P, B, H, W, C]
x = PopulationConv2D(16, 3, strides=2, padding="same", activation="relu")(inputs)
x = keras.layers.Reshape((32, 8 * 8 * 16))(x)
outputs = PopulationDense(10)(x)                               # [P, B, 10]: one classifier per member
model = keras.Model(inputs, outputs)
model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
xs = np.random.rand(P, 32, 16, 16, 3).astype("float32")
ys = np.random.randint(0, 10, size=(P, 32))
reps = budget(4, 1)  # copies of the toy data set per epoch
model.fit(xs[None].repeat(reps, 0).reshape(-1, 32, 16, 16, 3), ys[None].repeat(reps, 0).reshape(-1, 32),
          batch_size=P, epochs=1, verbose=0)
model.save("population_model.keras")
print(keras.models.load_model("population_model.keras")(xs).shape)   # (8, 32, 10)
