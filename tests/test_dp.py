"""Client-level DP (fedaccel.algorithms.dp): the clipped and noised mean by hand, its reduction to FedAvg, the
bound on one client's influence, the noise's scale, the accountant against dp-accounting composed directly,
calibration, and every composition outside the guarantee refused in one line."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from fedaccel.algorithms.base import ClientUpdate, RoundInfo
from fedaccel.algorithms.dp import DPSettings, calibrate, dp_mean, dp_settings, epsilon, with_dp
from fedaccel.algorithms.registry import RECIPES, build_algorithm
from fedaccel.cli import main
from fedaccel.engine.federation import Federation
from fedaccel.engine.local import LocalOptions
from fedaccel.engine.round import init_state, round_info, run_round
from fedaccel.errors import ConfigError
from fedaccel.runs.config import build_algorithm_from, load_config

pytest.importorskip("dp_accounting")  # the privacy extra (make install has it; the GPU machine may not)

POPULATION = {"clients": 10, "fraction": 0.5, "sampling": "bernoulli", "rounds": 20}


def plain(clip: float, z: float = 0.0, clients: int = 2, fraction: float = 1.0, sampling: str = "fixed") -> DPSettings:
    return DPSettings(clip, z, 1e-5, clients, fraction, sampling, 10)


def info(round_: int = 0, seed: int = 0) -> RoundInfo:
    return RoundInfo(round=round_, lr=0.1, prev_lr=0.1, weights=np.full(4, 0.25), seed=seed)


def upload(client: int, delta: list[float]) -> ClientUpdate:
    return ClientUpdate(client, 1.0, 1, torch.tensor(delta, dtype=torch.float64), {}, {})


def test_the_clipped_mean_by_hand() -> None:
    # [3, 4] has norm 5 -> clipped to [0.6, 0.8]; [0, 1] is within S = 1; m = 2: step [0.3, 0.9]
    step = dp_mean(plain(clip=1.0)).aggregate(info(), torch.zeros(2, dtype=torch.float64),
                                              [upload(0, [3.0, 4.0]), upload(1, [0.0, 1.0])])
    assert torch.allclose(step, torch.tensor([-0.3, -0.9], dtype=torch.float64), atol=1e-15)


def _federation(clients: int = 4) -> Federation:
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(clients * 12, 5, generator=g), torch.randint(0, 2, (clients * 12,), generator=g)
    parts = [np.arange(k, clients * 12, clients) for k in range(clients)]  # equal sizes: data weights are uniform
    return Federation(torch.nn.Linear(5, 2), x, y, parts, x, y, LocalOptions(lr=0.1, batch_size=4), seed=0)


def test_without_noise_and_with_a_clip_no_upload_reaches_it_is_fedavg() -> None:
    fed = _federation()
    fedavg = build_algorithm("fedavg")
    private = with_dp(fedavg, plain(clip=1e9, clients=4))
    a, b = init_state(fedavg, fed.model.theta.clone(), 4), init_state(private, fed.model.theta.clone(), 4)
    for _ in range(3):
        a, _ = run_round(fedavg, a, fed)
        b, _ = run_round(private, b, fed)
    assert float((a.w - b.w).abs().max()) <= 1e-6


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.floats(-1e3, 1e3), min_size=3, max_size=3), min_size=1, max_size=6),
       st.lists(st.floats(-1e3, 1e3), min_size=3, max_size=3), st.floats(0.01, 10.0), st.integers(0, 5))
def test_replacing_one_client_moves_the_noiseless_step_by_at_most_2_s_over_m(
        deltas: list[list[float]], other: list[float], clip: float, which: int) -> None:
    """The defining property: one client's upload, whatever it is, moves the sum by at most 2S (replace-one)."""
    dp = plain(clip=clip, clients=len(deltas))
    w = torch.zeros(3, dtype=torch.float64)
    ups = [upload(k, d) for k, d in enumerate(deltas)]
    swapped = list(ups)
    swapped[which % len(ups)] = upload(which % len(ups), other)
    a, b = (dp_mean(dp).aggregate(info(), w, u) for u in (ups, swapped))
    assert float(torch.linalg.vector_norm(a - b)) * dp.expected_uploads <= 2 * clip * (1 + 1e-9)


