"""FedUMF under client-level DP (fedaccel.algorithms.dp): admitted when its authorisation is the accountant's
sample (fixed-size or Bernoulli) and nothing but the update goes up; refused, in one line, when either differs; the accountant's
q is the fraction of clients that upload; with no noise and a clip nobody reaches it is FedUMF with uniform
weighting; the fused upload is clipped as a whole; and a client that is not authorised adds nothing to the round."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fedaccel.algorithms.base import ClientUpdate, Part, Participation, RoundInfo, compose
from fedaccel.algorithms.dp import AdaptiveClip, DPSettings, dp_mean, dp_settings, epsilon, with_dp
from fedaccel.algorithms.mean import mean_aggregate
from fedaccel.algorithms.registry import build_algorithm
from fedaccel.algorithms.sampling import sample_clients
from fedaccel.engine.federation import Federation
from fedaccel.engine.round import FLState, init_state, round_info, run_round
from fedaccel.errors import ConfigError
from fedaccel.runs.config import build_algorithm_from, dp_with_population, load_config
from test_fedumf import naive_local
from tiny_models import linear_federation

dp_accounting = pytest.importorskip("dp_accounting")  # the privacy extra (make install has it)

SIZES = (3, 4, 5, 6)  # unequal: data weighting is not uniform, tau_i differ


def population(clients: int = 20, fraction: float = 0.1, sampling: str = "fixed") -> dict[str, object]:
    return {"clip": 1.0, "noise_multiplier": 1.0, "clients": clients, "fraction": fraction, "sampling": sampling,
            "rounds": 10}


def noiseless(clip: float, clients: int = 4, fraction: float = 0.5) -> DPSettings:
    """z = 0 (dp_settings refuses it: no guarantee; here it isolates the clipping)."""
    return DPSettings(clip, 0.0, 1e-5, clients, fraction, "fixed", 10)


@pytest.mark.parametrize("name", ["fedumf", "fedumf-fedprox"])
def test_fedumf_is_admitted_when_its_uploaders_are_the_accountants_sample(name: str) -> None:
    names = [p.name for p in build_algorithm(name, fraction=0.1, dp=population()).parts]
    assert "fedumf" in names and "dp" in names and "mean" not in names


@pytest.mark.parametrize("name, part", [("fedumf-scaffold", "scaffold"), ("fedumf-feddc", "feddc"),
                                        ("scaffold", "scaffold"), ("feddyn", "feddyn"), ("feddc", "feddc")])
def test_control_variates_and_states_that_go_up_stay_refused(name: str, part: str) -> None:
    with pytest.raises(ConfigError, match=f"its part '{part}' keeps client state whose extras go up") as err:
        build_algorithm(name, dp=population(fraction=0.1))
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("fraction, spec, says", [
    (0.2, population(), r"uploads 4 clients a round \(its fraction C = 0.2\) where the accountant samples 2 of 20"),
    (0.2, population(sampling="bernoulli"),
     r"upload with probability C = 0.2 where the accountant's Bernoulli rate is 0.1 \(train.client_fraction\)"),
    (0.12, population(sampling="bernoulli"), "probability C = 0.12 where the accountant's Bernoulli rate is 0.1"),
])
def test_an_authorisation_other_than_the_accountants_is_one_line(fraction: float, spec: dict, says: str) -> None:
    with pytest.raises(ConfigError, match=says) as err:
        build_algorithm("fedumf", fraction=fraction, dp=spec)
    assert "\n" not in str(err.value) and "algorithm.dp cannot cover fedumf: its part 'fedumf'" in str(err.value)


def test_a_fraction_that_rounds_to_the_same_sample_is_the_same_mechanism() -> None:
    """0.1 and 0.12 of 20 both authorise round(C N) = 2 clients: the same sampled-without-replacement event."""
    assert any(p.name == "dp" for p in build_algorithm("fedumf", fraction=0.12, dp=population()).parts)


def _config(*overrides: str) -> list[str]:
    return ["data.dataset=digits", "model=softmax", "data.clients=10", "train.client_fraction=0.2", *overrides]


@pytest.mark.parametrize("overrides, says", [
    (["algorithm={name: fedumf, fraction: 0.5, dp: {clip: 1.0, noise_multiplier: 1.0}}"], "its fraction C = 0.5"),
    (["train.participation=[[0, 1]]", "train.client_fraction=1",
      "algorithm={name: fedumf, dp: {clip: 1.0, noise_multiplier: 1.0}}"], "train.participation fixes them"),
    (["train.sampling=bernoulli", "algorithm={name: fedumf, fraction: 0.5, dp: {clip: 1.0, noise_multiplier: 1.0}}"],
     "the accountant's Bernoulli rate is 0.2"),
])
def test_from_a_config_each_difference_is_named_in_one_line(overrides: list[str], says: str) -> None:
    with pytest.raises(ConfigError, match=says) as err:
        build_algorithm_from(load_config(None, _config(*overrides)))
    assert "\n" not in str(err.value)


def test_a_participation_or_client_end_that_declares_nothing_is_refused() -> None:
    dp = DPSettings(1.0, 1.0, 1e-5, 4, 0.5, "fixed", 10)
    chooser = Part("chooser", participation=lambda info: Participation((0, 1), (0,)))
    keeper = Part("keeper", init_client=lambda _w: 0, client_end=lambda *args: (0, {}))
    for part, says in ((chooser, "chooses who takes part"), (keeper, "keeps client state whose extras go up")):
        with pytest.raises(ConfigError, match=f"its part '{part.name}' {says}"):
            with_dp(compose("own", part, mean_aggregate()), dp)


@settings(max_examples=80, deadline=None)
@given(st.integers(1, 60), st.floats(0.001, 1.0), st.floats(0.001, 1.0), st.sampled_from(["fixed", "bernoulli"]))
def test_fedumf_is_admitted_exactly_when_its_sample_is_the_accountants(clients: int, own: float, accounted: float,
                                                                      sampling: str) -> None:
    """Any population, any pair of fractions: admitted iff both draw the same sample (fixed-size: the same number
    of clients; Bernoulli: the same probability), else one ConfigError line."""
    settings_ = DPSettings(1.0, 1.0, 1e-5, clients, accounted, sampling, 10)
    same = own == accounted if sampling == "bernoulli" else \
        replace(settings_, fraction=own).expected_uploads == settings_.expected_uploads
    algorithm = build_algorithm("fedumf", fraction=own)
    try:
        with_dp(algorithm, settings_)
    except ConfigError as err:
        assert not same and "\n" not in str(err)
    else:
        assert same


def test_the_accountants_q_is_the_fraction_of_clients_that_upload() -> None:
    """The epsilon a FedUMF run reports is dp-accounting's sampled-without-replacement Gaussian for the number of
    clients the run's own rounds authorised, of N; another q gives another epsilon."""
    config = load_config(None, _config("algorithm={name: fedumf, dp: {clip: 1.0, noise_multiplier: 1.5}}",
                                       "train.rounds=6"))
    dp = dp_settings(dp_with_population(config))
    algorithm = build_algorithm_from(config)
    fed = linear_federation((3,) * 10)
    state = init_state(algorithm, fed.model.theta.clone(), 10)
    uploaded = set()
    for _ in range(6):
        info = round_info(fed, state.round)
        state, report = run_round(algorithm, state, fed)
        assert report.participation.train == tuple(range(10))  # everybody trains ...
        assert report.participation.upload == sample_clients(info, 0.2)  # ... FedAvg's sample uploads
        uploaded.add(len(report.participation.upload))
    (m,) = uploaded

    def accounted(of: int) -> float:
        accountant = dp_accounting.rdp.RdpAccountant(neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE)
        step = dp_accounting.SampledWithoutReplacementDpEvent(10, of, dp_accounting.GaussianDpEvent(1.5 / 2))
        return accountant.compose(dp_accounting.SelfComposedDpEvent(step, 6)).get_epsilon(dp.delta)

    assert epsilon(dp, 6) == pytest.approx(accounted(m), rel=1e-9)
    assert abs(accounted(m + 1) - accounted(m)) > 0.05 * accounted(m)  # the test tells another q apart


