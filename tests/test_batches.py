"""Local batches as a DataLoader forms them (``train.last_batch: partial``), a new order every epoch
(``train.order: reshuffle_epoch``) and the step schedule (``train.lr_schedule``), against loops written
by hand: steps counted per client, each short batch's loss the mean over its own samples."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fedaccel.algorithms.base import ClientContext, make_rng
from fedaccel.algorithms.registry import build_algorithm
from fedaccel.engine.federation import Federation
from fedaccel.engine.local import LocalOptions, batch_positions, batch_table, row_table
from fedaccel.engine.round import InProcessClients, init_state, round_info, run_round
from fedaccel.engine.stacked import StackedClients
from fedaccel.errors import ConfigError
from fedaccel.models import build_model
from fedaccel.runs.config import from_dict, local_options

SIZES = (7, 5, 10)  # none a multiple of B = 3
B, E, LR, CLASSES, FEATURES = 3, 2, 0.5, 3, 4
PARTIAL_STEPS = [6, 4, 8]  # E ceil(n / B): 2 x 3, 2 x 2, 2 x 4
PARTIAL_SIZES = [[3, 3, 1] * E, [3, 2] * E, [3, 3, 3, 1] * E]  # each epoch's last batch short
DROP_STEPS = [4, 3, 6]  # floor(E n / B): 14 // 3, 10 // 3, 20 // 3


def data() -> tuple[torch.Tensor, torch.Tensor, list[np.ndarray]]:
    g = torch.Generator().manual_seed(5)
    n = sum(SIZES)
    x, y = torch.randn(n, FEATURES, generator=g), torch.randint(0, CLASSES, (n,), generator=g)
    bounds = np.cumsum([0, *SIZES])
    return x, y, [np.arange(lo, hi) for lo, hi in zip(bounds[:-1], bounds[1:])]


def federation(**options: Any) -> Federation:
    x, y, parts = data()
    module = build_model("softmax", (FEATURES,), CLASSES, seed=1)
    settings = {"lr": LR, "batch_size": B, "local_epochs": E, "last_batch": "partial", **options}
    return Federation(module, x, y, parts, x, y, LocalOptions(**settings), seed=3)


def dataloader_epochs(client: int, order: str, round_: int = 0) -> list[np.ndarray]:
    """The client's sample order per epoch, drawn as fedaccel's seeding rule says: fixed from (seed, client),
    reshuffle_epoch from (seed, round, client, epoch)."""
    index = data()[2][client]
    if order == "fixed":
        return [index[make_rng(3, "order", client).permutation(len(index))]] * E
    return [index[make_rng(3, "epoch-order", round_, client, e).permutation(len(index))] for e in range(E)]


def numpy_client(theta: np.ndarray, client: int, order: str) -> tuple[np.ndarray, list[int]]:
    """E epochs of ``for xb, yb in DataLoader(batch_size=B)``: softmax regression, loss = mean over the batch."""
    x, y, _ = data()
    x, y = x.double().numpy(), y.numpy()
    theta = theta.astype(np.float64).copy()
    n_w = CLASSES * FEATURES
    sizes = []
    for epoch_order in dataloader_epochs(client, order):
        for lo in range(0, len(epoch_order), B):  # drop_last=False: the last batch is short
            idx = epoch_order[lo : lo + B]
            w, b = theta[:n_w].reshape(CLASSES, FEATURES), theta[n_w:]
            logits = x[idx] @ w.T + b
            p = np.exp(logits - logits.max(1, keepdims=True))
            p /= p.sum(1, keepdims=True)
            p[np.arange(len(idx)), y[idx]] -= 1.0
            p /= len(idx)  # the mean over the batch's own samples
            theta -= LR * np.concatenate([(p.T @ x[idx]).ravel(), p.sum(0)])
            sizes.append(len(idx))
    return theta, sizes


def client_updates(runtime_kind: str, fed: Federation) -> list[Any]:
    algorithm = build_algorithm("fedavg")
    state = init_state(algorithm, fed.model.theta.clone(), fed.n_clients)
    info = round_info(fed, 0)
    contexts = [ClientContext(info, i, int(fed.steps[i]), True, {}) for i in range(fed.n_clients)]
    runtime = (StackedClients(algorithm, fed, state.clients, stack_size=3) if runtime_kind == "stacked"
               else InProcessClients(algorithm, fed, state.clients))
    updates, _ = runtime.train(contexts, state.w, state.server)
    return updates


@pytest.mark.parametrize("order", ["fixed", "reshuffle_epoch"])
@pytest.mark.parametrize("runtime_kind", ["in-process", "stacked"])
def test_partial_batches_equal_a_dataloader_loop(runtime_kind: str, order: str) -> None:
    fed = federation(order=order)
    assert fed.steps.tolist() == PARTIAL_STEPS
    theta0 = fed.model.theta.detach().numpy().copy()
    updates = client_updates(runtime_kind, fed)
    for i, update in enumerate(updates):
        want, sizes = numpy_client(theta0, i, order)
        assert update.steps == len(sizes) == PARTIAL_STEPS[i] and sizes == PARTIAL_SIZES[i]
        np.testing.assert_allclose(theta0 - update.delta.numpy(), want, rtol=1e-5, atol=1e-6)


def test_batch_sizes_per_client_by_hand() -> None:
    fed = federation()
    sizes = [[len(b) for b in fed.batches(i, 0, int(fed.steps[i]))] for i in range(3)]
    assert sizes == PARTIAL_SIZES
    assert federation(last_batch="drop").steps.tolist() == DROP_STEPS
    # a fixed K runs on into the next epoch, its short batch counted as a step (the references' SCAFFOLD)
    five = batch_positions(np.arange(7), 5, 3, "partial")
    assert [b.tolist() for b in five] == [[0, 1, 2], [3, 4, 5], [6], [0, 1, 2], [3, 4, 5]]
    assert federation(local_steps=5).steps.tolist() == [5, 5, 5]
    # a client smaller than a batch: one batch of all its samples per epoch
    assert LocalOptions(batch_size=10, local_epochs=2, last_batch="partial").steps(4) == 2


def test_drop_reads_per_epoch_orders_as_one_stream() -> None:
    """drop with a new order per epoch: a batch crossing the end of an epoch continues in the next one's order."""
    orders = {0: np.array([4, 3, 2, 1, 0]), 1: np.array([0, 1, 2, 3, 4])}
    got = batch_positions(lambda e: orders[e], 3, 3, "drop")
    assert [b.tolist() for b in got] == [[4, 3, 2], [1, 0, 0], [1, 2, 3]]


