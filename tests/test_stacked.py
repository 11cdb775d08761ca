"""The stacked-client runtime gives the numbers of the in-process runtime, for every recipe and model kind."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from fedaccel.algorithms.registry import RECIPES, build_algorithm, hyperparameters
from fedaccel.engine.federation import Federation
from fedaccel.engine.local import LocalOptions
from fedaccel.engine.round import init_state, run_round
from fedaccel.engine.stacked import StackedClients, kernel_kind
from fedaccel.models import build_model

SIZES = [3, 5, 8, 11, 6, 9]  # unequal tau_i; client 0 holds fewer samples than a batch


def federation(model: str | nn.Module, shape: tuple[int, ...] = (8,), **options: Any) -> Federation:
    g = torch.Generator().manual_seed(3)
    n = sum(SIZES)
    x, y = torch.randn(n, *shape, generator=g), torch.randint(0, 3, (n,), generator=g)
    bounds = np.cumsum([0, *SIZES])
    parts = [np.arange(lo, hi) for lo, hi in zip(bounds[:-1], bounds[1:])]
    module = build_model(model, shape, 3, seed=1, **({"hidden": 5} if model == "2nn" else {})) \
        if isinstance(model, str) else model
    defaults: dict[str, Any] = {"lr": 0.1, "batch_size": 4, "local_epochs": 1.5}
    return Federation(module, x, y, parts, x, y, LocalOptions(**{**defaults, **options}))


def algorithm_for(name: str) -> Any:
    params: dict[str, Any] = {}
    known = hyperparameters(name)
    if "fraction" in known:
        params["fraction"] = 0.5  # FedUMF: all train, half upload
    if "samples" in known:
        params.update(samples=4, e_const=3)  # FedGSNR: unequal planned steps, some 0
    for key in ("mu", "alpha", "feddc_alpha"):
        if key in known and name not in ("bherd", "bherd-fedavg", "bherd-fednova", "bherd-scaffold", "fedumf",
                                         "fedumf-fedprox", "fedumf-scaffold"):
            params[key] = 0.3  # local terms strong enough to matter
    if name.startswith("bherd"):
        params["alpha"] = 0.75  # k = tau - 1 from tau = 3: at tau = 2, k = 1 the two steps tie exactly
    if name == "fedumf-feddc":
        params["feddc_alpha"] = 0.3
    if name == "fednova":
        params["mu"] = 0.2
    return build_algorithm(name, **params)


def run_both(algorithm: Any, make_fed: Any, rounds: int = 3) -> None:
    runs = []
    for stacked in (False, True):
        fed = make_fed()
        state = init_state(algorithm, fed.model.theta.clone(), fed.n_clients)
        runtime = StackedClients(algorithm, fed, state.clients, stack_size=4) if stacked else None
        reports = []
        for _ in range(rounds):
            state, report = run_round(algorithm, state, fed, fraction=0.7, runtime=runtime)
            reports.append(report)
        runs.append((state, reports))
    (a, ra), (b, rb) = runs
    torch.testing.assert_close(b.w, a.w, atol=1e-5, rtol=1e-4)
    assert not torch.equal(a.w, make_fed().model.theta)  # it trained
    assert_states_close(b.clients, a.clients)
    assert_states_close(b.server, a.server)
    assert [r.local_steps for r in rb] == [r.local_steps for r in ra]
    assert [r.bytes_up for r in rb] == [r.bytes_up for r in ra]
    assert [sorted(r.diag) for r in rb] == [sorted(r.diag) for r in ra]
    for x, y in zip(ra, rb):
        for client, diag in x.diag.get("clients", {}).items():
            assert y.diag["clients"][client].get("selected") == diag.get("selected")


def assert_states_close(got: Any, want: Any) -> None:
    if isinstance(want, torch.Tensor):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)
    elif isinstance(want, (list, tuple)):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert_states_close(g, w)
    elif hasattr(want, "__dataclass_fields__"):
        for name in want.__dataclass_fields__:
            assert_states_close(getattr(got, name), getattr(want, name))
    else:
        assert got == want


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_every_recipe_stacked_equals_in_process(name: str) -> None:
    """A 2NN (batched matmul kernel), unequal tau_i and batch sizes, chunks of 4: the same model,
    client and server states, steps, bytes and herding choices as in process."""
    run_both(algorithm_for(name), lambda: federation("2nn"))


@pytest.mark.parametrize(("name", "plan"), [("fedgsnr", "uniform"), ("fedgsnr", "random"),
                                            ("fedgsnr-scaffold", "dirichlet"), ("fedgsnr-fedprox", "data")])
def test_fedgsnr_controls_stacked_equal_in_process(name: str, plan: str) -> None:
    """FedGSNR's control plans (the same total steps split otherwise) on the stacked runtime."""
    params: dict[str, Any] = {"mu": 0.3} if name == "fedgsnr-fedprox" else {}
    run_both(build_algorithm(name, samples=4, e_const=3, plan=plan, **params), lambda: federation("2nn"))


