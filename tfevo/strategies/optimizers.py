"""Small gradient-ascent optimizers for evolution strategies.

An ES estimates the gradient of expected fitness with respect to its search
centre; these optimizers turn that estimate into a step.  They are
``tf.Module`` objects whose state (step counter, moments, velocity) lives in
``tf.Variable``\\ s, so a strategy that owns one checkpoints it with
``tf.train.Checkpoint``, and they run inside ``tf.function`` and XLA.

Fitness is maximised in tfevo, so :meth:`Optimizer.step` returns a step to
**add** to the parameters (ascent).

Example:

>>> import tensorflow as tf
>>> from tfevo.strategies.optimizers import Adam
>>> opt = Adam(learning_rate=0.1).build(3)
>>> theta = tf.Variable(tf.zeros(3))
>>> _ = theta.assign_add(opt.step(tf.constant([1.0, -2.0, 0.0])))
"""

from __future__ import annotations

import abc

import tensorflow as tf

from tfevo.core import ConfigError, ShapeError

__all__ = ["Optimizer", "SGD", "Adam", "ClipUp", "get_optimizer"]


class Optimizer(tf.Module, metaclass=abc.ABCMeta):
    """Base class: ``build(num_dims)`` creates the state, ``step(grad)`` returns the update.

    Args:
      learning_rate: step size (> 0).
    """

    def __init__(self, learning_rate: float, name: str | None = None):
        super().__init__(name=name)
        lr = float(learning_rate)
        if not lr > 0:
            raise ConfigError(f"learning_rate must be > 0, got {learning_rate}")
        self.learning_rate = lr
        self.num_dims = None

    def build(self, num_dims: int, dtype=tf.float32) -> "Optimizer":
        """Creates the state variables for vectors of length ``num_dims`` in ``dtype`` (once)."""
        if self.num_dims is not None:
            if self.num_dims != int(num_dims) or self.dtype != tf.as_dtype(dtype):
                raise ShapeError(f"optimizer was built for {self.num_dims} dims of {self.dtype.name}, "
                                 f"not {num_dims} of {tf.as_dtype(dtype).name}")
            return self
        self.num_dims = int(num_dims)
        self.dtype = tf.as_dtype(dtype)
        self.iterations = tf.Variable(0, dtype=tf.int64, trainable=False, name="iterations")
        self._build(self.num_dims)
        return self

    def _build(self, num_dims: int) -> None:
        pass

    def step(self, grad: tf.Tensor) -> tf.Tensor:
        """Updates the state with gradient estimate ``grad [D]`` and returns the step to add."""
        if self.num_dims is None:
            raise ConfigError("call build(num_dims) before step()")
        grad = tf.cast(grad, self.dtype)
        self.iterations.assign_add(1)
        return self._step(grad)

    @abc.abstractmethod
    def _step(self, grad):
        """Updates the state from ``grad [D]`` and returns the step (subclasses)."""

    def get_config(self) -> dict:
        """The constructor arguments."""
        return {"learning_rate": self.learning_rate}


class SGD(Optimizer):
    """Gradient ascent with optional (heavy-ball) momentum.

    ``v <- momentum * v + learning_rate * g``; the step is ``v``.
    With ``momentum=0`` this is plain ``learning_rate * g``.
    """

    def __init__(self, learning_rate: float = 0.01, momentum: float = 0.0, name: str | None = None):
        super().__init__(learning_rate, name=name)
        if not 0.0 <= float(momentum) < 1.0:
            raise ConfigError(f"momentum must be in [0, 1), got {momentum}")
        self.momentum = float(momentum)

    def _build(self, num_dims):
        self.velocity = tf.Variable(tf.zeros([num_dims], self.dtype), trainable=False, name="velocity")

    def _step(self, grad):
        v = self.momentum * self.velocity + self.learning_rate * grad
        self.velocity.assign(v)
        return v

    def get_config(self):
        return {"learning_rate": self.learning_rate, "momentum": self.momentum}


