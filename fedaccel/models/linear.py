"""Linear models (the convex case): the squared-SVM and softmax regression, with their exact
closed-form gradients, which the engine's lean local step uses instead of autograd."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from fedaccel.errors import ConfigError, shown
from fedaccel.models.base import Classifier, Shape, check_choice, flatten_batch
from fedaccel.models.chain import ChainGradient, chain_layers
from fedaccel.models.conv_gradient import BHerdCNNGradient, bherd_cnn_gradient
from fedaccel.models.mlp import mlp_chain_gradient


class SquaredSVM(Classifier):
    """Linear squared-hinge SVM on even/odd labels (BHerd paper 000, Sec. 2; Wang et al. 2019).

    Follows IBM adaptive-federated-learning (``models/svm_smooth.py``), the code of the paper
    BHerd cites for its models ([40]):

    * score ``s = wᵀx`` on the flattened input; no bias; ``w₀ = 0``;
    * label mapping (``labels="parity"``, default): class index ``y`` even → ``+1``, odd → ``−1``
      (IBM ``get_even_odd_from_one_hot_label``). ``labels="sign"`` takes ``y`` already in {−1, +1};
    * loss ``(1/2)·mean_i max(0, 1 − y_i s_i)² + (λ/2)·‖w‖²`` with ``λ = l2 = 0.1``, whose gradient
      is ``λw − mean_i y_i x_i max(0, 1 − y_i s_i)``, exactly IBM's ``gradient``;
    * ``correct`` counts ``y_i s_i > 0`` (a score of exactly 0 counts as wrong, as in IBM).

    ``forward`` returns the scores, shape ``(B,)``. ``num_classes`` only has to be ≥ 2.
    """

    NAME = "svm"

    def __init__(
        self,
        input_shape: Shape,
        num_classes: int,
        *,
        l2: float = 0.1,
        labels: str = "parity",
    ) -> None:
        super().__init__()
        if isinstance(l2, bool) or not isinstance(l2, (int, float)) or not l2 >= 0:
            raise ConfigError(f"model 'svm': l2 must be a number ≥ 0, got {shown(l2)}")
        check_choice(self.NAME, "labels", labels, ("parity", "sign"))
        self.l2 = float(l2)
        self.labels = labels
        self.weight = nn.Parameter(torch.empty(math.prod(input_shape)))

    def forward(self, x: Tensor) -> Tensor:
        return flatten_batch(x) @ self.weight

    def targets(self, y: Tensor, dtype: torch.dtype = torch.float32) -> Tensor:
        """Labels as ±1 of ``dtype`` (even → +1, odd → −1 under ``labels="parity"``)."""
        if self.labels == "parity":
            return (1 - 2 * torch.remainder(y, 2)).to(dtype)
        return y.to(dtype)

    def loss(self, output: Tensor, y: Tensor) -> Tensor:
        margin = torch.clamp(1 - self.targets(y, output.dtype) * output, min=0)
        return 0.5 * margin.square().mean() + 0.5 * self.l2 * self.weight.square().sum()

    def correct(self, output: Tensor, y: Tensor) -> Tensor:
        return (self.targets(y, output.dtype) * output > 0).sum()

    def init_parameters(self, generator: torch.Generator) -> None:
        with torch.no_grad():
            self.weight.zero_()


class SoftmaxRegression(Classifier):
    """Multinomial logistic regression: one linear layer with bias on the flattened input.

    The convex multi-class model of FedProx (Li et al. 2020, "MCLR") and FedDC's ``Linear``.
    """

    NAME = "softmax"

    def __init__(self, input_shape: Shape, num_classes: int) -> None:
        super().__init__()
        self.fc = nn.Linear(math.prod(input_shape), num_classes)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc(flatten_batch(x))


class _SquaredSVMGradient:
    """``λw − (1/B) Σ_i t_i x_i max(0, 1 − t_i wᵀx_i)``: :class:`SquaredSVM`'s loss gradient."""

    def __init__(self, model: SquaredSVM) -> None:
        self.model, self.l2 = model, model.l2

    def prepare(self, y: Tensor) -> Tensor:
        return self.model.targets(y, self.model.weight.dtype)  # ±1, once per training set

    def __call__(self, theta: Tensor, x: Tensor, t: Tensor, grad: Tensor) -> None:
        xb = x.reshape(x.shape[0], -1)
        r = torch.mv(xb, theta).mul_(t)  # t_i s_i
        r.neg_().add_(1.0).clamp_(min=0.0).mul_(t).mul_(-1.0 / t.shape[0])  # ∂loss/∂s_i
        torch.addmv(theta, xb.t(), r, beta=self.l2, out=grad)


def closed_form_gradient(
    module: nn.Module,
) -> _SquaredSVMGradient | ChainGradient | BHerdCNNGradient | None:
    """The exact batch gradient of ``module.loss(module(x), y)`` without autograd, for the built-in
    ``svm``, ``softmax`` and ``2nn`` as they are (the last two Linear/ReLU chains of one and three layers,
    :mod:`fedaccel.models.chain`) and the ``cnn`` on one-channel images on a CPU
    (:mod:`fedaccel.models.conv_gradient`); None for anything else, a subclass that overrides
    ``forward``/``loss``/``targets`` included. It is called as ``kernel(theta, x, kernel.prepare(y)[idx],
    grad)`` with ``theta``/``grad`` the flat parameter/gradient vectors (:class:`fedaccel.engine.flat.FlatModel`
    order) and writes ∂loss/∂theta into ``grad``; equal to autograd's to float rounding.
    """
    cls = type(module)
    trainable = [id(p) for p in module.parameters() if p.requires_grad]
    if isinstance(module, SquaredSVM):
        same = all(getattr(cls, m) is getattr(SquaredSVM, m) for m in ("forward", "loss", "targets"))
        if same and trainable == [id(module.weight)] and len(list(module.parameters())) == 1:
            return _SquaredSVMGradient(module)
    if isinstance(module, SoftmaxRegression):
        return chain_gradient(module)
    return mlp_chain_gradient(module) or bherd_cnn_gradient(module)


def chain_gradient(module: nn.Module) -> ChainGradient | None:
    """The fused Linear/ReLU-chain gradient (:mod:`fedaccel.models.chain`) of the built-in ``softmax`` or
    ``2nn`` as built (every parameter trainable), for m parameter vectors at once (``.stacked``); else None."""
    if isinstance(module, SoftmaxRegression):
        cls = type(module)
        if cls.forward is SoftmaxRegression.forward and cls.loss is Classifier.loss:
            layers = chain_layers([module.fc], module)
            return ChainGradient(layers) if layers else None
        return None
    return mlp_chain_gradient(module)