def test_orders_differ_between_epochs_and_are_reproducible() -> None:
    fed, again = federation(order="reshuffle_epoch"), federation(order="reshuffle_epoch")
    for client in range(3):
        epochs = [fed.order(client, 2, e) for e in range(3)]
        assert all(sorted(o.tolist()) == sorted(data()[2][client].tolist()) for o in epochs)  # permutations
        assert len({tuple(o.tolist()) for o in epochs}) == 3  # a new order every epoch
        assert all(np.array_equal(o, again.order(client, 2, e)) for e, o in enumerate(epochs))
        assert not np.array_equal(fed.order(client, 3, 0), epochs[0])  # and every round
        batches = fed.batches(client, 2, int(fed.steps[client]))  # epoch e's batches hold epoch e's order
        per_epoch = len(batches) // E
        for e in range(E):
            assert np.concatenate(batches[e * per_epoch : (e + 1) * per_epoch]).tolist() == epochs[e].tolist()


@pytest.mark.parametrize("name", ["fednova", "scaffold", "feddc", "bherd", "fedgsnr", "fedumf"])
def test_stacked_equals_in_process_with_partial_batches(name: str) -> None:
    """FedNova's tau_i, SCAFFOLD/FedDC's K, BHerd's selection and FedGSNR's plans over the real steps:
    the same numbers stacked (short batches as kernel calls of their own size) as in process."""
    from tests.test_stacked import algorithm_for, run_both
    from tests.test_stacked import federation as stacked_federation

    run_both(algorithm_for(name), lambda: stacked_federation("2nn", local_epochs=2, last_batch="partial",
                                                             order="reshuffle_epoch", momentum=0.3))


