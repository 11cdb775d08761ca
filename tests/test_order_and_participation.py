"""Controlled studies: batches in the order given (train.order) and a fixed participation schedule
(train.participation) that replaces the selection of every recipe."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch
from tiny_models import Scalar, linear_federation

from fedaccel.algorithms.base import Participation, RoundInfo, compose
from fedaccel.algorithms.registry import build_algorithm
from fedaccel.engine.federation import Federation
from fedaccel.engine.local import LocalOptions
from fedaccel.engine.round import init_state, run_round
from fedaccel.errors import ConfigError
from fedaccel.runs.config import from_dict, load_config

SIZES = (3, 4, 5, 6)


def federation(**options: float) -> Federation:
    return linear_federation(SIZES, **options)


# ---------------------------------------------------------------------------------------------
# train.order
# ---------------------------------------------------------------------------------------------


def test_given_order_cuts_the_index_array_into_consecutive_batches() -> None:
    x, y = torch.randn(10, 1), torch.zeros(10)
    given = np.array([5, 2, 9, 0, 7, 1, 3])
    fed = Federation(Scalar(), x, y, [given], x, y, LocalOptions(batch_size=3, order="given"), seed=3)
    for round_ in (0, 4):  # the same every round
        assert [b.tolist() for b in fed.batches(0, round_, 3)] == [[5, 2, 9], [0, 7, 1], [3, 5, 2]]
    fixed = Federation(Scalar(), x, y, [given], x, y, LocalOptions(batch_size=3), seed=3)
    assert fixed.order(0, 0).tolist() != given.tolist()  # the default is a seeded permutation
    assert sorted(fixed.order(0, 0).tolist()) == sorted(given.tolist())


def test_order_key_and_the_reshuffle_alias() -> None:
    assert load_config(None, ["train.order=given"]).train.order == "given"
    assert load_config(None, []).train.order == "fixed"
    old = from_dict({"train": {"reshuffle": True}})  # configs and run folders from before train.order
    new = load_config(None, ["train.order=reshuffle"])
    assert (old.train.order, old.train.reshuffle) == (new.train.order, new.train.reshuffle) == ("reshuffle", True)
    assert LocalOptions(reshuffle=True).order == "reshuffle" and LocalOptions(order="reshuffle").reshuffle
    for overrides, message in [
        (["train.order=sorted"], "train.order must be one of fixed, reshuffle, reshuffle_epoch, given"),
        (["train.order=given", "train.reshuffle=true"], "contradicts train.order: given"),
    ]:
        with pytest.raises(ConfigError, match=message) as err:
            load_config(None, overrides)
        assert "\n" not in str(err.value)


# ---------------------------------------------------------------------------------------------
# train.participation
# ---------------------------------------------------------------------------------------------

SCHEDULE = [[1, 0], [2], [1, 3]]  # round t (0-based) uses entry t mod 3; entries need not be sorted
SELECTED = [(0, 1), (2,), (1, 3), (0, 1)]


@pytest.mark.parametrize("name", ["fedavg", "scaffold", "bherd", "fednova"])
def test_schedule_selects_who_trains_and_uploads(name: str) -> None:
    fed = federation()
    algorithm = build_algorithm(name)
    state = init_state(algorithm, fed.model.theta.clone(), 4)
    for chosen in SELECTED:
        state, report = run_round(algorithm, state, fed, fraction=0.25, schedule=SCHEDULE)
        assert report.participation == Participation(train=chosen, upload=chosen)


def test_schedule_selects_fedumfs_uploaders_as_a_hand_made_participation_does() -> None:
    """FedUMF: all train, the scheduled upload; the same numbers as its participation replaced by hand."""
    fed = federation(lr_decay=0.5)
    scheduled = build_algorithm("fedumf", fraction=0.5)

    def by_hand(info: RoundInfo) -> Participation:
        return Participation(train=(0, 1, 2, 3), upload=SELECTED[info.round])

    umf = scheduled.parts[0]
    manual = compose("fedumf", replace(umf, participation=by_hand), *scheduled.parts[1:])
    s_sched = init_state(scheduled, fed.model.theta.clone(), 4)
    s_hand = init_state(manual, fed.model.theta.clone(), 4)
    for chosen in SELECTED:
        s_sched, report = run_round(scheduled, s_sched, fed, schedule=SCHEDULE)
        s_hand, _ = run_round(manual, s_hand, fed)
        assert report.participation == Participation(train=(0, 1, 2, 3), upload=chosen)
        assert torch.equal(s_sched.w, s_hand.w)
    assert [c[0].authorised_round for c in s_sched.clients] == [3, 3, 1, 2]


def test_schedule_selects_whom_fedgsnr_plans_for() -> None:
    fed = federation()
    algorithm = build_algorithm("fedgsnr", samples=2, e_const=3)
    state = init_state(algorithm, fed.model.theta.clone(), 4)
    for chosen in SELECTED:
        state, report = run_round(algorithm, state, fed, schedule=SCHEDULE)
        assert sorted(int(k) for k in report.diag["steps"]) == list(chosen)
        assert sum(report.diag["steps"].values()) == 3 * len(chosen)


BASE = ["data.dataset=digits", "data.clients=4"]


@pytest.mark.parametrize(
    "overrides,message",
    [
        (["train.participation=[[0, 4]]"], r"participation\[0\] names client 4; client ids are integers in \[0, 4\)"),
        (["train.participation=[]"], "train.participation must be a non-empty list of client lists"),
        (["train.participation=[[0], []]"], r"train.participation\[1\] must be a non-empty list"),
        (["train.participation=[[1, 1]]"], "names a client twice"),
        (["train.participation=[[0.5]]"], "names client 0.5"),
        (["train.participation=[[0]]", "train.client_fraction=0.5"], "leave train.client_fraction at 1"),
        (["train.participation=[[0]]", "algorithm=fedumf", "algorithm.fraction=0.5"], "drop algorithm.fraction"),
        (["train.participation=[[1]]", "algorithm=centralized"], "names client 1; client ids are integers in"),
    ],
)
def test_participation_is_validated_at_load(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message) as err:
        load_config(None, [*BASE, *overrides])
    assert "\n" not in str(err.value)


def test_a_valid_schedule_loads_as_written() -> None:
    config = load_config(None, [*BASE, "algorithm=fedumf", "train.participation=[[3, 0], [1]]"])
    assert config.train.participation == [[3, 0], [1]]
