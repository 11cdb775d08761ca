"""A method from an installed package (entry-point group ``fedaccel.algorithms``): it runs where a built-in
runs, with the numbers of the built-in it mirrors (tests/plugin_package: FedProx's term as a user's part on
FedAvg's parts); its distribution is recorded and checked; whatever is wrong with a plugin is one line."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import nn

from fedaccel import History, plugins, train
from fedaccel.algorithms.base import Algorithm
from fedaccel.algorithms.registry import build_algorithm, listing
from fedaccel.cli import main
from fedaccel.errors import ConfigError, UserError
from fedaccel.grids.experiment import load_experiment
from fedaccel.runs.config import PLUGINS_NOTE, recorded_plugins
from plugin_site import MODULE, PACKAGE, forget, install

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def put(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., Path]]:
    """``put(folder, **options)``: :func:`plugin_site.install` into ``tmp_path / folder``, first on sys.path, this
    process's earlier plugin forgotten; forgotten again after the test."""

    def put_site(folder: str, **options: Any) -> Path:
        forget()
        site = install(tmp_path / folder, **options)
        monkeypatch.syspath_prepend(str(site))
        return site

    yield put_site
    forget()


@pytest.fixture
def site(put: Callable[..., Path]) -> Path:
    """tests/plugin_package installed into a temporary site on sys.path (fedaccel-myprox 0.1.0)."""
    return put("site")


def one_line(capsys: pytest.CaptureFixture) -> str:
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err[-3000:]
    return err


G = torch.Generator().manual_seed(0)
X = torch.randn(120, 6, generator=G)
Y = (X[:, 0] - X[:, 1] > 0).long()
CLIENTS = np.array_split(np.argsort(Y.numpy(), kind="stable"), 4)  # label-sorted: non-IID


def fit(run_dir: Path, algorithm: Any) -> History:
    torch.manual_seed(0)
    module = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 2))
    return train(module, X, Y, CLIENTS, X, Y, algorithm=algorithm, rounds=3, lr=0.2, batch_size=10, momentum=0.5,
                 run_dir=run_dir, progress=False)


def without_wall(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in row.items() if k != "wall_s"} for row in rows]


def test_the_plugin_method_is_fedprox_bit_for_bit_through_train_and_its_run_records_the_distribution(
    site: Path, tmp_path: Path
) -> None:
    mine = fit(tmp_path / "mine", {"name": "myprox", "mu": 0.3})
    fedprox = fit(tmp_path / "fedprox", {"name": "fedprox", "mu": 0.3})
    fedavg = fit(tmp_path / "fedavg", "fedavg")
    assert torch.equal(mine.w, fedprox.w) and without_wall(mine.metrics) == without_wall(fedprox.metrics)
    assert not torch.equal(mine.w, fedavg.w)  # the term is there
    recorded = recorded_plugins((tmp_path / "mine/config.yaml").read_text(), "mine")["algorithm"]
    assert {k: recorded[k] for k in ("name", "distribution", "version", "entry_point")} == {
        "name": "myprox", "distribution": "fedaccel-myprox", "version": "0.1.0", "entry_point": f"{MODULE}:myprox"}
    assert len(recorded["sha256"]) == 16
    assert recorded_plugins((tmp_path / "fedprox/config.yaml").read_text(), "fedprox") == {}  # built in: no line


TINY = ["--set", "data.dataset=digits", "--set", "data.clients=3", "--set", "train.rounds=2", "--set", "train.lr=0.1",
        "--set", "train.batch_size=20", "--set", "run.progress=false", "--set", "run.checkpoint_every=1"]


def cli_run(out: Path, *settings: str) -> list[dict[str, Any]]:
    assert main(["run", *TINY, *(a for s in settings for a in ("--set", s)), "--out", str(out)]) == 0
    return without_wall([json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()])


@pytest.mark.parametrize("runtime", ["in-process", "stacked"])
def test_fedaccel_run_with_the_plugin_gives_fedprox_numbers(site: Path, tmp_path: Path, runtime: str) -> None:
    mine = cli_run(tmp_path / "mine", "algorithm=myprox", "algorithm.mu=0.3", f"run.runtime={runtime}")
    assert mine == cli_run(tmp_path / "fedprox", "algorithm={name: fedprox, mu: 0.3}", f"run.runtime={runtime}")
    assert "fedaccel-myprox" in (tmp_path / "mine/config.yaml").read_text()


def test_a_plugins_diverging_run_names_its_code_as_a_suspect(site: Path, tmp_path: Path,
                                                                capsys: pytest.CaptureFixture) -> None:
    """A NaN made by a plugin was blamed on the learning rate alone (a new user's report): the line names the
    plugin's own code too."""
    argv = ["run", *TINY, "--set", "algorithm=myprox", "--set", "train.lr=1e30", "--out", str(tmp_path / "nan")]
    assert main(argv) == 2
    assert ("learning rate too high? (train.lr = 1e+30) or algorithm 'myprox''s own code (fedaccel-myprox 0.1.0)?"
            in one_line(capsys))


def test_resume_refuses_in_one_line_a_run_whose_plugin_is_missing_or_changed(
    site: Path, put: Callable[..., Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    cli_run(tmp_path / "run", "algorithm=myprox")
    (tmp_path / "run/summary.json").unlink()  # as if killed after its last checkpoint
    capsys.readouterr()
    forget()
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p != str(site)])
    assert main(["run", "--resume", str(tmp_path / "run")]) == 2
    assert ("uses algorithm 'myprox' of fedaccel-myprox 0.1.0, which is not installed here: pip install the same "
            "version") in one_line(capsys)
    put("newer", version="0.2.0")
    assert main(["run", "--resume", str(tmp_path / "run")]) == 2
    assert "installed here: fedaccel-myprox 0.2.0 (version differ)" in one_line(capsys)


def test_train_resumes_only_with_the_plugin_version_it_started_with(
    site: Path, put: Callable[..., Path], tmp_path: Path
) -> None:
    fit(tmp_path / "run", "myprox")
    put("newer", version="0.2.0")
    with pytest.raises(ConfigError, match="installed here: fedaccel-myprox 0.2.0 \\(version differ\\)"):
        train(nn.Linear(6, 2), X, Y, CLIENTS, X, Y, algorithm="myprox", rounds=3, run_dir=tmp_path / "run",
              resume=True, progress=False)


def test_the_plugin_is_listed_and_an_unknown_name_suggests_it(site: Path, capsys: pytest.CaptureFixture) -> None:
    assert ("myprox", f"{MODULE}:myprox from fedaccel-myprox 0.1.0") in listing()
    assert main(["algorithms"]) == 0
    assert f"{MODULE}:myprox from fedaccel-myprox 0.1.0" in capsys.readouterr().out
    assert main(["run", "--set", "algorithm=myprx"]) == 2
    assert "unknown algorithm 'myprx'; known: myprox, " in one_line(capsys)


