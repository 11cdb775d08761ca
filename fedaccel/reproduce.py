"""Reproductions of the papers' figures and tables, each by one command.

    fedaccel reproduce bherd                  # quick CPU scale: experiments/bherd/quick/*.yaml
    fedaccel reproduce bherd --scale paper    # paper scale (point data.root at MNIST / CIFAR-10)
    fedaccel reproduce bherd --only fig3_alpha
    fedaccel reproduce fedumf --workers 2     # two cells at a time (one per core)
    fedaccel reproduce fedumf --ray auto      # every cell a task on the Ray cluster (README: the recipe)

Every experiment file of the paper and scale is run (resumable: finished cells are skipped),
its curves, diagnostic plots and table are copied next to the report, and
``docs/reproductions/<paper>.md`` (quick scale; ``<paper>-paper.md`` at paper scale) is written
with every claim of the paper checked against the measured numbers. The claims live in
``fedaccel/reproductions/<paper>.py`` as small functions over the runs.
"""

from __future__ import annotations

import importlib
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedaccel.errors import UserError

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Claim:
    """A sentence of the paper and how to check it on one experiment's runs.

    ``check(runs)`` returns (agrees: True/False/None for "cannot tell", the measured numbers).
    """

    text: str
    experiment: str
    check: Callable[[list], tuple[bool | None, str]]


def experiment_files(paper: str, scale: str, only: Sequence[str] = ()) -> list[Path]:
    """The paper's experiment files at ``scale`` (checking that every name in ``only`` exists)."""
    folder = ROOT / "experiments" / paper / scale
    if not folder.is_dir():
        known = sorted(p.name for p in (ROOT / "experiments").iterdir() if p.is_dir())
        raise UserError(f"no experiments for {paper!r} at scale {scale!r} ({folder}); papers: {', '.join(known)}")
    files = sorted(folder.glob("*.yaml"))
    missing = sorted(set(only) - {f.stem for f in files})
    if missing:
        raise UserError(f"no experiment {missing[0]!r} in {folder}; there are: {', '.join(f.stem for f in files)}")
    return files


def _finished(experiment: Any) -> bool:
    return all((experiment.out_dir / name / "summary.json").is_file() for name, _ in experiment.cells)


def reproduce(
    paper: str,
    scale: str = "quick",
    *,
    only: Sequence[str] = (),
    out_root: Path = Path("runs/reproduce"),
    docs: Path = ROOT / "docs" / "reproductions",
    progress: bool | None = None,
    workers: int = 1,
    ray: Any = None,
) -> Path:
    """Run the paper's experiments at ``scale`` and write its report; returns the report path.
    ``workers`` and ``ray`` (:class:`fedaccel.ray_grid.RayOptions`) as for :func:`run_experiment`."""
    from fedaccel.diagnostic_plots import plot_all_diagnostics
    from fedaccel.experiment import load_experiment, run_experiment
    from fedaccel.grid_progress import GridProgress
    from fedaccel.results import load_runs

    claims_module = importlib.import_module(f"fedaccel.reproductions.{paper.replace('-', '_')}")
    suffix = "" if scale == "quick" else f"-{scale}"
    figures = docs / f"{paper}{suffix}"
    figures.mkdir(parents=True, exist_ok=True)
    sections, runs_by_experiment = [], {}
    experiments = []
    for file in experiment_files(paper, scale, only):
        experiment = load_experiment(file)
        experiment.out_dir = out_root / f"{paper}-{scale}" / file.stem
        if only and file.stem not in only and not _finished(experiment):
            continue  # not asked for and not run before: its claims say "not run"
        experiments.append((file, experiment))
    todo = sum(not (e.out_dir / name / "summary.json").is_file() for _, e in experiments for name, _ in e.cells)
    report = GridProgress(todo, bars=False if progress is False else None)  # one bar over every experiment's cells
    for index, (file, experiment) in enumerate(experiments, start=1):
        report.place = (index, len(experiments))
        try:
            result = run_experiment(experiment, progress=progress, workers=workers, ray=ray, report=report)
        except BaseException:
            report.close()
            raise
        runs_by_experiment[file.stem] = load_runs(result.run_dirs)
        images = [shutil.copy(result.plot, figures / f"{file.stem}.png")]
        for extra in plot_all_diagnostics(result.run_dirs, result.out_dir / "diag"):
            images.append(shutil.copy(extra, figures / f"{file.stem}-{extra.name.removeprefix('diag-')}"))
        description = (file.read_text().splitlines() or [""])[0].lstrip("# ").strip()
        body = [f"## {file.stem}", "", description, "", f"`{file.relative_to(ROOT)}`", "", result.table, ""]
        body += [f"![{Path(i).stem}]({Path(i).relative_to(docs)})" for i in images]
        sections.append("\n".join(body))

    report.close()
    lines = [
        f"# Reproduction: {claims_module.TITLE} ({scale} scale)",
        "",
        "Generated by:",
        "",
        "```bash",
        f"fedaccel reproduce {paper}" + ("" if scale == "quick" else f" --scale {scale}"),
        "```",
        "",
        claims_module.INTRO.strip(),
        "",
        "## Claims of the paper, checked",
        "",
        "| claim | our run | numbers |",
        "|---|---|---|",
    ]
    for claim in claims_module.CLAIMS:
        runs = runs_by_experiment.get(claim.experiment)
        if runs is None:
            verdict, numbers = None, f"experiment {claim.experiment} not run"
        else:
            verdict, numbers = claim.check(runs)
        word = {True: "agrees", False: "disagrees", None: "cannot tell"}[verdict]
        lines.append(f"| {claim.text} | **{word}** | {numbers} |")
    lines += ["", *sections]
    report = docs / f"{paper}{suffix}.md"
    report.write_text("\n".join(lines) + "\n")
    return report