def test_under_bernoulli_sampling_fedavgs_sample_uploads_and_the_accountant_is_poisson_at_c() -> None:
    """``train.sampling: bernoulli``: everybody trains, the clients FedAvg's Bernoulli sampling draws upload (their
    number varies, a round may have none), and the epsilon is dp-accounting's Poisson-subsampled Gaussian at q = C
    under add-or-remove-one; another q gives another epsilon."""
    config = load_config(None, _config("algorithm={name: fedumf, dp: {clip: 1.0, noise_multiplier: 1.5}}",
                                       "train.sampling=bernoulli", "train.rounds=8"))
    dp = dp_settings(dp_with_population(config))
    algorithm = build_algorithm_from(config)
    fed = linear_federation((3,) * 10, sampling="bernoulli")
    state = init_state(algorithm, fed.model.theta.clone(), 10)
    counts = set()
    for _ in range(8):
        info = round_info(fed, state.round)
        assert info.sampling == "bernoulli"
        state, report = run_round(algorithm, state, fed)
        assert report.participation.train == tuple(range(10))
        assert report.participation.upload == sample_clients(info, 0.2)
        counts.add(len(report.participation.upload))
    assert len(counts) > 1  # Bernoulli: the number of uploaders varies

    def accounted(q: float) -> float:
        accountant = dp_accounting.rdp.RdpAccountant(
            neighboring_relation=dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE)
        step = dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(1.5))
        return accountant.compose(dp_accounting.SelfComposedDpEvent(step, 8)).get_epsilon(dp.delta)

    assert epsilon(dp, 8) == pytest.approx(accounted(0.2), rel=1e-9)
    assert abs(accounted(0.25) - accounted(0.2)) > 0.05 * accounted(0.2)  # the test tells another q apart


