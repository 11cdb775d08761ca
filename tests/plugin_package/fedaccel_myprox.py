"""MyProx: FedAvg's parts plus a proximal local term, grad += mu (theta - w_t) (FedProx, Li et al., 2020).

A method written outside fedaccel, as a researcher would: one new part, composed with FedAvg's.
"""

from __future__ import annotations

from collections.abc import Callable

from torch import Tensor

from fedaccel import Algorithm, Part, build_algorithm, compose


def proximal(*, mu: float) -> Part:
    """At every local step, the gradient gets mu (theta - w): w is this round's global model."""
    if not mu >= 0:
        raise ValueError(f"mu must be >= 0, got {mu}")

    def local_term(ctx, w: Tensor, ss, cs) -> Callable[[Tensor, Tensor], None]:  # noqa: ANN001
        def add(theta: Tensor, grad: Tensor) -> None:
            grad.add_(theta - w, alpha=mu)

        return add

    return Part(name="proximal", local_term=local_term)


def myprox(*, mu: float = 0.01) -> Algorithm:
    """MyProx: FedAvg with a proximal local term mu."""
    return compose("myprox", proximal(mu=mu), *build_algorithm("fedavg").parts)
