"""Reproductions of the papers' figures and tables, each by one command.

    fedaccel reproduce bherd                  # quick CPU scale: experiments/bherd/quick/*.yaml
    fedaccel reproduce bherd --scale paper    # paper scale (point data.root at MNIST / CIFAR-10)
    fedaccel reproduce bherd --only fig3_alpha
    fedaccel reproduce fedumf --workers 2     # two cells at a time (one per core)
    fedaccel reproduce fedumf --ray auto      # every cell a task on the Ray cluster (docs/runtimes.md: the recipe)
    fedaccel reproduce bherd --render-only    # report and figures again from the committed data

Every experiment file of the paper and scale is run (resumable: finished cells are skipped) and
its runs are packed into ``docs/reproductions/<paper>/data/<experiment>.jsonl.xz`` (see
:mod:`fedaccel.reproductions.snapshot`). The report ``docs/reproductions/<paper>.md`` (quick scale;
``<paper>-paper.md`` at paper scale), its curves, diagnostic plots and tables are then drawn from
that committed data alone, with every claim of the paper judged on paired seeds
(:mod:`fedaccel.report.claims`); the claims are rows of data in ``fedaccel/reproductions/<paper>.py``,
and their judgements are also written as ``docs/reproductions/<paper>.claims.json``.
``--only`` runs the experiments named and draws the others from their committed data.

An experiment file ``<experiment>_tuning.yaml`` holds *tuning runs* of ``<experiment>``: some of its cells
at other seeds (the paper's ``TUNING_SEEDS``), run only to choose the claims' best values. Its runs join
``<experiment>``'s for the claims that pick a best value (which never judge those seeds) and nowhere else:
not in the experiment's table or figures, and not in the claims at fixed values, so adding tuning seeds
changes no judged pair. The report lists each side's chosen value with the tuning seeds' figures.

Because the report is drawn from committed data, :func:`check` can tell in seconds whether the
committed report and figures are what the current code draws (the test suite runs it):
``data/figures.json`` keeps, per figure, the fingerprint of what it shows and the hash of its
pixels.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import json
import math
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from fedaccel.errors import ConfigError, UserError, listed, shown
from fedaccel.report.claims import seed_order
from fedaccel.runs.files import write_atomic

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs" / "reproductions"
MANIFEST = "figures.json"
SAY_EVERY_S = 5.0  # render's longest silence between two lines (a heartbeat fills the longer steps)
TUNING = "_tuning"  # <experiment>_tuning.yaml: tuning runs of <experiment> (see the module docstring)


@dataclass(frozen=True)
class Drawing:
    """One figure of a report: its file name, the function that draws it (``kind``), and how to
    build it (``build() -> Figure``, cheap, no pixels) or draw it into a PNG (``save(path)``)."""

    name: str
    kind: str
    build: Callable[[], Any]
    save: Callable[[Path], Path]


@dataclass(frozen=True)
class Report:
    """A report drawn from committed data: where it goes, its text and its figures."""

    path: Path
    figures: Path  # the folder of its figures, with data/ inside
    text: str
    drawings: list[Drawing]
    claims: str = ""  # the claims' judgements as JSON (``<paper>.claims.json``)

    @property
    def claims_path(self) -> Path:
        return self.path.with_suffix(".claims.json")

    @property
    def data(self) -> Path:
        return self.figures / "data"


def papers() -> list[str]:
    """The papers that can be reproduced: those with claims (``fedaccel/reproductions/<paper>.py``) and experiments."""
    here = Path(__file__).parent
    return sorted(p.name for p in (ROOT / "experiments").iterdir()
                  if p.is_dir() and (here / f"{p.name.replace('-', '_')}.py").is_file())


def experiment_files(paper: str, scale: str, only: Sequence[str] = ()) -> list[Path]:
    """The paper's experiment files at ``scale`` (checking that the paper is one and that every name in ``only`` exists)."""
    known = papers()
    if paper not in known:
        raise UserError(f"no paper {shown(paper)} to reproduce; papers: {listed(known, near=paper)}")
    folder = ROOT / "experiments" / paper / scale
    if not folder.is_dir():
        raise UserError(f"no experiments for {shown(paper)} at scale {shown(scale)} ({folder})")
    files = sorted(folder.glob("*.yaml"))
    missing = sorted(set(only) - {f.stem for f in files})
    if missing:
        raise UserError(f"no experiment {shown(missing[0])} in {folder}; there are: {listed([f.stem for f in files], near=missing[0])}")
    return files


