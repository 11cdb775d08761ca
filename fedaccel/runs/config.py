"""Run configuration: typed defaults, small YAML files that override them, ``--set`` overrides.

A config file only names what differs from the defaults below. Unknown keys and invalid values
fail at load with one line (``ConfigError``). ``algorithm``, ``model`` and ``data.split`` are
*named* sections: a name plus that thing's own hyperparameters, e.g.::

    algorithm: {name: fedavg}
    data: {dataset: fashion-mnist, split: {name: dirichlet, alpha: 0.1}, clients: 10}
    train: {rounds: 50, lr: 0.05}

``--set train.lr=0.1 --set data.split=case2 --set algorithm.server_lr=0.5`` override any key;
values are read as YAML (``null``, ``true``, numbers, lists).
"""

from __future__ import annotations

import dataclasses
import inspect
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_type_hints

import yaml

from fedaccel.errors import ConfigError
from fedaccel.runs.files import write_atomic

NAMED = "named"  # metadata marker for {name: ..., **params} sections


def named(default: str) -> Any:
    return field(default_factory=lambda: {"name": default}, metadata={NAMED: True})


@dataclass
class DataConfig:
    dataset: str = "fashion-mnist"  # see `fedaccel data`
    root: str | None = None  # folder (or archive) of the dataset; null = the known locations
    subset: int | None = None  # keep at most this many training samples (seeded)
    test_subset: int | None = None  # keep at most this many test samples (seeded)
    split: dict[str, Any] = named("iid")  # how samples are divided over clients
    clients: int = 5  # N


@dataclass
class TrainConfig:
    rounds: int = 50  # T
    lr: float = 0.01  # eta_0, local learning rate
    batch_size: int = 50  # B
    local_epochs: float = 1.0  # E (fractional allowed): tau_i = floor(E |D_i| / B)
    local_steps: int | None = None  # tau for every client instead of E |D_i| / B (FedGSNR's baselines)
    momentum: float = 0.0
    weight_decay: float = 0.0
    lr_decay: float = 1.0  # eta_t = eta_0 * lr_decay^t
    clip: float | None = None  # max gradient norm per mini-batch
    order: str = "fixed"  # batch order: fixed (seeded, once per client), reshuffle (every round, RR) or given
    reshuffle: bool = False  # older spelling of order: reshuffle (kept for existing configs and run folders)
    client_fraction: float = 1.0  # fraction of clients selected per round (FedUMF's C unless algorithm.fraction is set)
    # who is selected each round instead of sampling: a list of client lists, round t uses entry (t-1) mod its length
    participation: list[list[int]] | None = None

    def __post_init__(self) -> None:
        from fedaccel.engine.local import batch_order

        self.order = batch_order(self.order, self.reshuffle)  # one spelling in the resolved config
        self.reshuffle = self.order == "reshuffle"


@dataclass
class EvalConfig:
    every: int = 1  # evaluate every k rounds (and always after the last)
    train_samples: int | None = 10000  # training-set loss on a fixed sample of this size; null = all


@dataclass
class RunConfig:
    seed: int = 0
    out_dir: str = "runs"  # run folders are created under this
    checkpoint_every: int = 5  # rounds between checkpoints
    runtime: str = "in-process"  # or stacked, auto (README "Speed"), flower-simulation, flower-deployment
    stack_size: int | None = None  # stacked runtime: clients per batched step; null = what fits 1 GiB (on a CPU: ~8 MB of batches a step)
    timeout: float = 300.0  # Flower runtimes: seconds a round waits for clients' answers
    progress: bool = True  # progress bar on stderr
    tensorboard: bool = False  # TensorBoard event files in the run folder, written as the run goes
    threads: int | None = None  # torch threads; null = auto (1, or one per core for a large model alone: README)
    device: str = "cpu"  # cpu, cuda, cuda:N, mps or auto (the first of cuda, mps, cpu here): model, data, states
    on_divergence: str = "stop"  # a NaN/inf model or loss: stop (exit non-zero, last finite checkpoint kept) or continue


@dataclass
class Config:
    name: str = ""  # label in plots and tables; default: the algorithm's name
    algorithm: dict[str, Any] = named("fedavg")
    model: dict[str, Any] = named("svm")
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    run: RunConfig = field(default_factory=RunConfig)
    # malicious clients, e.g. [{kind: label-flip, clients: [0, 3], from_round: 10, shift: 1}]
    # (kind: label-flip | noise; labels l -> (l + shift) mod C, or inputs ~ U(-1, 1))
    attacks: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @property
    def label(self) -> str:
        return self.name or str(self.algorithm["name"])


ON_DIVERGENCE = ("stop", "continue")
RUNTIMES = ("in-process", "stacked", "auto", "flower-simulation", "flower-deployment")
LOCAL_RUNTIMES = ("in-process", "stacked", "auto")  # run in this process by fedaccel.runs.loop


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> Config:
    """Defaults, then the YAML file, then ``key=value`` overrides; validated."""
    raw: dict[str, Any] = {}
    if path is not None:
        raw = read_yaml(path)
    for item in overrides or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--set expects key=value, got {item!r}")
        set_path(raw, key.strip(), yaml.safe_load(value) if value.strip() else None)
    return from_dict(raw)


