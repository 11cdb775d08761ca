"""docs/reference/parts.md: its examples run and hold (their asserts: a local term of zero is FedAvg bit for bit, a
heavy-ball server step is the built-in fedavgm bit for bit), and it names every stage of Part with its signature."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from fedaccel.algorithms.base import Part
from fedaccel.algorithms.states import to_plain

PAGE = Path(__file__).resolve().parents[1] / "docs/reference/parts.md"


def test_the_pages_examples_run_in_order_and_their_asserts_hold(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # train() writes its run folders under runs/api
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.S)
    assert len(blocks) == 3
    scope: dict[str, object] = {}
    for block in blocks:
        exec(compile(block, str(PAGE), "exec"), scope)  # noqa: S102 - the repository's own page
    part = scope["shrink"](lam=0.5)  # type: ignore[operator]
    theta, grad = torch.randn(4, 3), torch.zeros(4, 3)
    part.batched_local_term([], None, None, [])(theta, grad)  # the batched form on (K, d): row by row the same
    rows = torch.zeros(4, 3)
    for k in range(4):
        part.local_term(None, None, None, None)(theta[k], rows[k])
    assert torch.equal(grad, rows) and torch.equal(grad, 0.5 * theta)


def test_every_stage_of_part_has_its_signature_on_the_page() -> None:
    page = PAGE.read_text(encoding="utf-8")
    stages = [f.name for f in dataclasses.fields(Part) if f.name != "name"]
    assert len(stages) == 25  # a new stage must be described on the page: raise this with it
    missing = [s for s in stages if not re.search(rf"^{s}(\(|:)", page, re.M)]
    assert not missing, f"stages without a signature line on the page: {missing}"


def test_what_a_state_may_hold_is_what_the_encoding_takes() -> None:
    """The page's list: tensors, None, numbers, strings, lists, tuples, dicts with string keys; not a NumPy array."""
    plain = to_plain({"m": torch.ones(2), "k": (1, 2.0, "x", None, [np.float32(1.5)])})
    assert torch.equal(plain["m"], torch.ones(2)) and plain["k"] == {"$tuple": [1, 2.0, "x", None, [1.5]]}
    for bad in (np.zeros(2), {1: torch.zeros(1)}, {"$dc": 1}, lambda: None):
        with pytest.raises(TypeError, match="cannot store a"):
            to_plain(bad)
    assert "NumPy array" in PAGE.read_text(encoding="utf-8")
