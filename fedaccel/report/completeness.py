"""Whether a grid's evidence is complete: every cell of its experiment file run to its budget.

A grid folder holds ``experiment.yaml`` (the experiment file, copied beside its runs), so its cells
are known without running anything (:mod:`fedaccel.grids.gaps` reads them): :func:`grid_gaps` names
each cell that is **missing** (no run
folder, or one without rounds), **failed** (an error stopped its rounds: its ``error.txt``), **unfinished**
(stopped before its configured rounds without diverging: an interrupted grid) or **running** (another process holds its lock,
:func:`fedaccel.runs.lock.holder`). A run that diverged is complete: it counts as its whole budget.

``fedaccel judge`` refuses verdicts that depend on such a cell (``--partial`` judges the complete
pairs only and says so); ``compare``, ``plot`` and the grid's table name them in one line
(:func:`gaps_line`) and never count an unfinished run's last round as "never reached".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedaccel.errors import listed
from fedaccel.report.reading import Run, value_at
from fedaccel.runs.folder import ERROR_FILE


@dataclass(frozen=True)
class Gap:
    """A cell whose run cannot be used as it is: ``why`` is missing, failed (an error stopped it), unfinished or
    running."""

    cell: str
    why: str
    detail: str = ""  # e.g. "round 18 of 30", "process 4242"


def budget(run: Run) -> int | None:
    """The run's configured rounds (None for a folder that does not say)."""
    rounds = value_at(run.config, "train.rounds")
    return rounds if isinstance(rounds, int) and not isinstance(rounds, bool) else None


def last_recorded(run: Run) -> int:
    return max((int(r["round"]) for r in run.metrics), default=0)


def finished(run: Run) -> bool:
    """Whether the run ended: it recorded its last configured round, or it diverged (which counts as its
    whole budget). A folder without ``train.rounds`` is finished unless its summary says otherwise."""
    if run.summary and run.summary.get("diverged"):  # not a run without one whose rows went NaN: it may be cut short
        return True
    rounds = budget(run)
    if rounds is None:
        return run.summary is None or bool(run.summary.get("finished", True))
    return last_recorded(run) >= rounds


def run_gap(run: Run) -> Gap | None:
    """Why ``run`` is not complete evidence (running, unfinished), or None."""
    from fedaccel.runs.lock import holder

    pid = holder(run.path)
    if pid is not None:
        return Gap(run.path.name, "running", f"process {pid}")
    if not finished(run):
        rounds = budget(run)
        where = f"round {last_recorded(run)}" + (f" of {rounds}" if rounds else "")
        if (run.path / ERROR_FILE).is_file():  # its rounds stopped on an error (fedaccel.runs.loop.keep_error)
            return Gap(run.path.name, "failed", f"{where}, its {ERROR_FILE}")
        return Gap(run.path.name, "unfinished", where)
    return None


def grid_gaps(folder: Path, cells: Sequence[tuple[str, Any]] | None, runs: Sequence[Run]) -> tuple[list[Gap], int]:
    """The gaps of a grid: its ``cells`` (names first; :func:`fedaccel.grids.gaps.copied_cells`) without a
    run in ``folder``, and the
    ``runs`` that are unfinished or running, in the grid's order (else by name); with the number of cells (or runs)
    looked at."""
    have = {run.path.name for run in runs if run.path.parent.resolve() == folder.resolve()}
    order = {name: k for k, (name, _) in enumerate(cells or [])}
    missing = [Gap(name, "missing") for name, _ in cells or [] if name not in have]
    gaps = missing + [gap for gap in map(run_gap, runs) if gap is not None]
    return sorted(gaps, key=lambda gap: (order.get(gap.cell, len(order)), gap.cell)), len(runs) + len(missing)


def gaps_line(gaps: Sequence[Gap], total: int) -> str:
    """One line naming the incomplete cells, grouped by why (empty when there are none)."""
    if not gaps:
        return ""
    parts = []
    for why in ("missing", "failed", "unfinished", "running"):
        named = [listed([g.cell]) + (f" ({g.detail})" if g.detail else "") for g in gaps if g.why == why]
        if named:  # a long cell name is cut, its detail (the round, its error.txt) never
            parts.append(f"{why} {listed(named, width=None)}")
    return f"{len(gaps)} of {total} cells incomplete: {'; '.join(parts)}"
