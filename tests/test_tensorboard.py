"""TensorBoard: the event files a run writes (and `fedaccel tensorboard` writes afterwards) hold
every metrics row and the algorithm's diagnostics, read back with TensorBoard's own reader."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from fedaccel.cli import main
from fedaccel.launch import resume, run
from fedaccel.runs.config import load_config
from fedaccel.runs.tensorboard import scalars

pytest.importorskip("tensorboard")
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402

SMALL = ["data.dataset=digits", "model=softmax", "data.split=case2", "data.clients=4", "train.rounds=4",
         "train.lr=0.1", "train.batch_size=20", "run.progress=false", "eval.every=2"]


def events(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def expected(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    want: dict[str, list[tuple[int, float]]] = {}
    for name, prefix in (("metrics.jsonl", ""), ("diagnostics.jsonl", "diag/")):
        for line in (run_dir / name).read_text().splitlines():
            row = json.loads(line)
            body = {k: v for k, v in row.items() if k not in ("round", "diag")}
            for tag, value in scalars(body, prefix):
                want.setdefault(tag, []).append((row["round"], value))
    return want


def assert_same(got: dict, want: dict) -> None:
    assert sorted(got) == sorted(want)
    for tag in want:
        assert [s for s, _ in got[tag]] == [s for s, _ in want[tag]], tag
        assert [v for _, v in got[tag]] == pytest.approx([v for _, v in want[tag]], rel=1e-6), tag


def test_a_run_writes_every_metric_and_diagnostic_as_it_goes(tmp_path: Path) -> None:
    path = run(load_config(None, [*SMALL, "algorithm=bherd", "algorithm.alpha=0.5", "run.tensorboard=true"]),
               tmp_path / "run")
    got = events(path)
    assert_same(got, expected(path))
    assert [s for s, _ in got["test_acc"]] == [0, 2, 4]  # every evaluated round
    assert [s for s, _ in got["diag/clients/0/distance"]] == [1, 2, 3, 4]  # BHerd's herd distance, every round
    assert "bytes_up" in got and "round_bytes_up" in got


def test_fedaccel_tensorboard_converts_finished_runs_of_a_grid(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    grid = tmp_path / "grid"
    for seed in (0, 1):
        run(load_config(None, [*SMALL, "algorithm=fedgsnr", f"run.seed={seed}"]), grid / f"run.seed={seed}")
    assert main(["tensorboard", str(grid)]) == 0
    assert "event files written for 2 runs" in capsys.readouterr().out
    for seed in (0, 1):
        path = grid / f"run.seed={seed}"
        got = events(path)
        assert_same(got, expected(path))
        assert "diag/entropy" in got and any(t.startswith("diag/gsnr/") for t in got)  # FedGSNR's diagnostics
    assert main(["tensorboard", str(grid)]) == 0  # again: replaced, not doubled
    assert_same(events(grid / "run.seed=0"), expected(grid / "run.seed=0"))


def test_a_resumed_run_has_no_duplicate_rounds_in_its_events(tmp_path: Path) -> None:
    config = load_config(None, [*SMALL, "run.tensorboard=true", "run.checkpoint_every=2", "eval.every=1"])
    path = run(config, tmp_path / "run")
    (path / "summary.json").unlink()  # as if killed after round 4 was logged but before its checkpoint:
    os.replace(path / "checkpoint.prev.pt", path / "checkpoint.pt")  # the newest checkpoint is round 2's

    resume(path)
    got = events(path)
    assert [s for s, _ in got["test_acc"]] == [0, 1, 2, 3, 4]
    assert_same(got, expected(path))
