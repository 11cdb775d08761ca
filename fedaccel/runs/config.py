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
import functools
import inspect
import json
import math
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_type_hints

import yaml

from fedaccel.disk import open_regular
from fedaccel.errors import ConfigError, listed, shown
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
    clients: int = 5  # N, the number of clients


@dataclass
class TrainConfig:
    rounds: int = 50  # T, communication rounds
    lr: float = 0.01  # eta_0, local learning rate
    batch_size: int = 50  # B, local mini-batch size
    local_epochs: float = 1.0  # E (fractional allowed): tau_i = max(1, floor(E |D_i| / B)), or see last_batch
    # tau for every client instead of E |D_i| / B (FedGSNR's baselines); shared: K = int(E ceil(mean |D_i| / B))
    # on every client, as the FedDC code's SCAFFOLD runs (preset feddc-code)
    local_steps: int | str | None = None
    momentum: float = 0.0  # local SGD momentum
    weight_decay: float = 0.0  # local L2 weight decay
    lr_decay: float = 1.0  # eta_t = eta_0 * lr_decay^t (shorthand of lr_schedule {name: exponential, decay})
    # null (lr_decay), or {name: step, milestones: [...], factor: 0.1}: eta_0 * factor^(milestones passed), a
    # milestone a round (int >= 1) or a fraction of rounds (float in (0, 1)) (fedaccel.engine.schedule)
    lr_schedule: dict | None = None
    clip: float | None = None  # max gradient norm per mini-batch
    clip_scope: str = "gradient"  # what clip bounds: gradient (the mini-batch gradient) or objective (+ local terms)
    # null (off), or random crop / horizontal flip of image batches, e.g. {crop_padding: 4, flip: true}
    augment: dict | None = None  # checked by fedaccel.data.augment.parse_augment
    # batch order: fixed (seeded, once per client), reshuffle (every round, RR), reshuffle_epoch (every epoch,
    # a DataLoader's shuffle=True) or given
    order: str = "fixed"
    # drop: full batches only, tau_i = max(1, floor(E |D_i| / B)) (the papers'); partial: ceil(|D_i| / B) batches an
    # epoch, the last one short and its loss the mean over its samples (a DataLoader, drop_last=False)
    last_batch: str = "drop"
    reshuffle: bool = False  # older spelling of order: reshuffle (kept for existing configs and run folders)
    client_fraction: float = 1.0  # fraction of clients selected per round (FedUMF's C unless algorithm.fraction is set)
    # who is selected each round instead of sampling: a list of client lists, round t uses entry (t-1) mod its length
    participation: list[list[int]] | None = None
    sampling: str = "fixed"  # fixed: round(C N) clients a round; bernoulli: each client joins with probability C
    # null (off), or sample-level DP-SGD on every client through Opacus, e.g. {clip: 1.0, noise_multiplier: 1.0,
    # delta: 1.0e-5, batches: poisson}: per-sample clipping and noise in each local step on Poisson-sampled batches
    # (batches: shuffled trains on train.order's slices, an approximation), each client's epsilon in the rows
    dp_sgd: dict | None = None
    # local work per selected client per round: fixed (E), uniform {min_epochs, max_epochs},
    # stragglers {fraction, min_epochs, max_epochs} (docs/algorithms/fedavg.md "Systems heterogeneity")
    local_work: dict[str, Any] = named("fixed")
    partial_work: str = "auto"  # stragglers' updates: auto (the recipe's reference), drop or keep

    def __post_init__(self) -> None:
        from fedaccel.engine.local import batch_order
        from fedaccel.engine.schedule import lr_schedule

        self.order = batch_order(self.order, self.reshuffle)  # one spelling in the resolved config
        self.reshuffle = self.order == "reshuffle"
        spec = self.lr_schedule
        if isinstance(spec, dict) and spec.get("name") == "exponential":  # one spelling: lr_decay
            self.lr_decay = lr_schedule(spec, lr_decay=self.lr_decay).decay
            self.lr_schedule = None


@dataclass
class EvalConfig:
    every: int = 1  # evaluate every k rounds (and always after the last)
    train_samples: int | None = 10000  # training-set loss on a fixed sample of this size; null = all
    # models scored: broadcast (w_t, plain columns), client_mean, all_mean (columns client_mean/test_acc, ...)
    models: list[str] = field(default_factory=lambda: ["broadcast"])
    # how client_mean and all_mean weight the clients: uniform, or data (p_i = |D_i| / sum |D_j|)
    mean_weighting: str = "uniform"


@dataclass
class RunConfig:
    seed: int = 0  # every random draw (split, initial model, batches, selection) derives from it
    out_dir: str = "runs"  # run folders are created under this
    checkpoint_every: int = 5  # rounds between checkpoints
    runtime: str = "in-process"  # or stacked, auto (docs: Runtimes), flower-simulation, flower-deployment
    stack_size: int | None = None  # stacked runtime: clients per batched step; null = what fits 1 GiB (on a CPU: ~4 MB of batches a step)
    timeout: float = 300.0  # Flower runtimes: seconds a round waits for clients' answers
    progress: bool = True  # progress bar on stderr
    tensorboard: bool = False  # TensorBoard event files in the run folder, written as the run goes
    threads: int | None = None  # torch threads; null = auto (1, or one per core for a large model alone: docs, Runtimes)
    device: str = "cpu"  # cpu, cuda, cuda:N, mps or auto (the first of cuda, mps, cpu here): model, data, states
    on_divergence: str = "stop"  # a NaN/inf model or loss: stop (exit non-zero, last finite checkpoint kept) or continue
    norm_ratio: float | None = 100.0  # Flower runtimes: an upload whose norm is above this many times the median of the round's other uploads' is rejected; null: no such bound
    norm_ceiling: float | None = 1.0e6  # Flower runtimes: an upload (delta and extras) whose norm is above this is rejected; null: no ceiling
    secure_aggregation: dict | None = None  # Flower runtimes: SecAgg+, the server sees only the round's weighted mean of the deltas; {} for its defaults or {clipping_range, quantization_range, modulus_range, num_shares, reconstruction_threshold}; null: off (docs: Secure aggregation)


