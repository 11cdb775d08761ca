"""FedProx's Synthetic(alpha, beta) data: one logistic-regression task per client, seeded.

Recipe (Li et al., "Federated Optimization in Heterogeneous Networks", Sec. 5.1): for client k
draw u_k ~ N(0, alpha) and B_k ~ N(0, beta); the client's model is W_k ~ N(u_k, 1) (classes x dim)
and b_k ~ N(u_k, 1); its inputs are x ~ N(v_k, Sigma) with v_k's entries ~ N(B_k, 1) and Sigma
diagonal, Sigma_jj = j^-1.2; labels are y = argmax softmax(W_k x + b_k). alpha controls how
different the client models are, beta how different the client inputs are.

Choices where the paper is silent (following the authors' generator script): alpha and beta are
used as *standard deviations*; client sizes are ``floor(lognormal(4, 2)) + 50`` unless ``samples``
fixes them. Every draw comes from ``np.random.default_rng(seed)``, in a fixed order.
"""

from __future__ import annotations

import numpy as np

from fedaccel.errors import DataError

__all__ = ["generate_synthetic"]


def generate_synthetic(
    *,
    seed: int = 0,
    alpha: float = 1.0,
    beta: float = 1.0,
    clients: int = 30,
    dim: int = 60,
    classes: int = 10,
    samples: int | None = None,
    train_frac: float = 0.8,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, list[np.ndarray]]:
    """Generate Synthetic(alpha, beta): ``(x_train, y_train, x_test, y_test, partition)``.

    Each client's samples are split ``train_frac`` / rest into train / test; ``partition[k]`` holds
    client k's indices into ``x_train`` (clients are stored contiguously, in order).
    """
    if clients < 1 or dim < 1 or classes < 2:
        raise DataError(
            f"synthetic: need clients >= 1, dim >= 1, classes >= 2 (got {clients}, {dim}, {classes})"
        )
    if alpha < 0 or beta < 0:
        raise DataError(f"synthetic: alpha and beta must be >= 0 (got {alpha}, {beta})")
    if not 0.0 < train_frac < 1.0:
        raise DataError(f"synthetic: train_frac must be in (0, 1) (got {train_frac})")
    if samples is not None and samples < 2:
        raise DataError(f"synthetic: samples per client must be >= 2 (got {samples})")

    rng = np.random.default_rng(seed)
    if samples is None:
        sizes = rng.lognormal(4.0, 2.0, clients).astype(np.int64) + 50
    else:
        sizes = np.full(clients, samples, dtype=np.int64)
    u = rng.normal(0.0, alpha, clients)  # per-client model mean
    big_b = rng.normal(0.0, beta, clients)  # per-client input mean
    std = np.arange(1, dim + 1, dtype=np.float64) ** (-1.2 / 2)  # sqrt of Sigma's diagonal

    xs_tr, ys_tr, xs_te, ys_te, partition = [], [], [], [], []
    offset = 0
    for k in range(clients):
        v = rng.normal(big_b[k], 1.0, dim)
        w = rng.normal(u[k], 1.0, (classes, dim))
        b = rng.normal(u[k], 1.0, classes)
        x = v + rng.standard_normal((int(sizes[k]), dim)) * std
        # argmax of softmax == argmax of the logits.
        y = np.argmax(x @ w.T + b, axis=1).astype(np.int64)
        n_tr = min(max(1, int(round(train_frac * sizes[k]))), int(sizes[k]) - 1)
        xs_tr.append(x[:n_tr])
        ys_tr.append(y[:n_tr])
        xs_te.append(x[n_tr:])
        ys_te.append(y[n_tr:])
        partition.append(np.arange(offset, offset + n_tr, dtype=np.int64))
        offset += n_tr
    return (
        np.concatenate(xs_tr).astype(np.float32),
        np.concatenate(ys_tr),
        np.concatenate(xs_te).astype(np.float32),
        np.concatenate(ys_te),
        partition,
    )
