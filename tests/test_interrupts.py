"""Stopping and restarting: Ctrl-C and SIGTERM checkpoint the current round, damaged checkpoints
fall back to the previous one, failed starts leave no folder, and torch threads follow a rule."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from fedaccel.cli import main
from fedaccel.errors import ConfigError
from fedaccel.launch import resume, run
from fedaccel.runs.config import load_config
from fedaccel.runs.folder import CHECKPOINT, PREVIOUS_CHECKPOINT
from fedaccel.runs.loop import choose_threads

ROOT = Path(__file__).resolve().parents[1]
SMALL = ["data.dataset=digits", "model=softmax", "data.split=dirichlet", "data.split.alpha=0.5", "data.clients=4",
         "train.lr=0.1", "train.batch_size=20", "train.client_fraction=0.75", "run.progress=false"]


def rows_of(run_dir: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    for row in rows:
        row.pop("wall_s")
    return rows


def cli(*args: str) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen([sys.executable, "-m", "fedaccel.cli", *args], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for_rounds(run_dir: Path, rounds: int, process: subprocess.Popen, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        metrics = run_dir / "metrics.jsonl"
        if metrics.is_file() and len(metrics.read_text().splitlines()) > rounds:
            return
        assert process.poll() is None, process.communicate()
        time.sleep(0.05)
    raise AssertionError(f"{run_dir} did not reach round {rounds}")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
@pytest.mark.slow
def test_a_signal_checkpoints_the_current_round_and_names_the_real_resume_command(
    tmp_path: Path, sig: signal.Signals
) -> None:
    config = [*SMALL, "train.rounds=3000", "run.checkpoint_every=100000", "eval.train_samples=200"]
    run_dir = tmp_path / "run"
    process = cli("run", *sum((["--set", c] for c in config), []), "--out", str(run_dir))
    wait_for_rounds(run_dir, 3, process)
    process.send_signal(sig)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 130, err
    last = err.strip().splitlines()[-1]
    rounds = [row["round"] for row in rows_of(run_dir)]
    # the rounds since the start are kept (checkpoint_every is never reached): the checkpoint is that round's
    assert last == (f"interrupted by {sig.name}; `fedaccel run --resume {run_dir}` continues "
                    f"after round {rounds[-1]}"), last
    assert rounds[-1] >= 3 and (run_dir / CHECKPOINT).is_file()
    import torch

    assert torch.load(run_dir / CHECKPOINT, weights_only=True)["state"]["round"] == rounds[-1]


def test_interrupted_run_resumes_to_the_uninterrupted_numbers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import fedaccel.runs.loop as runner
    from fedaccel.runs import stopping

    config = load_config(None, [*SMALL, "train.rounds=6", "run.checkpoint_every=100"])
    whole = run(config, tmp_path / "whole")
    real = runner.run_round

    def stop_during_round_4(algorithm, state, *args, **kwargs):  # type: ignore[no-untyped-def]
        if state.round == 3:
            stopping.STOP.set()  # as the signal handler does
        return real(algorithm, state, *args, **kwargs)

    monkeypatch.setattr(runner, "run_round", stop_during_round_4)
    with pytest.raises(stopping.Interrupted) as stopped:
        run(config, tmp_path / "cut")
    monkeypatch.setattr(runner, "run_round", real)
    assert stopped.value.round == 4 and not stopping.STOP.is_set()  # round 4 finished and checkpointed
    resume(tmp_path / "cut")
    assert rows_of(tmp_path / "cut") == rows_of(whole)


def test_a_damaged_checkpoint_falls_back_to_the_previous_one(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    config = load_config(None, [*SMALL, "train.rounds=4", "run.checkpoint_every=1"])
    whole = run(config, tmp_path / "whole")
    expected = rows_of(whole)
    assert (whole / PREVIOUS_CHECKPOINT).is_file()
    newest = whole / CHECKPOINT
    newest.write_bytes(newest.read_bytes()[:100])  # truncated: torch's zip reader fails
    (whole / "summary.json").unlink()  # killed after its last checkpoint: a finished run has nothing to resume
    capsys.readouterr()
    assert main(["run", "--resume", str(whole), "--no-progress"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith(f"warning: {newest} is damaged") and err[1] == f"resuming {whole} after round 3"
    assert rows_of(whole) == expected  # round 4 done again, to the same numbers


def test_no_loadable_checkpoint_is_one_line_naming_the_files(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    config = load_config(None, [*SMALL, "train.rounds=2", "run.checkpoint_every=1"])
    path = run(config, tmp_path / "run")
    (path / CHECKPOINT).write_bytes(b"")  # 0 bytes: EOFError in torch.load
    (path / PREVIOUS_CHECKPOINT).write_bytes(b"garbage")
    (path / "summary.json").unlink()  # killed after its last checkpoint: a finished run has nothing to resume
    capsys.readouterr()
    assert main(["run", "--resume", str(path)]) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith(f"error: no checkpoint in {path} loads: {path / CHECKPOINT}") and "Traceback" not in last


def test_a_failed_start_leaves_no_run_folder(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    bad_data = ["data.dataset=mnist", f"data.root={tmp_path / 'nowhere'}", f"run.out_dir={tmp_path / 'runs'}"]
    assert main(["run", *sum((["--set", c] for c in bad_data), [])]) == 2
    assert "error:" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())
    impossible = [*SMALL, "data.split=label-k", "data.split.k=11"]  # digits has 10 classes
    assert main(["run", *sum((["--set", c] for c in impossible), []), "--out", str(tmp_path / "x")]) == 2
    assert not (tmp_path / "x").exists()
    existing = tmp_path / "mine"  # a folder of the user's: kept, with only what was there before
    existing.mkdir()
    (existing / "notes.txt").write_text("mine")
    assert main(["run", *sum((["--set", c] for c in bad_data), []), "--out", str(existing)]) == 2
    assert sorted(p.name for p in existing.iterdir()) == ["notes.txt"]


def test_threads_follow_the_config_then_workers_then_the_measured_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FEDACCEL_TORCH_THREADS", raising=False)
    assert choose_threads(load_config(None, ["run.threads=3"]), 10)[0] == 3
    assert choose_threads(load_config(None, []), 784) == (1, "auto: 784 parameters < 1,000,000")
    assert choose_threads(load_config(None, []), 10**7)[0] >= 1
    monkeypatch.setenv("FEDACCEL_TORCH_THREADS", "1")
    assert choose_threads(load_config(None, []), 10**7) == (1, "parallel worker")
    with pytest.raises(ConfigError, match="run.threads must be >= 1"):
        load_config(None, ["run.threads=0"])


def test_the_run_says_its_runtime_device_and_threads_first(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    config = load_config(None, [*SMALL, "train.rounds=1", "run.progress=true", "run.threads=1"])
    run(config, tmp_path / "run")
    first = capsys.readouterr().err.splitlines()[0]
    assert "runtime in-process" in first and "device cpu" in first and "1 torch thread (run.threads)" in first


class _DiesHalfway:
    """A file whose writes stop halfway with ENOSPC (a full disk)."""

    def __init__(self, file) -> None:  # type: ignore[no-untyped-def]
        self._file = file

    def write(self, data):  # type: ignore[no-untyped-def]
        self._file.write(data[: len(data) // 2])
        self._file.flush()
        raise OSError(28, "No space left on device")

    def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
        return getattr(self._file, name)

    def __enter__(self):  # type: ignore[no-untyped-def]
        return self

    def __exit__(self, *exc):  # type: ignore[no-untyped-def]
        return self._file.__exit__(*exc)


def test_a_rewrite_that_dies_midway_leaves_the_file_intact(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--resume cuts metrics.jsonl and diagnostics.jsonl back to the checkpoint: a full disk during
    that rewrite must not cost the rows it keeps (a temporary file is renamed over it)."""
    import builtins
    import io

    from fedaccel.runs.checkpoint import truncate_metrics

    path = run(load_config(None, [*SMALL, "train.rounds=4"]), tmp_path / "run")
    before = {name: (path / name).read_bytes() for name in ("metrics.jsonl", "diagnostics.jsonl", "summary.json")}
    real_open = io.open

    def dying_open(file, mode="r", *args, **kwargs):  # type: ignore[no-untyped-def]
        opened = real_open(file, mode, *args, **kwargs)
        writes = any(m in mode for m in "wax") and Path(file).parent == path
        return _DiesHalfway(opened) if writes else opened

    monkeypatch.setattr(builtins, "open", dying_open)
    monkeypatch.setattr(io, "open", dying_open)
    for name in ("metrics.jsonl", "diagnostics.jsonl"):
        with pytest.raises(OSError, match="No space left"):
            truncate_metrics(path / name, 2)
        assert (path / name).read_bytes() == before[name]
    from fedaccel.runs.files import write_atomic

    with pytest.raises(OSError, match="No space left"):
        write_atomic(path / "summary.json", "{}")
    monkeypatch.undo()
    assert {name: (path / name).read_bytes() for name in before} == before
    assert sorted(p.name for p in path.iterdir() if p.name.endswith(".tmp")) == []  # nothing left behind
    truncate_metrics(path / "metrics.jsonl", 2)
    assert [row["round"] for row in rows_of(path)] == [0, 1, 2]