def test_the_noise_has_the_stated_scale_and_is_the_same_on_every_runtime() -> None:
    dp = plain(clip=2.0, z=1.0, clients=8, fraction=0.5)  # m = 4: std of the step zS/m = 0.5
    zero = torch.zeros(40_000, dtype=torch.float64)
    ups = [upload(k, [0.0] * 40_000) for k in range(4)]
    step = dp_mean(dp).aggregate(info(3), zero, ups)
    assert abs(float(step.std()) - 0.5) < 0.5 * 0.02 and abs(float(step.mean())) < 0.02
    assert torch.equal(step, dp_mean(dp).aggregate(info(3), zero, ups))  # drawn from (seed, round)
    assert not torch.equal(step, dp_mean(dp).aggregate(info(4), zero, ups))


@pytest.mark.parametrize("sampling", ["bernoulli", "fixed"])
def test_epsilon_is_dp_accountings_own_composition(sampling: str) -> None:
    import dp_accounting

    from fedaccel.algorithms.dp import _accountant, _event

    dp = dp_settings({"clip": 1.0, "noise_multiplier": 1.5, **POPULATION, "sampling": sampling})
    values = [epsilon(dp, t) for t in (0, 1, 5, 20)]
    assert values[0] == 0 and values[1] < values[2] < values[3]
    direct = _accountant(dp)
    direct.compose(dp_accounting.SelfComposedDpEvent(_event(dp, 1.5, 1).event, 20))
    assert math.isclose(values[3], direct.get_epsilon(dp.delta), rel_tol=1e-9)
    assert epsilon(replace(dp, noise_multiplier=3.0), 20) < values[3]


def test_target_epsilon_calibrates_the_smallest_noise_that_meets_it() -> None:
    dp = dp_settings({"clip": 1.0, "target_epsilon": 3.0, **POPULATION})
    assert epsilon(dp, POPULATION["rounds"]) <= 3.0 < epsilon(dp, POPULATION["rounds"], dp.noise_multiplier * 0.97)
    assert calibrate(replace(dp, noise_multiplier=0.0), 3.0) == dp.noise_multiplier


@settings(max_examples=12, deadline=None)
@given(sampling=st.sampled_from(["fixed", "bernoulli"]), rounds=st.integers(1, 500),
       excess=st.floats(1.0, 1e12, allow_nan=False))
def test_a_target_epsilon_met_by_the_least_noise_searched_is_one_line(sampling: str, rounds: int,
                                                                       excess: float) -> None:
    """A target at or above epsilon(z = the least z searched) has no bracket to search in: one line naming it (it
    was dp-accounting's NoBracketIntervalFoundError, or 'math domain error' said as 'cannot be met')."""
    from fedaccel.algorithms import dp as module

    population = {**POPULATION, "sampling": sampling, "rounds": rounds}
    least = module._run_epsilon(replace(dp_settings({"clip": 1.0, "noise_multiplier": 1.0, **population}),
                                        noise_multiplier=0.0), module.LEAST_SEARCHED)
    with pytest.raises(ConfigError, match=r"is met .* by noise multipliers down to 0\.01.*give a smaller"):
        dp_settings({"clip": 1.0, "target_epsilon": least * excess, **population})


def test_a_known_noise_multiplier_is_used_only_where_the_search_would_find_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """The table of calibrations gives the search's own z without searching; an entry off by more than the
    tolerance either way, or not a number, is passed over for the search."""
    from fedaccel.algorithms import dp as module

    settings = replace(dp_settings({"clip": 1.0, "noise_multiplier": 1.0, **POPULATION}), noise_multiplier=0.0)
    z = module.search_noise_multiplier(settings, 3.0)
    key = module.calibration_key(settings, 3.0)
    searched: list[float] = []
    monkeypatch.setattr(module, "search_noise_multiplier", lambda s, t: searched.append(t) or -1.0)
    for entry, used in ((z, True), (z + 3 * module.CALIBRATION_TOL, False), (z - 3 * module.CALIBRATION_TOL, False),
                        ("1.5", False), (float("nan"), False)):
        monkeypatch.setattr(module, "_table", lambda entry=entry: {key: entry})
        before = len(searched)
        assert module.calibrate.__wrapped__(settings, 3.0) == (z if used else -1.0), entry
        assert len(searched) == before + (not used), entry
    plan = replace(settings, plan_clip=module.PlanClip(1.0, 1.0, 2.0))
    others = [replace(settings, rounds=21), replace(settings, clients=11), replace(settings, fraction=0.25),
              replace(settings, delta=1e-6), replace(settings, sampling="fixed"), plan, replace(plan, plan_noise=2.0)]
    keys = {module.calibration_key(s, 3.0) for s in [settings, *others]} | {module.calibration_key(settings, 2.0)}
    assert len(keys) == len(others) + 2  # each input of the event, and the target, makes a key of its own


