"""Reference-code options (issue 22): each against a NumPy step written from the reference's formula, the
paper's default against the paper's formula, the reductions between them, and presets' resolution."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from fedaccel.algorithms.base import ClientContext, RoundInfo
from fedaccel.algorithms.grab import BatchedBalancing, grab_selection
from fedaccel.algorithms.presets import PRESETS, apply_preset
from fedaccel.algorithms.registry import build_algorithm
from fedaccel.engine.local import LocalOptions
from fedaccel.engine.round import init_state, round_info, run_round
from fedaccel.engine.stacked import StackedClients
from fedaccel.errors import ConfigError
from fedaccel.runs.config import dump_config, from_dict, load_config
from tiny_models import Linear, linear_federation, scalar_federation

# scalar_federation: client 0 holds (x=1, y=2), tau_0 = 1; client 1 holds (x=2, y=2) twice, tau_1 = 2;
# p = (1/3, 2/3); w0 = 0; the gradient of a sample is (w x - y) x. Shared K = 1 * ceil(1.5 / 1) = 2.
X, Y, TAU, P, K = (1.0, 2.0), (2.0, 2.0), (1, 2), np.array([1 / 3, 2 / 3]), 2
N = 2


def local_run(i: int, w: float, lr: float, extra) -> float:
    """tau_i plain SGD steps of client i from w; ``extra(theta)`` is added to each gradient."""
    theta = w
    for _ in range(TAU[i]):
        theta -= lr * ((theta * X[i] - Y[i]) * X[i] + extra(theta))
    return theta


def run(name: str, rounds: int, decay: float = 1.0, lr: float = 0.1, **params) -> tuple[float, object]:
    fed = scalar_federation(lr=lr, lr_decay=decay)
    algorithm = build_algorithm(name, **params)
    state = init_state(algorithm, fed.model.theta.clone(), fed.n_clients)
    for _ in range(rounds):
        state, _ = run_round(algorithm, state, fed, fraction=1.0)
    return float(state.w[0]), state


# --- SCAFFOLD ------------------------------------------------------------------------------------


def numpy_scaffold(rounds: int, decay: float, weighting: str, control_lr: str, control_steps: str) -> float:
    """SCAFFOLD option II by hand; "reference" = gaoliang13/FedDC utils_methods.train_SCAFFOLD."""
    lr0, w, c, ci = 0.1, 0.0, 0.0, np.zeros(N)
    wt = N * P  # w~_i
    for t in range(rounds):
        lr = lr0 * decay**t
        thetas, dcs = [], []
        for i in range(N):
            c_local = c / wt[i] if weighting == "reference" else c
            theta = local_run(i, w, lr, lambda _: c_local - ci[i])
            steps = K if control_steps == "shared" else TAU[i]
            eta = lr0 if control_lr == "initial" else lr
            new = ci[i] - c + (w - theta) / (steps * eta)
            dcs.append(new - ci[i])
            ci[i] = new
            thetas.append(theta)
        w = float(np.mean(thetas)) if weighting in ("uniform", "reference") else float(P @ thetas)
        q = np.full(N, 1 / N) if weighting == "uniform" else P
        c = c + float(q @ dcs)
    return w


@pytest.mark.parametrize("weighting", ["data", "uniform", "reference"])
@pytest.mark.parametrize("control_lr,control_steps", [("current", "client"), ("initial", "shared"),
                                                      ("initial", "client"), ("current", "shared")])
def test_scaffold_control_step_matches_numpy(weighting: str, control_lr: str, control_steps: str) -> None:
    got, _ = run("scaffold", 3, decay=0.5, weighting=weighting, control_lr=control_lr, control_steps=control_steps)
    want = numpy_scaffold(3, 0.5, weighting, control_lr, control_steps)
    assert got == pytest.approx(want, rel=1e-5, abs=1e-6)


def test_scaffold_reference_step_differs_where_it_should() -> None:
    """Unequal tau and a decaying lr: the reference's step is another algorithm (the test can fail)."""
    paper, _ = run("scaffold", 3, decay=0.5)
    reference, _ = run("scaffold", 3, decay=0.5, control_lr="initial", control_steps="shared")
    assert abs(paper - reference) > 1e-3


