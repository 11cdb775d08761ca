"""Reading run folders (finished or running): runs, groups of seeds, and their curves.

A run folder holds ``config.yaml`` (the resolved config), ``metrics.jsonl`` (one JSON object per
evaluated round, ``round`` 1-based with an optional round 0 for the initial model) and, once
finished, ``summary.json``. Runs whose configs differ only in ``run.seed`` (and ``name``) form
one *group*; :mod:`fedaccel.report.tables` reports a group's mean over seeds, and
:mod:`fedaccel.report.figures` draws it with its 95% confidence interval (:func:`mean_ci`).

Example:
    >>> runs = load_runs(["results/exp1"])          # doctest: +SKIP
    >>> groups = group_runs(runs)                   # doctest: +SKIP
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fedaccel.errors import UserError
from fedaccel.runs.config import check_recorded, read_yaml, read_yaml_text, recorded_plugins, yaml_mapping
from fedaccel.runs.names import display_name
from fedaccel.runs.rows import LOSSES, check_no_gap, read_diagnostics_rows, read_json, read_rows, rounds_of

#: Config entries (dotted paths) that do not define a group: runs differing only here are seeds.
NON_GROUPING_KEYS: tuple[str, ...] = ("name", "run.seed", "run.out_dir", "run.progress", "run.checkpoint_every",
                                     "run.on_divergence", "eval.models")


#: Human-readable names for the usual metrics (axis labels, table headers).
METRIC_NAMES: dict[str, str] = {
    "test_acc": "test accuracy",
    "test_loss": "test loss",
    "train_loss": "train loss",
    "train_acc": "train accuracy",
    "wall_s": "wall-clock time (s)",
    "bytes_up": "bytes uploaded",
    "bytes_down": "bytes downloaded",
    "local_steps": "local steps",
}


def metric_label(metric: str) -> str:
    """An axis label or table header: ``client_mean/test_acc`` -> ``test accuracy (client mean)``."""
    model, _, plain = metric.rpartition("/")
    name = METRIC_NAMES.get(plain, plain)
    return f"{name} ({model.replace('_', ' ')})" if model else name


MISSING = object()


@dataclass
class Run:
    """One run folder: its resolved config and its per-round metrics (in file order)."""

    path: Path
    config: dict
    metrics: list[dict]
    summary: dict | None = None
    spec: dict | None = None  # its grid cell's config as the experiment file spells it (claims match either)
    plugins: dict = field(default_factory=dict)  # kind -> the plugin record its config.yaml keeps (plugin_note)
    #: read from packed data (:func:`fedaccel.reproductions.snapshot.read_packed`), not from its folder: its
    #: diagnostics rows are ``diagnostics`` (None: it had no ``diagnostics.jsonl``)
    packed: bool = field(default=False, repr=False, compare=False)
    diagnostics: list[dict] | None = field(default=None, repr=False, compare=False)

    def diagnostics_rows(self) -> list[dict]:
        """Its diagnostics rows, those it was read with or its folder's (:class:`UserError` where it has none)."""
        if not self.packed:
            return read_diagnostics(self.path)
        if self.diagnostics is None:
            raise _no_diagnostics(self.path / "diagnostics.jsonl")
        return self.diagnostics

    @property
    def label(self) -> str:
        """The run's display name (:func:`fedaccel.runs.names.display_name`): ``config['name']`` if
        non-empty, else its algorithm with its options and composed parts (``fedavg + adam lr=0.1``), else
        the folder name."""
        return display_name(self.config, self.path.name)

    @property
    def group_key(self) -> str:
        """The config without the seed and name, as canonical JSON: equal for seeds of one setup."""
        return json.dumps(grouping_config(self.config), sort_keys=True, default=str)

    @property
    def seed(self) -> Any:
        """``config['run']['seed']`` (None if absent)."""
        run = self.config.get("run")
        return run.get("seed") if isinstance(run, dict) else None

    @property
    def finished(self) -> bool:
        """True when ``summary.json`` says the run finished."""
        return bool(self.summary and self.summary.get("finished"))

    @property
    def diverged_round(self) -> int | None:
        """The round ``summary.json`` says the run diverged at (a NaN or infinite model or loss), else None.
        A run without a summary (packed data keeps none for runs it did not see diverge: a run of a fedaccel
        that did not yet mark divergence, or one that continued past it) diverged at its first row with a
        NaN or infinite loss, as the rounds' own check would have said."""
        if self.summary is None:
            return next((row["round"] for row in self.metrics if _loss_not_finite(row)), None)
        if not self.summary.get("diverged"):
            return None
        rnd = self.summary.get("diverged_round")
        return int(rnd) if isinstance(rnd, (int, float)) and not isinstance(rnd, bool) else -1