def test_a_name_fedaccel_has_or_two_plugins_declare_is_refused_naming_both(
    put: Callable[..., Path], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    put("a", entry_points=f"[fedaccel.algorithms]\nfedavg = {MODULE}:myprox\n")
    assert main(["run", "--set", "algorithm=fedavg"]) == 2
    assert ("algorithm 'fedavg' is declared by fedaccel 0.1.0 (built in) and by fedaccel-myprox 0.1.0 (entry-point "
            "group fedaccel.algorithms): rename the entry point of fedaccel-myprox 0.1.0 (a built-in name is "
            "fedaccel's)") in one_line(capsys)
    assert ("fedavg", f"{MODULE}:myprox from fedaccel-myprox 0.1.0 (refused: a built-in method has this name)"
            ) in listing()
    put("bad", entry_points=f"[fedaccel.algorithms]\nBad Name = {MODULE}:myprox\n")
    assert ("Bad Name", f"{MODULE}:myprox from fedaccel-myprox 0.1.0 (refused: not a name fedaccel takes: lower-case "
            "letters, digits, '-', '_', '.')") in listing()  # it was listed as if it worked
    put("b")
    put("c", distribution="other-prox", version="2.0")
    assert ("myprox", f"{MODULE}:myprox from other-prox 2.0 (refused: the name is declared twice)") in listing()
    with pytest.raises(ConfigError, match="'myprox' is declared by other-prox 2.0 and by fedaccel-myprox 0.1.0 "):
        build_algorithm("myprox")


BROKEN = {
    "positional": ("def myprox(mu=0.01):\n    return None\n", "parameter 'mu' of fedaccel_myprox:myprox must be "
                   "keyword-only with a default"),
    "no default": ("def myprox(*, mu):\n    return None\n", "parameter 'mu' of fedaccel_myprox:myprox must be"),
    "not callable": ("myprox = 3\n", "fedaccel_myprox:myprox is not a recipe"),
    "no algorithm": ("def myprox(*, mu=0.1):\n    return mu\n", "fedaccel_myprox:myprox returned 'float', not an Algorithm"),
    "raises": ("def myprox(*, mu=0.1):\n    raise KeyError('mu\\nlater')\n", "failed to build: KeyError: 'mu\\nlater'"),
    "import fails": ("import no_such_module_here\n", "loading fedaccel_myprox:myprox failed: ModuleNotFoundError: "
                     "No module named 'no_such_module_here'"),
    "no object": ("\n", "loading fedaccel_myprox:myprox failed: AttributeError: module 'fedaccel_myprox' has no "
                  "attribute 'myprox'"),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_a_broken_plugin_is_one_line_naming_its_distribution(
    case: str, put: Callable[..., Path], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    source, message = BROKEN[case]
    put("site", source=source)
    assert main(["run", "--set", "algorithm=myprox"]) == 2
    err = one_line(capsys)
    assert err.startswith("error: algorithm 'myprox' of fedaccel-myprox 0.1.0") and message in err, err


def test_the_plugins_own_checks_are_one_line_too(site: Path) -> None:
    with pytest.raises(ConfigError, match=r"^algorithm 'myprox' of fedaccel-myprox 0\.1\.0 failed to build: "
                                          r"ValueError: mu must be >= 0, got -1$"):
        build_algorithm("myprox", mu=-1)
    with pytest.raises(ConfigError, match="algorithm 'myprox' has no hyperparameter 'nu'; known: aggregate, dp, mu, server_opt"):
        build_algorithm("myprox", nu=1)


MODEL = (PACKAGE / f"{MODULE}.py").read_text() + '''

from fedaccel.data import load_dataset
from fedaccel.models import SoftmaxRegression


def mydigits(root, seed):
    """scikit-learn's digits, from a package of one's own."""
    return load_dataset("digits", seed=seed)


def mysoftmax(input_shape, num_classes):
    """Softmax regression, from a package of one's own."""
    return SoftmaxRegression(input_shape, num_classes)


def not_a_classifier(input_shape, num_classes):
    import torch

    return torch.nn.Linear(64, num_classes)
'''


@pytest.mark.parametrize("runtime", ["in-process", "stacked"])
def test_a_plugin_model_and_dataset_give_the_numbers_of_the_built_ins_they_return_and_are_recorded(
    put: Callable[..., Path], tmp_path: Path, runtime: str
) -> None:
    put("site", source=MODEL, entry_points=(
        f"[fedaccel.models]\nmysoftmax = {MODULE}:mysoftmax\n[fedaccel.algorithms]\nmyprox = {MODULE}:myprox\n"
        f"[fedaccel.datasets]\nmydigits = {MODULE}:mydigits\n"))
    mine = cli_run(tmp_path / "mine", "model=mysoftmax", "algorithm=myprox", "data.dataset=mydigits",
                   f"run.runtime={runtime}")
    assert mine == cli_run(tmp_path / "built-in", "model=softmax", "algorithm=fedprox", "algorithm.mu=0.01",
                           f"run.runtime={runtime}")  # TINY's dataset: digits
    recorded = recorded_plugins((tmp_path / "mine/config.yaml").read_text(), "mine")
    assert {kind: r["entry_point"] for kind, r in recorded.items()} == {
        "model": f"{MODULE}:mysoftmax", "algorithm": f"{MODULE}:myprox", "dataset": f"{MODULE}:mydigits"}


def test_a_plugin_model_that_clashes_or_is_no_classifier_is_one_line(
    put: Callable[..., Path], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    put("site", source=MODEL, entry_points=(
        f"[fedaccel.models]\nsvm = {MODULE}:mysoftmax\nlinear = {MODULE}:not_a_classifier\n"))
    assert main(["run", "--set", "model=svm"]) == 2
    assert "error: model 'svm' is declared by fedaccel 0.1.0 (built in) and by fedaccel-myprox 0.1.0 " in one_line(capsys)
    assert main(["run", *TINY, "--set", "model=linear", "--out", str(tmp_path / "run")]) == 2
    assert "error: model 'linear': its factory returned 'Linear', not a fedaccel.models.Classifier" in one_line(capsys)
    assert main(["run", "--set", "model=lineer"]) == 2
    assert one_line(capsys) == "error: unknown model 'lineer'; known: 2nn, cnn, feddc-cnn, lenet5, resnet18, softmax, " \
                               "svm, vgg16, linear\n"  # the plugin's after the built-ins (nearest first past 10)


def test_a_plugin_dataset_that_clashes_fails_or_is_no_dataset_is_one_line(
    put: Callable[..., Path], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    loaders = "\n\ndef broken(root, seed):\n    return 1 / 0\n\n\ndef listed(root, seed):\n    return [1, 2]\n"
    put("site", source=MODEL + loaders, entry_points=(
        f"[fedaccel.datasets]\ndigits = {MODULE}:mydigits\nbroken = {MODULE}:broken\nnone = {MODULE}:listed\n"))
    assert main(["data"]) == 0
    assert [line.split() for line in capsys.readouterr().out.splitlines()][-3:] == [
        ["broken", "plugin", f"{MODULE}:broken", "from", "fedaccel-myprox", "0.1.0"],
        ["digits", "refused", f"{MODULE}:mydigits", "from", "fedaccel-myprox", "0.1.0"],
        ["none", "plugin", f"{MODULE}:listed", "from", "fedaccel-myprox", "0.1.0"]]
    assert main(["run", "--set", "data.dataset=digits"]) == 2
    assert "error: dataset 'digits' is declared by fedaccel 0.1.0 (built in) and by fedaccel-myprox 0.1.0 " in \
        one_line(capsys)
    assert main(["run", *TINY, "--set", "data.dataset=broken", "--out", str(tmp_path / "a")]) == 2
    assert one_line(capsys) == ("error: dataset 'broken' of fedaccel-myprox 0.1.0 failed to load: ZeroDivisionError: "
                                "division by zero\n")
    assert main(["run", *TINY, "--set", "data.dataset=none", "--out", str(tmp_path / "b")]) == 2
    assert one_line(capsys) == ("error: dataset 'none' of fedaccel-myprox 0.1.0: fedaccel_myprox:listed returned 'list', "
                                "not a fedaccel.data.Dataset\n")
    assert main(["run", "--set", "data.dataset=brokn"]) == 2
    assert one_line(capsys) == ("error: unknown dataset 'brokn'; known: fashion-mnist, mnist, emnist, cifar10, cifar100, "
                                "digits, synthetic, broken, none\n")  # the plugins' after the built-ins


STATEFUL = (PACKAGE / f"{MODULE}.py").read_text() + '''

from dataclasses import dataclass


@dataclass
class Seen:
    rounds: int


def counting(*, mu: float = 0.01) -> Algorithm:
    """MyProx that counts each client's rounds in a state of its own class."""
    def client_end(ctx, w, theta0, theta_end, ss, cs):
        return Seen(cs.rounds + 1), {}

    count = Part(name="count", init_client=lambda w0: Seen(0), client_end=client_end)
    return compose("counting", count, *myprox(mu=mu).parts)
'''


def test_a_loaded_plugins_state_class_is_rebuilt_from_plain_data_and_no_other(
    put: Callable[..., Path], tmp_path: Path
) -> None:
    """Checkpoints and Flower messages hold states as plain data: a plugin's own state class is rebuilt once the
    run has loaded the plugin (nothing is imported because a file names a class), a class elsewhere never."""
    from fedaccel.algorithms.states import from_plain, to_plain

    put("site", source=STATEFUL, entry_points=f"[fedaccel.algorithms]\ncounting = {MODULE}:counting\n"
                                              "mine = fedaccel.algorithms.registry:fedavg\n")  # a built-in, renamed
    build_algorithm("mine")
    plain = {"$dc": f"{MODULE}:Seen", "rounds": 3}
    with pytest.raises(ValueError, match=f"refusing to build '{MODULE}:Seen'"):
        from_plain(plain)  # the plugin is installed but no run has asked for it
    algorithm = build_algorithm("counting")
    state = from_plain(to_plain(algorithm.init_client(torch.zeros(2))))
    assert state[0] == sys.modules[MODULE].Seen(0) and from_plain(plain) == sys.modules[MODULE].Seen(3)
    for name in ("os:PathLike", "fedaccel_myprox_other:Seen", "json.decoder:JSONDecoder", "fedaccel.runs.config:Config"):
        with pytest.raises(ValueError, match="refusing to build"):
            from_plain({"$dc": name})
    history = fit(tmp_path / "run", "counting")  # and it trains: every client's count goes up by its rounds
    assert [s[0].rounds for s in history.state.clients] == [3, 3, 3, 3]


TEXT = st.text(alphabet="abc019_-.:[]= ", max_size=16)  # no stdlib module with side effects can be spelled


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\n\x0b\x0c\x1c\x1d\x1e\x85"
                                  "\u2028\u2029"), min_size=1, max_size=20),
       value=st.one_of(TEXT, TEXT.map(lambda t: f"{MODULE}:{t}"), TEXT.map(lambda t: f"zz_absent{t}")),
       garbage=st.sampled_from(["", "no equals sign here\n", "[unclosed\n", "= value without a name\n"]))
def test_malformed_entry_points_are_refused_in_one_line_and_break_no_built_in(name: str, value: str,
                                                                              garbage: str) -> None:
    forget()
    with tempfile.TemporaryDirectory() as folder:
        site = install(Path(folder), entry_points=f"[fedaccel.algorithms]\n{name} = {value}\n{garbage}")
        sys.path.insert(0, str(site))
        try:
            for asked in {*plugins.names("algorithm"), name, name.strip()}:
                try:
                    assert isinstance(build_algorithm(asked), Algorithm)
                except ConfigError as exc:
                    assert "\n" not in str(exc) and "\r" not in str(exc), str(exc)
            if name.strip() != "fedavg":
                assert build_algorithm("fedavg").name == "fedavg"
        finally:
            sys.path.remove(str(site))
            forget()


def fenced(page: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", page, re.S)


def test_the_docs_page_shows_the_tested_package_and_a_grid_that_loads(site: Path, tmp_path: Path) -> None:
    page = (ROOT / "docs/your-method.md").read_text(encoding="utf-8")
    assert fenced(page, "toml")[0] == f"# pyproject.toml\n{(PACKAGE / 'pyproject.toml').read_text()}"
    assert fenced(page, "python") == [f"# {MODULE}.py\n{(PACKAGE / f'{MODULE}.py').read_text()}"]
    grid = next(block for block in fenced(page, "yaml") if "claims:" in block)
    path = tmp_path / "myprox.yaml"
    path.write_text(grid.replace("../configs/demo.yaml", str(ROOT / "configs/demo.yaml")))
    experiment = load_experiment(path)
    assert {str(config.algorithm["name"]) for _, config in experiment.cells} == {"fedavg", "fedprox", "myprox"}
    assert len(experiment.claims) == 2


def test_a_flower_node_without_the_plugin_refuses_the_run_at_the_hello_in_one_line(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    """The client checks the plugins line the server sends with the config; the server reads its refusal out of
    Flower's error reply and stops in one line, rather than take the node for a plain Flower client."""
    pytest.importorskip("flwr")
    from types import SimpleNamespace

    from flwr.common.constant import ErrorCode

    from fedaccel.flower import server
    from fedaccel.flower.client import setup_for

    text = yaml.safe_dump({"algorithm": {"name": "myprox"}}) + PLUGINS_NOTE + json.dumps({"algorithm": {
        "name": "myprox", "distribution": "fedaccel-myprox", "version": "0.1.0", "entry_point": f"{MODULE}:myprox",
        "sha256": "0" * 16}})
    with pytest.raises(ConfigError, match="^the server's run uses algorithm 'myprox' of fedaccel-myprox 0.1.0, "
                                          "which is not installed here") as raised:
        setup_for(text)
    reason = str(type(raised.value)) + ":<'" + str(raised.value) + "'>"  # as flwr/supernode/runtime/run_clientapp.py
    reply = SimpleNamespace(has_error=lambda: True, content={},
                            error=SimpleNamespace(code=ErrorCode.CLIENT_APP_RAISED_EXCEPTION, reason=reason))
    monkeypatch.setattr(server, "collect", lambda sent, timeout: [(reply, 0.1)])
    with pytest.raises(UserError, match="^SuperNode 7 refuses the run: the server's run uses algorithm 'myprox' of "
                                        "fedaccel-myprox 0.1.0, which is not installed here: pip install the same "
                                        "version$"):
        server.connect(None, [7], 1, 1.0)  # type: ignore[arg-type]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(mus=st.lists(st.floats(0, 10, allow_nan=False) | st.integers(0, 10), min_size=1, max_size=3,
                    unique_by=float))
def test_any_hyperparameters_of_the_plugin_round_trip_through_a_grid_its_folder_names_and_config_yaml(
    site: Path, tmp_path: Path, mus: list[float]
) -> None:
    from fedaccel.runs.config import dump_config, read_run_config

    path = tmp_path / "grid.yaml"
    path.write_text(yaml.safe_dump({"name": "g", "out_dir": str(tmp_path / "out"), "base": {"data": {"dataset": "digits"}},
                                    "grid": {"algorithm": [{"name": "myprox", "mu": mu} for mu in mus]}}))
    cells = load_experiment(path).cells
    assert len({name for name, _ in cells}) == len(mus)  # one folder per value
    for (name, config), mu in zip(cells, mus):
        assert config.algorithm == {"name": "myprox", "mu": mu} and "myprox" in name
        dump_config(config, tmp_path / "config.yaml")
        assert read_run_config(tmp_path / "config.yaml").algorithm == config.algorithm
        assert recorded_plugins((tmp_path / "config.yaml").read_text(), "")["algorithm"]["distribution"] == \
            "fedaccel-myprox"


def test_a_ray_worker_without_the_plugin_refuses_its_cell_in_one_line(site: Path, tmp_path: Path) -> None:
    """``--ray``: the driver sends each task the plugins line of its cell's config; a node without the same
    plugin says so before it reads or writes the cell's folder."""
    import socket

    from fedaccel.grids.ray_tasks import _cell_task
    from fedaccel.runs.config import load_config, plugin_note

    config = load_config(None, ["algorithm=myprox", *TINY[1::2]])
    line = plugin_note(config).replace('"0.1.0"', '"0.0.9"')  # the driver's plugin: another version
    with pytest.raises(ConfigError, match=f"^cell c on Ray node {re.escape(socket.gethostname())} uses algorithm "
                                          "'myprox' of fedaccel-myprox 0.0.9; installed here: fedaccel-myprox 0.1.0 "
                                          r"\(version differ\)"):
        _cell_task(config, str(tmp_path / "c"), 1, str(tmp_path), 1.0, line)
    assert not (tmp_path / "c").exists()


def test_compare_and_judge_refuse_in_one_line_a_grid_whose_plugin_is_missing_or_differs_importing_nothing(
    site: Path, put: Callable[..., Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """A table or a verdict about a plugin's method is given only where the version that made the runs is
    installed; claims.json names it. The refusal reads the folder's records and hashes the installed module's
    file: the plugin is never imported because a folder names it."""
    # MyProx is FedProx: their rows may agree to the 0.1 ms of the clock a row keeps (2 rounds' once did); each
    # run's own final weights file tells them apart from a copy
    base = {"data": {"dataset": "digits", "clients": 3}, "model": "svm",
            "train": {"rounds": 2, "lr": 0.1, "batch_size": 20}, "run": {"progress": False}}
    claims = [{"text": "MyProx ends where FedProx ends", "a": {"algorithm": "myprox"}, "b": {"algorithm": "fedprox"},
               "measure": "final_test_acc", "expect": "equal", "margin": 0.01, "why": "the same method"},
              {"text": "FedProx ends where FedProx ends", "a": {"algorithm": "fedprox"}, "measure": "final_test_acc",
               "expect": "greater", "value": 0.0}]
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump({"name": "mine", "out_dir": str(tmp_path / "out"), "base": base,
                                    "grid": {"algorithm": ["fedprox", "myprox"], "run.seed": [0, 1]},
                                    "baseline": "fedprox", "claims": claims}))
    grid = str(tmp_path / "out")
    assert main(["experiment", str(path), "--no-progress"]) == 0
    assert main(["judge", grid]) in (0, 1)
    judged = json.loads((tmp_path / "out/claims.json").read_text())
    recorded = recorded_plugins((tmp_path / "out" / next(
        p.name for p in (tmp_path / "out").iterdir() if "myprox" in p.name) / "config.yaml").read_text(), "")
    assert judged[0]["plugins"] == [{"kind": "algorithm", **recorded["algorithm"]}]
    assert judged[0]["plugins"][0]["version"] == "0.1.0" and "plugins" not in judged[1]  # fedprox alone: built in
    capsys.readouterr()

    def refused(line: str) -> None:
        for command in (["compare", grid], ["judge", grid]):
            assert main(command) == 2, command
            err = one_line(capsys)
            assert re.search(rf"^error: {re.escape(grid)}/\S+myprox\S* uses algorithm 'myprox' of fedaccel-myprox "
                             rf"0\.1\.0{line}", err), err
            assert MODULE not in sys.modules  # not imported to say so

    forget()
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p != str(site)])
    refused(", which is not installed here: pip install the same version$")
    put("newer", version="0.2.0")
    refused("; installed here: fedaccel-myprox 0.2.0 \\(version differ\\): install the run's version")
    put("edited", source=(PACKAGE / f"{MODULE}.py").read_text() + "# edited\n")
    refused("; installed here: fedaccel-myprox 0.1.0 \\(sha256 differ\\)")
    put("same")
    assert main(["compare", grid]) == 0 and "myprox" in capsys.readouterr().out


def test_a_plugin_modules_hash_runs_none_of_its_packages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``pkg.sub:object``: the file of ``pkg/sub.py`` is found and hashed without running ``pkg/__init__.py``."""
    package = tmp_path / "fedaccel_hashed_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("raise RuntimeError('ran')\n")
    (package / "sub.py").write_text("x = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import hashlib

    assert plugins.module_hash("fedaccel_hashed_pkg.sub") == hashlib.sha256(b"x = 1\n").hexdigest()[:16]
    assert plugins.module_hash("fedaccel_hashed_pkg.absent") == "" and plugins.module_hash("absent_pkg_x.y") == ""
    assert plugins.code_hash("fedaccel_hashed_pkg.sub").startswith("package:")  # the record's: the whole package
    assert plugins.code_hash("fedaccel_hashed_pkg.absent") == ""
    assert "fedaccel_hashed_pkg" not in sys.modules


# --- a plugin that is a package: every .py file of it is the code a run records ----------------------------

TWOMOD = "fedaccel_twomod"  # a package whose __init__ re-exports MyProx from its submodule impl.py


@pytest.fixture
def twomod(put: Callable[..., Path]) -> Iterator[Callable[..., Path]]:
    """``twomod(folder, constant=1)``: fedaccel-twomod 0.1.0 installed into ``tmp_path / folder`` (as ``put``):
    the package fedaccel_twomod, whose ``__init__.py`` only imports the method from ``impl.py``, and
    ``impl.py`` MyProx's module with a constant ``CONSTANT`` in it."""

    def forget_twomod() -> None:
        forget(TWOMOD)
        sys.modules.pop(f"{TWOMOD}.impl", None)

    def put_twomod(folder: str, constant: int = 1) -> Path:
        site = put(folder, distribution="fedaccel-twomod",
                   entry_points=f"[fedaccel.algorithms]\ntwomod = {TWOMOD}:myprox\n")
        forget_twomod()
        (site / TWOMOD).mkdir()
        (site / TWOMOD / "__init__.py").write_text(f"from {TWOMOD}.impl import myprox\n")
        (site / TWOMOD / "impl.py").write_text((PACKAGE / f"{MODULE}.py").read_text() + f"\nCONSTANT = {constant}\n")
        return site

    yield put_twomod
    forget_twomod()


def twomod_record() -> dict[str, str]:
    plugin = plugins.find("algorithm", "twomod", builtin=False)
    assert plugin is not None
    return plugin.record()


def test_editing_a_submodule_of_a_plugin_package_changes_its_record_and_compare_judge_resume_refuse(
    twomod: Callable[..., Path], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """The bug a new user found: ``__init__.py`` re-exports the method from ``impl.py``; editing ``impl.py`` left the
    recorded hash (of ``__init__.py`` alone) as it was, and compare, judge and ``run --resume`` took the edited
    code for the one that made the runs. The whole package is hashed now, never imported to do so."""
    twomod("site")
    base = {"data": {"dataset": "digits", "clients": 3}, "model": "svm",
            "train": {"rounds": 2, "lr": 0.1, "batch_size": 20}, "run": {"progress": False, "checkpoint_every": 1}}
    claims = [{"text": "TwoMod ends above nothing", "a": {"algorithm": "twomod"}, "measure": "final_test_acc",
               "expect": "greater", "value": 0.0}]
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump({"name": "two", "out_dir": str(tmp_path / "out"), "base": base,
                                    "grid": {"algorithm": ["fedavg", "twomod"]}, "baseline": "fedavg",
                                    "claims": claims}))
    grid = str(tmp_path / "out")
    assert main(["experiment", str(path), "--no-progress"]) == 0
    cell = next(p for p in (tmp_path / "out").iterdir() if "twomod" in p.name)
    recorded = recorded_plugins((cell / "config.yaml").read_text(), "")["algorithm"]
    assert recorded == twomod_record()
    assert main(["compare", grid]) == 0 and main(["judge", grid]) in (0, 1)
    (cell / "summary.json").unlink()  # as if killed after its last checkpoint
    capsys.readouterr()

    twomod("edited", constant=2)  # impl.py alone differs; __init__.py, the entry point's module, is the same
    assert twomod_record()["sha256"] != recorded["sha256"]
    for command in (["compare", grid], ["judge", grid], ["run", "--resume", str(cell)]):
        assert main(command) == 2, command
        err = one_line(capsys)
        assert re.search(rf"^error: {re.escape(str(cell))} uses algorithm 'twomod' of fedaccel-twomod 0\.1\.0; "
                         r"installed here: fedaccel-twomod 0\.1\.0 \(sha256 differ\): install the run's version",
                         err), err
        assert TWOMOD not in sys.modules  # not imported to say so
    twomod("same")  # the same files again, elsewhere: the same code
    assert twomod_record() == recorded and recorded["sha256"].startswith("package:")  # a package's, said so
    assert main(["compare", grid]) == 0 and "twomod" in capsys.readouterr().out


def test_a_run_recorded_before_whole_package_hashing_is_refused_saying_so_and_a_single_modules_record_is_unchanged(
    twomod: Callable[..., Path], put: Callable[..., Path]
) -> None:
    """A record written by an older fedaccel hashed the entry point module's file alone (``__init__.py`` here): the
    rest of the package was never recorded, so whether it made the run cannot be checked; a plugin that is a
    module of its own is recorded as it always was, and its old runs still check."""
    from fedaccel.runs.config import check_plugins

    def line(record: dict[str, str]) -> str:
        return PLUGINS_NOTE + json.dumps({"algorithm": record}) + "\n"

    twomod("site")
    old = twomod_record() | {"sha256": plugins.module_hash(TWOMOD)}
    with pytest.raises(ConfigError, match=rf"^run uses algorithm 'twomod' of fedaccel-twomod 0\.1\.0 whose record "
                                          rf"predates whole-package hashing: it covers the file of {TWOMOD} alone, not "
                                          "the rest of its package, so the code that made the run cannot be checked: "
                                          "start a new run$"):
        check_plugins(line(old), "run")
    with pytest.raises(ConfigError, match=r"\(sha256 differ\)"):  # its one file differs too: plainly another code
        check_plugins(line(old | {"sha256": "0" * 16}), "run")
    put("single")
    single = plugins.find("algorithm", "myprox", builtin=False)
    assert single is not None and single.record()["sha256"] == plugins.module_hash(MODULE)
    check_plugins(line(single.record()), "run")
    assert TWOMOD not in sys.modules and MODULE not in sys.modules


SEGMENT = st.text("abxyz_", min_size=1, max_size=4)
TREE = st.dictionaries(st.lists(SEGMENT, max_size=2).flatmap(lambda folders: SEGMENT.map(
    lambda name: "/".join([*folders, f"{name}.py"]))), st.binary(max_size=30), max_size=6)
COUNTER = iter(range(10**9))


@pytest.mark.parametrize("layout", ["links", "namespace"])
def test_a_plugin_installed_as_links_or_without_an_init_changes_its_fingerprint_with_any_edit(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, layout: str) -> None:
    """A strict editable install is a tree of links to the sources (their targets' bytes count, not only where
    they point); a package folder without __init__.py is a namespace (its module's folder counts): in both an
    edit of impl.py kept the fingerprint (a review found them)."""
    source = tmp_path / "src" / "linkplug"
    source.mkdir(parents=True)
    files = {"entry.py": "from linkplug.impl import X\n", "impl.py": "X = 1\n"}
    if layout == "links":
        files["__init__.py"] = ""
    for name, text in files.items():
        (source / name).write_text(text)
    site = tmp_path / ("farm" if layout == "links" else "src")
    if layout == "links":
        (site / "linkplug").mkdir(parents=True)
        for name in files:
            (site / "linkplug" / name).symlink_to(source / name)
    monkeypatch.syspath_prepend(str(site))
    before = plugins.code_hash("linkplug.entry")
    (source / "impl.py").write_text("X = 2\n")
    after = plugins.code_hash("linkplug.entry")
    assert before.startswith(plugins.PACKAGE_HASH) and after.startswith(plugins.PACKAGE_HASH) and before != after


@settings(max_examples=60, deadline=None)
@given(tree=TREE, edit=st.sampled_from(["content", "add", "remove", "rename"]), pick=st.integers(0, 10**6),
       data=st.binary(max_size=30), new=st.lists(SEGMENT, min_size=1, max_size=3))
def test_any_edit_to_any_py_file_of_a_plugin_package_changes_its_fingerprint_which_runs_none_of_it(
    tree: dict[str, bytes], edit: str, pick: int, data: bytes, new: list[str]
) -> None:
    """Whatever the package's tree, a file's bytes edited, a file added, removed or renamed changes the record's
    sha256; bytecode and other files do not count; the package's ``__init__`` (which would leave a marker and
    raise) never runs, whichever module of it the entry point names."""
    name = f"fedaccel_prop_{next(COUNTER)}"
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder) / name
        marker = Path(folder) / "ran"
        files = {"__init__.py": f"open({str(marker)!r}, 'w').close()\nraise RuntimeError('ran')\n".encode(), **tree}

        def write(path: str, content: bytes) -> None:
            (root / path).parent.mkdir(parents=True, exist_ok=True)
            (root / path).write_bytes(content)

        for path, content in files.items():
            write(path, content)
        entry = name if len(tree) == 0 or pick % 2 else f"{name}.{sorted(tree)[0][:-3].replace('/', '.')}"

        def fingerprint() -> str:
            return plugins.Plugin("algorithm", "p", f"{entry}:recipe", "d", "1").record()["sha256"]

        sys.path.insert(0, folder)
        try:
            before = fingerprint()
            write("__pycache__/x.cpython-311.pyc", data)  # not code it hashes, nor other files
            write("notes.txt", data)
            assert fingerprint() == before
            target = sorted(files)[pick % len(files)]
            if edit == "content" or (edit in ("remove", "rename") and target == "__init__.py"):
                if data == files[target]:
                    data += b"#"
                write(target, data)
            elif edit == "remove":
                (root / target).unlink()
            else:
                moved = "/".join(new) + ".py"
                while moved in files:
                    moved = "_" + moved
                write(moved, files[target] if edit == "rename" else data)
                if edit == "rename":
                    (root / target).unlink()
            assert fingerprint() != before, (edit, target)
        finally:
            sys.path.remove(folder)
        assert not marker.exists() and name not in sys.modules


