"""Tests for fedaccel.data.splits: invariants of every split, the exact BHerd cases, errors, reports."""

from __future__ import annotations

import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedaccel.data.splits import (
    SPLITS,
    format_report,
    label_counts,
    plot_heatmap,
    split,
)
from fedaccel.errors import ConfigError

RANDOM_SPLITS = {"iid", "dirichlet", "label-k", "shards", "nonbalance", "pareto"}
#: Splits that assign every sample (label-k does so when N*k >= C, true for the datasets below).
FULL_COVERAGE = set(SPLITS) - {"natural"}


def balanced_labels(n: int, n_classes: int = 10, seed: int = 0) -> np.ndarray:
    """n labels, classes as even as possible, in random order."""
    return np.random.default_rng(seed).permutation(np.arange(n) % n_classes)


def extra_args(name: str, labels: np.ndarray, n_clients: int) -> dict:
    if name == "natural":
        return {"partition": np.array_split(np.arange(len(labels)), n_clients)}
    return {}


def run(name: str, labels: np.ndarray, n_clients: int, seed: int = 0, **args) -> list[np.ndarray]:
    args = {**extra_args(name, labels, n_clients), **args}
    return split(name, labels, n_clients, np.random.default_rng(seed), **args)


DATASETS = [(1000, 10, 10), (12, 10, 5), (503, 7, 13), (2000, 10, 30)]  # (samples, classes, clients)


@pytest.mark.parametrize("name", sorted(SPLITS))
@pytest.mark.parametrize("n,n_classes,n_clients", DATASETS)
def test_invariants(name: str, n: int, n_classes: int, n_clients: int) -> None:
    labels = balanced_labels(n, n_classes)
    parts = run(name, labels, n_clients)
    assert len(parts) == n_clients
    for p in parts:
        assert p.dtype == np.int64 and p.ndim == 1
        assert np.all(np.diff(p) > 0)  # sorted, no duplicates
        assert p.size == 0 or (p[0] >= 0 and p[-1] < n)
    everything = np.concatenate(parts)
    assert len(np.unique(everything)) == len(everything), "a sample is on two clients"
    if name in FULL_COVERAGE:
        assert np.array_equal(np.sort(everything), np.arange(n))


@pytest.mark.parametrize("name", sorted(SPLITS))
def test_determinism(name: str) -> None:
    labels = balanced_labels(600)
    a, b = run(name, labels, 8, seed=3), run(name, labels, 8, seed=3)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    c = run(name, labels, 8, seed=4)
    same = all(np.array_equal(x, y) for x, y in zip(a, c))
    assert same == (name not in RANDOM_SPLITS)


def test_no_global_random_state_used() -> None:
    labels = balanced_labels(300)
    np.random.seed(0)
    before = np.random.get_state()[1].copy()
    for name in SPLITS:
        run(name, labels, 6)
    assert np.array_equal(np.random.get_state()[1], before)


def owner(parts: list[np.ndarray], n: int) -> np.ndarray:
    out = np.full(n, -1)
    for k, p in enumerate(parts):
        out[p] = k
    return out


def test_iid_equal_sizes() -> None:
    sizes = [len(p) for p in run("iid", balanced_labels(1003), 10)]
    assert max(sizes) - min(sizes) <= 1 and sum(sizes) == 1003


def test_case1_exact() -> None:
    labels = balanced_labels(23)
    assert np.array_equal(owner(run("case1", labels, 5), 23), np.arange(23) % 5)


def test_case2_exact_n_le_labels() -> None:
    labels = balanced_labels(200)
    own = owner(run("case2", labels, 5), 200)
    assert np.array_equal(own, labels % 5)
    counts = label_counts(run("case2", labels, 5), labels, 10)
    assert all(set(np.flatnonzero(row)) == {k, k + 5} for k, row in enumerate(counts))


def test_case2_exact_n_gt_labels() -> None:
    labels = np.array([0, 1, 0, 2, 3, 0, 1, 0, 2, 0])  # 4 labels, 6 clients
    own = owner(run("case2", labels, 6), len(labels))
    # label 0 alternates over clients 0 and 4 (least filled, lowest first); label 1 over 1 and 5.
    assert own.tolist() == [0, 1, 4, 2, 3, 0, 5, 4, 2, 0]