def test_every_target_epsilon_the_repository_asks_for_is_in_the_table(monkeypatch: pytest.MonkeyPatch) -> None:
    """Loading the privacy experiments searches for no noise multiplier: each is a checked entry of
    fedaccel/algorithms/dp_calibrations.json (else: run scripts/dp_calibrations.py)."""
    from fedaccel.algorithms import dp as module
    from fedaccel.grids.experiment import load_experiment

    def refused(settings: DPSettings, target: float) -> float:
        raise AssertionError(f"no checked entry for {module.calibration_key(settings, target)}: run "
                             "`PYTHONPATH=. python scripts/dp_calibrations.py` and commit the table")

    monkeypatch.setattr(module, "search_noise_multiplier", refused)
    module.calibrate.cache_clear()  # no answer from an earlier test (nor one of this test's for a later one)
    root = Path(__file__).resolve().parents[1]
    asking = [f for f in sorted(root.glob("experiments/**/*.yaml")) if "target_epsilon" in f.read_text()]
    assert asking
    try:
        for file in asking:
            load_experiment(file)
    finally:
        module.calibrate.cache_clear()


COVERED = {"fedavg", "fedavgm", "fedadagrad", "fedadam", "fedyogi", "centralized", "fedprox", "bherd", "bherd-fedavg",
           "grab-reorder", "bherd-fedprox"}


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_dp_composes_with_the_mean_recipes_and_refuses_the_rest_in_one_line(name: str) -> None:
    dp = {"clip": 1.0, "noise_multiplier": 1.0, **POPULATION}
    if name in COVERED:
        assert any(p.name == "dp" for p in build_algorithm(name, dp=dp).parts)
    else:
        with pytest.raises(ConfigError, match="algorithm.dp cannot cover") as err:
            build_algorithm(name, dp=dp)
        assert "\n" not in str(err.value)
        if "give algorithm.dp.plan_clip" in str(err.value):  # the hint, followed, covers the recipe (fedgsnr-scaffold
            plan = {"plan_clip": {"g": 1.0, "s": 1.0, "n": 100}}  # was hinted, then refused for SCAFFOLD's state)
            assert any(p.name == "dp" for p in build_algorithm(name, dp={**dp, **plan}).parts)


@pytest.mark.parametrize("declared", [False, True])
def test_a_server_end_that_reads_the_uploads_is_refused_unless_it_declares_it_reads_only_the_models(
        declared: bool) -> None:
    """A part's server_end is given every raw upload, unclipped (a new user's plugin printed norms 10x the clip,
    and the run still wrote epsilon): DP refuses it at load, naming the part, unless the part declares
    ``models_only`` (what the server optimisers declare: they read w and w_next, the noised mean's model)."""
    from fedaccel.algorithms.base import Part, compose
    from fedaccel.algorithms.mean import mean_aggregate

    def step_size_from_norms(info, w, w_next, updates, ss):  # FedExP's kind of step: individual update norms
        scale = sum(float(u.delta.norm()) ** 2 for u in updates)
        return w + (w_next - w) * (1 + scale), ss

    mine = Part(name="extrapolation", server_end=step_size_from_norms, models_only=declared)
    algorithm = compose("mine", mean_aggregate(weighting="uniform"), mine)
    twin = compose("mine", mean_aggregate(weighting="uniform"), mine, Part(name="extrapolation"))
    if not declared:  # a harmless part of the same name after it hides nothing (a check keyed by name let it by)
        with pytest.raises(ConfigError, match="its part 'extrapolation' reads the individual uploads"):
            with_dp(twin, plain(1.0, 1.0))
    if declared:
        assert [p.name for p in with_dp(algorithm, plain(1.0, 1.0)).parts] == ["dp", "extrapolation"]
    else:
        with pytest.raises(ConfigError, match="algorithm.dp cannot cover mine: its part 'extrapolation' reads the "
                                              "individual uploads in its server_end") as err:
            with_dp(algorithm, plain(1.0, 1.0))
        assert "\n" not in str(err.value)