@dataclass
class Config:
    """A run's settings: the sections of a config file (``load_config`` reads and checks one; each key's meaning and
    default: docs/reference/configuration.md)."""

    name: str = ""  # label in plots and tables; default: the algorithm's name
    algorithm: dict[str, Any] = named("fedavg")  # the method and its hyperparameters, e.g. {name: bherd, alpha: 0.5}
    model: dict[str, Any] = named("svm")  # the model and its options, e.g. {name: 2nn, hidden: 100}
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    run: RunConfig = field(default_factory=RunConfig)
    # malicious clients, e.g. [{kind: label-flip, clients: [0, 3], from_round: 10, shift: 1}]
    # (kind: label-flip | noise; labels l -> (l + shift) mod C, or inputs ~ U(-1, 1); from_round: the rounds
    # trained clean before it, so the metrics' round from_round + 1 is the first attacked)
    attacks: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @property
    def label(self) -> str:
        """What a run's own folder starts with (``fedavg-s0-...``): its name, else its algorithm's name."""
        return self.name or str(self.algorithm["name"])

    @property
    def display_name(self) -> str:
        """What progress lines, tables and legends call the run (`fedaccel.runs.names.display_name`)."""
        from fedaccel.runs.names import display_name

        return display_name({"name": self.name, "algorithm": self.algorithm, "train": {"dp_sgd": self.train.dp_sgd}})


ON_DIVERGENCE = ("stop", "continue")
RUNTIMES = ("in-process", "stacked", "auto", "flower-simulation", "flower-deployment")
LOCAL_RUNTIMES = ("in-process", "stacked", "auto")  # run in this process by fedaccel.runs.loop


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> Config:
    """Defaults, then the YAML file, then ``key=value`` overrides; validated."""
    raw: dict[str, Any] = {}
    if path is not None and not isinstance(path, (str, os.PathLike)):
        raise ConfigError(f"load_config takes a config file's path, got {type(path).__name__}"
                          + (" (fedaccel.runs.config.from_dict builds a Config from a mapping)"
                             if isinstance(path, dict) else ""))
    if path is not None:
        raw = read_yaml(path)
        if {"base", "grid"} & set(raw):  # an experiment file's keys, none of them a run config's
            raise ConfigError(f"{path} is an experiment file, not a run config: `fedaccel experiment {path}` runs its "
                              "grid (a run config is what its base: holds, e.g. configs/demo.yaml)")
    for key, value in parse_overrides(overrides or []):
        set_path(raw, key, value)
    return from_dict(raw)


def parse_overrides(overrides: list[str], written: tuple[str, ...] = ()) -> list[tuple[str, Any]]:
    """``key=value`` items as (dotted key, value read as YAML), in order.

    A value for a whole section replaces it (``data.split=iid`` after ``data.split=dirichlet`` and
    ``data.split.alpha=0.1`` switches the split, its alpha with it). But a section given a value after an item, or a
    key of ``written`` (an experiment's grid keys), set an option in it with no value given for the section before
    (``algorithm.alpha=0.3`` then ``algorithm=bherd``) is refused: the option would vanish unseen. A null (a section
    turned off) is taken as it says."""
    if isinstance(overrides, (str, bytes)):  # each character was read as an item: "--set expects key=value, got 't'"
        raise ConfigError(f"overrides are a list of key=value strings, got one string: [{shown(overrides)}]")
    parsed: list[tuple[str, Any]] = []
    for item in overrides:
        if not isinstance(item, str):
            raise ConfigError(f"overrides are key=value strings, got {shown(item)}")
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"--set expects key=value, got {shown(item)}")
        value = parse_value(key, text)
        given_before = any(k == key for k, _ in parsed)
        lost = next((k for k in (*written, *(k for k, _ in parsed)) if k.startswith(key + ".")), None)
        if lost is not None and value is not None and not given_before:
            name, dropped = shown(key, 60)[1:-1], shown(lost, 60)[1:-1]
            before = "the grid's" if lost in written else "the earlier --set"
            raise ConfigError(f"--set {name}=... replaces the whole {name} section, which would drop {before} "
                              f"{dropped}" + ("" if lost in written else f": give --set {name}=... first"))
        parsed.append((key, value))
    return parsed


MAX_YAML_BYTES = 4 * 2**20  # a config or experiment file is a few kB: a larger one is refused unread
MAX_ALIAS_NODES = 10_000  # values that anchors and aliases may repeat beyond those written out
# YAML 1.2 floats: PyYAML (YAML 1.1) wants a dot, so `1e4` and `1E-3` would be read as strings
FLOAT = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")


class _Dumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):  # type: ignore[misc]  # libyaml's where PyYAML has it
    """A safe dumper whose strings read back as strings through :data:`BoundedLoader`: PyYAML (YAML 1.1) writes
    ``1e4`` or ``1.5e3`` unquoted, which the loader's YAML 1.2 float rule reads as a number."""


