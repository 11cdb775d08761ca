"""One display name per method: the same text in progress lines, tables, legends, judge and errors."""

from __future__ import annotations

from pathlib import Path

import yaml
from hypothesis import given
from hypothesis import strategies as st

from fedaccel.runs.names import display_name, family_name, method_name, value_name, values_named


def test_a_method_is_its_name_its_options_then_its_parts() -> None:
    assert method_name("bherd") == "bherd"
    assert method_name({"name": "bherd", "alpha": 0.5}) == "bherd alpha=0.5"
    assert method_name({"alpha": 0.5, "name": "bherd"}) == "bherd alpha=0.5"  # the order a file spells it in
    assert method_name({"name": "fedavg", "server_opt": {"name": "adam", "lr": 0.1}}) == "fedavg + adam lr=0.1"
    assert method_name({"name": "fedavg", "aggregate": "median", "server_opt": "avgm"}) == "fedavg + median + avgm"
    assert method_name({"name": "bherd", "alpha": 1.0, "server_opt": None}) == "bherd alpha=1.0"
    assert method_name({"name": "fedavg", "dp": {"noise": 1.0, "clip": 0.08}}) == "fedavg + dp clip=0.08 noise=1.0"
    assert family_name({"algorithm": {"name": "bherd", "alpha": 0.5, "dp": {"clip": 0.1}}}) == "bherd + dp"
    assert display_name({"name": "mine", "algorithm": "fedavg"}) == "mine"  # a config's own name wins
    assert display_name({"algorithm": {}}, "folder") == "folder"
    # sample-level DP-SGD (train.dp_sgd) is named as a part: a new user's DP-SGD run was plain "fedavg"
    dp_sgd = {"algorithm": "fedavg", "train": {"dp_sgd": {"noise_multiplier": 1.1, "clip": 1.0}, "lr": 0.1}}
    assert display_name(dp_sgd) == "fedavg + dp-sgd clip=1.0 noise_multiplier=1.1"
    assert family_name(dp_sgd) == "fedavg + dp-sgd"
    assert display_name({"algorithm": "fedavg", "train": {"dp_sgd": None}}) == "fedavg"
    from fedaccel.runs.config import load_config  # what a run's header and bar call it

    config = load_config(None, ["data.dataset=digits", "train.dp_sgd={clip: 1.0, noise_multiplier: 1.1}"])
    assert config.display_name == "fedavg + dp-sgd clip=1.0 noise_multiplier=1.1"


def test_an_error_line_names_a_method_as_the_table_does() -> None:
    assert value_name("algorithm", {"name": "bherd", "alpha": 0.5}) == "bherd alpha=0.5"
    assert value_name("train.lr", 0.5) == "0.5"
    assert values_named({"algorithm": {"alpha": 0.5, "name": "bherd"}, "run.seed": 0}) == \
        "algorithm=bherd alpha=0.5, run.seed=0"


options = st.dictionaries(st.sampled_from(["alpha", "mu", "lr", "selection"]),
                          st.one_of(st.floats(0.001, 10, allow_nan=False), st.integers(0, 9),
                                    st.sampled_from(["herding", "random"])), max_size=3)


@given(options, options)
def test_two_settings_of_a_method_have_two_names_and_one_setting_one(a: dict, b: dict) -> None:
    """Hypothesis: names differ exactly when the options differ (as YAML reads them back), whatever their order."""
    one, other = {"name": "bherd", **a}, {"name": "bherd", **b}
    assert method_name(one) == method_name(dict(reversed(list(one.items()))))
    read = yaml.safe_load(yaml.safe_dump(one))  # through config.yaml, as a run folder holds it
    assert method_name(read) == method_name(one)
    assert (method_name(one) == method_name(other)) == (one == other)


def test_table_legend_judge_progress_and_error_use_one_name(tmp_path: Path, capsys) -> None:
    """A tiny grid of BHerd at alpha 0.5 against FedAvg: every surface calls it ``bherd alpha=0.5``."""
    from fedaccel.grids.experiment import load_experiment, run_experiment
    from fedaccel.report.figures import _make_figure, legend_labels
    from fedaccel.report.judge import judge_grid, table
    from fedaccel.report.reading import group_runs, load_runs

    base = {"data": {"dataset": "digits", "clients": 2}, "model": "svm", "train": {"rounds": 2, "batch_size": 20},
            "run": {"progress": False}}
    claim = {"text": "t", "a": {"algorithm": {"name": "bherd", "alpha": 0.5}}, "b": {"algorithm": "fedavg"},
             "measure": "final_test_acc", "expect": "greater"}
    path = tmp_path / "e.yaml"
    path.write_text(yaml.safe_dump({"name": "n", "out_dir": str(tmp_path / "out"), "base": base, "claims": [claim],
                                    "grid": {"algorithm": ["fedavg", {"name": "bherd", "alpha": 0.5}],
                                             "run.seed": [0, 1]}}, sort_keys=False))
    experiment = load_experiment(path)
    result = run_experiment(experiment, progress=False)
    name = "bherd alpha=0.5"
    assert f"] {name} in algorithm=bherd-0.5,run.seed=0: running" in capsys.readouterr().err
    assert f"| {name} | 2 |" in result.table
    runs = load_runs(result.run_dirs)
    assert legend_labels(group_runs(runs)) == ["fedavg", name]
    assert [t.get_text() for t in _make_figure(runs, ["test_acc"]).legends[0].get_texts()][:2] == ["fedavg", name]
    assert f"mean {name} " in table(judge_grid(experiment.claims, runs))
    path.write_text(path.read_text().replace("alpha: 0.5\n  b:", "alpha: 0.3\n  b:"))
    import pytest

    from fedaccel.errors import ConfigError

    with pytest.raises(ConfigError, match="algorithm: bherd alpha=0.3 is none of its values; nearest: "
                                          "bherd alpha=0.5"):
        load_experiment(path)
