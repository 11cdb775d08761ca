"""``eval.models``: the clients' mean models the FedDyn and FedDC reference codes score, beside the
broadcast one, checked against NumPy means of the clients' end models."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from fedaccel.algorithms.registry import build_algorithm
from fedaccel.engine.evaluated import ALL_MEAN, CLIENT_MEAN, init_evaluated, scored_models
from fedaccel.engine.federation import Federation
from fedaccel.engine.local import LocalOptions
from fedaccel.engine.round import FLState, InProcessClients, init_state, run_round
from fedaccel.errors import ConfigError, UserError
from fedaccel.launch import resume, run
from fedaccel.models import build_model
from fedaccel.runs.config import load_config
from fedaccel.runs.folder import CHECKPOINT, PREVIOUS_CHECKPOINT
from fedaccel.runs.loop import with_evaluated

SIZES = [4, 9, 15]  # unequal: a data-weighted mean differs from the uniform one
MODELS = [ALL_MEAN, CLIENT_MEAN]


def tiny_federation() -> Federation:
    g = torch.Generator().manual_seed(5)
    n = sum(SIZES)
    x, y = torch.randn(n, 6, generator=g, dtype=torch.float64), torch.randint(0, 3, (n,), generator=g)
    bounds = np.cumsum([0, *SIZES])
    parts = [np.arange(lo, hi) for lo, hi in zip(bounds[:-1], bounds[1:])]
    module = build_model("softmax", (6,), 3, seed=2).double()
    return Federation(module, x, y, parts, x, y, LocalOptions(lr=0.2, batch_size=4, local_epochs=1.0))


class Recording(InProcessClients):
    """The in-process runtime, keeping each round's end models theta_i = w - delta_i (NumPy)."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.ends: list[dict[int, np.ndarray]] = []

    def train(self, contexts: Any, w: torch.Tensor, server: Any) -> Any:
        updates, diag = super().train(contexts, w, server)
        self.ends.append({u.client: w.numpy() - u.delta.numpy() for u in updates})
        return updates, diag


def rounds_of_feddyn(schedule: list[list[int]]) -> tuple[list[FLState], Recording, np.ndarray]:
    fed = tiny_federation()
    algorithm = build_algorithm("feddyn", alpha=0.3)
    state = init_state(algorithm, fed.model.theta.clone(), fed.n_clients)
    w0 = state.w.numpy().copy()
    state.evaluated = init_evaluated(MODELS, state.w, fed.n_clients)
    runtime = Recording(algorithm, fed, state.clients)
    states = []
    for _ in schedule:
        state, _ = run_round(algorithm, state, fed, schedule=schedule, runtime=runtime)
        states.append(state)
    return states, runtime, w0


def test_client_mean_is_the_uniform_mean_of_the_round_clients_end_models() -> None:
    states, runtime, _ = rounds_of_feddyn([[0, 1, 2]])
    ends = runtime.ends[0]
    hand = np.mean([ends[i] for i in (0, 1, 2)], axis=0)
    got = states[0].evaluated[CLIENT_MEAN].numpy()
    np.testing.assert_allclose(got, hand, rtol=0, atol=1e-12)
    weighted = np.average([ends[i] for i in (0, 1, 2)], axis=0, weights=SIZES)
    assert np.abs(weighted - hand).max() > 1e-4  # the sizes differ enough for the weighting to show
    # FedDyn's broadcast model is that mean plus the mean drift over all N clients: not the same model
    drift = states[0].server[0].numpy()
    np.testing.assert_allclose(states[0].w.numpy(), hand + drift, atol=1e-12)
    assert np.abs(drift).max() > 1e-4


def test_all_mean_keeps_stale_and_never_trained_clients() -> None:
    states, runtime, w0 = rounds_of_feddyn([[0, 1], [1]])  # client 0 stale in round 2, client 2 never trains
    first, second = runtime.ends
    hand_1 = np.mean([first[0], first[1], w0], axis=0)
    hand_2 = np.mean([first[0], second[1], w0], axis=0)
    assert np.abs(second[1] - first[1]).max() > 1e-4
    np.testing.assert_allclose(dict(scored_models([ALL_MEAN], states[0].w, states[0].evaluated))[ALL_MEAN].numpy(),
                               hand_1, atol=1e-12)
    np.testing.assert_allclose(dict(scored_models([ALL_MEAN], states[1].w, states[1].evaluated))[ALL_MEAN].numpy(),
                               hand_2, atol=1e-12)
    np.testing.assert_allclose(states[1].evaluated[CLIENT_MEAN].numpy(), second[1], atol=1e-12)


SMALL = ["data.dataset=digits", "model=softmax", "data.clients=3", "data.split=dirichlet", "data.split.alpha=0.5",
         "algorithm=feddyn", "train.lr=0.1", "train.batch_size=20", "train.client_fraction=0.67",
         "train.rounds=4", "run.checkpoint_every=2", "run.progress=false", "run.threads=1"]
