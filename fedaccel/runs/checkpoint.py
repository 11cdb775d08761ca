"""Checkpoints: where a run can continue from.

``save_checkpoint`` writes ``checkpoint.pt`` atomically and keeps the one before as
``checkpoint.prev.pt``; ``restore_state`` loads the newest one that loads (a damaged file is
skipped with one line) and cuts ``metrics.jsonl`` and ``diagnostics.jsonl`` back to its round, so
a resumed run reaches the same numbers as an uninterrupted one: every random draw derives from
(seed, round, client), never from the history of the process.

A checkpoint records the config it was written with: a ``config.yaml`` edited under it (another
algorithm, model, learning rate, ...) is refused on resume in one line naming the keys that
differ (:func:`check_same_config`), never continued with numbers that belong to no config. A
``metrics.jsonl`` damaged anywhere but its last line is refused naming the line, never cut back
past the damage (:func:`truncate_metrics`).

A checkpoint holds plain data only (the ``FLState``'s fields, its part states through
:mod:`fedaccel.algorithms.states`) and is read with ``torch.load(weights_only=True)``: a file that
would need code to load is refused with one line (:class:`~fedaccel.runs.files.UnsafeFile`),
never skipped for its predecessor as if it were merely damaged.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch

from fedaccel.algorithms.states import from_plain, to_plain
from fedaccel.engine.device import to_device
from fedaccel.engine.round import FLState, init_state
from fedaccel.errors import UserError, listed, shown
from fedaccel.runs.files import UnsafeFile, load_plain, save_plain, write_atomic
from fedaccel.runs.folder import CHECKPOINT, DIAGNOSTICS, METRICS, PREVIOUS_CHECKPOINT
from fedaccel.runs.rows import check_no_gap, read_diagnostics_rows, read_rows, read_text
from fedaccel.runs.setup import Setup


_LOAD = object()


def restore_state(setup: Setup, path: Path, loaded: Any = _LOAD) -> tuple[FLState, float, list[dict[str, Any]]]:
    """The state of the newest checkpoint in ``path`` that loads (or the initial one), metrics
    cut to match, its wall time and its parts (where each stretch of it ran: :func:`continued_parts`);
    says on stderr which round the run continues from. ``loaded``: what :func:`load_checkpoint` gave
    for ``path`` already (None: no checkpoint)."""
    if loaded is _LOAD:
        loaded = load_checkpoint(path)
    rounds = setup.config.train.rounds
    # damage is refused before anything is changed, but for a tail past the checkpoint, which is dropped anyway
    # (rows are fsynced before each checkpoint: a machine's crash may tear the rows written since)
    past = loaded["state"].round if loaded is not None else -1
    if past > rounds:  # before the rows are read: their rounds past train.rounds would read as damage
        raise UserError(f"{path / 'config.yaml'} has train.rounds = {rounds}, below its checkpoint's round {past}: a "
                        f"run is never cut short; put train.rounds back ({past} or more)")
    rows, _ = read_rows(path / METRICS, last_round=rounds, damage_past=past)
    read_diagnostics_rows(path / DIAGNOSTICS, last_round=rounds, damage_past=past)
    if loaded is not None:  # saved on the CPU: moved to this run's device, whichever it is
        check_same_config(path, loaded.get("config"), setup.config.to_dict())
        check_same_shape(path, loaded["state"], setup)
        # rows lost before the checkpoint's round: refused now, before anything is written, not after training
        # every round left (the checkpoint's own row may be missing: a kill between the two; it is written again)
        check_no_gap(path / METRICS, [row for row in rows if row["round"] <= loaded["state"].round],
                     setup.config.eval.every, through=loaded["state"].round - 1)
        state, wall, parts = to_device(loaded["state"], setup.federation.device), loaded["wall_s"], loaded["parts"]
        sys.stderr.write(f"resuming {path} after round {state.round}\n")  # one write: stacked seeds resume in threads
        sys.stderr.flush()
        kept = state.round
    else:
        if any(row["round"] > 0 for row in rows):  # rows of rounds trained, and no checkpoint to go on from
            sys.stderr.write(f"{path} holds no checkpoint: the run starts again from round 0, replacing its "
                             f"{len(rows)} rows\n")
        state = init_state(setup.algorithm, setup.federation.model.theta.clone(), setup.federation.n_clients)
        wall, kept, parts = 0.0, -1, []  # from scratch: run_loop writes round 0 again
    for name in (METRICS, DIAGNOSTICS):
        truncate_metrics(path / name, kept, last_round=rounds, damage_past=past)
    return state, wall, parts


def continued_parts(before: list[dict[str, Any]], start_round: int, ran_on: dict[str, str]) -> list[dict[str, Any]]:
    """A run's parts once it (re)starts at ``start_round`` on ``ran_on`` (device, runtime): each part says from
    which round on it ran where (``{"from_round", "device", "runtime"}``). Parts after the checkpoint resumed
    from are dropped (their rounds are run again); a part where the last one ran continues it. Names are cut
    to :data:`NAME_MAX` characters; a run resumed from a checkpoint that holds no parts (an earlier fedaccel's)
    begins with an ``unknown`` part from round 0."""
    ran_on = {key: value[:NAME_MAX] for key, value in ran_on.items()}  # as a checkpoint's parts may hold them
    kept = [part for part in before if part["from_round"] < start_round]
    if not kept and start_round > 0:  # a checkpoint of a fedaccel before parts: where its rounds ran is not known
        kept = [{"from_round": 0, "device": "unknown", "runtime": "unknown"}]
    if kept and all(kept[-1].get(key) == value for key, value in ran_on.items()):
        return kept
    return [*kept, {"from_round": start_round, **ran_on}]


NAME_MAX = 100  # characters of a part's device or runtime


#: Config keys that say where and how a run is carried out, not what it computes: a resume may differ here.
# Keys a resumed run may change: where and how it runs, and its budget (a finished run continued for more
# rounds; no round before the checkpoint depends on train.rounds: the rate decays per round, not over T,
# unless a train.lr_schedule places a milestone as a fraction of it, or client-level DP calibrated its noise to it
# (algorithm.dp.target_epsilon), which :func:`check_same_config` refuses).
RESUMABLE_KEYS = ("name", "run.out_dir", "run.progress", "run.tensorboard", "run.threads", "run.device",
                  "run.timeout", "run.checkpoint_every", "run.stack_size", "run.on_divergence", "train.rounds")


def check_same_config(path: Path, saved: dict[str, Any] | None, config: dict[str, Any]) -> None:
    """Refuse (one line naming the keys) a ``config`` that differs from ``saved``, the config the
    checkpoint was written with, in anything but :data:`RESUMABLE_KEYS`. A checkpoint of a
    fedaccel before it recorded its config (``saved`` None) is checked by its shape only. A key that
    ``saved`` lacks (added to fedaccel since) reads as its default, the behaviour from before it existed."""
    if saved is None:
        return
    from fedaccel.engine.schedule import fractional
    from fedaccel.runs.config import Config

    defaults, before, now = flat_config(Config().to_dict()), flat_config(saved), flat_config(config)
    resumable = set(RESUMABLE_KEYS)
    if any(fractional(c.get("train.lr_schedule.milestones")) for c in (before, now)):
        resumable.discard("train.rounds")  # its milestones move with train.rounds
    calibrated = any(c.get("algorithm.dp.target_epsilon") is not None for c in (before, now))
    if calibrated:
        resumable.discard("train.rounds")  # z was calibrated to spend the target in train.rounds rounds
    changed = [key for key in sorted(set(before) | set(now), key=str)
               if key not in resumable and before.get(key, defaults.get(key, MISSING)) != now.get(key, MISSING)]
    if changed:
        first = changed[0]
        raise UserError(
            f"{path / 'config.yaml'} differs from the config its checkpoint was written with in "
            f"{listed(changed)} ({first}: {_value(before.get(first, MISSING))} then, "
            f"{_value(now.get(first, MISSING))} now): a run continues only with its own settings; put them back, "
            "or start the run again in a new folder" + (ROUNDS_FIXED_BY_DP if first == "train.rounds" and calibrated
                                                        else "")
        )


MISSING = object()
ROUNDS_FIXED_BY_DP = (" (algorithm.dp.target_epsilon calibrated the noise for train.rounds rounds: more rounds would "
                      "spend more than the target, fewer would report a false epsilon)")


def _value(value: Any) -> str:
    return "unset" if value is MISSING else shown(value, 60)


def flat_config(tree: Any, prefix: str = "") -> dict[str, Any]:
    """``{"train.lr": 0.1, ...}`` from a nested config mapping."""
    if not isinstance(tree, dict):
        return {prefix[:-1]: tree} if prefix else {}
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            flat.update(flat_config(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def check_same_shape(path: Path, state: FLState, setup: Setup) -> None:
    """The checkpoint's model and state are the shape ``setup`` builds (its parameters, its parts'
    states, its clients): a config changed under a checkpoint that recorded no config is one line."""
    theta = setup.federation.model.theta
    fresh = init_state(setup.algorithm, theta, setup.federation.n_clients)
    parts = [type(s).__name__ for s in state.server]
    wanted = [type(s).__name__ for s in fresh.server]
    problem = (f"a model of {state.w.numel():,} parameters, the config's has {theta.numel():,}"
               if state.w.shape != theta.shape else
               f"a model of {str(state.w.dtype).removeprefix('torch.')}, the config's is "
               f"{str(theta.dtype).removeprefix('torch.')}" if state.w.dtype != theta.dtype else
               f"the parts' states {parts}, the config's algorithm has {wanted}" if parts != wanted else
               f"{len(state.clients)} clients' states, the config has {len(fresh.clients)} clients"
               if len(state.clients) != len(fresh.clients) else None)
    if problem:
        raise UserError(f"{path}: its checkpoint holds {problem}: config.yaml was changed under it; put it back, "
                        "or start the run again in a new folder")


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
    """``{"state": FLState, "wall_s": float, "config": dict | None, "parts": list, "trained_at": list | None}``
    from what :func:`save_checkpoint` wrote."""
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
    config = saved.get("config")  # absent in checkpoints of fedaccel before it was recorded
    parts = saved.get("parts", [])  # absent in checkpoints of fedaccel before parts were recorded
    if not _parts_fit(parts, state.round):
        raise ValueError("not a fedaccel checkpoint")
    if "parts" in saved and not isinstance(config, dict):  # parts came after configs: its config was taken out
        raise ValueError("not a fedaccel checkpoint (its config is missing)")
    trained_at = saved.get("trained_at")  # a Flower run's; absent in-process and before it was recorded
    if trained_at is not None and not (isinstance(trained_at, list) and len(trained_at) == len(state.clients) and all(
            type(r) is int and 0 <= r <= state.round for r in trained_at)):
        raise ValueError("not a fedaccel checkpoint")
    return {"state": state, "wall_s": float(saved["wall_s"]), "config": config if isinstance(config, dict) else None,
            "parts": [dict(part) for part in parts], "trained_at": trained_at}


def _parts_fit(parts: Any, last_round: int) -> bool:
    """Whether ``parts`` is a list of parts as :func:`continued_parts` makes them, in order, none after
    ``last_round``."""
    if not isinstance(parts, list) or len(parts) > 10_000:
        return False
    previous = -1
    for part in parts:
        if not isinstance(part, dict) or set(part) != {"from_round", "device", "runtime"}:
            return False
        start = part["from_round"]
        if isinstance(start, bool) or not isinstance(start, int) or not previous < start <= last_round:
            return False
        if not all(isinstance(part[key], str) and 0 < len(part[key]) <= NAME_MAX for key in ("device", "runtime")):
            return False
        previous = start
    return True


def truncate_metrics(path: Path, kept_round: int, *, last_round: int | None = None,
                     damage_past: int | None = None) -> None:
    """Drop the rows written after the checkpoint's round ``kept_round`` (and a half-written last
    line); the file is replaced atomically, never rewritten in place.
    A line damaged anywhere else is refused (:func:`~fedaccel.runs.rows.read_rows`): the valid
    rows after it are never deleted, unless they are past ``damage_past`` (the checkpoint's round: rows
    a resume drops). ``last_round``: the config's ``train.rounds``."""
    if not path.exists():
        return
    rows, _ = read_rows(path, last_round=last_round, damage_past=damage_past)
    lines = [line for line in read_text(path).splitlines() if line.strip()]
    kept = [line for line, row in zip(lines, rows) if row["round"] <= kept_round]  # as written, byte for byte
    write_atomic(path, "".join(line + "\n" for line in kept))


