"""Hostile input stays refused (issue 21): files planted in a run folder or a Flower node's
state-dir, and other attacks. Each section is one kind of attack."""

from __future__ import annotations

import builtins
import json
import os
import pickle
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from fedaccel.cli import main
from fedaccel.errors import UserError
from fedaccel.launch import run
from fedaccel.runs.checkpoint import load_checkpoint
from fedaccel.runs.config import load_config
from fedaccel.runs.files import UnsafeFile
from fedaccel.runs.folder import CHECKPOINT, PREVIOUS_CHECKPOINT

SMALL = ["data.dataset=digits", "model=softmax", "data.split=dirichlet", "data.split.alpha=0.5", "data.clients=4",
         "train.lr=0.1", "train.batch_size=20", "train.client_fraction=0.75", "run.progress=false"]


# ============================================================================================
# item 1: planted pickles. Nothing fedaccel loads from disk can run code: every .pt file is
# read with torch.load(weights_only=True), and one that asks for code is refused in one line.
# ============================================================================================


class RunsShell:
    """Unpickling this runs ``touch marker`` (os.system)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return os.system, (f"touch {self.marker}",)


class RunsPython:
    """Unpickling this runs Python code (builtins.exec) that creates ``marker``."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return builtins.exec, (f"open({str(self.marker)!r}, 'w').close()",)


def plant(file: Path, payload: str, marker: Path) -> None:
    """A file at ``file`` whose loading with pickle would create ``marker``."""
    if payload == "os.system":
        torch.save({"format": "fedaccel-checkpoint/2", "state": RunsShell(marker), "wall_s": 0.0}, file)
    elif payload == "exec":
        torch.save([RunsPython(marker)], file)
    else:  # a plain pickle, not torch's zip: torch.load reads those too
        file.write_bytes(pickle.dumps({"state": RunsShell(marker)}))


