"""Committed copies of finished runs, and fingerprints of the figures drawn from them.

A reproduction report (:mod:`fedaccel.reproductions.reproduce`) is drawn from run folders under ``runs/``, which
are not committed. So that a test can tell in seconds whether the committed report and figures are
what today's code draws, the data they are drawn from is committed beside them:

- :func:`pack` writes one experiment's run folders to one ``<experiment>.jsonl.xz``, a line per
  cell with its resolved config, metrics and diagnostics (a metrics row's ``diag`` is that round's
  diagnostics row, so it is stored once) and, for a run that diverged, the summary that says so (it
  counts as its whole budget); :func:`unpack` rebuilds run folders that read as the originals did.
- :func:`fingerprint` hashes what a figure shows — every artist's data and style (lines, images,
  texts, colours, widths, limits) — from the figure as built, without drawing it (drawing the
  ~100 figures of the reports takes minutes); :func:`pixels` hashes a PNG's decoded pixels (its
  bytes also carry metadata).
"""

from __future__ import annotations

import hashlib
import json
import lzma
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from fedaccel.errors import UserError
from fedaccel.runs.config import check_name
from fedaccel.runs.files import write_atomic

SUFFIX = ".jsonl.xz"
DIVERGED = ("finished", "rounds", "diverged", "diverged_round")  # what a diverged run's record keeps of its summary


# --------------------------------------------------------------------------------------------
# Runs <-> one compressed file per experiment
# --------------------------------------------------------------------------------------------


def pack(run_dirs: Sequence[str | Path], out: str | Path) -> bool:
    """Write the runs to ``out`` (one JSON line per run); returns False when ``out`` already held them."""
    from fedaccel.report.diagnostics import read_diagnostics
    from fedaccel.report.reading import load_run

    lines = []
    for run_dir in map(Path, run_dirs):
        run = load_run(run_dir)
        diagnostics = read_diagnostics(run_dir) if (run_dir / "diagnostics.jsonl").is_file() else None
        record: dict[str, Any] = {"cell": run_dir.name, "config": run.config, "diagnostics": diagnostics}
        if run.diverged_round is not None:  # counts as its whole budget, not its stop round
            record["summary"] = {k: run.summary[k] for k in DIVERGED if run.summary and k in run.summary}
        slim = [{k: v for k, v in row.items() if k != "diag"} for row in run.metrics]
        if _with_diag(slim, diagnostics) == run.metrics:
            record["metrics"] = slim
        else:  # not the runner's layout: keep the rows as they are
            record.update(metrics=run.metrics, metrics_verbatim=True)
        lines.append(json.dumps(record, ensure_ascii=False, allow_nan=True))
    text = ("\n".join(lines) + "\n").encode()
    out = Path(out)
    if out.is_file() and _read(out) == text:
        return False
    out.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(out, lzma.compress(text, preset=9))
    return True


def unpack(file: str | Path, into: str | Path) -> list[Path]:
    """Rebuild the run folders stored in ``file`` under ``into`` (one per cell, in stored order).

    ``into`` is scratch space (a temporary folder: the committed file is the durable copy), so the
    files are written plainly, not fsynced one by one: a report reads hundreds of runs."""
    run_dirs = []
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)  # libyaml's where PyYAML has it
    for line in _read(Path(file)).decode().splitlines():
        record = json.loads(line)
        cell = record.get("cell")
        if not isinstance(cell, str) or not cell:
            raise UserError(f"{file}: a record without a cell name; not a packed grid")
        check_name(cell, f"{file}: cell")  # a crafted '../x' would write outside ``into``
        run_dir = Path(into) / cell
        run_dir.mkdir(parents=True, exist_ok=True)
        diagnostics = record["diagnostics"]
        metrics = record["metrics"] if record.get("metrics_verbatim") else _with_diag(record["metrics"], diagnostics)
        config = yaml.dump(record["config"], Dumper=dumper, sort_keys=False, allow_unicode=True)
        (run_dir / "config.yaml").write_text(config, encoding="utf-8")
        (run_dir / "metrics.jsonl").write_text(_jsonl(metrics), encoding="utf-8")
        if diagnostics is not None:
            (run_dir / "diagnostics.jsonl").write_text(_jsonl(diagnostics), encoding="utf-8")
        if isinstance(record.get("summary"), dict):
            (run_dir / "summary.json").write_text(json.dumps(record["summary"]), encoding="utf-8")
        run_dirs.append(run_dir)
    return run_dirs


