"""Benchmarks that cannot rot: every script in benchmarks/ runs at its smallest size (``--smoke``),
exits 0 and prints the lines that carry its figures (their values are not checked: a smoke size
measures nothing). A new script is picked up by the glob and fails until it has ``--smoke`` and
an entry in FIGURES."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted((ROOT / "benchmarks").glob("*.py"))

#: Per script, the patterns of the lines its figures are printed in.
FIGURES = {
    "batch_tables.py": [r"\| 5 \| [\d.]+ \| [\d.]+ \| [\d.]+ \|", r"\| 40 \| [\d.]+ \| [\d.]+ \| [\d.]+ \|"],
    "batched_estimators.py": [r"bherd .*batched/per-client \d", r"grab .*batched/per-client \d"],
    "bherd_overhead.py": [r"time ratio bherd/fedavg: \d", r"BHerd extra memory: .* x tau\*d\*4"],
    "chunk_size.py": [r"\| svm \| 10 \| 8 \| [\d.]+ \| [\d.]+ \| [\d.]+ \| [\d.]+ \| \d+ \| [\d.]+ \|",
                      r"the default chunk against the best size: worst [\d.]+x"],
    "channels_last.py": [r"\| cnn \| 1x28x28 \| [\d.]+ \| [\d.]+ \| [\d.]+ \| [\d.e+-]+ \|",
                         r"cnn 1x28x28: float32 gradients' distance to the float64 one .*by_hand [\d.e+-]+"],
    "client_states.py": [r"load average \(1, 5, 15 min\) before: \d",
                         r"\| scaffold \| 2nn \| [\d.]+ \| [\d.]+ \| [\d.]+ \|", r"load average \(1, 5, 15 min\) after: \d"],
    "copy_check.py": [r"load average \(1, 5, 15 min\) before: \d", r"\d+ runs of docs/reproductions/[\w-]+/data",
                      r"ratio clocks first/every run's rows: [\d.]+; load average"],
    "engine_overhead.py": [r"ratio engine/plain: \d.*load average \(1, 5, 15 min\) after: \d",
                           r"load average \(1, 5, 15 min\) before: \d"],
    "fedgsnr_overhead.py": [r"planning share of a round over 1 rounds: [\d.]+% wall",
                            r"server scores, 4 clients x \d+ parameters: .* ratio blocked/whole: [\d.]+"],
    "local_step.py": [r"ratio round/raw: \d", r"ratio step/raw: \d"],
    "peers.py": [r"\| plain PyTorch loop \| [\d.]+ \| [\d.]+ \| 1\.00 \| [\d.]+ \|",
                 r"ratio in-process/plain \(2nn\): \d", r"ratio stacked/plain \(2nn\): \d",
                 r"load average \(1 min\) at end: [\d.]+"],
    "gpu_recipes.py": [r"scaffold +in-process +largest \|cpu - \w+\| over 1 rounds", r"0 recipe\(s\) differ between cpu and \w+"],
    "ray_grid.py": [r"ratio ray / -j \d+: +\d", r"ray start-up \(ray.init\): +\d"],
    "runtime_overhead.py": [r"load average \(1, 5, 15 min\) before: \d", r"ratio simulation/in-process: \d",
                            r"ratio deployment/in-process: \d", r"simulation/in-process \(rounds\): \d",
                            r"\| fedaccel deploy \| [\d.]+ \| [\d.]+ \| [\d.]+ \| [\d.]+ \|",
                            *(rf"\| {name} \| [\d.]+ \| [\d.]+ \| [\d.]+ \| [\d.]+ \|"
                              for name in ("in-process", "stacked", "simulation", "deployment"))],
    "scale.py": [r"load average \(1, 5, 15 min\) before: \d", r"load average \(1, 5, 15 min\) after: \d",
                 *(rf"\| {m} \| 4 \| {r} \| {a} \| [\d.]+ \| -?[\d.]+ \| \d+ \|"
                   for m in ("svm", "2nn") for r, a in (("in-process", "streamed"), ("stacked", "streamed"),
                                                        ("in-process", "stored"))),
                 r"2nn in-process: memory the rounds add at 4 clients minus at 2: -?[\d.]+ MB"],
    "warm_actors.py": [r"warm actors: [\d.]+ s a simulation", r"new actors: [\d.]+ s a simulation",
                       r"ratio warm/new: [\d.]+; saved -?[\d.]+ s"],
    "start_up.py": [r"fedaccel: [\d.]+ s \(median of 1", r"as before: [\d.]+ s", r"ratio fedaccel/as before: [\d.]+"],
    "seed_group_overheads.py": [r"load average \(1, 5, 15 min\) before: \d",
                                r"load fashion-mnist: gunzipped [\d.]+ s, kept [\d.]+ s; ratio kept/gunzipped: [\d.]+",
                                r"evaluate svm .*ratio once/each time: [\d.]+",
                                r"svm_case2 group, 1 rounds, each row fsynced: .*ratio one/own: [\d.]+",
                                r"svm_case2 group, 1 rounds, one copy: .*before each checkpoint [\d.]+ s; ratio: [\d.]+",
                                r"load average \(1, 5, 15 min\) after: \d"],
    "stacked_workers.py": [r"load average \(1, 5, 15 min\) before: \d",
                           r"4 groups of 5 stacked seeds, 3 rounds: one process [\d.]+ s, 2 workers [\d.]+ s",
                           r"ratio 2 workers / one process: [\d.]+; load average"],
    "stacked.py": [r"\| svm \| 100 \| 2 \| \d+ \| \d+ \([\d.]+x\)", r"\| cnn \| 50 \| 2 seeds x 2 \|",
                   r"auto against the faster runtime: worst [\d.]+x", r"load average \(1, 5, 15 min\) after: \d",
                   r"fedaccel/plain speed-up \(svm, K=\d+\): \d"],
    "gpu_floor.py": [rf"\| {m} \| 4 \| 3 \| [\d.]+ \| -?[\d.]+ \| — \| [\d.]+ \| — \| — \| [\d.e+-]+ \|"
                     for m in ("svm", "2nn", "cnn")],
    "paper_estimate.py": [r"fig3_alpha: svm/bherd: [\d.]+ s a round \(fixed [\d.]+ s\) x 5 group\(s\)",
                          r"estimate: fig3_alpha: 8 groups of 2 stacked seeds, T = 500: [\d.]+ min on cpu"],
    "dp_calibration.py": [r"load average \(1, 5, 15 min\) before: \d", r"\d+ calibration\(s\) asked by 1 experiment file",
                          r"ratio table/search: [\d.]+; load average"],
    "report_reading.py": [r"load average \(1, 5, 15 min\) before: \d", r"\d+ packed grid\(s\) of docs/reproductions/[\w-]+/data",
                          r"ratio memory/folders: [\d.]+; load average"],
    "row_reading.py": [r"load average \(1, 5, 15 min\) before: \d", r"[\d,]+ rows of docs/reproductions/bherd/data",
                       r"ratio quick/plain: [\d.]+; load average",
                       r"packed records, .*ratio quick/plain \(records\): [\d.]+",
                       r"packed records: parsed .*ratio counted/walked: [\d.]+", r"rows: parsed .*ratio counted/walked",
                       r"lists of selected steps .*ratio list/items: [\d.]+"],
    "threads.py": [r"svm, machine as it is: .*ratio 1/\d+ threads \d", r"busy processes beside: .*ratio 1/\d+ threads \d"],
}

#: Scripts that need a runtime beyond torch: skipped without it.
NEEDS = {"ray_grid.py": "ray", "runtime_overhead.py": "flwr", "warm_actors.py": "flwr"}


@pytest.mark.slow  # a fresh interpreter importing torch each: 3-10 s on 2 cores, 20-40 s with Ray or Flower
@pytest.mark.parametrize("script", SCRIPTS, ids=[s.stem for s in SCRIPTS])
def test_benchmark_runs_at_its_smallest_size_and_prints_its_figures(script: Path) -> None:
    """``python benchmarks/X.py --smoke`` from the repository root: exit 0, and every figure line printed."""
    module = NEEDS.get(script.name)
    if module is not None and importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed")
    assert "--smoke" in script.read_text(), f"{script.name} has no --smoke mode (its smallest size, for this test)"
    assert script.name in FIGURES, f"say in FIGURES which lines {script.name} prints its figures in"
    _assert_smoke_prints(script, FIGURES[script.name])


def _assert_smoke_prints(script: Path, patterns: list[str], *args: str) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]),
           "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""),
           "RAY_ADDRESS": "", "MPLBACKEND": "Agg"}
    done = subprocess.run([sys.executable, str(script), "--smoke", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600, check=False)
    assert done.returncode == 0, f"{script.name} --smoke exited {done.returncode}:\n{done.stderr[-3000:]}"
    missing = [p for p in patterns if not re.search(p, done.stdout)]
    assert not missing, f"{script.name} --smoke printed none of {missing}:\n{done.stdout[-3000:]}"


@pytest.mark.slow
def test_engine_overhead_on_the_2nn_prints_its_rates_and_its_products_floor() -> None:
    _assert_smoke_prints(ROOT / "benchmarks" / "engine_overhead.py",
                         [r"engine [\d.]+ GFLOP/s \(\d+% of its repeat's rate, \d+% of the best\)",
                          r"matrix products alone .*: \d+% of the repeat's rate; engine time / their time [\d.]+"],
                         "--model", "2nn")


@pytest.mark.slow
def test_paper_estimate_with_arms_stacked_times_one_group_of_every_algorithm() -> None:
    _assert_smoke_prints(ROOT / "benchmarks" / "paper_estimate.py",
                         [r"fig3_alpha: 8 runs stacked: [\d.]+ s a round \(fixed [\d.]+ s\) x 1 group\(s\)",
                          r"estimate: fig3_alpha, arms stacked: 1 groups of 8 runs, T = 500: [\d.]+ min on cpu"], "--stack-arms")


def _fedgsnr_overhead() -> object:
    spec = importlib.util.spec_from_file_location("fedgsnr_overhead", ROOT / "benchmarks" / "fedgsnr_overhead.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_fedgsnr_overhead_picks_its_cell_by_values_whatever_the_grid_calls_it(tmp_path: Path) -> None:
    """The default cell is a FedGSNR cell on the Dirichlet split, found by its config, not its folder name;
    without a Dirichlet cell, the first FedGSNR one."""
    from fedaccel.grids.experiment import load_experiment

    bench = _fedgsnr_overhead()
    table1 = load_experiment(bench.EXPERIMENT)
    name = bench.default_cell(table1)
    config = table1.cell(name).to_dict()
    assert (config["algorithm"]["name"], config["data"]["split"]["name"]) == ("fedgsnr", "dirichlet")
    grid = tmp_path / "grid.yaml"
    grid.write_text("name: other\nbase: {model: svm}\ngrid:\n  run.seed: [3, 4]\n"
                    "  algorithm: [fedavg, {name: fedgsnr, samples: 8}, scaffold]\n  data.split: [iid, case2]\n")
    other = load_experiment(grid)
    assert bench.default_cell(other) == "run.seed=3,algorithm=fedgsnr-8,data.split=iid"


def test_an_unknown_cell_is_one_line_with_the_nearest_cell_names() -> None:
    """The cell name fedgsnr_overhead.py once asked for: one line, at most five of the grid's cells, the nearest."""
    from fedaccel.errors import ConfigError
    from fedaccel.grids.experiment import load_experiment

    table1 = load_experiment(ROOT / "experiments" / "fedgsnr" / "quick" / "table1.yaml")
    asked = "data.split=dirichlet-0.1,algorithm=fedgsnr-64-20"
    with pytest.raises(ConfigError) as error:
        table1.cell(asked)
    message = str(error.value)
    assert "\n" not in message and len(message) < 600, message
    assert message.startswith(f"experiment 'table1' has no cell {asked!r}; nearest: ")
    assert message.endswith(f" (of {len(table1.cells)} cells)")
    named = message.split("nearest: ")[1].rsplit(" (of", 1)[0].split(", ")
    cells = [cell for cell, _ in table1.cells]
    assert 1 <= len(named) <= 5 and set(named) <= set(cells)
    assert all(n.startswith(asked + ",") for n in named), named  # the cells it was renamed to