def _represent_str(dumper: yaml.SafeDumper, text: str) -> yaml.ScalarNode:
    if FLOAT.fullmatch(text):
        return dumper.represent_scalar("tag:yaml.org,2002:str", text, style="'")
    return dumper.represent_str(text)


_Dumper.add_representer(str, _represent_str)


def dump_yaml(value: Any, **options: Any) -> str:
    """``yaml.safe_dump(value, **options)`` whose text :func:`parse_yaml` reads back as ``value`` (strings stay
    strings: the configs written to run folders and sent to Flower's nodes)."""
    return yaml.dump(value, Dumper=_Dumper, **options)


def _bounded(parser: type) -> type:
    """``parser`` (a safe YAML loader class) that reads ``1e4`` as a float and refuses a document whose
    anchors and aliases repeat more than ``MAX_ALIAS_NODES`` values (a "billion laughs" bomb is a
    few hundred bytes that expand to billions of values once anything walks them)."""

    class Bounded(parser):  # type: ignore[misc, valid-type]
        def get_single_node(self) -> Any:  # the one document, composed (aliases shared, not expanded)
            node = super().get_single_node()
            if node is not None:
                expanded, written = _node_counts(node)
                if expanded - written > MAX_ALIAS_NODES:
                    raise ConfigError(f"its aliases repeat {expanded - written:,} values (at most {MAX_ALIAS_NODES:,})")
            return node

    Bounded.add_implicit_resolver("tag:yaml.org,2002:float", re.compile(FLOAT.pattern + "$"), list("-+0123456789."))
    Bounded.__name__ = Bounded.__qualname__ = f"Bounded{parser.__name__}"
    return Bounded


# libyaml's parser where PyYAML was built with it (its wheels are): the same nodes, about 3x
# faster than the pure-Python one (the repository's YAML files: 0.31 s against 0.90 s), which matters when a report reads the config of every run.
BoundedLoader = _bounded(getattr(yaml, "CSafeLoader", yaml.SafeLoader))
PureBoundedLoader = _bounded(yaml.SafeLoader)


def _node_counts(root: yaml.Node) -> tuple[int, int]:
    """(values the document holds with every alias expanded, distinct nodes): without expanding."""
    def children(node: yaml.Node) -> list[yaml.Node]:
        if isinstance(node, yaml.SequenceNode):
            return list(node.value)
        if isinstance(node, yaml.MappingNode):
            return [n for pair in node.value for n in pair]
        return []

    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()
    stack = [(root, False)]
    while stack:
        node, closing = stack.pop()
        if closing:
            open_nodes.discard(id(node))
            sizes[id(node)] = 1 + sum(sizes[id(c)] for c in children(node))
            continue
        if id(node) in sizes:
            continue
        open_nodes.add(id(node))
        stack.append((node, True))
        for child in children(node):
            if id(child) in open_nodes:
                raise ConfigError("an alias refers to a value that holds it (a recursive structure)")
            if id(child) not in sizes:
                stack.append((child, False))
    return sizes[id(root)], len(sizes)


# libyaml composes nested values by C recursion, which neither Python's recursion limit nor PyYAML bounds:
# 100,000 opening brackets crashed Python 3.12 (the GPU machine), and 3,000 nested keys passed there; the
# pure parser's scanner is quadratic in open brackets. So the depth is counted first on the event stream
# (both parsers make events with a state stack, not recursion) and a deep document is refused at once.
# One nesting level needs a line, a bracket, a "- " or a "? ": a document with fewer cannot be deeper.
MAX_NESTING = 100  # levels of nested values; real configs hold fewer than 10


def _could_nest_deeper_than(text: str, depth: int) -> bool:
    return text.count("\n") + text.count("[") + text.count("{") + text.count("- ") + text.count("? ") > depth


