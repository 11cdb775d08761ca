"""examples/fedexp: FedExP (Jhunjhunwala, Wang and Joshi, ICLR 2023) as a plugin package outside fedaccel,
installed into a temporary site: its server step against a hand computation, FedAvg bit for bit where the
extrapolation clamps at 1, and the name through `fedaccel run`; docs/tutorials/your-method.md's commands at a
tiny size (grid, judge, compare, plot)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from fedaccel import train
from fedaccel.algorithms.base import ClientUpdate, RoundInfo
from fedaccel.algorithms.registry import build_algorithm
from fedaccel.cli import main
from fedaccel.runs.config import recorded_plugins
from plugin_site import forget, install
from test_docs import readme_commands

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples/fedexp"
MODULE = "fedaccel_fedexp"
TUTORIAL = ROOT / "docs/tutorials/your-method.md"


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """examples/fedexp installed into a temporary site on sys.path, as `pip install -e examples/fedexp` does."""
    forget(MODULE)
    path = install(tmp_path / "site", distribution="fedaccel-fedexp", package=EXAMPLE, module=MODULE)
    monkeypatch.syspath_prepend(str(path))
    yield path
    forget(MODULE)


def step(algorithm: Any, w: list[float], deltas: list[list[float]], weights: list[float]) -> torch.Tensor:
    """One server step of ``algorithm``: its aggregate, then its server_end parts, on the given uploads."""
    info = RoundInfo(round=0, lr=0.1, prev_lr=0.1, weights=np.array(weights), seed=0)
    updates = [ClientUpdate(client=k, weight=p, steps=1, delta=torch.tensor(d, dtype=torch.float64))
               for k, (d, p) in enumerate(zip(deltas, weights))]
    w0 = torch.tensor(w, dtype=torch.float64)
    w_next = algorithm.single("aggregate")[1].aggregate(info, w0, updates)
    for _, part in algorithm.with_stage("server_end"):
        w_next, _ = part.server_end(info, w0, w_next, updates, None)
    return w_next


def test_client_level_dp_refuses_it_in_one_line(site: Path) -> None:
    """FedExP's step size comes from the raw uploads' norms, outside client-level DP: refused at load, naming its
    part (a new user's DP run of it reported an epsilon)."""
    pytest.importorskip("dp_accounting")
    from fedaccel.errors import ConfigError

    dp = {"clip": 1.0, "noise_multiplier": 1.0, "clients": 10, "fraction": 0.5, "sampling": "fixed", "rounds": 5}
    with pytest.raises(ConfigError, match="algorithm.dp cannot cover fedexp: its part 'extrapolation' reads the "
                                          "individual uploads in its server_end") as err:
        build_algorithm("fedexp", dp=dp)
    assert "\n" not in str(err.value)


def test_the_server_step_is_the_papers_by_hand(site: Path) -> None:
    # Three clients of equal weight (1/3), w = (1, 2), epsilon = 0.25:
    #   Delta_1 = (3, 0), Delta_2 = (0, 3), Delta_3 = (0, 0)  ->  mean Delta = (1, 1), ||Delta||^2 = 2
    #   sum_i ||Delta_i||^2 / M = (9 + 9 + 0) / 3 = 6
    #   eta_g = max(1, 6 / (2 (2 + 0.25))) = 6 / 4.5 = 4/3
    #   w_next = (1, 2) - 4/3 (1, 1) = (-1/3, 2/3)   (FedAvg: (0, 1))
    fedexp = build_algorithm("fedexp", epsilon=0.25)
    assert step(fedexp, [1, 2], [[3, 0], [0, 3], [0, 0]], [1 / 3] * 3).tolist() == pytest.approx([-1 / 3, 2 / 3],
                                                                                                  abs=1e-15)
    assert step(build_algorithm("fedavg"), [1, 2], [[3, 0], [0, 3], [0, 0]], [1 / 3] * 3).tolist() == \
        pytest.approx([0, 1], abs=1e-15)
    # Two clients holding 3/4 and 1/4 of the uploaders' data (weights 0.3 and 0.1), w = (0, 5), epsilon = 0.6:
    #   Delta_1 = (2, 0), Delta_2 = (-2, 0)  ->  mean Delta = 0.75 (2, 0) + 0.25 (-2, 0) = (1, 0), ||Delta||^2 = 1
    #   sum_i p_i ||Delta_i||^2 = 0.75 * 4 + 0.25 * 4 = 4
    #   eta_g = max(1, 4 / (2 (1 + 0.6))) = 4 / 3.2 = 1.25
    #   w_next = (0, 5) - 1.25 (1, 0) = (-1.25, 5)
    assert step(build_algorithm("fedexp", epsilon=0.6), [0, 5], [[2, 0], [-2, 0]], [0.3, 0.1]).tolist() == \
        pytest.approx([-1.25, 5], abs=1e-15)
    # Two equal updates (1, 1): sum_i p_i ||Delta_i||^2 = ||Delta||^2 = 2, eta_g = max(1, 2 / (2 (2 + eps))) = 1
    assert step(fedexp, [1, 2], [[1, 1], [1, 1]], [0.5, 0.5]).tolist() == [0, 1]


def test_a_non_positive_epsilon_is_one_line_naming_the_package(site: Path) -> None:
    from fedaccel.errors import ConfigError

    with pytest.raises(ConfigError, match=r"^algorithm 'fedexp' of fedaccel-fedexp 0\.1\.0 failed to build: "
                                          r"ValueError: epsilon must be > 0, got 0$"):
        build_algorithm("fedexp", epsilon=0)


G = torch.Generator().manual_seed(0)
X = torch.randn(120, 6, generator=G)
Y = (X[:, 0] - X[:, 1] > 0).long()
CLIENTS = np.array_split(np.argsort(Y.numpy(), kind="stable"), 3)  # label-sorted: non-IID


def fit(run_dir: Path, algorithm: Any) -> Any:
    torch.manual_seed(0)
    module = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 2))
    return train(module, X, Y, CLIENTS, X, Y, algorithm=algorithm, rounds=3, lr=0.2, batch_size=10,
                 run_dir=run_dir, progress=False)


