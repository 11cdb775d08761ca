"""Attacks that must stay refused (issue 21): files planted in a run folder or a Flower node's
state-dir (item 1), and hostile or mistaken input (items 6 and 7). Each is one line, quick, and leaves
nothing changed."""

from __future__ import annotations

import builtins
import json
import os
import pickle
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
import torch

from fedaccel.cli import main
from fedaccel.errors import ConfigError, UserError
from fedaccel.launch import run
from fedaccel.runs.checkpoint import load_checkpoint
from fedaccel.runs.config import from_dict, load_config
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
    """A copy of ``source`` as a run killed after its last checkpoint (no summary.json), so that
    ``--resume`` loads its checkpoints rather than saying it is already finished."""
    import shutil

    shutil.copytree(source, to)
    (to / "summary.json").unlink()
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
    from fedaccel.algorithms.registry import build_algorithm

    flower_client.keep_states(context, 4, states, build_algorithm("fedumf-feddc"), 1)
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


# ---------------------------------------------------------------------------------------------
# items 6 and 7: hostile and mistaken input
# ---------------------------------------------------------------------------------------------

TINY = ["data.dataset=digits", "model=softmax", "data.clients=2", "train.rounds=2", "train.batch_size=50",
        "run.progress=false"]
PNG = b"\x89PNG\r\n\x1a\n"


def sets(overrides: list[str]) -> list[str]:
    return [arg for item in overrides for arg in ("--set", item)]


def bomb(levels: int = 10, ways: int = 9, flow: bool = False) -> str:
    """A "billion laughs": level i is ``ways`` aliases of level i - 1 (``ways ** levels`` values)."""
    items = ["&a0 [" + ", ".join(["lol"] * ways) + "]"]
    items += [f"&a{i} [" + ", ".join([f"*a{i - 1}"] * ways) + "]" for i in range(1, levels)]
    return "[" + ", ".join(items) + "]" if flow else "".join(f"  - {item}\n" for item in items)


# runs the CLI in a child whose address space is capped, and reports how long `main` took and how
# much its resident memory grew (imports done before the clock starts)
MEASURED = """
import resource, sys, time
resource.setrlimit(resource.RLIMIT_DATA, (2 << 30, 2 << 30))  # the heap, not the address space: CUDA torch maps more
from fedaccel.cli import main
import fedaccel.launch
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
start = time.monotonic()
code = main(sys.argv[1:])
print("measured", code, time.monotonic() - start, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)
"""


@pytest.mark.slow
@pytest.mark.parametrize("where", ["file", "--set"])
def test_a_yaml_bomb_under_name_is_refused_in_one_line_quickly_and_in_bounded_memory(tmp_path: Path, where: str) -> None:
    if where == "file":
        (tmp_path / "bomb.yaml").write_text("name:\n" + bomb())
        args = ["run", "--no-progress", str(tmp_path / "bomb.yaml")]
    else:
        args = ["run", "--no-progress", "--set", "name=" + bomb(flow=True)]
    done = subprocess.run([sys.executable, "-c", MEASURED, *args], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path)
    assert done.stdout.splitlines()[-1:] and done.stdout.splitlines()[-1].startswith("measured"), done.stderr[-2000:]
    _, code, seconds, grown_kb = done.stdout.splitlines()[-1].split()
    lines = done.stderr.splitlines()
    assert int(code) == 2 and len(lines) == 1 and lines[0].startswith("error:"), done.stderr[-2000:]
    assert "aliases repeat" in lines[0] and len(lines[0]) < 300
    assert float(seconds) < 5 and int(grown_kb) < 200_000, (seconds, grown_kb)
    assert not (tmp_path / "runs").exists()


def test_aliases_that_repeat_a_few_values_are_fine_and_a_recursive_one_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("train: &t {rounds: 3, lr: 0.5}\nattacks:\n  - {kind: noise, clients: &c [0, 1]}\n"
                      "  - {kind: label-flip, clients: *c}\n")
    loaded = load_config(config)
    assert loaded.train.rounds == 3 and loaded.attacks[1]["clients"] == [0, 1]
    config.write_text("attacks: &a [*a]\n")
    with pytest.raises(ConfigError, match="recursive") as err:
        load_config(config)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("loader", ["BoundedLoader", "PureBoundedLoader"])