def _check_nesting(text: str) -> None:
    depth = 0
    for event in yaml.parse(text, Loader=BoundedLoader):
        if isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
            depth += 1
            if depth > MAX_NESTING:
                raise ConfigError(f"it nests values more than {MAX_NESTING} levels deep")
        elif isinstance(event, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
            depth -= 1


def parse_yaml(text: str, source: str) -> Any:
    """``text`` read as YAML by :class:`BoundedLoader`, at most ``MAX_NESTING`` levels deep; ``source`` names
    it in the one-line error."""
    try:
        if _could_nest_deeper_than(text, MAX_NESTING - 1):  # the document's own top level needs no mark
            _check_nesting(text)
        return yaml.load(text, Loader=BoundedLoader)  # noqa: S506 (a SafeLoader)
    except ConfigError as exc:
        raise ConfigError(f"{source} is refused: {exc}") from None
    except yaml.YAMLError as exc:
        problem = ", ".join(str(p) for p in (getattr(exc, "context", None), getattr(exc, "problem", None)) if p)
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        reason = problem or (str(exc).splitlines() or [type(exc).__name__])[0]
        raise ConfigError(f"{source} is not valid YAML: {reason[:200]}{where}") from None
    except RecursionError:
        raise ConfigError(f"{source} nests its values too deeply") from None
    except ValueError as exc:  # int() past Python's 4300-digit limit
        what = "a number with more than 4300 digits" if "digits" in str(exc) else str(exc)[:200]
        raise ConfigError(f"{source} is refused: it holds {what}") from None


def parse_value(key: str, value: str) -> Any:
    """The value of ``--set key=value``, read as YAML (empty: null)."""
    return parse_yaml(value, f"--set {shown(key.strip(), 60)[1:-1]}") if value.strip() else None


def read_yaml(path: str | Path) -> dict[str, Any]:
    """A config or experiment file: a mapping, at most ``MAX_YAML_BYTES`` long, bounded aliases."""
    return yaml_mapping(read_yaml_text(path), path)


def read_yaml_text(path: str | Path) -> str:
    """The text of a config or experiment file, at most ``MAX_YAML_BYTES`` long (its comments too: a run's
    ``config.yaml`` records its plugins in one, :func:`plugin_note`)."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"{path} is a folder; give a YAML config file")
    if not path.exists():
        raise ConfigError(f"config file {path} not found")
    try:
        with open_regular(path, follow=True) as file:  # a FIFO or a device is one line, and never waited on
            size = os.fstat(file.fileno()).st_size
            if size > MAX_YAML_BYTES:
                raise ConfigError(f"{path} is {size / 2**20:.1f} MB: a config file is at most "
                                  f"{MAX_YAML_BYTES // 2**20} MB")
            data = file.read(MAX_YAML_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"{path} cannot be read: {exc.strerror or exc}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{path} is not a text file (not UTF-8)") from None
    return text


def yaml_mapping(text: str, path: str | Path) -> dict[str, Any]:
    """``text`` (of the file ``path``) read as a YAML mapping (:func:`parse_yaml`)."""
    raw = parse_yaml(text, str(path)) or {}
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
    """Build and validate a Config from a nested mapping (unknown keys are errors); an ``algorithm.preset``
    fills the keys the mapping leaves unset (:mod:`fedaccel.algorithms.presets`)."""
    from fedaccel.algorithms.presets import apply_preset

    config = _build(Config, apply_preset(raw) if isinstance(raw, dict) else raw, "")
    validate(config)
    return config


@functools.cache
def _field_types(cls: type) -> dict[str, Any]:
    """The config section's field types (``get_type_hints`` evaluates every annotation: 2 ms, per section
    of every config built; the sections are fixed classes)."""
    return get_type_hints(cls)


def config_key_fault(dotted: str) -> str | None:
    """Why ``dotted`` (``train.lr``) is no config key (one line), or None: each part a field of its section, down
    to a section that takes any key (an algorithm's or a split's options)."""
    section: Any = Config
    parts = dotted.split(".")
    for depth, part in enumerate(parts):
        if not (isinstance(section, type) and dataclasses.is_dataclass(section)):
            return None
        fields = [f.name for f in dataclasses.fields(section)]
        if part not in fields:
            under = ".".join(parts[:depth]) or "the top level"
            return f"unknown config key {shown(dotted)}; known under {under}: {listed(fields, near=part)}"
        section = _field_types(section)[part]
    return None


def _build(cls: type, raw: Any, prefix: str) -> Any:
    if not isinstance(raw, dict):
        raise ConfigError(f"config key {prefix.rstrip('.') or '<top>'} must be a mapping")
    _check_keys(raw, prefix.rstrip(".") or "the top level")
    hints = _field_types(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(raw) - set(fields))
    if unknown:
        raise ConfigError(
            f"unknown config key {shown(prefix + unknown[0])}; known under "
            f"{prefix.rstrip('.') or 'the top level'}: {listed(fields, near=unknown[0])}"
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
        _check_keys(value, key)
        return {"name": default, **value}
    raise ConfigError(f"{key} must be a name or a mapping with a 'name' key, got {shown(value)}")


def _check_keys(mapping: dict[Any, Any], where: str) -> None:
    """Config keys are names: ``{1: 2}`` (YAML reads the key as a number) is one line, not a TypeError."""
    for key in mapping:
        if not isinstance(key, str):
            raise ConfigError(f"config keys are names, but {where} has the key {shown(key)}")


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
    elif text.startswith("int | str"):  # a count or a word (train.local_steps: shared)
        if isinstance(value, (int, str)) and not isinstance(value, bool):
            return value
    elif "int" in text and "float" not in text:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif "float" in text:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str) and FLOAT.fullmatch(value.strip()):  # `1e4` from a YAML 1.1 reader
            return float(value)
    elif "str" in text:
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            return str(value)
    else:
        return value
    wanted = text.replace("typing.", "").replace("<class '", "").replace("'>", "")
    raise ConfigError(f"{key} must be of type {wanted}, got {shown(value)}")


def _check_params(kind: str, name: str, params: dict[str, Any], function: Any) -> None:
    """Every option of ``params`` is a keyword-only parameter of ``function``, of its default's kind."""
    from fedaccel.algorithms.registry import check_option_kinds, keyword_defaults

    accepted = keyword_defaults(function)
    unknown = sorted(set(params) - set(accepted))
    if unknown:
        raise ConfigError(
            f"{kind} {shown(name)} has no option {shown(unknown[0])}; known: {listed(sorted(accepted), near=unknown[0])}"
        )
    check_option_kinds(f"{kind} {shown(name)}", function, params)


MAX_SEED = 2**32 - 1  # numpy's seeds are non-negative; torch's and the derived streams' stay within 64 bits


