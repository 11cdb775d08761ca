"""Batched (K clients at once) BHerd and GraB estimators against the per-client ones they stand for.

Every client's (estimate, extras, diagnostics) from ``Part.batched_estimator`` must be what its own
``Part.estimator`` gives: the same selected steps exactly, the same diagnostics, estimates to 1e-6 relative,
in float32 and float64, with unequal tau_i (including 1), inactive rows ignored whatever they hold, and
ties broken the same way. ``benchmarks/batched_estimators.py`` times the two forms.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
import torch
from torch import Tensor

from fedaccel.algorithms import batched as batched_module
from fedaccel.algorithms.base import ClientContext, Part, RoundInfo
from fedaccel.algorithms.bherd import bherd_selection, herd_order, herd_select_batched, selected_count
from fedaccel.algorithms.grab import BatchedBalancing, grab_selection
from fedaccel.algorithms.registry import build_algorithm

DTYPES = [torch.float32, torch.float64]
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU here"))]
TAUS = [5, 1, 12, 3, 2, 12, 7, 1, 4]  # unequal, two tau_i = 1, two at the maximum
Result = tuple[Tensor, dict[str, Tensor], dict[str, Any]]


LR = 0.05


def contexts(taus: Sequence[int]) -> list[ClientContext]:
    info = RoundInfo(round=3, lr=LR, prev_lr=LR, weights=np.full(len(taus), 1 / len(taus)), seed=0)
    return [ClientContext(info, client, tau, True) for client, tau in enumerate(taus)]


def random_directions(taus: Sequence[int], dim: int, dtype: torch.dtype, seed: int = 0) -> Tensor:
    """(K, T, d): a per-client drift plus noise, so that GraB keeps some steps and drops others."""
    g = torch.Generator().manual_seed(seed)
    k, t = len(taus), max(taus)
    drift = torch.randn(k, 1, dim, generator=g, dtype=torch.float64)
    trend = torch.linspace(1.0, -0.5, t, dtype=torch.float64)[None, :, None]
    return (drift * trend + torch.randn(k, t, dim, generator=g, dtype=torch.float64)).to(dtype)


def both_forms(part: Part, taus: Sequence[int], z: Tensor) -> tuple[list[Result], list[Result]]:
    """(batched, per-client) results for the directions z (K, T, d); rows past tau_i are filled with NaN."""
    ctxs, dim = contexts(taus), z.shape[2]
    assert part.estimator is not None and part.batched_estimator is not None
    batched = part.batched_estimator(ctxs, dim, z.dtype, z.device)
    single = [part.estimator(ctx, dim) for ctx in ctxs]
    tau = torch.tensor(taus, device=z.device)
    for step in range(z.shape[1]):
        active = step < tau
        rows = torch.where(active[:, None], z[:, step], torch.nan)  # inactive rows must be ignored
        batched.observe(step, rows, active)
        for i, estimator in enumerate(single):
            if step < taus[i]:
                estimator.observe(step, z[i, step].clone())
    updates = z.sum(dim=1) * ctxs[0].info.lr  # what the runtime hands in: the full updates
    return batched.finish(updates), [est.finish(updates[i].clone()) for i, est in enumerate(single)]


def assert_same(batched: Result, single: Result) -> None:
    (estimate, extras, diag), (estimate_1, extras_1, diag_1) = batched, single
    assert estimate.dtype == estimate_1.dtype and estimate.device == estimate_1.device
    assert estimate.shape == estimate_1.shape
    scale = float(estimate_1.abs().max())
    torch.testing.assert_close(estimate, estimate_1, rtol=1e-6, atol=1e-6 * scale)
    assert extras.keys() == extras_1.keys()
    for key, value in extras.items():
        assert value.dtype == extras_1[key].dtype and value.device == extras_1[key].device
        torch.testing.assert_close(value, extras_1[key], rtol=0, atol=0)
    assert diag.keys() == diag_1.keys()
    # BHerd's distance ||g/(alpha tau) - mu|| cancels (to 0 at alpha = 1): compare it on the scale of g/(alpha tau)
    herd_scale = float(torch.linalg.vector_norm(estimate_1)) / (LR * diag_1["tau"])
    for key, value in diag.items():
        if isinstance(value, float):
            assert value == pytest.approx(diag_1[key], rel=1e-6, abs=1e-6 * herd_scale), key
        else:
            assert value == diag_1[key], key  # selected steps, tau, memory_bytes: exactly


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("alpha", [0.1, 0.29, 0.5, 0.75, 1.0])
def test_batched_bherd_matches_per_client(alpha: float, dtype: torch.dtype, device: str) -> None:
    z = random_directions(TAUS, 37, dtype, seed=int(alpha * 100)).to(device)
    batched, single = both_forms(bherd_selection(alpha=alpha), TAUS, z)
    for b, s in zip(batched, single, strict=True):
        assert_same(b, s)
    counts = [len(s[2]["selected"]) for s in single]
    assert counts == [selected_count(alpha, tau) for tau in TAUS]
    if alpha < 1:  # a real choice was made somewhere: not just the first k_i steps
        assert any(s[2]["selected"] != list(range(len(s[2]["selected"]))) for s in single)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_batched_grab_matches_per_client(dtype: torch.dtype, device: str) -> None:
    taus = TAUS * 3  # 27 clients: enough rows for every sign pattern below
    z = random_directions(taus, 53, dtype, seed=5).to(device)
    batched, single = both_forms(grab_selection(), taus, z)
    for b, s in zip(batched, single, strict=True):
        assert_same(b, s)
    kept = [s[2]["selected"] for s in single]
    assert any(kept) and any(len(k) < tau - 1 for k, tau in zip(kept, taus, strict=True) if tau > 2)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("alpha", [0.5, 0.3, None])  # None: GraB
def test_ties_break_the_same_way(alpha: float | None, dtype: torch.dtype) -> None:
    """Exact ties: identical directions (all scores equal), repeated pairs, zero and constant directions."""
    taus = [6, 4, 5, 1, 3, 6]
    g = torch.Generator().manual_seed(1)
    v, u = torch.randn(9, generator=g, dtype=dtype), torch.randn(9, generator=g, dtype=dtype)
    z = torch.zeros(len(taus), 6, 9, dtype=dtype)
    z[0] = v  # six identical directions
    z[1, :4] = torch.stack([v, u, v, u])  # two tied pairs
    z[2] = 0.0  # nothing at all
    z[3, 0] = u  # a single step
    z[4, :3] = torch.stack([u, -u, u])
    z[5] = torch.stack([v, v, u, u, -v, -v])
    part = grab_selection() if alpha is None else bherd_selection(alpha=alpha)
    batched, single = both_forms(part, taus, z)
    for b, s in zip(batched, single, strict=True):
        assert_same(b, s)
    if alpha is not None:  # identical (or zero) directions: the lowest indices win
        k = selected_count(alpha, 6)
        assert single[0][2]["selected"] == single[2][2]["selected"][:k] == list(range(k))
        assert single[1][2]["selected"] == [0, 1][: selected_count(alpha, 4)]  # v, u, v, u: first of each tie


@pytest.mark.parametrize("budget", [1, 3 * 14 * 41 * 4])  # one client per block; blocks of 1 to 7 clients
@pytest.mark.parametrize("alpha", [0.5, None])  # None: GraB
def test_cpu_row_blocks_give_the_same_results(
    alpha: float | None, budget: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Long rows are handled a cache-sized block of clients at a time on the CPU."""
    monkeypatch.setattr(batched_module, "CPU_BLOCK_BYTES", budget)
    part = grab_selection() if alpha is None else bherd_selection(alpha=alpha)
    for dtype in DTYPES:
        z = random_directions(TAUS, 41, dtype, seed=3)
        batched, single = both_forms(part, TAUS, z)
        for b, s in zip(batched, single, strict=True):
            assert_same(b, s)


