"""The curves figure: one panel per metric, one line per group of seeds (mean and 95% band).

Example:
    >>> plot_curves(["runs/demo"], "curves.png", targets=[0.93])    # doctest: +SKIP
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fedaccel.disk import save_png
from fedaccel.errors import UserError, check_png_output, listed, shown
from fedaccel.report.colors import SHADES, family_color, family_colors, shade
from fedaccel.report.reading import (
    METRIC_NAMES,  # noqa: F401 (read from here by callers)
    MISSING,
    Run,
    available_metrics,
    diverged_at,
    flatten_config,
    fmt_value,
    group_runs,
    grouping_config,
    load_runs,
    mean_ci,
    metric_label,
)
from fedaccel.runs.names import family_name

#: Longest legend label; the full key of a group is its label in :func:`compare_table`.
LABEL_MAX = 40


#: Metrics whose panel switches to a log scale when their values span more than this many decades.
LOG_DECADES = 1.5


#: Line patterns (on-off lengths, in line widths), told apart even where two curves overlap: solid,
#: dashed, dotted, dash-dot, long dashes, dash-dot-dot.
_DASHES: tuple[tuple[float, ...] | None, ...] = (None, (4, 1.6), (1, 1.2), (4, 1.4, 1, 1.4), (8, 2.5),
                                                 (4, 1.4, 1, 1.4, 1, 1.4))


_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")


def _short_value(v: Any) -> str | None:
    """A value as a legend shows it: None when unset, a list of attacks by their kinds."""
    if v is MISSING:
        return None
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, (list, tuple)):
        if not v:
            return "none"
        return "+".join(_short_value(e) or "?" for e in v)
    if isinstance(v, dict):
        named = v.get("name", v.get("kind"))
        return str(named) if named is not None else fmt_value(v)
    return fmt_value(v)


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
    """Short labels for ``groups`` (from :func:`group_runs`) naming only what differs between them
    (:func:`legend_heading_and_labels`, the heading it takes out put back in front of each label: such a label
    may pass ``limit``)."""
    heading, labels = legend_heading_and_labels(groups, limit)
    return [f"{heading} {label}" for label in labels] if heading else labels


def legend_heading_and_labels(groups: Sequence[tuple[str, Sequence[Run]]],
                              limit: int = LABEL_MAX) -> tuple[str | None, list[str]]:
    """A heading and short labels for ``groups`` (from :func:`group_runs`) naming only what differs between them.

    A label is the group's name (``Run.label``) and, for the config values that differ between
    the groups shown, ``key=value`` (a ``...name`` entry, e.g. the split's, by its value alone,
    right after the name: ``fedavg dirichlet attacks=noise``).
    Left out: values that follow from the name or from another value shown (the Dirichlet
    ``alpha`` next to the split's name), unset values, and a key's path (``train.client_fraction``
    is ``frac``, see :data:`KEY_ABBREVIATIONS`). Attack lists are named by their kinds; long
    values are cut until the label has at most ``limit`` characters; labels stay distinct.
    Labels too long to show whole name each group's values where they differ from the most common ones
    (:func:`_apart_from_the_common`); the name they all share is then the heading (None: none taken out).
    """
    if not groups:
        return None, []
    names = without_constant_options([members[0].label for _, members in groups], limit)
    flats = [flatten_config(grouping_config(m[0].config)) for _, m in groups]
    keys: list[str] = []
    for flat in flats:
        keys.extend(k for k in flat if k not in keys)
    full = {k: [fmt_value(f.get(k, MISSING)) for f in flats] for k in keys}
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
        short = [_short_value(f.get(k, MISSING)) for f in flats]
        if len(set(short)) < len(set(full[k])):  # shortening merged values: show them in full
            short = [None if v == "unset" else v for v in full[k]]
        shown[k] = short
    short_keys = _short_keys(kept)
    parts = [[("" if _is_name_key(k) else f"{short_keys[k]}=", shown[k][i]) for k in kept if shown[k][i] is not None]
             for i in range(len(names))]
    heading = None
    if any(len(_fit(name, p, 10**6)) > limit for name, p in zip(names, parts)):
        parts = _apart_from_the_common(names, parts)
        if len(set(names)) == 1 and all(parts):
            heading, names = names[0], [""] * len(names)
    labels = [_fit(name, p, limit).strip() for name, p in zip(names, parts)]
    for i, label in enumerate(labels):  # still equal (cut, or differing only in unset values)
        if labels.count(label) > 1:
            labels[i] = _clip(label, limit - len(f" #{i + 1}")) + f" #{i + 1}"
    return heading, labels


def _apart_from_the_common(names: Sequence[str], parts: list[list[tuple[str, str]]]) -> list[list[tuple[str, str]]]:
    """Labels too long to show whole, as in a grid of variants around one setting (``epochs=0.5``, ``batch=10``,
    ``clients=20`` around ``clients=5 batch=100 epochs=1``): each group's values where they differ from the
    most common one, the group at the common setting with all of its values. ``parts`` as they were where
    that would leave two labels equal."""
    counts: dict[tuple[str, str], int] = {}
    for group in parts:
        for part in group:
            counts[part] = counts.get(part, 0) + 1
    common = {}
    for (key, value), count in counts.items():
        if count > 1 and count > counts.get((key, common.get(key, "")), 0):
            common[key] = value
    apart = [[(k, v) for k, v in group if common.get(k) != v] or group for group in parts]
    labels = [" ".join([name, *(k + v for k, v in group)]) for name, group in zip(names, apart)]
    return apart if len(set(labels)) == len(labels) else parts


def without_constant_options(names: Sequence[str], limit: int = LABEL_MAX) -> list[str]:
    """``names`` (``fedavg + dp clip=0.19 delta=1e-05 target_epsilon=8``), when one is longer than ``limit``, without
    the ``key=value`` options that every name spelling that part and key gives one value (``clip=0.19``,
    ``delta=1e-05``): the legend then shows what differs (``fedavg + dp target_epsilon=8``) where cutting would
    have kept the constant options and cut the one that differs. Names that would become equal stay whole."""
    if all(len(name) <= limit for name in names):
        return list(names)

    def options(name: str) -> list[list[str]]:
        return [segment.split(" ") for segment in name.split(" + ")]

    values: dict[tuple[str, str], set[str]] = {}
    for name in names:
        for part, *tokens in options(name):
            for token in tokens:
                key, eq, value = token.partition("=")
                if eq:
                    values.setdefault((part, key), set()).add(value)

    def short(name: str) -> str:
        return " + ".join(" ".join([part, *(t for t in tokens if "=" not in t
                                              or len(values[(part, t.partition("=")[0])]) > 1)])
                          for part, *tokens in options(name))

    shortened = [short(name) for name in names]
    return shortened if len(set(shortened)) == len(set(names)) else list(names)


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


def method_of(config: Mapping[str, Any]) -> str:
    """What names a run's method: its config's ``name`` and ``algorithm`` entry (hyperparameters
    included, so BHerd at α = 0.5 and at α = 0.3 are two methods), as canonical JSON."""
    return json.dumps([config.get("name") or "", config.get("algorithm")], sort_keys=True, default=str)


def setup_of(config: Mapping[str, Any], ignore: Sequence[str] = ()) -> str:
    """A run's setup without its seed (:func:`grouping_config`) and without the ``ignore`` keys, as canonical JSON."""
    flat = flatten_config(grouping_config(dict(config)))
    return json.dumps({k: v for k, v in flat.items() if not any(k == i or k.startswith(i + ".") for i in ignore)},
                      sort_keys=True, default=str)


@dataclass(frozen=True)
class Palette:
    """A colour per method of a grid, keyed by the method's name (:mod:`fedaccel.report.colors`): FedAvg
    is the same blue in every figure, of this grid or any other. Settings of one method (BHerd at two α)
    are shades of its colour, the first in grid order its own; a grid of one method shades its setups
    instead (less the ``ignore`` keys, the ``figures_by`` key of a report). The same method has the
    same colour in every figure of the grid (``experiment``'s curves.png, ``plot``, the reports' figures,
    one per ``figures_by`` value). Build it with :func:`grid_palette`."""

    keys: tuple[str, ...]
    by_method: bool = True
    ignore: tuple[str, ...] = ()
    shades: tuple[str, ...] = ()  # the colour of each key (``#rrggbb``)

    def key(self, config: Mapping[str, Any]) -> str:
        return method_of(config) if self.by_method else setup_of(config, self.ignore)

    def index(self, config: Mapping[str, Any]) -> int:
        """The key's place in the grid (its line pattern's); a config of no cell of the grid comes after them all."""
        key = self.key(config)
        return self.keys.index(key) if key in self.keys else len(self.keys)

    def color(self, config: Mapping[str, Any]) -> str:
        """The colour (``#rrggbb``) of the config's key; a config of no cell of the grid: its method's colour."""
        key = self.key(config)
        if key in self.keys and len(self.shades) == len(self.keys):
            return self.shades[self.keys.index(key)]
        return family_color(family_name(config, "?"))

    def colors(self) -> dict[str, str]:
        """key -> colour, for every key of the grid."""
        return dict(zip(self.keys, self.shades))


def grid_palette(configs: Iterable[Mapping[str, Any]], ignore: Sequence[str] = ()) -> Palette:
    """The :class:`Palette` of a grid whose cells' configs are ``configs``, in grid order (runs'
    ``config`` dicts, or ``Config.to_dict()`` of cells not run yet): by method when the grid has
    several, else by setup less the ``ignore`` keys."""
    configs = list(configs)
    by_method = len({method_of(c) for c in configs}) > 1
    first: dict[str, Mapping[str, Any]] = {}
    for config in configs:
        first.setdefault(method_of(config) if by_method else setup_of(config, ignore), config)
    families = [family_name(config, "?") for config in first.values()]
    base = family_colors(families)
    seen: dict[str, int] = {}
    shades = []
    for family in families:  # the n-th setting of a family in grid order: the n-th shade of its colour
        place = seen[family] = seen.get(family, -1) + 1
        shades.append(shade(base[family], SHADES[place % len(SHADES)]))
    return Palette(tuple(first), by_method, tuple(ignore), tuple(shades))


def _line_styles(groups: Sequence[tuple[str, Sequence[Run]]], palette: Palette) -> list[dict[str, Any]]:
    """A style per group (legend order): the colour of its method (``palette``); dashes and markers
    from the same place in the grid, moved on to the next pattern no earlier group of the figure has,
    so overlapping curves of two methods, or two setups of one method, differ in pattern as well.
    Later groups are drawn on top, thinner: a line they cover shows as a coloured halo around theirs."""
    n, styles, used = len(groups), [], set()
    for i, (_, members) in enumerate(groups):
        place = palette.index(members[0].config)
        free = [p for p in range(place, place + len(_DASHES)) if p % len(_DASHES) not in used]
        pattern = free[0] if free else place + i
        used.add(pattern % len(_DASHES))
        styles.append({
            "color": palette.color(members[0].config),
            "linewidth": 1.2 + 1.6 * (n - 1 - i) / max(n - 1, 1),
            "zorder": 3 + i / max(n, 1),
            "dashes": _DASHES[pattern % len(_DASHES)],
            "marker": _MARKERS[pattern % len(_MARKERS)],
        })
    return styles


def band_bounds(metric: str) -> tuple[float, float]:
    """What a metric can be, to cut a drawn confidence band to: an accuracy lies in [0, 1], a loss is at least 0;
    other metrics are not cut. (A t band of three seeds, mean ± 4.3 standard errors, reaches below 0.)"""
    plain = metric.rpartition("/")[2].rsplit(".", 1)[-1]
    if plain == "acc" or plain.endswith("_acc") or "accuracy" in plain:
        return 0.0, 1.0
    if "loss" in plain:
        return 0.0, math.inf
    return -math.inf, math.inf


def _band(metric: str, mean: np.ndarray, half: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The drawn band of ``mean ± half``, cut to :func:`band_bounds` (the tables' numbers are not cut)."""
    low, high = band_bounds(metric)
    return np.clip(mean - half, low, high), np.clip(mean + half, low, high)


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
    *,
    targets_from: str = "",
    palette: Palette | None = None,
):
    """Build (without saving) the curves figure; returns a matplotlib ``Figure``.

    One column per metric; a panel's y-range covers the data from round ~5% of the last on (the
    first rounds, round 0's untrained model among them, would flatten the differences), and a thin
    panel above it shows all values when that range leaves some out. Loss metrics spanning more
    than :data:`LOG_DECADES` decades are drawn on a log scale; ``targets`` are dotted lines on the
    ``target_metric`` panel. Lines are the mean over seeds with a 95% Student-t band (cut to what the
    metric can be: :func:`band_bounds`); groups are drawn in legend order, each later one on top, in their
    method's colour (``palette``, default :func:`grid_palette` of ``runs``; see :func:`_line_styles`). The
    legend sits below the panels with :func:`legend_labels` and says where the targets came from
    (``targets_from``, e.g. ``"grid's targets"``); the figure grows to hold it.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch
    from matplotlib.ticker import MaxNLocator

    from fedaccel.report.target_labels import TargetLabels  # matplotlib: imported when a figure is drawn

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
                f"metric {shown(metric)} is in none of the runs; available: "
                + listed(available_metrics(runs), near=metric)
            )
    diverged = [diverged_at(g) is not None for _, g in groups]
    heading, labels = legend_heading_and_labels(groups)
    labels = [label + (" (diverged)" if gone else "") for label, gone in zip(labels, diverged)]
    palette = palette or grid_palette(r.config for r in runs)
    styles = _line_styles(groups, palette)

    plans = [_panel_plan(metric, curves[metric], targets if metric == target_metric else (), diverged)
             for metric in metrics]
    overview = any(p["overview"] for p in plans)

    n = len(metrics)
    width = max(5.0 * n, 6.0)
    char_in = 0.075  # inches per character of a "small" legend label
    entry_in = max(len(s) for s in labels) * char_in + 1.1
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
                ax.fill_between(x, *_band(metric, mean, half), color=st["color"], alpha=0.18, linewidth=0, zorder=1)
            handles.setdefault(i, line)
            if over is not None:
                over.plot(x, mean, color=st["color"], linewidth=0.9, zorder=st["zorder"])
        if plan["log"]:
            ax.set_yscale("log")
        if plan["ylim"] is not None:
            ax.set_ylim(*plan["ylim"])
        for t in plan["targets"]:
            target_line = ax.axhline(t, linestyle=":", color="0.3", linewidth=1.0, zorder=2)
        if plan["targets"]:  # labelled at the right, outside the data, spread apart where lines are close
            ax.add_artist(TargetLabels(ax, plan["targets"]))
        ax.set_xlabel("round")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel(metric_label(metric))
        ax.grid(True, alpha=0.3)
        if over is not None:
            if plan["log"]:
                over.set_yscale("log")
            over.axhspan(*plan["ylim"], color="0.85", zorder=0)
            over.set_title("all rounds (shaded: the range below)", fontsize="x-small", loc="left")
            over.tick_params(labelbottom=False, labelsize="x-small")
            over.grid(True, alpha=0.3)

    drawn = sorted(handles)
    legend_handles = [handles[i] for i in drawn]
    legend_texts = [labels[i] for i in drawn]
    if any(len(g) > 1 for _, g in groups):
        legend_handles.append(Patch(color="0.5", alpha=0.3, linewidth=0))
        legend_texts.append("band: 95% CI of the mean over seeds (t)")
    if target_line is not None:
        legend_handles.append(target_line)
        legend_texts.append(f"target ({targets_from})" if targets_from else "target")
    fig.legend(legend_handles, legend_texts, loc="outside lower center", ncols=ncols, fontsize="small", frameon=False,
               handlelength=3.2, title=heading, title_fontsize="small")
    if title:
        fig.suptitle(title)
    return fig


def _panel_plan(metric: str, curves: list[tuple[np.ndarray, np.ndarray, np.ndarray]], targets: Sequence[float],
                diverged: Sequence[bool]) -> dict:
    """The y-scale, y-range, target lines and whether an overview is needed for one panel. The scale and range follow
    the groups that did not diverge (where one did): a loss of 1e33 leaves the others readable, and the overview
    above shows every group whole."""
    present = [(x, m, h) for x, m, h in curves if x.size]
    every = np.concatenate([np.concatenate(_band(metric, m, h)) for _, m, h in present])
    every = every[np.isfinite(every)]
    kept = [(x, m, h) for (x, m, h), gone in zip(curves, diverged, strict=True) if x.size and not gone]
    present = kept or present
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
    late = np.concatenate([np.concatenate(_band(metric, m, h))[np.concatenate([x, x]) >= first]
                           for x, m, h in present])
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
    force: bool = False,
    *,
    targets_from: str = "",
    palette: Palette | None = None,
) -> Path:
    """Plot one panel per metric against the round, one line per group (mean over seeds with a
    95% confidence band for groups with several), ``targets`` as dotted lines on the
    ``target_metric`` panel, and save it as a PNG at ``out`` (parent folders are created; an
    existing folder gets ``curves.png`` inside it; an existing file that is not a PNG is left alone
    unless ``force``). Returns the written path. See
    :func:`_make_figure` for the ranges, scales, colours (``palette``), drawing order and legend
    (``targets_from``).
    """
    out = Path(out)
    if out.is_dir():
        out = out / "curves.png"
    elif not out.suffix:
        out = out.with_suffix(".png")
    check_png_output(out, force)  # before any work
    runs = load_runs(paths_or_runs)
    fig = _make_figure(runs, metrics, title, targets=targets, target_metric=target_metric, targets_from=targets_from,
                       palette=palette)
    out.parent.mkdir(parents=True, exist_ok=True)
    return save_png(fig, out, dpi=120)