def reproduce(
    paper: str,
    scale: str = "quick",
    *,
    only: Sequence[str] = (),
    out_root: Path = Path("runs/reproduce"),
    docs: Path = DOCS,
    progress: bool | None = None,
    workers: int = 1,
    ray: Any = None,
    render_only: bool = False,
) -> Path:
    """Run the paper's experiments at ``scale`` (those in ``only``, if given; none when
    ``render_only``), pack their runs beside the report, then draw the report and its figures from
    the packed data; returns the report path. ``workers`` and ``ray``
    (:class:`fedaccel.grids.ray_tasks.RayOptions`) as for :func:`run_experiment`."""
    from fedaccel.grids.experiment import CellsFailed, load_experiment, run_experiment
    from fedaccel.grids.progress import GridProgress, rounds_left
    from fedaccel.reproductions.snapshot import SUFFIX, pack

    data = _figures_folder(paper, scale, docs) / "data"
    experiments = []
    for file in [] if render_only else experiment_files(paper, scale, only):
        if only and file.stem not in only:
            continue  # drawn from its committed data
        experiment = load_experiment(file)
        experiment.out_dir = out_root / f"{paper}-{scale}" / file.stem
        experiments.append((file, experiment))
    todo = [(e.out_dir / name, config.train.rounds) for _, e in experiments for name, config in e.cells
            if not (e.out_dir / name / "summary.json").is_file()]
    report = GridProgress(len(todo), bars=False if progress is False else None,  # one bar over every experiment's cells
                          rounds=rounds_left(todo))
    failed: list[tuple[str, CellsFailed]] = []
    finished = []
    try:
        for index, (file, experiment) in enumerate(experiments, start=1):
            report.place = (index, len(experiments))
            try:
                finished.append((file, run_experiment(experiment, progress=progress, workers=workers, ray=ray,
                                                      report=report)))
            except CellsFailed as exc:  # its finished cells wait in its folder; the next experiment runs
                failed.append((file.stem, exc))
    except BaseException:  # a later stop (Ctrl-C, a full disk) says too which experiments had failed before it
        if failed:
            say_on_stderr(f"before this stop, {_experiments_failed(paper, scale, only, failed, experiments, out_root)}")
        raise
    finally:
        report.close()
    if failed:  # nothing packed: the committed data and report stay one set until every experiment finishes
        raise _experiments_failed(paper, scale, only, failed, experiments, out_root)
    for file, result in finished:
        pack(result.run_dirs, data / f"{file.stem}{SUFFIX}")
    return render(paper, scale, docs=docs, say=None if progress is False else say_on_stderr)


def _experiments_failed(paper: str, scale: str, only: Sequence[str], failed: Sequence[tuple[str, Any]],
                        experiments: Sequence[Any], out_root: Path) -> ExperimentsFailed:
    return ExperimentsFailed(_command(paper, scale) + (" --only " + " ".join(only) if only else ""), failed,
                             len(experiments), out_root / f"{paper}-{scale}")


