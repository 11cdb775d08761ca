"""Where a grid (or a reproduction's grids) is: the experiment, the cells running, an ETA.

At a terminal (stderr a TTY) :class:`GridProgress` draws an overall bar over the cells to run (its time left:
the rounds left at the pace of the rounds run since the grid first saw one, where the caller gives the rounds,
else tqdm's, from the cells done so far)
and one line per running cell with its rounds, read
from the cell's ``metrics.jsonl`` (so it works for ``-j`` workers and Ray tasks alike). Anywhere
else (CI logs, a pipe) it prints plain lines instead: one when a cell starts and one when it
ends, with the cells done, the time spent and the time left (the rounds left at the rounds' pace so far, where the
caller gives the rounds), and every half minute the rounds: a cell run in
this process says its own (:mod:`fedaccel.runs.progress`), and the cells of ``-j`` workers and Ray tasks are
read from their folders into one line (``20 cells running, at round 441-448 of 500``) — never a bar.

Example:
    >>> progress = GridProgress(cells=3)                               # doctest: +SKIP
    >>> progress.experiment("demo", grid_size=3)
    >>> progress.start(1, "algorithm=fedavg", run_dir, rounds=30); ...; progress.end(1, "algorithm=fedavg")
"""

from __future__ import annotations

import itertools
import sys
import time
from pathlib import Path
from typing import IO, Any

from fedaccel.disk import NotAFile, open_regular
from fedaccel.grids.suspend import suspended_s
from fedaccel.runs.progress import EVERY_S, on_terminal
from fedaccel.runs.rows import parse_json