@pytest.mark.parametrize("spec, says", [
    ({"clip": 1.0}, "exactly one of noise_multiplier"),
    ({"clip": 1.0, "noise_multiplier": 1.0, "target_epsilon": 2.0}, "exactly one of"),
    ({"clip": 0, "noise_multiplier": 1.0}, "clip"),
    ({"clip": 1.0, "noise_multiplier": 0.0}, "guarantees nothing"),
    ({"clip": 1.0, "noise_multiplier": 1.0, "delta": 1.5}, "delta must be in"),
    ({"clip": 1.0, "noise_multiplier": 1.0, "delta": 0.1}, r"delta must be below 1/N = 1/10 \(data.clients\)"),
    ({"clip": 1.0, "noise_multiplier": True}, "finite number"),
    ({"clip": 1.0, "noise_multiplier": 1.0, "sigma": 2}, "no option 'sigma'"),
    ({"clip": 1.0, "noise_multiplier": 1.0, "clients": 3}, "the run's own"),
    ("strong", "must be a mapping"),
])
def test_a_bad_dp_setting_is_one_line_at_load(spec: object, says: str) -> None:
    overrides = ["data.dataset=digits", "model=softmax", "data.clients=10", f"algorithm={json.dumps({'name': 'fedavg', 'dp': spec})}"]
    with pytest.raises(ConfigError, match=says) as err:
        build_algorithm_from(load_config(None, overrides))
    assert "\n" not in str(err.value)


def test_a_run_writes_epsilon_in_every_row_and_the_summary(tmp_path: Path) -> None:
    config = tmp_path / "dp.yaml"
    config.write_text("model: softmax\ndata: {dataset: digits, clients: 10, subset: 400}\n"
                      "train: {rounds: 3, lr: 0.1, batch_size: 20, client_fraction: 0.5, sampling: bernoulli}\n"
                      "algorithm: {name: fedavg, dp: {clip: 1.0, noise_multiplier: 1.2, delta: 0.001}}\n"
                      "run: {progress: false}\n")
    assert main(["run", str(config), "--out", str(tmp_path / "run")]) == 0
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    dp = dp_settings({"clip": 1.0, "noise_multiplier": 1.2, "delta": 0.001, "clients": 10, "fraction": 0.5,
                      "sampling": "bernoulli", "rounds": 3})
    assert [row["epsilon"] for row in rows] == [epsilon(dp, row["round"]) for row in rows]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["final"]["epsilon"] == rows[-1]["epsilon"] > 0
    assert summary["dp_noise_multiplier"] == 1.2


def test_the_noise_multiplier_a_target_epsilon_calibrates_is_said_and_kept(tmp_path: Path, capsys) -> None:
    """A new user's target_epsilon: 0.001 trained at chance with epsilon 0 in every row, and the z it was calibrated
    to (about 2.8e5: noise that swamps every update) was in no output; a paper needs z."""
    base = ["data.dataset=digits", "model=softmax", "data.clients=10", "train.rounds=2", "train.client_fraction=0.5",
            "run.progress=true"]
    config = load_config(None, [*base, "algorithm.dp={clip: 1.0, target_epsilon: 2.0}"])
    z = dp_settings({"clip": 1.0, "target_epsilon": 2.0, "clients": 10, "fraction": 0.5, "sampling": "fixed",
                     "rounds": 2}).noise_multiplier
    assert main(["run", "--out", str(tmp_path / "run"), *[a for item in config_args(base) for a in item],
                 "--set", "algorithm.dp={clip: 1.0, target_epsilon: 2.0}"]) == 0
    assert f"client-level DP noise multiplier z = {z:.4g} (calibrated to epsilon 2)" in capsys.readouterr().err
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["dp_noise_multiplier"] == z
    assert config.algorithm["dp"]["target_epsilon"] == 2.0  # the config keeps what was asked, not z


