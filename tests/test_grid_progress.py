"""Grid progress: which experiment and cell run, how many are done, and the time left."""

from __future__ import annotations

import io
import json
import os
import re
import time
from pathlib import Path

import pytest
import yaml

from fedaccel.grids.experiment import load_experiment, run_experiment
from fedaccel.grids.progress import GridProgress, last_round, rounds_left


def test_plain_lines_name_the_experiment_the_cell_and_the_time_left(tmp_path: Path, capsys) -> None:
    """Off a terminal (CI logs): a line as each cell starts and ends, the ETA once one has ended."""
    path = tmp_path / "exp.yaml"
    base = {"data": {"dataset": "digits", "clients": 2}, "model": "svm", "train": {"rounds": 2, "batch_size": 20},
            "run": {"progress": False}}
    path.write_text(yaml.safe_dump({"name": "tiny", "out_dir": str(tmp_path / "out"), "base": base,
                                    "grid": {"run.seed": [0, 1]}}))
    run_experiment(load_experiment(path), progress=False)
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "== experiment tiny: 2 cells =="
    assert re.fullmatch(r"\[tiny 1/2\] fedavg in run\.seed=0: running \(0/2 cells done, \d+ s\)", err[1]), err
    # no time left yet: the first rounds the grid sees start its pace (the start-up before them is no round's)
    assert re.fullmatch(r"\[tiny 1/2\] fedavg in run\.seed=0: done \(1/2 cells done, \d+ s\)", err[2]), err
    assert err[3].startswith("[tiny 2/2] fedavg in run.seed=1: running (1/2 cells done, ")
    assert err[4].startswith("[tiny 2/2] fedavg in run.seed=1: done (2/2 cells done, ") and err[4].endswith(", about 0 s left)")

    run_experiment(load_experiment(path), progress=False)
    assert capsys.readouterr().err.splitlines()[1:] == ["[tiny 1/2] fedavg in run.seed=0: finished earlier, skipped",
                                                        "[tiny 2/2] fedavg in run.seed=1: finished earlier, skipped"]
    # one cell to run again: its count is over the cells to run, and says the others finished earlier ([2/2]: of all)
    (tmp_path / "out" / "run.seed=1" / "summary.json").unlink()
    run_experiment(load_experiment(path), progress=False)
    err = capsys.readouterr().err.splitlines()
    assert err[2].startswith("[tiny 2/2] fedavg in run.seed=1: ") and "(0/1 cells to run done (1 finished earlier), " in err[2]


def test_a_stacked_group_ends_together_and_promises_no_time_for_its_own_cells(tmp_path: Path, capsys) -> None:
    """--stack-seeds: the seeds of a group end at once; every one of their done lines counts the whole group
    (before, the first of a group of 3 said "1/6 cells done, about 2 min left" with the group's other two finished)."""
    path = tmp_path / "exp.yaml"
    base = {"data": {"dataset": "digits", "clients": 2}, "model": "svm", "train": {"rounds": 2, "batch_size": 20},
            "run": {"progress": False}}
    path.write_text(yaml.safe_dump({"name": "tiny", "out_dir": str(tmp_path / "out"), "base": base,
                                    "grid": {"train.lr": [0.1, 0.05], "run.seed": [0, 1, 2]}}))
    run_experiment(load_experiment(path), progress=False, stack_seeds=True)
    done = [line for line in capsys.readouterr().err.splitlines() if ": done (" in line]
    assert len(done) == 6
    assert all("(3/6 cells done, " in line for line in done[:3]), done
    assert all("(6/6 cells done, " in line and line.endswith(", about 0 s left)") for line in done[3:]), done
    assert not any("left" in line for line in done[:3])  # one look for the group: the pace starts there


