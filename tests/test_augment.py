"""Data augmentation (random crop of a zero-padded image, horizontal flip) and the clipping scope.

The transform is checked against NumPy slicing of the same generator's draws; the engine's hook
against its defining properties (off and an identity augmentation train the same numbers; the
same seed gives the same batches in process, stacked and in the Flower client's code path);
``clip_scope: objective`` against a hand-computed FedProx step on a linear model.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from fedaccel.algorithms.base import make_rng
from fedaccel.algorithms.registry import build_algorithm
from fedaccel.data.augment import Augment, augment_batch, crop_flip, parse_augment
from fedaccel.engine.federation import Federation
from fedaccel.engine.local import LocalOptions, train_local
from fedaccel.engine.round import init_state, run_round
from fedaccel.engine.stacked import StackedClients
from fedaccel.errors import ConfigError
from fedaccel.models import build_model

IMAGE = np.arange(1, 17, dtype=np.float32).reshape(1, 1, 4, 4)  # one 1x4x4 image: 1..16 row by row


def test_crop_and_flip_of_one_image_written_out_by_hand() -> None:
    x = torch.from_numpy(IMAGE)
    # padding 1, window at (0, 0): one zero row on top, one zero column on the left
    shifted = crop_flip(x, np.array([[0, 0]]), np.array([False]), 1)
    assert shifted[0, 0].tolist() == [[0, 0, 0, 0], [0, 1, 2, 3], [0, 5, 6, 7], [0, 9, 10, 11]]
    # window at (2, 1): rows 2..5 of the padded image (image rows 1..3, then zeros), columns 1..4, mirrored
    mirrored = crop_flip(x, np.array([[2, 1]]), np.array([True]), 1)
    assert mirrored[0, 0].tolist() == [[8, 7, 6, 5], [12, 11, 10, 9], [16, 15, 14, 13], [0, 0, 0, 0]]
    assert torch.equal(x, torch.from_numpy(IMAGE))  # the input is untouched
    assert torch.equal(crop_flip(x, np.array([[1, 1]]), np.array([False]), 1), x)  # the centre window


def numpy_augment(x: np.ndarray, padding: int, flip: bool, rng: np.random.Generator) -> np.ndarray:
    """The same transform with NumPy slicing, one image at a time, from the generator's draws in
    the documented order (all offsets, then all flips)."""
    n, _, h, w = x.shape
    offsets = rng.integers(0, 2 * padding + 1, size=(n, 2)) if padding else np.zeros((n, 2), dtype=int)
    flips = rng.random(n) < 0.5 if flip else np.zeros(n, dtype=bool)
    assert flips.any() and not flips.all()  # the seed exercises both branches
    padded = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    out = np.empty_like(x)
    for b in range(n):
        window = padded[b, :, offsets[b, 0] : offsets[b, 0] + h, offsets[b, 1] : offsets[b, 1] + w]
        out[b] = window[:, :, ::-1] if flips[b] else window
    return out


@pytest.mark.parametrize("padding", [1, 2, 4])
def test_augment_batch_equals_numpy_slicing_of_the_same_draws(padding: int) -> None:
    x = np.random.default_rng(5).normal(size=(7, 3, 4, 5)).astype(np.float32)  # 3 channels, H != W
    x[0] = np.broadcast_to(IMAGE[0, :, :, :4].repeat(5, axis=2)[:, :, :5], (3, 4, 5))
    want = numpy_augment(x, padding, True, make_rng(11, "augment", 1, 2, 3))
    got = augment_batch(torch.from_numpy(x), Augment(crop_padding=padding, flip=True), make_rng(11, "augment", 1, 2, 3))
    np.testing.assert_array_equal(got.numpy(), want)


def test_flip_alone_and_crop_alone_draw_only_what_they_use() -> None:
    x = torch.from_numpy(np.random.default_rng(1).normal(size=(6, 1, 4, 4)).astype(np.float32))
    rng = make_rng(3, "augment")
    flips = make_rng(3, "augment").random(6) < 0.5
    got = augment_batch(x, Augment(flip=True), rng)
    np.testing.assert_array_equal(got.numpy(), np.where(flips[:, None, None, None], x.numpy()[..., ::-1], x.numpy()))
    assert torch.equal(augment_batch(x, Augment(), make_rng(3, "augment")), x)  # nothing asked: identity


def test_bad_augment_settings_fail_in_one_line() -> None:
    for value, words in [({"crop": 4}, "no option 'crop'"), ({"crop_padding": -1}, ">= 0"),
                         ({"flip": "yes"}, "true or false"), (4, "null or a mapping")]:
        with pytest.raises(ConfigError, match=words):
            parse_augment(value)
    assert parse_augment(None) is None
    x, y = torch.randn(12, 6), torch.randint(0, 3, (12,))  # flat features: nothing to crop
    with pytest.raises(ConfigError, match="crops and flips images"):
        Federation(build_model("svm", (6,), 2, seed=0), x, y, [np.arange(12)], x, y,
                   LocalOptions(augment={"crop_padding": 4, "flip": True}))


# --- the engine's hook --------------------------------------------------------------------------

SIZES = [3, 5, 8, 11, 6, 9]  # unequal tau_i; client 0 holds fewer samples than a batch


def image_federation(model: str = "softmax", **options: Any) -> Federation:
    g = torch.Generator().manual_seed(3)
    n = sum(SIZES)
    x, y = torch.rand(n, 1, 4, 4, generator=g), torch.randint(0, 3, (n,), generator=g)
    bounds = np.cumsum([0, *SIZES])
    parts = [np.arange(lo, hi) for lo, hi in zip(bounds[:-1], bounds[1:])]
    module = build_model(model, (1, 4, 4), 3, seed=1, **({"hidden": 5} if model == "2nn" else {}))
    defaults: dict[str, Any] = {"lr": 0.3, "batch_size": 4, "local_epochs": 1.5}
    return Federation(module, x, y, parts, x, y, LocalOptions(**{**defaults, **options}))


def train_rounds(fed: Federation, *, stacked: bool = False, rounds: int = 2, name: str = "fedprox") -> Any:
    algorithm = build_algorithm(name, **({"mu": 0.3} if name == "fedprox" else {}))
    state = init_state(algorithm, fed.model.theta.clone(), fed.n_clients)
    runtime = StackedClients(algorithm, fed, state.clients, stack_size=4) if stacked else None
    for _ in range(rounds):
        state, _ = run_round(algorithm, state, fed, fraction=0.7, runtime=runtime)
    return state


CROP_FLIP = {"crop_padding": 1, "flip": True}


def test_off_and_an_identity_augmentation_train_bit_identical_models_and_keep_the_fast_path() -> None:
    off = image_federation()
    assert isinstance(off.client_batches(3, 0, 2)[0], tuple)  # fixed order: batches laid out (the fast path)
    identity = image_federation(augment={"crop_padding": 0, "flip": False})
    assert torch.equal(train_rounds(identity).w, train_rounds(off).w)
    augmented = image_federation(augment=CROP_FLIP)
    w = train_rounds(augmented).w
    assert not torch.allclose(w, train_rounds(image_federation()).w)  # the hook is live
    assert torch.equal(train_rounds(image_federation(augment=CROP_FLIP)).w, w)  # and seeded
    order = augmented.order(3, 0)
    layout = augmented._layouts[3][1]
    assert torch.equal(layout, augmented.x_train[torch.from_numpy(order)])  # laid-out data never augmented


@pytest.mark.parametrize("options", [{"augment": CROP_FLIP}, {"augment": CROP_FLIP, "order": "reshuffle"},
                                     {"augment": CROP_FLIP, "clip": 0.05, "clip_scope": "objective"}])
@pytest.mark.parametrize("model", ["softmax", "2nn"])
def test_the_same_seed_gives_the_same_model_in_process_and_stacked(model: str, options: dict[str, Any]) -> None:
    a = train_rounds(image_federation(model, **options))
    b = train_rounds(image_federation(model, **options), stacked=True)
    torch.testing.assert_close(b.w, a.w, atol=1e-6, rtol=1e-5)
    assert not torch.allclose(a.w, train_rounds(image_federation(model)).w, atol=1e-4)


def test_each_stacked_row_sees_the_batch_its_client_sees_in_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """The batches themselves, recorded at the gradient: the same images, client by client."""
    import fedaccel.engine.stacked as stacked

    seen: dict[str, list[torch.Tensor]] = {"in-process": [], "stacked": []}
    fed = image_federation("2nn", augment=CROP_FLIP, local_steps=2)
    kernel = stacked._kernel_for(fed)
    monkeypatch.setattr(stacked, "_kernel_for", lambda f: lambda theta, x, y: (
        seen["stacked"].append(x.clone()), kernel(theta, x, y))[1])
    train_rounds(fed, stacked=True, rounds=1, name="fedavg")
    fed = image_federation("2nn", augment=CROP_FLIP, local_steps=2)
    gradient = fed.batch_gradient()
    original = gradient.__call__
    monkeypatch.setattr(type(gradient), "__call__", lambda self, xb, lb: (
        seen["in-process"].append(xb.clone()), original(xb, lb))[1])
    train_rounds(fed, rounds=1, name="fedavg")
    # stacked: one (m, b, ...) tensor per step of a chunk; in process: one (b, ...) per client and step
    stacked_batches = sorted(row.numpy().tobytes() for x in seen["stacked"] for row in x)
    in_process_batches = sorted(x.numpy().tobytes() for x in seen["in-process"])
    assert len(in_process_batches) == 2 * 4  # 2 steps of the 4 clients of the round (fraction 0.7 of 6)
    assert stacked_batches == in_process_batches


def test_stacked_seeds_draw_each_row_from_its_own_federation() -> None:
    """Two seeds' clients stacked in the same chunks (``--stack-seeds``) train as each seed alone."""
    from fedaccel.algorithms.base import ClientContext
    from fedaccel.engine.round import round_info
    from fedaccel.engine.stacked import Job, train_jobs

    def job(seed: int) -> Job:
        fed = image_federation("2nn", augment=CROP_FLIP)
        fed.seed = seed  # the seeds' federations differ in their draws only
        algorithm = build_algorithm("fedavg")
        w = fed.model.theta.clone()
        contexts = [ClientContext(round_info(fed, 1), c, int(fed.steps[c]), True) for c in range(1, 6)]
        return Job(algorithm, fed, contexts, w, algorithm.init_server(w),
                   [algorithm.init_client(w) for _ in range(fed.n_clients)])

    together = [job(0), job(1)]
    train_jobs(together)
    for seed, stacked in enumerate(together):
        alone = job(seed)
        train_jobs([alone])
        for a, b in zip(alone.updates, stacked.updates):
            torch.testing.assert_close(b.delta, a.delta, atol=1e-6, rtol=1e-5)
    assert not torch.allclose(together[0].updates[0].delta, together[1].updates[0].delta)