class ExperimentsFailed(UserError):
    """Experiments of a reproduction with failed cells, after every experiment ran: nothing is packed and the
    report is not drawn (the committed data and report stay one set); the finished cells wait in ``runs``."""

    def __init__(self, command: str, failed: Sequence[tuple[str, Any]], total: int, runs: Path) -> None:
        named = "; ".join(f"{stem}: {len(exc.cells)} cell(s) ({', '.join(exc.cells[:3])}"
                          f"{' and more' if len(exc.cells) > 3 else ''})" for stem, exc in failed)
        super().__init__(f"{len(failed)} of {total} experiments had failed cells ({named}): each cell's line is "
                         f"above, its traceback in its folder's error.txt; nothing was packed and the report was not "
                         f"drawn (the finished cells are kept in {runs}); fix the cause and run `{command}` again: "
                         f"it keeps the finished cells, resumes these, then packs and draws")


def say_on_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def render(paper: str, scale: str = "quick", *, docs: Path = DOCS, say: Callable[[str], None] | None = None) -> Path:
    """Write the report, its figures and their manifest from the committed data; returns the report path.
    ``say(line)`` tells where it is: each experiment read, and the figures drawn every few seconds."""
    from fedaccel.runs.progress import Heartbeat

    if say is None:
        return _render(paper, scale, docs, None)
    with Heartbeat(say, lambda s: f"{paper} report: still working ({s:.0f} s in all)", every_s=SAY_EVERY_S) as beat:
        return _render(paper, scale, docs, beat.say, began=beat.began)


