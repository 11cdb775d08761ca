"""scripts/grid_stretch.sh: a grid run in stretches on machines that start bare, carried between them as one archive,
ends with the numbers of one uninterrupted run."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]


def _stretch(tmp_path: Path, experiment: Path, limit: int) -> str:
    env = {**os.environ, "EXPERIMENT": str(experiment), "LIMIT": str(limit), "FOLDER": str(tmp_path / "grid"),
           "STRETCH_IN": str(tmp_path / "carried.tar.xz"), "OUT": str(tmp_path / "out"),
           "FEDACCEL": f"{sys.executable} -m fedaccel.cli"}
    done = subprocess.run(["bash", str(ROOT / "scripts" / "grid_stretch.sh")], env=env, capture_output=True, text=True,
                          timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def _rows(folder: Path) -> dict[str, list[dict]]:
    return {run.name: [{k: v for k, v in json.loads(line).items() if k != "wall_s"}
                       for line in (run / "metrics.jsonl").read_text().splitlines()]
            for run in sorted(folder.iterdir()) if run.is_dir()}


@pytest.mark.slow
def test_a_grid_run_in_stretches_from_a_carried_archive_ends_as_one_run(tmp_path: Path) -> None:
    from fedaccel.grids.experiment import load_experiment, run_experiment

    spec = {"name": "long", "base": {"data": {"dataset": "digits", "clients": 3}, "model": "softmax",
                                     "train": {"rounds": 1500, "lr": 0.05, "batch_size": 40, "local_steps": 2},
                                     "eval": {"every": 100}, "run": {"checkpoint_every": 1000}},
            "grid": {"algorithm": ["fedavg", {"name": "bherd", "alpha": 0.5}], "run.seed": [0, 1]}}
    experiment = tmp_path / "experiments" / "mine" / "paper" / "long.yaml"
    experiment.parent.mkdir(parents=True)
    experiment.write_text(yaml.safe_dump(spec))

    first = _stretch(tmp_path, experiment, 4)  # stopped part-way: no run has all its rounds
    assert "stretch: exit 124" in first and "0 cells done" in first, first
    shutil.move(tmp_path / "out" / "long.tar.xz", tmp_path / "carried.tar.xz")
    shutil.rmtree(tmp_path / "grid")  # the next stretch starts bare: only the archive is carried
    rounds = [len(rows) for rows in _rows(tmp_path / "out").values()] if (tmp_path / "out").is_dir() else []
    assert not rounds
    last = _stretch(tmp_path, experiment, 300)
    assert f"unpacked {tmp_path / 'carried.tar.xz'}" in last and "stretch: exit 0" in last and "4 cells done" in last

    alone = load_experiment(experiment)
    alone.out_dir = tmp_path / "alone"
    run_experiment(alone, progress=False, stack_seeds=True)
    assert _rows(tmp_path / "grid") == _rows(tmp_path / "alone")
