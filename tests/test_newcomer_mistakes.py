"""Mistakes a new user made walking through the README (2026-11-29), each one line that says what to do
instead of a table of dashes or another command's error."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_crafted_files import refused

from fedaccel.cli import check_accuracy_targets
from fedaccel.errors import ConfigError, UserError
from fedaccel.grids.experiment import load_experiment

ROOT = Path(__file__).resolve().parents[1]


@given(target=st.floats(allow_nan=True, allow_infinity=True))
def test_an_accuracy_target_is_a_fraction_or_one_line(target: float) -> None:
    try:
        check_accuracy_targets([0.5, target], "--targets")
    except UserError as refusal:
        assert not 0.0 <= target <= 1.0 and "\n" not in str(refusal)
        assert ("as a fraction" in str(refusal)) == (1.0 < target <= 100.0)
    else:
        assert 0.0 <= target <= 1.0 and not math.isnan(target)


@pytest.mark.parametrize("argv", [["compare", "runs/demo", "--targets", "90"],
                                  ["plot", "runs/demo", "--targets", "93", "-o", "curves.png"]])
def test_targets_given_as_percentages_are_refused_before_anything_is_read(argv: list[str], tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture) -> None:
    argv = [str(tmp_path / a) if a in ("runs/demo", "curves.png") else a for a in argv]
    line = refused(argv, tmp_path, capsys)
    assert "is not an accuracy between 0 and 1 (as a fraction: 0.9" in line, line


def test_a_loss_target_above_one_is_taken(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    line = refused(["compare", str(tmp_path / "none"), "--targets", "2.5", "--metric", "test_loss"], tmp_path, capsys)
    assert "not found" in line and "accuracy" not in line


def test_an_experiment_with_percentage_targets_is_one_line(tmp_path: Path) -> None:
    file = tmp_path / "e.yaml"
    file.write_text("base: {model: svm}\ngrid: {run.seed: [0, 1]}\ntargets: [93, 95]\n")
    with pytest.raises(ConfigError, match=r"targets must be accuracies between 0 and 1, such as \[0.8, 0.85\], not "):
        load_experiment(file)


def test_run_on_an_experiment_file_names_the_command_that_runs_it(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture) -> None:
    file = ROOT / "experiments" / "demo.yaml"
    line = refused(["run", str(file)], tmp_path, capsys)
    assert f"is an experiment file, not a run config: `fedaccel experiment {file}`" in line, line


def test_judge_of_a_folder_that_does_not_exist_says_so(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert refused(["judge", str(tmp_path / "nope")], tmp_path, capsys).endswith(f"grid folder not found: {tmp_path / 'nope'}")


def test_resume_of_an_experiment_folder_names_what_resumes_it(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    (tmp_path / "grid").mkdir()
    (tmp_path / "grid" / "experiment.yaml").write_text("base: {}\n")
    line = refused(["run", "--resume", str(tmp_path / "grid")], tmp_path, capsys)
    assert "is not a run folder (no config.yaml) but an experiment's folder: `fedaccel experiment`" in line, line


def test_plot_over_an_earlier_picture_says_it_replaced_it(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """`fedaccel plot runs/demo` twice wrote ./curves.png over the first one without a word."""
    from fedaccel.cli import main

    argv = ["run", "--out", str(tmp_path / "r"), "--no-progress"]
    for item in ["data.dataset=digits", "model=softmax", "data.clients=2", "train.rounds=1"]:
        argv += ["--set", item]
    assert main(argv) == 0
    picture = tmp_path / "curves.png"
    capsys.readouterr()
    assert main(["plot", str(tmp_path / "r"), "-o", str(picture)]) == 0
    assert "drawn over" not in capsys.readouterr().err
    assert main(["plot", str(tmp_path / "r"), "-o", str(picture)]) == 0
    assert capsys.readouterr().err.strip().splitlines()[-1] == f"(drawn over the PNG that was at {picture.resolve()})"


def test_compare_says_when_runs_differ_in_more_than_their_method(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """A new user compared FedAvg on one split for 20 rounds with BHerd-SCAFFOLD on another for 60: a table with
    speed-ups and no word that the settings differ. Settings the labels name (two FedAvg runs at two rates) or
    equal settings need no note."""
    from fedaccel.cli import main

    def run(name: str, *items: str) -> str:
        argv = ["run", "--out", str(tmp_path / name), "--no-progress"]
        for item in ["data.dataset=digits", "model=softmax", "data.clients=2", "train.rounds=2", *items]:
            argv += ["--set", item]
        assert main(argv) == 0
        return str(tmp_path / name)

    def note(*runs: str) -> list[str]:
        capsys.readouterr()
        assert main(["compare", *runs]) == 0
        return [line for line in capsys.readouterr().err.splitlines() if line.startswith("note: ")]

    fedavg = run("fedavg", "algorithm=fedavg")
    bherd = run("bherd", "algorithm=bherd", "train.rounds=3", "data.split=dirichlet")
    slower = run("slower", "algorithm=fedavg", "train.lr=0.003")
    assert note(fedavg, bherd) == ["note: these runs differ in more than their method: data.split, "
                                   "train.rounds; the table compares them on different settings"]
    assert note(fedavg, run("same", "algorithm=bherd")) == []
    assert note(fedavg, slower) == []  # fedavg (train.lr=0.003) beside fedavg (train.lr=0.01)
    faster = run("faster", "algorithm=bherd", "train.lr=0.05")  # a third rate, which its label "bherd" does not say
    assert note(fedavg, slower, faster) == ["note: these runs differ in more than their method: train.lr; the table "
                                            "compares them on different settings"]


def test_resume_of_a_finished_run_says_how_to_get_more_rounds(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """A new user tried `run --resume` of a finished run, then with `--set train.rounds=...`: both said no, and
    neither said what to do instead. The command they name runs."""
    from fedaccel.cli import main

    out, argv = tmp_path / "r", ["run", "--out", str(tmp_path / "r"), "--no-progress"]
    for item in ["data.dataset=digits", "model=softmax", "data.clients=2", "train.rounds=1"]:
        argv += ["--set", item]
    assert main(argv) == 0
    capsys.readouterr()
    named = f"`fedaccel run {out / 'config.yaml'} --set train.rounds=N`"
    assert main(["run", "--resume", str(out)]) == 0
    assert capsys.readouterr().err.splitlines()[0].endswith(f"for more rounds, run its config again into a new "
                                                             f"folder: {named}")
    assert refused(["run", "--resume", str(out), "--set", "train.rounds=3"], tmp_path, capsys).endswith(named)
    assert main(["run", str(out / "config.yaml"), "--set", "train.rounds=2", "--out", str(tmp_path / "longer"),
                 "--no-progress"]) == 0


def test_deploy_resume_of_a_finished_or_undeployed_run_answers_at_once(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture) -> None:
    """A new user's `deploy --resume` of a finished deployment started a SuperLink and 5 SuperNodes and waited 20 s
    for a round that never came; of an in-process run folder it waited for 10 SuperNodes until killed. Both now
    answer in one line before any process starts (no `flower/` folder is made)."""
    import yaml

    from fedaccel.cli import main

    pytest.importorskip("flwr")
    out, argv = tmp_path / "r", ["run", "--out", str(tmp_path / "r"), "--no-progress"]
    for item in ["data.dataset=digits", "model=softmax", "data.clients=2", "train.rounds=1"]:
        argv += ["--set", item]
    assert main(argv) == 0
    capsys.readouterr()
    assert main(["deploy", "--resume", str(out)]) == 0  # finished: it advised `fedaccel run --resume`, with nothing left
    assert "is already finished (round 1 of 1): nothing to resume" in capsys.readouterr().err
    (out / "summary.json").rename(tmp_path / "summary.json")  # unfinished, in process
    assert refused(["deploy", "--resume", str(out)], tmp_path, capsys) == (
        f"error: {out} ran with run.runtime in-process, not as a deployment: `fedaccel run --resume {out}` continues it")
    (tmp_path / "summary.json").rename(out / "summary.json")
    config = yaml.safe_load((out / "config.yaml").read_text())
    config["run"]["runtime"] = "flower-deployment"  # as `fedaccel deploy` writes it
    (out / "config.yaml").write_text(yaml.safe_dump(config))
    assert main(["deploy", "--resume", str(out)]) == 0
    assert "is already finished (round 1 of 1): nothing to resume" in capsys.readouterr().err
    assert not (out / "flower").exists()
    (tmp_path / "elsewhere.json").write_bytes((out / "summary.json").read_bytes())
    (out / "summary.json").unlink()
    (out / "summary.json").symlink_to(tmp_path / "elsewhere.json")  # a planted link: refused, not followed
    assert "summary.json" in refused(["deploy", "--resume", str(out)], tmp_path, capsys)
    assert not (out / "flower").exists()


def test_the_command_for_more_rounds_deploys_a_deployed_run_and_quotes_its_path() -> None:
    from fedaccel.runs.finished import more_rounds

    assert more_rounds(Path("my runs/x"), "flower-deployment").endswith(
        "`fedaccel deploy 'my runs/x/config.yaml' --set train.rounds=N` (with `--prepare --tls DIR` where its "
        "SuperNodes run on other hosts)")
    assert more_rounds(Path("r"), "in-process").endswith("`fedaccel run r/config.yaml --set train.rounds=N`")


_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=6),
                       lambda inner: st.lists(inner, max_size=2) | st.dictionaries(st.text(max_size=4), inner,
                                                                                      max_size=2), max_leaves=6)
_configs = st.dictionaries(st.sampled_from(["algorithm", "data", "train", "run", "name", "model", "x"]),
                           _values, max_size=5)


@given(st.lists(_configs, min_size=1, max_size=4))
def test_the_compare_note_reads_any_configs_someone_wrote(configs: list[dict]) -> None:
    """Run folders from others hold any config.yaml: the note's keys are settings every config has, that differ,
    outside the method and how the runs ran; nothing raises."""
    from fedaccel.report.reading import Run, unnamed_differences

    runs = [Run(path=Path(f"r{k}"), config=config, metrics=[]) for k, config in enumerate(configs)]
    for key in unnamed_differences(runs):
        section = key.split(".", 1)[0]
        assert section not in ("algorithm", "run", "name") and key != "train.dp_sgd", key
        assert all(section in config for config in configs), key


@pytest.mark.parametrize("baseline, fault", [
    ("fedavgg", "unknown baseline 'fedavgg'; the groups are: 'fedavg', 'scaffold'; nearest: 'fedavg'"),
    (3, "baseline must be a method's label such as fedavg, not 3")])
def test_a_baseline_that_names_no_group_is_refused_before_any_cell_runs(
        baseline: object, fault: str, tmp_path: Path) -> None:
    """A new user's `baseline: fedavgg` was said after both cells had run, and no table was written."""
    import yaml

    path = tmp_path / "grid.yaml"
    path.write_text(yaml.safe_dump({"name": "typo", "base": {"data": {"dataset": "digits", "clients": 2}},
                                    "grid": {"algorithm": ["fedavg", "scaffold"]}, "baseline": baseline}))
    with pytest.raises(ConfigError, match="^" + re.escape(f"{path}: {fault}")):
        load_experiment(path)
    assert not (tmp_path / "runs").exists()
    path.write_text(path.read_text().replace("fedavgg", "fedavg"))
    if baseline == "fedavgg":
        assert load_experiment(path).baseline == "fedavg"