def test_stacked_short_batches_through_torch_func_with_augmentation() -> None:
    """A user's module (the torch.func kernel), short batches cropped and flipped with their own step's draws."""
    from tests.test_stacked import UsersModel, algorithm_for, run_both
    from tests.test_stacked import federation as stacked_federation

    run_both(algorithm_for("fedavg"), lambda: stacked_federation(
        UsersModel(), (1, 4, 4), local_epochs=2, last_batch="partial", order="reshuffle_epoch",
        augment={"crop_padding": 1, "flip": True}), rounds=2)


def test_fednova_normalises_by_the_real_steps() -> None:
    """w1 = w0 - tau_eff sum p_i delta_i / tau_i with tau_i = E ceil(n_i / B), delta_i from the DataLoader loop."""
    fed = federation()
    theta0 = fed.model.theta.detach().numpy().copy()
    algorithm = build_algorithm("fednova")
    state, report = run_round(algorithm, init_state(algorithm, fed.model.theta.clone(), 3), fed)
    p = np.array(SIZES) / sum(SIZES)
    tau = np.array(PARTIAL_STEPS, dtype=float)
    deltas = [theta0 - numpy_client(theta0, i, "fixed")[0] for i in range(3)]
    want = theta0 - (p @ tau) * sum(pi / ti * d for pi, ti, d in zip(p, tau, deltas))
    assert report.local_steps == sum(PARTIAL_STEPS)
    np.testing.assert_allclose(state.w.numpy(), want, rtol=1e-5, atol=1e-6)


def lrs(schedule: Any, rounds: int, lr: float = 0.02) -> list[float]:
    config = from_dict({"train": {"lr": lr, "rounds": rounds, "lr_schedule": schedule}})
    return [local_options(config).lr_at(t) for t in range(rounds)]


def test_step_schedule_rates_by_hand() -> None:
    fednova = {"name": "step", "milestones": [0.5, 0.75], "factor": 0.1}
    # JYWa/FedNova at R = 30: eta_0 for rounds 0-14, eta_0/10 from int(30/2) = 15, eta_0/100 from int(22.5) = 22
    assert lrs(fednova, 30) == pytest.approx([0.02] * 15 + [0.002] * 7 + [0.0002] * 8)
    assert lrs(fednova, 8) == pytest.approx([0.02] * 4 + [0.002] * 2 + [0.0002] * 2)
    halves = {"name": "step", "milestones": [2, 3], "factor": 0.5}
    assert lrs(halves, 5) == pytest.approx([0.02, 0.02, 0.01, 0.005, 0.005])
    # the exponential schedule is train.lr_decay, one spelling in the resolved config, the same rates
    spelled = from_dict({"train": {"lr_schedule": {"name": "exponential", "decay": 0.9}}})
    assert (spelled.train.lr_decay, spelled.train.lr_schedule) == (0.9, None)
    assert spelled.train == from_dict({"train": {"lr_decay": 0.9}}).train
    assert lrs({"name": "exponential", "decay": 0.9}, 4) == [0.02 * 0.9**t for t in range(4)]


def test_the_presets_set_the_references_batches_and_schedule() -> None:
    nova = from_dict({"algorithm": {"name": "fednova", "preset": "fednova-code"}})
    assert (nova.train.order, nova.train.last_batch) == ("reshuffle_epoch", "partial")
    assert nova.train.lr_schedule == {"name": "step", "milestones": [0.5, 0.75], "factor": 0.1}
    own = {"name": "exponential", "decay": 0.99}  # the user's own schedule, given as the preset's key: it wins
    assert from_dict({"algorithm": {"name": "fednova", "preset": "fednova-code"},
                      "train": {"lr_schedule": own}}).train.lr_decay == 0.99