def _render(paper: str, scale: str, docs: Path, say: Callable[[str], None] | None, *,
            began: float | None = None) -> Path:
    """``began``: the heartbeat's start, which the figures' lines count from too (one clock in all lines)."""
    from fedaccel.reproductions.snapshot import fingerprint, pixels
    from fedaccel.runs.progress import RoundLines

    with tempfile.TemporaryDirectory() as tmp:
        report = draw_report(paper, scale, docs=docs, workdir=Path(tmp), say=say)
        if not report.data.is_dir():
            raise UserError(f"no data in {report.data}: run `{_command(paper, scale)}` first")
        manifest = {}
        if say is not None:
            say(f"{paper} report: drawing {len(report.drawings)} figures into {_shown(report.figures)}")
        drawn = RoundLines(len(report.drawings), 0, f"{paper} report", every_s=SAY_EVERY_S, unit="figure",
                           say=say or (lambda line: None), began=began)
        for drawing in report.drawings:
            png = drawing.save(report.figures / drawing.name)
            manifest[drawing.name] = {"fingerprint": fingerprint(drawing.build()), "pixels": pixels(png)}
            drawn.update(1)
    for stale in sorted(set(p.name for p in report.figures.glob("*.png")) - set(manifest)):
        (report.figures / stale).unlink()  # a figure of an earlier grid
    write_atomic(report.data / MANIFEST, json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    write_atomic(report.path, report.text)
    write_atomic(report.claims_path, report.claims)
    return report.path


def json_difference(committed: Any, now: Any, path: str = "$", rel: float = 1e-9) -> str | None:
    """Where two JSON documents first differ, or None; numbers agree within ``rel`` (Python 3.12's
    ``sum`` of floats is compensated and 3.11's is not: the last bits of a judged figure move between them)."""
    if isinstance(committed, dict) and isinstance(now, dict):
        if committed.keys() != now.keys():
            return f"{path} (keys {sorted(set(committed) ^ set(now))})"
        return next((d for k in committed if (d := json_difference(committed[k], now[k], f"{path}.{k}", rel))), None)
    if isinstance(committed, list) and isinstance(now, list):
        if len(committed) != len(now):
            return f"{path} (length {len(committed)} vs {len(now)})"
        return next((d for i, (a, b) in enumerate(zip(committed, now)) if (d := json_difference(a, b, f"{path}[{i}]", rel))),
                    None)
    numbers = (int, float)
    if (isinstance(committed, numbers) and isinstance(now, numbers) and not isinstance(committed, bool)
            and not isinstance(now, bool)):
        same = math.isclose(committed, now, rel_tol=rel, abs_tol=1e-300) or (math.isnan(committed) and math.isnan(now))
        return None if same else f"{path} ({committed!r} vs {now!r})"
    same = type(committed) is type(now) and committed == now
    return None if same else f"{path} ({committed!r} vs {now!r})"


def check(paper: str, scale: str = "quick", *, docs: Path = DOCS, redraw: bool = True) -> list[str]:
    """What differs between the committed report and figures and what the current code draws from
    the committed data (empty: nothing).

    The report's text is compared as a whole. A figure is compared by the fingerprint of what it
    shows and by the hash of its pixels, both against the manifest; with ``redraw``, the smallest
    figure of every kind (every drawing function) is also drawn and compared pixel by pixel, which
    catches what a fingerprint does not see (tick placement, resolution, matplotlib's own drawing).
    """
    from fedaccel.reproductions.snapshot import fingerprint, pixels

    with tempfile.TemporaryDirectory() as tmp:
        try:
            report = draw_report(paper, scale, docs=docs, workdir=Path(tmp) / "runs")
        except (UserError, ConfigError) as e:
            return [str(e)]
        problems = []
        if not report.path.is_file() or report.path.read_text() != report.text:
            committed = report.path.read_text().splitlines() if report.path.is_file() else []
            diff = difflib.unified_diff(committed, report.text.splitlines(), "committed", "drawn now", n=0, lineterm="")
            problems.append(f"{_shown(report.path)} differs from the report drawn now:\n" + "\n".join(list(diff)[:12]))
        where = (json_difference(json.loads(report.claims_path.read_text()), json.loads(report.claims))
                 if report.claims_path.is_file() else "(missing)")
        if where is not None:
            problems.append(f"{_shown(report.claims_path)} differs from the claims judged now at {where}")
        manifest_file = report.data / MANIFEST
        manifest = json.loads(manifest_file.read_text()) if manifest_file.is_file() else {}
        drawn = {d.name: d for d in report.drawings}
        for name in sorted({p.name for p in report.figures.glob("*.png")} - set(drawn)):
            problems.append(f"{name}: committed, but no longer drawn")
        smallest: dict[str, Path] = {}
        for name, drawing in drawn.items():
            png, entry = report.figures / name, manifest.get(name, {})
            if not png.is_file():
                problems.append(f"{name}: drawn now, but not committed")
            elif entry.get("fingerprint") != fingerprint(drawing.build()):
                problems.append(f"{name}: shows other data or style than the figure drawn now")
            elif entry.get("pixels") != pixels(png):
                problems.append(f"{name}: its pixels are not those of the figure drawn from the data")
            elif drawing.kind not in smallest or png.stat().st_size < smallest[drawing.kind].stat().st_size:
                smallest[drawing.kind] = png
        for png in smallest.values() if redraw else []:
            if pixels(drawn[png.name].save(Path(tmp) / png.name)) != pixels(png):
                problems.append(f"{png.name}: drawn now, its pixels differ (plot style or matplotlib changed)")
    return problems


def claims_module_of(paper: str, scale: str) -> Any:
    """The module of the paper's claims at ``scale``: ``fedaccel.reproductions.<paper>_<scale>`` where the scale
    has its own (targets sized for its rounds, its own seeds' history), else ``<paper>``'s."""
    name = f"fedaccel.reproductions.{paper.replace('-', '_')}"
    if scale != "quick" and importlib.util.find_spec(f"{name}_{scale}") is not None:
        name += f"_{scale}"
    return importlib.import_module(name)


def draw_report(paper: str, scale: str = "quick", *, docs: Path = DOCS, workdir: Path,
                say: Callable[[str], None] | None = None) -> Report:
    """The report's text and its figures (not drawn yet), from the committed data of every experiment
    of the paper (an experiment without data is "not run"); the runs are read in memory, and only those whose
    diagnostics are drawn are written to run folders in ``workdir``.
    ``say(line)``: a line as each experiment's data is read, and before its table and claims."""
    from fedaccel.grids.experiment import TABLE_TARGETS, load_experiment
    from fedaccel.report.claims import judge, judge_family
    from fedaccel.report.diagnostics import diagnostic_figures, save_figure
    from fedaccel.report.identity import check_distinct
    from fedaccel.report.tables import compare_table
    from fedaccel.reproductions.opening import render as render_opening
    from fedaccel.reproductions.snapshot import SUFFIX, read_packed, write_folder

    files = experiment_files(paper, scale)  # first: an unknown paper is one line, not an ImportError
    claims_module = claims_module_of(paper, scale)
    figures = _figures_folder(paper, scale, docs)
    say = say or (lambda line: None)
    sections, drawings, runs_by_experiment = [], [], {}
    for place, file in enumerate(files, start=1):
        data = figures / "data" / f"{file.stem}{SUFFIX}"
        if not data.is_file():
            continue  # never run: its claims say "not run"
        say(f"{paper} report: {file.stem} ({place}/{len(files)}): reading its runs from {_shown(data)}")
        experiment = load_experiment(file)
        runs = runs_by_experiment[file.stem] = read_packed(data, workdir / file.stem)
        _check_cells(experiment, runs, data, _command(paper, scale) + f" --only {file.stem}")
        check_distinct(runs)  # _check_cells saw each folder's config; a copied run keeps the config it was put beside
        if tuned_experiment(file.stem, [f.stem for f in files]):
            sections.append(_tuning_section(file, runs))
            continue
        say(f"{paper} report: {file.stem} ({place}/{len(files)}): its table of {len(runs)} runs")
        table = compare_table(runs, experiment.targets or TABLE_TARGETS, baseline=experiment.baseline)  # as run_experiment
        drawn = _curve_drawings(file.stem, experiment, runs)
        diagnosed = _diagnosed(experiment, runs)
        read = {r.path: r.diagnostics for r in diagnosed if r.diagnostics is not None}  # checked by read_packed
        for name, kind, build in diagnostic_figures([write_folder(r) for r in diagnosed], read):
            drawn.append(Drawing(f"{file.stem}-{name}.png", kind, build, lambda out, b=build: save_figure(b(), out)))
        drawings += drawn
        description = (file.read_text().splitlines() or [""])[0].lstrip("# ").strip()
        body = [f"## {file.stem}", "", description, "", f"`{file.relative_to(ROOT)}`", "", table, ""]
        body += [f"![{Path(d.name).stem}]({figures.name}/{d.name})" for d in drawn]
        sections.append("\n".join(body))

    tuning = getattr(claims_module, "TUNING_SEEDS", ())
    say(f"{paper} report: judging its {len(claims_module.CLAIMS)} claims")
    raised = getattr(claims_module, "RAISED", {})  # experiment -> its seeds raised after looks (claims.Raised)
    judgements = judge_family([judge(claim, claim_runs(claim, runs_by_experiment), tuning,
                                     raised.get(claim.experiment)) for claim in claims_module.CLAIMS])
    rows = [j.as_dict() for j in judgements]
    opening = getattr(claims_module, "OPENING", None)
    lines = [
        f"# Reproduction: {claims_module.TITLE} ({scale} scale)",
        "",
        "Generated by:",
        "",
        "```bash",
        _command(paper, scale),
        "```",
        "",
        f"It runs the report's experiments, then draws it (`-j N` or `--ray` run cells at once, `--only EXPERIMENT` "
        f"one experiment); with `--render-only` it redraws this page in minutes from the "
        f"{sum(map(len, runs_by_experiment.values())):,} runs committed in `{_shown(figures / 'data')}`, running none.",
        "",
        *([render_opening(opening, rows, {j.claim.measure.name: j.claim.measure.fmt for j in judgements}), ""]
          if opening is not None else []),
        claims_module.INTRO.strip(),
        "",
    ]
    lines += claims_section(judgements)
    lines += tuning_section(judgements)
    if scale != "quick":
        lines += against_quick(judgements, docs / f"{paper}.claims.json")
    lines += ["", *sections]
    report = docs / f"{figures.name}.md"
    claims = json.dumps(rows, indent=1, ensure_ascii=False) + "\n"
    return Report(report, figures, "\n".join(lines) + "\n", drawings, claims)


def plan(paper: str, scale: str = "quick", *, docs: Path = DOCS, power: float = 0.8, only: Sequence[str] = ()) -> str:
    """The committed data as a pilot: per claim (of the experiments in ``only``, if given), the seeds it needs for
    ``power`` (:func:`fedaccel.report.judge.plan_rows`), as a Markdown table."""
    from fedaccel.report.claims import judge
    from fedaccel.report.judge import plan_rows, plan_table
    from fedaccel.reproductions.snapshot import SUFFIX, read_packed

    files = experiment_files(paper, scale, only)  # first: an unknown paper or name is one line, not an ImportError
    claims_module = claims_module_of(paper, scale)
    figures = _figures_folder(paper, scale, docs)
    tuning = getattr(claims_module, "TUNING_SEEDS", ())
    with tempfile.TemporaryDirectory() as tmp:  # the runs' folders, never written: they are read in memory
        runs = {}
        for file in files:
            data = figures / "data" / f"{file.stem}{SUFFIX}"
            if data.is_file() and (not only or file.stem.removesuffix(TUNING) in only):
                runs[file.stem] = read_packed(data, Path(tmp) / file.stem)
        judged = [judge(c, claim_runs(c, runs), tuning) for c in claims_module.CLAIMS if c.experiment in runs
                  and (not only or c.experiment in only)]  # a tuning experiment's runs serve its experiment's claims
    return plan_table(plan_rows(judged, power), power)


def tuned_experiment(stem: str, stems: Sequence[str]) -> str:
    """The experiment whose tuning runs ``stem`` holds (``<experiment>_tuning`` beside ``<experiment>``), else ''."""
    main = stem.removesuffix(TUNING)
    return main if main != stem and main in stems else ""


def claim_runs(claim: Any, runs_by_experiment: Mapping[str, list[Any]]) -> list[Any] | None:
    """The runs ``claim`` is judged on: its experiment's, with its tuning runs when the claim picks a best
    value (:data:`TUNING`); None when the experiment was not run."""
    from fedaccel.report.claims import _tunes

    runs = runs_by_experiment.get(claim.experiment)
    if runs is None or not _tunes(claim):
        return runs
    return [*runs, *runs_by_experiment.get(claim.experiment + TUNING, [])]


def _tuning_section(file: Path, runs: Sequence[Any]) -> str:
    """A tuning experiment's section: what it is, no table or figures (its runs only choose best values)."""
    seeds = sorted({r.seed for r in runs}, key=seed_order)
    description = (file.read_text().splitlines() or [""])[0].lstrip("# ").strip()
    return "\n".join([f"## {file.stem}", "", description, "", f"`{file.relative_to(ROOT)}`", "",
                      f"{len(runs)} runs (seeds {', '.join(map(str, seeds))}), used only to choose the best values "
                      "listed under \"Best values, as chosen\"; no table or figures.", ""])


def tuning_section(judgements: Sequence[Any]) -> list[str]:
    """The value each claim side's BEST key got, with every candidate's mean selection measure over the tuning
    seeds (the chosen one in bold) and the value the first tuning seed alone would have chosen; one row per side."""
    from fedaccel.report.claims import BEST, describe

    rows, seen = [], set()
    for j in judgements:
        for key, figures in j.tuning.items():
            side = j.claim.b if key.startswith("b:") else j.claim.a
            setup = describe({k: v for k, v in side.items() if v != BEST}, None, {})
            if (j.claim.experiment, setup, key.removeprefix("b:")) in seen:
                continue
            seen.add((j.claim.experiment, setup, key.removeprefix("b:")))
            values = figures["values"]
            first = min(values, key=lambda v: v["by_seed"][0] if v["by_seed"][0] is not None else math.inf)
            shown_values = ", ".join(f"**{v['value']:g}: {v['mean']:.4g}**" if v["value"] == figures["chosen"]
                                     else f"{v['value']:g}: {v['mean']:.4g}" if v["mean"] is not None
                                     else f"{v['value']:g}: not finite" for v in values)
            rows.append(f"| {j.claim.experiment} | {setup} | {key.removeprefix('b:')} | {shown_values} | "
                        f"{', '.join(map(str, figures['seeds']))} | {first['value']:g} |")
    if not rows:
        return []
    measure = next(f["measure"] for j in judgements for f in j.tuning.values())
    return ["", "### Best values, as chosen", "",
            f"Each side's best value is the one with the lowest {measure}, averaged over the tuning seeds (never "
            "judged); the last column is the value the first tuning seed alone picks (what the report was tuned on "
            "before at least 3 tuning seeds were required).", "",
            "| experiment | setup | key | value: mean over the tuning seeds (chosen in bold) | tuning seeds | "
            "first seed alone |", "|---|---|---|---|---|---|", *rows]


def claims_section(judgements: Sequence[Any]) -> list[str]:
    """The report's table of claims: verdict, measured numbers, the paper's value; and a count."""
    from fedaccel.report.claims import numbers
    from fedaccel.report.statistics import ALPHA

    counts = {v: sum(j.verdict == v for j in judgements) for v in ("agrees", "disagrees", "inconclusive", "not run")}
    seeds = sorted({j.seeds for j in judgements if j.seeds})
    family = sum(j.in_family and not j.claim.added for j in judgements)
    later = sum(j.in_family and bool(j.claim.added) for j in judgements)
    tuning = sorted({s for j in judgements for s in j.tuning_seeds}, key=seed_order)
    lines = [
        "## Claims of the paper, judged",
        "",
        f"Each claim is judged on paired seeds ({', '.join(map(str, seeds)) or 'no'} pairs per claim): a against b "
        "on one measure by the exact paired sign-flip test of the mean per-seed difference a − b (with the 95% "
        "interval that test inverts to); a claim with a margin or a constant by the exact sign test of the median "
        "seed's difference (with its order-statistic interval), a 'no difference' claim deciding between inside and "
        f"outside ± the stated margin; Benjamini–Hochberg across the {family} claims committed before the runs (the "
        "family)" + (f", and separately across the {later} rows added after the runs had been seen (each says so)"
                     if later else "") + ": **agrees** "
        f"when q ≤ {ALPHA:g} and the evidence lies on the paper's side, **disagrees** when q ≤ {ALPHA:g} on the "
        "other side, **inconclusive** otherwise, with the smallest effect its test would detect with 80% power "
        "(docs/statistics.md). Rounds to a target are the interpolated crossing of the target, restricted to the "
        "budget (a run that never reaches it counts as its last round), and a rounds row is judged on those "
        "restricted differences; the training loss averaged over the rounds is a claim of its own. "
        + (f"Best learning rates are chosen on seeds {', '.join(map(str, tuning))} only, which those claims "
           "then leave out. " if tuning else "")
        + ", ".join(f"{n} {v}" for v, n in counts.items() if n) + ".",
        "",
        "| # | claim | measure | verdict | measured (a vs b; a − b with its 95% interval; exact p, BH q) | paper |",
        "|---|---|---|---|---|---|",
    ]
    for row, j in enumerate(judgements, start=1):
        c = j.claim
        lines.append(f"| {row} | {c.text} | {c.measure.name} | **{j.verdict}** | {numbers(j)} | {c.paper} |")
    return lines


def against_quick(judgements: Sequence[Any], quick_claims: Path) -> list[str]:
    """Which verdicts differ from the quick scale's (its committed claims.json): the rows judged at both scales,
    matched by claim and measure; a row this scale did not run is left out."""
    quick = ({(r["text"], r["measure"]): r["verdict"] for r in json.loads(quick_claims.read_text())}
             if quick_claims.is_file() else {})
    both = [(n, j, quick[j.claim.text, j.claim.measure.name]) for n, j in enumerate(judgements, start=1)
            if j.verdict != "not run" and quick.get((j.claim.text, j.claim.measure.name), "not run") != "not run"]
    moved = [(n, j, was) for n, j, was in both if j.verdict != was]
    lines = ["", "## Against the quick scale", "",
             f"{len(both)} rows were judged at both scales (the quick scale's verdicts: `{_shown(quick_claims)}`); "
             + (f"{len(moved)} of them have another verdict here:" if moved else "none has another verdict here.")]
    if moved:
        lines += ["", "| # | claim | measure | quick scale | this scale |", "|---|---|---|---|---|"]
        lines += [f"| {n} | {j.claim.text} | {j.claim.measure.name} | {was} | **{j.verdict}** |" for n, j, was in moved]
    return lines


def _curve_drawings(stem: str, experiment: Any, runs: list[Any]) -> list[Drawing]:
    """The experiment's curves: one figure, or one per value of its ``figures_by`` key (seed bands in each),
    each method in the colour it has in every figure of the grid (:func:`~fedaccel.grids.experiment.cell_palette`)."""
    from fedaccel.grids.experiment import cell_palette, short_value
    from fedaccel.report.figures import _make_figure, plot_curves
    from fedaccel.report.reading import value_at

    parts: list[tuple[str, str, list[Any]]] = [(f"{stem}.png", experiment.name, runs)]
    palette = cell_palette(experiment, runs)
    if experiment.figures_by:
        key, values = experiment.figures_by, []
        for run in runs:
            if value_at(run.config, key) not in values:
                values.append(value_at(run.config, key))
        short = key.split(".")[-1]
        parts = [(f"{stem}-{short}={short_value(v)}.png", f"{experiment.name} ({short} = {short_value(v)})",
                  [r for r in runs if value_at(r.config, key) == v]) for v in values]
        palette = cell_palette(experiment, runs, ignore=(key,))
    drawings = []
    for name, title, subset in parts:
        curves = (subset, experiment.metrics, title, experiment.targets)
        style = {"targets_from": "grid's targets", "palette": palette}
        drawings.append(Drawing(name, "curves", partial(_make_figure, *curves, **style),
                                lambda out, c=curves, st=style: plot_curves(c[0], out, metrics=c[1], title=c[2],
                                                                            targets=c[3], **st)))
    return drawings


def _diagnosed(experiment: Any, runs: list[Any]) -> list[Any]:
    """The runs whose diagnostics a report draws: the experiment's ``diagnostics`` cells, else the first seed's."""
    from fedaccel.report.claims import pick

    if experiment.diagnostics is not None:
        return pick(runs, experiment.diagnostics)
    seeds = [r.config.get("run", {}).get("seed", 0) for r in runs]
    return [r for r, s in zip(runs, seeds) if s == min(seeds, default=0)]


def _figures_folder(paper: str, scale: str, docs: Path) -> Path:
    return docs / (paper if scale == "quick" else f"{paper}-{scale}")


def _check_cells(experiment: Any, runs: list[Any], data: Path, rerun: str) -> None:
    """The committed runs are those of the experiment file's grid as it is now."""
    from fedaccel.grids.experiment import same_config

    if [run.path.name for run in runs] != [name for name, _ in experiment.cells]:
        raise UserError(f"{_shown(data)} holds other cells than the experiment's grid: run `{rerun}`")
    for run, (_, config) in zip(runs, experiment.cells):
        if not same_config(run.config, config):
            raise UserError(f"{_shown(data)}: cell {run.path.name} was run with another config: run `{rerun}`")


def _command(paper: str, scale: str) -> str:
    return f"fedaccel reproduce {paper}" + ("" if scale == "quick" else f" --scale {scale}")


def _shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)