FORMAT = "fedaccel-checkpoint/2"  # plain data; version 1 pickled FLState and is refused (it would run code)


def save_checkpoint(path: Path, state: FLState, wall: float, config: dict[str, Any] | None = None,
                    parts: list[dict[str, Any]] | None = None, trained_at: list[int] | None = None) -> None:
    """Write atomically and keep the one before as ``checkpoint.prev.pt``: a kill during the write
    leaves the previous checkpoint intact, and a damaged newest one still has a predecessor.
    Tensors are saved on the CPU, so the run resumes on any device; the state as plain data, with
    ``config`` (``Config.to_dict()``) that a resume must match (:func:`check_same_config`), the run's
    ``parts`` (:func:`continued_parts`) and, on Flower, ``trained_at``: the round each client last trained in
    (0: none), whose states it kept then (:func:`fedaccel.flower.client.keep_states`)."""
    state = to_device(state, "cpu")
    plain = {"round": state.round, "w": state.w, "server": to_plain(state.server),
             "clients": to_plain(state.clients), "totals": dict(state.totals), "evaluated": dict(state.evaluated)}
    saved = {"format": FORMAT, "state": plain, "wall_s": wall, **({"config": config} if config is not None else {}),
             **({"parts": parts} if parts is not None else {}),
             **({"trained_at": list(trained_at)} if trained_at is not None else {})}
    save_plain(path, saved, previous=path.with_name(PREVIOUS_CHECKPOINT))