def test_control_lr_initial_is_current_without_decay() -> None:
    a, sa = run("scaffold", 3, control_lr="current")
    b, sb = run("scaffold", 3, control_lr="initial")
    assert a == b
    assert all(torch.equal(x[0], y[0]) for x, y in zip(sa.clients, sb.clients))


def test_shared_steps_are_tau_on_equal_clients() -> None:
    assert linear_federation(sizes=(4, 4, 4)).shared_steps == 2
    results = []
    for control_steps in ("client", "shared"):
        fed = linear_federation(sizes=(4, 4, 4))  # a fresh one: training moves the module's parameters
        assert list(fed.steps) == [2, 2, 2]
        algorithm = build_algorithm("feddc", alpha=0.1, control_steps=control_steps)
        state = init_state(algorithm, fed.model.theta.clone(), fed.n_clients)
        for _ in range(3):
            state, _ = run_round(algorithm, state, fed, fraction=1.0)
        results.append(state.w)
    assert torch.equal(results[0], results[1])


def test_shared_steps_follow_the_reference_on_unequal_clients() -> None:
    """K = int(E ceil(mean |D_i| / B)): sizes (3, 4, 5, 6), B = 2 -> ceil(2.25) = 3; E = 2 -> 6."""
    assert LocalOptions(batch_size=2).shared_steps([3, 4, 5, 6]) == 3
    assert LocalOptions(batch_size=2, local_epochs=2).shared_steps([3, 4, 5, 6]) == 6
    assert LocalOptions(batch_size=2, local_steps=7).shared_steps([3, 4, 5, 6]) == 7
    info = round_info(linear_federation(sizes=(3, 4, 5, 6), lr_decay=0.5), 2)
    assert (info.shared_steps, info.initial_lr, info.lr) == (3, 0.1, pytest.approx(0.025))


def test_scaffold_reference_weighting_runs_stacked_as_in_process() -> None:
    algorithm = build_algorithm("scaffold", weighting="reference", control_lr="initial", control_steps="shared")
    ws = []
    for stacked in (False, True):
        fed = linear_federation(lr_decay=0.7)
        state = init_state(algorithm, fed.model.theta.clone(), fed.n_clients)
        runtime = StackedClients(algorithm, fed, state.clients, stack_size=3) if stacked else None
        for _ in range(3):
            state, _ = run_round(algorithm, state, fed, fraction=1.0, runtime=runtime)
        ws.append(state.w)
    torch.testing.assert_close(ws[1], ws[0], atol=1e-6, rtol=1e-5)


# --- FedDC ---------------------------------------------------------------------------------------


def numpy_feddc(rounds: int, decay: float, alpha: float, control_lr: str, control_steps: str) -> float:
    """FedDC by hand (gaoliang13/FedDC utils_methods_FedDC.train_FedDC), uniform model mean."""
    lr0, w, G = 0.1, 0.0, 0.0
    h, Gi = np.zeros(N), np.zeros(N)
    wt = N * P
    for t in range(rounds):
        lr = lr0 * decay**t
        thetas, dG_sum = [], 0.0
        for i in range(N):
            a = alpha / wt[i]
            theta = local_run(i, w, lr, lambda th: a * (th - w + h[i]) + G / wt[i] - Gi[i])
            h[i] += theta - w
            steps = K if control_steps == "shared" else TAU[i]
            eta = lr0 if control_lr == "initial" else lr
            new = Gi[i] - G / wt[i] - (theta - w) / (steps * eta)
            dG_sum += wt[i] * (new - Gi[i])
            Gi[i] = new
            thetas.append(theta)
        G += dG_sum / N
        w = float(np.mean(thetas) + np.mean(h))
    return w


@pytest.mark.parametrize("control_lr,control_steps", [("current", "client"), ("initial", "shared")])
def test_feddc_control_step_matches_numpy(control_lr: str, control_steps: str) -> None:
    got, _ = run("feddc", 3, decay=0.5, alpha=0.2, control_lr=control_lr, control_steps=control_steps)
    assert got == pytest.approx(numpy_feddc(3, 0.5, 0.2, control_lr, control_steps), rel=1e-5, abs=1e-6)


