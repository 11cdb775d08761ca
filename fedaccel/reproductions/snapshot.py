"""Committed copies of finished runs, and fingerprints of the figures drawn from them.

A reproduction report (:mod:`fedaccel.reproductions.reproduce`) is drawn from run folders under ``runs/``, which
are not committed. So that a test can tell in seconds whether the committed report and figures are
what today's code draws, the data they are drawn from is committed beside them:

- :func:`pack` writes one experiment's run folders to one ``<experiment>.jsonl.xz``, a line per
  cell with its resolved config, metrics and diagnostics (a metrics row's ``diag`` is that round's
  diagnostics row, so it is stored once) and, for a run that diverged, the summary that says so (it
  counts as its whole budget); :func:`unpack` rebuilds run folders that read as the originals did, and
  :func:`read_packed` gives the runs those folders hold without writing them (what the reports read).
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
from typing import TYPE_CHECKING, Any

import numpy as np

from fedaccel.disk import open_regular
from fedaccel.errors import UserError, shown
from fedaccel.runs.config import PLUGINS_NOTE, check_name, dump_yaml, plugin_records
from fedaccel.runs.files import write_atomic
from fedaccel.runs.rows import check_diagnostics, check_no_gap, check_row, json_reason, parse_json, rounds_of

if TYPE_CHECKING:
    from fedaccel.report.reading import Run

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
        if run.plugins:  # its config.yaml's plugins line: what made the run travels with it
            record["plugins"] = run.plugins
        if run.diverged_round is not None:  # counts as its whole budget, not its stop round
            record["summary"] = ({k: run.summary[k] for k in DIVERGED if k in run.summary} if run.summary else
                                 {"diverged": True, "diverged_round": run.diverged_round})  # said by its rows alone
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

    The file may come from anyone (a pull request's reproduction data), so it is read within bounds before
    anything is written (:func:`read_packed`): a file that breaks one is one line, and ``into`` is left as it was."""
    runs = read_packed(file, into)
    for run in runs:
        write_folder(run)
    return [run.path for run in runs]


def read_packed(file: str | Path, into: str | Path) -> list[Run]:
    """The runs stored in ``file``, as :func:`~fedaccel.report.reading.load_run` reads the folders :func:`unpack`
    would write under ``into``, without writing them (a report reads hundreds of runs: the round trip through
    files took half its time). Each row is checked once, in :func:`read_records`, with the checks a folder's
    reader adds: rounds within ``train.rounds``, no evaluation round missing. A run keeps its diagnostics rows
    (:meth:`~fedaccel.report.reading.Run.diagnostics_rows`); ``run.path`` is the folder :func:`write_folder` writes."""
    from fedaccel.report.reading import Run, value_at

    runs = []
    for record in read_records(Path(file)):
        diagnostics, config = record["diagnostics"], record["config"]
        metrics = record["metrics"] if record.get("metrics_verbatim") else _with_diag(record["metrics"], diagnostics)
        check_no_gap(Path(file) / record["cell"] / "metrics", metrics, value_at(config, "eval.every"))
        runs.append(Run(path=Path(into) / record["cell"], config=config, metrics=metrics,
                        summary=record.get("summary"), packed=True, diagnostics=diagnostics,
                        plugins=record.get("plugins", {})))
    return runs


def write_folder(run: Run) -> Path:
    """Write ``run`` (from :func:`read_packed`) to its folder as the runner left it: ``config.yaml``,
    ``metrics.jsonl``, its ``diagnostics.jsonl`` and a diverged run's ``summary.json``. The folder is scratch
    space (a temporary folder: the committed file is the durable copy), so the files are written plainly, not
    fsynced one by one."""
    run.path.mkdir(parents=True, exist_ok=True)
    config = dump_yaml(run.config, sort_keys=False, allow_unicode=True)
    if run.plugins:
        config += f"{PLUGINS_NOTE}{json.dumps(run.plugins, sort_keys=True)}\n"
    (run.path / "config.yaml").write_text(config, encoding="utf-8")
    (run.path / "metrics.jsonl").write_text(_jsonl(run.metrics), encoding="utf-8")
    if run.diagnostics is not None:  # the runner writes one, empty where the algorithm has no diagnostics
        (run.path / "diagnostics.jsonl").write_text(_jsonl(run.diagnostics), encoding="utf-8")
    if isinstance(run.summary, dict):
        (run.path / "summary.json").write_text(json.dumps(run.summary), encoding="utf-8")
    return run.path


