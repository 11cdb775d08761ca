"""compare and plot follow the grid: its targets, its cells' order, one colour per method in every figure."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from fedaccel.cli import main
from fedaccel.grids.experiment import load_experiment, run_experiment
from fedaccel.report import figures
from fedaccel.report.figures import grid_palette, method_of
from fedaccel.reproductions.snapshot import fingerprint

ORDER = ["scaffold", "fedavg", "fedprox"]  # not alphabetical: the grid's order is the one shown


@pytest.fixture(scope="module")
def drawn_grid(tmp_path_factory) -> tuple[Path, object]:
    """A finished tiny grid of three methods, and the figure ``experiment`` drew of it."""
    tmp = tmp_path_factory.mktemp("grid")
    path = tmp / "tiny.yaml"
    base = {"data": {"dataset": "digits", "clients": 2}, "model": "svm", "train": {"rounds": 3, "batch_size": 20}}
    path.write_text(yaml.safe_dump({"name": "tiny", "out_dir": str(tmp / "out"), "base": base,
                                    "grid": {"algorithm": ORDER}, "targets": [0.3, 0.6], "baseline": "fedavg"}))
    drawn = []
    real = figures._make_figure
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(figures, "_make_figure", lambda *a, **kw: drawn.append(real(*a, **kw)) or drawn[-1])
        run_experiment(load_experiment(path), progress=False)
    return tmp / "out", drawn[0]


@pytest.fixture
def grid(drawn_grid) -> Path:
    return drawn_grid[0]


def _colours(fig) -> dict[str, str]:
    """Legend label -> colour of the line it stands for (the curves only)."""
    from matplotlib.colors import to_hex
    from matplotlib.lines import Line2D

    legend = fig.legends[0]
    return {text.get_text(): to_hex(line.get_color()) for text, line in zip(legend.get_texts(), legend.legend_handles)
            if isinstance(line, Line2D) and not text.get_text().startswith("target")}


def test_a_method_has_one_colour_whichever_runs_a_figure_shows() -> None:
    """The palette maps methods to colours in grid order; a subset of the grid (a report's figure per
    figures_by value) keeps them; a grid of one method colours its setups, less the ignored key."""
    cells = [{"algorithm": {"name": a}, "train": {"lr": lr}, "run": {"seed": s}}
             for a in ORDER for lr in (0.1, 0.01) for s in (0, 1)]
    palette = grid_palette(cells)
    assert list(palette.keys) == [method_of(c) for c in cells[::4]]
    colours = palette.colors()
    assert list(colours.values()) == ["#9467bd", "#1f77b4", "#8c564b"]  # each method's own, whatever the grid order
    assert {palette.color(c) for c in cells if c["algorithm"]["name"] == "fedprox"} == {"#8c564b"}
    assert grid_palette(cells[::-1]).colors() == colours  # another order, the same colours
    bherd = [{"algorithm": {"name": "bherd", "alpha": a}} for a in (0.5, 0.1)]  # hyperparameters: methods of their own
    assert len(set(map(grid_palette(bherd).color, bherd))) == 2
    one = [{"algorithm": {"name": "fedavg"}, "train": {"lr": lr}, "data": {"split": sp}}
           for sp in ("iid", "case2") for lr in (0.1, 0.01)]
    by_setup = grid_palette(one, ignore=("train.lr",))
    assert not by_setup.by_method and len(by_setup.keys) == 2
    assert by_setup.color(one[0]) == by_setup.color(one[1]) != by_setup.color(one[2])


def test_plot_of_a_grid_draws_what_experiment_drew(drawn_grid, tmp_path: Path, monkeypatch) -> None:
    """``plot runs/GRID``: the same figure as the grid's curves.png (colours, order, targets, title)."""
    drawn = []
    real = figures._make_figure
    monkeypatch.setattr(figures, "_make_figure", lambda *a, **kw: drawn.append(real(*a, **kw)) or drawn[-1])
    grid, experiment_fig = drawn_grid
    assert main(["plot", str(grid), "-o", str(tmp_path / "p.png")]) == 0
    plot_fig = drawn[0]
    assert list(_colours(plot_fig)) == ORDER
    assert _colours(plot_fig) == _colours(experiment_fig)
    assert len(set(_colours(plot_fig).values())) == 3
    assert fingerprint(plot_fig) == fingerprint(experiment_fig)
    texts = [t.get_text() for t in plot_fig.legends[0].get_texts()]
    assert "target (grid's targets)" in texts or not any(t.startswith("target") for t in texts)

    assert main(["plot", str(grid / "algorithm=fedprox"), str(grid / "algorithm=fedavg"), "-o",
                 str(tmp_path / "q.png"), "--targets", "0.1"]) == 0
    assert "target (--targets)" in [t.get_text() for t in drawn[-1].legends[0].get_texts()]


def test_compare_of_a_grid_uses_its_targets_baseline_and_order(grid: Path, capsys) -> None:
    assert main(["compare", str(grid)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[:len(ORDER) + 2] == (grid / "table.md").read_text().splitlines()[:len(ORDER) + 2]
    header, _, *rows = out.splitlines()[:len(ORDER) + 2]
    assert "rounds to 0.3" in header and "rounds to 0.6" in header and "rounds to 0.7" not in header
    assert [row.split("|")[1].split()[0] for row in rows] == ORDER
    assert "fedavg (baseline)" in out

    assert main(["compare", str(grid), "--targets", "0.8"]) == 0
    header = capsys.readouterr().out.splitlines()[0]
    assert "rounds to 0.8" in header and "rounds to 0.3" not in header


def test_diagnostics_with_nothing_to_draw_say_so_in_one_line(grid: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "d.png"
    assert main(["plot", str(grid), "-o", str(out), "--diagnostics"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --diagnostics: none of the 3 runs recorded diagnostics") and "\n" not in err
    assert not out.exists()


def test_groups_of_one_figure_never_share_a_pattern() -> None:
    """table1_iid's grid: three FedAvg setups (one colour) and two FedUMF ones; every curve its own dashes."""
    from fedaccel.report.figures import _line_styles
    from fedaccel.report.reading import Run, group_runs

    cells = [("fedavg", 1, 0.1), ("fedumf", 1, 0.1), ("fedumf-0.1", 1, 0.1), ("fedavg", 10, 0.1), ("fedavg", 1, 1.0)]
    runs = [Run(Path(f"c{i}"), {"algorithm": {"name": a.split("-")[0], "alpha": 0.1 if "-" in a else 1.0},
                                "train": {"local_epochs": e, "client_fraction": c}}, [])
            for i, (a, e, c) in enumerate(cells)]
    styles = _line_styles(group_runs(runs), grid_palette(r.config for r in runs))
    colours = [s["color"] for s in styles]
    assert colours[0] == colours[3] == colours[4] and len(set(colours)) == 3
    assert len({str(s["dashes"]) for s in styles}) == 5 and len({s["marker"] for s in styles}) == 5


@pytest.mark.parametrize("targets", ["0.5", [True], {"a": 1}, [[0.5]], ["x"]])
def test_a_grid_file_with_hostile_targets_is_one_line(grid: Path, tmp_path: Path, capsys, targets) -> None:
    import shutil

    copy = tmp_path / "grid"
    shutil.copytree(grid, copy)
    spec = yaml.safe_load((copy / "experiment.yaml").read_text())
    (copy / "experiment.yaml").write_text(yaml.safe_dump({**spec, "targets": targets}))
    for command in (["compare", str(copy)], ["plot", str(copy), "-o", str(tmp_path / "p.png")]):
        assert main(command) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and err.count("\n") == 1 and "targets must be a list of numbers" in err, err
