"""Server optimisers (FedAvgM, FedAdagrad, FedAdam, FedYogi): hand-computed steps, reductions to the methods
they wrap, their defining properties, the checkpointed state, and Flower 1.42's strategies run on the same
client updates (the harness here is shared with tests/test_robust_aggregation.py)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import Tensor, nn

from fedaccel.algorithms.base import Algorithm, ClientUpdate, RoundInfo, compose
from fedaccel.algorithms.bherd import bherd_selection
from fedaccel.algorithms.mean import mean_aggregate
from fedaccel.algorithms.registry import build_algorithm
from fedaccel.algorithms.server_opt import (
    ServerMoments, server_adagrad, server_adam, server_avgm, server_sgd, server_yogi,
)
from fedaccel.algorithms.states import from_plain, to_plain
from fedaccel.engine.round import init_state, run_round
from fedaccel.errors import ConfigError
from fedaccel.runs.config import load_config
from test_fedprox import non_iid_federation

INFO = RoundInfo(round=0, lr=0.1, prev_lr=0.1, weights=np.array([0.5, 0.5]), seed=0)


def updates_for(deltas: Sequence[Tensor | Sequence[float]], counts: Sequence[float] | None = None) -> list[ClientUpdate]:
    counts = counts or [1.0] * len(deltas)
    return [ClientUpdate(client=i, weight=float(n), steps=1, delta=torch.as_tensor(d, dtype=torch.float64))
            for i, (d, n) in enumerate(zip(deltas, counts, strict=True))]


def server_round(algorithm: Algorithm, server: tuple[Any, ...], w: Tensor, updates: list[ClientUpdate],
                 info: RoundInfo = INFO) -> tuple[Tensor, tuple[Any, ...]]:
    """The server half of fedaccel.engine.round.run_round: aggregate, then every server_end in order."""
    _, aggregator = algorithm.single("aggregate")  # type: ignore[misc]
    w_next = aggregator.aggregate(info, w, updates)  # type: ignore[misc]
    states = list(server)
    for k, part in algorithm.with_stage("server_end"):
        w_next, states[k] = part.server_end(info, w, w_next, updates, states[k])  # type: ignore[misc]
    return w_next, tuple(states)


def step_part(part: Any, state: Any, w: float, w_next: float) -> tuple[float, Any]:
    """One server_end of a server optimiser on a scalar model: (w_{t+1}, state)."""
    new, state = part.server_end(INFO, torch.tensor([w], dtype=torch.float64), torch.tensor([w_next], dtype=torch.float64),
                                 updates_for([[0.0]]), state)
    return float(new), state


# --- hand-computed first two steps ---------------------------------------------------------------


def test_avgm_two_steps_by_hand() -> None:
    part = server_sgd(lr=0.5, momentum=0.9)
    state = part.init_server(torch.zeros(1, dtype=torch.float64))
    w1, state = step_part(part, state, 0.0, 1.0)  # Delta 1: m = 1, w = 0 + 0.5 * 1
    assert w1 == pytest.approx(0.5, abs=1e-12)
    w2, state = step_part(part, state, w1, w1 - 2.0)  # Delta -2: m = 0.9 - 2 = -1.1, w = 0.5 - 0.55
    assert w2 == pytest.approx(-0.05, abs=1e-12)
    assert state.steps == 2 and float(state.m) == pytest.approx(-1.1, abs=1e-12)


@pytest.mark.parametrize("name", ["adagrad", "adam", "yogi"])
def test_adaptive_two_steps_by_hand(name: str) -> None:
    """Algorithm 2 written out in scalars: m_{-1} = 0, v_{-1} = tau^2, Deltas 0.5 then -0.2."""
    b1, b2, tau, eta = 0.9, 0.99, 0.1, 1.0
    part = {"adagrad": server_adagrad(lr=eta, beta1=b1, tau=tau),
            "adam": server_adam(lr=eta, beta1=b1, beta2=b2, tau=tau),
            "yogi": server_yogi(lr=eta, beta1=b1, beta2=b2, tau=tau)}[name]
    state = part.init_server(torch.zeros(1, dtype=torch.float64))
    w, m, v = 0.0, 0.0, tau * tau
    for delta in (0.5, -0.2):
        m = b1 * m + (1 - b1) * delta
        if name == "adagrad":
            v = v + delta**2
        elif name == "adam":
            v = b2 * v + (1 - b2) * delta**2
        else:
            v = v - (1 - b2) * delta**2 * math.copysign(1.0, v - delta**2)
        expected = w + eta * m / (math.sqrt(v) + tau)
        w, state = step_part(part, state, w, w + delta)
        assert w == pytest.approx(expected, abs=1e-12)
    assert float(state.m) == pytest.approx(m, abs=1e-12) and float(state.v) == pytest.approx(v, abs=1e-12)


def test_flower_variant_starts_v_at_zero_and_corrects_adams_step() -> None:
    b1, b2, tau = 0.9, 0.99, 0.1
    w, _ = step_part(server_adam(lr=1.0, beta1=b1, beta2=b2, tau=tau, variant="flower"),
                     server_adam(variant="flower").init_server(torch.zeros(1, dtype=torch.float64)), 0.0, 0.5)
    m, v = (1 - b1) * 0.5, (1 - b2) * 0.25
    assert w == pytest.approx(math.sqrt(1 - b2**2) / (1 - b1**2) * m / (math.sqrt(v) + tau), abs=1e-12)


# --- reductions -----------------------------------------------------------------------------------


def run(algorithm: Algorithm, rounds: int = 3, momentum: float = 0.0) -> Tensor:
    fed = non_iid_federation(momentum)
    state = init_state(algorithm, fed.model.theta.clone(), fed.n_clients)
    for _ in range(rounds):
        state, _ = run_round(algorithm, state, fed)
    return state.w


def test_fedavgm_without_momentum_at_unit_step_is_fedavg_exactly() -> None:
    assert torch.equal(run(build_algorithm("fedavgm", momentum=0.0, server_lr=1.0)), run(build_algorithm("fedavg")))


def test_fedavgm_without_momentum_is_fedavg_with_its_server_step() -> None:
    got = run(build_algorithm("fedavgm", momentum=0.0, server_lr=1.7))
    torch.testing.assert_close(got, run(build_algorithm("fedavg", server_lr=1.7)), atol=1e-6, rtol=0)
    assert (got - run(build_algorithm("fedavgm", momentum=0.5, server_lr=1.7))).abs().max() > 1e-3  # beta matters


@pytest.mark.parametrize("name", ["bherd", "scaffold", "feddyn", "fedgsnr"])
def test_identity_server_sgd_leaves_every_method_as_it_is(name: str) -> None:
    params = {"samples": 4, "e_const": 3} if name == "fedgsnr" else {}
    plain = run(build_algorithm(name, **params), momentum=0.5)
    assert torch.equal(run(build_algorithm(name, **params, server_opt="sgd"), momentum=0.5), plain)
    assert not torch.equal(run(build_algorithm(name, **params, server_opt={"name": "sgd", "lr": 0.5}),
                               momentum=0.5), plain)


def test_fednova_gmf_is_server_momentum_on_fednovas_step() -> None:
    """With a constant learning rate FedNova's reference momentum (buf = gmf buf + D/eta, w - eta buf) is
    FedAvgM's m = beta m + Delta, w + m on FedNova's step (docs/algorithms/server.md "Server optimisers")."""
    got = run(build_algorithm("fednova", server_opt={"name": "avgm", "momentum": 0.6}))
    torch.testing.assert_close(got, run(build_algorithm("fednova", gmf=0.6)), atol=1e-6, rtol=0)


def test_composition_equals_the_parts_composed_by_hand() -> None:
    by_config = build_algorithm("bherd", alpha=0.5, server_opt={"name": "adam", "lr": 0.05, "tau": 0.01})
    by_hand = compose("bherd-fedavg", bherd_selection(alpha=0.5), mean_aggregate(),
                      server_adam(lr=0.05, tau=0.01))
    assert [p.name for p in by_config.parts] == ["bherd", "mean", "server_opt"]
    assert torch.equal(run(by_config, momentum=0.5), run(by_hand, momentum=0.5))


# --- defining properties --------------------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(["adagrad", "adam", "yogi"]),
       st.lists(st.floats(0.01, 10.0) | st.floats(-10.0, -0.01), min_size=2, max_size=6),
       st.floats(1e-3, 1e3))
def test_adaptive_steps_do_not_depend_on_the_scale_of_the_pseudo_gradient(name: str, deltas: list[float],
                                                                          scale: float) -> None:
    """Per coordinate, m / sqrt(v) is invariant to a common scale of Delta (tau -> 0): the adaptivity."""
    factory = {"adagrad": server_adagrad, "adam": server_adam, "yogi": server_yogi}[name]
    moves = []
    for c in (1.0, scale):
        part = factory(lr=1.0, tau=1e-12)
        state = part.init_server(torch.zeros(1, dtype=torch.float64))
        w, steps = 0.0, []
        for d in deltas:
            before = w
            w, state = step_part(part, state, w, w + c * d)
            steps.append(w - before)
        moves.append(steps)
    assert moves[1] == pytest.approx(moves[0], rel=1e-6)


def test_avgm_on_a_constant_pseudo_gradient_accelerates_to_one_over_one_minus_beta() -> None:
    part, beta = server_avgm(lr=1.0), 0.9
    state = part.init_server(torch.zeros(1, dtype=torch.float64))
    w = 0.0
    for k in range(1, 60):
        before = w
        w, state = step_part(part, state, w, w + 1.0)
        assert w - before == pytest.approx((1 - beta**k) / (1 - beta), abs=1e-9)
    assert w - before == pytest.approx(1 / (1 - beta), rel=0.01)


def test_a_round_without_updates_takes_no_step() -> None:
    part = server_adam(lr=1.0)
    state = part.init_server(torch.zeros(3))
    w = torch.ones(3)
    new, after = part.server_end(INFO, w, w.clone(), [], state)
    assert torch.equal(new, w) and after is state


# --- state: checkpointed as plain tensors, resumed to the same numbers --------------------------------


def test_state_is_plain_tensors_loadable_with_weights_only(tmp_path: Path) -> None:
    part = server_yogi(lr=0.3)
    state = part.init_server(torch.zeros(4))
    _, state = part.server_end(INFO, torch.zeros(4), torch.arange(4.0), updates_for([[0.0]]), state)
    torch.save(to_plain(state), tmp_path / "s.pt")
    back = from_plain(torch.load(tmp_path / "s.pt", weights_only=True))
    assert isinstance(back, ServerMoments) and back.steps == 1
    assert torch.equal(back.m, state.m) and torch.equal(back.v, state.v)


@pytest.mark.parametrize("algorithm", [{"name": "fedadam", "server_lr": 0.05},
                                       {"name": "bherd", "server_opt": {"name": "yogi", "lr": 0.05}}])
def test_resume_continues_with_the_optimisers_moments(algorithm: dict[str, Any], tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Interrupted in round 7, resumed from the checkpoint of round 5: the uninterrupted numbers, moments too."""
    from test_api import cut_in_round_7, fit, without_wall

    options = {"rounds": 7, "algorithm": algorithm, "client_fraction": 0.5}  # checkpoints at 5 and 7
    whole = fit(tmp_path / "whole", **options)
    cut_in_round_7(tmp_path / "cut", monkeypatch, **options)
    resumed = fit(tmp_path / "cut", resume=True, **options)
    assert without_wall(resumed.metrics) == without_wall(whole.metrics)
    assert torch.equal(resumed.w, whole.w)
    mine, theirs = resumed.state.server[-1], whole.state.server[-1]
    assert mine.steps == theirs.steps == 7 and torch.equal(mine.m, theirs.m) and torch.equal(mine.v, theirs.v)