@pytest.mark.parametrize(("train", "words"), [
    ({"lr_decay": 1.0}, "train.lr_decay: 1.0 conflicts with algorithm.preset fednova-code's train.lr_schedule: "
                        "{factor: 0.1, milestones: [0.5, 0.75], name: step} (both say the learning-rate schedule)"),
    ({"lr_decay": 0.99}, "drop train.lr_decay to run the preset's, or give train.lr_schedule yourself"),
    ({"reshuffle": False}, "train.reshuffle: false conflicts with algorithm.preset fednova-code's train.order: "
                           "reshuffle_epoch (both say the batch order)"),
])
def test_a_key_that_says_what_the_preset_says_otherwise_is_refused_naming_both(train: dict[str, Any],
                                                                                words: str) -> None:
    """Any train.lr_decay, even 1.0, silently switched fednova-code's step schedule off (the resolved config
    showed it, nothing else did): one line names both keys and says which to give."""
    with pytest.raises(ConfigError) as caught:
        from_dict({"algorithm": {"name": "fednova", "preset": "fednova-code"}, "train": train})
    assert words in str(caught.value) and "\n" not in str(caught.value)
    resolved = from_dict({"algorithm": {"name": "fednova", "preset": "fednova-code"}}).to_dict()
    assert from_dict(resolved).train.lr_schedule == resolved["train"]["lr_schedule"]  # a run's config.yaml reloads
    for recipe, weighting in [("fedavg", "data"), ("fedprox", "data"), ("feddyn", "uniform"), ("scaffold", "uniform")]:
        config = from_dict({"algorithm": {"name": recipe, "preset": "feddc-code"}})
        assert (config.train.order, config.train.last_batch) == ("reshuffle_epoch", "partial")
        assert config.eval.mean_weighting == weighting, recipe


def test_feddc_code_shares_k_where_the_authors_code_does() -> None:
    """gaoliang13/FedDC runs SCAFFOLD K = E ceil(mean n_i / B) steps on every client (utils_general.py:238-255), but
    FedDC E epochs of the client's own ceil(n_i / B) batches (train_model_FedDC, utils_general.py:442-446), the shared
    K only in its control step (beta = 1/n_minibatch/lr, utils_methods_FedDC.py:175): the preset does the same."""
    scaffold = from_dict({"algorithm": {"name": "scaffold", "preset": "feddc-code"}})
    feddc = from_dict({"algorithm": {"name": "feddc", "preset": "feddc-code"}})
    assert scaffold.train.local_steps == "shared"
    assert feddc.train.local_steps is None and feddc.to_dict()["algorithm"]["control_steps"] == "shared"


@pytest.mark.parametrize(("train", "message"), [
    ({"last_batch": "short"}, "train.last_batch must be one of drop, partial, got 'short'"),
    ({"lr_schedule": {"name": "cosine"}}, "unknown train.lr_schedule 'cosine'"),
    ({"lr_schedule": {"name": "step"}}, "train.lr_schedule step needs milestones"),
    ({"lr_schedule": {"name": "step", "milestones": [1.5]}}, "fractions of train.rounds"),
    ({"lr_schedule": {"name": "step", "milestones": [0]}}, "a round must be >= 1"),
    ({"lr_schedule": {"name": "step", "milestones": [2], "factor": 2}}, "factor must be in"),
    ({"lr_schedule": {"name": "step", "milestones": [2], "gamma": 0.1}}, "has no option 'gamma'"),
    ({"lr_schedule": {"name": "exponential", "decay": 0}}, "decay must be in"),
    ({"lr_schedule": {"name": "step", "milestones": [2]}, "lr_decay": 0.9}, "set one"),
    ({"lr_schedule": "step"}, "must be a mapping"),
    ({"lr_schedule": {"name": ["step"]}}, "unknown train.lr_schedule"),
])
def test_bad_values_are_one_line(train: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message) as err:
        from_dict({"train": train})
    assert "\n" not in str(err.value)


def test_bad_mean_weighting_is_one_line() -> None:
    with pytest.raises(ConfigError, match="eval.mean_weighting must be one of uniform, data, got 'size'"):
        from_dict({"eval": {"mean_weighting": "size"}})


SCALARS = st.none() | st.booleans() | st.integers(-5, 50) | st.floats(allow_nan=True) | st.text(max_size=5)
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=8)


