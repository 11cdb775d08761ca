"""One colour per method name in every figure: FedAvg blue wherever it stands in a grid; a plugin's name a
colour of its own that no built-in method has, the same in every figure."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from fedaccel.report.colors import FALLBACK_COLORS, METHOD_COLORS, family_color, family_colors, shade
from fedaccel.report.figures import _make_figure, grid_palette
from fedaccel.report.reading import Run


def _runs(*algorithms: object) -> list[Run]:
    return [Run(Path(f"r{i}"), {"algorithm": a, "run": {"seed": 0}},
                [{"round": r, "test_acc": 0.1 * r + 0.01 * i} for r in range(4)]) for i, a in enumerate(algorithms)]


def _line_colours(fig) -> dict[str, str]:
    from matplotlib.colors import to_hex

    legend = fig.legends[0]
    return {t.get_text(): to_hex(h.get_color()) for t, h in zip(legend.get_texts(), legend.legend_handles)}


def test_fedavg_has_one_colour_wherever_it_stands_in_a_grid() -> None:
    first = _line_colours(_make_figure(_runs({"name": "fedavg"}, {"name": "bherd", "alpha": 0.5}), ["test_acc"]))
    last = _line_colours(_make_figure(_runs({"name": "scaffold"}, {"name": "bherd", "alpha": 0.5}, {"name": "fedavg"}),
                                      ["test_acc"]))
    assert first["fedavg"] == last["fedavg"] == METHOD_COLORS["fedavg"]
    assert first["bherd alpha=0.5"] == last["bherd alpha=0.5"] == METHOD_COLORS["bherd"]


def test_built_in_colours_are_apart_and_fallbacks_are_none_of_them() -> None:
    names = {name: color for name, color in METHOD_COLORS.items() if name != "bherd-fedavg"}  # bherd's alias
    assert len(set(names.values())) == len(names)
    assert not set(FALLBACK_COLORS) & set(METHOD_COLORS.values())
    from fedaccel.algorithms.registry import RECIPES

    assert set(RECIPES) <= set(METHOD_COLORS)  # every built-in method its own colour, the same in every figure


@given(st.text(min_size=1, max_size=30).filter(lambda s: s not in METHOD_COLORS))
def test_a_plugin_name_has_a_colour_no_built_in_has_and_keeps_it(name: str) -> None:
    """Hypothesis: any other name's colour is a fallback one, the same in every call and beside any methods."""
    color = family_color(name)
    assert color in FALLBACK_COLORS and color not in METHOD_COLORS.values()
    assert family_colors([name])[name] == color == family_color(name)
    beside = family_colors([name, "fedavg", "bherd"])
    assert beside["fedavg"] == METHOD_COLORS["fedavg"] and beside[name] == color


def test_two_names_whose_hashes_meet_get_two_colours() -> None:
    names = [f"plugin{i}" for i in range(40)]
    clash = next((a, b) for a in names for b in names if a < b and family_color(a) == family_color(b))
    colors = family_colors(list(clash))
    assert colors[clash[0]] != colors[clash[1]]


def test_settings_of_one_method_are_shades_of_its_colour_the_first_its_own() -> None:
    cells = [{"algorithm": {"name": "bherd", "alpha": a}} for a in (0.1, 0.3, 0.5, 1.0)] + [{"algorithm": "fedavg"}]
    colours = list(grid_palette(cells).colors().values())
    assert colours[0] == METHOD_COLORS["bherd"] and len(set(colours)) == 5
    assert colours[1] == shade(METHOD_COLORS["bherd"], -0.4) and colours[4] == METHOD_COLORS["fedavg"]
    assert shade("#808080", 0.5) == "#c0c0c0" and shade("#808080", -0.5) == "#404040"


def test_a_diagnostics_figure_names_and_colours_each_run_by_its_method(tmp_path: Path) -> None:
    """The scalar diagnostics (entropy, estimate error) drew each run in the colour cycle's next colour, labelled by
    its folder name: now its method's colour and name, then what tells two runs of one method apart."""
    import json

    import yaml

    from fedaccel.report.diagnostics import scalar_figure

    folders = []
    for name, algorithm, split in (("a", "fedavg", "iid"), ("b", {"name": "bherd", "alpha": 0.5}, "iid"),
                                   ("c", {"name": "bherd", "alpha": 0.5}, "case2")):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "config.yaml").write_text(yaml.safe_dump({"algorithm": algorithm, "data": {"split": split},
                                                            "train": {"rounds": 3}, "run": {"seed": 0}}))
        (folder / "diagnostics.jsonl").write_text("".join(json.dumps({"round": r, "entropy": 1.0 + r}) + "\n"
                                                          for r in range(1, 4)))
        folders.append(folder)
    ax = scalar_figure(folders, "entropy").axes[0]
    from matplotlib.colors import to_hex

    drawn = {line.get_label(): (to_hex(line.get_color()), line.get_linestyle()) for line in ax.get_lines()}
    assert drawn == {"fedavg split=iid": (METHOD_COLORS["fedavg"], "-"),
                     "bherd alpha=0.5 split=iid": (METHOD_COLORS["bherd"], "--"),
                     "bherd alpha=0.5 split=case2": (METHOD_COLORS["bherd"], ":")}


def _lab(color: str) -> tuple[float, float, float]:
    """CIE L*a*b* (D65) of ``#rrggbb``."""
    linear = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4
              for c in (int(color[i:i + 2], 16) / 255 for i in (1, 3, 5))]
    xyz = [sum(m * c for m, c in zip(row, linear)) / white for row, white in
           zip(((0.4124, 0.3576, 0.1805), (0.2126, 0.7152, 0.0722), (0.0193, 0.1192, 0.9505)), (0.9505, 1.0, 1.089))]
    x, y, z = (t ** (1 / 3) if t > 0.008856 else 7.787 * t + 16 / 116 for t in xyz)
    return 116 * y - 16, 500 * (x - y), 200 * (y - z)


def test_fallback_colours_are_apart_from_each_other_and_from_the_methods_most_figures_show() -> None:
    """A new user's "bherd + adam" and "fedavg + median" were two near-identical blues (CIE Lab distance 23,
    and 17 from FedAvg's): a plugin's curve must be told from its neighbours' at a glance."""
    import itertools
    import math

    common = [METHOD_COLORS[m] for m in ("fedavg", "bherd", "centralized", "fedadam", "fedavgm", "scaffold", "fedprox")]
    assert min(math.dist(_lab(a), _lab(b)) for a, b in itertools.combinations(FALLBACK_COLORS, 2)) >= 26.9
    assert min(math.dist(_lab(a), _lab(b)) for a in FALLBACK_COLORS for b in common) >= 29.9
    assert all(_lab(c)[0] < 85 and math.hypot(*_lab(c)[1:]) > 15 for c in FALLBACK_COLORS)  # no near-white, no grey
