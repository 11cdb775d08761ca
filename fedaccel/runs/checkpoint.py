"""Checkpoints: where a run can continue from.

``save_checkpoint`` writes ``checkpoint.pt`` atomically and keeps the one before as
``checkpoint.prev.pt``; ``restore_state`` loads the newest one that loads (a damaged file is
skipped with one line) and cuts ``metrics.jsonl`` and ``diagnostics.jsonl`` back to its round, so
a resumed run reaches the same numbers as an uninterrupted one: every random draw derives from
(seed, round, client), never from the history of the process.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import torch

from fedaccel.engine.device import to_device
from fedaccel.engine.round import FLState, init_state
from fedaccel.errors import UserError
from fedaccel.runs.folder import CHECKPOINT, DIAGNOSTICS, METRICS, PREVIOUS_CHECKPOINT
from fedaccel.runs.setup import Setup


def restore_state(setup: Setup, path: Path) -> tuple[FLState, float]:
    """The state of the newest checkpoint in ``path`` that loads (or the initial one), metrics
    cut to match; says on stderr which round the run continues from."""
    loaded = load_checkpoint(path)
    if loaded is not None:  # saved on the CPU: moved to this run's device, whichever it is
        state, wall = to_device(loaded["state"], setup.federation.device), loaded["wall_s"]
        print(f"resuming {path} from round {state.round}", file=sys.stderr, flush=True)
        kept = state.round
    else:
        state = init_state(setup.algorithm, setup.federation.model.theta.clone(), setup.federation.n_clients)
        wall, kept = 0.0, -1  # from scratch: run_loop writes round 0 again
    for name in (METRICS, DIAGNOSTICS):
        truncate_metrics(path / name, kept)
    return state, wall


def load_checkpoint(path: Path) -> dict[str, Any] | None:
    """The newest of ``checkpoint.pt`` and ``checkpoint.prev.pt`` in ``path`` that loads; None if
    neither exists. A damaged file is named in one line on stderr and skipped; if every
    checkpoint there is damaged, that is a :class:`UserError`."""
    damaged = []
    for name in (CHECKPOINT, PREVIOUS_CHECKPOINT):
        file = path / name
        if not file.is_file():
            continue
        try:
            saved = torch.load(file, weights_only=False, map_location="cpu")  # our own file
            if not isinstance(saved, dict) or not isinstance(saved.get("state"), FLState):
                raise ValueError("not a fedaccel checkpoint")
        except Exception as exc:  # truncated zip, 0 bytes (EOFError), pickle garbage, ...
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            damaged.append(f"{file} ({reason[:120]})")
            print(f"warning: {file} is damaged and is skipped ({reason[:120]})", file=sys.stderr, flush=True)
            continue
        return saved
    if damaged:
        raise UserError(f"no checkpoint in {path} loads: {'; '.join(damaged)}; "
                        f"delete them to start the run again from round 0")
    return None


def truncate_metrics(path: Path, last_round: int) -> None:
    """Drop metric lines written after the checkpoint (and a half-written last line)."""
    if not path.exists():
        return
    kept = []
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            break
        if row["round"] <= last_round:
            kept.append(line)
    path.write_text("".join(k + "\n" for k in kept))


def save_checkpoint(path: Path, state: FLState, wall: float) -> None:
    """Write atomically and keep the one before as ``checkpoint.prev.pt``: a kill during the write
    leaves the previous checkpoint intact, and a damaged newest one still has a predecessor.
    Tensors are saved on the CPU, so the run resumes on any device."""
    tmp = path.with_suffix(".tmp")
    torch.save({"state": to_device(state, "cpu"), "wall_s": wall}, tmp)
    with open(tmp, "rb") as file:
        os.fsync(file.fileno())
    if path.exists():
        os.replace(path, path.with_name(PREVIOUS_CHECKPOINT))
    os.replace(tmp, path)