ALL = "eval.models=[broadcast, client_mean, all_mean]"
BROADCAST_COLUMNS = ["round", "test_acc", "test_loss", "train_acc", "train_loss", "wall_s", "bytes_up", "bytes_down",
                     "local_steps", "clients", "uploaded", "round_bytes_up", "round_bytes_down", "round_local_steps"]


def rows(path: Path) -> list[dict[str, Any]]:
    out = [json.loads(line) for line in (path / "metrics.jsonl").read_text().splitlines()]
    for row in out:
        row.pop("wall_s")
    return out


def test_broadcast_only_writes_the_columns_it_always_wrote_and_extras_leave_them_alone(tmp_path: Path) -> None:
    plain = run(load_config(None, SMALL), tmp_path / "plain")
    lines = [json.loads(line) for line in (plain / "metrics.jsonl").read_text().splitlines()]
    assert list(lines[0]) == ["round", "test_acc", "test_loss", "train_acc", "train_loss", "wall_s", "bytes_up",
                              "bytes_down", "local_steps"]
    assert all(list(row) == BROADCAST_COLUMNS for row in lines[1:])
    extra = rows(run(load_config(None, [*SMALL, ALL]), tmp_path / "extra"))
    for a, b in zip(rows(plain), extra, strict=True):
        assert {k: v for k, v in b.items() if "/" not in k} == a
        assert sorted(k for k in b if "/" in k) == sorted(f"{m}/{k}" for m in MODELS
                                                          for k in ("test_acc", "test_loss", "train_acc", "train_loss"))
    assert extra[0]["client_mean/test_loss"] == extra[0]["test_loss"]  # round 0: every model is w0
    assert extra[0]["all_mean/test_loss"] == pytest.approx(extra[0]["test_loss"], rel=1e-6)  # the mean of N copies
    assert extra[-1]["client_mean/test_loss"] != extra[-1]["test_loss"]  # FedDyn's correction moves the broadcast


def test_resume_gives_the_all_mean_of_an_uninterrupted_run(tmp_path: Path) -> None:
    whole = run(load_config(None, [*SMALL, ALL]), tmp_path / "whole")
    cut = run(load_config(None, [*SMALL, ALL]), tmp_path / "cut")
    shutil.move(cut / PREVIOUS_CHECKPOINT, cut / CHECKPOINT)  # as if killed after round 2's checkpoint
    (cut / "summary.json").unlink()
    resume(cut, progress=False)
    assert cut.joinpath("summary.json").is_file()  # it ran rounds 3 and 4 again
    assert rows(cut) == rows(whole)
    assert any(r["all_mean/test_loss"] != r["client_mean/test_loss"] for r in rows(whole)[1:])


def test_a_checkpoint_without_the_requested_tables_is_refused() -> None:
    state = FLState(round=3, w=torch.zeros(4), server=(), clients=[])
    with pytest.raises(UserError, match="eval.models"):
        with_evaluated(state, ["broadcast", "all_mean"], 2)
    assert with_evaluated(state, ["broadcast"], 2) is state


def test_stacked_runtime_gives_the_in_process_means(tmp_path: Path) -> None:
    local = rows(run(load_config(None, [*SMALL, ALL]), tmp_path / "local"))
    stacked = rows(run(load_config(None, [*SMALL, ALL, "run.runtime=stacked", "run.stack_size=2"]), tmp_path / "st"))
    for a, b in zip(local, stacked, strict=True):
        for key in a:
            assert b[key] == pytest.approx(a[key], rel=1e-5, abs=1e-7), (a["round"], key)


@pytest.mark.parametrize("value,message", [
    ("[broadcast, mean]", "unknown eval.models entry 'mean'"),
    ("[broadcast, all_mean, all_mean]", "names a model twice"),
    ("[client_mean]", "must include broadcast"),
    ("client_mean", "eval.models must be of type list"),
])
def test_bad_eval_models_fail_in_one_line(value: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("(", r"\(")) as info:
        load_config(None, [*SMALL, f"eval.models={value}"])
    assert "\n" not in str(info.value)


def test_reports_pick_a_prefixed_column(tmp_path: Path) -> None:
    from fedaccel.report.reading import load_run, metric_label, series
    from fedaccel.report.tables import compare_table

    path = run(load_config(None, [*SMALL, ALL]), tmp_path / "run")
    x, mean, _ = series([load_run(path)], "client_mean/test_acc")
    assert list(x) == [0, 1, 2, 3, 4]
    assert list(mean) == [r["client_mean/test_acc"] for r in rows(path)]
    assert metric_label("all_mean/test_loss") == "test loss (all mean)"
    assert "test accuracy (client mean)" in compare_table([path], [0.1], metric="client_mean/test_acc")


# On Flower: tests/test_flower.py's fedumf-feddc case scores all three models and compares them with in process.
