"""Plots of the algorithms' own diagnostics, read from a run's ``diagnostics.jsonl``.

Each line is ``{"round": t, "clients": {"<id>": {...per-client values...}}, ...server values...}``.
What gets drawn depends on what the run recorded:

- ``selected`` (BHerd, GraB): a heat map rounds x local step index, one panel per client
  (BHerd paper, Fig. 4);
- ``distance`` (BHerd): ‖g_i/(α τ_i) − μ_i‖ per client over rounds;
- ``gsnr`` / ``n`` / ``steps`` (FedGSNR, per client, keyed by client id) and ``entropy``
  (one value per round) as curves.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from fedaccel.disk import save_png
from fedaccel.errors import UserError, check_png_output
from fedaccel.runs.config import read_yaml
from fedaccel.report.reading import read_diagnostics

Rows = Mapping[Path, list[dict[str, Any]]]  # runs' diagnostics rows by run folder, already read

PER_CLIENT_KEYS = {
    "distance": "‖g/(ατ) − μ‖",
    "gsnr": "GSNR r_k",
    "n": "optimal local updates n_k",
    "steps": "local steps E_k",
}


SCALAR_KEYS = {  # per-round server diagnostics drawn over the rounds, one line per run
    "entropy": "entropy of the local-step distribution",
    "steps_cv": "spread of the local steps E_k (coefficient of variation)",
    "estimate_error": "relative error of the uploaded estimate of the local update",
}


def per_client(rows: list[dict[str, Any]], key: str) -> dict[str, tuple[list[int], list[Any]]]:
    """client id -> (rounds, values) for ``key``, from ``clients.<id>.<key>`` or ``<key>.<id>``."""
    out: dict[str, tuple[list[int], list[Any]]] = {}
    for row in rows:
        found: dict[str, Any] = {}
        for client, values in (row.get("clients") or {}).items():
            if key in values:
                found[client] = values[key]
        if isinstance(row.get(key), dict):
            found.update(row[key])
        for client, value in found.items():
            rounds, values_ = out.setdefault(str(client), ([], []))
            rounds.append(row["round"])
            values_.append(value)
    return dict(sorted(out.items(), key=lambda kv: (0, int(kv[0]), "") if kv[0].isdigit() else (1, 0, kv[0])))


def _figure(panels: int, width: float = 4.0, height: float = 3.2) -> tuple[Any, Any]:
    from matplotlib.figure import Figure

    cols = min(panels, 5)
    rows = int(np.ceil(panels / cols))
    fig = Figure(figsize=(width * cols, height * rows), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    for ax in axes[panels:]:
        ax.set_visible(False)
    return fig, axes


DPI = 110  # of every diagnostic plot's PNG


def save_figure(fig: Any, out: str | Path, force: bool = False) -> Path:
    """Draw ``fig`` into a PNG at ``out`` (parent folders are created; an existing file that is
    not a PNG is left alone unless ``force``)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    out = Path(out)
    check_png_output(out, force)
    out.parent.mkdir(parents=True, exist_ok=True)
    FigureCanvasAgg(fig)
    return save_png(fig, out, dpi=DPI)


MAX_IMAGE = 20_000_000  # cells of a selection heat map (80 MB): a run of 20,000 rounds of 1,000 steps


NO_STEP = 0.25  # a heat-map cell with no step: a round the client did not train, a step beyond that round's tau


def selection_image(rounds: list[int], chosen: list[list[int]], taus: list[int | None] | None) -> np.ndarray:
    """Rows: rounds from the first to the last; columns: step indices up to the largest tau (without
    tau, as recorded by older runs: up to the last selected step). A cell is 1 where the step was selected, 0 where
    it was taken and not selected, :data:`NO_STEP` where there was no step: a round the client did not train, a step
    beyond that round's tau (``taus``: per round of ``rounds``, as FedGSNR plans it; None where not recorded)."""
    taus = taus or [None] * len(rounds)
    width = max([1, *(t for t in taus if t), *(max(c) + 1 for c in chosen if c)])  # a step beyond tau widens it
    height = rounds[-1] - rounds[0] + 1
    if height * width > MAX_IMAGE:
        raise UserError(f"the heat map of selected steps would be {height:,} rounds x {width:,} steps, more than "
                        f"{MAX_IMAGE:,} cells: the run is too long to draw, or its diagnostics.jsonl was damaged")
    image = np.full((height, width), NO_STEP, dtype=np.float32)
    for round_, steps, tau in zip(rounds, chosen, taus):
        image[round_ - rounds[0], :width if tau is None else tau] = 0.0  # tau 0: no step at all
        image[round_ - rounds[0], steps] = 1.0
    return image


