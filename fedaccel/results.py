"""Reading finished (or running) run folders: grouping by seed, curves, and comparison tables.

A run folder holds ``config.yaml`` (the resolved config), ``metrics.jsonl`` (one JSON object per
evaluated round, ``round`` 1-based with an optional round 0 for the initial model) and, once
finished, ``summary.json``. Runs whose configs differ only in ``run.seed`` (and ``name``) form
one *group*; curves and tables report the mean over a group's seeds, with the standard deviation.

Example:
    >>> runs = load_runs(["results/exp1"])          # doctest: +SKIP
    >>> print(compare_table(runs, targets=[0.8]))    # doctest: +SKIP
    >>> plot_curves(runs, Path("curves.png"))        # doctest: +SKIP
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Iterable, Sequence
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


def _metric_value(row: dict, metric: str) -> Any:
    if metric in row:
        return row[metric]
    node: Any = row  # dotted names reach into nested entries, e.g. "diag.gsnr"
    for part in metric.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


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


def _make_figure(runs: Sequence[Run], metrics: Sequence[str], title: str = ""):
    """Build (without saving) the curves figure; returns a matplotlib ``Figure``."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    metrics = list(metrics)
    if not metrics:
        raise UserError("no metrics to plot")
    groups = group_runs(runs)
    if not groups:
        raise UserError("no runs to plot")
    for metric in metrics:
        if not any(series(g, metric)[0].size for _, g in groups):
            raise UserError(
                f"metric {metric!r} is in none of the runs; available: "
                + ", ".join(_available_metrics(runs))
            )

    n = len(metrics)
    fig = Figure(figsize=(5.0 * n, 4.0), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, n, squeeze=False)[0]
    handles: dict[str, Any] = {}
    for ax, metric in zip(axes, metrics):
        for i, (label, group) in enumerate(groups):
            x, mean, std = series(group, metric)
            if not x.size:
                continue
            color = f"C{i % 10}"
            (line,) = ax.plot(x, mean, color=color, label=label, linewidth=1.5)
            if len(group) > 1:
                ax.fill_between(x, mean - std, mean + std, color=color, alpha=0.2, linewidth=0)
            handles.setdefault(label, line)
        ax.set_xlabel("round")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel(METRIC_NAMES.get(metric, metric))
        ax.grid(True, alpha=0.3)
    ordered = [label for label, _ in groups if label in handles]
    axes[0].legend([handles[k] for k in ordered], ordered, fontsize="small")
    if title:
        fig.suptitle(title)
    return fig


def plot_curves(
    paths_or_runs: str | Path | Run | Iterable[str | Path | Run],
    out: str | Path,
    metrics: Sequence[str] = ("test_acc", "test_loss", "train_loss"),
    title: str = "",
) -> Path:
    """Plot one panel per metric against the round, one line per group (mean ± std band for
    groups with several seeds) and save it as a PNG at ``out`` (parent folders are created; an
    existing folder gets ``curves.png`` inside it). Returns the written path.
    """
    runs = load_runs(paths_or_runs)
    fig = _make_figure(runs, metrics, title)
    out = Path(out)
    if out.is_dir():
        out = out / "curves.png"
    elif not out.suffix:
        out = out.with_suffix(".png")
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120, format="png")
    return out
