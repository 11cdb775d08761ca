"""Robust aggregation (median, trimmed mean, Krum, Multi-Krum, Bulyan): hand cases, reductions, the defining
property of each rule, the recipes that refuse a rule, and Flower 1.42's strategies on the same updates."""

from __future__ import annotations

from itertools import combinations
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from fedaccel.algorithms.mean import mean_aggregate
from fedaccel.algorithms.registry import build_algorithm
from fedaccel.algorithms.robust import bulyan, bulyan_selection, krum, median, multikrum, trimmed_mean
from fedaccel.errors import ConfigError
from fedaccel.runs.config import load_config
from test_server_opt import (
    INFO, compare_with_flower, flower_in_process, random_rounds, run, updates_for,
)


def aggregate(part: Any, deltas: Any, counts: list[float] | None = None) -> np.ndarray:
    """w_{t+1} - w_t... as the rule's output: the aggregate of ``deltas`` taken from w = 0, sign flipped."""
    rows = torch.as_tensor(np.asarray(deltas, dtype=np.float64))
    out = part.aggregate(INFO, torch.zeros(rows.shape[1], dtype=torch.float64), updates_for(list(rows), counts))
    return (-out).numpy()


# --- hand cases ------------------------------------------------------------------------------------


def test_median_by_hand() -> None:
    assert aggregate(median(), [[1, 9], [5, -1], [2, 3]]).tolist() == [2, 3]
    assert aggregate(median(), [[1, 9], [5, -1], [2, 3], [4, 0]]).tolist() == [3, 1.5]  # even: mean of the middle two


def test_trimmed_mean_by_hand() -> None:
    # n = 5, beta = 0.2: drop one value at each end of every coordinate
    got = aggregate(trimmed_mean(beta=0.2), [[0, 10], [1, 20], [2, 30], [3, 40], [100, -50]])
    assert got.tolist() == pytest.approx([2.0, 20.0])
    # beta = 0.3 still drops floor(1.5) = 1 at each end
    assert aggregate(trimmed_mean(beta=0.3), [[0], [1], [2], [3], [100]]).tolist() == pytest.approx([2.0])


POINTS = [[0, 0], [1, 0], [0, 2], [10, 10]]  # squared distances: 01:1, 02:4, 12:5, 03:200, 13:181, 23:164


def test_krum_by_hand() -> None:
    # n = 4, f = 1: k = n - f - 2 = 1 nearest; scores 1, 1, 4, 164: the tie goes to the one nearer the rest,
    # client 1 (squared distances to all others 1 + 5 + 181 = 187, client 0's 1 + 4 + 200 = 205)
    assert aggregate(krum(f=1), POINTS).tolist() == [1, 0]
    # f = 0, k = 2, points 0 and 1 swapped: scores 1+5, 1+4, 4+5, 164+181: client 1
    assert aggregate(krum(f=0), [[1, 0], [0, 0], [0, 2], [10, 10]]).tolist() == [0, 0]


def test_multikrum_by_hand() -> None:
    # f = 1, m = 2: the two lowest scores (1, 1) are clients 0 and 1: their uniform mean
    assert aggregate(multikrum(f=1, m=2), POINTS).tolist() == [0.5, 0]
    # m unset: n - f = 3 lowest (1, 1, 4): clients 0, 1, 2
    assert aggregate(multikrum(f=1), POINTS).tolist() == pytest.approx([1 / 3, 2 / 3])
    # Flower's variant weights the chosen updates by their sample counts (1 and 3)
    assert aggregate(multikrum(f=1, m=2, variant="flower"), POINTS, [1, 3, 1, 1]).tolist() == [0.75, 0]


def test_bulyan_by_hand() -> None:
    """n = 7, f = 1: theta = 5 chosen by Krum again and again, beta = 3 values nearest the median, per coordinate."""
    # Krum over the n' left with k = n' - 3 neighbours picks 2 (score 1+1+4+4), then 1 (1+4+9, tied with 3:
    # the lower), 3 (1+9), 0 (16, tied with 4), 4 (k = 0): the five honest ones, median 2, nearest 1, 2, 3.
    assert aggregate(bulyan(f=1), [[0.0], [1.0], [2.0], [3.0], [4.0], [50.0], [-60.0]]).tolist() == [2.0]
    # 3 (1+4+9+36), 2 (1+4+49), 1 (1+64), 0 (81, tied with 9), 9: median 2, nearest 1, 2, 3 (9 is left out)
    assert aggregate(bulyan(f=1), [[0.0], [1.0], [2.0], [3.0], [9.0], [50.0], [-60.0]]).tolist() == [2.0]