def test_without_noise_and_a_clip_nobody_reaches_it_is_fedumf_with_uniform_weighting() -> None:
    fed = linear_federation(SIZES, momentum=0.5, weight_decay=5e-4, lr_decay=0.9)
    plain = build_algorithm("fedumf", fraction=0.5, weighting="uniform")
    private = with_dp(build_algorithm("fedumf", fraction=0.5), noiseless(clip=1e9))
    data_weighted = build_algorithm("fedumf", fraction=0.5)
    states = [init_state(a, fed.model.theta.clone(), 4) for a in (plain, private, data_weighted)]
    for _ in range(6):
        states = [run_round(a, s, fed)[0] for a, s in zip((plain, private, data_weighted), states, strict=True)]
    torch.testing.assert_close(states[1].w, states[0].w, atol=1e-6, rtol=0)
    assert float((states[2].w - states[0].w).abs().max()) > 1e-4  # the weighting matters here: uniform is the one


def _state_before_a_fusing_round(fed: Federation, fraction: float) -> FLState:
    """FedUMF (uniform) run until the next round's uploader is newly authorised with a stored update."""
    plain = build_algorithm("fedumf", fraction=fraction, alpha=0.7, weighting="uniform")
    state = init_state(plain, fed.model.theta.clone(), 4)
    for _ in range(20):
        state, _ = run_round(plain, state, fed)
        (uploader,) = sample_clients(round_info(fed, state.round), fraction)
        stored = state.clients[uploader][0]
        if stored.update is not None and stored.authorised_round != state.round - 1:
            return state
    raise AssertionError("no fusing round in 20")


