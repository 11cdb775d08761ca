"""Presets: "as the authors ran it" in one word, ``algorithm: {name: NAME, preset: REPO}``.

A preset sets every reference-code option of docs/algorithms.md ("Reference code") to what one public
repository does: the recipe's hyperparameters (``algorithm``, per recipe) and the train/eval keys the code
fixes (``config``, dotted keys; ``recipe_config``: those it fixes for some recipes only). It is a defaults layer: built-in defaults < preset < the user's file <
``--set``, so a key the user sets wins (:func:`apply_preset`, called by ``fedaccel.runs.config``); a key of the
user's that says what a preset's key says in another spelling (``train.lr_decay`` beside the preset's
``train.lr_schedule``) is refused in one line naming both. The
resolved config (``config.yaml`` in the run folder) holds every value the preset set, so a run is
reproducible without this table.

``cifar`` values apply only to CIFAR datasets (the references augment CIFAR only). :data:`NOT_SET` lists
what a repository also does that a preset leaves to the experiment, and why.

Example:
    >>> raw = apply_preset({"algorithm": {"name": "scaffold", "preset": "feddc-code"}, "train": {"clip": 5.0}})
    >>> raw["algorithm"]["control_lr"], raw["train"]["clip"], raw["train"]["order"], raw["train"]["last_batch"]
    ('initial', 5.0, 'reshuffle_epoch', 'partial')
"""

from __future__ import annotations

import copy
from typing import Any

from fedaccel.errors import ConfigError, listed, shown, spelled

# Reference file:line for every value: docs/algorithms.md, "Reference code".
PRESETS: dict[str, dict[str, Any]] = {
    "feddc-code": {
        "repository": "gaoliang13/FedDC",
        "recipes": ("scaffold", "feddyn", "feddc", "fedprox", "fedavg"),
        "algorithm": {
            # utils_methods.py:634,641,643,649,655 and example_code_cifar10.py:111-113
            "scaffold": {"weighting": "reference", "control_lr": "initial", "control_steps": "shared"},
            "feddyn": {"alpha": 0.01, "weighting": "uniform"},  # example_code_cifar10.py:94; np.mean of the models
            # utils_methods_FedDC.py:175 (beta = 1/n_minibatch/learning_rate), 185; example_code_cifar10.py:73,77-79
            "feddc": {"alpha": 0.01, "weighting": "uniform", "control_lr": "initial", "control_steps": "shared"},
            "fedprox": {"mu": 2e-4},  # utils_general.py:187: 1e-4 ||theta - w||^2, gradient 2e-4 (theta - w)
            "fedavg": {},  # utils_methods.py:146: data-weighted mean of the selected models, as fedaccel's
        },
        "config": {
            "train.clip": 10.0,  # utils_general.py:11 (max_norm = 10), clip_grad_norm_ at every step
            "train.clip_scope": "objective",  # utils_general.py:474: clipped after backward() of loss + the method's terms
            # utils_general.py:76,102 (also :142,168, :347,363, :429,445): a DataLoader with shuffle=True iterated
            # anew each epoch (a new order every epoch), ceil(n/B) batches, the last one short, its loss / its size (:114)
            "train.order": "reshuffle_epoch",
            "train.last_batch": "partial",
            "eval.models": ["broadcast", "client_mean", "all_mean"],  # utils_methods_FedDC.py:191-213 logs all three
        },
        "recipe_config": {  # utils_methods.py:146-147 (FedAvg), :397-398 (FedProx): both means weighted by |D_i|
            "fedavg": {"eval.mean_weighting": "data"},
            "fedprox": {"eval.mean_weighting": "data"},
            # utils_general.py:238-255: SCAFFOLD runs K = E ceil(mean n_i / B) steps on every client. FedDC does
            # not: train_model_FedDC (utils_general.py:442-446) runs E epochs of ceil(n_i / B) batches of the
            # client's own data; the shared K (example_code_cifar10.py:77-79, n_minibatch) enters FedDC only in its
            # control step beta = 1/n_minibatch/lr (utils_methods_FedDC.py:175), which control_steps: shared sets.
            "scaffold": {"train.local_steps": "shared"},
        },
        "cifar": {"train.augment": {"crop_padding": 4, "flip": True}},  # utils_dataset.py (Dataset, train=True)
    },
    "feddyn-code": {
        "repository": "alpemreacar/FedDyn",
        "recipes": ("feddyn",),
        "algorithm": {
            "feddyn": {"alpha": 0.01, "weighting": "uniform"},  # example_cifar_10.py:65; utils_methods.py:396
        },
        "config": {
            "train.clip": 10.0,  # utils_general.py:8 (max_norm = 10), clipped at :224
            "train.clip_scope": "objective",  # utils_general.py:224 (after backward() of the whole local loss)
            # utils_general.py:187 (DataLoader shuffle=True, iterated anew each epoch: ceil(n/B) batches, the last short)
            "train.order": "reshuffle_epoch",
            "train.last_batch": "partial",
            # utils_methods.py:396-416 scores the client means only; fedaccel always logs the broadcast model too
            "eval.models": ["broadcast", "client_mean", "all_mean"],
        },
        "cifar": {"train.augment": {"crop_padding": 4, "flip": True}},  # utils_dataset.py (Dataset, train=True)
    },
    "fednova-code": {
        "repository": "JYWa/FedNova",
        "recipes": ("fednova",),
        "algorithm": {
            # distoptim/FedNova.py:172-175 (sum p_i tau_i when mu != 0); train_LocalSGD.py:44-45 (gmf default 0)
            "fednova": {"tau_eff": "steps", "gmf": 0.0},
        },
        "config": {
            "train.momentum": 0.9,  # launch_exp.sh:14 (--momentum 0.9; the argparse default is 0)
            "train.weight_decay": 1e-4,  # train_LocalSGD.py:179 (hard-coded)
            # util_v4.py:184-187 (DataLoader shuffle=True, drop_last False), train_LocalSGD.py:192-193,243: every
            # epoch a new order and len(train_loader) = ceil(n/B) batches, the last one short
            "train.order": "reshuffle_epoch",
            "train.last_batch": "partial",
            # train_LocalSGD.py:295-310 (update_learning_rate): eta_0/10 from round int(R/2), eta_0/100 from int(0.75 R)
            "train.lr_schedule": {"name": "step", "milestones": [0.5, 0.75], "factor": 0.1},
        },
    },
    "fedprox-code": {
        "repository": "litian96/FedProx",
        "recipes": ("fedprox",),
        "algorithm": {
            "fedprox": {"mu": 0.0},  # main.py:73-76 (--mu default 0; the paper's runs pass mu per dataset)
        },
        "config": {
            "train.order": "fixed",  # flearn/utils/model_utils.py:14 (np.random.seed(100) before every shuffle)
        },
    },
}

