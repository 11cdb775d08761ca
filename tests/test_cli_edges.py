"""Rough edges of the command line, each one line: unknown papers, closed pipes, a run config given to
``experiment``, local work resolved in config.yaml, the plan table's note for claims of no difference."""

from __future__ import annotations

import errno
import math
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fedaccel.cli import main
from fedaccel.errors import ConfigError, shown
from fedaccel.runs.config import load_config

ROOT = Path(__file__).resolve().parents[1]


def one_line(capsys: pytest.CaptureFixture) -> str:
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err[-3000:]
    return err


@pytest.mark.parametrize("args", [["reproduce", "bhred", "--plan"], ["reproduce", "reference", "--plan"],
                                  ["reproduce", "reference"], ["reproduce", "reference", "--render-only"]])
def test_an_unknown_paper_is_one_line_that_lists_only_papers(capsys, args: list[str]) -> None:
    assert main(args) == 2
    err = one_line(capsys)
    assert f"no paper '{args[1]}' to reproduce; papers: " in err
    assert "bherd" in err and "fedgsnr" in err and "fedumf" in err and "reference," not in err.split("papers:")[1]


def test_a_reader_that_stops_reading_ends_no_command_in_a_traceback(tmp_path: Path) -> None:
    """``fedaccel compare ... | head -1``: the pipe closes before compare prints; exit 1, nothing on stderr."""
    from test_results import FAST, FEDAVG, make_config, write_run

    for name, curves in (("fedavg", FEDAVG), ("fast", FAST)):
        for seed, accs in curves.items():
            write_run(tmp_path / "e" / f"{name}-{seed}", make_config(name, seed), accs)
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    process = subprocess.Popen([sys.executable, "-m", "fedaccel.cli", "compare", str(tmp_path / "e")],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=tmp_path)
    process.stdout.close()  # the reader is gone before the first line
    err = process.stderr.read().decode()
    assert process.wait(timeout=120) == 1
    assert "Traceback" not in err and "BrokenPipeError" not in err and err == "", err


def test_a_run_config_given_to_experiment_points_to_run(tmp_path: Path, capsys) -> None:
    assert main(["experiment", str(ROOT / "configs" / "demo.yaml")]) == 2
    err = one_line(capsys)
    assert "is a run config, not an experiment file: `fedaccel run " in err
    assert main(["experiment", str(tmp_path / "nope.yaml")]) == 2
    assert one_line(capsys) == f"error: experiment file {tmp_path / 'nope.yaml'} not found\n"


def test_config_yaml_records_what_local_work_resolved_to(tmp_path: Path) -> None:
    """``stragglers`` with its defaults, ``partial_work: auto`` as drop (FedAvg) or keep (SCAFFOLD), in a
    comment: the values stay as given (claims select by them); fixed work has no comment."""
    from fedaccel.runs.config import dump_config, from_dict, read_yaml

    for algorithm, partial in (("fedavg", "drop"), ("scaffold", "keep")):
        config = load_config(None, ["train.local_work=stragglers", "train.local_epochs=3", f"algorithm={algorithm}"])
        dump_config(config, tmp_path / "config.yaml")
        last = (tmp_path / "config.yaml").read_text().splitlines()[-1]
        assert last == ("# resolved, as this run does it: train.local_work: {name: stragglers, min_epochs: 1, "
                        f"max_epochs: 2, fraction: 0.5}}, train.partial_work: {partial}")
        assert from_dict(read_yaml(tmp_path / "config.yaml")).to_dict() == config.to_dict()  # a resumed run: the same
        assert config.train.partial_work == "auto"
    dump_config(load_config(None, []), tmp_path / "fixed.yaml")
    assert "resolved" not in (tmp_path / "fixed.yaml").read_text()


def test_the_plan_table_says_what_an_equal_claims_difference_is(tmp_path: Path, capsys) -> None:
    from test_judge import CLAIMS, write_grid

    grid = write_grid(tmp_path / "toy", CLAIMS[:3])
    assert main(["judge", str(grid), "--plan"]) == 0
    out = capsys.readouterr().out
    twin = next(line for line in out.splitlines() if line.startswith("| twin ends where fast ends"))
    assert "(room in the margin)" in twin
    assert sum("(room in the margin)" in line for line in out.splitlines() if line.startswith("| ")) == 1
    assert out.rstrip().splitlines()[-1].startswith("Room in the margin (a claim of no difference, `expect: equal`)")
    capsys.readouterr()
    write_grid(tmp_path / "only-less", CLAIMS[:1])
    assert main(["judge", str(tmp_path / "only-less"), "--plan"]) == 0
    assert "Room in the margin" not in capsys.readouterr().out