@pytest.mark.parametrize("name", ["fedgsnr-scaffold", "fedumf-scaffold", "bherd-scaffold", "fedumf-feddc"])
def test_every_composed_recipe_takes_the_control_options(name: str) -> None:
    build_algorithm(name, control_lr="initial", control_steps="shared")
    with pytest.raises(ConfigError, match="control_lr must be one of current, initial"):
        build_algorithm(name, control_lr="eta0")


# --- FedNova -------------------------------------------------------------------------------------


def numpy_fednova(rounds: int, decay: float, mu: float, rule: str, gmf: float) -> float:
    """FedNova with proximal SGD by hand: a_i = [1 - (1 - eta mu)^tau_i] / (eta mu) (tau_i if mu = 0);
    tau_eff = sum p_i a_i, or sum p_i tau_i ("steps", JYWa/FedNova when mu > 0); server momentum gmf."""
    lr0, w, buf = 0.1, 0.0, 0.0
    for t in range(rounds):
        lr = lr0 * decay**t
        deltas = np.array([w - local_run(i, w, lr, lambda th: mu * (th - w)) for i in range(N)])
        a = np.array([(1 - (1 - lr * mu) ** tau) / (lr * mu) if mu else tau for tau in TAU])
        tau_eff = P @ np.array(TAU, float) if rule == "steps" and mu > 0 else P @ a
        step = tau_eff * (P @ (deltas / a))
        buf = gmf * buf + step / lr
        w = w - lr * buf
    return w


@pytest.mark.parametrize("rule", ["normalisers", "steps"])
@pytest.mark.parametrize("gmf", [0.0, 0.5])
def test_fednova_tau_eff_and_gmf_match_numpy(rule: str, gmf: float) -> None:
    got, _ = run("fednova", 3, decay=0.5, mu=0.5, tau_eff=rule, gmf=gmf)
    assert got == pytest.approx(numpy_fednova(3, 0.5, 0.5, rule, gmf), rel=1e-5, abs=1e-6)


def test_fednova_steps_rule_is_the_paper_without_mu() -> None:
    assert run("fednova", 3, tau_eff="steps")[0] == run("fednova", 3)[0]
    assert run("fednova", 2, mu=0.5, tau_eff="steps")[0] != run("fednova", 2, mu=0.5)[0]


def test_fednova_gmf_zero_is_no_momentum_and_no_state() -> None:
    w0, s0 = run("fednova", 3, decay=0.5, gmf=0.0)
    assert w0 == pytest.approx(numpy_fednova(3, 0.5, 0.0, "normalisers", 0.0), rel=1e-6)
    assert s0.server == (None,)
    with pytest.raises(ConfigError, match="gmf must be in"):
        build_algorithm("fednova", gmf=1.0)


# --- GraB ----------------------------------------------------------------------------------------


def balancing(ties: str | None, variant: str = "paper") -> list[int]:
    """Two steps that tie: z0 at s = 0, then z1 whose centred c is orthogonal to s (hand-made ties)."""
    part = grab_selection(variant=variant, ties=ties)
    info = RoundInfo(round=0, lr=0.1, prev_lr=0.1, weights=np.ones(1), seed=0)
    estimator = part.estimator(ClientContext(info, 0, 2, True), 2)
    for step, z in enumerate(([1.0, 0.0], [1.0, 1.0])):  # m: (.5, 0) then (1, .5); c: (.5, 0) then (0, .5)
        estimator.observe(step, torch.tensor(z, dtype=torch.float64))
    return estimator.finish(torch.zeros(2, dtype=torch.float64))[2]["selected"]