class GridProgress:
    """Progress over ``cells`` cells to run (finished ones are only mentioned, not counted)."""

    def __init__(self, cells: int, *, bars: bool | None = None, stream: IO[str] | None = None,
                 rounds: int | None = None) -> None:
        """``rounds``: the rounds the cells to run have left (:func:`rounds_left`); the time left is then the
        rounds left at the pace of the rounds run since the grid first saw one (a resumed cell counts from its last
        row), not the cells left at the cells' pace (which cells resumed half-way mislead): the start-up before
        (Ray's, the first workers' and their data's) is not a round's, and made a Ray grid of 1,500-round cells say
        "about 1234 min left", then 70."""
        self.stream = stream or sys.stderr
        self.bars = on_terminal(self.stream) if bars is None else bars
        self.cells, self.ended, self.skipped, self.failed = cells, 0, 0, 0
        self.rounds = rounds
        self._rounds_of: dict[int, tuple[Path, int, int]] = {}  # k -> (run folder, round it started at, rounds)
        self._rounds_ended = 0  # rounds the ended cells ran here
        self._first: dict[int, int] = {}  # k -> the last round in a queued cell's folder when it was queued
        self._running_read: tuple[float, int] | None = None  # (when, rounds the running cells had run)
        self._paced_from: tuple[float, int] | None = None  # (time spent, rounds run) when the grid first saw a round
        self.rows_read_every_s = 1.0
        self.name, self.grid_size = "", 0
        self.place: tuple[int, int] | None = None  # (i, n): the i-th of a reproduction's n experiments
        self.began = time.perf_counter()
        self._suspended_before = suspended_s()  # Ctrl-Z stops before this grid (fedaccel.grids.suspend)
        self._stopped_shown = 0.0  # seconds of this grid's stops already taken out of the bar's time spent
        self.titles: dict[str, str] = {}  # cell (folder) name -> what its lines call it (see name_cells)
        self._running: dict[int, tuple[str, Path, Any]] = {}  # k -> (cell name, run folder, its line)
        self._queued: dict[int, tuple[str, Path, int, str]] = {}
        self._overall: Any = None
        self._polled = 0.0
        self._followed: dict[int, tuple[Path, int]] = {}  # without bars: k -> (run folder, rounds) of a worker's cell
        self._rounds_said = time.perf_counter()
        self._left_shown = 0.0  # when the overall bar's time left was last set (perf_counter)

    # -- what happens ---------------------------------------------------------------------------
    def experiment(self, name: str, grid_size: int) -> None:
        """An experiment (a grid of ``grid_size`` cells) begins (the ``place``-th of a reproduction's)."""
        self.name, self.grid_size = name, grid_size
        where = f" ({self.place[0]}/{self.place[1]})" if self.place else ""
        self._say(f"== experiment {name}{where}: {grid_size} cell{'s' if grid_size != 1 else ''} ==")
        if self._overall is not None:
            self._overall.set_description_str(self._overall_label())

    def name_cells(self, cells: list[tuple[str, Any]]) -> None:
        """Call each cell (folder name, config) by its method's display name, then its folder:
        ``bherd alpha=0.5 in algorithm=bherd-0.5,run.seed=0`` (:func:`fedaccel.runs.names.display_name`,
        the name tables, legends and ``judge`` give it)."""
        from fedaccel.runs.names import display_name

        for cell, config in cells:
            method = display_name(config if isinstance(config, dict) else config.to_dict())
            self.titles[cell] = f"{method} in {cell}" if method and method != cell else cell

    def skip(self, k: int, cell: str) -> None:
        self.skipped += 1
        self._say(f"[{self.name} {k}/{self.grid_size}] {self._title(cell)}: finished earlier, skipped")

    def queue(self, k: int, cell: str, run_dir: Path, rounds: int, *, verb: str = "running") -> None:
        """Cell ``k`` is handed to a worker; it counts as started once it holds its folder's lock
        (:meth:`poll` looks), and its line then follows ``run_dir/metrics.jsonl`` up to ``rounds``."""
        self._queued[k] = (cell, run_dir, rounds, verb)
        self._first[k] = last_round(run_dir) or 0  # a cell that starts and ends between two looks: its rounds count

    def start(self, k: int, cell: str, run_dir: Path, rounds: int, *, verb: str = "running",
              follow: bool = True) -> None:
        """Cell ``k`` starts (``verb``: running or resuming); ``follow``: draw its line from its metrics
        (a cell run in this process draws its own, see :meth:`cell_bar`)."""
        self._queued.pop(k, None)
        first = self._first.pop(k, None)
        self._rounds_of[k] = (run_dir, (last_round(run_dir) or 0) if first is None else first, rounds)
        if not self.bars:
            self._say(f"[{self.name} {k}/{self.grid_size}] {self._title(cell)}: {verb} ({self._tally()})")
            if follow:
                self._followed[k] = (run_dir, rounds)
            return
        overall = self._bar_overall()
        if follow:
            from tqdm import tqdm

            used = {abs(line.pos) for _, _, line in self._running.values()}  # tqdm keeps -position
            position = next(p for p in itertools.count(1) if p not in used)
            line = tqdm(total=rounds, initial=last_round(run_dir) or 0, desc=f"  {self._title(cell)}", unit="round",
                        position=position, leave=False, file=self.stream, dynamic_ncols=True)
            self._running[k] = (cell, run_dir, line)
        overall.refresh()

    def end(self, k: int, cell: str) -> None:
        """Cell ``k`` finished."""
        self.end_together([(k, cell)])

    def end_together(self, cells: list[tuple[int, str]]) -> None:
        """Cells that finished at once (a stacked group): counted before any line is printed, so
        no line of the group promises time left for cells already done."""
        for k, cell in cells:
            if k in self._queued:  # started and ended between two looks
                self.start(k, *self._queued[k][:3], verb=self._queued[k][3])
        self.ended += len(cells)
        self._running_read = None  # the ended cells' rounds move from running to ended
        for k, _ in cells:
            if (cell_rounds := self._rounds_of.pop(k, None)) is not None:
                done = _ran(*cell_rounds)
                self._rounds_ended += done  # the pace: rounds run
                if self.rounds is not None:  # a cell that stopped early (diverged): its rounds not run are not left
                    self.rounds -= cell_rounds[2] - cell_rounds[1] - done
        for k, cell in cells:
            self._followed.pop(k, None)
            if not self.bars:
                self._say(f"[{self.name} {k}/{self.grid_size}] {self._title(cell)}: done ({self._tally()})")
                continue
            _, _, line = self._running.pop(k, (None, None, None))
            if line is not None:
                line.close()
        if self.bars:
            self._bar_overall().update(len(cells))
            self._show_left(now=True)

    def fail(self, k: int, cell: str, line: str) -> None:
        """Cell ``k``'s run raised (``line`` says how): said, counted as failed, its rounds not run no longer left."""
        if self.rounds is not None:
            if (cell_rounds := self._rounds_of.get(k)) is not None:
                self.rounds -= cell_rounds[2] - cell_rounds[1] - _ran(*cell_rounds)
            elif k in self._queued:  # failed before a look saw it start
                self.rounds -= self._queued[k][2] - self._first.get(k, 0)
        self.forget([(k, cell)])
        self.failed += 1
        self._say(f"[{self.name} {k}/{self.grid_size}] {line} ({self._tally()})")
        if self.bars:
            self._bar_overall().update(1)

    def forget(self, cells: list[tuple[int, str]]) -> None:
        """Cells that stopped without finishing (a grid asked to stop): no longer followed, not counted as done."""
        self._running_read = None
        for k, _ in cells:
            self._queued.pop(k, None)
            self._first.pop(k, None)
            self._followed.pop(k, None)
            if (cell_rounds := self._rounds_of.pop(k, None)) is not None:  # what it ran counts; the rest is left
                self._rounds_ended += _ran(*cell_rounds)
            _, _, line = self._running.pop(k, (None, None, None))
            if line is not None:
                line.close()

    def poll(self) -> None:
        """Start the queued cells whose worker took their folder, redraw the running cells' lines
        (at most every half second)."""
        if time.perf_counter() - self._polled < 0.5:
            return
        self._polled = time.perf_counter()
        for k, (cell, run_dir, rounds, verb) in list(self._queued.items()):
            if _locked(run_dir, since=self.began):
                self.start(k, cell, run_dir, rounds, verb=verb)
        for _, run_dir, line in self._running.values():
            last = last_round(run_dir)
            if last is not None and last != line.n:
                line.n = last
                line.refresh()
        self._show_left()
        if self._followed and self._polled - self._rounds_said >= EVERY_S:
            self._rounds_said = self._polled
            self._say(f"[{self.name}] {self._rounds_line()} ({self._tally()})")

    def _rounds_line(self) -> str:
        """``20 cells running, at round 441-448 of 500``: where the workers' cells are, read from their folders."""
        at = sorted(last_round(run_dir) or 0 for run_dir, _ in self._followed.values())
        totals = sorted({rounds for _, rounds in self._followed.values()})
        span = f"{at[0]}" if at[0] == at[-1] else f"{at[0]}-{at[-1]}"
        of = f"{totals[0]}" if len(totals) == 1 else f"{totals[0]}-{totals[-1]}"
        return f"{len(at)} cell{'s' * (len(at) != 1)} running, at round {span} of {of}"

    def cell_bar(self, cell: str, progress: Any = None) -> Any:
        """``progress`` for ``run_loop`` of a cell run in this process: with bars, a class with
        tqdm's interface drawing its rounds on the line under the overall bar; without (a log), one
        that prints the cell's round every half minute only (:class:`~fedaccel.runs.progress.RoundLines`:
        a short cell says nothing between its start and end lines)."""
        if progress is False:
            return progress
        if not self.bars:
            from fedaccel.runs.progress import RoundLines

            stream, name, title = self.stream, self.name, self._title(cell)

            def lines(total: int, initial: int, desc: str) -> Any:
                return RoundLines(total, initial, f"[{name}] {title}", stream=stream)

            lines.announce = False  # type: ignore[attr-defined]  # run_loop's first line: the grid's start line says it
            return lines
        from tqdm import tqdm

        self._bar_overall()
        stream = self.stream

        report = self

        class CellBar(tqdm):  # type: ignore[misc, valid-type]
            def update(self, n: float | None = 1) -> bool | None:
                shown = super().update(n)
                report._show_left()  # the overall bar's time left moves with this cell's rounds
                return shown

        def bar(total: int, initial: int, desc: str) -> Any:
            return CellBar(total=total, initial=initial, desc=f"  {self._title(cell)}", unit="round", position=1,
                           leave=False, file=stream, dynamic_ncols=True)

        return bar

    def close(self) -> None:
        for _, _, line in self._running.values():
            line.close()
        self._running.clear()
        if self._overall is not None:
            self._overall.close()
            self._overall = None

    # -- helpers --------------------------------------------------------------------------------
    def _tally(self) -> str:
        """``2/6 cells done, 1.5 min, about 3.0 min left`` (no ETA before a round is run, or where the rounds are not
        known before a cell ends); where cells finished earlier were skipped, ``2/6 cells to run done (3 finished
        earlier)``: the line's [k/N] counts every cell."""
        elapsed = self._spent()
        earlier = f" to run done ({self.skipped} finished earlier)" if self.skipped else " done"
        text = f"{self.ended}/{self.cells} cells{earlier}{f', {self.failed} failed' if self.failed else ''}, " \
               f"{_minutes(elapsed)}"
        left = self._left(elapsed)
        if left is not None:
            text += f", about {_minutes(left)} left"
        elif self.ended and self.rounds is None:
            text += f", about {_minutes(elapsed / self.ended * (self.cells - self.ended - self.failed))} left"
        return text

    def _spent(self) -> float:
        """Seconds since the grid began, less those it spent stopped by Ctrl-Z (:mod:`fedaccel.grids.suspend`)."""
        return time.perf_counter() - self.began - (suspended_s() - self._suspended_before)

    def _left(self, elapsed: float) -> float | None:
        """Seconds left: the rounds left at the pace of the rounds run here since the grid first saw one (None where
        the rounds are not known, or no round has run since)."""
        done = self._rounds_done() if self.rounds is not None else 0
        if not done:
            return None
        if self._paced_from is None:
            self._paced_from = (elapsed, done)
        since, before = self._paced_from
        if done == before or elapsed <= since:
            return None
        return (elapsed - since) / (done - before) * max(0, self.rounds - done)  # type: ignore[operator]

    def _show_left(self, *, now: bool = False) -> None:
        """The overall bar's time left, where the rounds give it (tqdm's own counts cells, which resumed cells
        mislead): ``[01:30, about 3.0 min left]``; set at most every half second (a cell's rounds may take
        milliseconds) unless ``now``, and redrawn only when its text changes."""
        if self._overall is None or getattr(self._overall, "disable", False):
            return  # no bar, or tqdm turned off (TQDM_DISABLE: a bar without a postfix)
        stopped = suspended_s() - self._suspended_before
        if stopped > self._stopped_shown:  # the bar's time spent leaves a Ctrl-Z stop out too
            self._overall.start_t += stopped - self._stopped_shown
            self._stopped_shown = stopped
        if self.rounds is None:
            return  # tqdm's own time left (the cells'), from the same time spent
        clock = time.perf_counter()
        if not now and clock - self._left_shown < 0.5:
            return
        self._left_shown = clock
        left = self._left(self._spent())
        text = "" if left is None else f"about {_minutes(left)} left"
        if text != (self._overall.postfix or ""):
            self._overall.set_postfix_str(text, refresh=True)

    def _rounds_done(self) -> int:
        """Rounds run here so far: the ended cells' and the running cells' (read from their folders at most once a
        second: a burst of start lines, hundreds of Ray cells, reads them once; a cell starting adds none)."""
        now = time.perf_counter()
        if self._running_read is None or now - self._running_read[0] >= self.rows_read_every_s:
            running = sum(_ran(*cell_rounds) for cell_rounds in self._rounds_of.values())
            self._running_read = (now, running)
        return self._rounds_ended + self._running_read[1]

    def _title(self, cell: str) -> str:
        return self.titles.get(cell, cell)

    def _overall_label(self) -> str:
        return f"{self.name}" if self.name else "cells"

    def _bar_overall(self) -> Any:
        if self._overall is None:
            from tqdm import tqdm

            rounds_paced = {} if self.rounds is None else {  # the time left is ours (_show_left), not tqdm's
                "bar_format": "{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} cells [{elapsed}{postfix}]"}
            self._overall = tqdm(total=self.cells, desc=self._overall_label(), unit="cell", position=0,
                                 file=self.stream, dynamic_ncols=True, **rounds_paced)
            self._stopped_shown = suspended_s() - self._suspended_before  # stops before the bar: not in its clock
        return self._overall

    def _say(self, text: str) -> None:
        if self.bars:
            from tqdm import tqdm

            tqdm.write(text, file=self.stream)
        else:
            print(text, file=self.stream, flush=True)


