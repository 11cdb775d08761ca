"""Python API for your own model and data.

Example (runs in a second on the CPU):
    >>> import numpy as np, torch
    >>> from fedaccel import train
    >>> g = torch.Generator().manual_seed(0)
    >>> x, y = torch.randn(200, 5, generator=g), torch.randint(0, 2, (200,), generator=g)
    >>> parts = [np.arange(0, 100), np.arange(100, 200)]      # one index array per client
    >>> model = torch.nn.Linear(5, 2)                          # any torch.nn.Module
    >>> history = train(model, x, y, parts, x, y, algorithm="fedavg", rounds=3, lr=0.1, progress=False)
    >>> len(history.metrics)                                   # round 0 and rounds 1-3
    4

The module is used as it is: if it has ``loss(output, y)`` and ``correct(output, y)`` methods
they are used, else cross-entropy and argmax accuracy.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from fedaccel.algorithms.base import Algorithm
from fedaccel.algorithms.presets import apply_preset
from fedaccel.algorithms.sampling import check_schedule
from fedaccel.data.splits import checked_partition
from fedaccel.engine.device import resolve_device
from fedaccel.engine.federation import Federation
from fedaccel.engine.round import FLState, init_state
from fedaccel.errors import UserError, shown
from fedaccel.report.reading import load_run
from fedaccel.runs.checkpoint import restore_state
from fedaccel.runs.config import (
    OBJECT_KEY,
    Config,
    DataConfig,
    EvalConfig,
    RunConfig,
    TrainConfig,
    _build,
    _named,
    build_algorithm_from,
    check_plugins,
    check_values,
    dump_config,
    local_options,
    read_yaml,
    warn_if_fedavg_in_disguise,
)
from fedaccel.runs.folder import METRICS, new_run_dir
from fedaccel.runs.lock import lock_run_dir
from fedaccel.runs.loop import run_loop
from fedaccel.runs.setup import Setup


@dataclass
class History:
    """The outcome of [train][fedaccel.api.train]: metrics per evaluated round, the final state and, with
    ``keep_models=True``, the global model of every evaluated round."""

    metrics: list[dict[str, Any]]
    state: FLState
    run_dir: Path
    models: dict[int, Tensor] = field(default_factory=dict)  # round -> flat w; empty unless keep_models

    @property
    def w(self) -> Tensor:
        """The final global model as a flat vector."""
        return self.state.w


def train(
    module: nn.Module,
    x_train: Tensor,
    y_train: Tensor,
    partition: Sequence[np.ndarray],
    x_test: Tensor,
    y_test: Tensor,
    *,
    algorithm: str | Mapping[str, Any] | Algorithm = "fedavg",
    rounds: int = 10,
    seed: int = 0,
    run_dir: str | Path | None = None,
    resume: bool = False,
    eval_every: int = 1,
    keep_models: bool = False,
    progress: bool = True,
    device: str | torch.device | None = None,
    **train_options: Any,
) -> History:
    """Federated training of ``module`` over ``partition`` (one index array per client).

    ``algorithm`` is a recipe name (``"fedumf"``), a name with its hyperparameters as in a config
    (``{"name": "fedumf", "fraction": 0.5}``) or a composed [Algorithm][fedaccel.algorithms.base.Algorithm]. A recipe with a
    ``fraction`` hyperparameter (FedUMF's C) takes ``client_fraction`` unless it is given; an Algorithm object keeps
    the fraction it was built with (``build_algorithm("fedumf")``: the paper's C = 0.1).

    ``train_options`` are the keys of `fedaccel.runs.config.TrainConfig`: lr, batch_size,
    local_epochs, local_steps, momentum, weight_decay, lr_decay or lr_schedule, clip, client_fraction,
    order (``"fixed"``, ``"reshuffle"``, ``"reshuffle_epoch"`` or ``"given"``: each client's index array in
    the order given, cut into consecutive batches), last_batch (``"drop"`` or ``"partial"``) and participation (the clients selected in each round,
    e.g. ``[[0, 1], [2, 3]]``; round t uses entry (t - 1) mod its length); sampling, local_work and
    partial_work for systems heterogeneity (``local_work={"name": "uniform", "max_epochs": 5}``;
    docs/algorithms/fedavg.md "Systems heterogeneity").

    A run folder is written to ``run_dir`` (default: a new one under ``runs/api``). A folder that
    holds a run already is refused, unless ``resume=True``: then its run continues from the last
    checkpoint, with the same settings, to the numbers of an uninterrupted run.
    ``keep_models=True`` keeps the global model of every round evaluated here in ``History.models``.
    ``device`` (``cpu``, ``cuda``, ``cuda:N``, ``mps``, ``auto``; default: where ``module`` is) is
    where the model, the data and every state live; they are moved there once.
    """
    where = next(module.parameters(), torch.empty(0)).device if device is None else resolve_device(device)
    check_data(module, {"x_train": x_train, "y_train": y_train, "x_test": x_test, "y_test": y_test})
    partition = checked_partition(partition, len(x_train), "partition")  # before a run folder is written
    config = _config(module, partition, algorithm, rounds, seed, eval_every, progress, train_options,
                     data=(x_train, y_train, x_test, y_test))
    config.run.device = str(where)
    if config.train.dp_sgd is not None:  # as a config's run checks it (fedaccel.runs.setup)
        from fedaccel.engine.dp_sgd import check_model

        check_model(module, type(module).__name__)
    if isinstance(algorithm, Algorithm):
        algo = algorithm
        check_own_fraction(algo, train_options.get("client_fraction"))
    else:
        algo = build_algorithm_from(config)
        warn_if_fedavg_in_disguise(config)
    federation = Federation(
        module, x_train, y_train, partition, x_test, y_test, local_options(config), seed=seed, device=where
    )
    check_scoring(federation)
    setup = Setup(config, federation, algo, config.train.client_fraction)
    path = Path(run_dir) if run_dir is not None else new_run_dir(config)
    models: dict[int, Tensor] = {}

    def keep(state: FLState, row: dict[str, Any]) -> None:
        models[state.round] = state.w.clone()

    with lock_run_dir(path):  # one writer per run folder, as for the CLI
        state, wall, parts = _start_or_resume(setup, path, resume)
        final = run_loop(setup, state, path, wall=wall, progress=progress, parts=parts,
                         on_eval=keep if keep_models else None)
    return History(load_run(path).metrics, final, path, models)


def check_data(module: nn.Module, data: Mapping[str, Any]) -> None:
    """One line, before a run folder is written, where the data cannot train ``module``: not tensors, labels not as
    many as inputs, or, for a module that trains and scores by cross-entropy and argmax (no ``loss`` or ``correct``
    of its own), labels that are not class indices (floats, one-hot rows); torch said it mid-run, in a traceback,
    leaving a folder behind."""
    for name, value in data.items():
        if not isinstance(value, Tensor):
            raise UserError(f"{name} must be a torch tensor, got {type(value).__name__}"
                            + (" (torch.from_numpy makes one)" if isinstance(value, np.ndarray) else ""))
        if (value.dtype.is_floating_point or value.dtype.is_complex) and not bool(torch.isfinite(value).all()):
            bad = (~torch.isfinite(value)).reshape(len(value), -1).any(1) if value.dim() else torch.ones(1, dtype=bool)
            raise UserError(f"{name} holds NaN or infinite values in {int(bad.sum())} sample(s), the first at index "
                            f"{int(bad.nonzero()[0, 0])}: a model trained on them diverges")
    for split in ("train", "test"):
        x, y = data[f"x_{split}"], data[f"y_{split}"]
        if x.dim() == 0 or y.dim() == 0 or len(x) != len(y):
            raise UserError(f"x_{split} and y_{split} must hold one label per input: shapes {tuple(x.shape)} and "
                            f"{tuple(y.shape)}")
        if callable(getattr(module, "loss", None)) or callable(getattr(module, "correct", None)):
            continue  # the module's own loss or score says what labels it takes (soft or per-pixel ones, say)
        if y.dim() != 1 or y.dtype.is_floating_point or y.dtype.is_complex or y.dtype == torch.bool:
            raise UserError(f"y_{split} must be class indices, a 1-D integer tensor, for {type(module).__name__}'s "
                            f"cross-entropy: got {str(y.dtype).removeprefix('torch.')} of shape {tuple(y.shape)}"
                            + (" (one-hot rows? y.argmax(1) gives their indices)" if y.dim() == 2 else ""))


def check_own_fraction(algorithm: Algorithm, client_fraction: Any) -> None:
    """An Algorithm object that selects its own clients (FedUMF's C, a part with a ``participation`` stage) beside a
    ``client_fraction`` it would not use: refused in one line (a recipe name takes ``client_fraction`` as its C)."""
    found = algorithm.single("participation")
    own = getattr(found[1], "upload_fraction", None) if found else None
    if client_fraction is not None and own is not None and own != client_fraction:
        raise UserError(f"algorithm {algorithm.name!r} selects its own clients, a fraction {own:g} of them, so "
                        f"client_fraction={client_fraction:g} would not be used: build it with fraction="
                        f"{client_fraction:g}, or give its name (algorithm={algorithm.name!r} takes client_fraction)")


def check_scoring(federation: Federation) -> None:
    """One line, before a run folder is written, where the module cannot score the data: its output, loss and count
    of correct samples on the first :data:`TRIAL` samples of each set (a shape or dtype that does not fit, or, for
    cross-entropy, labels outside the module's outputs were torch's traceback mid-run, leaving a folder), and a
    ``correct`` that returns no count (an accuracy, say: every test_acc was 0)."""
    module = federation.model.module
    name, training = type(module).__name__, module.training
    for split, x, y in (("train", federation.x_train, federation.y_train),
                        ("test", federation.x_test, federation.y_test)):
        xb, yb = x[:TRIAL], y[:TRIAL]
        module.eval()  # no batch statistics move
        try:
            with torch.no_grad():
                out = module(xb)
                federation.loss_fn(out, yb)
                count = float(federation.correct_fn(out, yb))
        except Exception as exc:  # noqa: BLE001  # the module's, torch's: said in one line, nothing written yet
            said = " ".join(str(exc).split())[:300]
            raise UserError(f"{name} cannot score x_{split}[:{len(xb)}] and y_{split}[:{len(yb)}]: "
                            f"{type(exc).__name__}: {said}") from exc
        finally:
            module.train(training)
        if not (0 <= count <= len(yb) and count == int(count)):
            raise UserError(f"{name}.correct(output, y) must return how many of the batch's samples are correct (a "
                            f"count: fedaccel sums it over batches and divides by the samples), got {count:g} for "
                            f"{len(yb)} samples of x_{split}")
        if not callable(getattr(module, "loss", None)) and out.dim() == 2 and len(y):  # cross-entropy's labels
            classes, low, high = out.shape[1], int(y.min()), int(y.max())
            if low < 0 or high >= classes:
                raise UserError(f"y_{split} holds labels {low}..{high}, but {name} has {classes} outputs: "
                                f"cross-entropy takes labels 0..{classes - 1}")


TRIAL = 64  # samples of each set that check_scoring runs through the module


def _config(
    module: nn.Module,
    partition: Sequence[np.ndarray],
    algorithm: str | Mapping[str, Any] | Algorithm,
    rounds: int,
    seed: int,
    eval_every: int,
    progress: bool,
    train_options: dict[str, Any],
    data: tuple[Tensor, ...] = (),
) -> Config:
    """The run's config, checked as a config file would be (one-line ConfigErrors). What a config cannot name (the
    module, the data and partition given, an Algorithm object) is recorded by its fingerprint
    (:mod:`fedaccel.algorithms.fingerprint`): the module's architecture (:func:`architecture`; not its weights),
    the data's and partition's bytes, so that runs on other data, another split or model are told apart."""
    from fedaccel.algorithms.fingerprint import fingerprint_of

    if isinstance(algorithm, Algorithm):  # its settings are in its parts, not a config: their fingerprint is kept
        from fedaccel.algorithms.fingerprint import fingerprint

        section: dict[str, Any] = {"name": algorithm.name, OBJECT_KEY: fingerprint(algorithm)}
    else:
        section = _named(dict(algorithm) if isinstance(algorithm, Mapping) else algorithm, "algorithm", "fedavg")
    options = {"rounds": rounds, **train_options}
    if options.get("participation") is not None:  # tuples and arrays too, stored as lists
        options["participation"] = check_schedule(options["participation"], len(partition))
    # an algorithm.preset fills the train and eval keys left unset, as in a config file (fedaccel.algorithms.presets)
    raw = apply_preset({"algorithm": section, "train": options, "eval": {"every": eval_every, "train_samples": None},
                        "run": {"seed": seed, "progress": progress, "out_dir": "runs/api"}})
    config = Config(
        name=str(section["name"]),
        algorithm=raw["algorithm"],
        model={"name": type(module).__name__, OBJECT_KEY: architecture(module)},
        data=DataConfig(dataset="custom", clients=len(partition), split={
            "name": "given", "data": fingerprint_of(*data), "partition": fingerprint_of(list(partition))}),
        train=_build(TrainConfig, raw["train"], "train."),
        eval=_build(EvalConfig, raw["eval"], "eval."),
        run=_build(RunConfig, raw["run"], "run."),
    )
    check_values(config, recipe=not isinstance(algorithm, Algorithm))  # the participation schedule among them
    return config


def architecture(module: nn.Module) -> str:
    """The fingerprint of ``module``'s architecture: its layers as ``repr`` shows them (addresses left out), its
    state's names, shapes and dtypes, and the ``forward`` of each class of its own (not torch's); not its weights, so
    a pretrained start and a fresh one share it."""
    import re

    from fedaccel.algorithms.fingerprint import fingerprint_of

    state = [(name, tuple(t.shape), str(t.dtype)) if isinstance(t, Tensor) and not _uninitialized(t)
             else (name, type(t).__qualname__) for name, t in module.state_dict().items()]
    own = sorted({type(m) for m in module.modules() if not type(m).__module__.startswith("torch.")},
                 key=lambda kind: f"{kind.__module__}.{kind.__qualname__}")
    return fingerprint_of(re.sub(r" at 0x[0-9a-fA-F]+", "", repr(module)), state,
                          [(f"{kind.__module__}.{kind.__qualname__}", getattr(kind, "forward", None)) for kind in own])


def _uninitialized(tensor: Tensor) -> bool:
    return isinstance(tensor, nn.parameter.UninitializedTensorMixin)


def _start_or_resume(setup: Setup, path: Path, resume: bool) -> tuple[FLState, float, list[dict[str, Any]]]:
    """The state to start from, the wall time so far and where its rounds ran: everything train() does
    with its (locked) folder before the rounds happens here."""
    config = setup.config
    if (path / METRICS).exists():
        if not resume:
            raise UserError(f"{path} already holds a run; pass resume=True to continue it, or use another folder")
        _check_same_settings(path, config)
        return restore_state(setup, path)
    dump_config(config, path / "config.yaml")
    fed = setup.federation
    return init_state(setup.algorithm, fed.model.theta.clone(), fed.n_clients), 0.0, []


#: What train() records by fingerprint (:func:`_config`); a run started before it has none of them.
FINGERPRINTS = (f"algorithm.{OBJECT_KEY}", f"model.{OBJECT_KEY}", "data.split.data", "data.split.partition")


def _check_same_settings(path: Path, config: Config) -> None:
    """A run continues only with the settings it was started with (its progress bar and device aside)."""
    check_plugins((path / "config.yaml").read_text(encoding="utf-8", errors="replace"), str(path))
    stored = _flat(_build(Config, read_yaml(path / "config.yaml"), "").to_dict())
    wanted = _flat(config.to_dict())
    older = [key for key in FINGERPRINTS if key in wanted and key not in stored]
    if older:  # no setting could match: say why, not "resume it with its settings"
        raise UserError(f"{path} was started by a fedaccel that did not record {older[0]} (the fingerprint of what "
                        "you gave train()), so it cannot be checked to be the same: start it again in another folder")
    for key in sorted(set(stored) | set(wanted)):
        if key not in ("run.progress", "run.device") and stored.get(key) != wanted.get(key):
            raise UserError(
                f"{path} holds a run with {key} = {shown(stored.get(key))}, not {shown(wanted.get(key))}; "
                "resume it with its settings or use another folder"
            )


def _flat(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, Mapping):
            flat.update(_flat(value, f"{prefix}{key}."))
        else:
            flat[prefix + key] = value
    return flat