@pytest.mark.parametrize(("mean", "outside"), [(0.002, False), (0.005, True), (-0.14, True)])
def test_an_equal_claims_pilot_outside_its_margin_asks_for_no_seeds(mean: float, outside: bool) -> None:
    """A pilot whose mean difference lies at or beyond an "equal" claim's margin leaves no room: no number of seeds
    shows the claim (a new user read "room -0.1391 ... 6 seeds"); inside the margin, seeds are counted."""
    from types import SimpleNamespace

    from fedaccel.report.judge import plan_rows, plan_table

    claim = SimpleNamespace(text="b ends where a ends", measure=SimpleNamespace(name="final test acc"), detect=None,
                            expect="equal", margin=0.005)
    pilot = SimpleNamespace(claim=claim, seeds=6, differences=[mean - 0.001, mean + 0.001, mean - 0.002, mean + 0.002])
    [row] = plan_rows([pilot])
    assert row["effect"] == pytest.approx(0.005 - abs(mean)) and row["outside"] is outside
    assert (row["seeds_needed"] is None) is outside
    line = plan_table([row]).splitlines()[2]
    assert line.endswith("— (the pilot's difference is outside the margin) |") is outside, line


YAML_VALUES = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner,
                                                                                       max_size=2), max_leaves=6)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(key=st.sampled_from(["targets", "metrics"]), value=YAML_VALUES)
def test_targets_and_metrics_of_any_shape_load_as_lists_or_are_one_line(tmp_path: Path, key: str, value) -> None:
    """`targets: "0.5"` once loaded as the characters '0', '.', '5' (a traceback at float('.')); a number, a
    mapping or NaN did likewise. Whatever the value, the file loads as a list of accuracies in [0, 1] / of names, or
    is refused in one line naming the key."""
    from fedaccel.grids.experiment import load_experiment

    file = tmp_path / "grid.yaml"
    file.write_text(yaml.safe_dump({"base": str(ROOT / "configs" / "demo.yaml"), "grid": {"run.seed": [0]}, key: value}))
    try:
        experiment = load_experiment(file)
    except ConfigError as error:
        said = f"{key} must be a list of" in str(error) or (
            key == "targets" and "targets must be accuracies between 0 and 1" in str(error))  # 93 for 0.93
        assert said and "\n" not in str(error), error
        return
    got = experiment.targets if key == "targets" else list(experiment.metrics)
    assert all(0.0 <= t <= 1.0 for t in got) if key == "targets" else all(isinstance(m, str) for m in got)