def rows_to(folder: Path, first: int, last: int) -> Path:
    """A cell folder whose metrics hold rounds ``first``..``last``."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "metrics.jsonl", "a") as file:
        file.writelines(json.dumps({"round": r, "test_acc": 0.5}) + "\n" for r in range(first, last + 1))
    return folder


def test_the_time_left_is_the_rounds_left_at_the_pace_of_the_rounds_run_here(tmp_path: Path) -> None:
    """svm_case2, resumed with 100 of its 240 cells to run, 20 of them at round ~350 of 500, said "20/100 cells to
    run done, 12.8 min, about 51 min left" once those 20 ended: cells that ended quickly because they resumed
    half-way set the pace of all. Now the rounds do: the rounds left over the rounds run here so far, a resumed
    cell counted from its last row, a running cell by the rows in its folder."""
    resumed, fresh = rows_to(tmp_path / "resumed", 0, 300), tmp_path / "fresh"
    progress = GridProgress(2, bars=False, stream=io.StringIO(), rounds=rounds_left([(resumed, 500), (fresh, 500)]))
    progress.rows_read_every_s = 0  # read the folders at every line (at most once a second otherwise)
    assert progress.rounds == 200 + 500
    progress.experiment("g", 2)
    progress.start(1, "resumed", resumed, 500)
    assert "left" not in progress._tally()  # no round run here yet: no pace
    rows_to(resumed, 301, 400)
    progress.began = time.perf_counter() - 60  # the first look at rounds run: the pace starts here, after 60 s
    assert "left" not in progress._tally()  # (of start-up, as far as the pace can tell)
    rows_to(resumed, 401, 500)
    progress.end(1, "resumed")
    progress.start(2, "fresh", rows_to(fresh, 0, 0), 500)
    progress.began = time.perf_counter() - 160  # 100 rounds more in 100 s since; 500 left
    assert progress._tally() == "1/2 cells done, 2.7 min, about 8.3 min left"
    rows_to(fresh, 1, 300)
    assert progress._tally() == "1/2 cells done, 2.7 min, about 50 s left"  # 400 rounds in 100 s; 200 left


def test_a_cell_that_stopped_early_or_ran_between_two_looks_counts_the_rounds_it_ran(tmp_path: Path) -> None:
    """A cell that diverged at round 5 of 500 ran 5 rounds, not 500 (its 495 others are no longer left); a -j
    worker's cell that started and ended between two looks counts from its folder's rows when it was queued."""
    diverged, quick = rows_to(tmp_path / "diverged", 0, 0), tmp_path / "quick"
    progress = GridProgress(2, bars=False, stream=io.StringIO(), rounds=rounds_left([(diverged, 500), (quick, 500)]))
    progress.experiment("g", 2)
    progress.start(1, "diverged", diverged, 500)
    rows_to(diverged, 1, 5)
    progress.end(1, "diverged")
    assert (progress.rounds, progress._rounds_done()) == (505, 5)
    progress.queue(2, "quick", quick, 500)
    rows_to(quick, 0, 500)  # ran whole before the next look
    progress.end(2, "quick")
    assert (progress.rounds, progress._rounds_done()) == (505, 505)
    assert progress._tally().endswith("about 0 s left")


def test_a_burst_of_start_lines_reads_the_running_cells_folders_once(tmp_path: Path, monkeypatch) -> None:
    """Hundreds of Ray cells starting at once: each start line gives the time left, from the rows of every running
    cell; those are read at most once a second, not once per line (which was quadratic in the cells)."""
    import fedaccel.grids.progress as progress_module

    cells = [(rows_to(tmp_path / f"c{k}", 0, 0), 500) for k in range(200)]
    progress = GridProgress(len(cells), bars=False, stream=io.StringIO(), rounds=rounds_left(cells))
    progress.experiment("g", len(cells))
    reads = []
    monkeypatch.setattr(progress_module, "last_round", lambda run_dir: reads.append(run_dir) or 0)
    for k, (run_dir, rounds) in enumerate(cells, start=1):
        progress.start(k, run_dir.name, run_dir, rounds)
    assert len(reads) < 3 * len(cells)  # each start's own look, and the running cells' rows once or twice


def fake_cell(folder: Path, last: int, pid: int = 12345) -> Path:
    """A cell folder as a worker leaves it mid-run: its PID in the lock, rounds 0..last written."""
    folder.mkdir(parents=True)
    (folder / ".lock").write_text(f"{pid}\n")
    (folder / "metrics.jsonl").write_text("".join(json.dumps({"round": r, "test_acc": 0.5}) + "\n"
                                                  for r in range(last + 1)) + '{"round": 9')  # half-written
    return folder


def test_bars_show_one_line_per_running_cell_with_its_rounds(tmp_path: Path) -> None:
    """At a terminal, -j/--ray: the overall bar, and a line per cell once its worker took its folder
    (the lock holds a PID written since the grid began), following the rounds in its metrics; a
    queued cell has no line yet."""
    stream = io.StringIO()
    progress = GridProgress(3, bars=True, stream=stream)
    progress.place = (2, 7)
    progress.experiment("fig3_alpha", 3)
    a, b = fake_cell(tmp_path / "alpha=0.1", 4), fake_cell(tmp_path / "alpha=0.5", 7)
    progress.queue(1, "alpha=0.1", a, rounds=20)
    progress.queue(2, "alpha=0.5", b, rounds=20)
    stale = fake_cell(tmp_path / "alpha=1.0", 2)  # a killed run's PID left in the lock, from before this grid
    os.utime(stale / ".lock", (time.time() - 3600, time.time() - 3600))
    progress.queue(3, "alpha=1.0", stale, rounds=20)
    progress.queue(4, "alpha=2.0", tmp_path / "alpha=2.0", rounds=20)  # no folder yet
    progress.poll()
    shown = stream.getvalue()
    assert "== experiment fig3_alpha (2/7): 3 cells ==" in shown
    assert re.search(r"alpha=0\.1:\s+20%.*4/20", shown) and re.search(r"alpha=0\.5:\s+35%.*7/20", shown), shown
    assert "alpha=1.0" not in shown and "alpha=2.0" not in shown and "fig3_alpha:   0%" in shown and "0/3" in shown
    progress.end(1, "alpha=0.1")
    progress.close()
    assert "1/3" in stream.getvalue()


def test_in_a_log_the_workers_cells_say_their_rounds_every_half_minute(tmp_path: Path, monkeypatch) -> None:
    """-j N or Ray into a log: between a cell's start and end lines, one line every EVERY_S seconds says where the
    running cells are (read from their folders), so a long stacked group is not silent for its whole time."""
    import fedaccel.grids.progress as progress

    stream = io.StringIO()
    report = GridProgress(3, bars=False, stream=stream)
    report.experiment("grid", 3)
    cells = {k: fake_cell(tmp_path / f"c{k}", last) for k, last in ((1, 41), (2, 44), (3, 7))}
    for k, folder in cells.items():
        report.queue(k, folder.name, folder, 500)
    monkeypatch.setattr(progress, "EVERY_S", 3600.0)
    report.poll()  # the three start: their lines, no rounds line before EVERY_S
    assert [line for line in stream.getvalue().splitlines() if "running, at round" in line] == []
    report.end(3, "c3")
    monkeypatch.setattr(progress, "EVERY_S", 0.0)
    report._polled = 0.0  # poll looks at most every half second
    report.poll()
    said = [line for line in stream.getvalue().splitlines() if "running, at round" in line]
    assert len(said) == 1 and said[0].startswith("[grid] 2 cells running, at round 41-44 of 500 (1/3 cells done, "), said
    report.forget([(2, "c2")])  # stopped by a stop request: not running, not done
    report._polled = 0.0
    report.poll()
    said = [line for line in stream.getvalue().splitlines() if "running, at round" in line]
    assert said[-1].startswith("[grid] 1 cell running, at round 41 of 500 (1/3 cells done, "), said


def test_last_round_skips_a_half_written_line(tmp_path: Path) -> None:
    assert last_round(fake_cell(tmp_path / "c", 5)) == 5
    assert last_round(tmp_path / "none") is None


@pytest.mark.slow
def test_reproduce_names_each_experiment_and_counts_cells_over_all_of_them(tmp_path: Path, monkeypatch,
                                                                             capsys) -> None:
    """Two tiny experiment files stand in for a paper's: each is announced with its place, and the
    cells done and the time left run over both."""
    import fedaccel.reproductions.reproduce as reproduce_module

    folder = tmp_path / "experiments" / "bherd" / "quick"
    folder.mkdir(parents=True)
    base = {"data": {"dataset": "digits", "clients": 2}, "model": "svm", "train": {"rounds": 1, "batch_size": 20}}
    for stem in ("first", "second"):
        (folder / f"{stem}.yaml").write_text(f"# {stem}\n" + yaml.safe_dump({"base": base, "grid": {"run.seed": [0]}}))
    monkeypatch.setattr(reproduce_module, "ROOT", tmp_path)
    reproduce_module.reproduce("bherd", out_root=tmp_path / "runs", docs=tmp_path / "docs", progress=False)
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith(("==", "["))]
    assert err[0] == "== experiment first (1/2): 1 cell =="
    assert err[1].startswith("[first 1/1] fedavg in run.seed=0: running (0/2 cells done, ")
    assert err[2].startswith("[first 1/1] fedavg in run.seed=0: done (1/2 cells done, ")
    assert err[3] == "== experiment second (2/2): 1 cell =="
    assert err[4].startswith("[second 1/1] fedavg in run.seed=0: running (1/2 cells done, ")


def test_in_a_log_a_grid_prints_its_cells_lines_and_no_bar(tmp_path: Path, capsys) -> None:
    """stderr not a terminal, progress left on (run.progress true): the start and end line of each cell
    and nothing else from its run (no bar, no carriage returns, no run line)."""
    path = tmp_path / "exp.yaml"
    base = {"data": {"dataset": "digits", "clients": 2}, "model": "svm", "train": {"rounds": 3, "batch_size": 20}}
    path.write_text(yaml.safe_dump({"name": "tiny", "out_dir": str(tmp_path / "out"), "base": base,
                                    "grid": {"algorithm": ["fedavg", "fedprox"]}}))
    run_experiment(load_experiment(path))
    err = capsys.readouterr().err
    assert "\r" not in err
    lines = err.splitlines()
    assert lines[0] == "== experiment tiny: 2 cells ==" and len(lines) == 1 + 2 * 2, lines
    assert all(re.match(r"\[tiny [12]/2\] fedprox in algorithm=fedprox|\[tiny [12]/2\] fedavg in algorithm=fedavg", line) for line in lines[1:])


def test_round_lines_come_every_half_minute_at_most() -> None:
    """A run in a log: a line when 30 s passed since the last, none for a short run, none at the end."""
    from fedaccel.runs.progress import RoundLines

    now = [0.0]
    stream = io.StringIO()
    lines = RoundLines(total=100, initial=0, desc="[g] fedavg", stream=stream, clock=lambda: now[0])
    for _ in range(99):
        now[0] += 1.0
        lines.set_postfix(acc="0.9000", refresh=False)
        lines.update(1)
    lines.update(1)
    lines.close()
    assert stream.getvalue().splitlines() == [f"[g] fedavg: round {r}/100, acc 0.9000 ({r} s)" for r in (30, 60, 90)]


def test_a_run_into_a_log_writes_no_bar(tmp_path: Path, capsys) -> None:
    """``fedaccel run > log``: its first line and its result, no per-round bar updates."""
    from fedaccel.cli import main

    out = tmp_path / "run"
    assert main(["run", "--set", "data.dataset=digits", "--set", "model=svm", "--set", "data.clients=2",
                 "--set", "train.rounds=4", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "\r" not in err and "round/s" not in err
    assert len(err.splitlines()) == 1 and "rounds 1-4 -> " in err, err


def test_a_deployment_says_where_it_is_until_its_first_round(tmp_path: Path, capsys) -> None:
    """``fedaccel deploy`` before the first round (processes, data, round 0): a line when 5 s passed in
    silence; none once the rounds come, none with --no-progress."""
    from fedaccel.flower.deploy import HEARTBEAT_S, Stream
    from fedaccel.runs.progress import RoundLines

    log = tmp_path / "flwr-run.log"
    stream = Stream(log, RoundLines(10, 0, "fedavg"))
    stream.heartbeat()
    assert capsys.readouterr().err == ""
    stream.said -= HEARTBEAT_S
    stream.heartbeat()
    err = capsys.readouterr().err
    assert err.startswith("fedaccel deploy: waiting for the first round (") and err.count("\n") == 1
    stream.said -= HEARTBEAT_S
    stream.heartbeat()
    assert capsys.readouterr().err.startswith("fedaccel deploy: still waiting for the first round (")
    log.write_text("fedaccel server: round 1/10  test_acc 0.5000  (1.0 s)\n")
    stream.follow()
    stream.said -= HEARTBEAT_S
    stream.heartbeat()
    assert "waiting" not in capsys.readouterr().err
    quiet = Stream(log, RoundLines(10, 0, "fedavg"), quiet=True)
    quiet.said -= HEARTBEAT_S
    quiet.heartbeat()
    assert capsys.readouterr().err == ""


def test_a_heartbeat_fills_every_silence_longer_than_its_interval_and_only_those() -> None:
    """`reproduce --render-only` drew figures of 5-10 s each in silence: a heartbeat says where it is
    whenever its interval passes with no other line."""
    import time

    from fedaccel.runs.progress import Heartbeat

    lines: list[tuple[float, str]] = []
    start = time.monotonic()
    with Heartbeat(lambda text: lines.append((time.monotonic(), text)), lambda s: f"still ({s:.1f} s)",
                   every_s=0.1) as beat:
        time.sleep(0.55)  # one silent step
        beat.say("a step")
    beats = [text for _, text in lines if text.startswith("still")]
    gaps = [b - a for a, b in zip([start, *[t for t, _ in lines]], [t for t, _ in lines])]
    assert len(beats) >= 4 and lines[-1][1] == "a step" and max(gaps) < 0.4  # the thread looks every 25 ms

    told: list[str] = []
    with Heartbeat(told.append, lambda s: "still", every_s=0.5) as beat:
        for k in range(10):
            beat.say(f"step {k}")
            time.sleep(0.02)
    assert told == [f"step {k}" for k in range(10)]  # never a beat while lines come often enough


def test_the_overall_bar_gives_the_rounds_paced_time_left_not_the_cells_paced(tmp_path: Path) -> None:
    """At a terminal, the overall bar's time left is the log's (the rounds left at the rounds' pace), not tqdm's
    (the cells left at the cells' pace, which a cell resumed at round 400 of 500 made look five times too fast)."""
    resumed, fresh = rows_to(tmp_path / "resumed", 0, 400), tmp_path / "fresh"
    stream = io.StringIO()
    progress = GridProgress(2, bars=True, stream=stream, rounds=rounds_left([(resumed, 500), (fresh, 500)]))
    progress.rows_read_every_s = 0
    progress.experiment("g", 2)
    progress.start(1, "resumed", resumed, 500, follow=False)
    rows_to(resumed, 401, 450)
    progress.began = time.perf_counter() - 50  # the first rounds seen: the pace starts here
    progress._show_left(now=True)
    rows_to(resumed, 451, 500)
    progress.began = time.perf_counter() - 100  # 50 rounds in 50 s since; 500 left: 500 s, where tqdm would say 100 s
    progress.end(1, "resumed")
    assert re.search(r"1/2 cells \[[0-9:]+, about 8\.3 min left\]", stream.getvalue()), stream.getvalue()
    progress.close()
    assert not re.search(r"\d\d:\d\d<", stream.getvalue())  # tqdm's own elapsed<remaining field: never drawn


def test_a_cell_run_here_moves_the_overall_bars_time_left_with_its_rounds(tmp_path: Path) -> None:
    """A cell run in this process draws its own rounds line; each of its rounds also updates the overall bar's time
    left, which otherwise would stand still from one cell's end to the next."""
    cell = tmp_path / "cell"
    stream = io.StringIO()
    progress = GridProgress(1, bars=True, stream=stream, rounds=rounds_left([(cell, 100)]))
    progress.rows_read_every_s = 0
    progress.experiment("g", 1)
    progress.start(1, "cell", cell, 100, follow=False)
    line = progress.cell_bar("cell")(100, 0, "cell")
    progress.began = time.perf_counter() - 10
    rows_to(cell, 1, 10)  # the first rounds seen: the pace starts here
    line.update(10)
    assert not progress._overall.postfix
    progress.began, progress._left_shown = time.perf_counter() - 20, 0.0
    rows_to(cell, 11, 20)  # 10 rounds in 10 s since: 80 left
    line.update(10)
    assert progress._overall.postfix == "about 80 s left"
    line.close()
    progress.close()


def test_bars_turned_off_by_tqdm_disable_do_not_stop_the_grid(tmp_path: Path, monkeypatch) -> None:
    """TQDM_DISABLE=1 at a terminal: tqdm makes bars that draw nothing and have no postfix; the time left is then
    not set, and the grid goes on."""
    monkeypatch.setenv("TQDM_DISABLE", "1")
    cell = tmp_path / "cell"
    progress = GridProgress(1, bars=True, stream=io.StringIO(), rounds=rounds_left([(cell, 10)]))
    progress.experiment("g", 1)
    progress.start(1, "cell", cell, 10, follow=False)
    line = progress.cell_bar("cell")(10, 0, "cell")
    rows_to(cell, 1, 10)
    line.update(10)
    progress.end(1, "cell")
    progress.poll()
    progress.close()


def test_time_stopped_by_ctrl_z_is_neither_time_spent_nor_pace(tmp_path: Path, monkeypatch) -> None:
    """What fedaccel.grids.suspend counts as stopped (Ctrl-Z, then fg) is taken out of the lines' time spent, the
    pace of the time left, and the bar's own time spent; stops before the grid began are not this grid's."""
    from fedaccel.grids import suspend

    monkeypatch.setattr(suspend, "_suspended_s", 50.0)  # a stop before this grid
    cell, stream = rows_to(tmp_path / "cell", 0, 0), io.StringIO()
    progress = GridProgress(1, bars=True, stream=stream, rounds=rounds_left([(cell, 600)]))
    progress.rows_read_every_s = 0
    progress.experiment("g", 1)
    progress.start(1, "cell", cell, 600, follow=False)
    rows_to(cell, 1, 50)
    progress.began = time.perf_counter() - 3630  # begun 60.5 min ago, of which 60 stopped:
    monkeypatch.setattr(suspend, "_suspended_s", 50.0 + 3600)
    assert progress._tally() == "0/1 cells done, 30 s"  # the first rounds seen: the pace starts here
    rows_to(cell, 51, 100)
    progress.began = time.perf_counter() - 3660
    assert progress._tally() == "0/1 cells done, 60 s, about 5.0 min left"  # 50 rounds in the 30 s run; 500 left
    started = progress._overall.start_t
    progress._show_left(now=True)
    assert progress._overall.start_t == pytest.approx(started + 3600)  # tqdm's elapsed: the same minute
    assert progress._overall.postfix == "about 5.0 min left"
    progress.close()