@pytest.mark.parametrize("model", ["svm", "softmax"])
@pytest.mark.parametrize("name", ["fedavg", "scaffold", "fedgsnr-fedprox"])
def test_linear_models_stacked_equal_in_process(model: str, name: str) -> None:
    run_both(algorithm_for(name), lambda: federation(model))


@pytest.mark.parametrize("options", [{"momentum": 0.5}, {"weight_decay": 0.05, "clip": 0.5},
                                     {"reshuffle": True, "lr_decay": 0.9}])
@pytest.mark.parametrize("name", ["fedavg", "feddc", "bherd-scaffold"])
def test_optimiser_options_per_row(options: dict[str, Any], name: str) -> None:
    run_both(algorithm_for(name), lambda: federation("2nn", **options))


class UsersModel(nn.Module):
    """A user's own module (no Classifier, conv + its own loss): the torch.func path."""

    def __init__(self) -> None:
        super().__init__()
        with torch.random.fork_rng():
            torch.manual_seed(0)
            self.conv, self.fc = nn.Conv2d(1, 2, 3), nn.Linear(2 * 2 * 2, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.tanh(self.conv(x)).flatten(1))

    def loss(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return nn.functional.cross_entropy(out, y) + 0.01 * self.fc.weight.square().sum()


@pytest.mark.parametrize("name", ["fedavg", "fedprox", "fedumf-feddc"])
def test_users_module_through_torch_func(name: str) -> None:
    assert kernel_kind(UsersModel()) == "functional"
    run_both(algorithm_for(name), lambda: federation(UsersModel(), (1, 4, 4), momentum=0.3), rounds=2)


def test_kernels_chosen_per_model() -> None:
    assert kernel_kind(build_model("svm", (8,), 3)) == "svm"
    assert kernel_kind(build_model("2nn", (8,), 3)) == "linear"
    assert kernel_kind(build_model("cnn", (1, 28, 28), 10)) == "functional"
    assert kernel_kind(nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2))) is None


def test_model_with_buffers_falls_back_one_client_at_a_time(capsys: pytest.CaptureFixture[str]) -> None:
    def make() -> Federation:
        with torch.random.fork_rng():
            torch.manual_seed(0)
            module = nn.Sequential(nn.Linear(8, 4), nn.BatchNorm1d(4), nn.Linear(4, 3))
        return federation(module)

    run_both(algorithm_for("scaffold"), make, rounds=2)
    assert "no batched form" in capsys.readouterr().err


SMALL = ["data.dataset=digits", "model=softmax", "data.split=dirichlet", "data.split.alpha=0.5", "data.clients=4",
         "train.lr=0.1", "train.batch_size=20", "train.client_fraction=0.75", "train.rounds=2", "run.threads=1"]