def test_bulyan_with_too_few_uploads_leaves_the_model(capsys: pytest.CaptureFixture[str]) -> None:
    assert aggregate(bulyan(f=1), [[1.0], [2.0], [3.0], [4.0], [5.0], [6.0]]).tolist() == [0.0]
    assert "bulyan(f=1) needs at least 7 uploads" in capsys.readouterr().err


# --- reductions ----------------------------------------------------------------------------------------


finite = st.floats(-1e3, 1e3, allow_nan=False)


def updates_matrix(min_n: int = 1, max_n: int = 7) -> Any:
    return st.integers(min_n, max_n).flatmap(
        lambda n: arrays(np.float64, (n, 3), elements=finite))


@settings(max_examples=40, deadline=None)
@given(updates_matrix())
def test_trimmed_mean_with_beta_zero_is_the_unweighted_mean(deltas: np.ndarray) -> None:
    uniform = aggregate(mean_aggregate(weighting="uniform"), deltas)
    np.testing.assert_allclose(aggregate(trimmed_mean(beta=0.0), deltas), uniform, atol=1e-9, rtol=1e-12)


@settings(max_examples=40, deadline=None)
@given(updates_matrix())
def test_f_zero_multikrum_of_all_and_bulyan_are_the_unweighted_mean(deltas: np.ndarray) -> None:
    uniform = aggregate(mean_aggregate(weighting="uniform"), deltas)
    np.testing.assert_allclose(aggregate(multikrum(f=0, m=len(deltas)), deltas), uniform, atol=1e-9, rtol=1e-12)
    assume(len(deltas) >= 3)
    # f = 0: theta = n (all), beta = n (every value): the mean
    np.testing.assert_allclose(aggregate(bulyan(f=0), deltas), uniform, atol=1e-9, rtol=1e-12)


@pytest.mark.parametrize("part", [krum(f=0), krum(f=2), multikrum(f=0), median(), trimmed_mean(beta=0.4)],
                         ids=["krum0", "krum2", "multikrum", "median", "trimmed"])
def test_one_client_is_that_client(part: Any) -> None:
    assert aggregate(part, [[1.5, -2.0, 7.0]]).tolist() == [1.5, -2.0, 7.0]


def test_fedavg_with_a_robust_rule_keeps_its_server_step() -> None:
    deltas = [[1.0], [2.0], [9.0]]
    assert aggregate(build_algorithm("fedavg", server_lr=2.0, aggregate="median").parts[0], deltas).tolist() == [4.0]


# --- defining properties ---------------------------------------------------------------------------------


honest_rows = st.integers(3, 7).flatmap(lambda n: arrays(np.float64, (n, 3), elements=st.floats(-10, 10)))
huge = st.floats(1e6, 1e300) | st.floats(-1e300, -1e6)


@settings(max_examples=40, deadline=None)
@given(honest_rows, huge)
def test_median_and_trimmed_mean_ignore_one_arbitrarily_large_update(honest: np.ndarray, big: float) -> None:
    """With one update replaced by a huge one, every coordinate stays within the honest values' range."""
    attacked = honest.copy()
    attacked[0] = big
    n = len(honest)
    rest = honest[1:]
    for part in (median(), trimmed_mean(beta=1 / n + 1e-9)):
        got = aggregate(part, attacked)
        assert np.all(got >= rest.min(axis=0) - 1e-9) and np.all(got <= rest.max(axis=0) + 1e-9), part.name


def krum_scores_by_brute_force(points: np.ndarray, f: int) -> list[float]:
    n = len(points)
    k = max(0, n - f - 2)
    scores = []
    for i in range(n):
        others = sorted(float(((points[i] - points[j]) ** 2).sum()) for j in range(n) if j != i)
        scores.append(sum(others[:k]))
    return scores


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 8).flatmap(lambda n: arrays(np.float64, (n, 2), elements=st.integers(-20, 20).map(float))),
       st.integers(0, 3))
