"""Python API for your own model and data.

Example (runs in a second on the CPU):
    >>> import numpy as np, torch
    >>> from fedaccel import train
    >>> g = torch.Generator().manual_seed(0)
    >>> x, y = torch.randn(200, 5, generator=g), torch.randint(0, 2, (200,), generator=g)
    >>> parts = [np.arange(0, 100), np.arange(100, 200)]      # one index array per client
    >>> model = torch.nn.Linear(5, 2)                          # any torch.nn.Module
    >>> history = train(model, x, y, parts, x, y, algorithm="fedavg", rounds=3, lr=0.1, progress=False)
    >>> len(history.metrics)                                   # round 0 and rounds 1-3
    4

The module is used as it is: if it has ``loss(output, y)`` and ``correct(output, y)`` methods
they are used, else cross-entropy and argmax accuracy.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from fedaccel.algorithms.base import Algorithm
from fedaccel.algorithms.registry import build_algorithm
from fedaccel.config import Config, EvalConfig, RunConfig, TrainConfig, local_options
from fedaccel.engine.device import resolve_device
from fedaccel.engine.federation import Federation
from fedaccel.engine.round import FLState, init_state
from fedaccel.runner import Setup, run_loop


@dataclass
class History:
    """The outcome of :func:`train`: metrics per evaluated round and the final state."""

    metrics: list[dict[str, Any]]
    state: FLState
    run_dir: Path

    @property
    def w(self) -> Tensor:
        """The final global model as a flat vector."""
        return self.state.w


def train(
    module: nn.Module,
    x_train: Tensor,
    y_train: Tensor,
    partition: Sequence[np.ndarray],
    x_test: Tensor,
    y_test: Tensor,
    *,
    algorithm: str | Algorithm = "fedavg",
    rounds: int = 10,
    seed: int = 0,
    run_dir: str | Path | None = None,
    eval_every: int = 1,
    progress: bool = True,
    device: str | torch.device | None = None,
    **train_options: Any,
) -> History:
    """Federated training of ``module`` over ``partition`` (one index array per client).

    ``train_options`` are the keys of :class:`fedaccel.config.TrainConfig` (lr, batch_size,
    local_epochs, momentum, weight_decay, lr_decay, clip, reshuffle, client_fraction).
    A run folder is written to ``run_dir`` (default: a temporary one under ``runs/api``).
    ``device`` (``cpu``, ``cuda``, ``cuda:N``, ``mps``, ``auto``; default: where ``module`` is) is
    where the model, the data and every state live; they are moved there once.
    """
    where = next(module.parameters(), torch.empty(0)).device if device is None else resolve_device(device)
    algo = build_algorithm(algorithm) if isinstance(algorithm, str) else algorithm
    config = Config(
        name=algo.name,
        algorithm={"name": algo.name},
        model={"name": type(module).__name__},
        train=TrainConfig(rounds=rounds, **train_options),
        eval=EvalConfig(every=eval_every, train_samples=None),
        run=RunConfig(seed=seed, progress=progress, out_dir="runs/api", device=str(where)),
    )
    config.data.dataset = "custom"
    config.data.clients = len(partition)
    federation = Federation(
        module, x_train, y_train, partition, x_test, y_test, local_options(config), seed=seed, device=where
    )
    from fedaccel.config import dump_config
    from fedaccel.runner import new_run_dir

    path = Path(run_dir) if run_dir is not None else new_run_dir(config)
    path.mkdir(parents=True, exist_ok=True)
    dump_config(config, path / "config.yaml")
    state = init_state(algo, federation.model.theta.clone(), federation.n_clients)
    setup = Setup(config, federation, algo, config.train.client_fraction)
    final = run_loop(setup, state, path, wall=0.0, progress=progress)
    metrics = [json.loads(line) for line in (path / "metrics.jsonl").read_text().splitlines()]
    return History(metrics, final, path)
