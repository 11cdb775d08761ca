"""scripts/grid_stretch.sh: a grid run in stretches on machines that start bare, carried between them as one archive,
resumes every run from its checkpoint and ends with every round's row once."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]


def _stretch(tmp_path: Path, experiment: Path, limit: int, stop_at_round: int | None = None) -> tuple[int, str]:
    """The script's status and output; ``stop_at_round``: once every run has a row of that round, SIGINT to its
    ``timeout`` (which hands it to the grid, as the limit would): a stop mid-training on any machine's speed."""
    env = {**os.environ, "EXPERIMENT": str(experiment), "LIMIT": str(limit), "FOLDER": str(tmp_path / "grid"),
           "STRETCH_IN": str(tmp_path / "carried.tar.xz"), "OUT": str(tmp_path / "out"),
           "FEDACCEL": f"{sys.executable} -m fedaccel.cli", "STACK": "--stack-arms"}
    script = subprocess.Popen(["bash", str(ROOT / "scripts" / "grid_stretch.sh")], env=env, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if stop_at_round is not None:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and script.poll() is None:
            rows = [run / "metrics.jsonl" for run in (tmp_path / "grid").glob("*") if run.is_dir()]
            if len(rows) == 4 and all(r.is_file() and f'"round": {stop_at_round},' in r.read_text() for r in rows):
                break
            time.sleep(0.1)
        children = Path(f"/proc/{script.pid}/task/{script.pid}/children").read_text().split()
        os.kill(int(children[0]), signal.SIGINT)  # the script's one child: timeout
    out, _ = script.communicate(timeout=600)
    return script.returncode, out


@pytest.mark.slow
def test_a_grid_run_in_stretches_from_a_carried_archive_resumes_and_ends_whole(tmp_path: Path) -> None:
    # 400 rounds: 300 left after the stop at round 100 (seconds of margin on a loaded machine; the stretch after it
    # trains them, so each round more costs CPU), a checkpoint by rhythm on the way
    spec = {"name": "long", "base": {"data": {"dataset": "digits", "clients": 3}, "model": "softmax",
                                     "train": {"rounds": 400, "lr": 0.05, "batch_size": 40, "local_steps": 2},
                                     "eval": {"every": 100}, "run": {"checkpoint_every": 200}},
            "grid": {"algorithm": ["fedavg", {"name": "bherd", "alpha": 0.5}], "run.seed": [0, 1]}}
    experiment = tmp_path / "experiments" / "mine" / "paper" / "long.yaml"
    experiment.parent.mkdir(parents=True)
    experiment.write_text(yaml.safe_dump(spec))

    status, first = _stretch(tmp_path, experiment, 600, stop_at_round=100)  # every run checkpoints its round
    assert status == 130 and "stretch: exit 130" in first and "0 cells done" in first, first
    with tarfile.open(tmp_path / "out" / "long.tar.xz") as archive:
        checkpoints = [n for n in archive.getnames() if n.endswith("/checkpoint.pt")]
    assert len(checkpoints) == 4, checkpoints
    shutil.move(tmp_path / "out" / "long.tar.xz", tmp_path / "carried.tar.xz")
    shutil.rmtree(tmp_path / "grid")  # the next stretch starts bare: only the archive is carried

    status, last = _stretch(tmp_path, experiment, 300)
    assert status == 0 and f"unpacked {tmp_path / 'carried.tar.xz'}" in last and "stretch: exit 0" in last and "4 cells done" in last
    resumed = re.findall(r"resuming \S+ after round (\d+)", last)
    assert len(resumed) == 4 and all(0 < int(r) < 400 for r in resumed), last
    for run in (tmp_path / "grid").iterdir():
        if run.is_dir():
            rounds = [json.loads(line)["round"] for line in (run / "metrics.jsonl").read_text().splitlines()]
            assert rounds == list(range(0, 401, 100)), (run.name, rounds)  # no row lost or repeated

    status, kept = _stretch(tmp_path, experiment, 60)  # a folder already there is newer than the archive: kept
    assert status == 0 and "is not empty: it is kept" in kept and "4 cells done" in kept

    from fedaccel.reproductions.carry import pack_finished  # the finished cells committed beside the experiment file

    pack_finished(tmp_path / "grid", experiment.parent / "carried" / "long.jsonl.xz")
    shutil.rmtree(tmp_path / "grid")
    (tmp_path / "carried.tar.xz").unlink()
    status, carried = _stretch(tmp_path, experiment, 60)  # a bare machine, the archive lost: the packed cells come in
    assert status == 0 and "4 finished cell(s) written" in carried and "4 cells done" in carried, carried
    assert "finished earlier, skipped" in carried and ": running (" not in carried, carried
