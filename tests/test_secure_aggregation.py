"""Secure aggregation with Flower's SecAgg+: the ServerApp never receives an individual update, the
model equals the plain run's within SecAgg+'s quantisation bound, and what cannot use it is refused.

One round of FedAvg on digits, 3 clients, on Flower's simulation engine: a plain run and a secure one
(Ray starts once for both), every reply the ServerApp pulls recorded.
"""

from __future__ import annotations

import logging
import copy
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

pytest.importorskip("flwr")

from flwr.app import ConfigRecord, Context, Message, RecordDict  # noqa: E402
from flwr.common import bytes_to_ndarray  # noqa: E402
from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS, Key  # noqa: E402
from flwr.superlink.grid import InMemoryGrid  # noqa: E402

from test_gate import LoopbackGrid  # noqa: E402

from fedaccel.algorithms.base import ClientContext  # noqa: E402
from fedaccel.engine.round import init_state, round_info, run_round, train_client  # noqa: E402
from fedaccel.errors import ConfigError  # noqa: E402
from fedaccel.flower import client as fedaccel_client  # noqa: E402
from fedaccel.flower.client import UPDATE  # noqa: E402
from fedaccel.flower.secure import masking_stage, secure_mod  # noqa: E402
from fedaccel.flower.server import FlowerClients  # noqa: E402
from fedaccel.flower.simulation import simulate  # noqa: E402
from fedaccel.flower.wire import unpack  # noqa: E402
from fedaccel.runs.checkpoint import load_checkpoint  # noqa: E402
from fedaccel.runs.config import load_config  # noqa: E402
from fedaccel.runs.setup import build_setup  # noqa: E402

TINY = ["data.dataset=digits", "model=softmax", "data.clients=3", "data.split=dirichlet", "data.split.alpha=0.5",
        "train.rounds=1", "train.lr=0.1", "train.batch_size=20", "run.progress=false", "algorithm=fedavg",
        "run.runtime=flower-simulation"]
C, Q = 2.0, 1 << 12  # a coarse quantisation, so that its error is far above float32's and the bound is tested
SECURE = f"run.secure_aggregation={{clipping_range: {C}, quantization_range: {Q}, num_shares: 3, reconstruction_threshold: 2}}"


