"""FedGSNR under client-level DP (fedaccel.algorithms.dp_plan): the private plan by hand, its clips, the accountant's
one Gaussian of z / 2, the defining property (a client's steps move with another client's data only through the
noised releases), the reduction to FedGSNR's own plan, and every combination outside the guarantee refused in one
line."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import fedaccel.algorithms.dp_plan as dp_plan
from fedaccel.algorithms.base import RoundInfo
from fedaccel.algorithms.dp import DPSettings, PlanClip, dp_settings, epsilon
from fedaccel.algorithms.fedgsnr import allocate_steps, fedgsnr_planning
from fedaccel.algorithms.registry import build_algorithm
from fedaccel.cli import main
from fedaccel.errors import ConfigError

pytest.importorskip("dp_accounting")

HUGE = 1e9
POPULATION = {"clients": 10, "fraction": 1.0, "sampling": "fixed", "rounds": 50}
PLAN_DP = {"clip": 1.0, "noise_multiplier": 2.0, "plan_clip": {"g": 1.0, "s": 1.0, "n": 1.0}, **POPULATION}


def info(clients: int = 2, round_: int = 0) -> RoundInfo:
    return RoundInfo(round=round_, lr=0.1, prev_lr=0.1, weights=np.full(clients, 1 / clients), seed=0)


def planner(*, g: float = HUGE, s: float = HUGE, n: float = HUGE, z: float = 0.0, m: float = 2, samples: int = 2,
            e_const: int = 100):  # type: ignore[no-untyped-def]
    part = dp_plan.private_planning(fedgsnr_planning(samples=samples, e_const=e_const), clip_g=g, clip_s=s, n_max=n,
                                    noise_multiplier=z, expected_uploads=m, samples=samples, e_const=e_const)
    return part.plan_server


def message(mean: list[float], var: list[float]) -> dict[str, torch.Tensor]:
    return {"mean": torch.tensor(mean, dtype=torch.float64), "var": torch.tensor(var, dtype=torch.float64)}


# g_0 = [2, 0], v_0 = [4, 0]; g_1 = [0, 1], v_1 = [0, 3]; B = 2, m = 2. Without noise or clipping:
# g^ = [1, 0.5]; s_0 = [8, 0], s_1 = [0, 4], s^ = [4, 2]; v^ = s^ - g^^2 = [3, 1.75]
# n_0 = (g_0.g^ + sqrt(v_0 v^)/B) / (|g_0|^2 + sum v_0 / B) = (2 + sqrt(12)/2) / 6
# n_1 = (0.5 + sqrt(3 * 1.75)/2) / (1 + 3/2)
TWO = {0: message([2.0, 0.0], [4.0, 0.0]), 1: message([0.0, 1.0], [0.0, 3.0])}
N0, N1 = (2 + math.sqrt(12) / 2) / 6, (0.5 + math.sqrt(5.25) / 2) / 2.5


def test_the_private_plan_without_noise_by_hand() -> None:
    instructions, diag = planner()(info(), TWO, None)
    assert math.isclose(diag["n"]["0"], N0, rel_tol=1e-12) and math.isclose(diag["n"]["1"], N1, rel_tol=1e-12)
    n_bar = (N0 + N1) / 2
    assert math.isclose(diag["plan_release"]["n_bar"], n_bar, rel_tol=1e-12)
    # E_k = round(100 n_k / n_bar): 97.17 -> 97 and 102.83 -> 103, each client on its own
    assert instructions == {0: {"steps": 97}, 1: {"steps": 103}}


def test_the_mean_gradients_are_clipped() -> None:
    # C_g = 1: g_0 clipped to [1, 0], g^ = [0.5, 0.5], v^ = [4, 2] - g^^2 = [3.75, 1.75]; n_0 from its raw g_0:
    # (2 * 0.5 + sqrt(4 * 3.75) / 2) / 6
    _, diag = planner(g=1.0)(info(), TWO, None)
    assert math.isclose(diag["n"]["0"], (1 + math.sqrt(15) / 2) / 6, rel_tol=1e-12)


def test_the_second_moments_are_clipped() -> None:
    # C_s = 2: s_0 = [8, 0] -> [2, 0], s_1 = [0, 4] -> [0, 2]; s^ = [1, 1], v^ = max(0, s^ - [1, 0.25]) = [0, 0.75]
    _, diag = planner(s=2.0)(info(), TWO, None)
    assert math.isclose(diag["n"]["0"], 2 / 6, rel_tol=1e-12)
    assert math.isclose(diag["n"]["1"], (0.5 + math.sqrt(3 * 0.75) / 2) / 2.5, rel_tol=1e-12)


def test_the_step_ratios_are_capped_at_n_max() -> None:
    # n_max = 0.63 caps n_1 (0.658): n_bar = (0.622 + 0.63) / 2; E = round(100 min(n_k, 0.63) / n_bar) = 99, 101
    instructions, diag = planner(n=0.63)(info(), TWO, None)
    assert math.isclose(diag["plan_release"]["n_bar"], (N0 + 0.63) / 2, rel_tol=1e-12)
    assert instructions == {0: {"steps": 99}, 1: {"steps": 101}}


def test_a_noised_n_bar_near_zero_gives_the_cap_m_e_const() -> None:
    # m = 4, E_const = 20: n_bar = 0.5 gives round(20 min(n, 1) / 0.5); n_bar <= 0 gives every n > 0 the cap 80
    assert dp_plan.private_steps(np.array([0.3, 5.0, 0.0, 0.01]), 0.5, 20, 1.0, 4).tolist() == [12, 40, 0, 0]
    assert dp_plan.private_steps(np.array([0.3, 5.0, 0.0, 0.01]), -2.0, 20, 1.0, 4).tolist() == [80, 80, 0, 80]


def test_the_releases_are_noised_with_z_times_each_clip() -> None:
    clients = {k: message([0.0] * 4000, [0.0] * 4000) for k in range(4)}  # every statistic 0: the releases are noise
    _, diag = planner(g=0.5, s=2.0, n=3.0, z=1.5, m=4)(info(4), clients, None)
    draw_g = dp_plan.plan_normal(info(4), "g", 4000)
    release = diag["plan_release"]
    assert math.isclose(release["g_norm"], float(np.linalg.norm(1.5 * 0.5 * draw_g / 4)), rel_tol=1e-12)
    assert math.isclose(release["n_bar"], 1.5 * 3.0 * dp_plan.plan_normal(info(4), "n", 1)[0] / 4, rel_tol=1e-12)
    draws = [dp_plan.plan_normal(info(4), name, 4000) for name in ("g", "s")]
    assert abs(float(np.corrcoef(*draws)[0, 1])) < 0.05  # the releases' draws are independent


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**31), st.floats(0.1, 10.0), st.floats(0.05, 5.0))
def test_a_clients_steps_move_with_another_clients_data_only_through_the_releases(
        seed: int, z: float, n_max: float) -> None:
    """The defining property: change client 1's raw statistics and the noise so that the three releases are the
    same; client 0's steps (and client 2's) do not move."""
    rng = np.random.default_rng(seed)
    d, clip_g, clip_s = 6, 1.0, 2.0

    def stats() -> dict[str, torch.Tensor]:
        return message(rng.normal(size=d).tolist(), rng.exponential(size=d).tolist())

    clients = {k: stats() for k in range(3)}
    changed = {**clients, 1: stats()}
    draws = {name: dp_plan.plan_normal(info(3), name, 1 if name == "n" else d) for name in dp_plan.RELEASES}
    plan = planner(g=clip_g, s=clip_s, n=n_max, z=z, m=3)

    def with_draws(found: dict[str, np.ndarray], messages: dict) -> tuple[dict, dict]:
        original = dp_plan.plan_normal
        dp_plan.plan_normal = lambda _info, name, _size: found[name]  # type: ignore[assignment]
        try:
            return plan(info(3), messages, None)
        finally:
            dp_plan.plan_normal = original

    steps, diag = with_draws(draws, clients)

    def stats_of(m: dict[str, torch.Tensor]) -> tuple[np.ndarray, np.ndarray]:
        return m["mean"].numpy(), m["var"].numpy()

    (g_a, v_a), (g_b, v_b) = stats_of(clients[1]), stats_of(changed[1])
    shifted = dict(draws)  # the draws that give the same releases with client 1 changed
    shifted["g"] = draws["g"] + (dp_plan.clipped_vector(g_a, clip_g) - dp_plan.clipped_vector(g_b, clip_g)) / (z * clip_g)
    shifted["s"] = draws["s"] + (dp_plan.clipped_vector(v_a + g_a**2, clip_s)
                                 - dp_plan.clipped_vector(v_b + g_b**2, clip_s)) / (z * clip_s)
    g_hat = np.array(_release_g(clients, clip_g, z, draws["g"]))
    s_hat = np.array(_release_s(clients, clip_s, z, draws["s"]))
    v_hat = np.maximum(0.0, s_hat - g_hat**2)
    n_a, n_b = (dp_plan.own_ratio(g, v, g_hat, v_hat, 2)[0] for g, v in ((g_a, v_a), (g_b, v_b)))
    shifted["n"] = draws["n"] + (min(n_a, n_max) - min(n_b, n_max)) / (z * n_max)
    steps_b, diag_b = with_draws(shifted, changed)
    for key in ("n_bar", "g_norm", "v_sum"):
        assert math.isclose(diag["plan_release"][key], diag_b["plan_release"][key], rel_tol=1e-9, abs_tol=1e-12)
    assert steps[0] == steps_b[0] and steps[2] == steps_b[2]


def _release_g(clients: dict, clip: float, z: float, draw: np.ndarray) -> list[float]:
    vectors = [m["mean"].numpy() for m in clients.values()]
    return list((sum(dp_plan.clipped_vector(x, clip) for x in vectors) + z * clip * draw) / len(vectors))


def _release_s(clients: dict, clip: float, z: float, draw: np.ndarray) -> list[float]:
    vectors = [m["var"].numpy() + m["mean"].numpy() ** 2 for m in clients.values()]
    return list((sum(dp_plan.clipped_vector(x, clip) for x in vectors) + z * clip * draw) / len(vectors))


@pytest.mark.parametrize("seed", range(5))
def test_without_noise_or_clipping_the_plan_is_fedgsnrs_own_up_to_rounding(seed: int) -> None:
    """z = 0, clips that clip nothing and no cap on n_k: FedGSNR's n_k at uniform weights, and its steps but for the
    rounding (each client half up here, largest remainder there)."""
    rng = np.random.default_rng(seed)
    k, d = 5, 30
    clients = {i: message(rng.normal(size=d).tolist(), rng.exponential(size=d).tolist()) for i in range(k)}
    own, own_diag = fedgsnr_planning(samples=8, e_const=20).plan_server(info(k), clients, None)
    n = np.array([own_diag["n"][str(i)] for i in range(k)])
    private, diag = planner(m=k, samples=8, e_const=20)(info(k), clients, None)
    assert np.allclose([diag["n"][str(i)] for i in range(k)], n, rtol=1e-9, atol=0)
    expected, _, _ = allocate_steps(n, k * 20)
    assert [own[i]["steps"] for i in range(k)] == expected.tolist()
    assert all(abs(private[i]["steps"] - own[i]["steps"]) <= 1 for i in range(k))


def test_the_accountant_is_handed_one_gaussian_of_z_over_2() -> None:
    import dp_accounting
    from dp_accounting.rdp import RdpAccountant

    dp = dp_settings(PLAN_DP)
    # every client every round, replace-one: the sum moves by 2 clips, the event's multiplier is z_eff / 2 = z / 4
    direct = RdpAccountant(neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE)
    direct.compose(dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(2.0 / 4), 50))
    assert math.isclose(epsilon(dp, 50), direct.get_epsilon(dp.delta), rel_tol=1e-9)
    plain = replace(dp, plan_clip=None)
    assert math.isclose(epsilon(dp, 50), epsilon(plain, 50, 1.0), rel_tol=1e-12)


def test_target_epsilon_doubles_the_noise_of_a_private_plan() -> None:
    spec = {key: value for key, value in PLAN_DP.items() if key != "noise_multiplier"}
    with_plan = dp_settings({**spec, "target_epsilon": 4.0})
    without = dp_settings({**{k: v for k, v in spec.items() if k != "plan_clip"}, "target_epsilon": 4.0})
    assert epsilon(with_plan, 50) <= 4.0
    assert math.isclose(with_plan.noise_multiplier, 2 * without.noise_multiplier, rel_tol=1e-3)


@pytest.mark.parametrize("name, spec, params, says", [
    ("fedgsnr", {"clip": 1.0, "noise_multiplier": 1.0, **POPULATION}, {}, "give algorithm.dp.plan_clip"),
    ("fedgsnr", {**PLAN_DP, "noise": "client"}, {}, "takes noise: server and a fixed clip"),
    ("fedgsnr", {**PLAN_DP, "clip": "adaptive"}, {}, "takes noise: server and a fixed clip"),
    ("fedgsnr-scaffold", PLAN_DP, {}, "'scaffold' keeps client state"),
    ("fedavg", PLAN_DP, {}, "has no FedGSNR plan"),
    ("fedgsnr", PLAN_DP, {"plan": "uniform"}, "plan: gsnr"),
    ("fedgsnr", {**PLAN_DP, "plan_clip": {"g": 1.0, "s": 1.0}}, {}, "plan_clip must be"),
    ("fedgsnr", {**PLAN_DP, "plan_clip": {"g": 1.0, "s": 0, "n": 1.0}}, {}, "plan_clip.s must be"),
    ("fedgsnr", {**PLAN_DP, "plan_clip": 3}, {}, "plan_clip must be"),
])
def test_what_the_private_plan_cannot_cover_is_one_line(name: str, spec: dict, params: dict, says: str) -> None:
    with pytest.raises(ConfigError, match=says) as err:
        build_algorithm(name, **params, dp=spec)
    assert "\n" not in str(err.value)


def test_fedgsnr_with_fedprox_takes_the_private_plan() -> None:
    parts = build_algorithm("fedgsnr-fedprox", dp=PLAN_DP).parts
    assert [p.name for p in parts] == ["fedgsnr", "fedprox", "dp"]
    assert parts[0].plan_server is not fedgsnr_planning().plan_server


_VALUES = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.floats(allow_nan=True, allow_infinity=True),
                    st.text(max_size=3), st.lists(st.integers(), max_size=2))


@settings(max_examples=100, deadline=None)
@given(st.one_of(_VALUES, st.dictionaries(st.sampled_from(["g", "s", "n", "x"]), _VALUES, max_size=4)))
def test_any_plan_clip_builds_or_is_one_line(plan_clip: object) -> None:
    try:
        algorithm = build_algorithm("fedgsnr", dp={**PLAN_DP, "plan_clip": plan_clip})
    except ConfigError as err:
        assert "\n" not in str(err) and "plan_clip" in str(err)
    else:
        assert [p.name for p in algorithm.parts] == ["fedgsnr", "dp"]


def test_a_private_fedgsnr_run_plans_the_same_on_the_stacked_runtime(tmp_path: Path) -> None:
    rows = {}
    for runtime in ("in-process", "stacked"):
        out = tmp_path / runtime
        assert main(["run", "--set", "model=softmax", "--set", "data.dataset=digits", "--set", "data.subset=400",
                     "--set", "data.clients=6", "--set", "train.rounds=2", "--set", "train.local_steps=3",
                     "--set", "algorithm={name: fedgsnr, samples: 8, e_const: 3, dp: {clip: 0.5, noise_multiplier: "
                     "1.0, plan_clip: {g: 1.0, s: 1.0, n: 1.0}}}",
                     "--set", f"run.runtime={runtime}", "--set", "run.progress=false", "--out", str(out)]) == 0
        rows[runtime] = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    # FedGSNR's runtimes agree to float32 rounding, not bit for bit (so without DP too): the plans and budget exactly
    for a, b in zip(rows["in-process"], rows["stacked"], strict=True):
        assert a.get("diag", {}).get("steps") == b.get("diag", {}).get("steps") and a["epsilon"] == b["epsilon"]
        assert math.isclose(a["train_loss"], b["train_loss"], rel_tol=1e-5)
    assert rows["stacked"][-1]["epsilon"] > 0 and rows["stacked"][-1]["diag"]["steps"]


def test_plan_clip_is_a_setting_of_dp_settings() -> None:
    dp = dp_settings(PLAN_DP)
    assert dp.plan_clip == PlanClip(1.0, 1.0, 1.0) and isinstance(dp, DPSettings)
    assert dp.round_noise_multiplier(2.0) == 1.0 and replace(dp, plan_clip=None).round_noise_multiplier(2.0) == 2.0


@pytest.mark.parametrize("r", [0.5, 1.0, 3.0])
def test_plan_noise_splits_the_budget_between_plan_and_model(r: float) -> None:
    """``plan_noise: r``: the plan's releases at r z, the model's sum at z; the accountant is handed one Gaussian
    with 1 / z_eff^2 = 1 / z^2 + 3 / (r z)^2 (halved again under replace-one), and target_epsilon calibrates the z
    whose z_eff is plain DP-FedAvg's at the same epsilon."""
    import dp_accounting
    from dp_accounting.rdp import RdpAccountant

    dp = dp_settings({**PLAN_DP, "plan_noise": r})
    z_eff = 1 / math.sqrt(1 / 2.0**2 + 3 / (r * 2.0) ** 2)
    direct = RdpAccountant(neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE)
    direct.compose(dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(z_eff / 2), 50))
    assert math.isclose(epsilon(dp, 50), direct.get_epsilon(dp.delta), rel_tol=1e-9)

    spec = {key: value for key, value in PLAN_DP.items() if key != "noise_multiplier"}
    calibrated = dp_settings({**spec, "plan_noise": r, "target_epsilon": 4.0})
    plain = dp_settings({**{k: v for k, v in spec.items() if k != "plan_clip"}, "target_epsilon": 4.0})
    assert epsilon(calibrated, 50) <= 4.0
    assert math.isclose(calibrated.round_noise_multiplier(calibrated.noise_multiplier), plain.noise_multiplier,
                        rel_tol=1e-3)


