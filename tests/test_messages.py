"""What the command line says when something goes wrong: one line, true, and how to go on (issue 21, item 8)."""

from __future__ import annotations

import errno
import json
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fedaccel.cli import main
from fedaccel.errors import ConfigError
from fedaccel.runs.config import load_config

TINY = ["data.dataset=digits", "model=softmax", "data.clients=2", "train.rounds=4", "train.batch_size=50",
        "run.checkpoint_every=2", "run.progress=false"]


def sets(overrides: list[str]) -> list[str]:
    return [arg for item in overrides for arg in ("--set", item)]


def one_line(capsys: pytest.CaptureFixture) -> str:
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err[-3000:]
    return err


@pytest.mark.parametrize("failure", ["oserror", "torch"])
def test_a_full_disk_is_one_line_naming_the_file_and_how_to_resume(
        tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch, failure: str) -> None:
    run_dir = tmp_path / "run"
    real_save = torch.save

    def save(obj: object, file: object, *args: object, **kwargs: object) -> None:
        if json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[-1])["round"] < 4:
            return real_save(obj, file, *args, **kwargs)  # the checkpoint of round 2 is written
        if failure == "oserror":
            raise OSError(errno.ENOSPC, "No space left on device", str(file))
        raise RuntimeError("[enforce fail at inline_container.cc:778] . PytorchStreamWriter failed writing file "
                           "data/0: file write failed")  # what torch's C++ writer says, no errno

    monkeypatch.setattr(torch, "save", save)
    assert main(["run", *sets(TINY), "--out", str(run_dir)]) == 1
    err = one_line(capsys)
    assert "the disk is full" in err and f"fedaccel run --resume {run_dir}" in err and "MB free" in err
    if failure == "oserror":
        assert "checkpoint" in err  # the file it was writing
    monkeypatch.setattr(torch, "save", real_save)
    assert main(["run", "--resume", str(run_dir)]) == 0
    assert json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[-1])["round"] == 4


@pytest.mark.parametrize("value,expected", [("1e4", 1e4), ("1E-3", 1e-3), ("+2.5e+1", 25.0), (".5e1", 5.0)])
def test_a_float_written_without_a_dot_is_a_float(tmp_path: Path, value: str, expected: float) -> None:
    assert load_config(None, [f"train.lr={value}"]).train.lr == expected
    (tmp_path / "c.yaml").write_text(f"train: {{lr: {value}}}\nalgorithm: {{name: fedprox, mu: {value}}}\n")
    config = load_config(tmp_path / "c.yaml")
    assert config.train.lr == expected and config.algorithm["mu"] == expected
    assert load_config(None, ["name=1e4x"]).name == "1e4x"  # not a number: a string still


_FLOATISH = st.from_regex(r"[-+]?(\d{1,3}\.?\d{0,2}|\.\d{1,2})([eE][-+]?\d{1,2})?", fullmatch=True)
_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-10**15, 10**15) | st.floats(allow_nan=False) | st.text() | _FLOATISH,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text() | _FLOATISH, inner, max_size=3),
    max_leaves=12)


@settings(max_examples=200, deadline=None)
@given(value=st.dictionaries(st.text() | _FLOATISH, _VALUES, max_size=4))
def test_what_fedaccel_writes_as_yaml_reads_back_as_it_was(value: dict) -> None:
    """A config fedaccel writes (a run's config.yaml, the config sent to Flower's nodes, an unpacked run) reads
    back the same, type for type: PyYAML wrote the string ``1e4`` unquoted, and the loader's YAML 1.2 floats
    read it as 10000.0 (a run named "1e4" could not be resumed, and a node got another config)."""
    from fedaccel.runs.config import dump_yaml, parse_yaml

    for options in ({"sort_keys": False}, {"sort_keys": True}, {"sort_keys": False, "allow_unicode": True}):
        back = parse_yaml(dump_yaml(value, **options), "written.yaml")
        assert json.dumps(back, sort_keys=True) == json.dumps(value, sort_keys=True), (options, value, back)