def read_yaml(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file {path} not found")
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path} is not valid YAML: {str(exc).splitlines()[0]}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path} must hold a mapping of config keys")
    return raw


def set_path(raw: dict[str, Any], dotted: str, value: Any) -> None:
    """Set ``a.b.c`` in a nested dict; a string given for a named section sets its name."""
    keys = dotted.split(".")
    node = raw
    for key in keys[:-1]:
        child = node.get(key)
        if isinstance(child, str):  # "split: case2" then "split.alpha=..."
            child = {"name": child}
        if child is None:
            child = {}
        node[key] = child
        node = child
    node[keys[-1]] = value


def from_dict(raw: dict[str, Any]) -> Config:
    """Build and validate a Config from a nested mapping (unknown keys are errors)."""
    config = _build(Config, raw, "")
    validate(config)
    return config


def _build(cls: type, raw: Any, prefix: str) -> Any:
    if not isinstance(raw, dict):
        raise ConfigError(f"config key {prefix.rstrip('.') or '<top>'} must be a mapping")
    hints = get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(raw) - set(fields))
    if unknown:
        raise ConfigError(
            f"unknown config key {prefix + unknown[0]!r}; known under "
            f"{prefix.rstrip('.') or 'the top level'}: {', '.join(fields)}"
        )
    values: dict[str, Any] = {}
    for name, f in fields.items():
        if name not in raw:
            continue
        key = prefix + name
        value = raw[name]
        if f.metadata.get(NAMED):
            values[name] = _named(value, key, f.default_factory()["name"])  # type: ignore[misc]
        elif dataclasses.is_dataclass(hints[name]):
            values[name] = _build(hints[name], value, key + ".")
        else:
            values[name] = _coerce(value, hints[name], key)
    return cls(**values)


def _named(value: Any, key: str, default: str) -> dict[str, Any]:
    """A name, or a mapping of the thing's options (with ``name``, else the default one)."""
    if isinstance(value, str):
        return {"name": value}
    if isinstance(value, dict) and isinstance(value.get("name", default), str):
        return {"name": default, **value}
    raise ConfigError(f"{key} must be a name or a mapping with a 'name' key, got {value!r}")


def _coerce(value: Any, hint: Any, key: str) -> Any:
    text = str(hint)
    optional = "None" in text
    if value is None:
        if optional:
            return None
        raise ConfigError(f"{key} must not be null")
    if text.startswith("list"):
        if isinstance(value, list):
            return value
    elif "bool" in text:
        if isinstance(value, bool):
            return value
    elif "int" in text and "float" not in text:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif "float" in text:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif "str" in text:
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            return str(value)
    else:
        return value
    wanted = text.replace("typing.", "").replace("<class '", "").replace("'>", "")
    raise ConfigError(f"{key} must be of type {wanted}, got {value!r}")


def _check_params(kind: str, name: str, params: dict[str, Any], function: Any) -> None:
    accepted = {
        k for k, p in inspect.signature(function).parameters.items()
        if p.kind is inspect.Parameter.KEYWORD_ONLY
    }
    unknown = sorted(set(params) - accepted)
    if unknown:
        raise ConfigError(
            f"{kind} {name!r} has no option {unknown[0]!r}; known: {', '.join(sorted(accepted)) or 'none'}"
        )


def validate(config: Config) -> None:
    """Check names and values now, so a bad config fails before any work is done."""
    from fedaccel.data import DATASETS
    from fedaccel.data.splits import SPLITS
    from fedaccel.engine.local import LocalOptions
    from fedaccel.models import MODELS

    build_algorithm_from(config)
    if config.data.dataset not in DATASETS:
        raise ConfigError(f"unknown dataset {config.data.dataset!r}; known: {', '.join(sorted(DATASETS))}")
    split = dict(config.data.split)
    split_name = split.pop("name")
    if split_name not in SPLITS:
        raise ConfigError(f"unknown split {split_name!r}; known: {', '.join(sorted(SPLITS))}")
    _check_params("split", split_name, split, SPLITS[split_name])
    if config.model["name"] not in MODELS:
        raise ConfigError(f"unknown model {config.model['name']!r}; known: {', '.join(sorted(MODELS))}")
    local_options(config)  # LocalOptions validates its own values
    checks = [
        (config.data.clients >= 1, "data.clients must be >= 1"),
        (config.train.rounds >= 1, "train.rounds must be >= 1"),
        (0 < config.train.client_fraction <= 1, "train.client_fraction must be in (0, 1]"),
        (config.eval.every >= 1, "eval.every must be >= 1"),
        (config.run.checkpoint_every >= 1, "run.checkpoint_every must be >= 1"),
        (config.run.runtime in RUNTIMES, f"run.runtime must be one of {', '.join(RUNTIMES)}"),
        (config.run.timeout > 0, "run.timeout must be > 0"),
        (config.run.on_divergence in ON_DIVERGENCE, f"run.on_divergence must be one of {', '.join(ON_DIVERGENCE)}"),
        (config.run.stack_size is None or config.run.stack_size >= 1, "run.stack_size must be >= 1 or null (auto)"),
        (config.run.threads is None or config.run.threads >= 1, "run.threads must be >= 1 or null (auto)"),
        (config.data.subset is None or config.data.subset >= 1, "data.subset must be >= 1 or null"),
        (config.eval.train_samples is None or config.eval.train_samples >= 1, "eval.train_samples must be >= 1 or null"),
    ]
    for ok, message in checks:
        if not ok:
            raise ConfigError(message)
    for attack in config.attacks:
        validate_attack(attack, config.data.clients)
    from fedaccel.algorithms.registry import get_recipe

    check_participation(config, 1 if get_recipe(config.algorithm["name"]).centralized else config.data.clients)
    from fedaccel.engine.device import check_device_name

    check_device_name(config.run.device)  # whether it is on this machine: when the run starts
    if config.run.runtime.startswith("flower") and config.run.device != "cpu":
        raise ConfigError(f"run.device {config.run.device}: the Flower runtimes run on the CPU; "
                          "use run.runtime=in-process for a GPU")
    del LocalOptions


