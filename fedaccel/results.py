"""Reading finished (or running) run folders: grouping by seed, curves, and comparison tables.

A run folder holds ``config.yaml`` (the resolved config), ``metrics.jsonl`` (one JSON object per
evaluated round, ``round`` 1-based with an optional round 0 for the initial model) and, once
finished, ``summary.json``. Runs whose configs differ only in ``run.seed`` (and ``name``) form
one *group*; tables report the mean over a group's seeds with the standard deviation, curves the
mean with its 95% confidence interval (:func:`mean_ci`).

Example:
    >>> runs = load_runs(["results/exp1"])          # doctest: +SKIP
    >>> print(compare_table(runs, targets=[0.8]))    # doctest: +SKIP
    >>> plot_curves(runs, Path("curves.png"))        # doctest: +SKIP
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from fedaccel.errors import UserError

__all__ = [
    "Run",
    "load_run",
    "load_runs",
    "group_runs",
    "series",
    "rounds_to_target",
    "compare_table",
    "mean_ci",
    "legend_labels",
    "plot_curves",
]

#: Config entries (dotted paths) that do not define a group: runs differing only here are seeds.
NON_GROUPING_KEYS: tuple[str, ...] = ("name", "run.seed", "run.out_dir", "run.progress", "run.checkpoint_every")

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

_MISSING = object()


# --------------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------------


@dataclass
class Run:
    """One run folder: its resolved config and its per-round metrics (in file order)."""

    path: Path
    config: dict
    metrics: list[dict]
    summary: dict | None = None

    @property
    def label(self) -> str:
        """``config['name']`` if non-empty, else the algorithm name (else the folder name)."""
        name = self.config.get("name")
        if name:
            return str(name)
        algorithm = self.config.get("algorithm")
        if isinstance(algorithm, dict) and algorithm.get("name"):
            return str(algorithm["name"])
        return self.path.name

    @property
    def group_key(self) -> str:
        """The config without the seed and name, as canonical JSON: equal for seeds of one setup."""
        return json.dumps(_grouping_config(self.config), sort_keys=True, default=str)

    @property
    def seed(self) -> Any:
        """``config['run']['seed']`` (None if absent)."""
        run = self.config.get("run")
        return run.get("seed") if isinstance(run, dict) else None

    @property
    def finished(self) -> bool:
        """True when ``summary.json`` says the run finished."""
        return bool(self.summary and self.summary.get("finished"))


def load_run(path: str | Path) -> Run:
    """Read one run folder. Raises :class:`UserError` if it is not a readable run folder.

    An incomplete last line of ``metrics.jsonl`` (left by a killed run) is skipped; an invalid
    line anywhere else is an error, and so are rounds that do not strictly increase (two
    processes that wrote the same folder at once).
    """
    path = Path(path)
    if not path.is_dir():
        raise UserError(f"run folder not found: {path}")
    config_file = path / "config.yaml"
    metrics_file = path / "metrics.jsonl"
    for f in (config_file, metrics_file):
        if not f.is_file():
            raise UserError(f"{path} is not a run folder: {f.name} is missing")

    try:
        config = yaml.safe_load(config_file.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise UserError(f"{config_file}: not valid YAML ({reason})") from e
    if config is None:
        config = {}
    if not isinstance(config, dict):
        raise UserError(f"{config_file}: expected a mapping, got {type(config).__name__}")

    metrics = _read_jsonl(metrics_file)

    summary = None
    summary_file = path / "summary.json"
    if summary_file.is_file():
        try:
            summary = json.loads(summary_file.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise UserError(f"{summary_file}: not valid JSON ({e})") from e
        if not isinstance(summary, dict):
            summary = None
    return Run(path=path, config=config, metrics=metrics, summary=summary)


def _read_jsonl(file: Path) -> list[dict]:
    try:
        text = file.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise UserError(f"{file}: not a UTF-8 text file ({e})") from e
    numbered = [(i + 1, line) for i, line in enumerate(text.splitlines()) if line.strip()]
    rows: list[dict] = []
    previous = None
    for k, (lineno, line) in enumerate(numbered):
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            if k == len(numbered) - 1:  # a killed run may leave half a line: ignore it
                break
            raise UserError(f"{file}:{lineno}: not valid JSON ({e.msg})") from e
        if not isinstance(row, dict):
            raise UserError(f"{file}:{lineno}: expected a JSON object, got {type(row).__name__}")
        previous = _check_round(file, lineno, row, previous)
        rows.append(row)
    return rows


def _check_round(file: Path, lineno: int, row: dict, previous: int | None) -> int:
    """``row``'s round, which must be an integer above the one before it."""
    rnd = row.get("round")
    if not isinstance(rnd, int) or isinstance(rnd, bool):
        raise UserError(f"{file}:{lineno}: no integer 'round' in this row")
    if previous is not None and rnd <= previous:
        raise UserError(
            f"{file}:{lineno}: round {rnd} after round {previous}; rounds must increase (two processes "
            "wrote this run at once?): delete the run folder and run it again"
        )
    return rnd