# --- configuration --------------------------------------------------------------------------------


def test_set_a_server_optimiser_and_its_options_from_the_command_line() -> None:
    config = load_config(None, ["algorithm.name=bherd", "algorithm.server_opt=adam", "algorithm.server_opt.lr=0.1"])
    assert config.algorithm["server_opt"] == {"name": "adam", "lr": 0.1}
    assert [p.name for p in build_algorithm("bherd", server_opt=config.algorithm["server_opt"]).parts][-1] == "server_opt"


@pytest.mark.parametrize(("spec", "words"), [
    ("adamw", "unknown algorithm.server_opt 'adamw'"),
    ({"name": "adam", "beta3": 1}, "has no option 'beta3'"),
    ({"name": "adam", "lr": -1.0}, "lr must be > 0"),
    ({"name": "yogi", "beta2": 1.0}, "beta2 must be in [0, 1)"),
    ({"name": "adam", "variant": "tf"}, "variant must be one of paper, flower"),
    ({"name": "adam", "lr": "fast"}, "lr must be a number"),
    ({"lr": 0.1}, "must be a name or {name: ..., ...}"),
])
def test_bad_server_optimisers_fail_in_one_line(spec: Any, words: str) -> None:
    with pytest.raises(ConfigError, match=None) as caught:
        build_algorithm("fedavg", server_opt=spec)
    assert words in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize(("recipe", "options", "words"), [
    ("fedavgm", {"momentum": 1.0}, "algorithm.momentum must be in [0, 1), got 1.0"),
    ("fedadagrad", {"server_lr": 0.0}, "algorithm.server_lr must be > 0, got 0.0"),
    ("fedadam", {"beta2": 1.5}, "algorithm.beta2 must be in [0, 1), got 1.5"),
    ("fedyogi", {"beta1": -0.1}, "algorithm.beta1 must be in [0, 1), got -0.1"),
])
def test_a_server_optimiser_recipes_own_keys_are_named_as_a_config_spells_them(
        recipe: str, options: dict[str, float], words: str) -> None:
    """`algorithm=fedavgm, algorithm.momentum=1` said "server_opt sgd: momentum ...", a key the user never set."""
    with pytest.raises(ConfigError) as caught:
        build_algorithm(recipe, **options)
    assert str(caught.value) == words