@pytest.mark.parametrize("ties", ["strict", "keep"])
def test_grab_on_long_cpu_rows_runs_the_per_client_code_row_by_row(ties: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """From PER_CLIENT_DIM parameters on, on the CPU, batched GraB is one per-client estimator a row, fed step by
    step: its results are the per-client form's, inactive rows (past their tau_i) fed nothing."""
    import fedaccel.algorithms.grab as grab

    monkeypatch.setattr(grab, "PER_CLIENT_DIM", 41)
    part = grab_selection(ties=ties)
    assert part.batched_estimator is not None
    assert part.batched_estimator([], 41, torch.float32, "cpu")._clients is not None  # type: ignore[attr-defined]
    assert part.batched_estimator([], 40, torch.float32, "cpu")._clients is None  # type: ignore[attr-defined]
    for dtype in DTYPES:
        z = random_directions(TAUS, 41, dtype, seed=5)
        batched, single = both_forms(part, TAUS, z)
        for b, s in zip(batched, single, strict=True):
            assert_same(b, s)
    short = part.batched_estimator(contexts(TAUS), 41, torch.float32, "cpu")  # a row given one step too few
    z = random_directions(TAUS, 41, torch.float32, seed=6)
    for step in range(max(TAUS) - 1):
        short.observe(step, z[:, step], step < torch.tensor(TAUS))
    with pytest.raises(RuntimeError, match="local steps"):
        short.finish(z.sum(dim=1))


@pytest.mark.parametrize("alpha", [0.5, None])  # None: GraB
def test_reused_workspace_leaks_nothing_between_rounds(alpha: float | None) -> None:
    """The second round gets the first one's memory (poisoned with NaN here) and still equals the per-client form."""
    part = grab_selection() if alpha is None else bherd_selection(alpha=alpha)
    assert part.batched_estimator is not None
    workspace = part.batched_estimator.workspace  # type: ignore[attr-defined]
    both_forms(part, [12] * 9, random_directions([12] * 9, 37, torch.float32, seed=1))
    kept = workspace._buffer
    assert kept is not None
    kept.fill_(torch.nan)
    batched, single = both_forms(part, TAUS, random_directions(TAUS, 37, torch.float32, seed=2))
    assert workspace._buffer is not None and workspace._buffer.data_ptr() == kept.data_ptr()  # reused
    for b, s in zip(batched, single, strict=True):
        assert_same(b, s)


def test_herd_select_batched_is_herd_order_row_by_row() -> None:
    """The vectorised greedy loop on padded Gram matrices picks what herd_order picks on each one."""
    taus, dim = [7, 1, 4, 7, 2], 6
    z = random_directions(taus, dim, torch.float64, seed=9)
    mask = torch.arange(7)[None, :, None] < torch.tensor(taus)[:, None, None]
    z = z * mask  # zero padding beyond tau_i
    counts = torch.tensor([3, 1, 4, 7, 1])
    chosen = herd_select_batched(torch.bmm(z, z.transpose(1, 2)), torch.tensor(taus), counts)
    for i, tau in enumerate(taus):
        zi = z[i, :tau]
        expected = sorted(herd_order(zi @ zi.T, int(counts[i])))
        assert torch.nonzero(chosen[i]).flatten().tolist() == expected


@pytest.mark.parametrize("part", [bherd_selection(alpha=0.5), grab_selection()])
def test_batched_estimators_check_their_steps(part: Part) -> None:
    assert part.batched_estimator is not None
    with pytest.raises(ValueError, match="at least one step"):
        part.batched_estimator(contexts([3, 0]), 4, torch.float32, torch.device("cpu"))
    estimator = part.batched_estimator(contexts([3, 2]), 4, torch.float32, torch.device("cpu"))
    estimator.observe(0, torch.ones(2, 4), torch.tensor([True, True]))
    with pytest.raises(RuntimeError, match=r"saw \[1, 1\] local steps, expected \[3, 2\]"):
        estimator.finish(torch.zeros(2, 4))


@pytest.mark.parametrize("part", [bherd_selection(alpha=0.5), grab_selection()])
def test_chunk_bytes_covers_the_state_and_is_linear(part: Part) -> None:
    factory = part.batched_estimator
    assert factory is not None
    one = factory.chunk_bytes(1, 12, 784, torch.float32)
    assert factory.chunk_bytes(20, 12, 784, torch.float32) == 20 * one
    vectors = 12 if part.name == "bherd" else 3  # the store; GraB's m, s, g
    assert factory.chunk_bytes(1, 12, 784, torch.float64) - one >= vectors * 784 * 4  # twice the bytes in float64
    estimator = factory(contexts([12, 5]), 784, torch.float32, torch.device("cpu"))
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in vars(estimator).values()
                if isinstance(t, Tensor)}
    assert sum(storages.values()) >= (2 * 12 * 784 * 4 if part.name == "bherd" else 3 * 2 * 784 * 4)
    assert sum(storages.values()) <= factory.chunk_bytes(2, 12, 784, torch.float32)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU here: peak memory is measured on CUDA only")