def recorded_run(config, path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[list, torch.Tensor]:
    """Run ``config``; (every reply the ServerApp pulled, the model after the round)."""
    seen: list = []
    pull = InMemoryGrid.pull_messages

    def recording(self, message_ids):  # type: ignore[no-untyped-def]
        replies = list(pull(self, message_ids))
        seen.extend(replies)
        return replies

    monkeypatch.setattr(InMemoryGrid, "pull_messages", recording)
    simulate(config, path)
    monkeypatch.setattr(InMemoryGrid, "pull_messages", pull)
    saved = load_checkpoint(path)
    assert saved is not None
    return seen, saved["state"].w


def quantised(x: np.ndarray, ratio_q: int) -> np.ndarray:
    """What SecAgg+ makes of one client's delta before masking (its stochastic rounding: +-1)."""
    return (np.clip(x * ratio_q / Q, -C, C) + C) * Q / (2 * C)


@pytest.mark.slow
def test_secagg_hides_every_update_and_gives_the_plain_mean_within_the_bound(tmp_path: Path, monkeypatch) -> None:
    plain_config = load_config(None, TINY)
    plain, w_plain = recorded_run(plain_config, tmp_path / "plain", monkeypatch)
    secure, w_secure = recorded_run(load_config(None, [*TINY, SECURE]), tmp_path / "secure", monkeypatch)

    # the plain run's replies carry each client's delta ...
    deltas = [unpack(m.content, prefix=UPDATE)["delta"].double().numpy() for m in plain if UPDATE + "packed" in m.content]
    assert len(deltas) == 3
    # ... the secure run's none: no fedaccel upload, no array, and each masked vector is not the client's
    # quantised delta (SecAgg+'s masks are uniform mod 2**32; an unmasked one is within 1 of it)
    assert not any(key.startswith(UPDATE) for m in secure if not m.has_error() for key in m.content)
    assert all(len(record) == 0 for m in secure if not m.has_error() for record in m.content.array_records.values())
    masked = [[bytes_to_ndarray(b) for b in m.content.config_records[RECORD_KEY_CONFIGS][Key.MASKED_PARAMETERS]]
              for m in secure if not m.has_error() and RECORD_KEY_CONFIGS in m.content
              and Key.MASKED_PARAMETERS in m.content.config_records[RECORD_KEY_CONFIGS]]
    assert len(masked) == 3
    setup = build_setup(plain_config)
    sizes = np.array([len(p) for p in setup.federation.partition], dtype=float)
    ratio_q = np.round(sizes / sizes.max() * Q).astype(np.int64)  # SecAgg+'s integer weights q_i
    for vector in masked:
        for x, q in zip(deltas, ratio_q):
            assert np.mean(np.abs(vector[1].astype(np.int64) - quantised(x, q)) > 1) > 0.99

    # the model: the plain run's within the bound (docs/secure-aggregation.md), per coordinate
    x = np.stack(deltas)
    assert np.abs(x * (ratio_q / Q)[:, None]).max() < C  # nothing clipped: the bound's premise
    mean = (sizes[:, None] * x).sum(0) / sizes.sum()
    bound = (2 * C * len(x) + 0.5 * np.abs(x - mean).sum(0)) / ratio_q.sum()
    error = np.abs(w_secure.double().numpy() - w_plain.double().numpy())
    assert (error <= bound + 1e-6).all(), float((error - bound).max())
    assert error.max() > 1e-5  # the quantisation did happen (2C/Q ~ 1e-3 here): the comparison is not vacuous


class Loopback(LoopbackGrid):
    """A grid whose nodes are the fedaccel ClientApp's ``train`` handler behind its mods, called in this
    process when the server pulls (node k is client k; messages pushed as test_gate's grid pushes them);
    ``silent`` nodes never answer the masking stage (they drop out of SecAgg+ after their keys are shared);
    every reply is kept in ``seen``."""

    def __init__(self, n: int, silent: frozenset[int] = frozenset()) -> None:
        self.contexts = [Context(0, k, {"partition-id": k}, RecordDict(), {}) for k in range(n)]
        self.silent, self.pending, self.count, self.seen = silent, {}, 0, []

    def pull_messages(self, ids: set[str]) -> list[Message]:
        replies = []
        for message_id in sorted(ids & set(self.pending)):
            message, node = self.pending[message_id], self.pending[message_id].metadata.dst_node_id
            if node in self.silent and masking_stage(message):
                continue
            del self.pending[message_id]
            # a copy, as the network would deliver it: the workflow sends one content to every node, and
            # Flower's mod takes the stage out of what it receives
            replies.append(secure_mod(copy.deepcopy(message), self.contexts[node], fedaccel_client.train))
        self.seen.extend(replies)
        return replies


def secure_round(overrides: list[str], silent: frozenset[int], monkeypatch) -> tuple[Any, Any, Loopback, Any]:
    """Round 1 through the server's code path over a :class:`Loopback` grid: (setup, state, grid, report)."""
    import yaml
    from flwr.supercore.task_identity import TaskIdentity

    for name in ("_run_id", "_task_id", "_node_id"):  # what a ServerApp process has
        monkeypatch.setattr(TaskIdentity, name, 1)
    setup = build_setup(load_config(None, [*TINY, *overrides]))
    federation = setup.federation
    grid = Loopback(federation.n_clients, silent)
    text = yaml.safe_dump(setup.config.to_dict(), sort_keys=True)
    for node, context in enumerate(grid.contexts):  # the hello a deployment sends first
        fedaccel_client.hello(Message(RecordDict({"config": ConfigRecord({"yaml": text, "round": 0})}), node,
                                      "query.hello"), context)
    runtime = FlowerClients(grid, setup, {k: k for k in range(federation.n_clients)}, timeout=1.0)  # type: ignore[arg-type]
    start = init_state(setup.algorithm, federation.model.theta, federation.n_clients)
    state, report = run_round(setup.algorithm, start, federation, fraction=1.0, runtime=runtime)
    return setup, state, grid, report


def plain_round(setup: Any, clients: list[int]) -> tuple[torch.Tensor, np.ndarray, np.ndarray]:
    """Round 1 in process with only ``clients``: (the model, their deltas, their sample counts)."""
    federation, algorithm = setup.federation, setup.algorithm
    start = init_state(algorithm, federation.model.theta, federation.n_clients)
    info = round_info(federation, 0)
    deltas = []
    for i in clients:
        ctx = ClientContext(info, i, int(federation.steps[i]), True)
        deltas.append(train_client(algorithm, ctx, start.w, start.server, start.clients[i], federation)[1].delta)
    schedule = [clients]
    state, _ = run_round(algorithm, start, federation, fraction=1.0, schedule=schedule)
    sizes = np.array([len(federation.partition[i]) for i in clients], dtype=float)
    return state.w, torch.stack(deltas).double().numpy(), sizes


def bound(x: np.ndarray, sizes: np.ndarray, top: float | None = None) -> np.ndarray:
    """docs/secure-aggregation.md: (2Ck + 1/2 sum_i |x_i - m|) / sum_i q_i, per coordinate; q_i = round(Q n_i / top),
    ``top`` SecAgg+'s max_weight: the largest weight of the round's clients, those that dropped out included."""
    q = np.round(sizes / (top or sizes.max()) * Q)
    mean = (sizes[:, None] * x).sum(0) / sizes.sum()
    assert np.abs(x * (q / Q)[:, None]).max() < C  # nothing clipped: the bound's premise
    return (2 * C * len(x) + 0.5 * np.abs(x - mean).sum(0)) / q.sum()


@pytest.mark.parametrize("overrides, silent", [
    ([], frozenset()),  # FedAvg, data-weighted
    (["algorithm=bherd", "algorithm.alpha=0.5"], frozenset()),  # its selection on the client
    (["algorithm=fedavgm"], frozenset()),  # a server optimiser (momentum: linear in the step, so the bound holds)
    ([], frozenset({2})),  # client 2 drops out after sharing its keys: the others' sum, its masks removed
])
def test_secagg_on_the_servers_code_path_gives_the_plain_mean_of_those_summed(overrides, silent, monkeypatch,
                                                                             caplog) -> None:
    with caplog.at_level(logging.INFO, logger="flwr"):
        setup, state, grid, report = secure_round([*overrides, SECURE], silent, monkeypatch)
    assert "strategy sampled 3 clients (out of 3)" in caplog.text  # was "(out of 0)": an empty client manager
    summed = [i for i in range(3) if i not in silent]
    w_plain, x, sizes = plain_round(setup, summed)
    error = np.abs(state.w.double().numpy() - w_plain.double().numpy())
    top = max(len(setup.federation.partition[i]) for i in range(3))  # client 2 trained, then dropped out of SecAgg+
    assert (error <= bound(x, sizes, top) + 1e-6).all() and error.max() > 1e-5
    assert report.uploaded == len(summed) and report.diag["secure"] == {"summed": len(summed)}
    assert report.diag.get("lost") == (sorted(silent) or None)
    # nothing the server pulled holds a fedaccel upload or an array
    assert not any(key.startswith(fedaccel_client.UPDATE) for m in grid.seen for key in m.content)
    assert all(len(r) == 0 for m in grid.seen for r in m.content.array_records.values())


def test_the_aggregators_coefficients_become_integer_weights() -> None:
    from fedaccel.flower.secure import integer_weights

    assert integer_weights({0: 0.2, 1: 0.5, 2: 0.3}, {0: 20, 1: 50, 2: 30}) == {0: 20, 1: 50, 2: 30}  # data
    assert integer_weights({0: 1.0, 1: 1.0}, {0: 20, 1: 50}) == {0: 1, 1: 1}  # a uniform mean


def test_a_sum_that_would_wrap_around_the_modulus_is_refused_in_one_line(monkeypatch) -> None:
    from fedaccel.errors import UserError

    wraps = "run.secure_aggregation={quantization_range: 2147483648, num_shares: 3, reconstruction_threshold: 2}"
    with pytest.raises(UserError, match="3 clients' sum .* wraps around modulus_range 4294967296"):
        secure_round([wraps], frozenset(), monkeypatch)


def test_too_many_dropouts_halt_secagg_and_leave_the_model(monkeypatch) -> None:
    setup, state, _, report = secure_round([SECURE], frozenset({1, 2}), monkeypatch)
    assert report.diag["secure"] == {"summed": 0, "halted": True} and report.uploaded == 0
    torch.testing.assert_close(state.w, setup.federation.model.theta, atol=0, rtol=0)


@pytest.mark.parametrize("overrides, words", [
    (["algorithm=scaffold"], "extras"),
    (["algorithm=fednova"], "fednova"),
    (["algorithm=fedgsnr"], "plans"),
    (["algorithm=fedumf"], "chooses who uploads"),
    (["algorithm=grab-fedavg"], "adjusts"),
    (["algorithm.aggregate=median"], "median"),
    (["algorithm.dp={clip: 1.0, noise_multiplier: 1.0}"], "DP with secure aggregation is not supported yet"),
    (["algorithm.dp={clip: 1.0, noise_multiplier: 1.0, noise: client}"], "is not SecAgg+'s weighted mean"),
    (["eval.models=[broadcast, client_mean]"], "client_mean"),
    (["run.runtime=in-process"], "needs a Flower runtime"),
    (["run.runtime=stacked"], "needs a Flower runtime"),
    (["run.secure_aggregation.clipping_range=0"], "clipping_range"),
    (["run.secure_aggregation.num_shares=2"], "num_shares"),
    (["run.secure_aggregation.modulus_range=3000"], "power of 2"),
    (["run.secure_aggregation.colour=1"], "no option 'colour'"),
])
def test_what_needs_individual_updates_or_no_network_is_refused_in_one_line(overrides, words) -> None:
    with pytest.raises(ConfigError) as refused:
        load_config(None, [*TINY, "run.secure_aggregation={}", *overrides])
    assert words in str(refused.value) and "\n" not in str(refused.value)


@pytest.mark.parametrize("declared", [False, True])
def test_a_server_end_of_yours_is_admitted_where_it_declares_it_reads_only_the_models(declared: bool) -> None:
    """A new user's server-momentum plugin was refused as keeping 'server state built from the individual uploads
    (extras)', which it did not: only the built-in optimisers were admitted, by name. A part that declares
    models_only (its server_end reads w and w_next) is admitted; one that reads the uploads is refused, saying so."""
    from fedaccel.algorithms.base import Part, compose
    from fedaccel.algorithms.registry import build_algorithm
    from fedaccel.runs.secure import refusal

    def step(info, w, w_next, updates, ss):  # the server's own momentum-free step: w_next as it is
        return w_next, ss

    mine = compose("mine", *build_algorithm("fedavg").parts, Part(name="mine", server_end=step, models_only=declared))
    said = refusal("flower-simulation", mine, ["broadcast"])
    if declared:
        assert said is None
    else:
        assert said is not None and "mine's mine reads the individual uploads in its server_end" in said
    assert refusal("flower-simulation", build_algorithm("fedavgm"), ["broadcast"]) is None


@pytest.mark.parametrize("recipe", ["fedavg", "fedprox", "bherd", "fedadam", "fedavg-adam"])
def test_recipes_whose_server_needs_only_the_mean_are_accepted(recipe: str) -> None:
    extra = ["algorithm=fedavg", "algorithm.server_opt={name: adam, lr: 0.05}"] if recipe == "fedavg-adam" else \
        [f"algorithm={recipe}"]
    config = load_config(None, [*TINY, *extra, SECURE])
    assert config.run.secure_aggregation["clipping_range"] == C


@pytest.mark.slow
def test_a_loopback_deployment_with_secagg_gives_the_plain_mean_within_the_bound(tmp_path: Path) -> None:
    """`fedaccel deploy`: a real SuperLink and three SuperNode processes on 127.0.0.1, SecAgg+ between them."""
    from fedaccel.cli import main

    overrides = [*TINY[:-1], "run.timeout=120", SECURE]
    argv = ["deploy", "--clients", "3", "--out", str(tmp_path / "deployed"), "--timeout", "400"]
    for item in overrides:
        argv += ["--set", item]
    assert main(argv) == 0
    saved = load_checkpoint(tmp_path / "deployed")
    assert saved is not None
    w_plain, x, sizes = plain_round(build_setup(load_config(None, [*overrides, "run.runtime=flower-deployment"])),
                                    [0, 1, 2])
    error = np.abs(saved["state"].w.double().numpy() - w_plain.double().numpy())
    assert (error <= bound(x, sizes) + 1e-6).all() and error.max() > 1e-5
    rows = [json.loads(line) for line in (tmp_path / "deployed" / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["uploaded"] == 3 and rows[-1]["diag"]["secure"] == {"summed": 3}, rows[-1]


def test_a_client_never_answers_with_its_kept_delta_outside_secagg(monkeypatch) -> None:
    """A FitIns asking for the kept update without SecAgg+'s configs (its mod never saw it) is refused: the
    handler would otherwise answer with the delta unmasked."""
    from flwr.common import FitIns, ndarrays_to_parameters
    from flwr.compat.common import recorddict_compat as compat
    from flwr.supercore.task_identity import TaskIdentity

    from fedaccel.flower.secure import CLIP, RATIO, WEIGHT

    for name in ("_run_id", "_task_id", "_node_id"):
        monkeypatch.setattr(TaskIdentity, name, 1)
    context = Context(0, 0, {"partition-id": 0}, RecordDict(), {})
    fedaccel_client.pack(torch.ones(3), into=context.state, prefix=fedaccel_client.KEPT)
    fit = FitIns(ndarrays_to_parameters([]), {WEIGHT: 1, RATIO: 1.0, CLIP: 8.0})  # what the masking stage holds
    ask = Message(compat.fitins_to_recorddict(fit, True), 0, "train")
    with pytest.raises(ValueError, match="outside SecAgg"):
        secure_mod(ask, context, fedaccel_client.train)
    assert fedaccel_client.KEPT + "packed" in context.state  # still kept, for the real masking stage