def test_a_plugin_package_too_big_to_hash_is_refused_in_one_line_and_links_out_of_it_are_never_followed(
    twomod: Callable[..., Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """Hashing is bounded: past so many files, folders or bytes it refuses in one line before reading on (a
    sparse file of 1 GiB is not read); a link is hashed as where it points, never followed (a link to ``/``,
    to ``/dev/zero``), a pipe is skipped (opening it would wait for a writer)."""
    site = twomod("site")
    package = site / TWOMOD
    (package / "up").symlink_to("/")
    (package / "zero.py").symlink_to("/dev/zero")
    os.mkfifo(package / "pipe.py")
    before = twomod_record()["sha256"]
    (package / "zero.py").unlink()
    (package / "zero.py").symlink_to("/dev/null")
    assert twomod_record()["sha256"] != before  # where a link points is part of the code
    where = rf"^algorithm 'twomod' of fedaccel-twomod 0\.1\.0: its package '{re.escape(str(package))}' "
    with open(package / "huge.py", "wb") as file:
        file.truncate(2**30)
    with pytest.raises(ConfigError, match=where + r"has more than 32 MiB of \.py files: too much to hash"):
        twomod_record()
    assert TWOMOD not in sys.modules  # hashing runs nothing; a run imports the plugin, then refuses to record it
    assert main(["run", *TINY, "--set", "algorithm=twomod", "--out", str(tmp_path / "run")]) == 2
    assert one_line(capsys).startswith("error: algorithm 'twomod' of fedaccel-twomod 0.1.0: its package ")
    (package / "huge.py").unlink()
    monkeypatch.setattr(plugins, "MAX_FILES", 3)
    for k in range(2):
        (package / "sub" / str(k)).mkdir(parents=True)
        (package / "sub" / str(k) / "m.py").write_text("")
    with pytest.raises(ConfigError, match=where + r"holds more than 3 \.py files: too much to hash"):
        twomod_record()
    monkeypatch.setattr(plugins, "MAX_ENTRIES", 20)
    monkeypatch.setattr(plugins, "MAX_FILES", 2000)
    for k in range(20):
        (package / f"data{k}.txt").write_text("")
    with pytest.raises(ConfigError, match=where + "holds more than 20 files and folders: too much to hash"):
        twomod_record()


# --- processes: spawned grid workers, Flower's simulation, pip itself ----------------------------------


@pytest.mark.slow
def test_an_experiment_with_two_workers_runs_and_judges_the_plugin_against_fedprox(
    site: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """``experiment -j 2``: each spawned worker finds the entry point again (nothing of the plugin is pickled)."""
    base = {"data": {"dataset": "digits", "clients": 3}, "model": "svm",
            "train": {"rounds": 3, "lr": 0.1, "batch_size": 20}, "run": {"progress": False}}
    claim = {"text": "MyProx ends where FedProx ends", "a": {"algorithm": {"name": "myprox", "mu": 0.3}},
             "b": {"algorithm": {"name": "fedprox", "mu": 0.3}}, "measure": "final_test_acc", "expect": "equal",
             "margin": 0.01, "why": "the same method"}
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump({"name": "mine", "out_dir": str(tmp_path / "out"), "base": base,
                                    "grid": {"algorithm": [{"name": "fedprox", "mu": 0.3}, {"name": "myprox", "mu": 0.3}],
                                             "run.seed": [0, 1]}, "baseline": "fedprox", "claims": [claim]}))
    assert main(["experiment", str(path), "-j", "2", "--no-progress"]) == 0
    cells = sorted(p for p in (tmp_path / "out").iterdir() if (p / "metrics.jsonl").is_file())
    assert len(cells) == 4
    by_name = {c.name: without_wall([json.loads(x) for x in (c / "metrics.jsonl").read_text().splitlines()]) for c in cells}
    for seed in (0, 1):
        mine = [rows for name, rows in by_name.items() if "myprox" in name and f"seed={seed}" in name]
        theirs = [rows for name, rows in by_name.items() if "fedprox" in name and f"seed={seed}" in name]
        assert len(mine) == len(theirs) == 1 and mine[0] == theirs[0]
    capsys.readouterr()
    assert main(["judge", str(tmp_path / "out")]) in (0, 1)
    assert "MyProx ends where FedProx ends" in capsys.readouterr().out


def plugin_env(site: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT), os.environ.get("PYTHONPATH", "")]),
            "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1", "FLWR_TELEMETRY_ENABLED": "0"}