def _loss_not_finite(row: dict) -> bool:
    """Whether a metrics row holds a NaN or infinite loss of the global model (the rounds' own check's
    :data:`~fedaccel.runs.rows.LOSSES`; an extra scored model's loss is not divergence)."""
    return any(isinstance(row.get(name), float) and not math.isfinite(row[name]) for name in LOSSES)


def load_run(path: str | Path) -> Run:
    """Read one run folder. Raises :class:`UserError` if it is not a readable run folder.

    An incomplete last line of ``metrics.jsonl`` (left by a killed run) is skipped; an invalid
    line anywhere else is an error, and so are rounds that do not strictly increase (two
    processes that wrote the same folder at once) or lie beyond the config's ``train.rounds``,
    a gap (an evaluation round missing between two rows, given ``eval.every``), a known column
    that is not a number, and values beyond :mod:`fedaccel.runs.rows`' bounds.
    """
    path = Path(path)
    if not path.is_dir():
        raise UserError(f"run folder not found: {path}")
    config_file = path / "config.yaml"
    metrics_file = path / "metrics.jsonl"
    for f in (config_file, metrics_file):
        if not f.is_file():
            raise UserError(f"{path} is not a run folder: {f.name} is {'not a file' if f.exists() else 'missing'}")

    text = read_yaml_text(config_file)  # bounded: a run folder may come from someone else
    config = yaml_mapping(text, config_file)
    plugins = recorded_plugins(text, str(path))  # read, never imported

    metrics, _ = read_rows(metrics_file, last_round=rounds_of(config))
    check_no_gap(metrics_file, metrics, value_at(config, "eval.every"))

    summary = None
    summary_file = path / "summary.json"
    if summary_file.exists():
        summary = read_json(summary_file)
        if not isinstance(summary, dict):
            summary = None
    return Run(path=path, config=config, metrics=metrics, summary=summary, plugins=plugins)


def read_diagnostics(run_dir: str | Path) -> list[dict[str, Any]]:
    """Every round's diagnostics (tolerates a half-written last line), rounds bounded by the run's
    ``train.rounds`` and the values the plots read checked: damage is one line, not a traceback."""
    path = Path(run_dir) / "diagnostics.jsonl"
    if not path.exists():
        raise _no_diagnostics(path)
    config = Path(run_dir) / "config.yaml"
    return read_diagnostics_rows(path, last_round=rounds_of(read_yaml(config)) if config.exists() else None)[0]


def _no_diagnostics(file: Path) -> UserError:
    return UserError(f"{file} not found: this run recorded no algorithm diagnostics")


def check_installed(runs: Iterable[Run]) -> None:
    """The plugins the runs record (their ``config.yaml``'s plugins line) are installed here, the same
    distribution, version and code hash (every .py file of its package: :func:`fedaccel.plugins.code_hash`); else
    one line naming the first run that differs (:func:`fedaccel.runs.config.check_recorded`). Nothing is imported: a verdict or a table about a method
    is not given for another version of it."""
    checked: set[str] = set()
    for run in runs:
        for kind, record in run.plugins.items():
            key = json.dumps([kind, record], sort_keys=True)
            if key not in checked:
                check_recorded({kind: record}, str(run.path))
                checked.add(key)


def diverged_at(runs: Sequence[Run]) -> int | None:
    """The first round any of ``runs`` diverged at (-1: round unknown); None if none diverged."""
    rounds = [r.diverged_round for r in runs if r.diverged_round is not None]
    return min(rounds) if rounds else None