def without_wall(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in row.items() if k != "wall_s"} for row in rows]


def test_where_the_extrapolation_clamps_at_1_it_is_fedavg_bit_for_bit(site: Path, tmp_path: Path) -> None:
    fedavg = fit(tmp_path / "fedavg", "fedavg")
    clamped = fit(tmp_path / "clamped", {"name": "fedexp", "epsilon": 1e12})  # eta_g = 1 in every round
    assert torch.equal(clamped.w, fedavg.w) and without_wall(clamped.metrics) == without_wall(fedavg.metrics)
    extrapolated = fit(tmp_path / "fedexp", "fedexp")  # non-IID clients: their updates disagree, eta_g > 1
    assert not torch.equal(extrapolated.w, fedavg.w)


TINY = ["--set", "data.dataset=digits", "--set", "data.clients=3", "--set", "data.split=case2", "--set",
        "train.rounds=2", "--set", "train.lr=0.1", "--set", "train.batch_size=20", "--set", "run.progress=false"]


def test_fedaccel_run_takes_the_name_and_records_the_package(site: Path, tmp_path: Path) -> None:
    def run(out: str, algorithm: str) -> list[dict[str, Any]]:
        assert main(["run", *TINY, "--set", f"algorithm={algorithm}", "--out", str(tmp_path / out)]) == 0
        return without_wall([json.loads(x) for x in (tmp_path / out / "metrics.jsonl").read_text().splitlines()])

    fedavg = run("fedavg", "fedavg")
    assert run("clamped", "{name: fedexp, epsilon: 1.0e+12}") == fedavg
    assert run("fedexp", "fedexp") != fedavg  # BHerd's Case 2 split: the clients' updates disagree, eta_g > 1
    recorded = recorded_plugins((tmp_path / "fedexp/config.yaml").read_text(), "fedexp")["algorithm"]
    assert (recorded["distribution"], recorded["version"], recorded["entry_point"]) == (
        "fedaccel-fedexp", "0.1.0", f"{MODULE}:fedexp")