def read_records(file: Path) -> list[dict[str, Any]]:
    """The records of a packed file, every bound checked before a folder is made: at most :data:`MAX_UNPACKED`
    bytes once decompressed (counted while decompressing), at most the cell limit of a grid
    (:func:`~fedaccel.grids.experiment.cell_limit`) lines, each line JSON within the run files' bounds (depth,
    integer digits: :func:`~fedaccel.runs.rows.parse_json`), a record of the types :func:`pack` writes, its rows
    what the run folder's readers take (:func:`~fedaccel.runs.rows.check_row`). Each fault is one line."""
    from fedaccel.grids.experiment import cell_limit

    try:
        text = _read(file).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(f"{file}: not UTF-8 text once decompressed (byte {exc.start})") from None
    lines = [line for line in text.splitlines() if line.strip()]
    if len(lines) > (limit := cell_limit()):
        raise UserError(f"{file}: {len(lines):,} cells, more than {limit:,}: not unpacked (FEDACCEL_MAX_CELLS sets "
                        "another limit)")
    records, cells = [], set()
    for number, line in enumerate(lines, start=1):
        try:
            record = parse_json(line)
        except ValueError as exc:
            raise UserError(f"{file}: record {number}: not valid JSON within bounds ({json_reason(exc)})") from None
        fault = _record_fault(record) or (_LONE_SURROGATE if "\\u" in line and _lone_surrogate(record) else None)
        if fault:
            raise UserError(f"{file}: record {number}: {fault}; not a packed grid fedaccel wrote")
        check_name(record["cell"], f"{file}: cell")  # a crafted '../x' would write outside ``into``
        if record["cell"] in cells:
            raise UserError(f"{file}: record {number}: cell {record['cell']!r} again; not a packed grid fedaccel wrote")
        cells.add(record["cell"])
        where, last_round = file / record["cell"], rounds_of(record["config"])
        for name, rows in (("metrics", record["metrics"]), ("diagnostics", record["diagnostics"] or [])):
            at = where / name  # once per list: a path per row was a tenth of a report's reading
            for k, row in enumerate(rows):
                check_row(at, k + 1, row, rows[k - 1]["round"] if k else None, last_round)
                if name == "diagnostics":
                    check_diagnostics(at, row)
        records.append(record)
    return records


def _record_fault(record: Any) -> str | None:
    """What in ``record`` is not of the type :func:`pack` writes, or None."""
    if not isinstance(record, dict):
        return f"a {type(record).__name__}, not an object"
    if not isinstance(record.get("cell"), str) or not record["cell"]:
        return "no cell name"
    kinds = {"config": (dict,), "metrics": (list,), "diagnostics": (list, type(None))}
    for key, kind in kinds.items():
        if not isinstance(record.get(key, 0), kind):
            return f"{key} is {shown(record.get(key, 'missing'), 40)}, not a {kind[0].__name__}"
    if not isinstance(record.get("summary", {}), dict) or not isinstance(record.get("metrics_verbatim", False), bool):
        return "summary or metrics_verbatim of the wrong type"
    if not plugin_records(record.get("plugins", {})):
        return "plugins of the wrong form (kind: {name, distribution, version, entry_point, sha256})"
    return None


_LONE_SURROGATE = "a string holds a lone surrogate (\\ud800-\\udfff), which no UTF-8 file can hold"


def _lone_surrogate(record: Any) -> bool:
    """Whether a string of ``record`` holds a lone surrogate (a JSON escape such as ``\\ud800`` gives one): its
    run folder could not be written (only records with a ``\\u`` escape are asked, the others cannot)."""
    try:
        json.dumps(record, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _with_diag(metrics: list[dict], diagnostics: list[dict] | None) -> list[dict]:
    """Metrics rows with the runner's ``diag``: the round's diagnostics row, where there is one."""
    by_round = {row["round"]: {k: v for k, v in row.items() if k != "round"} for row in diagnostics or []}
    return [{**row, "diag": by_round[row["round"]]} if row.get("round") in by_round else row for row in metrics]


MAX_UNPACKED = 256 << 20  # bytes a packed grid may decompress to (the largest committed one: 35 MB)
LZMA_MEMORY = 256 << 20  # bytes the decompressor may take (xz -9 takes 65 MB; a crafted header asks for more)
CHUNK = 1 << 20


def _read(file: Path) -> bytes:
    """The decompressed bytes of the xz file ``file`` (a plain file: :func:`fedaccel.disk.open_regular`), counted
    while they are decompressed: past :data:`MAX_UNPACKED` bytes it is one line, before more is allocated (a
    386 kB file decompressed to 2 GB)."""
    decompressor = lzma.LZMADecompressor(memlimit=LZMA_MEMORY)
    parts, total = [], 0
    try:
        with open_regular(file) as compressed:
            while not decompressor.eof:
                data = compressed.read(CHUNK) if decompressor.needs_input else b""
                if decompressor.needs_input and not data:
                    raise UserError(f"{file}: an xz file cut short")
                part = decompressor.decompress(data, max_length=CHUNK)
                total += len(part)
                if total > MAX_UNPACKED:
                    raise UserError(f"{file} decompresses to more than {MAX_UNPACKED:,} bytes: not unpacked (a "
                                    "packed grid fedaccel writes is far smaller)")
                parts.append(part)
    except lzma.LZMAError as e:
        raise UserError(f"{file}: not an xz file ({e})") from None
    except OSError as e:
        raise UserError(f"{file} cannot be read: {e.strerror or e}") from None
    return b"".join(parts)


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