@pytest.mark.parametrize("where", ["name", "out"])
def test_a_name_longer_than_the_file_system_takes_is_one_line(
        where: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    """A 500-byte run name or a 300-byte --out folder ended in an OSError traceback (File name too long)."""
    monkeypatch.chdir(tmp_path)
    argv = ["run", "--set", "data.dataset=digits", "--set", "train.rounds=1", "--set", "run.progress=false"]
    argv += ["--set", "name=" + "x" * 500] if where == "name" else ["--out", str(tmp_path / ("z" * 300))]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and "Traceback" not in err, err
    assert ("is 500 bytes long; a folder name takes at most 200" in err if where == "name"
            else "a name in it is longer than this file system takes" in err), err


def test_a_damaged_or_planted_checkpoint_gets_fedaccels_words_not_torchs_advice(tmp_path: Path) -> None:
    """Random bytes: torch's error advised weights_only=False (the unsafe load) in the damaged-checkpoint line; a
    planted protocol-4 pickle: torch warned about its protocol before the one-line refusal."""
    import os
    import pickle
    import warnings

    from fedaccel.runs.files import UnsafeFile, load_plain

    import random

    said = set()
    for seed in range(20):  # torch fails on random bytes in several ways; its weights_only advice is never passed on
        (tmp_path / "random.pt").write_bytes(random.Random(seed).randbytes(6121))
        with pytest.raises(Exception) as damaged:  # noqa: PT011 (which one depends on the bytes)
            load_plain(tmp_path / "random.pt")
        assert "weights_only" not in str(damaged.value), str(damaged.value)
        said.add(str(damaged.value))
    assert "not a tensor file torch can read: damaged, or not fedaccel's" in said

    class Planted:
        def __reduce__(self) -> tuple:
            return (os.system, ("true",))

    (tmp_path / "planted.pt").write_bytes(pickle.dumps(Planted(), protocol=4))
    with warnings.catch_warnings(record=True) as caught, pytest.raises(UnsafeFile, match="system"):
        warnings.simplefilter("always")
        load_plain(tmp_path / "planted.pt")
    assert not caught, [str(w.message) for w in caught]


ERRNOS = [errno.EROFS, errno.EACCES, errno.EPERM, errno.ENAMETOOLONG, errno.EIO, errno.ENOTDIR, errno.EISDIR,
          errno.ENOENT, errno.EEXIST, errno.EBUSY, errno.EMLINK, errno.ETXTBSY]


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(code=st.sampled_from(ERRNOS), name=st.text(min_size=1, max_size=300).filter(lambda t: "\x00" not in t),
       debug=st.booleans())
def test_every_file_system_error_is_one_line_naming_the_path_and_the_cause(
        code: int, name: str, debug: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture) -> None:
    """Issue 47, item 3: `run --resume` of a read-only run folder ended in a traceback (Read-only file system:
    'ro/.lock'); any OSError the command cannot get past is one line with the path and the cause, status 2, and a
    traceback only with --debug."""
    import fedaccel.launch

    def fails(path: Any) -> None:
        raise OSError(code, os.strerror(code), name)

    monkeypatch.setattr(fedaccel.launch, "lock_run_dir", fails)
    argv = [*(["--debug"] if debug else []), "run", "--set", "data.dataset=digits", "--set", "train.rounds=1",
            "--out", str(tmp_path / "run")]
    if debug:
        with pytest.raises(OSError):
            main(argv)
        return
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and "Traceback" not in err, err
    assert shown(name, 120) in err and os.strerror(code) in err, err


def test_resume_of_a_run_folder_on_a_read_only_file_system_is_one_line(
        tmpfs: Callable[[str], Path], capsys: pytest.CaptureFixture) -> None:
    """The issue's case for real, where this machine lets the test mount a file system (root): a run folder on a
    tmpfs remounted read-only."""
    disk = tmpfs("20m")
    argv = ["run", "--set", "data.dataset=digits", "--set", "model=softmax", "--set", "data.clients=2",
            "--set", "train.rounds=2", "--set", "run.progress=false", "--out", str(disk / "run")]
    assert main(argv) == 0
    (disk / "run" / "summary.json").unlink()
    subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
    capsys.readouterr()
    assert main(["run", "--resume", str(disk / "run")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Read-only file system" in err and ".lock" in err, err


def test_run_answers_a_missing_config_before_importing_torch(tmp_path) -> None:
    """A typo in the file name is answered at once, not after torch's import (12 s on a loaded machine)."""
    import subprocess
    import sys

    code = ("import sys; from fedaccel.cli import main; "
            f"rc = main(['run', {str(tmp_path / 'nope.yaml')!r}]); print(rc, 'torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["2", "False"]
    assert done.stderr.strip() == f"error: config file {tmp_path / 'nope.yaml'} not found"


def test_every_option_a_commands_help_names_is_one_it_takes() -> None:
    """`reproduce -j`'s help once named --stack-seeds and --stack-arms, which only `experiment` takes."""
    import argparse
    import re

    from fedaccel.cli import build_parser

    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    for name, command in commands.items():
        takes = {flag for action in command._actions for flag in action.option_strings}
        text = re.sub(r"-\n\s+", "-", command.format_help())  # an option wrapped at its hyphen
        named = set(re.findall(r"(?<![\w-])--[a-z][a-z-]*[a-z]", text))
        assert named <= takes, f"`fedaccel {name} --help` names {sorted(named - takes)}, which it does not take"


def test_reproduces_help_names_every_paper_it_takes() -> None:
    """`reproduce --help` once named three of the five papers (its list is kept in the CLI, which must not import
    the reproductions to print its help)."""
    from fedaccel.cli import PAPERS
    from fedaccel.reproductions.reproduce import papers

    assert list(PAPERS) == papers()


@settings(max_examples=40, deadline=None)
@given(st.integers(-(2**70), 2**70))
def test_a_seed_is_refused_in_one_line_outside_what_every_generator_takes(seed: int) -> None:
    """A negative seed gave numpy's traceback (split-report too), a 20-digit one torch's overflow mid-run."""
    from fedaccel.runs.config import MAX_SEED

    if 0 <= seed <= MAX_SEED:
        assert load_config(None, [f"run.seed={seed}"]).run.seed == seed
    else:
        with pytest.raises(ConfigError, match=r"^run\.seed must be a whole number from 0 to 4,294,967,295$"):
            load_config(None, [f"run.seed={seed}"])