def test_krum_picks_the_update_with_the_smallest_score(points: np.ndarray, f: int) -> None:
    scores = krum_scores_by_brute_force(points, f)
    total = ((points[:, None, :] - points[None, :, :]) ** 2).sum(axis=(1, 2))
    ranked = sorted(range(len(points)), key=lambda i: (scores[i], total[i], tuple(points[i] + 0.0)))  # ties: nearer the rest, then the values
    assert aggregate(krum(f=f), points).tolist() == points[ranked[0]].tolist()
    m = min(len(points), 2)
    best = ranked[:m]
    np.testing.assert_allclose(aggregate(multikrum(f=f, m=m), points), points[best].mean(axis=0), atol=1e-9)


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 2).flatmap(lambda f: st.tuples(
    st.just(f), arrays(np.float64, (4 * f + 3, 3), elements=st.floats(-1, 1)),
    st.lists(arrays(np.float64, 3, elements=huge), min_size=f, max_size=f))))
def test_krum_and_bulyan_stay_with_the_honest_updates_under_f_attackers(case: tuple[int, np.ndarray, list]) -> None:
    f, honest, attackers = case
    points = honest.copy()
    points[:f] = attackers
    good = points[f:]
    assert aggregate(krum(f=f), points).tolist() in good.tolist()
    got = aggregate(bulyan(f=f), points)
    assert np.all(got >= good.min(axis=0) - 1e-9) and np.all(got <= good.max(axis=0) + 1e-9)


def test_krum_outside_its_assumption_counts_neighbours_as_asked() -> None:
    """n - f - 2 = 0 (refused at load; a round of partial participation can still have it): the paper's scores
    are all 0, Flower's count one neighbour (5 and 5.5 tie at 0.25); the ties go to the update nearer the rest,
    5.5 (squared distances to all others 240.75 against 5's 250.25), in either variant and any upload order."""
    points = [[0.0], [5.0], [5.5], [20.0]]
    assert aggregate(krum(f=2), points).tolist() == [5.5]
    assert aggregate(krum(f=2, variant="flower"), points).tolist() == [5.5]
    assert aggregate(krum(f=2), points[::-1]).tolist() == [5.5]


def test_krum_is_blind_to_sample_counts_but_flowers_multikrum_is_not() -> None:
    points = [[0.0], [1.0], [2.0], [3.0]]
    assert aggregate(multikrum(f=0, m=4), points, [1, 1, 1, 100]).tolist() == [1.5]
    assert aggregate(multikrum(f=0, m=4, variant="flower"), points, [1, 1, 1, 97]).tolist() == pytest.approx([2.94])


# --- recipes: which take a rule, which refuse it --------------------------------------------------------


@pytest.mark.parametrize("name", ["fedavg", "bherd", "fedgsnr", "fedumf", "fedprox", "grab-fedavg", "fedadam"])
def test_a_robust_rule_replaces_the_mean_of_these_recipes(name: str) -> None:
    params: dict[str, Any] = {"samples": 4, "e_const": 3} if name == "fedgsnr" else {}
    algorithm = build_algorithm(name, **params, aggregate={"name": "trimmed_mean", "beta": 0.34})
    assert "mean" not in [p.name for p in algorithm.parts] and "trimmed_mean" in [p.name for p in algorithm.parts]


def test_fedgsnr_with_trimmed_mean_trains() -> None:
    robust = run(build_algorithm("fedgsnr", samples=4, e_const=3, aggregate={"name": "trimmed_mean", "beta": 0.34}))
    plain = run(build_algorithm("fedgsnr", samples=4, e_const=3))
    assert torch.isfinite(robust).all() and not torch.equal(robust, plain)


@pytest.mark.parametrize(("name", "words"), [
    ("scaffold", "SCAFFOLD's control update"), ("bherd-scaffold", "SCAFFOLD's control update"),
    ("fedgsnr-scaffold", "SCAFFOLD's control update"), ("fedumf-scaffold", "SCAFFOLD's control update"),
    ("feddyn", "FedDyn's server state"), ("feddc", "FedDC's server step"), ("fedumf-feddc", "FedDC's server step"),
    ("fednova", "FedNova's aggregate is its method"), ("bherd-fednova", "FedNova's aggregate is its method"),
])
def test_methods_whose_maths_needs_the_mean_refuse_a_rule_in_one_line(name: str, words: str) -> None:
    with pytest.raises(ConfigError) as caught:
        build_algorithm(name, aggregate="median")
    assert words in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize(("spec", "words"), [
    ("mode", "unknown algorithm.aggregate 'mode'"),
    ({"name": "trimmed_mean", "beta": 0.5}, "beta must be in [0, 0.5)"),
    ({"name": "krum", "f": -1}, "f must be an integer >= 0"),
    ({"name": "krum", "f": 1.5}, "f must be an integer >= 0"),
    ({"name": "multikrum", "m": 0}, "m must be an integer >= 1"),
    ({"name": "bulyan", "variant": "tf"}, "variant must be one of paper, flower"),
    ({"name": "median", "server_lr": 2.0}, "has no option 'server_lr'"),
])
def test_bad_rules_fail_in_one_line(spec: Any, words: str) -> None:
    with pytest.raises(ConfigError) as caught:
        build_algorithm("fedavg", aggregate=spec)
    assert words in str(caught.value) and "\n" not in str(caught.value)