@pytest.mark.parametrize("part", [bherd_selection(alpha=0.5), grab_selection()])
def test_chunk_bytes_bounds_the_measured_peak(part: Part) -> None:
    taus, dim = [12] * 8, 20_000
    z = random_directions(taus, dim, torch.float32).cuda()
    ones = torch.ones(2, 2, device="cuda")
    ones @ ones  # cuBLAS's workspace (32 MiB on a Hopper GPU) is allocated at its first product: not the estimator's
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    assert part.batched_estimator is not None
    estimator = part.batched_estimator(contexts(taus), dim, z.dtype, z.device)
    active = torch.ones(len(taus), dtype=torch.bool, device="cuda")
    for step in range(12):
        estimator.observe(step, z[:, step], active)
    estimator.finish(z[:, 0])
    torch.cuda.synchronize()
    assert torch.cuda.max_memory_allocated() - base <= part.batched_estimator.chunk_bytes(8, 12, dim, z.dtype)


@pytest.mark.parametrize("name", ["bherd", "bherd-fednova", "bherd-scaffold", "grab-fedavg"])
def test_every_estimator_recipe_has_a_batched_form(name: str) -> None:
    algorithm = build_algorithm(name)
    owner = algorithm.single("estimator")
    assert owner is not None and owner[1].batched_estimator is not None