def validate(config: Config) -> None:
    """Check names and values now, so a bad config fails before any work is done."""
    from fedaccel.data import DATASETS, dataset_names, dataset_plugin
    from fedaccel.data.splits import SPLITS
    from fedaccel.models import model_factory

    check_name(config.name, "name")
    build_algorithm_from(config)
    if config.data.dataset not in DATASETS and dataset_plugin(config.data.dataset) is None:
        raise ConfigError(f"unknown dataset {shown(config.data.dataset)}; known: "
                          f"{listed(dataset_names(), near=config.data.dataset)}")
    split = dict(config.data.split)
    split_name = split.pop("name")
    if split_name not in SPLITS:
        raise ConfigError(f"unknown split {shown(split_name)}; known: {listed(sorted(SPLITS), near=split_name)}")
    _check_params("split", split_name, split, SPLITS[split_name])
    model_factory(str(config.model["name"]))  # a built-in, or an installed plugin's; else one line
    check_values(config)


def check_values(config: Config, *, recipe: bool = True) -> None:
    """The checks of :func:`validate` that do not name a dataset, split or model (``fedaccel.train``'s own data and
    module have none); ``recipe``: the algorithm is a recipe name (not a Python object), whose uploads are counted."""
    local_options(config)  # LocalOptions validates its own values
    checks = [
        (0 <= config.run.seed <= MAX_SEED, f"run.seed must be a whole number from 0 to {MAX_SEED:,}"),
        (config.data.clients >= 1, "data.clients must be >= 1"),
        (config.train.rounds >= 1, "train.rounds must be >= 1"),
        (0 < config.train.client_fraction <= 1, "train.client_fraction must be in (0, 1]"),
        (config.eval.every >= 1, "eval.every must be >= 1"),
        (config.run.checkpoint_every >= 1, "run.checkpoint_every must be >= 1"),
        (config.run.runtime in RUNTIMES, f"run.runtime must be one of {', '.join(RUNTIMES)}"),
        (config.train.dp_sgd is None or config.run.runtime in LOCAL_RUNTIMES,
         "train.dp_sgd runs in process (run.runtime in-process or auto); the Flower runtimes do not run it"),
        (config.run.timeout > 0, "run.timeout must be > 0"),
        (config.run.norm_ratio is None or config.run.norm_ratio >= 1, "run.norm_ratio must be >= 1 or null (no bound)"),
        (config.run.norm_ceiling is None or config.run.norm_ceiling > 0, "run.norm_ceiling must be > 0 or null (none)"),
        (config.run.on_divergence in ON_DIVERGENCE, f"run.on_divergence must be one of {', '.join(ON_DIVERGENCE)}"),
        (config.run.stack_size is None or config.run.stack_size >= 1, "run.stack_size must be >= 1 or null (auto)"),
        (config.run.threads is None or config.run.threads >= 1, "run.threads must be >= 1 or null (auto)"),
        (config.data.subset is None or config.data.subset >= 1, "data.subset must be >= 1 or null"),
        (config.data.test_subset is None or config.data.test_subset >= 1, "data.test_subset must be >= 1 or null"),
        (config.eval.train_samples is None or config.eval.train_samples >= 1, "eval.train_samples must be >= 1 or null"),
    ]
    for ok, message in checks:
        if not ok:
            raise ConfigError(message)
    check_eval_models(config.eval.models)
    check_mean_weighting(config.eval.mean_weighting)
    for attack in config.attacks:
        validate_attack(attack, config.data.clients, config.train.rounds)
    if recipe:
        from fedaccel.algorithms.registry import get_recipe

        check_participation(config, 1 if get_recipe(config.algorithm["name"]).centralized else config.data.clients)
        check_robust_rule(config)  # after the schedule's own check: it counts the schedule's uploads
        check_some_upload(config)
    else:  # an Algorithm object's clients are the data's
        check_participation(config, config.data.clients)
    from fedaccel.engine.device import check_device_name

    check_device_name(config.run.device)  # whether it is on this machine: when the run starts
    check_secure_aggregation(config)
    if config.run.runtime.startswith("flower") and config.run.device != "cpu":
        raise ConfigError(f"run.device {config.run.device}: the Flower runtimes run on the CPU; "
                          "use run.runtime=in-process for a GPU")


def check_secure_aggregation(config: Config) -> None:
    """``run.secure_aggregation``'s settings, and whether the run may use it (one line if not)."""
    from fedaccel.runs.secure import parse_secure, refusal

    if parse_secure(config.run.secure_aggregation) is None:
        return
    reason = refusal(config.run.runtime, build_algorithm_from(config), list(config.eval.models))
    if reason:
        raise ConfigError(reason)


def check_eval_models(models: list[Any]) -> None:
    """``eval.models``: distinct known names, the broadcast model (the plain columns) among them."""
    from fedaccel.engine.evaluated import BROADCAST, EVAL_MODELS

    for model in models:
        if model not in EVAL_MODELS:
            raise ConfigError(f"unknown eval.models entry {shown(model)}; known: {listed(EVAL_MODELS, near=str(model))}")
    if len(set(models)) < len(models):
        raise ConfigError(f"eval.models names a model twice: {shown(models)}")
    if BROADCAST not in models:
        raise ConfigError(f"eval.models must include broadcast (the plain test_acc, train_loss, ... columns), "
                          f"got {shown(models)}")


def check_mean_weighting(weighting: str) -> None:
    from fedaccel.engine.evaluated import MEAN_WEIGHTINGS

    if weighting not in MEAN_WEIGHTINGS:
        raise ConfigError(f"eval.mean_weighting must be one of {', '.join(MEAN_WEIGHTINGS)}, got {shown(weighting)}")


MAX_NAME_BYTES = 200  # a run folder is NAME-sSEED-STAMP: under the 255 bytes of a file name


