"""Reproductions: every claims module points at experiment files that exist, every experiment file
loads (which validates every cell's config), and the FedGSNR claim checks read runs correctly."""

from __future__ import annotations

import importlib
import json
import lzma
import math
import pkgutil
from pathlib import Path

import pytest

from fedaccel import reproductions
from fedaccel.experiment import load_experiment
from fedaccel.claims import Claim, judge
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
        assert isinstance(claim, Claim) and claim.text.strip()
        assert judge(claim, None).verdict == "not run", claim.text  # no runs: never a crash


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


# --- FedGSNR claim checks on hand-made runs -----------------------------------------------------


def _run(tmp_path: Path, name: str, config: dict, diagnostics: list[dict], accs: list[float] | None = None) -> Run:
    path = tmp_path / name
    path.mkdir()
    (path / "diagnostics.jsonl").write_text("".join(json.dumps(d) + "\n" for d in diagnostics))
    metrics = [{"round": r + 1, "test_acc": a} for r, a in enumerate(accs or [])]
    return Run(path=path, config=config, metrics=metrics)


def _gsnr_rows(values: dict[str, float], rounds: int = 6) -> list[dict]:
    return [{"round": r, "gsnr": {c: v for c, v in values.items()}} for r in range(1, rounds + 1)]


def _attack_config(kind: str | None, algorithm: str = "fedgsnr", split: str = "nonbalance") -> dict:
    attacks = [] if kind is None else [{"kind": kind, "clients": [0], "from_round": 2}]
    return {"algorithm": {"name": algorithm}, "data": {"split": {"name": split}}, "attacks": attacks}


def test_attack_claims(tmp_path: Path) -> None:
    from fedaccel.reproductions import fedgsnr

    honest = {"1": 1.0, "2": 1.2, "3": 0.8}

    def rows(attacked: float) -> list[dict]:
        return _gsnr_rows({"0": attacked, **honest})

    runs = [
        _run(tmp_path, f"{split}-{name}", _attack_config(kind, algorithm, split), rows(gsnr) if gsnr else [], accs)
        for split in ("nonbalance", "iid")
        for name, kind, algorithm, gsnr, accs in (
            ("clean", None, "fedgsnr", 1.5, [0.5, 0.6, 0.7]),
            ("flip", "label-flip", "fedgsnr", 0.5, [0.5, 0.6, 0.68]),
            ("noise", "noise", "fedgsnr", 0.2, [0.5, 0.6, 0.69]),
            ("avg-clean", None, "fedavg", None, [0.5, 0.6, 0.7]),
            ("avg-flip", "label-flip", "fedavg", None, [0.4, 0.5, 0.6]),
            ("avg-noise", "noise", "fedavg", None, [0.4, 0.5, 0.6]),
        )
    ]
    claims = {c.text: c for c in fedgsnr.CLAIMS if c.experiment == "fig6_attacks"}
    verdicts = {text: c.check(runs) for text, c in claims.items()}
    assert all(v is True for v, _ in verdicts.values()), verdicts

    # the attacked client above the honest ones: the "lower than honest" claims disagree
    runs[1] = _run(tmp_path, "flip-high", _attack_config("label-flip"), _gsnr_rows({"0": 1.4, **honest}))
    below = next(c for t, c in claims.items() if t.startswith("On non-IID data (Dirichlet 0.5, NonBalance) a label"))
    verdict, numbers = below.check(runs)
    assert verdict is False and "rank 4 lowest of 4" in numbers


def test_entropy_and_gsnr_trend_claims(tmp_path: Path) -> None:
    from fedaccel.reproductions import fedgsnr

    levels = [("iid", None, 3.39, {"0": 2.0, "1": 2.1}), ("dirichlet", 1.0, 3.2, {"0": 1.0, "1": 1.4}),
              ("dirichlet", 0.1, 2.5, {"0": 0.2, "1": 0.9})]
    runs = []
    for k, (split, alpha, entropy, gsnr) in enumerate(levels):
        config = {"algorithm": {"name": "fedgsnr"}, "data": {"split": {"name": split}}}
        if alpha is not None:
            config["data"]["split"]["alpha"] = alpha
        rows = [{"round": r, "entropy": entropy, "entropy_max": math.log(30), "gsnr": gsnr} for r in (1, 2)]
        runs.append(_run(tmp_path, f"run{k}", config, rows))
    for claim in fedgsnr.CLAIMS:
        if claim.experiment in ("fig3_entropy", "fig7_gsnr") and "Label 2" not in claim.text:
            verdict, numbers = claim.check(runs)
            assert verdict is True, (claim.text, numbers)


def test_spearman_with_ties() -> None:
    from fedaccel.reproductions.fedgsnr import spearman

    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert spearman([1, 1, 2, 2], [1, 2, 3, 4]) == pytest.approx(0.894427, abs=1e-5)
    assert spearman([1, 1, 1], [1, 2, 3]) is None


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