def check_participation(config: Config, n_clients: int) -> list[list[int]] | None:
    """``train.participation`` checked against the clients; it replaces the selection, so a client
    fraction beside it would be silently ignored and is refused."""
    from fedaccel.algorithms.sampling import check_schedule

    if config.train.participation is None:
        return None
    schedule = check_schedule(config.train.participation, n_clients)
    if config.train.client_fraction != 1:
        raise ConfigError("train.participation fixes who is selected each round; leave train.client_fraction at 1")
    if "fraction" in config.algorithm:
        raise ConfigError("train.participation fixes who is selected each round; drop algorithm.fraction")
    return schedule


ATTACK_KEYS = {"kind": str, "clients": list, "from_round": int, "shift": int}


def validate_attack(attack: Any, n_clients: int) -> None:
    if not isinstance(attack, dict) or "kind" not in attack or "clients" not in attack:
        raise ConfigError(f"each attack needs 'kind' and 'clients', got {attack!r}")
    for key, value in attack.items():
        if key not in ATTACK_KEYS:
            raise ConfigError(f"unknown attack key {key!r}; known: {', '.join(ATTACK_KEYS)}")
        if not isinstance(value, ATTACK_KEYS[key]) or isinstance(value, bool):
            raise ConfigError(f"attack {key} must be of type {ATTACK_KEYS[key].__name__}, got {value!r}")
    if attack["kind"] not in ("label-flip", "noise"):
        raise ConfigError(f"attack kind must be 'label-flip' or 'noise', got {attack['kind']!r}")
    bad = [c for c in attack["clients"] if not isinstance(c, int) or not 0 <= c < n_clients]
    if bad:
        raise ConfigError(f"attack clients must be client ids in [0, {n_clients}), got {bad[0]!r}")
    if attack.get("from_round", 0) < 0:
        raise ConfigError("attack from_round must be >= 0")


def build_algorithm_from(config: Config) -> Any:
    """The configured algorithm. A recipe with a ``fraction`` hyperparameter (FedUMF's C) that
    the config leaves unset takes ``train.client_fraction``: one knob for "who is selected"."""
    from fedaccel.algorithms.registry import build_algorithm, hyperparameters

    params = {k: v for k, v in config.algorithm.items() if k != "name"}
    name = config.algorithm["name"]
    if "fraction" in hyperparameters(name) and "fraction" not in params:
        params["fraction"] = config.train.client_fraction
    return build_algorithm(name, **params)


def warn_if_fedavg_in_disguise(config: Config) -> None:
    """FedUMF's C = 1 (the default fraction) authorises every client every round: plain FedAvg."""
    from fedaccel.algorithms.registry import hyperparameters

    name = config.algorithm["name"]
    if config.train.participation is not None:
        return  # the schedule selects the uploaders, not C
    if "fraction" in hyperparameters(name) and config.algorithm.get("fraction", config.train.client_fraction) == 1:
        print(f"note: {name} with C = 1 authorises every client every round: it is FedAvg; "
              "set train.client_fraction below 1 for partial participation", file=sys.stderr)


def local_options(config: Config) -> Any:
    from fedaccel.engine.local import LocalOptions

    t = config.train
    return LocalOptions(
        lr=t.lr,
        batch_size=t.batch_size,
        local_epochs=t.local_epochs,
        local_steps=t.local_steps,
        momentum=t.momentum,
        weight_decay=t.weight_decay,
        lr_decay=t.lr_decay,
        clip=t.clip,
        order=t.order,
    )


def dump_config(config: Config, path: Path) -> None:
    write_atomic(path, yaml.safe_dump(config.to_dict(), sort_keys=False))