def test_grab_tie_rule() -> None:
    assert balancing(None) == []  # Algorithm 4: s = -c after the first tie, the second tie again not kept
    assert balancing("strict") == [] and balancing("strict", "fixed") == []
    assert balancing("keep") == [0, 1] and balancing(None, "fixed") == [0, 1]  # GraB's code: a tie counts +1
    batched = BatchedBalancing([2], 2, [0.1], torch.float64, "cpu", keep_ties=True)
    for step, z in enumerate(([1.0, 0.0], [1.0, 1.0])):
        batched.observe(step, torch.tensor([z], dtype=torch.float64), torch.tensor([True]))
    assert batched.finish(torch.zeros(1, 2, dtype=torch.float64))[0][2]["selected"] == [0, 1]
    with pytest.raises(ConfigError, match="ties must be one of strict, keep"):
        build_algorithm("grab-fedavg", ties="plus")


# --- presets -------------------------------------------------------------------------------------


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "run.yaml"
    path.write_text(text)
    return path


def test_preset_sets_options_under_the_users_keys(tmp_path: Path) -> None:
    path = write(tmp_path, "algorithm: {name: scaffold, preset: feddc-code, control_steps: client}\n"
                           "train: {clip: 5}\n")
    config = load_config(path, ["train.order=fixed"])
    assert config.algorithm["control_lr"] == "initial"  # the preset, nobody set it
    assert config.algorithm["weighting"] == "reference"
    assert config.algorithm["control_steps"] == "client"  # the file wins over the preset
    assert config.train.clip == 5.0  # the file
    assert config.train.order == "fixed"  # --set
    assert load_config(path, ["algorithm.control_lr=current"]).algorithm["control_lr"] == "current"
    plain = load_config(write(tmp_path, "algorithm: {name: scaffold, preset: feddc-code}\n"))
    assert (plain.train.clip, plain.train.order) == (10.0, "reshuffle_epoch")  # preset over the built-in defaults


def test_preset_values_per_repository() -> None:
    nova = from_dict({"algorithm": {"name": "fednova", "preset": "fednova-code"}})
    assert (nova.algorithm["tau_eff"], nova.train.momentum, nova.train.weight_decay) == ("steps", 0.9, 1e-4)
    prox = from_dict({"algorithm": {"name": "fedprox", "preset": "feddc-code"}})
    assert prox.algorithm["mu"] == 2e-4
    assert from_dict({"algorithm": {"name": "fedprox", "preset": "fedprox-code"}}).algorithm["mu"] == 0.0
    for name, table in PRESETS.items():
        for recipe in table["recipes"]:
            from_dict({"algorithm": {"name": recipe, "preset": name}})  # every pairing builds


def test_preset_errors_are_one_line() -> None:
    with pytest.raises(ConfigError, match="known: feddc-code, feddyn-code, fednova-code, fedprox-code"):
        from_dict({"algorithm": {"name": "scaffold", "preset": "feddc"}})
    with pytest.raises(ConfigError, match="is for fednova, not 'feddc'; presets for feddc: feddc-code"):
        from_dict({"algorithm": {"name": "feddc", "preset": "fednova-code"}})
    with pytest.raises(ConfigError, match="presets for grab-fedavg: none"):
        from_dict({"algorithm": {"name": "grab-fedavg", "preset": "feddc-code"}})


def test_resolved_config_reproduces_without_the_preset(tmp_path: Path) -> None:
    config = from_dict({"algorithm": {"name": "feddc", "preset": "feddc-code"}})
    dump_config(config, tmp_path / "config.yaml")
    raw = yaml.safe_load((tmp_path / "config.yaml").read_text())
    raw["algorithm"].pop("preset")
    again = from_dict(raw)
    assert again.algorithm == {k: v for k, v in config.algorithm.items() if k != "preset"}
    assert again.train == config.train


def test_apply_preset_leaves_its_input_alone() -> None:
    raw = {"algorithm": {"name": "feddyn", "preset": "feddyn-code"}}
    out = apply_preset(raw)
    assert raw == {"algorithm": {"name": "feddyn", "preset": "feddyn-code"}}
    assert out["train"] == {"clip": 10.0, "clip_scope": "objective", "order": "reshuffle_epoch", "last_batch": "partial"}
    assert apply_preset({"algorithm": {"name": "feddyn", "preset": "feddyn-code"}, "train": {"order": "fixed"}}
                        )["train"] == {"order": "fixed", "clip": 10.0, "clip_scope": "objective",
                                       "last_batch": "partial"}  # the user's order