PAYLOADS = ["os.system", "exec", "plain-pickle"]


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished 2-round run with both checkpoints (copied by each test that changes it)."""
    return run(load_config(None, [*SMALL, "train.rounds=2", "run.checkpoint_every=1"]),
               tmp_path_factory.mktemp("hostile") / "run")


def copy_run(source: Path, to: Path) -> Path:
    import shutil

    shutil.copytree(source, to)
    return to


def resume_error(path: Path, capsys: pytest.CaptureFixture) -> str:
    """``fedaccel run --resume path``: must fail (status 2); its error line."""
    capsys.readouterr()
    assert main(["run", "--resume", str(path), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err and "Traceback" not in "\n".join(err)
    return err[-1]


@pytest.mark.parametrize("payload", PAYLOADS)
def test_a_planted_checkpoint_is_refused_and_runs_nothing(
    finished: Path, tmp_path: Path, payload: str, capsys: pytest.CaptureFixture
) -> None:
    path = copy_run(finished, tmp_path / "run")
    metrics = (path / "metrics.jsonl").read_text()
    marker = tmp_path / "MARKER"
    plant(path / CHECKPOINT, payload, marker)
    line = resume_error(path, capsys)
    assert not marker.exists()
    assert line.startswith(f"error: {path / CHECKPOINT} is refused: loading it would run code"), line
    assert "system" in line or "exec" in line  # what it would have run
    assert (path / "metrics.jsonl").read_text() == metrics  # refused before anything was cut back


@pytest.mark.parametrize("payload", PAYLOADS)
def test_a_planted_previous_checkpoint_is_refused_not_skipped(
    finished: Path, tmp_path: Path, payload: str, capsys: pytest.CaptureFixture
) -> None:
    """The newest checkpoint damaged, the previous one planted: refused, never loaded."""
    path = copy_run(finished, tmp_path / "run")
    marker = tmp_path / "MARKER"
    (path / CHECKPOINT).write_bytes((path / CHECKPOINT).read_bytes()[:100])
    plant(path / PREVIOUS_CHECKPOINT, payload, marker)
    line = resume_error(path, capsys)
    assert not marker.exists()
    assert line.startswith(f"error: {path / PREVIOUS_CHECKPOINT} is refused: loading it would run code"), line


def test_a_planted_checkpoint_is_not_taken_for_a_damaged_one(finished: Path, tmp_path: Path) -> None:
    """A planted newest checkpoint beside a good previous one stops the resume: the good one is not
    silently taken instead, as it is for a merely damaged file."""
    path = copy_run(finished, tmp_path / "run")
    plant(path / CHECKPOINT, "os.system", tmp_path / "MARKER")
    with pytest.raises(UnsafeFile, match="is refused: loading it would run code"):
        load_checkpoint(path)
    assert not (tmp_path / "MARKER").exists()


def test_a_checkpoint_of_the_pickling_format_is_refused_in_one_line(finished: Path, tmp_path: Path) -> None:
    """A checkpoint holding pickled fedaccel classes (what fedaccel wrote before) needs code to load."""
    from fedaccel.engine.round import FLState

    path = copy_run(finished, tmp_path / "run")
    torch.save({"state": FLState(2, torch.zeros(3), (None,), [(None,)]), "wall_s": 0.0}, path / CHECKPOINT)
    with pytest.raises(UnsafeFile) as refused:
        load_checkpoint(path)
    message = str(refused.value)
    assert "\n" not in message and "written by an earlier fedaccel" in message and str(path / CHECKPOINT) in message


def test_what_fedaccel_writes_loads_without_code(finished: Path) -> None:
    """Checkpoints and model.pt hold tensors and plain data only."""
    for name in (CHECKPOINT, PREVIOUS_CHECKPOINT, "model.pt"):
        assert isinstance(torch.load(finished / name, weights_only=True), dict)
    saved = load_checkpoint(finished)
    assert saved is not None and saved["state"].round == 2


@pytest.fixture
def flower_client() -> Any:
    pytest.importorskip("flwr")
    from fedaccel.flower import client

    return client


def node_context(state_dir: Path, config_text: str) -> SimpleNamespace:
    """What the ClientApp's state files read of Flower's Context."""
    return SimpleNamespace(node_config={"state-dir": str(state_dir)}, state={"fedaccel": {"config": config_text}})


@pytest.mark.parametrize("payload", PAYLOADS)
def test_a_planted_flower_client_state_file_is_refused_and_runs_nothing(
    flower_client: Any, tmp_path: Path, payload: str
) -> None:
    config_text = "name: planted\n"
    context = node_context(tmp_path / "state", config_text)
    folder = tmp_path / "state" / flower_client.config_key(config_text)[:16]
    folder.mkdir(parents=True)
    marker = tmp_path / "MARKER"
    plant(folder / "round-3.pt", payload, marker)
    with pytest.raises(UserError) as refused:
        flower_client.saved_states(context, config_text, 3)
    assert not marker.exists()
    message = str(refused.value)
    assert "\n" not in message and message.startswith(f"{folder / 'round-3.pt'} is refused: loading it would run code")


def test_flower_client_states_are_kept_as_plain_data(flower_client: Any, tmp_path: Path) -> None:
    from fedaccel.algorithms.feddc import FedDCClient
    from fedaccel.algorithms.fedumf import FedUMFClient

    config_text = "name: kept\n"
    context = node_context(tmp_path / "state", config_text)
    states = (FedDCClient(drift=torch.ones(3)), FedUMFClient(update=torch.zeros(2), update_lr=0.5), None, torch.ones(1))
    flower_client.keep_states(context, 4, states)
    file = tmp_path / "state" / flower_client.config_key(config_text)[:16] / "round-4.pt"
    torch.load(file, weights_only=True)  # no code needed
    back = flower_client.saved_states(context, config_text, 4)
    assert type(back[0]) is FedDCClient and torch.equal(back[0].drift, states[0].drift) and back[0].correction is None
    assert type(back[1]) is FedUMFClient and back[1].update_lr == 0.5 and back[2] is None
    assert torch.equal(back[3], states[3])


def test_state_files_rebuild_only_fedaccels_state_classes() -> None:
    from fedaccel.algorithms.states import from_plain

    for name in ("os:system", "subprocess:Popen", "builtins:exec", "fedaccel.algorithms.feddc:torch"):
        with pytest.raises(ValueError, match="refusing to build|no state class"):
            from_plain({"$dc": name, "args": "true"})
    with pytest.raises(ValueError, match="FedDCClient"):
        from_plain({"$dc": "fedaccel.algorithms.feddc:FedDCClient", "unknown": 1})
    assert json.dumps(from_plain({"$tuple": [1, {"a": [2]}]})) == '[1, {"a": [2]}]'
