"""Checkpoints: where a run can continue from.

``save_checkpoint`` writes ``checkpoint.pt`` atomically and keeps the one before as
``checkpoint.prev.pt``; ``restore_state`` loads the newest one that loads (a damaged file is
skipped with one line) and cuts ``metrics.jsonl`` and ``diagnostics.jsonl`` back to its round, so
a resumed run reaches the same numbers as an uninterrupted one: every random draw derives from
(seed, round, client), never from the history of the process.

A checkpoint holds plain data only (the ``FLState``'s fields, its part states through
:mod:`fedaccel.algorithms.states`) and is read with ``torch.load(weights_only=True)``: a file that
would need code to load is refused with one line (:class:`~fedaccel.runs.files.UnsafeFile`),
never skipped for its predecessor as if it were merely damaged.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch

from fedaccel.algorithms.states import from_plain, to_plain
from fedaccel.engine.device import to_device
from fedaccel.engine.round import FLState, init_state
from fedaccel.errors import UserError
from fedaccel.runs.files import UnsafeFile, load_plain, save_plain, write_atomic
from fedaccel.runs.folder import CHECKPOINT, DIAGNOSTICS, METRICS, PREVIOUS_CHECKPOINT
from fedaccel.runs.setup import Setup


_LOAD = object()


def restore_state(setup: Setup, path: Path, loaded: Any = _LOAD) -> tuple[FLState, float]:
    """The state of the newest checkpoint in ``path`` that loads (or the initial one), metrics
    cut to match; says on stderr which round the run continues from. ``loaded``: what
    :func:`load_checkpoint` gave for ``path`` already (None: no checkpoint)."""
    if loaded is _LOAD:
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
            saved = checkpoint_from_plain(load_plain(file))
        except UnsafeFile:
            raise  # refused, not damaged: its predecessor is not silently taken instead
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


def checkpoint_from_plain(saved: Any) -> dict[str, Any]:
    """``{"state": FLState, "wall_s": float}`` from what :func:`save_checkpoint` wrote."""
    if not isinstance(saved, dict) or saved.get("format") != FORMAT or not isinstance(saved.get("state"), dict):
        raise ValueError("not a fedaccel checkpoint")
    plain = saved["state"]
    state = FLState(
        round=int(plain["round"]),
        w=plain["w"],
        server=from_plain(plain["server"]),
        clients=from_plain(plain["clients"]),
        totals=dict(plain["totals"]),
        evaluated=dict(plain.get("evaluated", {})),  # eval.models' tensors; absent before they existed
    )
    if not isinstance(state.w, torch.Tensor) or not isinstance(state.server, tuple) or not isinstance(state.clients, list):
        raise ValueError("not a fedaccel checkpoint")
    if not all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.evaluated.items()):
        raise ValueError("not a fedaccel checkpoint")
    return {"state": state, "wall_s": float(saved["wall_s"])}


def truncate_metrics(path: Path, last_round: int) -> None:
    """Drop metric lines written after the checkpoint (and a half-written last line); the file is
    replaced atomically, never rewritten in place."""
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
    write_atomic(path, "".join(k + "\n" for k in kept))


FORMAT = "fedaccel-checkpoint/2"  # plain data; version 1 pickled FLState and is refused (it would run code)


def save_checkpoint(path: Path, state: FLState, wall: float) -> None:
    """Write atomically and keep the one before as ``checkpoint.prev.pt``: a kill during the write
    leaves the previous checkpoint intact, and a damaged newest one still has a predecessor.
    Tensors are saved on the CPU, so the run resumes on any device; the state as plain data."""
    state = to_device(state, "cpu")
    plain = {"round": state.round, "w": state.w, "server": to_plain(state.server),
             "clients": to_plain(state.clients), "totals": dict(state.totals), "evaluated": dict(state.evaluated)}
    save_plain(path, {"format": FORMAT, "state": plain, "wall_s": wall}, previous=path.with_name(PREVIOUS_CHECKPOINT))