# What the repositories also do that a preset does not set, and why (docs/algorithms.md, "Reference code").
NOT_SET: dict[str, dict[str, Any]] = {
    "feddyn-code": {
        "train.clip_scope (in part)": "objective is set, but FedDyn's alpha theta sits in the optimiser's weight "
                                      "decay there, so it is not clipped; fedaccel clips the whole FedDyn term",
    },
    "fednova-code": {
        "train.local_work": "random local epochs per client per round (train_LocalSGD.py, --localE) is the paper's "
                            "experiment, not the code's default: set {name: uniform, min_epochs: 2, max_epochs: L-1}",
    },
    "fedprox-code": {
        "train.local_work": "stragglers (main.py, --drop_percent) run fewer epochs and need E > 1: set "
                            "{name: stragglers, fraction: P} with train.local_epochs > 1",
    },
}


def presets_for(recipe: str) -> list[str]:
    """The presets that name ``recipe``."""
    return [name for name, preset in PRESETS.items() if recipe in preset["recipes"]]


def preset_values(preset: str, recipe: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(algorithm hyperparameters, dotted config keys) of ``preset`` for ``recipe``; one-line ConfigError if
    the preset is unknown or not for this recipe."""
    if preset not in PRESETS:
        raise ConfigError(f"unknown algorithm.preset {shown(preset)}; known: {listed(sorted(PRESETS), near=preset)}")
    table = PRESETS[preset]
    if recipe not in table["recipes"]:
        raise ConfigError(f"algorithm.preset {preset} ({table['repository']}) is for {listed(table['recipes'])}, "
                          f"not {shown(recipe)}; presets for {recipe}: {listed(presets_for(recipe))}")
    config = {**table["config"], **table.get("recipe_config", {}).get(recipe, {})}
    return dict(table["algorithm"].get(recipe, {})), config


#: Keys a preset sets that another key also says: the older spelling beside it (train.reshuffle is an order,
#: train.lr_decay a schedule). A user's value of the other key, even its default, would switch the preset's off.
OTHER_SPELLING = {"train.order": "train.reshuffle", "train.lr_schedule": "train.lr_decay"}


def _check_other_spelling(raw: dict[str, Any], preset: str, dotted: str, value: Any) -> None:
    """A key of the user's that says what the preset's ``dotted`` says, with ``dotted`` itself left to the preset:
    one line naming both (before, the user's key silently won: ``train.lr_decay: 1.0`` turned fednova-code's
    step schedule off)."""
    other = OTHER_SPELLING.get(dotted)
    train = raw.get("train") if isinstance(raw.get("train"), dict) else {}
    if other is None or other.split(".")[1] not in train or dotted.split(".")[1] in train:
        return
    mine = train[other.split(".")[1]]
    raise ConfigError(f"{other}: {spelled(mine)} conflicts with algorithm.preset {preset}'s {dotted}: {spelled(value, 120)} "
                      f"(both say the {'batch order' if dotted == 'train.order' else 'learning-rate schedule'}): drop "
                      f"{other} to run the preset's, or give {dotted} yourself, which wins over the preset")


def apply_preset(raw: dict[str, Any], default_recipe: str = "fedavg") -> dict[str, Any]:
    """``raw`` (a config mapping: file and ``--set`` merged) with its ``algorithm.preset`` filled in under
    every key ``raw`` leaves unset; ``raw`` itself is not changed. No preset: ``raw`` as it is."""
    algorithm = raw.get("algorithm")
    if not isinstance(algorithm, dict) or algorithm.get("preset") is None:
        return raw
    preset, recipe = algorithm["preset"], algorithm.get("name", default_recipe)
    if not isinstance(preset, str) or not isinstance(recipe, str):
        raise ConfigError(f"algorithm.preset must be a name, got {shown(preset)}")
    hyper, config = preset_values(preset, recipe)
    dataset = (raw.get("data") or {}).get("dataset") if isinstance(raw.get("data"), dict) else None
    if isinstance(dataset, str) and dataset.startswith("cifar"):
        config.update(PRESETS[preset].get("cifar", {}))
    out = copy.deepcopy(raw)
    for key, value in hyper.items():
        out["algorithm"].setdefault(key, value)
    for dotted, value in config.items():
        _check_other_spelling(out, preset, dotted, value)
        node = out
        *parents, leaf = dotted.split(".")
        for key in parents:
            child = node.get(key)
            if child is None:
                child = node[key] = {}
            if not isinstance(child, dict):
                break  # not a mapping: the config's own check reports it
            node = child
        else:
            node.setdefault(leaf, value)
    return out
