"""Adaptive clipping (Andrew et al., NeurIPS 2021) and client-side noise for client-level DP: a round by hand, the
clip norm reaching the target quantile, Flower 1.42's adaptive strategies on the same updates and draws (and
where they differ from the paper), each client's share of the noise, and the refusals."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from test_dp_anchors import flower_draws, flower_round, info, random_models, uploads
from test_server_opt import DIM, flower_in_process

from fedaccel.algorithms import dp
from fedaccel.algorithms.base import ClientContext, ClientUpdate
from fedaccel.algorithms.dp import AdaptiveClip, DPSettings, dp_mean, dp_settings
from fedaccel.algorithms.registry import build_algorithm
from fedaccel.cli import main
from fedaccel.errors import ConfigError

pytest.importorskip("dp_accounting")


def adaptive(clip: float, z: float, m: int, count_noise: float | None = None, quantile: float = 0.5,
             lr: float = 0.2, noise: str = "server") -> DPSettings:
    return DPSettings(clip, z, 1e-5, m, 1.0, "fixed", 10, noise, AdaptiveClip(clip, quantile, lr, count_noise))


def step(settings: DPSettings, clip: float, w: torch.Tensor, sent: list[ClientUpdate], round_: int = 0
         ) -> tuple[torch.Tensor, float]:
    part = dp_mean(settings)
    return part.server_end(info(round_, settings.clients), w, part.aggregate(info(round_), w, sent), sent, clip)


def test_an_adaptive_round_by_hand(monkeypatch: pytest.MonkeyPatch) -> None:
    """C = 1, m = 2, z = 1, sigma_b = 1: z_Delta = (1 - 1/4)^-1/2. [3, 4] is clipped to [0.6, 0.8] (b = 0), [0, 0.5]
    is within (b = 1). With the sum's normals xi and the count's normal 0.3: w' = w - ([0.6, 1.3] + z_Delta xi) / 2,
    b~ = (1 + 0.3) / 2 = 0.65, C' = exp(-0.2 (0.65 - 0.5))."""
    xi = torch.tensor([0.5, -1.0], dtype=torch.float64)
    monkeypatch.setattr(dp, "standard_normal", lambda _info, shape: xi.clone())
    monkeypatch.setattr(dp, "count_normal", lambda _info: 0.3)
    settings = adaptive(1.0, 1.0, 2, count_noise=1.0)
    assert settings.sum_noise_multiplier == pytest.approx(0.75 ** -0.5, rel=1e-15)
    w = torch.tensor([1.0, 2.0], dtype=torch.float64)
    sent = [ClientUpdate(0, 1.0, 1, torch.tensor([3.0, 4.0], dtype=torch.float64)),
            ClientUpdate(1, 1.0, 1, torch.tensor([0.0, 0.5], dtype=torch.float64))]
    w_next, clip = step(settings, 1.0, w, sent)
    by_hand = w - (torch.tensor([0.6, 1.3], dtype=torch.float64) + 0.75 ** -0.5 * xi) / 2
    assert torch.allclose(w_next, by_hand, atol=1e-15, rtol=0)
    assert clip == pytest.approx(math.exp(-0.2 * 0.15), rel=1e-15)


def test_the_clip_norm_settles_at_the_target_quantile_of_the_norms() -> None:
    """Twenty uploads of norms 1..20, no noise: from C = 0.1 the geometric update brings C to the quantile asked
    for (between the 10th and 11th norm for gamma = 0.5, the 18th and 19th for 0.9) and keeps it there."""
    norms = torch.arange(1, 21, dtype=torch.float64)
    sent = [ClientUpdate(i, 1.0, 1, torch.tensor([float(n), 0.0], dtype=torch.float64)) for i, n in enumerate(norms)]
    w = torch.zeros(2, dtype=torch.float64)
    for quantile, (low, high) in ((0.5, (9.0, 12.0)), (0.9, (17.0, 20.0))):
        settings, clip, seen = adaptive(0.1, 0.0, 20, quantile=quantile), 0.1, []
        for t in range(200):
            _, clip = step(settings, clip, w, sent, t)
            seen.append(clip)
        assert all(low <= c <= high for c in seen[-50:]), (quantile, seen[-5:])