@settings(max_examples=40, deadline=None)
@given(baseline=st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=12)
       | st.lists(st.text(max_size=3), max_size=2) | st.sampled_from(["fedavg", "scaffold", "fedav", "fedavg (x=1)"]))
def test_any_baseline_loads_only_as_a_group_of_the_grid_or_is_one_line(baseline: object) -> None:
    """Whatever an experiment file's `baseline:` holds: the grid loads with it naming one of its groups, or it is
    refused in one line at load."""
    import tempfile

    import yaml

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "grid.yaml"
        path.write_text(yaml.safe_dump({"name": "any", "base": {"data": {"dataset": "digits", "clients": 2}},
                                        "grid": {"algorithm": ["fedavg", "scaffold"]}, "baseline": baseline}))
        try:
            loaded = load_experiment(path).baseline
        except ConfigError as refusal:
            assert "\n" not in str(refusal)
        else:
            assert loaded is None or loaded in ("fedavg", "scaffold")


@given(target=st.floats(allow_nan=True, allow_infinity=True) | st.integers(-10**40, 10**40),
       metric=st.sampled_from(["test_acc", "train_acc", "client_mean/test_acc", "test_loss", "train_loss"]))
def test_any_rounds_to_target_is_a_reachable_one_or_one_line(target: float, metric: str) -> None:
    """A claim's `rounds_to:` is taken only where some run could reach it: finite, 0 or more, and a fraction for an
    accuracy; anything else is one line."""
    from fedaccel.report.judge import parse_measure

    try:
        parse_measure({"rounds_to": target, "metric": metric}, "claims[0]")
    except ConfigError as refusal:
        assert "\n" not in str(refusal)
        assert not math.isfinite(target) or target < 0 or (metric.endswith("_acc") and target > 1)
    else:
        assert math.isfinite(target) and target >= 0 and (not metric.endswith("_acc") or target <= 1)


def test_reproduce_plan_with_render_only_says_it_runs_and_draws_nothing(capsys: pytest.CaptureFixture) -> None:
    """A new user's `reproduce bherd --render-only --plan` printed the plan alone, exit 0: --render-only was
    dropped without a word."""
    from fedaccel.cli import main

    for extra in (["--render-only"], ["--render-only", "--only", "fig4_selection"]):
        assert main(["reproduce", "bherd", "--plan", *extra]) == 2
        err = capsys.readouterr().err
        assert err == "error: --plan runs and draws nothing: leave out --render-only, or --plan\n", err