def test_the_fused_upload_is_clipped_as_a_whole() -> None:
    """One uploader a round (C N = 1), newly authorised with a stored update g: by hand, it trains from
    w + alpha (eta_t / eta_{t-1}) g (plain torch SGD), uploads u = w - theta_end, and the DP step (no noise) is u
    clipped to S: w - u min(1, S / ||u||)."""
    fed = linear_federation(SIZES, momentum=0.5, lr_decay=0.9)
    state = _state_before_a_fusing_round(fed, 0.25)
    info = round_info(fed, state.round)
    (uploader,) = sample_clients(info, 0.25)
    stored = state.clients[uploader][0]
    start = state.w + 0.7 * (info.lr / stored.update_lr) * stored.update
    u = state.w - naive_local(fed, uploader, state.round, start)  # the whole upload, fused part included
    unfused = state.w - naive_local(fed, uploader, state.round, state.w)
    assert float((u - unfused).norm()) > 0.1 * float(stored.update.norm())  # the fused move is in u
    for clip in (0.5 * float(u.norm()), 2 * float(u.norm())):
        private = with_dp(build_algorithm("fedumf", fraction=0.25, alpha=0.7), noiseless(clip=clip, fraction=0.25))
        step = state.w - run_round(private, state, fed)[0].w
        torch.testing.assert_close(step, u * min(1.0, clip / float(u.norm())), atol=1e-6, rtol=0)
        assert float(step.norm()) <= clip * (1 + 1e-6)


def test_a_client_that_is_not_authorised_adds_nothing_to_the_round() -> None:
    """Change every unauthorised client's data and stored update: the noised step is the same, bit for bit."""
    dp = DPSettings(0.3, 1.0, 1e-5, 4, 0.5, "fixed", 10)
    fed, other = linear_federation(SIZES), linear_federation(SIZES)
    private = with_dp(build_algorithm("fedumf", fraction=0.5), dp)
    state = init_state(private, fed.model.theta.clone(), 4)
    for _ in range(5):
        info = round_info(fed, state.round)
        chosen = set(sample_clients(info, 0.5))
        silent = [i for i in range(4) if i not in chosen]
        changed = replace(state, clients=[((replace(cs[0], update=torch.randn_like(fed.model.theta) * 9)
                                            if cs[0].update is not None else cs[0]), *cs[1:])
                                          if i in silent else cs for i, cs in enumerate(state.clients)])
        for i in silent:
            other.y_train[fed.partition[i]] = torch.randn(len(fed.partition[i])) * 50
        after, report = run_round(private, state, fed)
        after_changed, _ = run_round(private, changed, other)
        assert report.uploaded == len(chosen) == 2
        assert torch.equal(after.w, after_changed.w)
        other = linear_federation(SIZES)
        state = after


def test_an_upload_that_carries_extras_is_refused_at_run_time_in_one_line() -> None:
    """A part that declares no extras but sends some anyway: the DP mean refuses the round, in one line."""
    liar = Part("liar", init_client=lambda _w: 0, no_extras=True,
                client_end=lambda ctx, w, t0, te, ss, cs: (cs, {"secret": te.clone()}))
    private = with_dp(compose("liar", liar, mean_aggregate()), DPSettings(1.0, 1.0, 1e-5, 4, 1.0, "fixed", 10))
    fed = linear_federation(SIZES)
    with pytest.raises(ConfigError, match="client 0's upload carries 'secret' beside its update") as err:
        run_round(private, init_state(private, fed.model.theta.clone(), 4), fed, fraction=1.0)
    assert "\n" not in str(err.value)
    info = RoundInfo(round=0, lr=0.1, prev_lr=0.1, weights=np.full(2, 0.5), seed=0)
    bare = ClientUpdate(0, 0.5, 1, torch.ones(2), {"c": torch.ones(2)}, {})
    for settings_ in (DPSettings(1.0, 1.0, 1e-5, 2, 1.0, "fixed", 10),
                      DPSettings(1.0, 1.0, 1e-5, 2, 1.0, "fixed", 10, noise="client")):
        with pytest.raises(ConfigError, match="carries 'c'"):
            dp_mean(settings_).aggregate(info, torch.zeros(2), [bare])


def test_a_fedumf_run_under_dp_writes_its_epsilon(tmp_path: object) -> None:
    from fedaccel.cli import main

    out = tmp_path / "run"  # type: ignore[operator]
    assert main(["run", *[a for o in _config("train.rounds=2", "data.subset=300", "run.progress=false",
                                             "algorithm={name: fedumf, dp: {clip: 0.5, noise_multiplier: 2.0}}")
                          for a in ("--set", o)], "--out", str(out)]) == 0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    dp = DPSettings(0.5, 2.0, 1e-5, 10, 0.2, "fixed", 2)
    assert [row["epsilon"] for row in rows] == [epsilon(dp, row["round"]) for row in rows] and rows[-1]["epsilon"] > 0