def load_runs(paths: str | Path | Run | Iterable[str | Path | Run]) -> list[Run]:
    """Load run folders; an experiment folder (one holding run folders) expands to its runs.

    Already-loaded :class:`Run` objects pass through unchanged. Sub-folders of an experiment
    folder are taken in name order; only those containing ``metrics.jsonl`` count. A folder named twice (a grid
    and one of its runs, ``runs/demo/`` and ``runs/demo``) is read once: it is no copy of itself.
    """
    if isinstance(paths, (str, Path, Run)):
        paths = [paths]
    runs: list[Run] = []
    seen: set[Path] = set()

    def add(folder: Path) -> None:
        if (key := folder.resolve()) not in seen:
            seen.add(key)
            runs.append(load_run(folder))

    for p in paths:
        if isinstance(p, Run):
            runs.append(p)
            continue
        p = Path(p)
        if not p.is_dir():
            raise UserError(f"run folder not found: {p}")
        if (p / "metrics.jsonl").exists():  # a folder there too: load_run says so, never skips it
            add(p)
            continue
        subdirs = sorted(d for d in p.iterdir() if d.is_dir() and (d / "metrics.jsonl").exists())
        if not subdirs:
            raise UserError(f"{p} is neither a run folder nor a folder of runs (no metrics.jsonl)")
        for d in subdirs:
            add(d)
    return runs


def grouping_config(config: dict) -> dict:
    cfg = copy.deepcopy(config)
    for dotted in NON_GROUPING_KEYS:
        *parents, leaf = dotted.split(".")
        node: Any = cfg
        for key in parents:
            node = node.get(key) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node.pop(leaf, None)
    return cfg


