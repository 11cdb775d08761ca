"""Building a run: a config in, the federation (data, split, model) and the algorithm out.

Every runtime starts here: in process, stacked, and both sides of Flower (the ServerApp and
each ClientApp build the same :class:`Setup` from the same config, deterministically from the seed).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from fedaccel.algorithms.base import Algorithm, make_rng
from fedaccel.algorithms.registry import get_recipe
from fedaccel.engine.device import resolve_device
from fedaccel.engine.federation import Federation
from fedaccel.errors import ConfigError
from fedaccel.runs.config import Config, build_algorithm_from, local_options


@dataclass
class Setup:
    """Everything built from a config before the first round."""

    config: Config
    federation: Federation
    algorithm: Algorithm
    fraction: float
    num_classes: int = 0
    active_attacks: int = 0  # how many of config.attacks are applied to the training data now

    @property
    def privacy(self) -> Any:
        """The run's client-level DP settings (:class:`fedaccel.algorithms.dp.DPSettings`), or None."""
        from fedaccel.algorithms.dp import dp_settings
        from fedaccel.runs.config import dp_with_population

        spec = dp_with_population(self.config)
        return None if spec is None else dp_settings(spec)

    @property
    def schedule(self) -> list[list[int]] | None:
        """Who takes part in each round when ``train.participation`` fixes it (else sampled)."""
        return self.config.train.participation


def build_partition(config: Config) -> tuple[Any, list[np.ndarray]]:
    """Load the dataset and split it over the clients (one client for centralized SGD)."""
    from fedaccel.data import load_dataset
    from fedaccel.data.splits import split

    seed = config.run.seed
    d = config.data
    dataset = load_dataset(d.dataset, d.root, seed=seed, subset=d.subset, test_subset=d.test_subset)
    labels = dataset.y_train.numpy()
    if get_recipe(config.algorithm["name"]).centralized:
        return dataset, [np.arange(len(labels))]
    split_args = {k: v for k, v in d.split.items() if k != "name"}
    if d.split["name"] == "natural":
        split_args["partition"] = dataset.natural_partition
    return dataset, split(d.split["name"], labels, d.clients, make_rng(seed, "split"), **split_args)


def build_setup(config: Config) -> Setup:
    """Load data, split it, build the model and the algorithm (deterministic from the seed)."""
    from fedaccel.models import build_model

    seed = config.run.seed
    dataset, partition = build_partition(config)
    model_args = {k: v for k, v in config.model.items() if k != "name"}
    module = build_model(config.model["name"], dataset.input_shape, dataset.num_classes, seed=seed, **model_args)
    if config.train.dp_sgd is not None:
        from fedaccel.engine.dp_sgd import check_model

        check_model(module, config.model["name"])
    check_label_flips(config, module, dataset.num_classes)
    federation = Federation(
        module,
        dataset.x_train,
        dataset.y_train,
        partition,
        dataset.x_test,
        dataset.y_test,
        local_options(config),
        seed=seed,
        eval_train_samples=config.eval.train_samples,
        device=resolve_device(config.run.device),
    )
    algorithm = build_algorithm_from(config)
    return Setup(config, federation, algorithm, config.train.client_fraction, dataset.num_classes)


def check_label_flips(config: Config, module: Any, num_classes: int) -> None:
    """One line where a label flip changes no target the model trains on: the squared SVM's parity labels
    (even +1, odd -1) stay where an even shift moves every class, and the attacked run would be the clean one."""
    targets = getattr(module, "targets", None)
    if targets is None:
        return
    classes = torch.arange(num_classes)
    for attack in config.attacks:
        shift = attack.get("shift", 1)
        if attack["kind"] == "label-flip" and torch.equal(targets(classes), targets((classes + shift) % num_classes)):
            raise ConfigError(f"attack label-flip with shift {shift} changes no target of model "
                              f"{config.model['name']}, which trains on its classes' {_labels(module)}: the attacked "
                              "clients would train as honest ones; give a shift that moves a class to another target")


def _labels(module: Any) -> str:
    """What a model's ``targets`` keeps of a class, in words."""
    return "parity (even +1, odd -1)" if getattr(module, "labels", None) == "parity" else "targets"


def apply_attacks(setup: Setup, round_: int) -> None:
    """Make the configured malicious clients' training data attacked from their start round on."""
    attacks = sorted(setup.config.attacks, key=lambda a: a.get("from_round", 0))
    active = sum(1 for a in attacks if round_ >= a.get("from_round", 0))
    if active == setup.active_attacks:
        return
    from fedaccel.data.attacks import attack_clients

    fed = setup.federation
    x, y = fed.clean_train
    for k, attack in enumerate(attacks[:active]):
        x, y = attack_clients(
            attack["kind"], x, y, fed.partition, attack["clients"], setup.num_classes,
            make_rng(setup.config.run.seed, "attack", k), shift=attack.get("shift", 1),
        )
    fed.set_training_data(x, y)
    setup.active_attacks = active