class Adam(Optimizer):
    """Adam (Kingma & Ba 2015), as used by OpenAI-ES (Salimans et al. 2017).

    With ``t`` the step number (from 1)::

        m <- beta1 m + (1 - beta1) g
        v <- beta2 v + (1 - beta2) g^2
        step = learning_rate * sqrt(1 - beta2^t) / (1 - beta1^t) * m / (sqrt(v) + epsilon)
    """

    def __init__(self, learning_rate: float = 0.001, beta1: float = 0.9, beta2: float = 0.999,
                 epsilon: float = 1e-8, name: str | None = None):
        super().__init__(learning_rate, name=name)
        for n, b in (("beta1", beta1), ("beta2", beta2)):
            if not 0.0 <= float(b) < 1.0:
                raise ConfigError(f"{n} must be in [0, 1), got {b}")
        if not float(epsilon) > 0:
            raise ConfigError(f"epsilon must be > 0, got {epsilon}")
        self.beta1, self.beta2, self.epsilon = float(beta1), float(beta2), float(epsilon)

    def _build(self, num_dims):
        self.m = tf.Variable(tf.zeros([num_dims], self.dtype), trainable=False, name="m")
        self.v = tf.Variable(tf.zeros([num_dims], self.dtype), trainable=False, name="v")

    def _step(self, grad):
        t = tf.cast(self.iterations, self.dtype)
        m = self.m.assign(self.beta1 * self.m + (1.0 - self.beta1) * grad)
        v = self.v.assign(self.beta2 * self.v + (1.0 - self.beta2) * tf.square(grad))
        b1, b2 = tf.constant(self.beta1, self.dtype), tf.constant(self.beta2, self.dtype)
        a = self.learning_rate * tf.sqrt(1.0 - tf.pow(b2, t)) / (1.0 - tf.pow(b1, t))
        return a * m / (tf.sqrt(v) + self.epsilon)

    def get_config(self):
        return {"learning_rate": self.learning_rate, "beta1": self.beta1, "beta2": self.beta2,
                "epsilon": self.epsilon}


class ClipUp(Optimizer):
    """ClipUp (Toklu et al. 2020): normalized gradient, momentum, clipped velocity.

    ::

        v <- momentum * v + learning_rate * g / ||g||
        if ||v|| > max_speed: v <- v * max_speed / ||v||
        step = v

    The step length never exceeds ``max_speed``, whatever the scale of the
    fitness or of the gradient estimate.  Toklu et al. suggest
    ``max_speed = 2 * learning_rate`` (the default) and ``momentum = 0.9``.
    A zero gradient leaves the velocity to decay by ``momentum``.
    """

    def __init__(self, learning_rate: float = 0.15, max_speed: float | None = None,
                 momentum: float = 0.9, name: str | None = None):
        super().__init__(learning_rate, name=name)
        self.max_speed = 2.0 * self.learning_rate if max_speed is None else float(max_speed)
        if not self.max_speed > 0:
            raise ConfigError(f"max_speed must be > 0, got {max_speed}")
        if not 0.0 <= float(momentum) < 1.0:
            raise ConfigError(f"momentum must be in [0, 1), got {momentum}")
        self.momentum = float(momentum)

    def _build(self, num_dims):
        self.velocity = tf.Variable(tf.zeros([num_dims], self.dtype), trainable=False, name="velocity")

    def _step(self, grad):
        gnorm = tf.norm(grad)
        g = tf.math.divide_no_nan(grad, gnorm)
        v = self.momentum * self.velocity + self.learning_rate * g
        vnorm = tf.norm(v)
        v = tf.where(vnorm > self.max_speed, v * (self.max_speed / tf.maximum(vnorm, 1e-30)), v)
        self.velocity.assign(v)
        return v

    def get_config(self):
        return {"learning_rate": self.learning_rate, "max_speed": self.max_speed,
                "momentum": self.momentum}


_NAMES = {"sgd": SGD, "adam": Adam, "clipup": ClipUp}


def get_optimizer(spec, learning_rate: float, num_dims: int, dtype=tf.float32, **kwargs) -> Optimizer:
    """Returns a built optimizer from a name (``"sgd"``, ``"adam"``, ``"clipup"``) or an instance.

    An :class:`Optimizer` instance is built for ``num_dims`` and returned as is
    (its own learning rate wins); a name is constructed with ``learning_rate``
    and ``kwargs``.
    """
    if isinstance(spec, Optimizer):
        return spec.build(num_dims, dtype)
    if isinstance(spec, str) and spec.lower() in _NAMES:
        return _NAMES[spec.lower()](learning_rate=learning_rate, **kwargs).build(num_dims, dtype)
    raise ConfigError(f"unknown optimizer {spec!r}; use one of {sorted(_NAMES)} or an Optimizer instance")