@pytest.mark.slow
def test_flower_simulation_runs_the_plugin_with_fedprox_numbers(site: Path, tmp_path: Path) -> None:
    """Flower's clients (Ray workers) build the algorithm from the config the server sends: the plugin there too."""
    pytest.importorskip("flwr")
    local = cli_run(tmp_path / "fedprox", "algorithm={name: fedprox, mu: 0.3}")
    args = [a for s in TINY[1::2] for a in ("--set", s)]
    subprocess.run([sys.executable, "-m", "fedaccel.cli", "run", *args, "--set", "algorithm=myprox", "--set",
                    "algorithm.mu=0.3", "--set", "run.runtime=flower-simulation", "--out", str(tmp_path / "flower")],
                   env=plugin_env(site), cwd=tmp_path, check=True, capture_output=True, timeout=600)
    flower = without_wall([json.loads(x) for x in (tmp_path / "flower/metrics.jsonl").read_text().splitlines()])
    assert len(flower) == len(local) == 3
    for a, b in zip(local, flower):
        for key in ("test_acc", "test_loss", "train_loss"):
            assert b[key] == pytest.approx(a[key], abs=1e-5), (a["round"], key)


@pytest.mark.slow
def test_pip_installs_the_plugin_package_with_the_entry_point_the_tests_write(tmp_path: Path) -> None:
    """The hand-made site is what pip makes: pip's install of tests/plugin_package declares the same entry point."""
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                    "--no-index", "--target", str(tmp_path / "site"), str(PACKAGE)], check=True, capture_output=True,
                   timeout=300, env={**os.environ, "PIP_NO_INPUT": "1"})
    infos = list((tmp_path / "site").glob("fedaccel_myprox-0.1.0.dist-info"))
    assert len(infos) == 1
    text = (infos[0] / "entry_points.txt").read_text()
    assert "[fedaccel.algorithms]" in text and f"myprox = {MODULE}:myprox" in text