def test_the_stacked_runtime_gives_the_numbers_of_in_process(tmp_path: object) -> None:
    """The privacy grid stacks its seeds: FedUMF under DP gives the same rows there as in process."""
    from fedaccel.cli import main

    rows = {}
    for runtime in ("in-process", "stacked"):
        out = tmp_path / runtime  # type: ignore[operator]
        overrides = _config("train.rounds=3", "data.subset=400", "run.progress=false", f"run.runtime={runtime}",
                            "algorithm={name: fedumf, dp: {clip: 0.5, noise_multiplier: 1.0}}")
        assert main(["run", *[a for o in overrides for a in ("--set", o)], "--out", str(out)]) == 0
        rows[runtime] = [{k: v for k, v in json.loads(line).items() if k != "wall_s"}
                         for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert rows["in-process"] == rows["stacked"]


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("adaptive", [False, True])
def test_a_non_finite_upload_counts_as_zero_so_one_client_still_moves_the_sum_by_at_most_s(
        bad: float, adaptive: bool) -> None:
    """A client whose local training overflowed (seen under DP in the privacy grid): its upload would pass the clip
    unclipped (a NaN norm is never above S). It counts as zero, as a zero upload would, whatever the others send."""
    dp = DPSettings(1.0, 0.0, 1e-5, 2, 1.0, "fixed", 10, adaptive=AdaptiveClip() if adaptive else None)
    part = dp_mean(dp)
    info = RoundInfo(round=0, lr=0.1, prev_lr=0.1, weights=np.full(2, 0.5), seed=0)
    w = torch.zeros(3, dtype=torch.float64)
    other = ClientUpdate(1, 0.5, 1, torch.tensor([0.03, 0.0, 0.04], dtype=torch.float64))
    broken = ClientUpdate(0, 0.5, 1, torch.tensor([bad, 1.0, 2.0], dtype=torch.float64))
    zero = replace(broken, delta=torch.zeros(3, dtype=torch.float64))

    def step(updates: list[ClientUpdate]) -> tuple[torch.Tensor, object]:
        if not adaptive:
            return part.aggregate(info, w, updates), None
        return part.server_end(info, w, w, updates, 0.1)

    (got, clip), (expected, expected_clip) = step([broken, other]), step([zero, other])
    assert torch.equal(got, expected) and clip == expected_clip and bool(torch.isfinite(got).all())


@pytest.mark.parametrize("runtime", ["in-process", "stacked"])
def test_a_round_lists_the_uploads_it_counted_as_zero_and_does_not_count_them_uploaded(
        tmp_path: object, runtime: str) -> None:
    """Local SGD that overflows (the squared SVM at lr 1e30, 8 steps) makes every upload non-finite: the rows name
    the clients whose upload counted as zero (``diag.zeroed``, as Flower's gate lists them under ``rejected``), and
    ``uploaded`` is 0, not the number of clients; the model stays finite."""
    from fedaccel.cli import main

    out = tmp_path / runtime  # type: ignore[operator]
    overrides = ["model=svm", "data.clients=10", "train.client_fraction=0.5", "train.rounds=2", "data.subset=400",
                 "train.batch_size=5", "train.lr=1e30", "run.progress=false", f"run.runtime={runtime}",
                 "algorithm={name: fedavg, dp: {clip: 1.0, noise_multiplier: 0.5}}"]
    assert main(["run", *[a for o in overrides for a in ("--set", o)], "--out", str(out)]) == 0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()][1:]
    assert [len(row["diag"]["zeroed"]) for row in rows] == [5, 5]
    assert [row["uploaded"] for row in rows] == [0, 0] and all(math.isfinite(row["test_loss"]) for row in rows)