def _ran(run_dir: Path, first: int, total: int) -> int:
    """Rounds a cell that started at round ``first`` of ``total`` has run, by the rows in its folder."""
    return max(0, min(total, last_round(run_dir) or 0) - first)


def rounds_left(cells: list[tuple[Path, int]]) -> int:
    """The rounds ``(run folder, rounds)`` cells have left: each cell's rounds less those its folder already has."""
    return sum(max(0, rounds - (last_round(run_dir) or 0)) for run_dir, rounds in cells)


def last_round(run_dir: Path) -> int | None:
    """The round of the last complete line of ``run_dir/metrics.jsonl`` (None before the first)."""
    try:
        with open_regular(run_dir / "metrics.jsonl") as file:  # a FIFO there: no round, never a hang
            file.seek(0, 2)
            size = file.tell()
            file.seek(max(0, size - 65536))
            tail = file.read().decode(errors="replace")
    except (OSError, NotAFile):
        return None
    for line in reversed(tail.splitlines()[-3:] if tail.endswith("\n") else tail.splitlines()[-4:-1]):
        try:
            return int(parse_json(line)["round"])
        except (ValueError, KeyError, TypeError, OverflowError):  # a damaged or crafted line: the one before
            continue
    return None


def _locked(run_dir: Path, since: float) -> bool:
    """A writer took the folder after ``since`` (``perf_counter``): it wrote its PID into the lock
    file (a release empties it; one killed leaves its PID, but with an older time). Only a look:
    taking the lock to test it could refuse the worker that takes it at that moment."""
    try:
        stat = (run_dir / ".lock").stat()
    except OSError:
        return False
    return stat.st_size > 0 and stat.st_mtime >= time.time() - (time.perf_counter() - since) - 1


def _minutes(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min"