def load_runs(paths: str | Path | Run | Iterable[str | Path | Run]) -> list[Run]:
    """Load run folders; an experiment folder (one holding run folders) expands to its runs.

    Already-loaded :class:`Run` objects pass through unchanged. Sub-folders of an experiment
    folder are taken in name order; only those containing ``metrics.jsonl`` count.
    """
    if isinstance(paths, (str, Path, Run)):
        paths = [paths]
    runs: list[Run] = []
    for p in paths:
        if isinstance(p, Run):
            runs.append(p)
            continue
        p = Path(p)
        if not p.is_dir():
            raise UserError(f"run folder not found: {p}")
        if (p / "metrics.jsonl").is_file():
            runs.append(load_run(p))
            continue
        subdirs = sorted(d for d in p.iterdir() if d.is_dir() and (d / "metrics.jsonl").is_file())
        if not subdirs:
            raise UserError(f"{p} is neither a run folder nor a folder of runs (no metrics.jsonl)")
        runs.extend(load_run(d) for d in subdirs)
    return runs


# --------------------------------------------------------------------------------------------
# Grouping
# --------------------------------------------------------------------------------------------


def _grouping_config(config: dict) -> dict:
    cfg = copy.deepcopy(config)
    for dotted in NON_GROUPING_KEYS:
        *parents, leaf = dotted.split(".")
        node: Any = cfg
        for key in parents:
            node = node.get(key) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node.pop(leaf, None)
    return cfg