def test_grab_stale_centre_by_hand_and_kept_across_rounds() -> None:
    """c = z - (previous mean): z0 = (1, 0), z1 = (0, 1), stale (.5, .5) -> c0 = (.5, -.5) ties, c1 = -c0."""
    info = RoundInfo(round=0, lr=0.1, prev_lr=0.1, weights=np.ones(1), seed=0)
    stale = torch.tensor([0.5, 0.5], dtype=torch.float64)
    kept = {}
    for ties in ("strict", "keep"):
        estimator = grab_selection(ties=ties, centre="stale").estimator(ClientContext(info, 0, 2, True), 2, stale)
        for step, z in enumerate(([1.0, 0.0], [0.0, 1.0])):
            estimator.observe(step, torch.tensor(z, dtype=torch.float64))
        kept[ties] = estimator.finish(torch.zeros(2, dtype=torch.float64))[2]["selected"]
        torch.testing.assert_close(estimator.next_state, stale)  # this round's mean: (z0 + z1) / 2
    # strict: s = -c0, then <s, c1> = 1/2 > 0: not kept; keep: s = c0, <s, c1> = -1/2 < 0: kept
    assert kept == {"strict": [], "keep": [0, 1]}
    # the engine keeps the mean as the client's state: with plain SGD it is (theta0 - theta_end) / (eta tau),
    # theta_end the local run FedAvg takes (one client: FedAvg's next model)
    means = []
    for name, params in (("fedavg", {}), ("grab-fedavg", {"centre": "stale"})):
        fed = linear_federation(sizes=(6,))
        algorithm = build_algorithm(name, **params)
        state = init_state(algorithm, fed.model.theta.clone(), 1)
        w0 = state.w.clone()
        state, _ = run_round(algorithm, state, fed, fraction=1.0)
        means.append((w0 - state.w) / (0.1 * 3) if name == "fedavg" else state.clients[0][0])
    torch.testing.assert_close(means[1], means[0], rtol=1e-5, atol=1e-6)