def test_a_recipe_with_its_own_server_optimiser_refuses_another() -> None:
    with pytest.raises(ConfigError, match="has a server optimiser already"):
        build_algorithm("fedadam", server_opt="yogi")


@settings(max_examples=30, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.floats(allow_nan=True) | st.integers() | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
                    max_leaves=6))
def test_hostile_specs_are_config_errors(spec: Any) -> None:
    for key in ("server_opt", "aggregate"):
        try:
            build_algorithm("fedavg", **{key: spec})
        except ConfigError as exc:
            assert "\n" not in str(exc)


# --- Flower 1.42's strategies, run in process on the same updates ------------------------------------

SHAPES = {"a": (5,), "b": (2, 3)}  # Flower's arrays: a model of 11 parameters in two layers
DIM = 11


def as_arrays(flat: np.ndarray) -> Any:
    from flwr.app import Array, ArrayRecord

    out, at = {}, 0
    for key, shape in SHAPES.items():
        size = int(np.prod(shape))
        out[key] = Array(np.ascontiguousarray(flat[at:at + size].reshape(shape)))
        at += size
    return ArrayRecord(out)


def as_flat(record: Any) -> np.ndarray:
    return np.concatenate([record[k].numpy().ravel() for k in SHAPES])


class NodeGrid:
    """What a strategy's configure_train asks of a Grid: the connected nodes."""

    def __init__(self, n: int) -> None:
        self.nodes = list(range(1, n + 1))

    def get_node_ids(self) -> list[int]:
        return self.nodes