def test_a_run_on_the_stacked_runtime_says_so_and_matches_in_process(
        tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from fedaccel.launch import run
    from fedaccel.runs.config import load_config

    rows = {}
    for runtime in ("in-process", "stacked", "auto"):
        path = run(load_config(None, [*SMALL, f"run.runtime={runtime}", "run.stack_size=2"]), tmp_path / runtime,
                   progress=True)
        first = capsys.readouterr().err.splitlines()[0]
        rows[runtime] = [json.loads(line) for line in (path / "metrics.jsonl").read_text().splitlines()]
        if runtime == "auto":
            assert "[runtime in-process (auto: linear model, 3 clients a round, batch 20: in process on a cpu)," \
                in first
        else:
            assert f"[runtime {runtime}," in first
    for runtime in ("stacked", "auto"):
        for got, want in zip(rows[runtime], rows["in-process"], strict=True):
            assert got["test_acc"] == want["test_acc"] and got["local_steps"] == want["local_steps"]
            assert got["test_loss"] == pytest.approx(want["test_loss"], rel=1e-5)


@pytest.mark.parametrize(("model", "clients", "batch", "want"), [
    ("svm", 9, 10, "in-process"), ("svm", 10, 10, "stacked"),  # the SVM: from 10 clients a round ...
    ("svm", 10, 50, "stacked"), ("svm", 10, 51, "in-process"),  # ... at batches up to 50
    ("svm", 10_000, 100, "in-process"), ("svm", 10, 1, "stacked"),
    ("2nn", 100, 50, "in-process"), ("2nn", 10_000, 10, "in-process"),  # Linear/ReLU chains: their fused
    ("2nn", 10_000, 10_000, "in-process"),  # per-client step beat the batched one everywhere measured
    ("cnn", 10_000, 50, "in-process"), ("cnn", 10_000, 1, "in-process"),  # torch.func models: never on a CPU
])
def test_auto_runtime_on_a_cpu_at_the_rules_boundaries(model: str, clients: int, batch: int, want: str) -> None:
    """Each side of every threshold of ``CPU_STACKED`` (fitted to benchmarks/stacked.py, docs/architecture.md)."""
    from fedaccel.runs.loop import choose_runtime

    fed = federation(build_model("cnn", (1, 8, 8), 3), (1, 8, 8), batch_size=batch) if model == "cnn" \
        else federation(model, batch_size=batch)
    got, why = choose_runtime("auto", fed, clients)
    assert got == want
    assert why.startswith("auto: ") and (model == "cnn" or f"batch {batch}" in why), why


def test_auto_runtime_follows_the_measured_rule() -> None:
    from fedaccel.runs.loop import choose_runtime

    assert choose_runtime("in-process", federation("svm"), 6) == ("in-process", "run.runtime")
    assert choose_runtime("auto", federation("svm"), 6)[0] == "in-process"  # measured: in process as fast on a CPU
    assert choose_runtime("auto", federation("2nn"), 6)[0] == "in-process"
    assert choose_runtime("auto", federation("svm"), 1) == ("in-process", "auto: one client a round")
    cnn = federation(build_model("cnn", (1, 8, 8), 3), (1, 8, 8))
    assert choose_runtime("auto", cnn, 6)[0] == "in-process"  # on a CPU a CNN stacked loses (docs/benchmarks.md)
    mnist_2nn = federation(build_model("2nn", (784,), 3), (784,))
    assert choose_runtime("auto", mnist_2nn, 6)[0] == "in-process"  # 199k parameters: no gain on a CPU
    from types import SimpleNamespace

    on_gpu = SimpleNamespace(model=mnist_2nn.model, options=mnist_2nn.options,  # data off the CPU
                             x_train=torch.empty(1, device="meta"))
    assert choose_runtime("auto", on_gpu, 6) == ("stacked", "auto: linear model on meta")
    with pytest.raises(Exception, match="run.stack_size must be >= 1"):
        from fedaccel.runs.config import load_config

        load_config(None, ["run.stack_size=0"])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU here: the stacked GPU path is tested on CPU")
def test_stacked_on_a_gpu_equals_in_process_on_the_cpu() -> None:
    algorithm = algorithm_for("scaffold")
    cpu = federation("2nn")
    gpu = federation("2nn")
    gpu.x_train, gpu.y_train = gpu.x_train.cuda(), gpu.y_train.cuda()
    a = init_state(algorithm, cpu.model.theta.clone(), cpu.n_clients)
    b = init_state(algorithm, gpu.model.theta.clone().cuda(), gpu.n_clients)
    runtime = StackedClients(algorithm, gpu, b.clients)
    for _ in range(2):
        a, _ = run_round(algorithm, a, cpu, fraction=0.7)
        b, _ = run_round(algorithm, b, gpu, fraction=0.7, runtime=runtime)
    torch.testing.assert_close(b.w.cpu(), a.w, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("algorithm", ["scaffold", "fedgsnr", "bherd", "grab-fedavg"])
@pytest.mark.slow
def test_experiment_stack_seeds_gives_each_seed_its_separate_runs_numbers(
        tmp_path: Any, algorithm: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    import yaml

    import fedaccel.engine.stacked as stacked
    from fedaccel.cli import main

    batched: list[int] = []  # how many runs each stacked computation trained
    copies: list[int] = []  # how many copies of the training data their batches were gathered from
    train_jobs = stacked.train_jobs

    def counted(jobs: Any, **kw: Any) -> None:
        batched.append(len(jobs))
        train_jobs(jobs, **kw)
        copies.append(len(kw["same_data"]._copies))

    monkeypatch.setattr(stacked, "train_jobs", counted)

    spec = {"name": "seeds", "base": {"data": {"dataset": "digits", "split": {"name": "dirichlet", "alpha": 0.5},
                                               "clients": 4},
                                      "model": "softmax", "train": {"rounds": 2, "lr": 0.1, "batch_size": 20,
                                                                    "client_fraction": 0.75}},
            "grid": {"algorithm": [algorithm], "run.seed": [0, 1, 2]}}
    metrics = {}
    for mode in ("separate", "stacked"):
        spec["out_dir"] = str(tmp_path / mode)
        path = tmp_path / f"{mode}.yaml"
        path.write_text(yaml.safe_dump(spec))
        flags = ["--stack-seeds"] if mode == "stacked" else []
        assert main(["experiment", str(path), "--no-progress", *flags]) == 0
        metrics[mode] = {d.name: [json.loads(line) for line in (d / "metrics.jsonl").read_text().splitlines()]
                         for d in sorted((tmp_path / mode).iterdir()) if d.is_dir()}
    assert len(metrics["stacked"]) == 3 and batched == [3, 3]  # 2 rounds, the 3 seeds in one computation each
    assert copies == [3, 3]  # digits' train/test split is drawn from the seed: three different training sets
    accs = set()
    for cell, rows in metrics["separate"].items():
        for got, want in zip(metrics["stacked"][cell], rows, strict=True):
            assert got["test_acc"] == want["test_acc"] and got["local_steps"] == want["local_steps"]
            assert got["test_loss"] == pytest.approx(want["test_loss"], rel=1e-5)
        accs.add(rows[-1]["test_loss"])
    assert len(accs) == 3  # the seeds differ


@pytest.mark.slow
def test_stacked_groups_in_parallel_workers_give_the_numbers_of_one_process(tmp_path: Any, capsys: Any) -> None:
    """``experiment --stack-seeds -j 2``: each seed group is one worker's task, trained stacked there; every run
    has the numbers of the same grid stacked in one process, and the grid's lines count each group's cells once."""
    import json

    import yaml

    from fedaccel.cli import main

    spec = {"name": "groups", "base": {"data": {"dataset": "digits", "clients": 3}, "model": "softmax",
                                       "train": {"rounds": 2, "lr": 0.1, "batch_size": 20}},
            "grid": {"algorithm": ["fedavg", {"name": "bherd", "alpha": 0.5}], "run.seed": [0, 1]}}
    metrics, said = {}, {}
    for workers in (1, 2):
        spec["out_dir"] = str(tmp_path / f"j{workers}")
        path = tmp_path / f"j{workers}.yaml"
        path.write_text(yaml.safe_dump(spec))
        assert main(["experiment", str(path), "--no-progress", "--stack-seeds", "-j", str(workers)]) == 0
        said[workers] = capsys.readouterr().err.splitlines()
        metrics[workers] = {d.name: [json.loads(line) for line in (d / "metrics.jsonl").read_text().splitlines()]
                            for d in sorted((tmp_path / f"j{workers}").iterdir()) if d.is_dir()}
    assert len(metrics[2]) == 4 and metrics[2].keys() == metrics[1].keys()
    for cell, rows in metrics[1].items():
        for got, want in zip(metrics[2][cell], rows, strict=True):
            assert {k: v for k, v in got.items() if k != "wall_s"} == {k: v for k, v in want.items() if k != "wall_s"}
    assert sum("running (stacked: 2)" in line for line in said[2]) == 4, said[2]  # each cell, named with its group
    done = [line for line in said[2] if ": done (" in line]
    assert len(done) == 4 and sum("(4/4 cells done, " in line for line in done) == 2, done  # a group ends at once


def test_a_parts_batched_estimator_is_called_with_the_active_rows() -> None:
    """The interface the BHerd/GraB batched estimators implement: observe(step, (K, d), active (K,)),
    finish((K, d)) -> one (estimate, extras, diag) per client. Here it wraps per-client estimators."""
    from dataclasses import dataclass
    from typing import Callable

    from fedaccel.algorithms.base import Part, compose
    from fedaccel.algorithms.bherd import HerdingEstimator
    from fedaccel.algorithms.mean import mean_aggregate

    seen: list[tuple[int, list[bool]]] = []

    class Wrapped:
        def __init__(self, contexts: Any, dim: int, dtype: torch.dtype, device: torch.device) -> None:
            self.each = [HerdingEstimator(c.steps, dim, 0.75, c.info.lr) for c in contexts]

        def observe(self, step: int, directions: torch.Tensor, active: torch.Tensor) -> None:
            seen.append((step, active.tolist()))
            for estimator, row, on in zip(self.each, directions, active.tolist()):
                if on:
                    estimator.observe(step, row)

        def finish(self, updates: torch.Tensor) -> list[Any]:
            return [e.finish(u) for e, u in zip(self.each, updates)]

    @dataclass(frozen=True)
    class WithBatched(Part):
        batched_estimator: Callable[..., Any] | None = None

    plain = build_algorithm("bherd", alpha=0.75).parts[0]
    part = WithBatched(name="bherd", estimator=plain.estimator, batched_estimator=Wrapped)
    run_both(compose("bherd", part, mean_aggregate()), lambda: federation("2nn"))
    assert any(not all(active) for _, active in seen)  # unequal tau: some rows finished early


@pytest.mark.slow
def test_stack_seeds_sigint_checkpoints_every_seed_and_resumes(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """SIGINT during a stacked-seeds experiment: every seed finishes its round, checkpoints, and the
    experiment stops with Interrupted (not a KeyboardInterrupt while the seeds' threads go on)."""
    import json
    import signal

    import yaml

    import fedaccel.engine.stacked as stacked
    from fedaccel.grids.experiment import load_experiment, run_experiment
    from fedaccel.runs.stopping import STOP, Interrupted

    spec = {"name": "stop", "out_dir": str(tmp_path / "out"),
            "base": {"data": {"dataset": "digits", "clients": 3}, "model": "softmax",
                     "train": {"rounds": 60, "lr": 0.1, "batch_size": 40}, "run": {"checkpoint_every": 100}},
            "grid": {"run.seed": [0, 1]}}
    path = tmp_path / "e.yaml"
    path.write_text(yaml.safe_dump(spec))
    calls: list[int] = []
    train_jobs = stacked.train_jobs

    def signalling(jobs: Any, **kw: Any) -> None:
        calls.append(len(jobs))
        if len(calls) == 1:
            signal.raise_signal(signal.SIGINT)  # delivered to the main thread, as Ctrl-C would be
        train_jobs(jobs, **kw)

    monkeypatch.setattr(stacked, "train_jobs", signalling)
    with pytest.raises(Interrupted):
        run_experiment(load_experiment(path), progress=False, stack_seeds=True)
    assert not STOP.is_set()
    for seed in (0, 1):  # both stopped early, each at a round it checkpointed
        rows = (tmp_path / "out" / f"run.seed={seed}" / "metrics.jsonl").read_text().splitlines()
        state = torch.load(tmp_path / "out" / f"run.seed={seed}" / "checkpoint.pt", weights_only=True)["state"]
        assert json.loads(rows[-1])["round"] == state["round"] < 60
    monkeypatch.setattr(stacked, "train_jobs", train_jobs)
    run_experiment(load_experiment(path), progress=False, stack_seeds=True)
    for seed in (0, 1):
        rows = (tmp_path / "out" / f"run.seed={seed}" / "metrics.jsonl").read_text().splitlines()
        assert [json.loads(r)["round"] for r in rows] == list(range(61))


def test_every_local_term_in_the_registry_has_a_batched_form() -> None:
    for name in RECIPES:
        for part in build_algorithm(name).parts:
            assert (part.local_term is None) == (part.batched_local_term is None), (name, part.name)


def test_a_local_term_without_batched_form_runs_row_by_row(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    import dataclasses

    import fedaccel.engine.stacked as stacked
    from fedaccel.algorithms.base import compose
    from fedaccel.algorithms.feddc import feddc
    from fedaccel.algorithms.mean import mean_aggregate

    monkeypatch.setattr(stacked, "_SAID", set())
    own = dataclasses.replace(feddc(alpha=0.3), name="my-feddc", batched_local_term=None)
    run_both(compose("mine", own, mean_aggregate(weighting="uniform")), lambda: federation("2nn", momentum=0.5))
    assert "my-feddc's local term has no batched form: applied row by row" in capsys.readouterr().err


def test_a_stacked_seed_group_tells_its_rounds_in_a_log(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a terminal a seed group is not silent until its end: its first seed's rounds are the group's progress
    (a line every EVERY_S seconds; 0 here), and only the first seed's, since the seeds step together."""
    import io

    import yaml

    import fedaccel.runs.progress as progress
    from fedaccel.grids.experiment import load_experiment, run_experiment
    from fedaccel.grids.progress import GridProgress

    spec = {"name": "told", "out_dir": str(tmp_path / "out"),
            "base": {"data": {"dataset": "digits", "clients": 3}, "model": "softmax",
                     "train": {"rounds": 4, "lr": 0.1, "batch_size": 40}},
            "grid": {"run.seed": [0, 1, 2]}}
    path = tmp_path / "e.yaml"
    path.write_text(yaml.safe_dump(spec))
    monkeypatch.setattr(progress, "EVERY_S", 0.0)
    log = io.StringIO()
    report = GridProgress(3, bars=False, stream=log)
    run_experiment(load_experiment(path), stack_seeds=True, report=report)
    rounds = [line for line in log.getvalue().splitlines() if ": round " in line]
    assert [line.split(": round ")[1].split(",")[0].split(" ")[0] for line in rounds] == ["1/4", "2/4", "3/4"]
    assert all("run.seed=0" in line for line in rounds), rounds


def test_stacked_arms_give_every_run_the_numbers_of_its_seeds_stacked_alone(tmp_path: Any,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """``--stack-arms``: a grid's algorithms and seeds as one stacked computation (BHerd's estimator, FedProx's
    local term and FedAvg's plain steps in one chunk) change no run's numbers against stacking each cell's seeds."""
    import json

    import yaml

    import fedaccel.engine.stacked as stacked
    from fedaccel.cli import main
    from fedaccel.grids.experiment import _seed_groups, load_experiment

    spec = {"name": "arms", "base": {"data": {"dataset": "digits", "clients": 3}, "model": "softmax",
                                     "train": {"rounds": 3, "lr": 0.1, "batch_size": 40}},
            "grid": {"algorithm": ["fedavg", {"name": "bherd", "alpha": 0.5}, {"name": "fedprox", "mu": 0.1}],
                     "train.lr": [0.1, 0.05], "run.seed": [0, 1]}}
    path = tmp_path / "e.yaml"
    path.write_text(yaml.safe_dump(spec))
    experiment = load_experiment(path)
    todo = [(k, n, c, tmp_path / n) for k, (n, c) in enumerate(experiment.cells, start=1)]
    assert [len(g) for g in _seed_groups(todo)] == [2] * 6
    assert [len(g) for g in _seed_groups(todo, ("run.seed", "algorithm"))] == [6, 6]  # one group per step size
    batched: list[int] = []  # how many runs each stacked computation trained
    copies: list[int] = []  # how many copies of the training data their batches were gathered from
    train_jobs = stacked.train_jobs

    def counted(jobs: Any, **kw: Any) -> None:
        batched.append(len(jobs))
        train_jobs(jobs, **kw)
        copies.append(len(kw["same_data"]._copies))

    monkeypatch.setattr(stacked, "train_jobs", counted)
    metrics = {}
    for flag in ("--stack-seeds", "--stack-arms"):
        assert main(["experiment", str(path), "--no-progress", "--out", str(tmp_path / flag), flag]) == 0
        metrics[flag] = {name: [{k: v for k, v in json.loads(line).items() if k != "wall_s"}
                                for line in (tmp_path / flag / name / "metrics.jsonl").read_text().splitlines()]
                         for name, _ in experiment.cells}
    assert batched == [2] * 18 + [6] * 6  # 6 groups of 2 seeds, then 2 of 6 runs, 3 rounds each
    assert metrics["--stack-arms"] == metrics["--stack-seeds"]
    assert len({json.dumps(m[-1]["test_loss"]) for m in metrics["--stack-arms"].values()}) == 12  # 12 distinct runs


def test_stacked_seeds_of_one_dataset_gather_from_one_copy_with_each_seeds_numbers(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Fashion-MNIST's seeds load equal training sets: the stacked batches come from one copy of it, and every seed
    keeps the numbers of its run alone (where the seeds' data differ, as digits' do, each has its own: above)."""
    import json

    import yaml

    import fedaccel.engine.stacked as stacked
    from fedaccel.grids.experiment import load_experiment, run_experiment
    from fedaccel.launch import run
    from fedaccel.runs.config import load_config

    copies: list[int] = []
    train_jobs = stacked.train_jobs

    def counted(jobs: Any, **kw: Any) -> None:
        train_jobs(jobs, **kw)
        copies.append(len(kw["same_data"]._copies))

    monkeypatch.setattr(stacked, "train_jobs", counted)
    overrides = ["model=softmax", "data.clients=3", "train.rounds=2", "train.local_epochs=0.002", "train.batch_size=20",
                 "eval.train_samples=500", "run.progress=false"]
    spec = {"name": "same", "out_dir": str(tmp_path / "stacked"), "base": {}, "grid": {"run.seed": [0, 1, 2]}}
    (tmp_path / "same.yaml").write_text(yaml.safe_dump(spec))
    run_experiment(load_experiment(tmp_path / "same.yaml", overrides), progress=False, stack_seeds=True)
    assert copies == [1, 1]
    def rows(run_dir: Any) -> list[tuple[float, float]]:
        return [(row["test_acc"], row["test_loss"]) for row in map(json.loads, (run_dir / "metrics.jsonl").open())]

    for seed in (0, 1, 2):
        alone = run(load_config(None, [*overrides, f"run.seed={seed}"]), tmp_path / f"alone{seed}")
        for (acc, loss), (acc_alone, loss_alone) in zip(rows(tmp_path / "stacked" / f"run.seed={seed}"), rows(alone),
                                                        strict=True):
            # alone, the softmax runs in process: stacked, its batched matmuls sum in another order on some CPUs
            # (equal bits on AMD's AVX2, 2e-8 apart on Intel's AVX-512), as the separate runs above
            assert acc == acc_alone and loss == pytest.approx(loss_alone, rel=1e-5)


@settings(max_examples=60, deadline=None)
@given(events=st.lists(st.tuples(st.integers(0, 3), st.sampled_from(["look", "same", "other", "in place", "labels",
                                                                     "minus zero"])),
                       min_size=1, max_size=25))
def test_same_data_gives_a_copy_equal_to_each_runs_data_as_it_is_now(events: list[tuple[int, str]]) -> None:
    """SameData.source, whatever happened to a run's data since it last looked (replaced by an equal tensor or a
    different one, changed in place, its labels changed): the copy it gives holds the run's data as it is now,
    so the batches gathered from it are the run's own."""
    from types import SimpleNamespace

    from fedaccel.engine.stacked import SameData

    base = torch.arange(12.0).reshape(6, 2)
    runs = [SimpleNamespace(x_train=base.clone(), y_train=torch.zeros(6, dtype=torch.long)) for _ in range(4)]
    same = SameData()
    for run, event in events:
        fed = runs[run]
        if event == "same":
            fed.x_train = base.clone()
        elif event == "other":
            fed.x_train = base + run + 1
        elif event == "in place":
            fed.x_train.mul_(2.0)
        elif event == "labels":
            fed.y_train[run] += 1
        elif event == "minus zero":  # equal to 0.0, not the same bits
            fed.x_train = base.clone()
            fed.x_train[0, 0] = -0.0
        for each in runs:  # every run looks after each event, as every round's chunks do
            x, y = same.source(each)
            assert torch.equal(x.view(torch.int32), each.x_train.view(torch.int32)) and torch.equal(y, each.y_train)