def check_name(name: str, key: str) -> None:
    """A name that becomes part of a folder name must be one path component: ``name=../../x``
    would otherwise put the run outside ``run.out_dir``."""
    if any(c in name for c in "/\\\0") or name in (".", ".."):
        raise ConfigError(f"{key} {shown(name)} must be one folder name: no '/', '\\', NUL, '.' or '..'")
    if len(name.encode()) > MAX_NAME_BYTES:
        raise ConfigError(f"{key} {shown(name)} is {len(name.encode())} bytes long; a folder name takes at most "
                          f"{MAX_NAME_BYTES} here (file systems take 255, with the seed and the time after it)")


def most_uploads(config: Config) -> tuple[int, str]:
    """The most clients that upload in one round, and the settings that bound it: the longest entry of
    ``train.participation``, all clients under Bernoulli sampling, else max(1, round(C N)) with C the recipe's
    ``fraction`` or ``train.client_fraction`` (:func:`fedaccel.algorithms.sampling.sample_clients`); of those,
    stragglers whose updates are dropped do not upload (:func:`fedaccel.engine.work.draw_work`: they are drawn among
    the clients that train, every client under FedUMF's ``fraction``, so at most round(T (1 - f)) of T trained
    upload)."""
    from fedaccel.algorithms.registry import get_recipe, hyperparameters
    from fedaccel.engine.work import local_work

    n = 1 if get_recipe(config.algorithm["name"]).centralized else config.data.clients
    if config.train.participation:
        most, knobs = max(len(entry) for entry in config.train.participation), "train.participation"
    elif config.train.sampling == "bernoulli":
        most, knobs = n, "data.clients"
    else:
        key = "algorithm.fraction" if "fraction" in config.algorithm else "train.client_fraction"
        fraction = config.algorithm.get("fraction", config.train.client_fraction)
        most, knobs = min(n, max(1, math.floor(fraction * n + 0.5 + 1e-9))), f"data.clients, {key}"
    work = local_work(config.train.local_work, config.train.partial_work)
    if work.name == "stragglers" and work.drops(config.algorithm["name"]):
        every_one_trains = "fraction" in hyperparameters(config.algorithm["name"])  # FedUMF: C uploads, all train
        trained = n if every_one_trains else most
        most = min(most, math.floor(trained * (1 - work.fraction) + 0.5 + 1e-9))
        knobs += ", train.local_work's straggler fraction, or train.partial_work: keep"
    return most, knobs


def check_some_upload(config: Config) -> None:
    """Stragglers whose updates are dropped, so many that no round uploads anything: the model would never train
    (exit 0, accuracy that of round 0). One line at load."""
    most, knobs = most_uploads(config)
    if most == 0:
        raise ConfigError(f"train.local_work stragglers: with fraction {config.train.local_work.get('fraction')} "
                          f"every client a round selects is a straggler whose update {config.algorithm['name']} "
                          f"drops, so no round uploads anything and the model never trains; change {knobs}")


def check_robust_rule(config: Config) -> None:
    """A robust rule whose condition no round can meet is refused at load (:func:`~fedaccel.algorithms.robust.check_uploads`)."""
    from fedaccel.algorithms.registry import named_spec
    from fedaccel.algorithms.robust import RULES, check_uploads

    rule = config.algorithm.get("aggregate")
    if rule is not None:
        check_uploads(*named_spec(rule, "aggregate", RULES), *most_uploads(config))


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
    if config.train.sampling != "fixed":
        raise ConfigError("train.participation fixes who is selected each round; leave train.sampling at fixed")
    return schedule


ATTACK_KEYS = {"kind": str, "clients": list, "from_round": int, "shift": int}


def validate_attack(attack: Any, n_clients: int, rounds: int | None = None) -> None:
    """One attack of ``attacks``; ``from_round`` counts the rounds trained clean before it (0: from the first
    round, the metrics' round 1), so one at ``train.rounds`` or later would attack no round."""
    if not isinstance(attack, dict) or "kind" not in attack or "clients" not in attack:
        raise ConfigError(f"each attack needs 'kind' and 'clients', got {shown(attack)}")
    for key, value in attack.items():
        if key not in ATTACK_KEYS:
            raise ConfigError(f"unknown attack key {shown(key)}; known: {listed(ATTACK_KEYS, near=key)}")
        if not isinstance(value, ATTACK_KEYS[key]) or isinstance(value, bool):
            raise ConfigError(f"attack {key} must be of type {ATTACK_KEYS[key].__name__}, got {shown(value)}")
    if attack["kind"] not in ("label-flip", "noise"):
        raise ConfigError(f"attack kind must be 'label-flip' or 'noise', got {shown(attack['kind'])}")
    bad = [c for c in attack["clients"] if not isinstance(c, int) or not 0 <= c < n_clients]
    if bad:
        raise ConfigError(f"attack clients must be client ids in [0, {n_clients}), got {shown(bad[0])}")
    if len(set(attack["clients"])) < len(attack["clients"]):
        raise ConfigError(f"attack clients name a client twice: {shown(attack['clients'])}")
    if attack["kind"] == "noise" and "shift" in attack:
        raise ConfigError("attack shift is a label-flip's (labels l -> (l + shift) mod C); a noise attack has none")
    if attack.get("from_round", 0) < 0:
        raise ConfigError("attack from_round must be >= 0")
    if rounds is not None and attack.get("from_round", 0) >= rounds:
        raise ConfigError(f"attack from_round {attack['from_round']} attacks no round: it counts the rounds trained "
                          f"clean before the attack (0: from the first), and train.rounds is {rounds}")


