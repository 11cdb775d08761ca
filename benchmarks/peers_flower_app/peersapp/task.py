"""Model, data and the training / evaluation loops, as Flower's PyTorch quickstart's ``task.py``.

Two departures, both for an offline benchmark: the data come from fedaccel's embedded
Fashion-MNIST instead of ``flwr-datasets`` (which downloads), split IID as the other ways split
it; and the model is fedaccel's (the same network the other ways train). Torch is pinned to one
thread, as every way of benchmarks/peers.py is.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

from fedaccel.algorithms.base import make_rng
from fedaccel.data import load_dataset
from fedaccel.data.splits import split
from fedaccel.models import build_model

torch.set_num_threads(1)
_cache: dict[tuple, Any] = {}  # the loaded data, kept between messages (as the quickstart keeps its FederatedDataset)


def build_net(cfg: dict) -> torch.nn.Module:
    options = {"hidden": int(cfg["hidden"])} if cfg["model"] == "2nn" else {}
    return build_model(str(cfg["model"]), (1, 28, 28), 10, seed=int(cfg["seed"]), **options)


def _data(cfg: dict) -> Any:
    key = (int(cfg["seed"]), int(cfg["samples"]), int(cfg["test-samples"]), int(cfg["clients"]))
    if key not in _cache:
        data = load_dataset("fashion-mnist", seed=key[0], subset=key[1], test_subset=key[2])
        parts = split("iid", data.y_train.numpy(), key[3], make_rng(key[0], "split"))
        _cache[key] = (data, parts)
    return _cache[key]


def load_partition(cfg: dict, partition_id: int) -> DataLoader:
    data, parts = _data(cfg)
    index = torch.from_numpy(parts[partition_id])
    dataset = TensorDataset(data.x_train[index], data.y_train[index])
    return DataLoader(dataset, batch_size=int(cfg["batch-size"]), shuffle=True)


def train(net: torch.nn.Module, loader: DataLoader, epochs: int, lr: float) -> float:
    optimizer = torch.optim.SGD(net.parameters(), lr=lr)
    criterion = torch.nn.CrossEntropyLoss()
    net.train()
    total, batches = 0.0, 0
    for _ in range(epochs):
        for x, y in loader:
            optimizer.zero_grad()
            loss = criterion(net(x), y)
            loss.backward()
            optimizer.step()
            total, batches = total + loss.item(), batches + 1
    return total / max(batches, 1)


@torch.no_grad()
def evaluate(net: torch.nn.Module, cfg: dict) -> tuple[float, float]:
    """Test accuracy on the test samples and training loss on the first loss-samples training samples."""
    data, _ = _data(cfg)
    net.eval()
    accuracy = float((net(data.x_test).argmax(1) == data.y_test).float().mean())
    n = int(cfg["loss-samples"])
    loss = float(torch.nn.functional.cross_entropy(net(data.x_train[:n]), data.y_train[:n]))
    return accuracy, loss
