"""Reading a run folder's JSON files (``metrics.jsonl``, ``diagnostics.jsonl``, ``summary.json``)
as files that may come from someone else: bounded, and every kind of damage one line.

A row is a JSON object with an integer ``round`` (0 to the config's ``train.rounds``), rounds
strictly increasing down the file; integers have at most :data:`MAX_INT_DIGITS` digits and
values nest at most :data:`MAX_DEPTH` deep (fedaccel writes 4 levels), so no reader can be made
to build a huge range, a huge number or a deep recursion from a crafted file. Only the *last*
line may be cut short (a run killed while writing it); a damaged line with rows after it was not
left by a kill, and is refused naming its line: nothing is deleted to get past it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fedaccel.disk import read_regular
from fedaccel.errors import UserError, shown
from fedaccel.nesting import could_nest_deeper, nesting_depth

MAX_DEPTH = 32  # levels of nesting a value may have (a metrics row with its diagnostics has 4)
MAX_INT_DIGITS = 30  # digits of an integer (a byte count of a long run has 15)
#: Columns a metrics row holds as numbers (NaN and infinities included: a diverged run's losses),
#: plain or per scored model (``client_mean/test_acc``).
#: The losses whose NaN or infinity in a metrics row is divergence (the rounds' own check, and readers of rows).
LOSSES = ("test_loss", "train_loss")
NUMBER_COLUMNS = ("test_acc", "test_loss", "train_acc", "train_loss", "wall_s", "bytes_up", "bytes_down",
                  "local_steps")


def parse_json(text: str) -> Any:
    """``json.loads`` of ``text`` within the bounds above; raises ``ValueError`` with a short
    reason (:class:`json.JSONDecodeError` when the text is not JSON, e.g. cut short).

    The bounds cost little where a text cannot break them: an integer is one run of ASCII digits, so a text
    without a longer run than :data:`MAX_INT_DIGITS` (found in one C pass) is parsed without a check per integer;
    and a text with at most :data:`MAX_DEPTH` opening brackets (strings' included) cannot nest deeper, so only
    the others are counted, on the text in one vectorised pass (the reports read tens of thousands of rows). Both
    bounds hold for the whole text: a value that a duplicate key drops counts too."""
    try:
        long_digits = text.encode("utf-8", "surrogatepass").translate(_DIGITS_AS_ZERO).find(_TOO_MANY_DIGITS) >= 0
        value = json.loads(text, parse_int=_bounded_int) if long_digits else json.loads(text)
    except RecursionError:
        raise ValueError(f"nested deeper than {MAX_DEPTH} levels") from None
    if could_nest_deeper(text, MAX_DEPTH) and nesting_depth(text) > MAX_DEPTH:
        raise ValueError(f"nested deeper than {MAX_DEPTH} levels")
    return value


_DIGITS_AS_ZERO = bytes(ord("0") if chr(i).isdigit() and i < 128 else ord(" ") for i in range(256))
_TOO_MANY_DIGITS = b"0" * (MAX_INT_DIGITS + 1)


def _bounded_int(digits: str) -> int:
    if len(digits.lstrip("-")) > MAX_INT_DIGITS:
        raise ValueError(f"an integer of {len(digits.lstrip('-')):,} digits (at most {MAX_INT_DIGITS})")
    return int(digits)


def rounds_of(config: Any) -> int | None:
    """``train.rounds`` of a config mapping read from a run folder, if it is a count (else None)."""
    train = config.get("train") if isinstance(config, dict) else None
    rounds = train.get("rounds") if isinstance(train, dict) else None
    return rounds if isinstance(rounds, int) and not isinstance(rounds, bool) and rounds >= 0 else None


def read_text(file: Path) -> str:
    """The UTF-8 text of ``file``, a plain file (:func:`fedaccel.disk.read_regular`: a folder, a FIFO, a device
    or a link is one line, and nothing blocks); an unreadable file or other bytes are one line."""
    try:
        return read_regular(file).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(f"{file}: not a UTF-8 text file (byte {exc.start}): it was damaged or not written "
                        "by fedaccel") from None
    except OSError as exc:
        raise UserError(f"{file} cannot be read: {exc.strerror or exc}") from None


def read_json(file: Path) -> Any:
    """The one JSON document in ``file`` (``summary.json``), within the bounds; damage is one line."""
    try:
        return parse_json(read_text(file))
    except ValueError as exc:
        raise UserError(f"{file}: not valid JSON ({json_reason(exc)})") from None


def read_rows(file: Path, *, last_round: int | None = None, damage_past: int | None = None,
              check: Callable[[Path, dict[str, Any]], None] | None = None) -> tuple[list[dict[str, Any]], bool]:
    """The rows of ``file`` (absent: none) and whether its last line was cut short (and is left
    out). ``last_round``: the config's ``train.rounds``, the highest round a row may have. Any
    other damage (a line that is not a JSON object with an integer round above the one before,
    a line cut short with rows after it, a row ``check`` refuses) is a :class:`UserError` naming the line.
    ``damage_past``: a resume's checkpoint round, whose rows after it the resume drops: damage after a row of that
    round or later ends the rows instead (rows are fsynced before each checkpoint, not as written, so a machine's
    crash may leave a torn or zeroed tail of rows past the checkpoint), and the second value is True."""
    if not file.exists() and not file.is_symlink():
        return [], False
    lines = [(number, line) for number, line in enumerate(read_text(file).splitlines(), start=1) if line.strip()]
    rows: list[dict[str, Any]] = []
    for k, (number, line) in enumerate(lines):
        try:
            row = parse_json(line)
            check_row(file, number, row, rows[-1]["round"] if rows else None, last_round)
            if check is not None:
                check(file, row)
        except (ValueError, UserError) as exc:  # json.JSONDecodeError is a ValueError
            if k == len(lines) - 1 and isinstance(exc, json.JSONDecodeError):  # a run killed while writing its last line
                return rows, True
            if damage_past is not None and (damage_past < 0 or (rows and rows[-1]["round"] >= damage_past)):
                return rows, True
            if isinstance(exc, UserError):
                raise
            if isinstance(exc, json.JSONDecodeError):
                raise UserError(f"{file}:{number}: not valid JSON ({exc.msg}), with {len(lines) - 1 - k} row(s) "
                                "after it: the file was damaged, not cut short by a kill; nothing was changed: "
                                "restore the file, or run the run again") from None
            raise UserError(f"{file}:{number}: {json_reason(exc)}; nothing was changed") from None
        rows.append(row)
    return rows, False


def check_row(file: Path, number: int, row: Any, previous: int | None, last_round: int | None) -> None:
    """``row`` is an object whose ``round`` is an integer above ``previous``, within 0..``last_round``,
    and whose :data:`NUMBER_COLUMNS` are numbers."""
    if not isinstance(row, dict):
        raise UserError(f"{file}:{number}: expected a JSON object, got {type(row).__name__}")
    rnd = row.get("round")
    if not isinstance(rnd, int) or isinstance(rnd, bool):
        raise UserError(f"{file}:{number}: no integer 'round' in this row")
    if rnd < 0 or (last_round is not None and rnd > last_round):
        bound = f"0..{last_round} (train.rounds of its config.yaml)" if last_round is not None else "0 and up"
        raise UserError(f"{file}:{number}: round {rnd} is outside {bound}: the file was damaged or does not "
                        "belong to this run")
    if previous is not None and rnd <= previous:
        raise UserError(f"{file}:{number}: round {rnd} after round {previous}; rounds must increase (two processes "
                        "wrote this run at once?): delete the run folder and run it again")
    for key, value in row.items():
        if key.rpartition("/")[2] in NUMBER_COLUMNS and (not isinstance(value, (int, float)) or isinstance(value, bool)):
            said = key if key.isprintable() and len(key) <= 60 else shown(key, 60)  # a crafted key: one line
            raise UserError(f"{file}:{number}: {said} is {shown(value, 60)}, not a number: the file was damaged or "
                            "not written by fedaccel")


def read_diagnostics_rows(file: Path, *, last_round: int | None = None,
                          damage_past: int | None = None) -> tuple[list[dict[str, Any]], bool]:
    """:func:`read_rows` of a ``diagnostics.jsonl``, each row also checked by :func:`check_diagnostics`."""
    return read_rows(file, last_round=last_round, damage_past=damage_past, check=check_diagnostics)


CLIENT_SCORES = ("distance", "gsnr", "n", "steps")  # per client, numbers (or null): under clients.<id> or <key>.<id>
MAX_STEPS = 10_000_000  # local steps of one client in one round (the width of a heat map of selected steps)


def check_diagnostics(file: Path, row: dict[str, Any]) -> None:
    """The values of a diagnostics row that readers use have their types: ``clients`` maps ids to
    mappings, per-client scores are numbers (or null), ``tau`` a count of steps, ``selected``
    step indices (:func:`client_value_fits`, the check the server's gate applies to a client's reply)."""
    clients = row.get("clients") or {}
    if not isinstance(clients, dict) or not all(isinstance(v, dict) for v in clients.values()):
        raise UserError(f"{file}: round {row['round']}: 'clients' is {shown(clients, 60)}, not a mapping of client "
                        "ids to values: the file was damaged or not written by fedaccel")
    found = [(c, k, v) for c, values in clients.items() for k, v in values.items()]
    found += [(c, key, v) for key in CLIENT_SCORES if isinstance(row.get(key), dict) for c, v in row[key].items()]
    for client, key, value in found:
        if not client_value_fits(key, value):
            raise UserError(f"{file}: round {row['round']}: {key} of client {shown(client, 40)} is {shown(value, 60)}, "
                            "not what fedaccel writes there: the file was damaged or not written by fedaccel")


def client_value_fits(key: Any, value: Any) -> bool:
    """Whether ``value``, recorded as a client's diagnostic ``key``, is what the readers take there: a number (or
    null) for a score (:data:`CLIENT_SCORES`), a count of steps for ``tau``, step indices for ``selected``;
    anything for other keys. One check for both ends: :func:`check_diagnostics` applies it to the rows read
    back, and the server's gate (:func:`fedaccel.flower.gate.check_diag`) to a client's reply, so a reply the
    gate takes never makes a run folder that its readers refuse."""
    if key == "selected":
        return isinstance(value, list) and _counts(value, MAX_STEPS - 1)
    if key == "tau":
        return _count(value, MAX_STEPS)
    if key in CLIENT_SCORES:
        return value is None or isinstance(value, (int, float)) and not isinstance(value, bool)
    return True


def _count(value: Any, most: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= most


def _counts(values: list[Any], most: int) -> bool:
    """Every item a :func:`_count`: the types, the least and the largest in C (a BHerd run's selected steps are
    millions of items), the same answer for what JSON gives (its integers are ``int``, its booleans ``bool``)."""
    return not values or set(map(type, values)) == {int} and min(values) >= 0 and max(values) <= most


def json_reason(exc: ValueError) -> str:
    text = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
    return text.splitlines()[0][:120] if text else type(exc).__name__


def check_no_gap(file: Path, rows: list[dict], every: Any, *, through: int | None = None) -> None:
    """Every evaluation round up to the last row (or up to ``through``) is there: rounds ``every``, ``2 every``,
    ... and ``train.rounds`` (round 0 may be absent; rows off this rhythm, e.g. a diverging round, may be
    present). A run with a gap lost rows (a rewrite cut short) and is refused, naming the round.
    Rows increase, so one pass over them finds the first missing round, whatever the round numbers. ``every``: the
    config's ``eval.every`` (anything else: a hand-made folder, nothing to check against). ``through``: the last
    round whose row must be there even if no row follows it (a checkpoint's rounds before its own: a
    ``metrics.jsonl`` emptied under a checkpoint of round 12 lost rounds 1 to 11)."""
    last = through if through is not None else rows[-1]["round"] if rows else None
    if not isinstance(every, int) or isinstance(every, bool) or every < 1 or last is None:
        return  # not a fedaccel config (hand-made folders): nothing to check against
    due = every  # the next evaluation round that must have a row
    for row in rows:
        if row["round"] > due:
            break
        if row["round"] == due:
            due += every
    if due <= last:  # (train.rounds, the last row, bounds the rows: read_rows)
        more = due + every <= last
        raise UserError(
            f"{file}: round {due} is missing (eval.every = {every}){' and more' if more else ''}; "
            "its rows were lost: resume the run from an earlier checkpoint or run it again"
        )


def finite_or_null(value: Any) -> Any:
    """``value`` with every NaN or infinite float as None: ``summary.json`` is standard JSON (a diverged run's last
    row holds NaN losses, which JavaScript's and jq's readers refuse; ``"diverged": true`` says what they were)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite_or_null(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_or_null(v) for v in value]
    return value


def summary_text(summary: dict[str, Any]) -> str:
    """``summary.json``'s text: standard JSON (:func:`finite_or_null`)."""
    return json.dumps(finite_or_null(summary), indent=1, allow_nan=False)