def test_a_run_named_like_a_number_keeps_its_name(tmp_path: Path) -> None:
    from fedaccel.report.reading import load_run
    from fedaccel.runs.config import dump_config, from_dict

    dump_config(from_dict({"name": "1e4", "train": {"lr": 0.5}}), tmp_path / "config.yaml")
    (tmp_path / "metrics.jsonl").write_text("")
    config = load_run(tmp_path).config
    assert (config["name"], config["train"]["lr"]) == ("1e4", 0.5)


@pytest.mark.parametrize("args,wanted", [
    (["run", "--set", "train.rounds=" + "9" * 5000], "--set train.rounds is refused: it holds a number with more "
                                                     "than 4300 digits"),
    (["run", "--set", "name={a: [1"], "--set name is not valid YAML: "),
    (["run", "--set", "algorithm.server_lr=0.5", "--set", "train.lr=ten"], "train.lr must be of type float"),
    (["reproduce", "fedumff", "--render-only"], "papers: bherd, fedgsnr, fedumf"),
    (["reproduce", "fedumff"], "papers: bherd, fedgsnr, fedumf"),
])
def test_mistakes_on_the_command_line_are_one_line(capsys: pytest.CaptureFixture, args: list[str], wanted: str) -> None:
    assert main(args) == 2
    assert wanted in one_line(capsys)


def test_a_folder_given_as_the_config_file_is_called_a_folder(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    (tmp_path / "configs").mkdir()
    for command in (["run", str(tmp_path / "configs")], ["experiment", str(tmp_path / "configs")]):
        assert main(command) == 2
        err = one_line(capsys)
        assert "is a folder" in err and "not found" not in err


def test_resuming_a_finished_run_says_so_and_changes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    run_dir = tmp_path / "run"
    assert main(["run", *sets(TINY), "--out", str(run_dir)]) == 0
    before = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in run_dir.iterdir() if p.is_file()}
    capsys.readouterr()
    assert main(["run", "--resume", str(run_dir)]) == 0
    out, err = capsys.readouterr()
    assert "already finished" in err and "rounds 5-4" not in err + out and "round 4:" in out
    assert {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in run_dir.iterdir() if p.is_file()} == before


def test_lists_of_names_are_cut_and_put_the_nearest_first() -> None:
    from fedaccel.errors import listed, shown

    assert listed(["a", "b"]) == "a, b" and listed([]) == "none"
    names = [f"name{i:02d}" for i in range(30)]
    assert listed(names) == ", ".join(names[:10]) + " and 20 more"
    assert listed(names, near="name27").startswith("name27, ")
    with pytest.raises(ConfigError) as err:
        load_config(None, ["algorithm=scafold"])
    assert "known: scaffold" in str(err.value) and "more" in str(err.value)
    assert len(shown("x" * 10_000)) <= 200 and shown(10**5000) == "<an integer of about 5001 digits>"


def test_a_key_that_is_not_a_name_is_one_line(tmp_path: Path) -> None:
    """YAML reads ``1:`` as a number key; sorting it among names was a TypeError traceback."""
    from fedaccel.grids.experiment import load_experiment

    for override in ("train={1: 2, lr: 3}", "algorithm={name: fedavg, 1: 2, b: 3}", "data.split={name: iid, 1: 2}"):
        with pytest.raises(ConfigError, match="config keys are names"):
            load_config(None, [override])
    (tmp_path / "e.yaml").write_text("1: 2\nbase: {}\n")
    with pytest.raises(ConfigError, match="unknown experiment key 1"):
        load_experiment(tmp_path / "e.yaml")
    (tmp_path / "e.yaml").write_text("grid: {1: [2]}\n")
    with pytest.raises(ConfigError, match="grid must map config keys"):
        load_experiment(tmp_path / "e.yaml")