MAX_SELECTION_PANELS = 20  # clients drawn in a selection heat map: 1,000 panels would be one unreadable, slow figure


def selection_figure(run_dir: str | Path, title: str = "", *, rows: Rows | None = None) -> Any:
    """Heat map of selected local steps: rounds (y) x step index (x), one panel per client (the first
    :data:`MAX_SELECTION_PANELS` clients of a run with more, as its title says); black a selected step, white one
    not selected, light grey no step (a round not trained, a step past that round's tau), as the legend below says.
    ``rows``: the run's diagnostics rows, already read (:func:`diagnostic_figures`), by folder."""
    from matplotlib import colormaps
    from matplotlib.patches import Patch

    diagnostics = _rows(run_dir, rows)
    selected = per_client(diagnostics, "selected")
    if not selected:
        raise UserError(f"{run_dir}: no 'selected' steps recorded (not a BHerd/GraB run)")
    taus = per_client(diagnostics, "tau")
    shown_clients = list(selected.items())[:MAX_SELECTION_PANELS]
    fig, axes = _figure(len(shown_clients), height=3.6)
    no_step = False
    for ax, (client, (rounds, chosen)) in zip(axes, shown_clients):
        tau_of = dict(zip(*taus[client])) if client in taus else {}
        image = selection_image(rounds, chosen, [tau_of.get(r) for r in rounds])
        no_step |= bool((image == NO_STEP).any())
        width = image.shape[1]
        ax.imshow(image, aspect="auto", interpolation="nearest", cmap="Greys", vmin=0.0, vmax=1.0,  # 1 black
                  extent=(-0.5, width - 0.5, rounds[-1] + 0.5, rounds[0] - 0.5))  # (a panel all 1 too: alpha = 1)
        ax.set_title(f"client {client}")
        ax.set_xlabel("local step index")
        ax.set_ylabel("round")
    some = (f": the first {len(shown_clients)} of {len(selected):,} clients that trained"
            if len(shown_clients) < len(selected) else "")
    fig.suptitle((title or f"selected local gradients ({Path(run_dir).name})") + some)
    handles = [Patch(facecolor="black", edgecolor="0.4", label="selected"),
               Patch(facecolor="white", edgecolor="0.4", label="not selected")]
    if no_step:  # a round not trained, or a shorter one (FedGSNR's plan): not a step BHerd left out
        handles.append(Patch(facecolor=colormaps["Greys"](NO_STEP), edgecolor="0.4",
                             label="no step (not trained, or past τ)"))
    fig.legend(handles=handles, loc="outside lower center", ncols=len(handles), frameon=False, fontsize="small")
    return fig


def per_client_figure(run_dirs: list[str | Path], key: str, title: str = "", *, rows: Rows | None = None) -> Any:
    """One panel per run: ``key`` per client over rounds (distance, gsnr, n, steps)."""
    fig, axes = _figure(len(run_dirs))
    for ax, run_dir in zip(axes, run_dirs):
        series = per_client(_rows(run_dir, rows), key)
        if not series:
            raise UserError(f"{run_dir}: no per-client '{key}' recorded")
        for client, (rounds, values) in series.items():
            ax.plot(rounds, values, label=f"client {client}", lw=1.2)
        ax.set_title(Path(run_dir).name, fontsize=9)
        ax.set_xlabel("round")
        ax.set_ylabel(PER_CLIENT_KEYS.get(key, key))
        if len(series) <= 10:
            ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    fig.suptitle(title or PER_CLIENT_KEYS.get(key, key))
    return fig


LINE_STYLES = ("-", "--", ":", "-.")


def scalar_figure(run_dirs: list[str | Path], key: str, title: str = "", *, rows: Rows | None = None) -> Any:
    """A per-round server diagnostic (e.g. the entropy of the local-step distribution)."""
    from fedaccel.report.figures import grid_palette, legend_labels
    from fedaccel.report.reading import Run

    fig, axes = _figure(1, width=6.0, height=4.0)
    ax = axes[0]
    configs = [_config(run_dir) for run_dir in run_dirs]
    palette = grid_palette(configs)  # each method in its colour (fedaccel.report.colors)
    runs = [Run(Path(run_dir), config, []) for run_dir, config in zip(run_dirs, configs)]
    labels = legend_labels([(run.label, [run]) for run in runs], limit=64)  # the method's name, then what differs
    for k, (run_dir, config, label) in enumerate(zip(run_dirs, configs, labels)):
        recorded = [r for r in _rows(run_dir, rows) if isinstance(r.get(key), (int, float))]
        if not recorded:
            raise UserError(f"{run_dir}: no '{key}' recorded")
        ax.plot([r["round"] for r in recorded], [r[key] for r in recorded], label=label, color=palette.color(config),
                linestyle=LINE_STYLES[k % len(LINE_STYLES)])  # two setups of one method: one colour, two patterns
    ax.set_xlabel("round")
    ax.set_ylabel(key)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.suptitle(title or key)
    return fig