def test_a_rule_from_the_command_line() -> None:
    config = load_config(None, ["data.clients=7", "algorithm.aggregate=multikrum", "algorithm.aggregate.f=2",
                                "algorithm.aggregate.m=4"])
    assert config.algorithm["aggregate"] == {"name": "multikrum", "f": 2, "m": 4}
    with pytest.raises(ConfigError, match="cannot replace the mean of scaffold"):
        load_config(None, ["algorithm.name=scaffold", "algorithm.aggregate=median"])


STRAGGLERS = ["train.local_epochs=3", "train.local_work={name: stragglers, fraction: 0.4}"]  # FedAvg drops 4 of 10


@pytest.mark.parametrize(("sets", "words"), [
    (["algorithm.aggregate.name=krum", "algorithm.aggregate.f=9"], "krum (f 9) needs n > 2f + 2 updates a round, at least 21; at most 10"),
    (["algorithm.aggregate.name=multikrum", "algorithm.aggregate.f=20"], "multikrum (f 20) needs n > 2f + 2"),
    (["algorithm.aggregate.name=bulyan", "algorithm.aggregate.f=2"], "bulyan (f 2) needs n >= 4f + 3 updates a round, at least 11"),
    (["algorithm.aggregate.name=bulyan", "train.client_fraction=0.5"], "bulyan (f 1) needs n >= 4f + 3 updates a round, at least 7; at most 5"),
    (["algorithm.aggregate.name=krum", "algorithm.aggregate.f=1", "train.participation=[[0,1,2],[3,4]]"],
     "at least 5; at most 3"),
    (["algorithm.name=fedumf", "algorithm.fraction=0.3", "algorithm.aggregate.name=krum", "algorithm.aggregate.f=1"],
     "at least 5; at most 3 clients upload in a round here: lower f, or let more clients upload (data.clients, "
     "algorithm.fraction)"),
    (["algorithm.aggregate.name=bulyan", *STRAGGLERS], "at least 7; at most 6 clients upload in a round here: lower f, "
     "or let more clients upload (data.clients, train.client_fraction, train.local_work's straggler fraction, or "
     "train.partial_work: keep)"),
    (["algorithm.aggregate.name=multikrum", "algorithm.aggregate.m=100"], "multikrum m 100 exceeds the 10 updates"),
    (["algorithm.aggregate.name=multikrum", "algorithm.aggregate.m=7", *STRAGGLERS], "m 7 exceeds the 6 updates"),
])
def test_a_rule_no_round_can_meet_is_refused_at_load_in_one_line(sets: list[str], words: str) -> None:
    """With 10 clients Krum f = 9 and Multi-Krum f = 20 took client 0's update every round and Bulyan f = 2 never
    trained, all with exit 0: each rule's condition is checked against the most clients that upload in a round,
    stragglers whose updates FedAvg drops left out (Bulyan then never trained, a new user found); and Multi-Krum's
    m above every round's updates (silently the plain mean)."""
    with pytest.raises(ConfigError) as caught:
        load_config(None, ["data.clients=10", *sets])
    assert words in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize("sets", [
    ["algorithm.aggregate.name=krum", "algorithm.aggregate.f=3"],  # the field grid's Krum: 10 > 8
    ["algorithm.aggregate.name=bulyan", "algorithm.aggregate.f=1", "train.sampling=bernoulli",
     "train.client_fraction=0.3"],  # some rounds can, so the run is allowed (Bulyan skips the others, warned)
    ["algorithm.aggregate.name=trimmed_mean", "algorithm.aggregate.beta=0.49"],  # beta < 0.5 always trims less than n
    ["algorithm.aggregate.name=bulyan", *STRAGGLERS, "train.partial_work=keep"],  # stragglers' updates kept: 10
    ["algorithm.aggregate.name=multikrum", "algorithm.aggregate.m=10"],
])
def test_a_rule_some_round_can_meet_loads(sets: list[str]) -> None:
    assert load_config(None, ["data.clients=10", *sets]).algorithm["aggregate"]["name"] in sets[0]