def test_a_grid_whose_finished_cells_ran_other_plugin_code_runs_no_cell(
    site: Path, put: Callable[..., Path], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """A new user edited the method, added a seed and ran the grid again: the new cell ran on the new code, the
    finished ones stayed, and table.md mixed the two versions (exit 0), a folder compare and judge then refuse.
    Now nothing runs and nothing is rewritten; with the grid's own version installed again it continues."""
    grid = tmp_path / "grid.yaml"

    def write(seeds: list[int]) -> None:
        grid.write_text(yaml.safe_dump({"name": "mine", "out_dir": str(tmp_path / "out"),
                                        "base": {"model": "softmax", "train": {"rounds": 2},
                                                 "data": {"dataset": "digits", "subset": 200, "clients": 2}},
                                        "grid": {"algorithm": ["fedavg", "myprox"], "run.seed": seeds}}))

    write([0])
    assert main(["experiment", str(grid), "--no-progress"]) == 0
    table = (tmp_path / "out" / "table.md").read_bytes()
    write([0, 1])
    edited = (site / f"{MODULE}.py").read_text() + "\n# an edit\n"
    put("edited", source=edited)
    capsys.readouterr()
    assert main(["experiment", str(grid), "--no-progress"]) == 2
    line = one_line(capsys)
    assert "uses algorithm 'myprox' of fedaccel-myprox 0.1.0; installed here:" in line and "(sha256 differ)" in line
    assert "No cell ran" in line and "--out" in line, line
    assert not list((tmp_path / "out").glob("*run.seed=1*")) and (tmp_path / "out" / "table.md").read_bytes() == table
    put("again")  # the version the grid ran with
    assert main(["experiment", str(grid), "--no-progress"]) == 0
    assert len(list((tmp_path / "out").glob("*run.seed=1*"))) == 2


def test_an_option_its_recipe_declares_int_takes_no_fraction(capsys: pytest.CaptureFixture) -> None:
    """A new user's `k: int = 3` took `--set algorithm.k=2.5` and recorded 2.5 (a str option was checked)."""
    assert main(["run", "--set", "algorithm={name: fedgsnr, e_const: 2.5}", "--set", "train.rounds=1"]) == 2
    assert "e_const must be a whole number (its recipe says int), got 2.5" in one_line(capsys)
    for whole in (2, 20):  # taken at load: the config's check raises nothing
        from fedaccel.runs.config import load_config

        assert load_config(None, [f"algorithm={{name: fedgsnr, e_const: {whole}}}"]).algorithm["e_const"] == whole


def test_packed_cells_carry_their_plugins_and_another_code_restores_none(
    site: Path, put: Callable[..., Path], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """A grid carried to another machine (`pack`, then `experiment --from`) kept its cells' configs but not their
    plugins line: judged there, or beside new cells, nothing said which code made them. Now the line travels,
    the restored cells read as the originals, and where other code is installed nothing is written."""
    grid = tmp_path / "grid.yaml"
    base = {"model": "softmax", "train": {"rounds": 2}, "data": {"dataset": "digits", "subset": 200, "clients": 2}}
    grid.write_text(yaml.safe_dump({"name": "mine", "out_dir": str(tmp_path / "out"), "base": base,
                                    "grid": {"algorithm": ["fedavg", "myprox"]}}))
    assert main(["experiment", str(grid), "--no-progress"]) == 0
    packed = tmp_path / "mine.jsonl.xz"
    assert main(["pack", str(tmp_path / "out"), "-o", str(packed)]) == 0
    cell = "algorithm=myprox"
    assert main(["experiment", str(grid), "--from", str(packed), "--out", str(tmp_path / "there"),
                 "--no-progress"]) == 0
    assert recorded_plugins((tmp_path / "there" / cell / "config.yaml").read_text(), "there") == recorded_plugins(
        (tmp_path / "out" / cell / "config.yaml").read_text(), "out") != {}
    put("edited", source=(site / f"{MODULE}.py").read_text() + "\n# an edit\n")
    capsys.readouterr()
    assert main(["experiment", str(grid), "--from", str(packed), "--out", str(tmp_path / "elsewhere"),
                 "--no-progress"]) == 2
    line = one_line(capsys)
    assert f"cell '{cell}' uses algorithm 'myprox' of fedaccel-myprox 0.1.0; installed here:" in line, line
    assert line.rstrip().endswith("nothing written") and not (tmp_path / "elsewhere").exists()


def test_a_grid_of_many_plugin_cells_hashes_the_plugin_once_when_it_runs_again(
    site: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each finished cell's plugins line is checked against the installed code, once per distinct line: a thousand
    cells of one plugin hashed its package a thousand times (a review finding)."""
    grid = tmp_path / "grid.yaml"
    grid.write_text(yaml.safe_dump({"name": "mine", "out_dir": str(tmp_path / "out"),
                                    "base": {"model": "softmax", "train": {"rounds": 1}, "algorithm": "myprox",
                                             "data": {"dataset": "digits", "subset": 100, "clients": 2}},
                                    "grid": {"run.seed": [0, 1, 2, 3]}}))
    assert main(["experiment", str(grid), "--no-progress"]) == 0
    hashed = []
    real = plugins.code_hash
    monkeypatch.setattr(plugins, "code_hash", lambda *args, **kw: hashed.append(args) or real(*args, **kw))
    assert main(["experiment", str(grid), "--no-progress"]) == 0  # every cell finished: checked, skipped
    assert 1 <= len(hashed) <= 2, hashed  # the check, and the experiment file's own config at load at most


def test_a_grid_whose_only_other_code_cells_failed_says_which_to_delete_and_then_runs_them(
    site: Path, put: Callable[..., Path], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """The method's local term raised, so its cells failed; the researcher fixed it and ran the same command: every
    cell was refused for 'two versions of its code' and the line offered only --out, which runs the finished
    FedAvg cells again. The cells of the other version never finished, so the line names them to delete, and
    the same command then runs them on the fixed code."""
    grid = tmp_path / "grid.yaml"
    grid.write_text(yaml.safe_dump({"name": "mine", "out_dir": str(tmp_path / "out"),
                                    "base": {"model": "softmax", "train": {"rounds": 2},
                                             "data": {"dataset": "digits", "subset": 200, "clients": 2}},
                                    "grid": {"algorithm": ["fedavg", "myprox"], "run.seed": [0, 1]}}))
    source = (site / f"{MODULE}.py").read_text()
    put("broken", source=source.replace("grad.add_(theta - w, alpha=mu)", "raise RuntimeError('a bug')"))
    assert main(["experiment", str(grid), "--no-progress"]) == 1  # the FedAvg cells finished, the others failed
    failed = sorted(d for d in (tmp_path / "out").glob("*myprox*") if not (d / "summary.json").is_file())
    assert len(failed) == 2
    put("fixed", source=source)
    capsys.readouterr()
    assert main(["experiment", str(grid), "--no-progress"]) == 2
    line = one_line(capsys)
    assert "No cell ran" in line and "the 2 cell(s) that ran the other version did not finish" in line, line
    command = line[line.index("`rm -r ") + 1:line.index("` and the same command")]
    assert sorted(Path(p) for p in shlex.split(command)[2:]) == failed, command
    subprocess.run(shlex.split(command), check=True)
    assert main(["experiment", str(grid), "--no-progress"]) == 0
    assert all((d / "summary.json").is_file() for d in failed)


HIDDEN = '''
from fedaccel import Part, build_algorithm, compose


def myprox(*, mu: float = 0.01):
    kept = {}  # heavy-ball momentum in a closure, not in the state server_end returns: a resume loses it

    def server_end(info, w, w_next, updates, state):
        kept["v"] = (w_next - w) + 0.5 * kept.get("v", 0.0)
        return w + kept["v"], state

    return compose("myprox", *build_algorithm("fedavg").parts, Part(name="hidden", server_end=server_end))
'''


def test_check_resume_says_a_method_that_raises_is_an_error_not_a_difference(
    put: Callable[..., Path], tmp_path: Path, capsys: pytest.CaptureFixture,
) -> None:
    """Exit 1 means the numbers differ; a method raising in the first run gave a traceback and exit 1 too (a
    breaker's): it is one line and exit 2, without advice on the folder check-resume removes."""
    source = (PACKAGE / f"{MODULE}.py").read_text().replace("grad.add_(theta - w, alpha=mu)", "raise RuntimeError('a bug')")
    put("raising", source=source)
    args = ["--set", "data.dataset=digits", "--set", "data.subset=200", "--set", "data.clients=2", "--set",
            "model=softmax", "--set", "train.rounds=4", "--set", "algorithm=myprox"]
    assert main(["check-resume", *args]) == 2
    line = one_line(capsys)
    assert line == "error: check-resume: the run to stop after round 2 failed: RuntimeError: a bug\n", line


@pytest.mark.parametrize("hidden", [False, True])
def test_check_resume_tells_a_method_whose_state_a_resume_keeps_from_one_that_hides_it(
    put: Callable[..., Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture,
    hidden: bool,
) -> None:
    """A new user's momentum kept in a closure equalled FedAvgM run whole, and after a stop and a resume differed
    by 3.7e-4 with no word (helper): `fedaccel check-resume` runs the config whole and stopped-then-resumed in a new
    process, and says which. tests/plugin_package's MyProx keeps nothing outside its states."""
    site = put("hidden" if hidden else "site", **({"source": HIDDEN} if hidden else {}))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(site), str(ROOT)]))  # the resume's new process
    args = ["--set", "data.dataset=digits", "--set", "data.subset=200", "--set", "data.clients=2", "--set",
            "model=softmax", "--set", "train.rounds=4", "--set", "algorithm=myprox"]
    assert main(["check-resume", *args]) == (1 if hidden else 0)
    out = capsys.readouterr().out
    assert out.startswith("stopped after round 2 of 4 and resumed in a new process: "), out
    if hidden:
        assert "the numbers differ (final models' largest difference " in out and "first at round 3: " in out, out
    else:
        assert "the same numbers (final models' largest difference 0)" in out, out