def fenced(page: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", page, re.S)


def test_the_tutorial_shows_the_examples_files_as_they_are() -> None:
    page = TUTORIAL.read_text(encoding="utf-8")
    assert f"# examples/fedexp/{MODULE}.py\n{(EXAMPLE / f'{MODULE}.py').read_text()}" in fenced(page, "python")
    assert f"# examples/fedexp/fedexp.yaml\n{(EXAMPLE / 'fedexp.yaml').read_text()}" in fenced(page, "yaml")
    assert f"# examples/fedexp/pyproject.toml\n{(EXAMPLE / 'pyproject.toml').read_text()}" in fenced(page, "toml")
    assert "pip install -e examples/fedexp" in page


# the tutorial's commands at a tiny size: digits, 2 rounds (as tests/test_docs.py runs the README's tour)
AT_TINY_SIZE = ["--set", "data.dataset=digits", "--set", "train.rounds=2", "--set", "eval.train_samples=200",
                "--set", "run.progress=false", "--set", "run.threads=1"]


@pytest.mark.slow
def test_the_tutorials_commands_run_at_a_tiny_size(site: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """Every `fedaccel ...` command of the page, in order, from a folder holding the repository's files (pip's
    line is the site above); `-j N` dropped (worker processes have tests of their own)."""
    monkeypatch.chdir(tmp_path)
    for name in ("configs", "examples"):
        (tmp_path / name).symlink_to(ROOT / name)
    commands = readme_commands(TUTORIAL.read_text(encoding="utf-8"))
    assert [c[0] for c in commands] == ["algorithms", "run", "check-resume", "experiment", "judge", "compare", "plot"]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(site), str(ROOT)]))  # check-resume's resume: a new process
    for command in commands:
        for flag in ("-j", "--workers"):
            if flag in command:
                del command[command.index(flag):command.index(flag) + 2]
        status = main(command + AT_TINY_SIZE if command[0] in ("run", "check-resume", "experiment") else command)
        out = capsys.readouterr()
        assert status == 0, f"fedaccel {' '.join(command)} exited {status}: {out.err[-2000:]}"
        if command[0] == "algorithms":
            assert f"{MODULE}:fedexp from fedaccel-fedexp 0.1.0" in out.out
        if command[0] == "check-resume":
            assert "resumed in a new process: the same numbers" in out.out, out.out
        if command[0] == "judge":
            assert "FedExP reaches 90% in fewer rounds than FedAvg" in out.out
    judged = json.loads((tmp_path / "runs/fedexp/claims.json").read_text())
    assert [c["plugins"][0]["distribution"] for c in judged] == ["fedaccel-fedexp"] * 2
    assert (tmp_path / "fedexp.png").is_file() and (tmp_path / "runs/fedexp-one/metrics.jsonl").is_file()
    assert MODULE in sys.modules


@pytest.mark.slow
def test_pip_installs_the_example_with_its_entry_point(tmp_path: Path) -> None:
    """The temporary site above is what pip makes of examples/fedexp: the same module and entry point."""
    source = shutil.copytree(EXAMPLE, tmp_path / "fedexp")  # the build leaves build/ and *.egg-info in it
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                    "--no-index", "--target", str(tmp_path / "site"), str(source)], check=True, capture_output=True,
                   timeout=300, env={**os.environ, "PIP_NO_INPUT": "1"})
    (info,) = (tmp_path / "site").glob("fedaccel_fedexp-0.1.0.dist-info")
    assert "[fedaccel.algorithms]\nfedexp = fedaccel_fedexp:fedexp" in (info / "entry_points.txt").read_text()
    assert (tmp_path / "site" / f"{MODULE}.py").read_bytes() == (EXAMPLE / f"{MODULE}.py").read_bytes()