def _config(run_dir: str | Path) -> dict[str, Any]:
    """A run folder's config (``{}`` where it has none readable: the line is drawn in a fallback colour)."""
    try:
        config = read_yaml(Path(run_dir) / "config.yaml")
    except (UserError, OSError):
        return {}
    return config if isinstance(config, dict) else {}


def plot_selection(run_dir: str | Path, out: str | Path, title: str = "") -> Path:
    """:func:`selection_figure` saved as a PNG at ``out``."""
    return save_figure(selection_figure(run_dir, title), out)


def plot_per_client(run_dirs: list[str | Path], key: str, out: str | Path, title: str = "") -> Path:
    """:func:`per_client_figure` saved as a PNG at ``out``."""
    return save_figure(per_client_figure(run_dirs, key, title), out)


def plot_scalar(run_dirs: list[str | Path], key: str, out: str | Path, title: str = "") -> Path:
    """:func:`scalar_figure` saved as a PNG at ``out``."""
    return save_figure(scalar_figure(run_dirs, key, title), out)


def diagnostic_figures(run_dirs: list[str | Path], rows: Rows | None = None) -> list[tuple[str, str, Callable[[], Any]]]:
    """Every diagnostic plot that applies to the given runs, not drawn yet: (name, kind, build),
    where ``build()`` returns the figure and ``kind`` names the function that draws it. Each run's diagnostics
    are read once, here (``rows``: those of some folders, already read and checked, e.g. from a packed grid)."""
    with_diag = [Path(r) for r in run_dirs if (Path(r) / "diagnostics.jsonl").exists()]  # a folder there: one line
    read = {r: _rows(r, rows) for r in with_diag}
    figures: list[tuple[str, str, Callable[[], Any]]] = []
    for run_dir in with_diag:
        if per_client(read[run_dir], "selected"):
            figures.append((f"selection-{run_dir.name}", "selection",
                            partial(selection_figure, run_dir, rows={run_dir: read[run_dir]})))
    for key in PER_CLIENT_KEYS:
        runs = [r for r in with_diag if per_client(read[r], key)]
        if runs:
            figures.append((key, "per-client", partial(per_client_figure, runs, key, rows=read)))
    for key, title in SCALAR_KEYS.items():
        runs = [r for r in with_diag if any(isinstance(x.get(key), (int, float)) for x in read[r])]
        if runs:
            figures.append((key.replace("_", "-") if key != "entropy" else key, "scalar",
                            partial(scalar_figure, runs, key, title, rows=read)))
    return figures


def _rows(run_dir: str | Path, rows: Rows | None) -> list[dict[str, Any]]:
    """The diagnostics rows of ``run_dir``: those given in ``rows``, else its folder's (:func:`read_diagnostics`)."""
    given = None if rows is None else rows.get(Path(run_dir))
    return read_diagnostics(run_dir) if given is None else given


def draw_diagnostics(
    figures: list[tuple[str, str, Callable[[], Any]]], out_prefix: str | Path, force: bool = False
) -> list[Path]:
    """:func:`diagnostic_figures`' figures drawn as ``<out_prefix>-<name>.png``; returns the files."""
    for name, _, _ in figures:  # every name checked before the first is written
        check_png_output(f"{out_prefix}-{name}.png", force)
    return [save_figure(build(), f"{out_prefix}-{name}.png", force) for name, _, build in figures]


def contribution_ranking(run_dir: str | Path, key: str = "gsnr") -> list[tuple[str, float, int]] | None:
    """Clients ranked by their median ``key`` (GSNR: the FedGSNR contribution score), best first.

    The median, not the mean: one round where a client's GSNR hits the numerical cap would
    otherwise decide its place. Returns (client, median score, rounds scored), or None when the
    run recorded no such score.
    """
    if not (Path(run_dir) / "diagnostics.jsonl").is_file():
        return None
    series = per_client(read_diagnostics(run_dir), key)
    if not series:
        return None
    ranking = [(c, float(np.median(v)), len(v)) for c, (_, v) in series.items()]
    return sorted(ranking, key=lambda item: -item[1])
