"""fedaccel.train: run folders (refuse or resume), the algorithm argument, schedules, kept models."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from fedaccel import History, compose, train
from fedaccel.algorithms.fedprox import fedprox
from fedaccel.algorithms.mean import mean_aggregate
from fedaccel.errors import ConfigError, UserError
from fedaccel.runs import loop as runner
from fedaccel.runs.stopping import Interrupted

G = torch.Generator().manual_seed(0)
X = torch.randn(120, 6, generator=G)
Y = (X[:, 0] - X[:, 1] > 0).long()
CLIENTS = np.array_split(np.argsort(Y.numpy(), kind="stable"), 4)  # label-sorted: non-IID


def model() -> nn.Module:
    with torch.random.fork_rng():
        torch.manual_seed(0)
        return nn.Linear(6, 2)


def fit(run_dir: Path | None = None, **options: Any) -> History:
    settings: dict[str, Any] = {"rounds": 3, "lr": 0.2, "batch_size": 10, "progress": False, **options}
    return train(model(), X, Y, CLIENTS, X, Y, run_dir=run_dir, **settings)


def without_wall(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in row.items() if k != "wall_s"} for row in rows]


# ---------------------------------------------------------------------------------------------
# The run folder: refuse a second run, resume on request
# ---------------------------------------------------------------------------------------------


def test_a_second_train_into_the_same_folder_is_refused_and_appends_nothing(tmp_path: Path) -> None:
    first = fit(tmp_path / "run", rounds=5)
    assert len(first.metrics) == 6
    with pytest.raises(UserError, match="already holds a run; pass resume=True") as err:
        fit(tmp_path / "run", rounds=5)
    assert "\n" not in str(err.value)
    assert len((tmp_path / "run/metrics.jsonl").read_text().splitlines()) == 6


def cut_in_round_7(path: Path, monkeypatch: pytest.MonkeyPatch, **options: Any) -> None:
    """``fit`` into ``path`` (``rounds=7``, checkpoints at 5 and 7), stopped by Ctrl-C in round 7: the
    checkpoint of round 5 stays, and the rows of rounds 0-6."""
    real_round = runner.run_round

    def dies_in_round_7(algorithm, state, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        if state.round == 6:
            raise KeyboardInterrupt
        return real_round(algorithm, state, *args, **kwargs)

    monkeypatch.setattr(runner, "run_round", dies_in_round_7)
    with pytest.raises(Interrupted, match="continues after round 5"):  # Ctrl-C: the last checkpoint is round 5
        fit(path, **options)
    monkeypatch.undo()


def test_resume_continues_an_interrupted_run_to_the_uninterrupted_numbers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    options = {"rounds": 7, "algorithm": "scaffold", "client_fraction": 0.5}  # checkpoints at 5 and 7
    whole = fit(tmp_path / "whole", **options)
    cut_in_round_7(tmp_path / "cut", monkeypatch, **options)
    assert len((tmp_path / "cut/metrics.jsonl").read_text().splitlines()) == 7  # rounds 0-6, checkpoint at 5

    resumed = fit(tmp_path / "cut", resume=True, **options)
    assert without_wall(resumed.metrics) == without_wall(whole.metrics)
    assert torch.equal(resumed.w, whole.w)
    assert torch.equal(resumed.state.server[0], whole.state.server[0])  # SCAFFOLD's c
    for mine, theirs in zip(resumed.state.clients, whole.state.clients, strict=True):  # the c_i
        assert (mine[0] is None and theirs[0] is None) or torch.equal(mine[0], theirs[0])


def test_resume_needs_the_same_settings_and_starts_afresh_in_an_empty_folder(tmp_path: Path) -> None:
    fit(tmp_path / "run")
    with pytest.raises(UserError, match="holds a run with train.lr = 0.2, not 0.3") as err:
        fit(tmp_path / "run", resume=True, lr=0.3)
    assert "\n" not in str(err.value)
    assert len(fit(tmp_path / "new", resume=True).metrics) == 4


# ---------------------------------------------------------------------------------------------
# algorithm=: a name, a name with hyperparameters, or an Algorithm
# ---------------------------------------------------------------------------------------------


def uploads(history: History) -> list[int]:
    return [row["uploaded"] for row in history.metrics[1:]]


def test_fedumf_by_name_takes_c_from_client_fraction(tmp_path: Path) -> None:
    by_name = fit(tmp_path / "a", algorithm="fedumf", client_fraction=0.5)
    assert uploads(by_name) == [2, 2, 2]  # C = 0.5 of 4 clients, as docs/algorithms.md says
    assert [row["clients"] for row in by_name.metrics[1:]] == [4, 4, 4]
    spelled_out = fit(tmp_path / "b", algorithm={"name": "fedumf", "fraction": 0.5}, client_fraction=0.5)
    assert torch.equal(by_name.w, spelled_out.w)
    assert uploads(fit(tmp_path / "c", algorithm={"name": "fedumf", "fraction": 0.25})) == [1, 1, 1]


def test_an_algorithm_object_is_used_as_it_is(tmp_path: Path) -> None:
    composed = compose("my-prox", fedprox(mu=0.1), mean_aggregate())
    mine = fit(tmp_path / "a", algorithm=composed)
    named = fit(tmp_path / "b", algorithm={"name": "fedprox", "mu": 0.1})
    assert torch.equal(mine.w, named.w)
    assert "name: my-prox" in (tmp_path / "a/config.yaml").read_text()


def test_an_algorithm_objects_settings_tell_its_runs_apart_in_tables_and_on_resume(
        tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """A new user's myprox(mu=5.0) and myprox(mu=0.0), given as objects, were both recorded as `name: myprox` and
    `compare` pooled them into one row (and FedAvg with a term added into FedAvg's). Now the config keeps the
    object's fingerprint: one setting's seeds share a row, two settings do not, and a resume with another
    setting, or from the command line (which cannot rebuild an object), is one line."""
    from fedaccel.cli import main
    from fedaccel.report.tables import compare_table

    def prox(mu: float) -> Any:
        return compose("my-prox", fedprox(mu=mu), mean_aggregate())

    fit(tmp_path / "g" / "strong0", algorithm=prox(5.0))
    fit(tmp_path / "g" / "strong1", algorithm=prox(5.0), seed=1)
    fit(tmp_path / "g" / "none", algorithm=prox(0.0))
    fit(tmp_path / "g" / "fedavg", algorithm="fedavg")
    fit(tmp_path / "g" / "fedavg-termed", algorithm=compose("fedavg", fedprox(mu=5.0), mean_aggregate()))
    recorded = {run.name: yaml.safe_load((run / "config.yaml").read_text())["algorithm"]
                for run in (tmp_path / "g").iterdir()}
    assert recorded["strong0"] == recorded["strong1"] != recorded["none"]
    assert recorded["fedavg"] == {"name": "fedavg"} and set(recorded["fedavg-termed"]) == {"name", "object"}
    rows = [line.split(" | ")[:2] for line in compare_table([tmp_path / "g"], [0.5]).splitlines()[2:]
            if line.startswith("|")]
    assert sorted(seeds for _, seeds in rows) == ["1", "1", "1", "2"], rows  # the 5.0 pair alone shares a row
    with pytest.raises(UserError, match="holds a run with algorithm.object"):
        fit(tmp_path / "g" / "none", algorithm=prox(5.0), resume=True)
    fit(tmp_path / "g" / "none", algorithm=prox(0.0), resume=True)  # its own setting is taken
    (tmp_path / "g" / "strong0" / "summary.json").unlink()
    capsys.readouterr()
    assert main(["run", "--resume", str(tmp_path / "g" / "strong0")]) == 2
    err = capsys.readouterr().err
    assert "is a run of fedaccel.train" in err and "resume=True) and the same module, data, partition and algorithm " \
        "object" in err and err.count("\n") == 1


def test_runs_on_another_partition_data_or_model_are_told_apart_and_seeds_of_one_are_not(tmp_path: Path) -> None:
    """train() recorded every partition as `split: iid` of `dataset: custom` and a model by its class name, so a
    researcher's IID and label-sorted runs of FedAvg (or two widths of one model) shared one row of `compare`. The
    config now keeps fingerprints of the partition, the data and the architecture (not its weights: the seeds')."""
    from fedaccel.report.tables import compare_table

    iid = np.array_split(np.random.default_rng(0).permutation(len(Y)), 4)

    def mlp(width: int) -> nn.Module:
        return nn.Sequential(nn.Linear(6, width), nn.ReLU(), nn.Linear(width, 2))

    for name, module, parts, x, seed in [("sorted0", model(), CLIENTS, X, 0), ("sorted1", model(), CLIENTS, X, 1),
                                         ("iid", model(), iid, X, 0), ("scaled", model(), CLIENTS, X * 2, 0),
                                         ("wide", mlp(8), CLIENTS, X, 0), ("wider", mlp(16), CLIENTS, X, 0)]:
        train(module, x, Y, parts, x, Y, rounds=2, lr=0.2, batch_size=10, progress=False, seed=seed,
              run_dir=tmp_path / "g" / name)
    config = {run.name: yaml.safe_load((run / "config.yaml").read_text()) for run in (tmp_path / "g").iterdir()}
    assert config["sorted0"]["data"]["split"] == config["sorted1"]["data"]["split"]
    assert config["sorted0"]["data"]["split"]["name"] == "given"
    assert config["iid"]["data"]["split"]["partition"] != config["sorted0"]["data"]["split"]["partition"]
    assert config["scaled"]["data"]["split"]["data"] != config["sorted0"]["data"]["split"]["data"]
    assert config["wide"]["model"] != config["wider"]["model"] and config["sorted0"]["model"] == config["sorted1"]["model"]
    rows = [line.split(" | ")[1] for line in compare_table([tmp_path / "g"], [0.5]).splitlines()[2:]
            if line.startswith("|")]
    assert sorted(rows) == ["1", "1", "1", "1", "2"], rows  # the two seeds of one setting alone share a row


def test_a_run_recorded_before_the_fingerprints_is_refused_on_resume_saying_why(tmp_path: Path) -> None:
    """Its config has no `model.object` (or data fingerprints): no setting could match, so the line says why rather
    than "resume it with its settings" (a review finding)."""
    fit(tmp_path / "run", rounds=2)
    config = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    del config["model"]["object"]
    config["data"]["split"] = {"name": "iid"}  # as train() recorded every partition before
    (tmp_path / "run" / "config.yaml").write_text(yaml.safe_dump(config))
    (tmp_path / "run" / "summary.json").unlink()
    with pytest.raises(UserError, match="was started by a fedaccel that did not record model.object .* start it "
                                        "again in another folder") as err:
        fit(tmp_path / "run", rounds=2, resume=True)
    assert "\n" not in str(err.value)


def test_an_algorithm_objects_fingerprint_is_the_same_in_another_process() -> None:
    """Nothing of an address or a hash seed enters it: a resume in a new process finds the same setting."""
    import os
    import subprocess
    import sys

    from fedaccel.algorithms.fingerprint import fingerprint

    code = ("from fedaccel import compose; from fedaccel.algorithms.fedprox import fedprox; "
            "from fedaccel.algorithms.mean import mean_aggregate; from fedaccel.algorithms.fingerprint import "
            "fingerprint; print(fingerprint(compose('my-prox', fedprox(mu=0.3), mean_aggregate())))")
    here = fingerprint(compose("my-prox", fedprox(mu=0.3), mean_aggregate()))
    for seed in ("1", "2"):
        there = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                               env={**os.environ, "PYTHONHASHSEED": seed}).stdout.strip()
        assert there == here
    assert fingerprint(compose("my-prox", fedprox(mu=0.30000001), mean_aggregate())) != here


@pytest.mark.parametrize(
    "options,message",
    [
        ({"algorithm": "fedumff"}, "unknown algorithm 'fedumff'"),
        ({"algorithm": {"name": "fedumf", "C": 0.5}}, "algorithm 'fedumf' has no hyperparameter 'C'"),
        ({"algorithm": 3}, "algorithm must be a name or a mapping"),
        ({"lrr": 0.1}, "unknown config key 'train.lrr'"),
        ({"order": "sorted"}, "train.order must be one of"),
        ({"participation": [[0, 9]]}, "names client 9"),
        # values a config file refuses at load were taken by train(): a folder of round 0 only, 1 client in 4 a
        # round, a ZeroDivisionError or numpy's and tqdm's errors mid-run, each leaving a folder behind
        ({"rounds": 0}, "train.rounds must be >= 1"),
        ({"client_fraction": 0}, r"train.client_fraction must be in \(0, 1\]"),
        ({"client_fraction": 1.5}, r"train.client_fraction must be in \(0, 1\]"),
        ({"eval_every": 0}, "eval.every must be >= 1"),
        ({"seed": "a"}, "run.seed must be of type int"),
        ({"progress": "no"}, "run.progress must be of type bool"),
        ({"lr_schedule": {"name": "step", "milestones": [0.1]}}, "rounds to round 0"),
    ],
)
def test_bad_arguments_are_one_line_config_errors(options: dict[str, Any], message: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=message) as err:
        fit(tmp_path / "x", **options)
    assert "\n" not in str(err.value)
    assert not (tmp_path / "x").exists()  # refused before any folder is made


@pytest.mark.parametrize(("partition", "message"), [
    ([np.array([0, 1, 2]), np.array([3, 4, 700])], r"partition has an index outside 0\.\.119"),
    ([np.array([-1, 1]), np.array([2, 3])], r"partition has an index outside 0\.\.119"),
    ([np.array([0, 1, 2]), np.array([2, 3])], "partition gives a sample to two clients"),
    ([np.array([0.5, 1.0]), np.array([2, 3])], "partition must hold integer sample indices"),
])
def test_a_partition_out_of_range_overlapping_or_fractional_is_refused_before_a_folder(
        partition: list[np.ndarray], message: str, tmp_path: Path) -> None:
    """A new user's partitions: an index past the data was torch's IndexError after the folder held a round-0 row
    (the same folder was then refused); overlapping clients and float indices were taken silently."""
    with pytest.raises(ConfigError, match=message) as err:
        train(model(), X, Y, partition, X, Y, run_dir=tmp_path / "x", rounds=1, progress=False)
    assert "\n" not in str(err.value)
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("labels, message", [
    (lambda y: y[:-5], r"x_train and y_train must hold one label per input: shapes \(\d+, 6\) and \(\d+,\)"),
    (lambda y: y.float(), r"y_train must be class indices, a 1-D integer tensor, for \w+'s cross-entropy: got float32"),
    (lambda y: torch.nn.functional.one_hot(y), r"got int64 of shape \(\d+, \d+\) \(one-hot rows\? y.argmax\(1\)"),
    (lambda y: y.numpy(), r"y_train must be a torch tensor, got ndarray"),
])
def test_labels_that_cannot_train_the_module_are_one_line_before_a_folder(
        labels: Any, message: str, tmp_path: Path) -> None:
    """Labels shorter than the inputs, floats and one-hot rows were torch's errors mid-run, with error.txt left
    in a new run folder."""
    with pytest.raises(UserError, match=message) as err:
        train(model(), X, labels(Y), [np.arange(0, 30), np.arange(30, 60)], X, Y, run_dir=tmp_path / "x", rounds=1,
              progress=False)
    assert "\n" not in str(err.value) and not (tmp_path / "x").exists()


def test_a_preset_sets_the_train_and_eval_keys_it_sets_in_a_config(tmp_path: Path) -> None:
    """train() applied only a preset's algorithm part (momentum, weight decay, order, schedule and FedDC's evaluated
    models were dropped, silently): the preset's run now equals the same keys given by hand."""
    from fedaccel.runs.config import load_config

    preset = fit(tmp_path / "preset", algorithm={"name": "fednova", "preset": "fednova-code"}, rounds=2)
    wanted = load_config(None, ["algorithm=fednova", "algorithm.preset=fednova-code"])
    kept = yaml.safe_load((preset.run_dir / "config.yaml").read_text())
    for key in ("momentum", "weight_decay", "order", "last_batch", "lr_schedule"):
        assert kept["train"][key] == getattr(wanted.train, key), key
    assert kept["train"]["momentum"] != 0  # the preset's
    by_hand = {key: kept["train"][key] for key in ("momentum", "weight_decay", "order", "last_batch", "lr_schedule")}
    same = fit(tmp_path / "by-hand", algorithm={k: v for k, v in kept["algorithm"].items() if k != "preset"},
               rounds=2, **by_hand)
    assert torch.equal(preset.w, same.w)
    scaffold = fit(tmp_path / "feddc", algorithm={"name": "scaffold", "preset": "feddc-code"}, rounds=1)
    assert "client_mean/test_acc" in scaffold.metrics[-1]  # the preset's eval.models


def test_an_algorithm_object_beside_a_client_fraction_it_would_not_use_is_refused(tmp_path: Path) -> None:
    """build_algorithm("fedumf") selects C = 0.1 of the clients; client_fraction=0.5 beside it was silently unused."""
    from fedaccel.algorithms.registry import build_algorithm

    with pytest.raises(UserError, match=r"algorithm 'fedumf' selects its own clients, a fraction 0.1 of them, so "
                                        r"client_fraction=0.5 would not be used") as err:
        fit(tmp_path / "x", algorithm=build_algorithm("fedumf"), client_fraction=0.5)
    assert "\n" not in str(err.value) and not (tmp_path / "x").exists()
    fit(tmp_path / "same", algorithm=build_algorithm("fedumf", fraction=0.5), client_fraction=0.5)


class Accuracy(nn.Module):
    """A module whose correct() returns an accuracy, not a count (the contract is a count)."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = model()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x)

    def correct(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return (out.argmax(1) == y).float().mean()


def with_nan(x: torch.Tensor) -> torch.Tensor:
    x = x.clone()
    x[7, 3] = float("nan")
    return x


@pytest.mark.parametrize("case, message", [
    ({"y": Y * 4}, r"cannot score x_train\[:64\] and y_train\[:64\]: IndexError: Target 4 is out of bounds"),
    ({"y": torch.where(torch.arange(len(Y)) == 100, 2, Y)}, r"y_train holds labels 0\.\.2, but Linear has 2 outputs"),
    ({"x": X[:, :3]}, r"cannot score x_train\[:64\] .*: RuntimeError: mat1 and mat2 shapes cannot be multiplied"),
    ({"module": model().double()}, r"RuntimeError: mat1 and mat2 must have the same dtype"),
    ({"module": Accuracy()}, r"Accuracy.correct\(output, y\) must return how many of the batch's samples are correct "
                             r"\(a count: .*\), got 0.\d+ for 64 samples"),
    ({"x": with_nan(X)}, r"x_train holds NaN or infinite values in 1 sample\(s\), the first at index 7"),
    ({"x": X.numpy()}, r"x_train must be a torch tensor, got ndarray \(torch.from_numpy makes one\)"),
    ({"partition": np.arange(len(Y))}, r"partition must be one index array per client .* a single number, 0, "),
    ({"partition": None}, r"partition must be one index array per client \(a list of arrays\), got NoneType"),
])
def test_data_the_module_cannot_train_on_is_one_line_before_a_folder(
        case: dict[str, Any], message: str, tmp_path: Path) -> None:
    """Labels outside the module's outputs, inputs of another shape or dtype, NaN inputs and an accuracy for a count
    were torch's tracebacks mid-run, a divergence blamed on the learning rate, or test_acc 0 in every row."""
    x, y = case.get("x", X), case.get("y", Y)
    with pytest.raises(UserError, match=message) as err:
        train(case.get("module", model()), x, y, case.get("partition", CLIENTS), x, y, run_dir=tmp_path / "x",
              rounds=1, progress=False)
    assert "\n" not in str(err.value) and not (tmp_path / "x").exists()


def test_a_train_folder_given_to_resume_says_train_continues_it(tmp_path: Path) -> None:
    """fedaccel.resume (and `fedaccel run --resume`) of a train() folder said "unknown dataset 'custom'"."""
    import fedaccel

    fit(tmp_path / "mine", rounds=1)
    with pytest.raises(ConfigError, match=r"is a run of fedaccel.train on your own module and data \(model 'Linear'\), "
                                          r"which no config can build: continue it with fedaccel.train\(\.\.\., run_dir="):
        fedaccel.resume(tmp_path / "mine")


@pytest.mark.parametrize("call, message", [
    (lambda f: f.load_config(None, "train.rounds=2"), r"overrides are a list of key=value strings, got one string"),
    (lambda f: f.load_experiment("experiments/demo.yaml", "train.rounds=2"), r"got one string"),
    (lambda f: f.load_config(None, [2]), r"overrides are key=value strings, got 2"),
    (lambda f: f.load_config({"train": {"rounds": 2}}), r"load_config takes a config file's path, got dict \(.*from_dict"),
    (lambda f: f.run("configs/demo.yaml"), r"run takes a Config, got str: fedaccel.load_config\(PATH\) makes one"),
    (lambda f: f.compose("mine", "fedavg"), r"compose\('mine', \.\.\.\) takes Part objects .*got str 'fedavg'"),
])
def test_an_argument_of_the_wrong_kind_is_said_in_one_line(call: Any, message: str) -> None:
    """A string for a list of overrides was read a character at a time ("--set expects key=value, got 't'"); a path
    given to run, a mapping to load_config and a recipe name to compose were AttributeErrors or pathlib's TypeError."""
    import fedaccel

    with pytest.raises((UserError, TypeError), match=message) as err:
        call(fedaccel)
    assert "\n" not in str(err.value)


def test_every_name_the_api_page_lists_is_importable_from_fedaccel_once() -> None:
    """api.md says everything on it is importable from fedaccel; check_resume was not, and dir() listed train twice."""
    import re

    import fedaccel

    page = Path(__file__).parents[1].joinpath("docs/reference/api.md").read_text()
    for name in re.findall(r"^::: fedaccel\.[\w.]+\.(\w+)$", page, re.MULTILINE):
        assert getattr(fedaccel, name) is not None, name
    fedaccel.train  # noqa: B018  # imported now: in globals() and in the lazy table
    assert len(dir(fedaccel)) == len(set(dir(fedaccel)))


# ---------------------------------------------------------------------------------------------
# participation and order through the API; keep_models
# ---------------------------------------------------------------------------------------------


def test_participation_schedule_from_the_api(tmp_path: Path) -> None:
    schedule = (np.array([2]), (0, 3))  # any sequences of client ids; round t uses entry (t - 1) mod 2
    avg = fit(tmp_path / "a", participation=schedule)
    assert [row["clients"] for row in avg.metrics[1:]] == [1, 2, 1]
    umf = fit(tmp_path / "b", algorithm="fedumf", participation=schedule)
    assert uploads(umf) == [1, 2, 1] and [row["clients"] for row in umf.metrics[1:]] == [4, 4, 4]
    stored = yaml.safe_load((tmp_path / "b/config.yaml").read_text())
    assert stored["train"]["participation"] == [[2], [0, 3]]  # plain lists in the run's config


def test_given_order_reaches_the_clients(tmp_path: Path) -> None:
    given = fit(tmp_path / "a", order="given", batch_size=30, local_epochs=0.5)
    fixed = fit(tmp_path / "b", batch_size=30, local_epochs=0.5)
    assert not torch.equal(given.w, fixed.w)  # one batch of 15 per client: which 15 differs
    assert "order: given" in (tmp_path / "a/config.yaml").read_text()


def test_keep_models_keeps_the_global_model_of_every_evaluated_round(tmp_path: Path) -> None:
    w0 = torch.cat([p.detach().reshape(-1) for p in model().parameters()])
    history = fit(tmp_path / "a", rounds=5, eval_every=2, keep_models=True)
    assert sorted(history.models) == [row["round"] for row in history.metrics] == [0, 2, 4, 5]
    assert torch.equal(history.models[0], w0)
    assert torch.equal(history.models[5], history.w)
    assert not torch.equal(history.models[2], history.models[4])
    shorter = fit(tmp_path / "b", rounds=2, keep_models=True)
    assert torch.equal(shorter.models[2], history.models[2])  # the round-2 model, not a later one
    assert fit(tmp_path / "c").models == {}


@settings(max_examples=60, deadline=None)
@given(st.floats(0, 10, allow_nan=False), st.floats(0, 10, allow_nan=False))
def test_two_settings_of_an_algorithm_object_have_two_fingerprints_and_one_setting_one(a: float, b: float) -> None:
    from fedaccel.algorithms.fingerprint import fingerprint

    first, second = (fingerprint(compose("my-prox", fedprox(mu=mu), mean_aggregate())) for mu in (a, b))
    assert (first == second) == (a == b and str(a) == str(b))  # 0.0 and -0.0 are two settings' floats too


def test_a_global_an_algorithm_objects_term_reads_is_a_setting_too() -> None:
    """A script's `MU = 5.0` read by its term gave the fingerprint of `MU = 0.0` (a review finding): the globals a
    stage reads are fed by value."""
    from fedaccel import Part
    from fedaccel.algorithms.fingerprint import fingerprint

    source = "def term(ctx, w, ss, cs):\n    return lambda theta, grad: grad.add_(theta - w, alpha=MU)\n"
    prints = []
    for mu in (5.0, 0.0, 5.0):
        script: dict[str, Any] = {"MU": mu}
        exec(source, script)  # noqa: S102 - the test's own text: a script's module
        prints.append(fingerprint(compose("g", Part(name="p", local_term=script["term"]), mean_aggregate())))
    assert prints[0] == prints[2] != prints[1]


def test_what_a_term_reads_of_an_object_is_the_attributes_its_code_names(tmp_path: Path) -> None:
    """A script's `args.mu` read by its term fed the whole argparse Namespace (its --seed, its --out), and a module
    logger fed every logger of the process: seeds of one setting split into rows, and a resume was refused (a
    review finding). Now only the attributes the code names count, and of a logger nothing but its type."""
    import argparse
    import logging

    from fedaccel import Part
    from fedaccel.algorithms.fingerprint import fingerprint

    source = ("def term(ctx, w, ss, cs):\n    log.debug('term')\n"
              "    return lambda theta, grad: grad.add_(theta - w, alpha=args.mu)\n")

    def printed(mu: float, seed: int, out: str) -> str:
        script: dict[str, Any] = {"args": argparse.Namespace(mu=mu, seed=seed, out=out),
                                  "log": logging.getLogger(f"script{seed}")}
        exec(source, script)  # noqa: S102 - the test's own text: a script's module
        return fingerprint(compose("g", Part(name="p", local_term=script["term"]), mean_aggregate()))

    first = printed(5.0, 0, "a0")
    logging.getLogger("another.logger.since").info("x")  # the process's loggers change between runs
    assert printed(5.0, 1, "a1") == first != printed(0.0, 0, "a0")


def test_a_module_with_extra_state_trains_and_an_address_in_its_repr_is_no_setting(tmp_path: Path) -> None:
    """A state_dict entry that is not a tensor (torch's get_extra_state) made train() fail at its fingerprint, and a
    function in a layer's repr put a memory address in it (review findings)."""
    from fedaccel.api import architecture

    class Noted(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc, self.act = nn.Linear(6, 2), (lambda x: x)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.act(self.fc(x))

        def get_extra_state(self) -> dict:
            return {"note": "mine"}

        def set_extra_state(self, state: dict) -> None:
            pass

        def extra_repr(self) -> str:
            return f"act={self.act}"  # '<function ... at 0x...>'

    assert "0x" in repr(Noted())
    assert architecture(Noted()) == architecture(Noted())
    fit(tmp_path / "r", rounds=1)  # the plain Linear
    history = train(Noted(), X, Y, CLIENTS, X, Y, rounds=1, lr=0.2, batch_size=10, progress=False,
                    run_dir=tmp_path / "noted")
    assert len(history.metrics) == 2
