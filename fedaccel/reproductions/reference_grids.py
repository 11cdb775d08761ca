"""The reference-code grids (``experiments/reference/``): run them, keep their runs beside their verdicts,
and check that the committed verdicts are what those runs give (docs/reproductions/reference-code.md).

    python -m fedaccel.reproductions.reference_grids [-j N] [--only GRID ...]   # run, pack, judge
    python -m fedaccel.reproductions.reference_grids --check                    # re-judge the packed runs
    python -m fedaccel.reproductions.reference_grids --render                   # the page's tables, from the verdicts

Each grid's runs are packed as ``docs/reproductions/reference/data/<grid>.jsonl.xz`` (as the papers'
reports keep theirs) and its verdicts written as ``docs/reproductions/reference/<grid>.claims.json``,
exactly what ``fedaccel judge`` writes beside a grid's runs.
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Sequence
from pathlib import Path

from fedaccel.errors import UserError, listed, shown
from fedaccel.reproductions.reproduce import DOCS, ROOT

GRIDS = ROOT / "experiments" / "reference"
VERDICTS = DOCS / "reference"
DATA = VERDICTS / "data"
COMMAND = "python -m fedaccel.reproductions.reference_grids"
PAGE = DOCS / "reference-code.md"
ORDER = ("control_variates", "evaluated_model", "training_recipe", "fednova_tau_eff", "grab", "systems_heterogeneity",
         "defaults")  # the page's order: the differences as docs/algorithms/reference-code.md numbers them
BEGIN, END = "<!-- verdicts: written by `python -m fedaccel.reproductions.reference_grids` -->", "<!-- end of verdicts -->"


def grid_files(only: Sequence[str] = ()) -> list[Path]:
    """The reference grids' experiment files (those named in ``only``, if given)."""
    files = sorted(GRIDS.glob("*.yaml"))
    missing = sorted(set(only) - {f.stem for f in files})
    if missing:
        raise UserError(f"no reference grid {shown(missing[0])}; there are: "
                        f"{listed([f.stem for f in files], near=missing[0])}")
    return [f for f in files if not only or f.stem in only]


def verdicts_text(file: Path, folder: Path) -> str:
    """The ``claims.json`` text of the grid ``file`` judged on the runs in ``folder`` (complete grids only)."""
    from fedaccel.grids.experiment import experiment_cells
    from fedaccel.report.judge import claims_from_file, claims_json, gather, judge_grid

    claims, tuning, _ = claims_from_file(file)
    evidence = gather(folder, claims, str(file), experiment_cells(file))
    if any(evidence.depends):
        raise UserError(evidence.refusal())
    return claims_json(judge_grid(claims, evidence.runs, tuning))


def _num(x: float | None, fmt: str = ".3g", sign: str = "") -> str:
    return "-" if x is None else f"{x:{sign}{fmt}}"


def verdicts_section() -> str:
    """The page's tables of verdicts, one per grid, from the committed verdict files."""
    import json

    lines = [BEGIN, ""]
    for stem in sorted((f.stem for f in grid_files()), key=lambda s: (ORDER + (s,)).index(s)):
        file = VERDICTS / f"{stem}.claims.json"
        if not file.is_file():
            continue
        lines += [f"#### `{stem}`", "", "| claim | verdict | a − b [95% interval] | mean a / b | q | never reached a / b |",
                  "|---|---|---|---|---|---|"]
        for row in json.loads(file.read_text(encoding="utf-8")):
            low, high = row["interval"]
            effect = f"{row['estimand']} {_num(row['effect'], sign='+')} [{_num(low, sign='+')}, {_num(high, sign='+')}]"
            censored = " / ".join(map(str, row["censored"])) if row.get("target") is not None else ""
            lines.append(f"| {row['text']} | **{row['verdict']}** | {effect} | {_num(row['a_mean'], '.4g')} / "
                         f"{_num(row['b_mean'], '.4g')} | {_num(row['q'])} | {censored} |")
        lines.append("")
    return "\n".join(lines + [END])


def write_page_section() -> bool:
    """Write :func:`verdicts_section` into the page between its markers; False when it already held it."""
    from fedaccel.runs.files import write_atomic

    page = PAGE.read_text(encoding="utf-8")
    start, end = page.index(BEGIN), page.index(END) + len(END)
    new = page[:start] + verdicts_section() + page[end:]
    if new == page:
        return False
    write_atomic(PAGE, new)
    return True


def run(only: Sequence[str] = (), *, workers: int = 1, out_root: Path = Path("runs/reference")) -> list[Path]:
    """Run (or resume) the grids, pack their runs and write their verdicts; returns the verdict files."""
    from fedaccel.grids.experiment import load_experiment, run_experiment
    from fedaccel.reproductions.snapshot import SUFFIX, pack
    from fedaccel.runs.files import write_atomic

    written = []
    for file in grid_files(only):
        experiment = load_experiment(file)
        experiment.out_dir = out_root / file.stem
        result = run_experiment(experiment, workers=workers)
        pack(result.run_dirs, DATA / f"{file.stem}{SUFFIX}")
        out = VERDICTS / f"{file.stem}.claims.json"
        write_atomic(out, verdicts_text(file, experiment.out_dir))
        written.append(out)
    write_page_section()
    return written


def check(only: Sequence[str] = ()) -> list[str]:
    """One line per grid whose committed verdicts are not what its packed runs give, or that has no runs."""
    from fedaccel.reproductions.snapshot import SUFFIX, unpack

    problems = []
    for file in grid_files(only):
        data, committed = DATA / f"{file.stem}{SUFFIX}", VERDICTS / f"{file.stem}.claims.json"
        if not data.is_file() or not committed.is_file():
            problems.append(f"{file.stem}: no packed runs or no verdicts: run `{COMMAND} --only {file.stem}`")
            continue
        with tempfile.TemporaryDirectory() as tmp:
            unpack(data, Path(tmp) / file.stem)
            if verdicts_text(file, Path(tmp) / file.stem) != committed.read_text(encoding="utf-8"):
                problems.append(f"{file.stem}: {committed.name} is not what its packed runs give: run `{COMMAND} "
                                f"--only {file.stem}`")
    page = PAGE.read_text(encoding="utf-8")
    if BEGIN not in page or END not in page or verdicts_section() not in page:
        problems.append(f"{PAGE.name}: its tables of verdicts are not the verdict files': run `{COMMAND} --render`")
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", default=(), metavar="GRID", help="grid names (file stems)")
    parser.add_argument("-j", "--workers", type=int, default=1, metavar="N", help="cells run at once")
    parser.add_argument("--check", action="store_true", help="run nothing: re-judge the packed runs")
    parser.add_argument("--render", action="store_true", help="run nothing: the page's tables from the verdict files")
    args = parser.parse_args(argv)
    try:
        if args.render:
            print(f"{PAGE}: {'written' if write_page_section() else 'already up to date'}")
            return 0
        if args.check:
            problems = check(args.only)
            print("\n".join(problems) or "every reference verdict is what its packed runs give")
            return 1 if problems else 0
        for out in run(args.only, workers=args.workers):
            print(f"verdicts: {out}")
    except UserError as error:
        print(f"error: {error}")
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