def _with_diag(metrics: list[dict], diagnostics: list[dict] | None) -> list[dict]:
    """Metrics rows with the runner's ``diag``: the round's diagnostics row, where there is one."""
    by_round = {row["round"]: {k: v for k, v in row.items() if k != "round"} for row in diagnostics or []}
    return [{**row, "diag": by_round[row["round"]]} if row.get("round") in by_round else row for row in metrics]


def _read(file: Path) -> bytes:
    try:
        return lzma.decompress(file.read_bytes())
    except lzma.LZMAError as e:
        raise UserError(f"{file}: not an xz file ({e})") from e


def _jsonl(rows: list[dict]) -> str:
    return "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)


# --------------------------------------------------------------------------------------------
# What a figure shows, and what a PNG shows
# --------------------------------------------------------------------------------------------

#: Getters read from every artist that has them: data, text and style, nothing needing a renderer.
_GETTERS = (
    "get_size_inches", "get_xlim", "get_ylim", "get_xscale", "get_yscale", "get_aspect",
    "get_text", "get_fontsize", "get_fontweight", "get_fontfamily", "get_horizontalalignment",
    "get_xydata", "get_array", "get_extent", "get_interpolation", "get_clim", "get_cmap", "get_paths",
    "get_color", "get_facecolor", "get_edgecolor", "get_linewidth", "get_linestyle",
    "get_marker", "get_markersize", "get_alpha", "get_label", "get_visible", "get_zorder",
)


def fingerprint(fig: Any) -> str:
    """A hash of what ``fig`` shows: for every artist (in tree order) its class and getter values.

    An axis counts by its label, locator, formatter and tick settings, not by tick objects (which
    matplotlib makes lazily, and which would cost most of the time here). Numbers count to about
    seven significant digits (float32), far below what a pixel shows, so that a last-bit difference
    in a mean does not make a figure new.
    """
    items: list[Any] = []
    _walk(fig, items)
    return hashlib.sha256(json.dumps(items, sort_keys=True).encode()).hexdigest()


def _walk(artist: Any, items: list[Any]) -> None:
    from matplotlib.axis import Axis

    values = {name: _canonical(getattr(artist, name)()) for name in _GETTERS if hasattr(artist, name)}
    items.append([type(artist).__name__, values])
    if isinstance(artist, Axis):
        for part in (artist.get_major_locator(), artist.get_major_formatter(),
                     artist.get_minor_locator(), artist.get_minor_formatter()):
            items.append([type(part).__name__, _canonical(_public_state(part))])
        items.append(["ticks", _canonical([artist._major_tick_kw, artist._minor_tick_kw])])
        children = [artist.label, artist.offsetText]
    else:
        children = artist.get_children()
    for child in children:
        _walk(child, items)


def _public_state(obj: Any) -> dict[str, Any]:
    """A locator's or formatter's settings (its attributes, without references back to the axis)."""
    return {k: v for k, v in sorted(vars(obj).items()) if k not in ("axis", "_axis", "offset", "orderOfMagnitude")}


def _canonical(value: Any) -> Any:
    if value is None or isinstance(value, (bool, str, int)):
        return value
    if isinstance(value, float):
        return float(f"{value:.7g}")
    if isinstance(value, np.ma.MaskedArray):
        return [_canonical(value.filled(0)), _canonical(np.ma.getmaskarray(value))]
    if isinstance(value, np.ndarray):
        if value.dtype.kind in "biuf":
            data = np.ascontiguousarray(value, dtype=np.float32)
            return [list(value.shape), hashlib.sha256(data.tobytes()).hexdigest()]
        return [list(value.shape), [_canonical(v) for v in value.ravel().tolist()]]
    if isinstance(value, np.generic):
        return _canonical(value.item())
    if isinstance(value, dict):
        return {str(k): _canonical(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    if hasattr(value, "vertices"):  # a matplotlib Path
        return [_canonical(value.vertices), _canonical(value.codes)]
    if hasattr(value, "bounds"):  # a Bbox
        return _canonical(tuple(value.bounds))
    if hasattr(value, "name"):  # a colormap
        return value.name
    return type(value).__name__


def pixels(png: str | Path) -> str:
    """A hash of a PNG's decoded RGBA pixels and size (not of its bytes, which carry metadata)."""
    from PIL import Image

    with Image.open(png) as image:
        rgba = image.convert("RGBA")
        return hashlib.sha256(repr(rgba.size).encode() + rgba.tobytes()).hexdigest()
