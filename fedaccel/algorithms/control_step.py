"""The control-variate step 1/(K eta) of SCAFFOLD (option II) and FedDC, as the paper or as the reference code.

Both methods turn a client's local movement into a gradient estimate by dividing it by (steps x step size).
The papers use the client's own steps tau_i and the step size eta_t it actually trained with; the reference
code (gaoliang13/FedDC, ``utils_methods.train_SCAFFOLD`` and ``utils_methods_FedDC.train_FedDC``) uses one
K for every client (epochs x batches of the *average* client, :meth:`~fedaccel.engine.local.LocalOptions.shared_steps`)
and the initial learning rate eta_0 even when eta_t decays. Two options pick either factor:

- ``control_lr``: ``"current"`` (eta_t, default) or ``"initial"`` (eta_0);
- ``control_steps``: ``"client"`` (tau_i, default) or ``"shared"`` (K).

Without lr decay ``initial`` equals ``current``; on equal clients without ``train.local_steps`` overrides
``shared`` equals ``client``.
"""

from __future__ import annotations

from fedaccel.algorithms.base import ClientContext
from fedaccel.errors import ConfigError, shown

CONTROL_LRS = ("current", "initial")
CONTROL_STEPS = ("client", "shared")


def check_control(method: str, control_lr: str, control_steps: str) -> None:
    """One-line ConfigError for an unknown option value."""
    if control_lr not in CONTROL_LRS:
        raise ConfigError(f"{method} control_lr must be one of {', '.join(CONTROL_LRS)}, got {shown(control_lr)}")
    if control_steps not in CONTROL_STEPS:
        raise ConfigError(f"{method} control_steps must be one of {', '.join(CONTROL_STEPS)}, "
                          f"got {shown(control_steps)}")


def control_scale(ctx: ClientContext, control_lr: str = "current", control_steps: str = "client") -> float:
    """1 / (K eta): K = tau_i or the shared K, eta = eta_t or eta_0 (see the module docstring).

    Example:
        >>> import numpy as np
        >>> from fedaccel.algorithms.base import RoundInfo
        >>> info = RoundInfo(round=2, lr=0.05, prev_lr=0.1, weights=np.ones(1), seed=0, initial_lr=0.2,
        ...                  shared_steps=4)
        >>> ctx = ClientContext(info, 0, 5, True)
        >>> control_scale(ctx), control_scale(ctx, "initial", "shared")
        (4.0, 1.25)
    """
    info = ctx.info
    lr = info.lr if control_lr == "current" or info.initial_lr is None else info.initial_lr
    steps = ctx.steps if control_steps == "client" or info.shared_steps is None else info.shared_steps
    return 1.0 / (steps * lr)