def reorder_by_hand(x: np.ndarray, y: np.ndarray, order: np.ndarray, rounds: int, lr: float, batch: int
                    ) -> tuple[np.ndarray, np.ndarray]:
    """GraB reordering on one client of the linear model by hand: (final theta, the order for the next round)."""
    theta = np.concatenate([Linear().lin.weight.detach().numpy()[0], Linear().lin.bias.detach().numpy()])
    theta = theta.astype(np.float64)
    mean = None
    for _ in range(rounds):
        s, total, signs = np.zeros(4), np.zeros(4), []
        for k in range(len(order) // batch):
            idx = order[k * batch : (k + 1) * batch]
            xb = np.hstack([x[idx], np.ones((batch, 1))])
            z = xb.T @ (xb @ theta - y[idx]) / batch
            c = z if mean is None else z - mean
            sign = 1 if s @ c <= 0 else -1
            s, total = s + sign * c, total + z
            signs.append(sign)
            theta = theta - lr * z
        mean = total / len(signs)
        blocks = [order[k * batch : (k + 1) * batch] for k in range(len(signs))]
        order = np.concatenate([b for b, g in zip(blocks, signs) if g > 0]
                               + [b for b, g in zip(blocks, signs) if g <= 0][::-1])
    return theta, order


@pytest.mark.parametrize("rounds", [1, 3])
def test_grab_reorder_orders_the_next_epoch_by_balancing(rounds: int) -> None:
    fed = linear_federation(sizes=(8,), batch_size=2)  # one client, 4 batches a round, E = 1
    x, y = fed.x_train.double().numpy(), fed.y_train.double().numpy()
    want_theta, want_order = reorder_by_hand(x, y, fed.order(0, 0), rounds, 0.1, 2)
    algorithm = build_algorithm("grab-reorder")
    state = init_state(algorithm, fed.model.theta.clone(), 1)
    for _ in range(rounds):
        state, _ = run_round(algorithm, state, fed, fraction=1.0)
    assert list(state.clients[0][0].order) == want_order.tolist()
    np.testing.assert_allclose(state.w.double().numpy(), want_theta, rtol=1e-5, atol=1e-6)


def test_grab_reorder_is_fedavg_when_every_sample_is_the_same() -> None:
    ws = []
    for name in ("fedavg", "grab-reorder"):
        x, y = torch.ones(6, 3), torch.full((6,), 2.0)
        fed = linear_federation(sizes=(6,))
        fed.set_training_data(x, y)
        algorithm = build_algorithm(name)
        state = init_state(algorithm, fed.model.theta.clone(), 1)
        for _ in range(3):
            state, _ = run_round(algorithm, state, fed, fraction=1.0)
        ws.append(state.w)
    assert torch.equal(ws[0], ws[1])


def test_grab_reorder_and_stale_centre_train_one_after_another_when_stacked() -> None:
    for algorithm in (build_algorithm("grab-reorder"), build_algorithm("grab-fedavg", centre="stale")):
        ws = []
        for stacked in (False, True):
            fed = linear_federation()
            state = init_state(algorithm, fed.model.theta.clone(), fed.n_clients)
            runtime = StackedClients(algorithm, fed, state.clients, stack_size=3) if stacked else None
            for _ in range(3):
                state, _ = run_round(algorithm, state, fed, fraction=1.0, runtime=runtime)
            ws.append(state.w)
        assert torch.equal(ws[0], ws[1])


def test_presets_set_the_references_recipe_and_augment_cifar_only() -> None:
    """feddc-code/feddyn-code: clip 10 over the objective, all three evaluated models; crop+flip on CIFAR only."""
    for preset, recipe in (("feddc-code", "feddc"), ("feddyn-code", "feddyn")):
        fmnist = from_dict({"algorithm": {"name": recipe, "preset": preset}})
        assert (fmnist.train.clip, fmnist.train.clip_scope) == (10.0, "objective")
        assert fmnist.eval.models == ["broadcast", "client_mean", "all_mean"]
        assert fmnist.train.augment is None  # the references augment CIFAR only
        cifar = apply_preset({"algorithm": {"name": recipe, "preset": preset}, "data": {"dataset": "cifar10"}})
        assert cifar["train"]["augment"] == {"crop_padding": 4, "flip": True}
        mine = apply_preset({"algorithm": {"name": recipe, "preset": preset}, "data": {"dataset": "cifar10"},
                             "train": {"augment": None}, "eval": {"models": ["broadcast"]}})
        assert mine["train"]["augment"] is None and mine["eval"]["models"] == ["broadcast"]  # the user's keys win


def test_feddc_code_runs_the_authors_shared_k_on_every_client_for_scaffold() -> None:
    """gaoliang13/FedDC's SCAFFOLD runs K = E ceil(mean n_i / B) steps on every client (utils_general.py:238-255);
    the preset's notes said so and left it unset. Clients of 10 and 25 samples, B = 10, E = 2: K = 2 ceil(1.75) = 4
    for both (their own epochs would be 2 and 5)."""
    from fedaccel.engine.federation import Federation
    from fedaccel.engine.local import LocalOptions

    config = from_dict({"algorithm": {"name": "scaffold", "preset": "feddc-code"}})
    assert config.train.local_steps == "shared"
    assert from_dict({"algorithm": {"name": "feddc", "preset": "feddc-code"}}).train.local_steps is None
    assert from_dict({"algorithm": {"name": "scaffold", "preset": "feddc-code"},
                      "train": {"local_steps": 7}}).train.local_steps == 7  # the user's count wins
    x, y = torch.zeros(35, 3), torch.zeros(35, dtype=torch.long)
    options = LocalOptions(batch_size=10, local_epochs=2, local_steps="shared", last_batch="partial")
    federation = Federation(torch.nn.Linear(3, 2), x, y, [np.arange(10), np.arange(10, 35)], x, y, options)
    assert federation.steps.tolist() == [4, 4] and federation.shared_steps == 4
    with pytest.raises(ConfigError, match="train.local_steps must be an integer >= 1, shared"):
        from_dict({"train": {"local_steps": "all"}})