def config_args(overrides: list[str]) -> list[tuple[str, str]]:
    return [("--set", item) for item in overrides]


def test_the_stacked_runtime_gives_the_numbers_of_in_process(tmp_path: Path) -> None:
    rows = {}
    for runtime in ("in-process", "stacked"):
        out = tmp_path / runtime
        assert main(["run", "--set", "model=softmax", "--set", "data.dataset=digits", "--set", "data.subset=400",
                     "--set", "data.clients=6", "--set", "train.rounds=2", "--set", "train.client_fraction=0.5",
                     "--set", "algorithm={name: bherd, alpha: 0.5, dp: {clip: 0.5, noise_multiplier: 1.0}}",
                     "--set", f"run.runtime={runtime}", "--set", "run.progress=false", "--out", str(out)]) == 0
        rows[runtime] = [{k: v for k, v in json.loads(line).items() if k != "wall_s"}
                         for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert rows["in-process"] == rows["stacked"]


def test_compare_says_the_budget_each_method_spent(tmp_path: Path) -> None:
    from fedaccel.report.tables import compare_table

    base = ["--set", "model=softmax", "--set", "data.dataset=digits", "--set", "data.subset=300", "--set",
            "data.clients=6", "--set", "train.rounds=2", "--set", "train.sampling=bernoulli", "--set",
            "train.client_fraction=0.5", "--set", "run.progress=false"]
    assert main(["run", *base, "--out", str(tmp_path / "plain")]) == 0
    assert main(["run", *base, "--set", "algorithm={name: fedavg, dp: {clip: 1.0, noise_multiplier: 2.0, delta: 0.01}}",
                 "--out", str(tmp_path / "private")]) == 0
    table = compare_table([tmp_path / "plain", tmp_path / "private"], [0.5])
    spent = json.loads((tmp_path / "private" / "summary.json").read_text())["final"]["epsilon"]
    header, _, plain_row, private_row = table.splitlines()[:4]
    assert "client ε (δ) spent" in header and "| no DP |" in plain_row and f"| {spent:.3g} (0.01) |" in private_row


_VALUES = st.one_of(st.none(), st.booleans(), st.integers(-10, 10), st.floats(allow_nan=True, allow_infinity=True),
                    st.text(max_size=5), st.lists(st.integers(), max_size=2),
                    st.sampled_from(["adaptive", "client", "server"]))


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(st.sampled_from(["clip", "noise_multiplier", "delta", "sigma", "", "clients", "noise",
                                        "count_noise", "target_quantile", "clip_lr", "initial_clip"]), _VALUES,
                       max_size=5))
@example({"clip": "adaptive", "noise_multiplier": None, "target_quantile": None})  # a TypeError, once (null = default)
def test_any_dp_mapping_builds_or_is_one_line(spec: dict) -> None:
    """A hand-written algorithm.dp (any keys, any values) gives a DP algorithm or one ConfigError line, never
    another exception (target_epsilon, whose calibration takes a second, is covered by the cases above)."""
    try:
        algorithm = build_algorithm("fedavg", dp={**spec, **POPULATION} if "clients" not in spec else spec)
    except ConfigError as err:
        assert "\n" not in str(err) and str(err)
    else:
        assert any(p.name == "dp" for p in algorithm.parts)


