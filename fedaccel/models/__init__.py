"""Models: the classifiers the papers train, behind one registry (one file per family).

``linear`` (squared-SVM, softmax regression, their closed-form gradients), ``mlp`` (2NN), ``cnn``
(BHerd CNN, LeNet-5, FedDC CNN), ``deep`` (VGG-16, ResNet-18); ``chain`` and ``conv_gradient`` the 2NN's
and the BHerd CNN's gradients by hand; ``base`` holds the :class:`Classifier`
base class and its seeded initialisation.

Every model is a :class:`Classifier`: an ``nn.Module`` with ``forward(x)`` plus ``loss(output, y)``
(scalar batch-mean loss, regulariser included) and ``correct(output, y)`` (count of correct
predictions), the two methods the engine calls. Build one by name::

    >>> model = build_model("cnn", (1, 28, 28), 10, seed=0)
    >>> num_parameters(model)
    430698
    >>> sorted(MODELS)[:3]
    ['2nn', 'cnn', 'feddc-cnn']

``input_shape`` is one sample's shape without the batch dimension, channels first for images:
``(1, 28, 28)`` for MNIST, ``(3, 32, 32)`` for CIFAR; ``(H, W)`` means one channel. Convolutional
models reshape their input to ``(B, *input_shape)``, so flattened ``(B, 784)`` batches work too.

Initialisation: from a local generator seeded with ``seed`` (see :mod:`fedaccel.models.base`).

Buffers. fedaccel's FL arithmetic works on the flat parameter vector (:mod:`fedaccel.engine.flat`), and
buffers are not part of it: BatchNorm running statistics would stay local to whichever module holds
them and would not be averaged. So no model has a buffer unless the user asks for BatchNorm
(``vgg16`` with ``batch_norm=True``, ``resnet18`` with ``norm="batch"``). No model uses dropout,
which would draw from the global RNG during training.

Users may register their own factory: ``MODELS["mine"] = factory`` where
``factory(input_shape, num_classes, **options) -> Classifier``, or declare it in an installed package's
entry-point group ``fedaccel.models`` (:mod:`fedaccel.plugins`: then configs, grids and every runtime find it,
after the built-ins); :func:`build_model` constructs it
on the meta device, so parameters from layers other than the built-in kinds need a
``reset_parameters()`` method or an overridden :meth:`Classifier.init_parameters`.
"""

from __future__ import annotations

import inspect
import numbers
from collections.abc import Callable, Sequence

import torch

import fedaccel.plugins as plugins
from fedaccel.errors import ConfigError, listed, shown
from fedaccel.models.base import Classifier, Shape, functional_loss, num_parameters
from fedaccel.models.cnn import BHerdCNN, FedDCCNN, LeNet5
from fedaccel.models.deep import VGG16, ResNet18
from fedaccel.models.linear import SoftmaxRegression, SquaredSVM, chain_gradient, closed_form_gradient
from fedaccel.models.mlp import MLP2NN

__all__ = [
    "MODELS",
    "BHerdCNN",
    "Classifier",
    "FedDCCNN",
    "LeNet5",
    "MLP2NN",
    "ResNet18",
    "SoftmaxRegression",
    "SquaredSVM",
    "VGG16",
    "build_model",
    "chain_gradient",
    "closed_form_gradient",
    "functional_loss",
    "num_parameters",
]


ModelFactory = Callable[..., Classifier]


MODELS: dict[str, ModelFactory] = {
    "svm": SquaredSVM,
    "softmax": SoftmaxRegression,
    "2nn": MLP2NN,
    "cnn": BHerdCNN,
    "lenet5": LeNet5,
    "feddc-cnn": FedDCCNN,
    "vgg16": VGG16,
    "resnet18": ResNet18,
}


def model_plugin(name: str) -> plugins.Plugin | None:
    """The installed plugin that provides model ``name`` (None: a built-in or unknown); a clash is one line."""
    return plugins.find("model", name, builtin=name in MODELS)


def model_factory(name: str) -> ModelFactory:
    """The factory of model ``name``: a built-in, else an installed plugin's (imported now)."""
    plugin = model_plugin(name)
    if plugin is not None:
        factory = plugins.load(plugin)
        if not callable(factory):
            raise ConfigError(f"model {shown(name)} of {plugin.origin}: {plugin.value} is not a model factory")
        return factory  # type: ignore[no-any-return]
    if name not in MODELS:
        known = sorted(MODELS) + [n for n in plugins.names("model") if n not in MODELS]
        raise ConfigError(f"unknown model {shown(name)}; known: {listed(known, near=name)}")
    return MODELS[name]


def _check_options(name: str, factory: ModelFactory, options: dict[str, object]) -> None:
    params = inspect.signature(factory).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return
    accepted = [p.name for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY]
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise ConfigError(
            f"model {shown(name)} has no option {listed(unknown)}; "
            f"it accepts: {listed(accepted, near=unknown[0]) if accepted else 'no options'}"
        )


def _check_input_shape(name: str, input_shape: Sequence[int]) -> Shape:
    items = list(input_shape) if isinstance(input_shape, (tuple, list, torch.Size)) else None
    if not items or any(
        isinstance(s, bool) or not isinstance(s, numbers.Integral) or s < 1 for s in items
    ):
        raise ConfigError(
            f"model {shown(name)}: input shape must be a tuple of positive ints, got {shown(input_shape)}"
        )
    return tuple(int(s) for s in items)


def build_model(
    name: str,
    input_shape: Sequence[int],
    num_classes: int,
    *,
    seed: int = 0,
    **options: object,
) -> Classifier:
    """Build model ``name`` for samples of ``input_shape`` and ``num_classes`` classes.

    Parameters are initialised deterministically from ``seed`` through a local generator; the
    global RNG is untouched. ``options`` are the model's keyword options (e.g. ``l2`` for
    ``svm``, ``norm`` for ``resnet18``). Raises :class:`~fedaccel.errors.ConfigError` for an unknown
    name or option, or an input shape the model cannot take.

    Example:
        >>> model = build_model("svm", (1, 28, 28), 10)
        >>> model(torch.zeros(4, 1, 28, 28)).shape
        torch.Size([4])
    """
    factory = model_factory(name)
    shape = _check_input_shape(name, input_shape)
    if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 2:
        raise ConfigError(
            f"model {shown(name)}: num_classes must be an integer ≥ 2, got {shown(num_classes)}"
        )
    _check_options(name, factory, options)
    # Construct without touching any RNG (meta tensors have no data), then allocate and
    # initialise from our own generator.
    with torch.device("meta"):
        model = factory(shape, num_classes, **options)
    if not isinstance(model, Classifier):  # a plugin's factory, say: init_parameters, loss and correct are needed
        raise ConfigError(f"model {shown(name)}: its factory returned {shown(type(model).__name__)}, not a "
                          "fedaccel.models.Classifier (forward, loss, correct)")
    # what to_empty does, but with torch.empty: empty_like on a meta tensor imports sympy (0.9 s a process)
    model = model._apply(lambda meta: torch.empty(meta.shape, dtype=meta.dtype, device="cpu"))
    generator = torch.Generator().manual_seed(seed)
    model.init_parameters(generator)
    return model