def test_case3_exact_five_clients_ten_labels() -> None:
    labels = balanced_labels(300)
    parts = run("case3", labels, 5)
    own = owner(parts, 300)
    low = labels < 5
    assert np.array_equal(own[low], np.flatnonzero(low) % 3)  # labels 0-4 IID over clients 0-2
    counts = label_counts(parts, labels, 10)
    assert set(np.flatnonzero(counts[3])) == {6, 8}
    assert set(np.flatnonzero(counts[4])) == {5, 7, 9}
    for k in range(3):
        assert set(np.flatnonzero(counts[k])) == {0, 1, 2, 3, 4}


def test_case3_more_clients_than_labels() -> None:
    labels = balanced_labels(100, n_classes=4)
    parts = run("case3", labels, 6)  # M = 4, t = 2: labels 0,1 over clients 0,1; 2,3 on clients 2,3
    counts = label_counts(parts, labels, 4)
    assert counts[4].sum() == counts[5].sum() == 0
    assert set(np.flatnonzero(counts[2])) == {2} and set(np.flatnonzero(counts[3])) == {3}


@pytest.mark.parametrize("k", [1, 2, 3, 10])
def test_label_k_exact_k_labels_and_even_use(k: int) -> None:
    labels = balanced_labels(3000)
    parts = run("label-k", labels, 20, k=k)
    counts = label_counts(parts, labels, 10)
    assert ((counts > 0).sum(axis=1) == k).all()
    holders = (counts > 0).sum(axis=0)
    assert holders.max() - holders.min() <= 1
    for c in range(10):  # each class divided evenly among its holders
        shares = counts[counts[:, c] > 0, c]
        assert shares.max() - shares.min() <= 1


def test_label_k_with_fewer_slots_than_classes_is_refused_not_a_split_that_drops_classes() -> None:
    """2 clients x 2 labels held 4 of 10 classes: the other 6 classes' samples went to no client, unsaid."""
    with pytest.raises(ConfigError, match=r"^label-k: 2 clients x k = 2 hold 4 labels in all, fewer than the 10 "):
        run("label-k", balanced_labels(100), 2, k=2)
    assert sum(map(len, run("label-k", balanced_labels(100), 5, k=2))) == 100  # 10 slots: every sample


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 12), st.lists(st.tuples(st.floats(0, 1), st.floats(0.01, 1)), min_size=1, max_size=4),
       st.integers(0, 2**32 - 1))
def test_nonbalance_gives_every_sample_to_a_client_or_is_refused(
        n_clients: int, fractions: list[tuple[float, float]], seed: int) -> None:
    """Label fractions with no group holding every label (0.5, 0.3, 0.2) left a class to nobody: 6,000 of
    Fashion-MNIST's samples trained by no client. Now each client keeps its group's number of labels, and every
    sample is held, or the clients hold fewer labels in all than there are classes, refused in one line."""
    labels = balanced_labels(400)
    client_fractions, label_fractions = zip(*fractions)
    try:
        parts = run("nonbalance", labels, n_clients, seed=seed, client_fractions=client_fractions,
                    label_fractions=label_fractions)
    except ConfigError as exc:
        assert "\n" not in str(exc)
        assert sum(client_fractions) == 0 or "fewer than the 10 classes" in str(exc), exc
        return
    assert np.array_equal(np.sort(np.concatenate(parts)), np.arange(400))
    held = (label_counts(parts, labels, 10) > 0).sum(axis=1)  # a group's number of labels, each client
    assert set(held.tolist()) <= {max(1, int(np.floor(f * 10 + 0.5))) for f in label_fractions}


def test_nonbalance_keeps_its_draw_where_a_group_holds_every_label() -> None:
    """The repair draws nothing where every class is held: the paper's splits (a group with every label) are
    the ones drawn before it."""
    from fedaccel.data.splits import _cover_every_label

    rng = np.random.default_rng(0)
    sets = [np.arange(10), np.array([1, 2])]
    state = rng.bit_generator.state
    assert [s.tolist() for s in _cover_every_label(sets, 10, rng)] == [list(range(10)), [1, 2]]
    assert rng.bit_generator.state == state