@pytest.mark.parametrize("cut", ["damaged", "missing"])
def test_resume_evaluates_again_the_checkpoints_row_when_it_was_lost(
    tmp_path: Path, cut: str, capsys: pytest.CaptureFixture
) -> None:
    """`truncate -s -7 RUN/metrics.jsonl` on a finished run, then --resume: the final round's row
    is evaluated again from the checkpoint and summary.json's final row is that round, not the one before."""
    config = load_config(None, [*SMALL, "train.rounds=5", "eval.every=1", "algorithm=bherd-fedavg"])
    path = run(config, tmp_path / "run")
    want = rows_of(path)
    metrics = path / "metrics.jsonl"
    data = metrics.read_bytes()
    metrics.write_bytes(data[:-7] if cut == "damaged" else data[: data.rstrip(b"\n").rfind(b"\n") + 1])
    capsys.readouterr()
    assert main(["run", "--resume", str(path), "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert f"{metrics}: the row of round 5 was missing or damaged; evaluated it again from the checkpoint" in err
    got = rows_of(path)
    assert [r["round"] for r in got] == [0, 1, 2, 3, 4, 5]
    assert got[:5] == want[:5]
    assert got[5].pop("reevaluated") is True
    assert got[5]["diag"] == want[5]["diag"]  # from diagnostics.jsonl
    for key in ("test_acc", "test_loss", "train_acc", "train_loss", "bytes_up", "bytes_down", "local_steps"):
        assert got[5][key] == want[5][key], key
    summary = json.loads((path / "summary.json").read_text())
    assert summary["finished"] and summary["rounds"] == 5 and summary["final"]["round"] == 5
    assert main(["run", "--resume", str(path), "--no-progress"]) == 0  # nothing missing: nothing evaluated again
    assert "evaluated it again" not in capsys.readouterr().err and len(rows_of(path)) == 6


def test_a_full_disk_under_the_rows_names_the_file_and_its_own_free_space(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    """A write's OSError names no file: the line said "writing a file failed" with the free space of the current
    folder's disk (a new user's run folder was on a full tmpfs, the line said 75,676 MB free)."""
    import errno
    import shutil

    asked: list[Path] = []
    import fedaccel.disk as disk

    real_usage, real_open = shutil.disk_usage, disk.open_no_link

    class Full(_DiesHalfway):  # the file's other attributes (its name) as they are
        def write(self, data: str) -> int:
            raise OSError(errno.ENOSPC, "No space left on device")  # as os.write says it: no file name

    monkeypatch.setattr(shutil, "disk_usage", lambda path: asked.append(Path(path)) or real_usage(path))
    monkeypatch.setattr(disk, "open_no_link", lambda path, *a, **k: Full(real_open(path, *a, **k)))
    out = tmp_path / "run"
    assert main(["run", "--out", str(out), *(w for item in [*SMALL, "train.rounds=2"] for w in ("--set", item))]) == 1
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"writing {out / 'metrics.jsonl'} failed (" in line and "MB free there" in line, line
    assert asked == [out]


@pytest.fixture
def small_disk(tmpfs: Callable[[str], Path]) -> Path:
    """A tmpfs of 8 kB (where this machine lets the test mount one: root)."""
    return tmpfs("8k")


@pytest.mark.parametrize("writer", ["run", "plot", "pack"])
def test_the_disk_full_line_names_the_free_space_of_the_disk_that_filled(
        writer: str, small_disk: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Issue 47, item 6: a run on an 8 kB tmpfs said "74956 MB free there", the working folder's space (closing
    metrics.jsonl failed again after the full write, with no file name, and that error replaced the first). Every
    writer's line names a file on the small disk and its space (0 MB), for rows and checkpoints, figures and packs."""
    argv = ["run", *(w for item in [*SMALL, "train.rounds=2", "run.checkpoint_every=1"] for w in ("--set", item))]
    if writer == "run":
        argv += ["--out", str(small_disk / "run")]
    else:
        assert main([*argv, "--out", str(tmp_path / "run")]) == 0
        with open(small_disk / "filler", "wb", buffering=0) as filler, pytest.raises(OSError):
            while True:  # the disk full to its last byte
                filler.write(b"\0" * 512)
    if writer == "plot":
        argv = ["plot", str(tmp_path / "run"), "-o", str(small_disk / "curves.png")]
    elif writer == "pack":
        from fedaccel.reproductions.snapshot import pack

        with pytest.raises(OSError) as full:
            pack([tmp_path / "run"], small_disk / "p.jsonl.xz")
        assert full.value.filename == str(small_disk / "p.jsonl.xz")
        return
    capsys.readouterr()
    assert main(argv) == 1
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"writing {small_disk}/" in line and "(0 MB free there)" in line, line


def test_appending_keeps_the_first_error_and_names_its_file_on_close(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same without a small disk: a close that fails again after a failed write does not replace the write's
    error, and a close that alone fails names the file."""
    import errno

    import fedaccel.disk as disk

    class FailsToClose:
        def close(self) -> None:
            raise OSError(errno.ENOSPC, "No space left on device")  # a flush at close: no file name

    monkeypatch.setattr(disk, "open_no_link", lambda path, *a, **k: FailsToClose())
    with pytest.raises(OSError) as first, disk.appending(tmp_path / "metrics.jsonl"):
        raise OSError(errno.ENOSPC, "No space left on device", "the write's own file")
    assert first.value.filename == "the write's own file"
    with pytest.raises(OSError) as closing, disk.appending(tmp_path / "metrics.jsonl"):
        pass
    assert closing.value.filename == str(tmp_path / "metrics.jsonl")


def test_a_signal_after_a_stop_that_was_no_signal_is_the_first_not_the_second() -> None:
    """A Ray cell's watch of its grid sets STOP when the grid ends; Ray's cancel then brings SIGINT, which was taken
    for a second signal: the run stopped at once, a round's row written past its checkpoint (a CI run caught it).
    Only a signal after a signal stops at once."""
    from fedaccel.runs import stopping

    stopping.clear_stop()
    try:
        stopping.STOP.set()  # as the watch does
        try:
            stopping._on_signal(signal.SIGINT, None)  # Ray's cancel: the first signal, taken as one
        except KeyboardInterrupt:
            pytest.fail("a first signal after a stop that was no signal was taken for a second")
        assert stopping.STOP.is_set() and stopping.signal_name() == "SIGINT"
        with pytest.raises(KeyboardInterrupt):
            stopping._on_signal(signal.SIGINT, None)  # a second: now
    finally:
        stopping.clear_stop()