def _flatten(config: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(config, dict) and config:
        out: dict[str, Any] = {}
        for k, v in config.items():
            out.update(_flatten(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: config} if prefix else {}


def _fmt_value(v: Any) -> str:
    if v is _MISSING:
        return "unset"
    if isinstance(v, str):
        return v
    return json.dumps(v, default=str)


def group_runs(runs: Iterable[Run]) -> list[tuple[str, list[Run]]]:
    """Group runs that differ only in seed; returns ``(label, runs)`` in order of first appearance.

    Groups that would share a label get the config values that tell them apart appended,
    e.g. ``fedavg (data.split=case1)``.
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
        flats = {k: _flatten(_grouping_config(groups[k][0].config)) for k in keys}
        ordered: list[str] = []
        for flat in flats.values():
            ordered.extend(name for name in flat if name not in ordered)
        differing = [
            name
            for name in ordered
            if len({_fmt_value(flats[k].get(name, _MISSING)) for k in keys}) > 1
        ]
        for k in keys:
            parts = [f"{name}={_fmt_value(flats[k].get(name, _MISSING))}" for name in differing]
            labels[k] = f"{label} ({', '.join(parts)})"
    return [(labels[key], members) for key, members in groups.items()]


# --------------------------------------------------------------------------------------------
# Curves and statistics
# --------------------------------------------------------------------------------------------


def value_at(mapping: Mapping[str, Any], dotted: str) -> Any:
    """``mapping["a"]["b"]`` for ``"a.b"`` (None where a part is missing): a config value, a nested metric."""
    node: Any = mapping
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def _metric_value(row: dict, metric: str) -> Any:
    return row[metric] if metric in row else value_at(row, metric)  # dotted: nested entries, e.g. "diag.gsnr"


def _run_curve(run: Run, metric: str) -> dict[int, float]:
    curve: dict[int, float] = {}
    for row in run.metrics:
        value = _metric_value(row, metric)
        rnd = row.get("round")
        if rnd is None or value is None or isinstance(value, (bool, dict, list, str)):
            continue
        curve[int(rnd)] = float(value)  # rounds are unique: load_run checks they increase
    return curve


def series(runs: Run | Sequence[Run], metric: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(rounds, mean, std)`` of ``metric`` over the rounds present in every run.

    ``std`` is the population standard deviation across runs (0 for a single run). Rounds where
    a run lacks the metric do not count as present. All three arrays are empty if no round is
    common to all runs.
    """
    if isinstance(runs, Run):
        runs = [runs]
    if not runs:
        return np.array([], dtype=int), np.array([]), np.array([])
    curves = [_run_curve(r, metric) for r in runs]
    common = set(curves[0])
    for c in curves[1:]:
        common &= set(c)
    x = np.array(sorted(common), dtype=int)
    if x.size == 0:
        return x, np.array([]), np.array([])
    values = np.array([[c[int(r)] for r in x] for c in curves], dtype=float)
    return x, values.mean(axis=0), values.std(axis=0)


def _higher_is_better(metric: str) -> bool:
    return "loss" not in metric.rsplit(".", 1)[-1]


def rounds_to_target(
    run_or_group: Run | Sequence[Run] | tuple[str, Sequence[Run]],
    target: float,
    metric: str = "test_acc",
    higher_is_better: bool | None = None,
) -> float | None:
    """First round where ``metric`` reaches ``target`` (for a group: its mean curve), else None.

    "Reaches" means ``>= target``; for metrics whose name contains ``loss`` it means
    ``<= target`` unless ``higher_is_better`` says otherwise.
    """
    if isinstance(run_or_group, tuple) and len(run_or_group) == 2:
        if isinstance(run_or_group[0], str):  # a (label, runs) pair from group_runs
            run_or_group = run_or_group[1]
    if higher_is_better is None:
        higher_is_better = _higher_is_better(metric)
    x, mean, _ = series(run_or_group, metric)
    hit = mean >= target if higher_is_better else mean <= target
    idx = np.flatnonzero(hit)
    return float(x[idx[0]]) if idx.size else None


# --------------------------------------------------------------------------------------------
# Comparison table
# --------------------------------------------------------------------------------------------


def _fmt_num(v: float) -> str:
    if math.isnan(v):
        return "nan"
    return f"{v:.4f}"


def _fmt_rounds(r: float | None) -> str:
    if r is None:
        return "—"
    return str(int(r)) if float(r).is_integer() else f"{r:g}"


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|")


def _label_parts(label: str) -> tuple[str, set[str]]:
    """``"bherd (algorithm.alpha=1.0, data.split.name=case1)"`` -> ("bherd", {"algorithm.alpha=1.0", ...})."""
    name, _, rest = label.partition(" (")
    return name, set(rest[:-1].split(", ")) if rest.endswith(")") else set()


def _baseline_indices(groups: list[tuple[str, list[Run]]], baseline: str | None) -> list[int]:
    """For every group, the index of the group it is measured against.

    ``baseline`` is a label, or a label with fewer distinguishing values than the groups have
    (``fedavg`` when the grid also varies the split): every group matching it is a baseline,
    and each group is measured against the matching one whose config agrees with its own in
    the most values — FedAvg on the same split, say.
    """
    labels = [label for label, _ in groups]
    if baseline is None:
        candidates = [i for i, (_, g) in enumerate(groups) if g[0].label == "fedavg"] or [0]
    elif baseline in labels:
        candidates = [labels.index(baseline)]
    else:
        name, wanted = _label_parts(baseline)
        candidates = [
            i for i, (label, g) in enumerate(groups)
            if g[0].label == name and wanted <= _label_parts(label)[1]
        ]
        if not candidates:
            raise UserError(f"unknown baseline {baseline!r}; the groups are: " + ", ".join(repr(s) for s in labels))
    flats = [{k: _fmt_value(v) for k, v in _flatten(_grouping_config(g[0].config)).items()} for _, g in groups]

    def agreement(i: int, j: int) -> int:
        return sum(flats[i].get(k) == v for k, v in flats[j].items())

    base_of = [max(candidates, key=lambda c: (agreement(i, c), -c)) for i in range(len(groups))]
    if len(groups) > 1 and all(b == i for i, b in enumerate(base_of)):  # every group its own baseline
        base_of = [candidates[0]] * len(groups)  # (runs of one method, other settings): the first one
    return base_of


def compare_table(
    runs: Sequence[Run] | Iterable[str | Path | Run],
    targets: Sequence[float],
    baseline: str | None = None,
    metric: str = "test_acc",
) -> str:
    """A Markdown table comparing the groups of ``runs`` (one row per group).

    Columns: method, seeds, best (mean over seeds of each seed's best), final (mean ± std at the
    last round common to the group's seeds), then per target ``T`` the rounds the mean curve
    needs to reach ``T`` and the speed-up ``baseline_rounds / rounds`` (``—`` when either is
    missing). ``baseline`` names the baseline groups (default ``fedavg``, else the first group):
    see :func:`_baseline_indices`. An unknown ``baseline`` raises :class:`UserError`.
    """
    runs = load_runs(runs)
    groups = group_runs(runs)
    if not groups:
        raise UserError("no runs to compare")
    base_of = _baseline_indices(groups, baseline)

    rounds = [[rounds_to_target(g, t, metric) for t in targets] for _, g in groups]
    name = METRIC_NAMES.get(metric, metric)
    best_word = "best" if _higher_is_better(metric) else "lowest"

    header = ["method", "seeds", f"{best_word} {name}", f"final {name}"]
    for t in targets:
        header += [f"rounds to {t:g}", f"speed-up @{t:g}"]
    align = ["---"] + ["---:"] * (len(header) - 1)
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|"]

    for i, (label, group) in enumerate(groups):
        x, mean, std = series(group, metric)
        if x.size:
            per_run = np.array([[_run_curve(r, metric)[int(k)] for k in x] for r in group])
            best = per_run.max(axis=1) if _higher_is_better(metric) else per_run.min(axis=1)
            best_cell = _fmt_num(float(best.mean()))
            final_cell = _fmt_num(float(mean[-1]))
            if len(group) > 1:
                final_cell += f" ± {_fmt_num(float(std[-1]))}"
        else:
            best_cell = final_cell = "—"
        is_baseline = any(b == i for j, b in enumerate(base_of) if j != i) or len(groups) == 1
        shown = label + (" (baseline)" if is_baseline else "")
        row = [_md_cell(shown), str(len(group)), best_cell, final_cell]
        for r, b in zip(rounds[i], rounds[base_of[i]]):
            speed = f"{b / r:.2f}×" if r is not None and b is not None and r > 0 else "—"
            row += [_fmt_rounds(r), speed]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# Plotting
# --------------------------------------------------------------------------------------------


def _available_metrics(runs: Sequence[Run]) -> list[str]:
    names: list[str] = []
    for run in runs:
        for row in run.metrics:
            for k, v in row.items():
                numeric = isinstance(v, (int, float)) and not isinstance(v, bool)
                if k != "round" and numeric and k not in names:
                    names.append(k)
    return names


#: Longest legend label; the full key of a group is its label in :func:`compare_table`.
LABEL_MAX = 40

#: Metrics whose panel switches to a log scale when their values span more than this many decades.
LOG_DECADES = 1.5

_DASHES: tuple[tuple[float, ...] | None, ...] = (None, (6, 2), (2, 1.5), (6, 2, 1.5, 2), (3, 3), (1, 3))
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")


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


def _short_value(v: Any) -> str | None:
    """A value as a legend shows it: None when unset, a list of attacks by their kinds."""
    if v is _MISSING:
        return None
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, (list, tuple)):
        if not v:
            return "none"
        return "+".join(_short_value(e) or "?" for e in v)
    if isinstance(v, dict):
        named = v.get("name", v.get("kind"))
        return str(named) if named is not None else _fmt_value(v)
    return _fmt_value(v)


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _determines(a: list[str], b: list[str]) -> bool:
    """True when equal values in ``a`` always come with equal values in ``b`` (b is a function of a)."""
    seen: dict[str, str] = {}
    return all(seen.setdefault(x, y) == y for x, y in zip(a, b))


#: Shorter names of long config keys in legend labels.
KEY_ABBREVIATIONS: dict[str, str] = {
    "client_fraction": "frac",
    "local_epochs": "epochs",
    "local_steps": "steps",
    "batch_size": "batch",
    "weight_decay": "wd",
}


def legend_labels(groups: Sequence[tuple[str, Sequence[Run]]], limit: int = LABEL_MAX) -> list[str]:
    """Short labels for ``groups`` (from :func:`group_runs`) naming only what differs between them.

    A label is the group's name (``Run.label``) and, for the config values that differ between
    the groups shown, ``key=value`` (a ``...name`` entry, e.g. the split's, by its value alone,
    right after the name: ``fedavg dirichlet attacks=noise``).
    Left out: values that follow from the name or from another value shown (the Dirichlet
    ``alpha`` next to the split's name), unset values, and a key's path (``train.client_fraction``
    is ``frac``, see :data:`KEY_ABBREVIATIONS`). Attack lists are named by their kinds; long
    values are cut until the label has at most ``limit`` characters; labels stay distinct.
    """
    if not groups:
        return []
    names = [members[0].label for _, members in groups]
    flats = [_flatten(_grouping_config(m[0].config)) for _, m in groups]
    keys: list[str] = []
    for flat in flats:
        keys.extend(k for k in flat if k not in keys)
    full = {k: [_fmt_value(f.get(k, _MISSING)) for f in flats] for k in keys}
    differing = [k for k in keys if len(set(full[k])) > 1]
    differing.sort(key=lambda k: not _is_name_key(k))  # a split's name explains more than its alpha
    kept: list[str] = []
    for k in differing:  # drop what the name or a value already kept determines
        if not any(_determines(d, full[k]) for d in [names, *(full[j] for j in kept)]):
            kept.append(k)
    kept = [k for k in sorted(kept, key=lambda k: (not _is_name_key(k), keys.index(k)))  # bare values first
            if _is_name_key(k) or not any(j != k and _determines(full[j], full[k]) for j in kept)]

    shown: dict[str, list[str | None]] = {}
    for k in kept:
        short = [_short_value(f.get(k, _MISSING)) for f in flats]
        if len(set(short)) < len(set(full[k])):  # shortening merged values: show them in full
            short = [None if v == "unset" else v for v in full[k]]
        shown[k] = short
    short_keys = _short_keys(kept)
    labels = []
    for i, name in enumerate(names):
        parts = [("" if _is_name_key(k) else f"{short_keys[k]}=", shown[k][i])
                 for k in kept if shown[k][i] is not None]
        labels.append(_fit(name, parts, limit))
    for i, label in enumerate(labels):  # still equal (cut, or differing only in unset values)
        if labels.count(label) > 1:
            labels[i] = _clip(label, limit - len(f" #{i + 1}")) + f" #{i + 1}"
    return labels


def _is_name_key(key: str) -> bool:
    return key.endswith(".name")


def _fit(name: str, parts: list[tuple[str, str]], limit: int) -> str:
    """``name key=value ...``, cutting the longest value a character at a time (down to 5) to fit."""
    values = [v for _, v in parts]

    def text() -> str:
        return " ".join([name, *(k + v for (k, _), v in zip(parts, values))])

    while len(text()) > limit and values:
        longest = max(range(len(values)), key=lambda j: len(values[j]))
        if len(values[longest]) <= 5:
            break
        values[longest] = values[longest][: len(values[longest]) - 2] + "…"
    return _clip(text(), limit)


def _short_keys(keys: Sequence[str]) -> dict[str, str]:
    """The shortest dotted suffix of each key that tells it from the others (``name`` leaves out)."""
    def suffix(key: str, n: int) -> str:
        parts = key.split(".")
        if len(parts) > 1 and parts[-1] == "name":
            parts = parts[:-1]
        if n == 1:
            return KEY_ABBREVIATIONS.get(parts[-1], parts[-1])
        return ".".join(parts[-n:])

    out = {}
    for k in keys:
        n = 1
        while n < len(k.split(".")) and any(suffix(j, n) == suffix(k, n) for j in keys if j != k):
            n += 1
        out[k] = suffix(k, n)
    return out


def _line_style(i: int, n: int) -> dict[str, Any]:
    """Group ``i`` of ``n``: later groups are drawn on top, thinner, with their own dashes and
    markers, so a line they cover shows as a coloured halo around theirs."""
    colors = "tab10" if n <= 10 else "tab20"
    import matplotlib

    cmap = matplotlib.colormaps[colors]
    return {
        "color": cmap(i % cmap.N),
        "linewidth": 1.2 + 1.6 * (n - 1 - i) / max(n - 1, 1),
        "zorder": 3 + i / max(n, 1),
        "dashes": _DASHES[i % len(_DASHES)],
        "marker": _MARKERS[i % len(_MARKERS)],
    }


def _first_shown_round(x_all: np.ndarray) -> int:
    """Rounds from this one on set the y-range: the first ~5% (and round 0) only in the overview."""
    last = int(x_all.max()) if x_all.size else 0
    return max(1, math.ceil(0.05 * last))


def _padded(lo: float, hi: float, log: bool, margin: float = 0.05) -> tuple[float, float]:
    if log:
        a, b = math.log10(lo), math.log10(hi)
        pad = margin * (b - a) or 0.05
        return 10 ** (a - pad), 10 ** (b + pad)
    pad = margin * (hi - lo) or max(abs(hi) * 0.05, 1e-3)
    return lo - pad, hi + pad


def _make_figure(
    runs: Sequence[Run],
    metrics: Sequence[str],
    title: str = "",
    targets: Sequence[float] = (),
    target_metric: str = "test_acc",
):
    """Build (without saving) the curves figure; returns a matplotlib ``Figure``.

    One column per metric; a panel's y-range covers the data from round ~5% of the last on (the
    first rounds, round 0's untrained model among them, would flatten the differences), and a thin
    panel above it shows all values when that range leaves some out. Loss metrics spanning more
    than :data:`LOG_DECADES` decades are drawn on a log scale; ``targets`` are dotted lines on the
    ``target_metric`` panel. Lines are the mean over seeds with a 95% Student-t band; groups are
    drawn in legend order, each later one on top (see :func:`_line_style`). The legend sits
    below the panels with :func:`legend_labels`, and the figure grows to hold it.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch
    from matplotlib.ticker import MaxNLocator
    from matplotlib.transforms import blended_transform_factory

    metrics = list(metrics)
    if not metrics:
        raise UserError("no metrics to plot")
    groups = group_runs(runs)
    if not groups:
        raise UserError("no runs to plot")
    curves = {m: [mean_ci(g, m) for _, g in groups] for m in metrics}
    for metric in metrics:
        if not any(x.size for x, _, _ in curves[metric]):
            raise UserError(
                f"metric {metric!r} is in none of the runs; available: "
                + ", ".join(_available_metrics(runs))
            )
    labels = legend_labels(groups)
    styles = [_line_style(i, len(groups)) for i in range(len(groups))]

    plans = [_panel_plan(metric, curves[metric], targets if metric == target_metric else ()) for metric in metrics]
    overview = any(p["overview"] for p in plans)

    n = len(metrics)
    width = max(5.0 * n, 6.0)
    char_in = 0.075  # inches per character of a "small" legend label
    entry_in = max(len(s) for s in labels) * char_in + 0.9
    entries = len(labels) + bool(targets) + any(len(g) > 1 for _, g in groups)  # + target, band
    ncols = max(1, min(entries, int(width // entry_in)))
    legend_rows = math.ceil(entries / ncols)
    height = 3.6 + (1.0 if overview else 0.0) + 0.25 * legend_rows + (0.3 if title else 0.0)
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    grid = fig.add_gridspec(2 if overview else 1, n, height_ratios=[1, 3.2] if overview else [1])

    handles: dict[int, Any] = {}
    target_line = None
    for j, (metric, plan) in enumerate(zip(metrics, plans)):
        ax = fig.add_subplot(grid[-1, j])
        over = fig.add_subplot(grid[0, j], sharex=ax) if plan["overview"] else None
        for i, (x, mean, half) in enumerate(curves[metric]):
            if not x.size:
                continue
            st = styles[i]
            step = max(1, len(x) // 6)
            (line,) = ax.plot(
                x, mean, color=st["color"], linewidth=st["linewidth"], zorder=st["zorder"],
                marker=st["marker"], markersize=3.5, markevery=(i * step // len(groups), step),
            )
            if st["dashes"] is not None:
                line.set_dashes(st["dashes"])
            if np.any(half > 0):
                ax.fill_between(x, mean - half, mean + half, color=st["color"], alpha=0.18, linewidth=0, zorder=1)
            handles.setdefault(i, line)
            if over is not None:
                over.plot(x, mean, color=st["color"], linewidth=0.9, zorder=st["zorder"])
        if plan["log"]:
            ax.set_yscale("log")
        if plan["ylim"] is not None:
            ax.set_ylim(*plan["ylim"])
        for t in plan["targets"]:  # labelled at the right, outside the data
            target_line = ax.axhline(t, linestyle=":", color="0.3", linewidth=1.0, zorder=2)
            ax.text(1.01, t, f"{t:g}", transform=blended_transform_factory(ax.transAxes, ax.transData),
                    ha="left", va="center", fontsize="x-small", color="0.3")
        ax.set_xlabel("round")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel(METRIC_NAMES.get(metric, metric))
        ax.grid(True, alpha=0.3)
        if over is not None:
            if plan["log"]:
                over.set_yscale("log")
            over.axhspan(*plan["ylim"], color="0.85", zorder=0)
            over.set_title("all rounds (shaded: the range below)", fontsize="x-small", loc="left")
            over.tick_params(labelbottom=False, labelsize="x-small")
            over.grid(True, alpha=0.3)

    shown = sorted(handles)
    legend_handles = [handles[i] for i in shown]
    legend_texts = [labels[i] for i in shown]
    if any(len(g) > 1 for _, g in groups):
        legend_handles.append(Patch(color="0.5", alpha=0.3, linewidth=0))
        legend_texts.append("band: 95% CI of the mean over seeds (t)")
    if target_line is not None:
        legend_handles.append(target_line)
        legend_texts.append("target (grid's targets)")
    fig.legend(legend_handles, legend_texts, loc="outside lower center", ncols=ncols, fontsize="small", frameon=False)
    if title:
        fig.suptitle(title)
    return fig


def _panel_plan(metric: str, curves: list[tuple[np.ndarray, np.ndarray, np.ndarray]], targets: Sequence[float]) -> dict:
    """The y-scale, y-range, target lines and whether an overview is needed for one panel."""
    present = [(x, m, h) for x, m, h in curves if x.size]
    every = np.concatenate([np.concatenate([m - h, m + h]) for _, m, h in present])
    every = every[np.isfinite(every)]
    means = np.concatenate([m for _, m, _ in present])
    means = means[np.isfinite(means)]
    plan: dict[str, Any] = {"log": False, "ylim": None, "overview": False, "targets": []}
    plan["log"] = bool(
        "loss" in metric.rsplit(".", 1)[-1] and means.size and means.min() > 0
        and math.log10(means.max() / means.min()) > LOG_DECADES
    )
    if plan["log"]:
        every = every[every > 0]  # a band reaching below 0 is cut at the axis
    if not every.size:
        return plan
    lo_all, hi_all = float(every.min()), float(every.max())
    first = _first_shown_round(np.concatenate([x for x, _, _ in present]))
    late = np.concatenate([np.concatenate([m - h, m + h])[np.concatenate([x, x]) >= first] for x, m, h in present])
    late = late[np.isfinite(late)]
    if plan["log"]:
        late = late[late > 0]
    if not late.size:
        late = every
    plan["targets"] = [float(t) for t in targets if lo_all <= t <= hi_all]
    lo, hi = float(late.min()), float(late.max())
    for t in plan["targets"]:  # a target the curves cross stays in view
        lo, hi = min(lo, t), max(hi, t)
    plan["ylim"] = _padded(lo, hi, plan["log"])
    plan["overview"] = lo_all < plan["ylim"][0] or hi_all > plan["ylim"][1]
    return plan


def plot_curves(
    paths_or_runs: str | Path | Run | Iterable[str | Path | Run],
    out: str | Path,
    metrics: Sequence[str] = ("test_acc", "test_loss", "train_loss"),
    title: str = "",
    targets: Sequence[float] = (),
    target_metric: str = "test_acc",
) -> Path:
    """Plot one panel per metric against the round, one line per group (mean over seeds with a
    95% confidence band for groups with several), ``targets`` as dotted lines on the
    ``target_metric`` panel, and save it as a PNG at ``out`` (parent folders are created; an
    existing folder gets ``curves.png`` inside it). Returns the written path. See
    :func:`_make_figure` for the ranges, scales and drawing order.
    """
    runs = load_runs(paths_or_runs)
    fig = _make_figure(runs, metrics, title, targets=targets, target_metric=target_metric)
    out = Path(out)
    if out.is_dir():
        out = out / "curves.png"
    elif not out.suffix:
        out = out.with_suffix(".png")
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120, format="png")
    return out