def test_an_adaptive_run_is_the_same_on_the_stacked_runtime(
        tmp_path: Path) -> None:
    rows = {}
    for runtime in ("in-process", "stacked"):
        out = tmp_path / runtime
        assert main(["run", "--set", "model=softmax", "--set", "data.dataset=digits", "--set", "data.subset=400",
                     "--set", "data.clients=6", "--set", "train.rounds=3", "--set", "train.client_fraction=0.5",
                     "--set", "algorithm={name: fedavg, dp: {clip: adaptive, initial_clip: 0.05, noise_multiplier: 0.5, count_noise: 1.0}}",
                     "--set", f"run.runtime={runtime}", "--set", "run.progress=false", "--out", str(out)]) == 0
        rows[runtime] = [{k: v for k, v in json.loads(line).items() if k != "wall_s"}
                         for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert rows["in-process"] == rows["stacked"] and rows["stacked"][-1]["epsilon"] > 0
    # each row says the clip norm the next round clips to: the first is initial_clip, the last the checkpoint's
    from fedaccel.runs.checkpoint import load_checkpoint

    saved = load_checkpoint(tmp_path / "stacked")["state"]
    clips = [row["dp_clip"] for row in rows["stacked"]]
    assert clips[0] == 0.05 and clips[-1] == saved.server[0] and len(set(clips)) == len(clips)


def test_a_fixed_clip_adds_no_clip_column() -> None:
    settings = DPSettings(1.0, 0.5, 1e-5, 4, 1.0, "fixed", 10)
    assert dp.clip_column(settings, ["dp"], (None,)) == {} and dp.clip_column(None, [], ()) == {}


# --- Flower 1.42's adaptive strategies -------------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["server", "client"])
def test_adaptive_clipping_is_flowers_but_for_two_documented_differences(
        where: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """DifferentialPrivacy{Server,Client}SideAdaptiveClipping (the latter with adaptiveclipping_mod) around FedAvg,
    five clients, four rounds, Flower's clip norm set to fedaccel's at each round's start, the same draws (Flower's
    count normal g and sum normals xi, negated on fedaccel's side). Flower's z_Delta and default sigma_b (m / 20) are
    fedaccel's. Two differences, stated to 1e-6: (1) Flower counts the clipped uploads, the paper those within
    the clip, with the same update C <- C exp(-eta (fraction - gamma)), so with Flower's gamma = 1 - fedaccel's
    the two new clip norms multiply to C^2 (their logs are opposite: Flower's moves away from its target); (2)
    Flower scales the round's noise by the new clip norm, the paper (and fedaccel) by the one the uploads were
    clipped to, so fedaccel's model is Flower's plus xi z_Delta (C - C_Flower) / m."""
    strategies = pytest.importorskip("flwr.serverapp.strategy")
    from flwr.clientapp.mod import adaptiveclipping_mod

    flower_in_process(monkeypatch)
    z, n, quantile = 1.0, 5, 0.3
    wrapper = (strategies.DifferentialPrivacyServerSideAdaptiveClipping if where == "server"
               else strategies.DifferentialPrivacyClientSideAdaptiveClipping)
    strategy = wrapper(strategies.FedAvg(), noise_multiplier=z, num_sampled_clients=n, initial_clipping_norm=1.0,
                       target_clipped_quantile=1 - quantile, clip_norm_lr=0.2, clipped_count_stddev=0.8)
    spec = {"clip": "adaptive", "initial_clip": 1.0, "target_quantile": quantile, "clip_lr": 0.2, "noise_multiplier": z,
            "clients": n, "fraction": 1.0, "sampling": "fixed", "rounds": 4}
    settings = dp_settings({**spec, "count_noise": 0.8})
    assert strategy.noise_multiplier == pytest.approx(settings.sum_noise_multiplier, rel=1e-12)
    default = wrapper(strategies.FedAvg(), noise_multiplier=0.3, num_sampled_clients=n)
    assert default.clipped_count_stddev == dp_settings({**spec, "noise_multiplier": 0.3}).count_noise == n / 20
    rng = np.random.default_rng(1)
    w = rng.normal(0, 1, DIM)
    ours, clip = torch.tensor(w), settings.clip
    for t in range(4):
        strategy.clipping_norm = clip
        models = random_models(rng, w, n)
        w = flower_round(strategy, t + 1, w, models, seed=20 + t,
                         client_mod=None if where == "server" else adaptiveclipping_mod)
        draws = flower_draws(20 + t, 1 + DIM)
        monkeypatch.setattr(dp, "count_normal", lambda _info, g=draws[0]: -float(g))
        monkeypatch.setattr(dp, "standard_normal", lambda _info, shape, xi=draws[1:]: -torch.tensor(xi).reshape(shape))
        ours, next_clip = step(settings, clip, ours, uploads(ours.numpy(), models), t)
        assert next_clip * strategy.clipping_norm == pytest.approx(clip**2, rel=1e-12)
        noise_gap = draws[1:] * settings.sum_noise_multiplier * (clip - strategy.clipping_norm) / n
        np.testing.assert_allclose(ours.numpy(), w + noise_gap, atol=1e-6, rtol=0, err_msg=f"round {t}")
        assert np.abs(noise_gap).max() > 1e-4  # the difference is there to state
        w, clip = ours.numpy().copy(), next_clip


def test_flowers_adaptive_clip_norm_runs_away_from_its_target(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every update of norm 1, C_0 = 0.1, no noise, gamma = 0.5, 30 rounds: fedaccel's C rises to the norm and
    stays near it; Flower's (every upload clipped: fraction 1 > 0.5, so C shrinks) falls to 0.1 e^-3."""
    strategies = pytest.importorskip("flwr.serverapp.strategy")
    flower_in_process(monkeypatch)
    n = 4
    strategy = strategies.DifferentialPrivacyServerSideAdaptiveClipping(
        strategies.FedAvg(), noise_multiplier=0.0, num_sampled_clients=n, initial_clipping_norm=0.1)
    settings, clip = adaptive(0.1, 0.0, n), 0.1
    w = np.zeros(DIM)
    unit = np.eye(DIM)[:n]
    for t in range(30):
        flower_round(strategy, t + 1, w, w + unit, seed=t)
        _, clip = step(settings, clip, torch.tensor(w), uploads(w, w + unit), t)
    assert strategy.clipping_norm == pytest.approx(0.1 * math.exp(-3.0), rel=1e-9)
    assert 0.9 <= clip <= 1.2


# --- client-side noise -------------------------------------------------------------------------------------------------


def test_each_client_clips_and_adds_its_share_and_the_shares_sum_to_the_central_noise() -> None:
    """noise: client, S = 1, z = 2, m = 4: a client uploads clip(delta) + N(0, (zS)^2 / m) (std 1 here), drawn from
    its own stream; the server only sums and divides by m, so the step's noise has std z S / m = 0.5, as with
    noise: server, and the uploads are independent."""
    settings = DPSettings(1.0, 2.0, 1e-5, 4, 1.0, "fixed", 10, "client")
    part = dp_mean(settings)
    big = torch.zeros(40_000, dtype=torch.float64)
    big[0] = 5.0  # norm 5: clipped to 1
    ctx = [ClientContext(info(3, 4), client=k, steps=1, uploads=True) for k in range(4)]
    sent = [part.upload(c, big, None) for c in ctx]
    for c, up in zip(ctx, sent, strict=True):
        share = up - torch.nn.functional.pad(torch.tensor([1.0], dtype=torch.float64), (0, 39_999))
        assert torch.allclose(share, dp.client_noise(c.info, c.client, big, 1.0), atol=1e-12, rtol=0)
        assert abs(float(share.std()) - 1.0) < 0.02 and abs(float(share.mean())) < 0.02
    assert abs(float(torch.corrcoef(torch.stack(sent[:2]))[0, 1])) < 0.02
    step_ = part.aggregate(info(3, 4), torch.zeros_like(big), [ClientUpdate(k, 1.0, 1, up) for k, up in enumerate(sent)])
    assert abs(float(step_[1:].std()) - 0.5) < 0.01 and float(step_[0]) == pytest.approx(-1.0 - float(
        sum(up[0] - 1.0 for up in sent)) / 4, abs=1e-12)
    # the server adds nothing of its own, and clips nothing again (the noised uploads are longer than S)
    assert all(float(torch.linalg.vector_norm(up)) > 100 for up in sent)


def test_a_client_noise_run_is_the_same_on_both_runtimes(tmp_path: Path) -> None:
    rows = {}
    for runtime in ("in-process", "stacked"):
        out = tmp_path / runtime
        assert main(["run", "--set", "model=softmax", "--set", "data.dataset=digits", "--set", "data.subset=400",
                     "--set", "data.clients=6", "--set", "train.rounds=2", "--set", "train.client_fraction=0.5",
                     "--set", "algorithm={name: bherd, alpha: 0.5, dp: {clip: 0.5, noise_multiplier: 1.0, noise: client}}",
                     "--set", f"run.runtime={runtime}", "--set", "run.progress=false", "--out", str(out)]) == 0
        rows[runtime] = [{k: v for k, v in json.loads(line).items() if k != "wall_s"}
                         for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert rows["in-process"] == rows["stacked"]


POPULATION = {"clients": 10, "fraction": 0.5, "sampling": "fixed", "rounds": 20}


@pytest.mark.parametrize(("spec", "says"), [
    ({"clip": 1.0, "noise_multiplier": 1.0, "noise": "client", "sampling": "bernoulli"}, "needs train.sampling: fixed"),
    ({"clip": "adaptive", "noise_multiplier": 1.0, "noise": "client"}, "takes a fixed clip"),
    ({"clip": "adaptive", "noise_multiplier": 1.0}, "z < 2 count_noise"),  # sigma_b = m / 20 = 0.25
    ({"clip": "adaptive", "noise_multiplier": 1.0, "count_noise": 1.0, "target_quantile": 1.5}, "target_quantile"),
    ({"clip": "adaptive", "noise_multiplier": 1.0, "count_noise": 1.0, "clip_lr": 0}, "clip_lr must be > 0"),
    ({"clip": 1.0, "noise_multiplier": 1.0, "clip_lr": 0.2}, "belongs to clip: adaptive"),
    ({"clip": 1.0, "noise_multiplier": 1.0, "noise": "both"}, "server or client"),
])
def test_a_bad_adaptive_or_client_setting_is_one_line(spec: dict, says: str) -> None:
    with pytest.raises(ConfigError, match=says) as err:
        build_algorithm("fedavg", dp={**POPULATION, **spec})
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("name", ["fedavg", "fedadam", "fedprox", "bherd", "grab-reorder"])
@pytest.mark.parametrize("extra", [{"clip": "adaptive", "count_noise": 1.0}, {"clip": 1.0, "noise": "client"}])
def test_both_forms_compose_with_the_mean_recipes_before_any_server_optimiser(name: str, extra: dict) -> None:
    algorithm = build_algorithm(name, dp={**POPULATION, **extra, "noise_multiplier": 0.5})
    names = [part.name for part in algorithm.parts]
    assert "dp" in names and names.index("dp") < (names.index("server_opt") if "server_opt" in names else len(names))


def test_an_adaptive_round_that_selects_nobody_still_releases_a_noised_step() -> None:
    """Bernoulli sampling may select no client; the round's noised step is still a release (the accountant counts
    every round), so the model moves by the noise alone and the clip norm by the noised empty count."""
    from fedaccel.engine.federation import Federation
    from fedaccel.engine.local import LocalOptions
    from fedaccel.engine.round import init_state, run_round

    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(16, 3, generator=g), torch.randint(0, 2, (16,), generator=g)
    fed = Federation(torch.nn.Linear(3, 2), x, y, [np.arange(k, 16, 4) for k in range(4)], x, y,
                     LocalOptions(lr=0.1, batch_size=2, sampling="bernoulli"), seed=0)
    algorithm = build_algorithm("fedavg", dp={"clip": "adaptive", "noise_multiplier": 0.5, "count_noise": 1.0,
                                              "clients": 4, "fraction": 0.25, "sampling": "bernoulli", "rounds": 5})
    state = init_state(algorithm, fed.model.theta.clone(), 4)
    after, report = run_round(algorithm, state, fed, fraction=1e-9)
    assert report.participation.upload == () and not torch.equal(after.w, state.w)
    assert after.server[0] != state.server[0]