def every_rule() -> list[Any]:
    """Every aggregation rule: the mean (both weightings) and each robust rule in each variant."""
    parts = [mean_aggregate(weighting="uniform"), mean_aggregate(weighting="data"), median(),
             trimmed_mean(beta=0.2), trimmed_mean(beta=0.4)]
    for variant in ("paper", "flower"):
        parts += [krum(f=0, variant=variant), krum(f=1, variant=variant), multikrum(f=1, variant=variant),
                  multikrum(f=2, m=3, variant=variant), bulyan(f=1, variant=variant), bulyan(f=2, variant=variant)]
    return parts


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 11).flatmap(lambda n: st.tuples(
    arrays(np.float64, (n, 3), elements=st.integers(-4, 4).map(float)),
    st.lists(st.integers(1, 50).map(float), min_size=n, max_size=n),
    st.permutations(list(range(n))))))
@example((np.array([[0.0, 0.0, 1.0] if i in (3, 4) else [0.0, 0.0, 0.0] for i in range(10)]),  # a full run found it:
          [1.0] * 3 + [1.0, 2.0] + [1.0] * 5, [0, 1, 2, 4, 3, 5, 6, 7, 8, 9]))  # one update twice, two sample counts
def test_every_rule_is_blind_to_the_order_of_the_uploads(case: tuple[np.ndarray, list[float], list[int]]) -> None:
    """The same updates (with their sample counts) in another upload order aggregate to the same vector. Small
    integers make every distance exact, so scores tie often: the ties go by the updates' values, never their
    place. (Bulyan at f = 1 changed in 37 of 42 random permutations, through its last pick with no neighbour.)"""
    deltas, counts, order = case
    for part in every_rule():
        here = aggregate(part, deltas, counts)
        there = aggregate(part, deltas[order], [counts[i] for i in order])
        np.testing.assert_allclose(there, here, rtol=1e-12, atol=1e-12, err_msg=part.name)


def test_bulyans_last_pick_is_the_update_nearest_those_chosen() -> None:
    """n = 7, f = 1: after four Krum picks the three left have no neighbour to count (3 - 1 - 2 = 0); the pick
    is the one whose distances to the four chosen sum least: 4 (not 50 or -60), whatever their order."""
    values = [[0.0], [1.0], [2.0], [3.0], [4.0], [50.0], [-60.0]]
    for order in ([6, 5, 4, 3, 2, 1, 0], [5, 0, 6, 1, 4, 2, 3]):
        assert aggregate(bulyan(f=1), [values[i] for i in order]).tolist() == [2.0]
    chosen = bulyan_selection(torch.cdist(torch.tensor(values), torch.tensor(values)) ** 2, 1, 5, "paper",
                              torch.tensor(values))
    assert sorted(chosen) == [0, 1, 2, 3, 4]


# --- Flower 1.42's strategies, run in process on the same updates ---------------------------------------


RULES = [
    ("FedMedian", {}, {"name": "median"}, 6),
    ("FedMedian", {}, {"name": "median"}, 7),
    ("FedTrimmedAvg", {"beta": 0.2}, {"name": "trimmed_mean", "beta": 0.2}, 9),
    ("Krum", {"num_malicious_nodes": 2}, {"name": "krum", "f": 2}, 8),
    ("MultiKrum", {"num_malicious_nodes": 1, "num_nodes_to_select": 4},
     {"name": "multikrum", "f": 1, "m": 4, "variant": "flower"}, 7),
    ("Bulyan", {"num_malicious_nodes": 1}, {"name": "bulyan", "f": 1, "variant": "flower"}, 8),
    ("Bulyan", {"num_malicious_nodes": 2}, {"name": "bulyan", "f": 2, "variant": "flower"}, 10),  # too few: skipped
]


@pytest.mark.parametrize(("strategy", "flower_args", "rule", "n"), RULES,
                         ids=[f"{r[0]}-{r[2].get('variant', 'paper')}-n{r[3]}" for r in RULES])