def flower_in_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a ServerApp process has (its task identity), and no gc.collect() per record (Flower's Bulyan runs
    one per client a round, seconds in a test process full of objects; it changes no number)."""
    import gc

    from flwr.supercore.task_identity import TaskIdentity

    for name in ("_run_id", "_task_id", "_node_id"):
        monkeypatch.setattr(TaskIdentity, name, 1)
    monkeypatch.setattr(gc, "collect", lambda *args: 0)


def random_rounds(rounds: int, n: int, seed: int, equal_counts: bool = False) -> list[tuple[np.ndarray, list[int]]]:
    """Per round, n client offsets theta_i - w (coordinates of unequal scales) and their sample counts."""
    rng = np.random.default_rng(seed)
    scales = rng.uniform(0.01, 1.0, DIM)
    return [(rng.normal(0.2, 1.0, (n, DIM)) * scales,
             [7] * n if equal_counts else rng.integers(1, 50, n).tolist()) for _ in range(rounds)]


def compare_with_flower(strategy: Any, algorithm: Algorithm, rounds: list[tuple[np.ndarray, list[int]]],
                        seed: int = 0) -> None:
    """Both sides start at the same model and receive each round's client models theta_i = w + offset_i with
    their sample counts; the new global models must agree to 1e-6 after every round."""
    from flwr.app import ConfigRecord, Message, MetricRecord, RecordDict

    w = np.random.default_rng(seed + 100).normal(0, 1, DIM)
    ours = torch.tensor(w)
    server = algorithm.init_server(ours)
    n = rounds[0][0].shape[0]
    for t, (offsets, counts) in enumerate(rounds, start=1):
        list(strategy.configure_train(t, as_arrays(w), ConfigRecord(), NodeGrid(n)))
        models = w + offsets
        replies = [Message(RecordDict({"arrays": as_arrays(theta), "metrics": MetricRecord({"num-examples": c})}),
                           dst_node_id=i + 1, message_type="train")
                   for i, (theta, c) in enumerate(zip(models, counts, strict=True))]
        arrays, _ = strategy.aggregate_train(t, replies)
        w = w if arrays is None else as_flat(arrays)  # None: Flower keeps the model (Flower's start loop)
        info = RoundInfo(round=t - 1, lr=0.1, prev_lr=0.1, weights=np.full(n, 1.0 / n), seed=0)
        updates = updates_for([ours - torch.tensor(theta) for theta in models], counts)
        ours, server = server_round(algorithm, server, ours, updates, info)
        np.testing.assert_allclose(ours.numpy(), w, atol=1e-6, rtol=0, err_msg=f"round {t}")


OPTIMISERS = [
    ("FedAvgM", {"server_learning_rate": 0.7, "server_momentum": 0.9}, "fedavgm", {"server_lr": 0.7, "momentum": 0.9}),
    ("FedAdagrad", {"eta": 0.1, "tau": 1e-2}, "fedadagrad",
     {"server_lr": 0.1, "beta1": 0.0, "tau": 1e-2, "variant": "flower"}),
    ("FedAdam", {"eta": 0.1, "beta_1": 0.8, "beta_2": 0.95, "tau": 1e-3}, "fedadam",
     {"server_lr": 0.1, "beta1": 0.8, "beta2": 0.95, "tau": 1e-3, "variant": "flower"}),
    ("FedYogi", {"eta": 0.05, "beta_1": 0.9, "beta_2": 0.99, "tau": 1e-3}, "fedyogi",
     {"server_lr": 0.05, "beta1": 0.9, "beta2": 0.99, "tau": 1e-3, "variant": "flower"}),
]


@pytest.mark.parametrize(("strategy", "flower_args", "recipe", "params"), OPTIMISERS, ids=[o[0] for o in OPTIMISERS])
def test_server_optimisers_agree_with_flowers_strategies(strategy: str, flower_args: dict[str, Any], recipe: str,
                                                         params: dict[str, Any],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    strategies = pytest.importorskip("flwr.serverapp.strategy")
    flower_in_process(monkeypatch)
    for seed in (0, 1):
        compare_with_flower(getattr(strategies, strategy)(**flower_args), build_algorithm(recipe, **params),
                            random_rounds(5, 6, seed), seed)


def test_the_paper_variant_differs_from_flowers_where_documented(monkeypatch: pytest.MonkeyPatch) -> None:
    """v_{-1} = tau^2 and no bias correction: FedAdam's first step is not Flower's."""
    strategies = pytest.importorskip("flwr.serverapp.strategy")
    flower_in_process(monkeypatch)
    with pytest.raises(AssertionError):
        compare_with_flower(strategies.FedAdam(eta=0.1, tau=1e-3), build_algorithm("fedadam", server_lr=0.1),
                            random_rounds(1, 4, 0))



def test_the_moments_travel_in_flowers_records_and_come_back_as_they_were() -> None:
    """On Flower the server states go out with the model (fedaccel.flower.client.shared_content)."""
    pytest.importorskip("flwr")
    from fedaccel.flower.client import SHARED, shared_content
    from fedaccel.flower.wire import unpack

    part = server_adam(lr=0.1)
    state = part.init_server(torch.zeros(5))
    _, state = part.server_end(INFO, torch.zeros(5), torch.arange(5.0), updates_for([[0.0]]), state)
    back = unpack(shared_content(torch.ones(5), (None, state)), prefix=SHARED)["server"][1]
    assert isinstance(back, ServerMoments) and back.steps == 1
    assert torch.equal(back.m, state.m) and torch.equal(back.v, state.v)


def test_the_server_optimiser_state_stays_on_the_server() -> None:
    """On Flower the server states went down to every client each round, a server optimiser's two (d,)
    moments included, though no client stage reads them: the clients' view leaves them out."""
    pytest.importorskip("flwr")  # shared_content builds Flower records (the GPU machine has no flwr)
    from fedaccel.flower.client import shared_content

    algorithm = build_algorithm("scaffold", server_opt={"name": "adam", "lr": 0.01})
    w = torch.zeros(50)
    server = algorithm.init_server(w)
    names = [part.name for part in algorithm.parts]
    view = algorithm.client_view(server)
    assert view[names.index("server_opt")] is None and server[names.index("server_opt")] is not None
    assert view[names.index("scaffold")] is server[names.index("scaffold")]  # its control c is read by clients
    def tensor_bytes(records: Any) -> int:  # small tensors travel inline in a ConfigRecord, large ones as Arrays
        inline = sum(len(v) for r in records.config_records.values() for v in r.values() if isinstance(v, bytes))
        return inline + sum(a.numpy().nbytes for r in records.array_records.values() for a in r.values())

    assert tensor_bytes(shared_content(w, server)) - tensor_bytes(shared_content(w, view)) == 2 * 50 * 4  # 2 moments