#: The ``algorithm:`` key ``fedaccel.train`` records for a method given as a Python object: its fingerprint
#: (:mod:`fedaccel.algorithms.fingerprint`), which tells its settings apart in tables and on resume.
OBJECT_KEY = "object"


def build_algorithm_from(config: Config) -> Any:
    """The configured algorithm. A recipe with a ``fraction`` hyperparameter (FedUMF's C) that
    the config leaves unset takes ``train.client_fraction``: one knob for "who is selected"."""
    from fedaccel.algorithms.registry import build_algorithm, hyperparameters

    params = {k: v for k, v in config.algorithm.items() if k not in ("name", "preset")}
    name = config.algorithm["name"]
    if OBJECT_KEY in params:
        raise ConfigError(f"algorithm {shown(name)} of this run was a Python object given to fedaccel.train "
                          f"({OBJECT_KEY}: {shown(params[OBJECT_KEY])}, its fingerprint), not a recipe a config can "
                          "build: continue it with fedaccel.train(..., resume=True) and the same object")
    if "fraction" in hyperparameters(name) and "fraction" not in params:
        params["fraction"] = config.train.client_fraction
    if params.get("dp") is not None:
        params["dp"] = dp_with_population(config)
    algorithm = build_algorithm(name, **params)
    if config.train.dp_sgd is not None:  # each client's DP-SGD steps, counted in its state for its epsilon
        from fedaccel.algorithms.base import compose
        from fedaccel.engine.dp_sgd import step_counter

        algorithm = compose(algorithm.name, *algorithm.parts, step_counter())
    return algorithm


def dp_with_population(config: Config) -> dict[str, Any] | None:
    """``algorithm.dp`` with the population its accountant needs, from the config (data.clients,
    train.client_fraction, train.sampling, train.rounds); None without DP. Those four are the run's own:
    setting them in ``algorithm.dp`` is one line."""
    from fedaccel.algorithms.dp import POPULATION

    spec = config.algorithm.get("dp")
    if spec is None:
        return None
    if not isinstance(spec, dict):
        raise ConfigError(f"algorithm.dp must be a mapping such as {{clip: 1.0, noise_multiplier: 1.0}}, got {shown(spec)}")
    own = sorted(set(spec) & set(POPULATION))
    if own:
        raise ConfigError(f"algorithm.dp.{own[0]} is the run's own (data.clients, train.client_fraction, "
                          "train.sampling, train.rounds): leave it out")
    if config.train.participation is not None:
        raise ConfigError("algorithm.dp accounts for sampled clients: train.participation fixes them; leave it out")
    return {**spec, "clients": config.data.clients, "fraction": config.train.client_fraction,
            "sampling": config.train.sampling, "rounds": config.train.rounds}


def warn_if_fedavg_in_disguise(config: Config) -> None:
    """FedUMF's C = 1 (the default fraction) authorises every client every round: the method it is combined with
    (FedAvg for plain FedUMF), with nothing left to fuse."""
    from fedaccel.algorithms.registry import hyperparameters

    name = config.algorithm["name"]
    if config.train.participation is not None:
        return  # the schedule selects the uploaders, not C
    if "fedumf" not in name.split("-"):
        return  # a plugin's fraction: what C = 1 makes of it is its own
    if "fraction" in hyperparameters(name) and config.algorithm.get("fraction", config.train.client_fraction) == 1:
        base = name.replace("-fedumf", "").removeprefix("fedumf-") if name != "fedumf" else "fedavg"
        plain = "FedAvg" if base == "fedavg" else base
        weighting = config.algorithm.get("weighting", hyperparameters(name).get("weighting"))
        if weighting is not None and weighting != hyperparameters(base).get("weighting", "data"):
            plain += f" with {'an unweighted' if weighting == 'uniform' else 'a data-weighted'} mean"
        print(f"note: {name} with C = 1 authorises every client every round: it is {plain}; "
              "set train.client_fraction below 1 for partial participation", file=sys.stderr)


def local_options(config: Config) -> Any:
    from fedaccel.engine.dp_sgd import sample_dp
    from fedaccel.engine.local import LocalOptions
    from fedaccel.engine.schedule import lr_schedule
    from fedaccel.engine.work import local_work

    t = config.train
    return LocalOptions(
        lr=t.lr,
        batch_size=t.batch_size,
        local_epochs=t.local_epochs,
        local_steps=t.local_steps,
        momentum=t.momentum,
        weight_decay=t.weight_decay,
        lr_decay=t.lr_decay,
        lr_schedule=lr_schedule(t.lr_schedule, lr_decay=t.lr_decay, rounds=t.rounds),
        clip=t.clip,
        order=t.order,
        clip_scope=t.clip_scope,
        augment=t.augment,
        work=local_work(t.local_work, t.partial_work),
        sampling=t.sampling,
        last_batch=t.last_batch,
        dp_sgd=sample_dp(t.dp_sgd),
    )


def dump_config(config: Config, path: Path) -> None:
    write_atomic(path, dump_yaml(config.to_dict(), sort_keys=False) + resolved_note(config) + plugin_note(config))


PLUGINS_NOTE = "# plugins, as this run found them: "  # then JSON: {kind: Plugin.record()}