@settings(max_examples=150, deadline=None)
@given(schedule=st.fixed_dictionaries({"name": st.sampled_from(["step", "exponential", "x"]) | VALUES},
                                      optional={"milestones": VALUES, "factor": VALUES, "decay": VALUES}) | VALUES)
def test_any_lr_schedule_builds_or_fails_in_one_line(schedule: Any) -> None:
    try:
        config = from_dict({"train": {"rounds": 10, "lr_schedule": schedule}})
    except ConfigError as err:
        assert "\n" not in str(err)
        return
    rates = [local_options(config).lr_at(t) for t in range(10)]
    assert all(0 <= r <= config.train.lr for r in rates)  # a tiny factor may underflow to 0


def test_data_weighted_means_weigh_clients_by_their_data() -> None:
    from fedaccel.engine.evaluated import init_evaluated, scored_models, track

    w = torch.zeros(2)
    weights = [0.2, 0.3, 0.5]
    evaluated = init_evaluated(["broadcast", "client_mean", "all_mean"], w, 3, weights)
    from fedaccel.algorithms.base import ClientUpdate

    updates = [ClientUpdate(0, 0.2, 1, torch.tensor([-1.0, 0.0])), ClientUpdate(2, 0.5, 1, torch.tensor([0.0, -7.0]))]
    models = dict(scored_models(["broadcast", "client_mean", "all_mean"], w, track(evaluated, w, updates)))
    torch.testing.assert_close(models["client_mean"], torch.tensor([0.2 / 0.7, 0.5 / 0.7 * 7]))
    torch.testing.assert_close(models["all_mean"], torch.tensor([0.2, 3.5]))  # client 1 still at w = 0


def test_resume_checks_the_new_keys_and_rounds_under_fractional_milestones(tmp_path: Any) -> None:
    from fedaccel.errors import UserError
    from fedaccel.runs.checkpoint import check_same_config

    def config(**train: Any) -> dict[str, Any]:
        return from_dict({"train": train}).to_dict()

    before = config()
    for key in ("last_batch", "lr_schedule"):  # a checkpoint written before these keys existed
        del before["train"][key]
    del before["eval"]["mean_weighting"]
    check_same_config(tmp_path, before, config())  # their defaults are the behaviour from before: same numbers
    with pytest.raises(UserError, match="train.last_batch"):
        check_same_config(tmp_path, before, config(last_batch="partial"))
    steps = {"name": "step", "milestones": [3], "factor": 0.1}
    check_same_config(tmp_path, config(rounds=10, lr_schedule=steps), config(rounds=20, lr_schedule=steps))
    fractions = {"name": "step", "milestones": [0.5], "factor": 0.1}  # round 5 of 10, round 10 of 20
    with pytest.raises(UserError, match="train.rounds") as err:
        check_same_config(tmp_path, config(rounds=10, lr_schedule=fractions), config(rounds=20, lr_schedule=fractions))
    assert "\n" not in str(err.value)


@settings(max_examples=200, deadline=None)
@given(n=st.integers(1, 30), steps=st.integers(1, 25), batch=st.integers(1, 40),
       last=st.sampled_from(["drop", "partial"]), per_epoch=st.booleans(), seed=st.integers(0, 2**16))
def test_the_batch_table_holds_exactly_the_batches(n: int, steps: int, batch: int, last: str, per_epoch: bool,
                                                    seed: int) -> None:
    """The stacked runtime's one-table layout (``drop`` reshapes the samples read) is the list of batches
    stacked, short batches padded and their sizes kept, for any data size, step count, batch size and order."""
    rng = np.random.default_rng(seed)
    orders = [rng.permutation(100)[:n] for _ in range(steps * batch // n + 2)]
    order: Any = (lambda epoch: orders[epoch]) if per_epoch else orders[0]
    table, sizes = batch_table(order, steps, batch, last)
    expected, expected_sizes = row_table(batch_positions(order, steps, batch, last))
    assert np.array_equal(table, expected)
    assert (sizes is None and expected_sizes is None) or np.array_equal(sizes, expected_sizes)
