"""Every recipe of the registry follows the model's dtype and device (shared suite over RECIPES)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import Tensor, nn

from fedaccel import RECIPES, History, train

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU"))]


def tensors_in(value: Any) -> Iterator[Tensor]:
    """Every tensor inside a state: tensors, tuples, lists, dicts and (state) dataclasses."""
    if isinstance(value, Tensor):
        yield value
    elif isinstance(value, (tuple, list)):
        for item in value:
            yield from tensors_in(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from tensors_in(item)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            yield from tensors_in(getattr(value, f.name))


def tiny_run(name: str, dtype: torch.dtype, device: str, run_dir: Path) -> History:
    """Three rounds of ``name`` on a 4-feature linear classifier over 4 clients, half of them selected."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(48, 4, generator=g)
    y = (x[:, 0] + 0.5 * x[:, 1] > 0).long()
    with torch.random.fork_rng():
        torch.manual_seed(0)
        module = nn.Linear(4, 2)
    module = module.to(device=device, dtype=dtype)
    x, y = x.to(device=device, dtype=dtype), y.to(device)
    parts = [np.arange(k, 48, 4) for k in range(4)]
    return train(module, x, y, parts, x, y, algorithm=name, rounds=3, lr=0.1, batch_size=4,
                 client_fraction=0.5, run_dir=run_dir, progress=False)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", sorted(RECIPES))
def test_every_recipe_trains_a_float64_model_in_float64(name: str, device: str, tmp_path: Path) -> None:
    wide = tiny_run(name, torch.float64, device, tmp_path / "f64")
    narrow = tiny_run(name, torch.float32, device, tmp_path / "f32")
    state = wide.state
    found = list(tensors_in((state.w, state.server, state.clients)))
    assert found and all(t.dtype == torch.float64 and t.device.type == device for t in found)
    assert wide.metrics[-1]["test_loss"] != wide.metrics[0]["test_loss"]  # it trained
    torch.testing.assert_close(wide.w.float(), narrow.w, atol=1e-4, rtol=1e-4)
    assert wide.metrics[-1]["test_loss"] == pytest.approx(narrow.metrics[-1]["test_loss"], abs=1e-4)
    # everything uploaded (updates, extras, planning statistics) has the model's element size
    assert wide.metrics[-1]["bytes_up"] == 2 * narrow.metrics[-1]["bytes_up"] > 0
    for row64, row32 in zip(wide.metrics[1:], narrow.metrics[1:], strict=True):
        for i, entry in row64.get("diag", {}).get("clients", {}).items():
            if "memory_bytes" in entry:  # an estimator's stored vectors
                assert entry["memory_bytes"] == 2 * row32["diag"]["clients"][i]["memory_bytes"]