def test_the_flower_client_trains_on_the_same_augmented_batches(tmp_path: Any, monkeypatch: pytest.MonkeyPatch
                                                                ) -> None:
    """The ClientApp's ``train`` handler (called directly, no Flower process) gives the in-process update."""
    pytest.importorskip("flwr")
    from flwr.app import ConfigRecord, Context, Message, RecordDict
    from flwr.supercore.task_identity import TaskIdentity

    from fedaccel.algorithms.base import ClientContext
    from fedaccel.engine.round import round_info, train_client
    from fedaccel.flower import client as flower_client
    from fedaccel.runs.config import dump_config, load_config
    from fedaccel.runs.setup import build_setup

    overrides = ["data.dataset=digits", "data.subset=120", "model=softmax", "data.clients=3", "train.batch_size=10",
                 "train.lr=0.2", "train.augment.crop_padding=2", "train.augment.flip=true", "run.progress=false"]
    config = load_config(None, overrides)
    dump_config(config, tmp_path / "config.yaml")
    text = (tmp_path / "config.yaml").read_text()
    flower_client._SETUPS.clear()
    for key in ("_run_id", "_node_id", "_task_id"):  # what a Flower process sets before it builds messages
        monkeypatch.setattr(TaskIdentity, key, 1)
    context = Context(run_id=1, node_id=1, node_config={"partition-id": 1}, state=RecordDict(), run_config={})
    hello = Message(RecordDict({"config": ConfigRecord({"yaml": text})}), dst_node_id=1, message_type="query.hello")
    flower_client.hello(hello, context)
    setup = flower_client.setup_for(text)
    w = setup.federation.model.theta.clone() + 0.01
    ctx = ClientContext(round_info(setup.federation, 2), 1, int(setup.federation.steps[1]), True)
    content = flower_client.train_content(flower_client.shared_content(w, setup.algorithm.init_server(w)), ctx)
    reply = flower_client.train(Message(content, dst_node_id=1, message_type="train"), context)
    got = flower_client.unpack(reply.content, prefix=flower_client.UPDATE)["delta"]

    local = build_setup(load_config(None, overrides))
    _, want = train_client(local.algorithm, ctx, w, local.algorithm.init_server(w),
                           local.algorithm.init_client(w), local.federation)
    assert torch.equal(got, want.delta)
    plain = build_setup(load_config(None, [*overrides, "train.augment=null"]))
    _, unaugmented = train_client(plain.algorithm, ctx, w, plain.algorithm.init_server(w),
                                  plain.algorithm.init_client(w), plain.federation)
    assert not torch.allclose(unaugmented.delta, want.delta)
    flower_client._SETUPS.clear()