def test_robust_rules_agree_with_flowers_strategies(strategy: str, flower_args: dict[str, Any], rule: dict[str, Any],
                                                    n: int, monkeypatch: pytest.MonkeyPatch) -> None:
    strategies = pytest.importorskip("flwr.serverapp.strategy")
    flower_in_process(monkeypatch)
    for seed in (0, 1):
        compare_with_flower(getattr(strategies, strategy)(**flower_args), build_algorithm("fedavg", aggregate=rule),
                            random_rounds(4, n, seed), seed)


def test_paper_multikrum_is_flowers_on_equal_sample_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    strategies = pytest.importorskip("flwr.serverapp.strategy")
    flower_in_process(monkeypatch)
    compare_with_flower(strategies.MultiKrum(num_malicious_nodes=1, num_nodes_to_select=4),
                        build_algorithm("fedavg", aggregate={"name": "multikrum", "f": 1, "m": 4}),
                        random_rounds(4, 7, 0, equal_counts=True))


class LegacyBulyan:
    """Flower's own paper-faithful Bulyan (``flwr.server.strategy.aggregate.aggregate_bulyan``: Krum applied
    again after each choice), behind the two calls compare_with_flower makes."""

    def __init__(self, f: int) -> None:
        from flwr.server.strategy.aggregate import aggregate_bulyan, aggregate_krum

        self.f, self.bulyan, self.krum = f, aggregate_bulyan, aggregate_krum

    def configure_train(self, *args: Any) -> list[Any]:
        return []

    def aggregate_train(self, server_round: int, replies: list[Any]) -> tuple[Any, None]:
        from flwr.app import Array, ArrayRecord

        results = [([msg.content["arrays"][k].numpy() for k in ("a", "b")],
                     int(msg.content["metrics"]["num-examples"])) for msg in replies]
        layers = self.bulyan(results, self.f, self.krum, to_keep=0)
        return ArrayRecord({"a": Array(layers[0]), "b": Array(layers[1])}), None


def test_paper_bulyan_is_flowers_iterated_krum_where_every_score_has_a_neighbour(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """f = 3, n = 15: Krum runs on 15 down to 7 updates, n' - f - 2 >= 2 throughout, so Flower's max(1, .) is
    the paper's count, no two scores tie, and flwr.server.strategy's aggregate_bulyan is the paper's algorithm.
    (At f = 2 the last pick counts one neighbour: the two nearest updates tie exactly, Flower takes the first
    uploaded and fedaccel the one nearer the rest, so the two differ in some rounds.)"""
    pytest.importorskip("flwr.server.strategy.aggregate")
    flower_in_process(monkeypatch)
    compare_with_flower(LegacyBulyan(3), build_algorithm("fedavg", aggregate={"name": "bulyan", "f": 3}),
                        random_rounds(3, 15, 0))


def test_flowers_bulyan_selects_otherwise_than_the_paper() -> None:
    """The same 11 updates: one-shot Multi-Krum selection (Flower) and Krum re-applied (paper) differ somewhere."""
    differ = 0
    for seed in range(20):
        deltas, _ = random_rounds(1, 11, seed)[0]
        paper = aggregate(bulyan(f=2), deltas)
        flower = aggregate(bulyan(f=2, variant="flower"), deltas)
        differ += not np.allclose(paper, flower)
    assert differ > 0


def test_subsets_in_hand_case_are_what_krum_scores_say() -> None:
    """The hand-case distances of POINTS, checked once by brute force (the comments above rely on them)."""
    d = {(i, j): sum((a - b) ** 2 for a, b in zip(POINTS[i], POINTS[j])) for i, j in combinations(range(4), 2)}
    assert d == {(0, 1): 1, (0, 2): 4, (1, 2): 5, (0, 3): 200, (1, 3): 181, (2, 3): 164}


@pytest.mark.parametrize("params", [{"name": "bherd", "alpha": 0.75, "aggregate": "median", "server_opt": "adam"},
                                    {"name": "fedgsnr", "samples": 4, "e_const": 3,
                                     "aggregate": {"name": "multikrum", "f": 1}, "server_opt": "avgm"}],
                         ids=["bherd-median-adam", "fedgsnr-multikrum-avgm"])
def test_stacked_runtime_gives_the_in_process_model_with_a_rule_and_an_optimiser(params: dict[str, Any]) -> None:
    from test_stacked import federation, run_both

    name = params.pop("name")
    run_both(build_algorithm(name, **params), lambda: federation("2nn"))