def plugin_note(config: Config) -> str:
    """A comment line for ``config.yaml``: the installed distribution (name, version, module hash) of each plugin
    the run uses, so that a reader, ``--resume`` and a Flower client know what produced it (empty: none)."""
    from fedaccel.algorithms.registry import get_recipe
    from fedaccel.data import dataset_plugin
    from fedaccel.models import model_plugin

    used = {}
    try:
        used["algorithm"] = get_recipe(str(config.algorithm["name"])).plugin
    except ConfigError:  # train() given a composed Algorithm under a name of its own: no recipe, no plugin
        pass
    used["model"] = model_plugin(str(config.model["name"]))
    used["dataset"] = dataset_plugin(config.data.dataset)
    records = {kind: plugin.record() for kind, plugin in used.items() if plugin is not None}
    return f"{PLUGINS_NOTE}{json.dumps(records, sort_keys=True)}\n" if records else ""


def recorded_plugins(text: str, where: str) -> dict[str, dict[str, str]]:
    """The plugins a ``config.yaml`` text records (:func:`plugin_note`); a damaged record is one line."""
    for line in text.splitlines():
        if line.startswith(PLUGINS_NOTE):
            try:
                record = json.loads(line[len(PLUGINS_NOTE):])
            except ValueError:
                record = None
            if not plugin_records(record):
                raise ConfigError(f"{where}: its plugins line is damaged: {shown(line, 120)}")
            return record
    return {}


PLUGIN_KEYS = {"name", "distribution", "version", "entry_point", "sha256"}


def plugin_records(value: Any) -> bool:
    """Whether ``value`` is of the form :func:`plugin_note` writes (a ``config.yaml``'s line, a packed cell's
    ``plugins``): kind -> {name, distribution, version, entry_point, sha256}, each a string of one line."""
    return isinstance(value, dict) and all(
        isinstance(kind, str) and isinstance(r, dict) and set(r) == PLUGIN_KEYS
        and all(isinstance(v, str) and "\n" not in v for v in r.values()) for kind, r in value.items())


def check_plugins(text: str, where: str) -> None:
    """The plugins ``text`` (a ``config.yaml``) records are installed here, the same distribution, version and
    module: else one line, before the config is read (which would import the installed one)."""
    check_recorded(recorded_plugins(text, where), where)


def check_recorded_once(records: Mapping[str, Mapping[str, str]], where: str, checked: set[str]) -> None:
    """:func:`check_recorded`, skipped for records already in ``checked`` (and added to it once they pass): a grid
    of a thousand cells of one plugin hashes its package once, not a thousand times."""
    key = json.dumps(records, sort_keys=True)
    if key not in checked:
        check_recorded(records, where)
        checked.add(key)


def check_recorded(records: Mapping[str, Mapping[str, str]], where: str) -> None:
    """:func:`check_plugins` of the records a ``config.yaml`` holds (:func:`recorded_plugins`): each is installed
    here, the same; else one line naming ``where``. Nothing is imported: the installed plugin's files are hashed
    (:func:`fedaccel.plugins.code_hash`)."""
    import fedaccel.plugins as plugins

    for kind, was in records.items():
        if kind not in plugins.GROUPS:
            raise ConfigError(f"{where} records a plugin of an unknown kind {shown(kind)}")
        found = plugins.find(kind, was["name"], builtin=False)
        if found is None:
            raise ConfigError(f"{where} uses {kind} {shown(was['name'])} of {was['distribution']} "
                              f"{was['version']}, which is not installed here: pip install the same version")
        now = found.record()  # its code's files hashed (plugins.code_hash), not run
        if now != was and (old := plugins.old_record(was, now)):  # written before packages were hashed whole
            raise ConfigError(f"{where} uses {kind} {shown(was['name'])} of {was['distribution']} {was['version']} "
                              f"{old}")
        if now != was:
            differ = sorted(k for k in was if was[k] != now[k])
            raise ConfigError(f"{where} uses {kind} {shown(was['name'])} of {was['distribution']} "
                              f"{was['version']}; installed here: {found.origin} ({', '.join(differ)} differ): "
                              "install the run's version, or start a new run")


def read_run_config(path: Path) -> Config:
    """A run folder's ``config.yaml``, once the plugins it records are checked (:func:`check_plugins`)."""
    text = path.read_text(encoding="utf-8", errors="replace") if path.is_file() else ""
    check_plugins(text, str(path.parent))
    raw = read_yaml(path)
    model = raw.get("model")
    if isinstance(model, dict) and OBJECT_KEY in model:  # fedaccel.train's: a module and data no config can name
        raise ConfigError(f"{path.parent} is a run of fedaccel.train on your own module and data (model "
                          f"{shown(model.get('name'))}), which no config can build: continue it with "
                          f"fedaccel.train(..., run_dir={str(path.parent)!r}, resume=True) and the same module, data"
                          + (", partition and algorithm object" if OBJECT_KEY in (raw.get("algorithm") or {}) else
                             " and partition"))
    return from_dict(raw)


def resolved_note(config: Config) -> str:
    """A last comment line for ``config.yaml``: the local work the run does where its config leaves it to
    a rule (a model's defaults, ``partial_work: auto``). A comment: the values stay as the user gave them,
    which grids and claims select by."""
    from fedaccel.engine.work import resolved_work

    t = config.train
    work, partial = resolved_work(t.local_work, t.partial_work, t.local_epochs, config.algorithm["name"])
    if (work, partial) == (t.local_work, t.partial_work):
        return ""
    flow = yaml.safe_dump(work, default_flow_style=True, sort_keys=False).strip()
    return f"# resolved, as this run does it: train.local_work: {flow}, train.partial_work: {partial}\n"