def test_a_private_plan_is_refused_where_every_client_trains() -> None:
    """fedgsnr-fedumf: FedUMF has every client train, so the private plan's releases would be of all N clients, not
    of the accountant's sample of uploaders; refused in one line. FedGSNR with BHerd, whose trainers are the
    uploaders, keeps its private plan."""
    dp = {"clip": 1.0, "noise_multiplier": 1.0, **POPULATION, "plan_clip": {"g": 1.0, "s": 1.0, "n": 100}}
    with pytest.raises(ConfigError, match="plan_clip cannot cover fedgsnr-fedumf: its part 'fedumf' chooses who "
                                          "trains") as err:
        build_algorithm("fedgsnr-fedumf", dp=dp, fraction=0.5)
    assert "\n" not in str(err.value)
    assert [p.name for p in build_algorithm("fedgsnr-bherd", dp=dp).parts] == ["fedgsnr", "bherd", "dp"]
    without = {key: value for key, value in dp.items() if key != "plan_clip"}  # no hint that would be refused too
    with pytest.raises(ConfigError, match="its part 'fedgsnr' sends planning statistics to the server;") as err:
        build_algorithm("fedgsnr-fedumf", dp=without, fraction=0.5)
    assert "give algorithm.dp.plan_clip" not in str(err.value)


def test_fedumf_with_bherd_is_covered_when_its_c_draws_the_accountants_sample() -> None:
    """As FedUMF alone: its uploaders are FedAvg's sample at C, its stored update stays on the client, and BHerd's
    herd is the upload the DP mean clips; another C is refused."""
    dp = {"clip": 1.0, "noise_multiplier": 1.0, **POPULATION}
    assert [p.name for p in build_algorithm("fedumf-bherd", dp=dp, fraction=0.5).parts] == ["fedumf", "bherd", "dp"]
    with pytest.raises(ConfigError, match="where the accountant's Bernoulli rate is 0.5"):
        build_algorithm("fedumf-bherd", dp=dp, fraction=0.2)


def test_a_resume_keeps_the_rounds_a_target_epsilon_was_calibrated_for(tmp_path: Path, capsys) -> None:
    """config.yaml's train.rounds edited from 2 to 4 under a target_epsilon run: the resume recalibrated z for 4
    rounds, and every row's epsilon, summary's too, was computed as if all rounds had the new z (a reported 8 where
    the truth was 10.2). Refused now, naming why; a given noise_multiplier may still run more rounds (epsilon grows
    with them), and no run is cut below its checkpoint."""
    import yaml

    base = ["data.dataset=digits", "model=softmax", "data.clients=10", "data.subset=300", "train.rounds=2",
            "train.client_fraction=0.5", "run.progress=false"]
    for dp, more_allowed in (("{clip: 1.0, target_epsilon: 8.0}", False), ("{clip: 1.0, noise_multiplier: 1.5}", True)):
        out = tmp_path / ("target" if not more_allowed else "given")
        assert main(["run", *[a for o in [*base, f"algorithm.dp={dp}"] for a in ("--set", o)], "--out", str(out)]) == 0
        config = yaml.safe_load((out / "config.yaml").read_text())
        config["train"]["rounds"] = 4
        (out / "config.yaml").write_text(yaml.safe_dump(config))
        capsys.readouterr()
        assert main(["run", "--resume", str(out)]) == (0 if more_allowed else 2)
        if more_allowed:
            rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
            assert [row["round"] for row in rows] == [0, 1, 2, 3, 4] and rows[4]["epsilon"] > rows[2]["epsilon"]
        else:
            err = capsys.readouterr().err
            assert "in train.rounds (train.rounds: 2 then, 4 now)" in err and "target_epsilon calibrated" in err
            assert err.count("\n") == 1
    config["train"]["rounds"] = 1
    (out / "config.yaml").write_text(yaml.safe_dump(config))
    assert main(["run", "--resume", str(out)]) == 2
    assert "has train.rounds = 1, below its checkpoint's round 4: a run is never cut short" in capsys.readouterr().err


def test_a_run_diverging_under_dp_names_the_noise_beside_the_learning_rate(tmp_path: Path, capsys) -> None:
    """A clip of 1e300 makes noise of 1e300: the line blamed the learning rate alone (helper)."""
    args = ["--set", "data.dataset=digits", "--set", "model=svm", "--set", "data.clients=20", "--set",
            "train.rounds=1", "--set", "run.progress=false", "--set",
            "algorithm.dp={clip: 1.0e+300, noise_multiplier: 1.1, delta: 1.0e-5}"]
    assert main(["run", *args, "--out", str(tmp_path / "wild")]) != 0
    err = capsys.readouterr().err
    assert "diverged at round 1" in err and "or algorithm.dp's noise, z times its clip (1e+300)?" in err, err
