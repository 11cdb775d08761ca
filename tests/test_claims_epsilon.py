"""Claims that select runs by the client-level epsilon they reached: ``epsilon: {at_most: X}`` on a side."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from fedaccel.cli import main
from fedaccel.errors import ConfigError
from fedaccel.grids.experiment import cell_name, load_experiment
from fedaccel.report.claims import pick, spent_bound, within_budget
from fedaccel.report.reading import Run

SEEDS = range(6)
LOOSE = {"name": "fedavg", "dp": {"clip": 1.0, "noise_multiplier": 0.8}}  # spends epsilon 9.5 (rows below)
TIGHT = {"name": "fedavg", "dp": {"clip": 1.0, "noise_multiplier": 5.0}}  # spends 0.7
SPENT = {"fedavg": None, "loose": 9.5, "tight": 0.7}
ALGORITHMS = {"fedavg": "fedavg", "loose": LOOSE, "tight": TIGHT}


def write_grid(folder: Path, claims: list[dict], algorithms: dict | None = None) -> Path:
    """FedAvg without DP and at two noise multipliers, 6 seeds: the tight runs end lower (their accuracy 0.1 less)."""
    algorithms = algorithms or ALGORITHMS
    for name, algorithm in algorithms.items():
        for seed in SEEDS:
            run = folder / cell_name({"algorithm": algorithm, "run.seed": seed})
            run.mkdir(parents=True)
            (run / "config.yaml").write_text(yaml.safe_dump({"algorithm": algorithm, "run": {"seed": seed},
                                                             "eval": {"every": 1}}))
            rows = [{"round": r, "test_acc": 0.9 - 0.1 * (name == "tight") - 0.01 * r + 0.001 * seed,
                     **({} if SPENT.get(name) is None else {"epsilon": SPENT[name] * r / 3})} for r in (1, 2, 3)]
            (run / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
            (run / "summary.json").write_text(json.dumps({"finished": True}))
    experiment = {"name": "budget", "grid": {"algorithm": list(algorithms.values()), "run.seed": list(SEEDS)},
                  "claims": claims}
    (folder / "experiment.yaml").write_text(yaml.safe_dump(experiment, sort_keys=False))
    return folder


def claim(bound: float) -> dict:
    return {"text": f"DP within epsilon {bound:g} costs FedAvg final accuracy", "a": {"epsilon": {"at_most": bound}},
            "b": {"algorithm": "fedavg"}, "measure": "final_test_acc", "expect": "less"}


def test_a_side_selects_the_runs_whose_reached_epsilon_is_within_its_bound(tmp_path: Path, capsys) -> None:
    grid = write_grid(tmp_path / "budget", [claim(1.0)])
    assert main(["judge", str(grid)]) == 0
    judged = json.loads((grid / "claims.json").read_text())[0]
    assert judged["verdict"] == "agrees" and judged["paired_seeds"] == list(SEEDS)
    assert judged["differences"] == pytest.approx([-0.1] * 6)  # tight against plain, seed by seed
    runs = [Run(folder, yaml.safe_load((folder / "config.yaml").read_text()),
                [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()])
            for folder in sorted(grid.iterdir()) if folder.is_dir()]
    assert {run.config["algorithm"]["dp"]["noise_multiplier"] for run in pick(runs, {"epsilon": {"at_most": 1}})} == {5.0}
    assert len(pick(runs, {"epsilon": {"at_most": 9.5}})) == 12 and pick(runs, {"epsilon": {"at_most": 0.5}}) == []


def test_a_side_whose_bound_takes_two_noise_multipliers_is_refused_once_they_have_run(tmp_path: Path, capsys) -> None:
    """Before the runs their epsilon is unknown, so the file loads; judge then names the two runs of a seed."""
    grid = write_grid(tmp_path / "budget", [claim(10.0)])
    load_experiment(grid / "experiment.yaml")
    assert main(["judge", str(grid)]) == 2
    err = capsys.readouterr().err.strip()
    assert "selects two runs of seed 0" in err and len(err.splitlines()) == 1


def test_target_epsilons_are_known_before_the_runs(tmp_path: Path) -> None:
    """Cells calibrated to a target_epsilon are within a bound or not at load time: two of one seed are refused."""
    targets = {name: {"name": "fedavg", "dp": {"clip": 1.0, "target_epsilon": e}} for name, e in (("e8", 8), ("e4", 4))}
    write_grid(tmp_path / "one", [claim(5.0)], {"fedavg": "fedavg", **targets})
    load_experiment(tmp_path / "one" / "experiment.yaml")
    write_grid(tmp_path / "two", [claim(8.0)], {"fedavg": "fedavg", **targets})
    with pytest.raises(ConfigError, match=r"claims\[0\]\.a selects two cells of seed 0"):
        load_experiment(tmp_path / "two" / "experiment.yaml")
    write_grid(tmp_path / "none", [claim(3.0)], {"fedavg": "fedavg", **targets})
    with pytest.raises(ConfigError, match=r"claims\[0\]\.a selects no cell of the grid: no cell has algorithm.dp"):
        load_experiment(tmp_path / "none" / "experiment.yaml")


def test_within_budget_reads_the_reached_epsilon_first_then_the_target() -> None:
    dp = {"algorithm": {"name": "fedavg", "dp": {"clip": 1.0, "target_epsilon": 4}}}
    assert within_budget(4.0, None, None, dp, False) and not within_budget(3.9, None, None, dp, True)
    assert within_budget(3.9, 3.8, None, dp, False)  # reached a little under its target
    assert not within_budget(1e9, None, None, {"algorithm": "fedavg"}, True)  # no DP: spends nothing, never selected
    noise = {"algorithm": {"name": "fedavg", "dp": {"clip": 1.0, "noise_multiplier": 2.0}}}
    assert within_budget(1.0, None, None, noise, True) and not within_budget(1.0, None, None, noise, False)


@settings(max_examples=80, deadline=None)
@given(st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.floats(allow_nan=True, allow_infinity=True),
                 st.text(max_size=4), st.dictionaries(st.sampled_from(["at_most", "at_least", ""]),
                                                      st.one_of(st.floats(allow_nan=True), st.text(max_size=3)),
                                                      max_size=2)))
def test_any_hand_written_bound_is_taken_or_one_config_error_line(value: object) -> None:
    try:
        bound = spent_bound(value, "claims[0]: a")
    except ConfigError as err:
        assert "\n" not in str(err) and str(err).startswith("claims[0]: a: epsilon selects")
    else:
        assert isinstance(value, dict) and list(value) == ["at_most"] and bound == value["at_most"] > 0