def flatten_config(config: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(config, dict) and config:
        out: dict[str, Any] = {}
        for k, v in config.items():
            out.update(flatten_config(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: config} if prefix else {}


def fmt_value(v: Any) -> str:
    if v is MISSING:
        return "unset"
    if isinstance(v, str):
        return v
    return json.dumps(v, default=str)


def group_runs(runs: Iterable[Run]) -> list[tuple[str, list[Run]]]:
    """Group runs that differ only in seed; returns ``(label, runs)`` in order of first appearance.

    Groups that would share a label get the config values that tell them apart appended,
    e.g. ``fedavg (data.split=case1)``; a key a group leaves unset is not named (``fedprox`` beside
    ``fedprox (algorithm.mu=0.1)``), which keeps the labels apart: two groups differ in a key one of them sets.
    """
    groups: dict[str, list[Run]] = {}
    for run in runs:
        groups.setdefault(run.group_key, []).append(run)

    by_label: dict[str, list[str]] = {}
    for key, members in groups.items():
        by_label.setdefault(members[0].label, []).append(key)

    labels = {key: members[0].label for key, members in groups.items()}
    for label, keys in by_label.items():
        if len(keys) < 2:
            continue
        flats = {k: flatten_config(grouping_config(groups[k][0].config)) for k in keys}
        ordered: list[str] = []
        for flat in flats.values():
            ordered.extend(name for name in flat if name not in ordered)
        differing = [
            name
            for name in ordered
            if len({fmt_value(flats[k].get(name, MISSING)) for k in keys}) > 1
        ]
        for k in keys:  # a key a group leaves unset (the method's default) is not named: the set values tell them apart
            parts = [f"{name}={fmt_value(flats[k][name])}" for name in differing if name in flats[k]]
            labels[k] = f"{label} ({', '.join(parts)})" if parts else label
    return [(labels[key], members) for key, members in groups.items()]


def unnamed_differences(runs: Iterable[Run]) -> list[str]:
    """The settings (``data.split``, ``train.rounds``: a section's keys) whose values differ between the groups of
    ``runs`` where some group's label does not name them (``fedavg (data.split.name=case1)`` names ``data.split``):
    a table of these groups compares their methods on different settings, which its labels do not show. The
    method (``algorithm``, ``train.dp_sgd``: named in the labels) and how a run ran (``run``) are not settings; a
    key that a group's config lacks (written by an older fedaccel) is left out."""
    groups = group_runs(runs)
    settings = [_settings(members[0].config) for _, members in groups]
    keys = [key for key in dict.fromkeys(k for each in settings for k in each) if all(key in each for each in settings)]
    return [key for key in keys if len({each[key] for each in settings}) > 1
            and not all(f"{key}=" in label or f"{key}." in label for label, _ in groups)]


def _settings(config: Mapping[str, Any]) -> dict[str, str]:
    """A config's settings by ``section.key`` (a top-level value by its key), each as canonical JSON."""
    found: dict[str, str] = {}
    for section, value in config.items():
        if section in ("algorithm", "run", "name"):
            continue
        items = value.items() if isinstance(value, Mapping) else [(None, value)]
        for key, item in items:
            name = section if key is None else f"{section}.{key}"
            if name != "train.dp_sgd":
                found[name] = json.dumps(item, sort_keys=True, default=str)
    return found


def value_at(mapping: Mapping[str, Any], dotted: str) -> Any:
    """``mapping["a"]["b"]`` for ``"a.b"`` (None where a part is missing): a config value, a nested metric."""
    node: Any = mapping
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def metric_value(row: dict, metric: str) -> Any:
    return row[metric] if metric in row else value_at(row, metric)  # dotted: nested entries, e.g. "diag.gsnr"


def run_curve(run: Run, metric: str) -> dict[int, float]:
    curve: dict[int, float] = {}
    for row in run.metrics:
        value = metric_value(row, metric)
        rnd = row.get("round")
        if rnd is None or value is None or isinstance(value, (bool, dict, list, str)):
            continue
        curve[int(rnd)] = float(value)  # rounds are unique: load_run checks they increase
    return curve


def series(runs: Run | Sequence[Run], metric: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(rounds, mean, std)`` of ``metric`` over the rounds present in every run.

    ``std`` is the population standard deviation across runs (0 for a single run; NaN in a round where
    a run's value is infinite or NaN, e.g. a diverged seed's loss, whose mean is then infinite). Rounds where
    a run lacks the metric do not count as present. All three arrays are empty if no round is
    common to all runs.
    """
    if isinstance(runs, Run):
        runs = [runs]
    if not runs:
        return np.array([], dtype=int), np.array([]), np.array([])
    curves = [run_curve(r, metric) for r in runs]
    common = set(curves[0])
    for c in curves[1:]:
        common &= set(c)
    x = np.array(sorted(common), dtype=int)
    if x.size == 0:
        return x, np.array([]), np.array([])
    values = np.array([[c[int(r)] for r in x] for c in curves], dtype=float)
    finite = np.isfinite(values).all(axis=0)  # a diverged seed's inf or NaN: the round has no spread to speak of
    std = np.where(finite, np.where(finite, values, 0.0).std(axis=0), np.nan)
    with np.errstate(invalid="ignore"):  # inf and -inf in one round: their mean is NaN, as it should be
        mean = values.mean(axis=0)
    return x, mean, std


def mean_ci(runs: Run | Sequence[Run], metric: str, level: float = 0.95) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(rounds, mean, half)``: the mean over seeds and the half-width of its ``level`` confidence
    interval, Student's t with n - 1 degrees of freedom (``t * s / sqrt(n)``, ``s`` the sample
    standard deviation); ``half`` is 0 for a single run. Rounds as in :func:`series`.
    """
    if isinstance(runs, Run):
        runs = [runs]
    x, mean, std = series(runs, metric)
    n = len(runs)
    if n < 2 or not x.size:
        return x, mean, np.zeros_like(mean)
    from scipy.stats import t as student_t

    sample_std = std * math.sqrt(n / (n - 1))  # series gives the population std
    return x, mean, float(student_t.ppf(0.5 + level / 2, n - 1)) * sample_std / math.sqrt(n)


def higher_better(metric: str) -> bool:
    return "loss" not in metric.rsplit(".", 1)[-1]


def available_metrics(runs: Sequence[Run]) -> list[str]:
    names: list[str] = []
    for run in runs:
        for row in run.metrics:
            for k, v in row.items():
                numeric = isinstance(v, (int, float)) and not isinstance(v, bool)
                if k != "round" and numeric and k not in names:
                    names.append(k)
    return names
