"""Reproductions: every claims module points at experiment files that exist, every experiment file
loads (which validates every cell's config)."""

from __future__ import annotations

import importlib
import json
import lzma
import pkgutil
from pathlib import Path

import pytest

from fedaccel import reproductions
from fedaccel.experiment import load_experiment
from fedaccel.reproduce import Claim
from fedaccel.results import Run, compare_table

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENTS = ROOT / "experiments"
MODULES = sorted(m.name for m in pkgutil.iter_modules(reproductions.__path__))
EXPERIMENT_FILES = sorted(EXPERIMENTS.rglob("*.yaml"))


def _paper_folder(module: str) -> Path:
    """experiments/<paper>/ for the claims module fedaccel.reproductions.<paper, '-' as '_'>."""
    for name in (module, module.replace("_", "-")):
        if (EXPERIMENTS / name).is_dir():
            return EXPERIMENTS / name
    return EXPERIMENTS / module


def test_there_is_something_to_check() -> None:
    assert MODULES and EXPERIMENT_FILES


@pytest.mark.parametrize("module_name", MODULES)
def test_claims_refer_to_quick_experiment_files(module_name: str) -> None:
    module = importlib.import_module(f"fedaccel.reproductions.{module_name}")
    assert isinstance(module.TITLE, str) and module.TITLE.strip()
    assert isinstance(module.INTRO, str) and module.INTRO.strip()
    assert module.CLAIMS, f"{module_name}: no claims"
    folder = _paper_folder(module_name)
    quick = {p.stem for p in (folder / "quick").glob("*.yaml")}
    paper = {p.stem for p in (folder / "paper").glob("*.yaml")}
    assert quick, f"{module_name}: no quick-scale experiments in {folder / 'quick'}"
    # A claim names a quick-scale experiment, or one that exists at paper scale only (e.g. a
    # CIFAR-only table): then the quick report says "not run" for it. Anything else is a typo.
    missing = sorted({c.experiment for c in module.CLAIMS} - quick - paper)
    assert not missing, f"{module_name}: claims name experiments with no file in {folder}/quick or /paper: {missing}"
    for claim in module.CLAIMS:
        assert isinstance(claim, Claim) and claim.text.strip() and callable(claim.check)
        verdict, numbers = claim.check([])  # no runs: "cannot tell" (or a verdict), never a crash
        assert verdict in (True, False, None) and isinstance(numbers, str), claim.text


@pytest.mark.parametrize("path", EXPERIMENT_FILES, ids=lambda p: str(p.relative_to(EXPERIMENTS)))
def test_experiment_file_loads(path: Path) -> None:
    experiment = load_experiment(path)
    assert experiment.cells
    names = [name for name, _ in experiment.cells]
    assert len(set(names)) == len(names), "two cells would share one run folder"
    first = path.read_text().splitlines()[0]
    assert first.startswith("# ") and first[2:].strip(), "the first line is the report's description"
    # the table's baseline names groups of this grid (checked on runs made from the cells' configs)
    runs = [Run(path=Path(name), config=config.to_dict(), metrics=[{"round": 1, "test_acc": 0.5}])
            for name, config in experiment.cells]
    table = compare_table(runs, experiment.targets or [0.5], baseline=experiment.baseline)
    assert "(baseline)" in table


# --- the committed reports are what the code draws from their committed data --------------------

DOCS = ROOT / "docs" / "reproductions"
REPORTS = sorted(p.stem for p in DOCS.glob("*.md"))


def test_every_committed_report_has_its_data() -> None:
    assert REPORTS
    for paper in REPORTS:
        assert (DOCS / paper / "data" / "figures.json").is_file(), f"{paper}.md has no data: run `fedaccel reproduce`"


@pytest.mark.parametrize("report", REPORTS)
def test_committed_report_and_figures_are_what_the_code_draws(report: str) -> None:
    from fedaccel.reproduce import check

    paper, _, scale = report.partition("-")
    command = f"fedaccel reproduce {paper}" + (f" --scale {scale}" if scale else "")
    problems = check(paper, scale or "quick")
    assert not problems, (
        f"docs/reproductions/{report}.md or its figures are not what the current code draws from the committed data "
        f"(docs/reproductions/{report}/data):\n  " + "\n  ".join(problems) + "\n"
        f"Changed the plots, the report or the claims on purpose? Run `{command} --render-only` and commit what "
        f"it writes. Changed an experiment? Run `{command} --only <experiment>`."
    )


def test_check_names_every_stale_part(tmp_path: Path) -> None:
    import shutil

    from fedaccel.reproduce import check

    docs = tmp_path / "docs"
    shutil.copytree(DOCS / "fedumf", docs / "fedumf")
    figures = docs / "fedumf"
    report = (DOCS / "fedumf.md").read_text()
    (docs / "fedumf.md").write_text(report.replace("**agrees**", "**disagrees**", 1))
    (figures / "table1_iid.png").write_bytes((figures / "table2_noniid.png").read_bytes())  # not drawn from its data
    shutil.copy(figures / "fig_alpha.png", figures / "table9.png")  # a figure of an earlier grid
    data = figures / "data" / "tableA1.jsonl.xz"  # data changed since the figure was drawn
    records = [json.loads(line) for line in lzma.decompress(data.read_bytes()).decode().splitlines()]
    records[0]["metrics"][-1]["test_acc"] += 0.1
    data.write_bytes(lzma.compress("".join(json.dumps(r) + "\n" for r in records).encode()))

    problems = check("fedumf", docs=docs, redraw=False)
    assert problems[0].startswith(f"{docs / 'fedumf.md'} differs") and "+| " in problems[0]
    assert [p.split(": ")[0] for p in problems[1:]] == ["table9.png", "table1_iid.png", "tableA1.png"]
    assert "no longer drawn" in problems[1] and "pixels" in problems[2] and "other data" in problems[3]


def test_render_only_without_data_is_one_line(tmp_path: Path) -> None:
    from fedaccel.errors import UserError
    from fedaccel.reproduce import reproduce

    with pytest.raises(UserError, match="no data in .*: run `fedaccel reproduce fedumf` first"):
        reproduce("fedumf", docs=tmp_path, render_only=True)