def test_the_plans_releases_are_noised_at_plan_noise_times_z() -> None:
    """Built from ``algorithm.dp``: with every statistic 0 the release g^ is r z C_g draw / m, the model's z untouched."""
    parts = build_algorithm("fedgsnr", samples=2, dp={**PLAN_DP, "plan_clip": {"g": 0.5, "s": 1.0, "n": 1.0},
                                                      "plan_noise": 3.0}).parts
    clients = {k: message([0.0] * 50, [0.0] * 50) for k in range(10)}
    _, diag = parts[0].plan_server(info(10), clients, None)
    draw = dp_plan.plan_normal(info(10), "g", 50)
    assert math.isclose(diag["plan_release"]["g_norm"], float(np.linalg.norm(3.0 * 2.0 * 0.5 * draw / 10)),
                        rel_tol=1e-12)


@settings(max_examples=60, deadline=None)
@given(_VALUES, st.booleans())
def test_any_plan_noise_builds_or_is_one_line(plan_noise: object, with_plan: bool) -> None:
    spec = {**PLAN_DP, "plan_noise": plan_noise}
    if not with_plan:
        del spec["plan_clip"]
    try:
        dp = dp_settings(spec)
    except ConfigError as err:
        assert "\n" not in str(err) and "plan_noise" in str(err)
    else:
        assert with_plan and (plan_noise is None or (isinstance(plan_noise, (int, float))
                                                     and not isinstance(plan_noise, bool) and plan_noise > 0))
        assert dp.plan_noise == (1.0 if plan_noise is None else plan_noise)