@pytest.mark.parametrize("text", ["a: " + "[" * 100_000, "a:\n" + "".join(" " * i + f"k{i}:\n" for i in range(1, 3000)),
                                  "a: " + "- " * 3000 + "x", "a: " + "[" * 2_000_000])
def test_a_document_nested_thousands_deep_is_one_line_on_both_parsers_and_quick(
        text: str, loader: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """libyaml composes by C recursion: 100,000 brackets crashed Python 3.12 (the GPU machine) and 3,000 nested
    keys passed there; the pure parser's scanner is quadratic in open brackets. The depth is counted on the
    event stream first, so a deep document is refused in one line, at once, by either parser."""
    from fedaccel.runs import config as config_module

    monkeypatch.setattr(config_module, "BoundedLoader", getattr(config_module, loader))
    started = time.monotonic()
    with pytest.raises(ConfigError, match="^x.yaml (is refused: it nests values more than 100 levels deep|is not valid "
                                          "YAML: .*)$") as err:
        config_module.parse_yaml(text, "x.yaml")
    # 0.6 s on an idle 2-core machine, 5.3 s once in a loaded CI run; the pure parser alone takes minutes
    assert "\n" not in str(err.value) and time.monotonic() - started < 30


@settings(max_examples=30, deadline=None)
@given(depth=st.integers(1, 400), flow=st.booleans())
def test_any_nesting_depth_reads_back_or_is_one_line(depth: int, flow: bool) -> None:
    from fedaccel.runs.config import MAX_NESTING, parse_yaml

    text = ("a: " + "[" * depth + "1" + "]" * depth if flow
            else "a:\n" + "".join(" " * i + f"k{i}:\n" for i in range(1, depth)) + " " * depth + "1")
    if depth + flow > MAX_NESTING:  # the top mapping is a level; a block key's value 1 is not
        with pytest.raises(ConfigError, match="^x.yaml is refused: it nests values more than"):
            parse_yaml(text, "x.yaml")
        return
    value = parse_yaml(text, "x.yaml")["a"]
    for level in range(1, depth):
        value = value[0] if flow else value[f"k{level}"]
    assert value == ([1] if flow else 1)


def test_libyaml_and_the_pure_python_parser_read_every_committed_yaml_file_alike() -> None:
    """Config files are read with libyaml (about 3x faster) where PyYAML has it; the pure-Python
    parser is the fallback: both give the same values for every YAML file in the repository."""
    import yaml

    from fedaccel.runs.config import BoundedLoader, PureBoundedLoader

    root = Path(__file__).resolve().parents[1]
    files = [p for folder in ("experiments", "docs", "fedaccel", "tests") for p in (root / folder).rglob("*.yaml")]
    assert len(files) > 30
    for path in files:
        text = path.read_text()
        fast, pure = yaml.load(text, Loader=BoundedLoader), yaml.load(text, Loader=PureBoundedLoader)  # noqa: S506
        assert repr(fast) == repr(pure), path
    assert yaml.load("a: 1e4\nb: -2E-3", Loader=BoundedLoader) == {"a": 1e4, "b": -2e-3}  # noqa: S506 (YAML 1.2 floats)


def test_a_config_file_larger_than_the_limit_is_refused_unread(tmp_path: Path) -> None:
    config = tmp_path / "huge.yaml"
    line = "# " + "x" * 1000 + "\n"
    config.write_text("train: {rounds: 3}\n" + line * (5 * 2**20 // len(line)))  # 5 MB, mostly comments
    with pytest.raises(ConfigError, match=r"huge.yaml is \d+\.\d MB: a config file is at most 4 MB") as err:
        load_config(config)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("override", [
    "train.lr=" + "x" * 100_000,  # a type error
    "algorithm=" + "y" * 100_000,  # an unknown name
    "data.split=" + "z" * 100_000,
    "train.participation={" + ", ".join(f"r{i}: [0, 1]" for i in range(20_000)) + "}",  # a long mapping
    "attacks=[[" + ", ".join(["7"] * 50_000) + "]]",  # a long list
    "data.clients=[" + "9" * 4000 + "]",  # a huge number
])
@pytest.mark.slow
def test_error_messages_print_at_most_200_characters_of_a_value(override: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(None, [*TINY, override])
    message = str(err.value)
    assert "\n" not in message and len(message) < 400, message[:1000]


def test_run_out_refuses_a_non_empty_folder_that_is_not_a_run(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "config.yaml").write_text("my: own config\n")
    (mine / "notes.txt").write_text("keep me\n")
    assert main(["run", *sets(TINY), "--out", str(mine)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is not empty and holds no fedaccel run" in err
    assert sorted(p.name for p in mine.iterdir()) == ["config.yaml", "notes.txt"]
    assert (mine / "config.yaml").read_text() == "my: own config\n"
    (tmp_path / "file").write_text("x")
    assert main(["run", *sets(TINY), "--out", str(tmp_path / "file")]) == 2
    assert (tmp_path / "file").read_text() == "x"
    empty = tmp_path / "empty"
    empty.mkdir()  # an empty folder is a new run's folder
    assert main(["run", *sets(TINY), "--out", str(empty)]) == 0
    assert (empty / "metrics.jsonl").is_file()
    capsys.readouterr()
    assert main(["run", *sets(TINY), "--out", str(empty)]) == 2  # a run folder: the way to continue it
    assert "--resume" in capsys.readouterr().err


def test_outputs_are_never_written_over_a_file_fedaccel_did_not_write_unless_forced(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    run_dir = tmp_path / "run"
    assert main(["run", *sets(TINY), "--out", str(run_dir)]) == 0
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    split = ["split-report", *sets(["data.dataset=digits", "data.clients=3"])]
    for command in (["plot", str(run_dir)], split):
        capsys.readouterr()
        assert main([*command, "-o", str(notes)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "not a PNG" in err and "--force" in err
        assert notes.read_text() == "my notes\n"
    picture = tmp_path / "curves.png"
    assert main(["plot", str(run_dir), "-o", str(picture)]) == 0
    assert main(["plot", str(run_dir), "-o", str(picture)]) == 0  # a PNG is redrawn in place
    assert main([*split, "-o", str(picture)]) == 0
    assert main(["plot", str(run_dir), "-o", str(notes), "--force"]) == 0
    assert notes.read_bytes()[:8] == PNG
    notes.write_text("my notes\n")
    assert main([*split, "-o", str(notes), "--force"]) == 0
    assert notes.read_bytes()[:8] == PNG


@pytest.mark.parametrize("name", ["../../escaped", "a/b", "/tmp/x", "a\\b", "..", ".", "a\0b"])
def test_a_run_name_is_one_path_component(name: str) -> None:
    with pytest.raises(ConfigError, match="must be one folder name") as err:
        from_dict({"name": name})
    assert "\n" not in str(err.value)
    if "\0" not in name:  # YAML itself refuses a NUL
        with pytest.raises(ConfigError, match="must be one folder name"):
            load_config(None, [*TINY, f"name={name!r}"])


def test_a_run_named_to_escape_out_dir_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out_dir = tmp_path / "a" / "b" / "runs"
    assert main(["run", *sets([*TINY, f"run.out_dir={out_dir}", "name=../../escaped"])]) == 2
    assert "must be one folder name" in capsys.readouterr().err
    assert not any(p.name.startswith("escaped") for p in tmp_path.rglob("*"))
    experiment = tmp_path / "e.yaml"
    experiment.write_text("name: ../../escaped\nbase: {train: {rounds: 2}}\n")
    assert main(["experiment", str(experiment)]) == 2
    assert "must be one folder name" in capsys.readouterr().err


def test_a_folder_holding_only_a_lock_is_a_new_run_s_folder(tmp_path: Path) -> None:
    """A start that failed leaves at most ``.lock``: the folder is still free for a run."""
    from fedaccel.launch import check_out_folder

    (tmp_path / "r").mkdir()
    (tmp_path / "r" / ".lock").write_text("")
    check_out_folder(tmp_path / "r")
    (tmp_path / "r" / "x").write_text("")
    with pytest.raises(UserError):
        check_out_folder(tmp_path / "r")


def test_certs_do_not_replace_files_in_a_folder_unless_forced(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    pytest.importorskip("cryptography")
    folder = tmp_path / "tls"
    folder.mkdir()
    (folder / "ca.key").write_text("the key of a CA in use\n")
    assert main(["certs", str(folder), "--clients", "1"]) == 2
    assert "already holds files" in capsys.readouterr().err
    assert (folder / "ca.key").read_text() == "the key of a CA in use\n"
    assert main(["certs", str(folder), "--clients", "1", "--force"]) == 0
    assert (folder / "ca.key").read_text() != "the key of a CA in use\n"