def test_shards_each_client_few_labels() -> None:
    labels = balanced_labels(1000)
    parts = run("shards", labels, 10, shards_per_client=2)
    assert {len(p) for p in parts} == {100}
    counts = label_counts(parts, labels, 10)
    assert ((counts > 0).sum(axis=1) <= 2).all()


def test_nonbalance_groups() -> None:
    labels = balanced_labels(2000)
    counts = label_counts(run("nonbalance", labels, 10), labels, 10)
    held = (counts > 0).sum(axis=1)
    assert held.tolist() == [10] + [5] * 4 + [2] * 5
    labels30 = balanced_labels(6000)
    held30 = (label_counts(run("nonbalance", labels30, 30), labels30, 10) > 0).sum(axis=1)
    assert held30.tolist() == [10] * 3 + [5] * 12 + [2] * 15


def test_nonbalance_small_n_keeps_an_abundant_client() -> None:
    labels = balanced_labels(200)
    for n_clients in (1, 2, 3):
        held = (label_counts(run("nonbalance", labels, n_clients), labels, 10) > 0).sum(axis=1)
        assert held[0] == 10


@pytest.mark.parametrize("seed", range(5))
def test_pareto_labels(seed: int) -> None:
    labels = balanced_labels(3000)
    counts = label_counts(run("pareto", labels, 30, seed=seed), labels, 10)
    held = (counts > 0).sum(axis=1)
    assert held.min() >= 1 and held.max() == 10
    assert held.min() < 10  # long-tailed, not everyone holds everything