# --- clip scope ---------------------------------------------------------------------------------


class Linear(nn.Module):
    """f(w) = mean_i (x_i . w - y_i)^2 / 2 on a flat weight vector."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.zeros(d, dtype=torch.float64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.w

    def loss(self, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return 0.5 * ((out - y) ** 2).mean()


@pytest.mark.parametrize("scope", ["gradient", "objective"])
def test_clip_scope_against_a_hand_computed_fedprox_step(scope: str) -> None:
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(6, 3)), rng.normal(size=6)
    w, start = np.array([0.5, -1.0, 2.0]), np.array([3.0, 1.0, -2.0])
    mu, lr, clip, decay = 0.8, 0.1, 0.5, 0.2
    # by hand: z = X^T (X theta - y) / B at theta = start; FedProx adds mu (theta - w)
    z = x.T @ (x @ start - y) / len(y)
    prox = mu * (start - w)
    if scope == "gradient":
        d = z * min(1.0, clip / np.linalg.norm(z)) + prox
    else:
        d = (z + prox) * min(1.0, clip / np.linalg.norm(z + prox))
    want = start - lr * (d + decay * start)  # weight decay after clipping, as the references' optimiser
    assert np.linalg.norm(z) > clip and np.linalg.norm(z + prox) > clip  # both scopes clip

    from fedaccel.engine.flat import FlatModel

    model = FlatModel(Linear(3))
    options = LocalOptions(lr=lr, batch_size=6, clip=clip, clip_scope=scope, weight_decay=decay)
    from fedaccel.algorithms.fedprox import fedprox

    prox_term = fedprox(mu=mu).local_term(None, torch.from_numpy(w), None, None)  # type: ignore[arg-type, misc]
    module = model.module
    got = train_local(model, torch.from_numpy(x), torch.from_numpy(y), [np.arange(6)], torch.from_numpy(start),
                      module.loss, lr, options, [prox_term])
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-12)


@pytest.mark.parametrize("scope", ["gradient", "objective"])
def test_fedprox_clip_scope_stacked_equals_in_process(scope: str) -> None:
    a = train_rounds(image_federation("2nn", clip=0.05, clip_scope=scope))
    b = train_rounds(image_federation("2nn", clip=0.05, clip_scope=scope), stacked=True)
    torch.testing.assert_close(b.w, a.w, atol=1e-6, rtol=1e-5)
    other = "gradient" if scope == "objective" else "objective"
    assert not torch.allclose(a.w, train_rounds(image_federation("2nn", clip=0.05, clip_scope=other)).w, atol=1e-5)