@pytest.mark.parametrize("n", [1000, 60000])
def test_dirichlet_hard_case_terminates_with_min_size(n: int) -> None:
    labels = balanced_labels(n)
    start = time.perf_counter()
    parts = run("dirichlet", labels, 100, alpha=0.01, min_size=10)
    assert time.perf_counter() - start < 5
    assert min(len(p) for p in parts) >= min(10, n // 100)
    assert np.array_equal(np.sort(np.concatenate(parts)), np.arange(n))


def test_dirichlet_tiny_dataset() -> None:
    parts = run("dirichlet", balanced_labels(12), 5, alpha=0.01)
    assert min(len(p) for p in parts) >= 2


def test_dirichlet_alpha_controls_skew() -> None:
    labels = balanced_labels(5000)

    def mean_labels_held(alpha: float) -> float:
        counts = label_counts(run("dirichlet", labels, 10, alpha=alpha, min_size=0), labels, 10)
        return float((counts > 0).sum(axis=1).mean())

    assert mean_labels_held(0.05) < mean_labels_held(100.0) == 10.0


@pytest.mark.parametrize("name", ["iid", "dirichlet"])
def test_lognormal_sizes_vary(name: str) -> None:
    labels = balanced_labels(10000)
    parts = run(name, labels, 20, sizes="lognormal", sigma=0.3)
    sizes = np.array([len(p) for p in parts])
    assert sizes.sum() == 10000
    assert 0.1 < sizes.std() / sizes.mean() < 0.6
    flat = run(name, labels, 20, sizes="equal") if name == "dirichlet" else run(name, labels, 20)
    assert max(len(p) for p in flat) - min(len(p) for p in flat) <= 1


def test_dirichlet_client_major_skew() -> None:
    labels = balanced_labels(5000)
    counts = label_counts(run("dirichlet", labels, 10, alpha=0.05, sizes="equal"), labels, 10)
    assert (counts.max(axis=1) / counts.sum(axis=1)).mean() > 0.5  # most clients dominated by a label


def test_dirichlet_client_major_terminates_in_hard_case() -> None:
    labels = balanced_labels(60000)
    parts = run("dirichlet", labels, 100, alpha=0.01, sizes="lognormal", sigma=1.0)
    assert min(len(p) for p in parts) >= 10


def test_natural_returns_given_partition() -> None:
    labels = balanced_labels(10)
    parts = split("natural", labels, 2, np.random.default_rng(0), partition=[[3, 1], [0, 9]])
    assert [p.tolist() for p in parts] == [[1, 3], [0, 9]]


@pytest.mark.parametrize(
    "name,n,n_clients,args,message",
    [
        ("nope", 10, 2, {}, "known splits: iid"),
        ("iid", 5, 6, {}, "6 clients but only 5 samples"),
        ("iid", 5, 0, {}, "n_clients must be an integer >= 1"),
        ("label-k", 100, 5, {"k": 11}, "larger than the number of classes"),
        ("label-k", 100, 5, {"k": 0}, "k >= 1"),
        ("dirichlet", 100, 5, {"alpha": 0.0}, "alpha must be > 0"),
        ("dirichlet", 100, 5, {"alpha": -1.0}, "alpha must be > 0"),
        ("iid", 100, 5, {"sizes": "zipf"}, "unknown sizes"),
        ("iid", 100, 5, {"alpha": 0.5}, "unknown argument(s) alpha"),
        ("shards", 10, 6, {}, "exceeds the 10 samples"),
        ("natural", 10, 2, {}, "needs a dataset"),
        ("natural", 10, 2, {"partition": [[0, 1], [1, 2]]}, "two clients"),
        ("natural", 10, 2, {"partition": [[0, 10], [1]]}, "outside"),
        ("natural", 10, 3, {"partition": [[0], [1]]}, "natural partition has 2 clients, not 3: set data.clients=2"),
    ],
)
def test_errors(name: str, n: int, n_clients: int, args: dict, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        split(name, balanced_labels(n), n_clients, np.random.default_rng(0), **args)
    text = str(info.value)
    assert message in text and "\n" not in text


def test_label_counts_and_report() -> None:
    labels = np.array([0, 1, 1, 2, 2, 2])
    counts = label_counts([np.array([0, 1]), np.array([2, 3, 4, 5])], labels, 3)
    assert counts.tolist() == [[1, 1, 0], [0, 1, 3]]
    text = format_report(counts)
    lines = text.splitlines()
    assert lines[0].split() == ["client", "total", "0", "1", "2"]
    assert lines[2].split() == ["0", "2", "1", "1", "0"]
    assert lines[-1].split() == ["all", "6", "1", "2", "3"]


@pytest.mark.parametrize("shape", [(5, 10), (40, 10)])
def test_heatmap_png(tmp_path, shape: tuple[int, int]) -> None:
    counts = np.arange(np.prod(shape)).reshape(shape)
    out = plot_heatmap(counts, tmp_path / "sub" / "heat.png", title="test")
    assert out.exists() and out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_import_is_light() -> None:
    import subprocess
    import sys

    code = "import sys, fedaccel.data.splits; print('matplotlib' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.stdout.strip() == "False"


@settings(max_examples=200, deadline=None)
@given(parts=st.lists(st.lists(st.integers(-3, 22), max_size=6) | st.lists(st.floats(0, 5), min_size=1, max_size=3),
                      min_size=1, max_size=4))
def test_a_handed_in_partition_is_taken_as_it_is_or_refused_in_one_line(parts: list[list]) -> None:
    """Any partition a caller hands in (fedaccel.train, the natural split): accepted exactly when its indices are
    integers in 0..19 with none on two clients, then as given, in its own order; else one ConfigError line."""
    from fedaccel.data.splits import checked_partition

    flat = [i for p in parts for i in p]
    valid = all(isinstance(i, int) for i in flat) and all(0 <= i < 20 for i in flat) and len(set(flat)) == len(flat)
    try:
        got = checked_partition([np.asarray(p) for p in parts], 20, "partition")
    except ConfigError as error:
        assert not valid and "\n" not in str(error) and str(error).startswith("partition ")
        return
    assert valid and [list(a) for a in got] == parts and all(a.dtype == np.int64 for a in got)


def test_the_split_report_title_names_the_split_with_its_options(tmp_path, monkeypatch) -> None:
    """The heat map said "split dirichlet, 10 clients" whatever the alpha: the title names the split as a method is
    named, with the options the config spells."""
    import fedaccel.data.splits as splits
    from fedaccel.cli import main

    monkeypatch.delenv("FEDACCEL_DATA_FASHION_MNIST", raising=False)  # the built-in copy, wherever the test runs
    titles = []
    monkeypatch.setattr(splits, "plot_heatmap", lambda counts, out, title="", force=False: titles.append(title) or out)
    args = ["split-report", "--set", "data.split=dirichlet", "--set", "data.split.alpha=0.3", "--set", "data.clients=10",
            "--set", "data.subset=2000", "-o", str(tmp_path / "split.png")]
    assert main(args) == 0
    assert titles == ["fashion-mnist, split dirichlet alpha=0.3, 10 clients"]
