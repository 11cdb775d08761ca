"""Target labels never overlap: close targets (0.92, 0.93, 0.935 on a panel spanning 0.1 to 1) are spread apart."""

from __future__ import annotations

from itertools import combinations
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from fedaccel.report.figures import _make_figure
from fedaccel.report.reading import Run
from fedaccel.report.target_labels import TargetLabels, spread


@given(st.lists(st.floats(-1e4, 1e4, allow_nan=False), max_size=12), st.floats(0.5, 50))
def test_spread_keeps_the_order_and_the_gap_and_moves_only_labels_that_meet(ys: list[float], gap: float) -> None:
    ys = sorted(ys)
    placed = spread(ys, gap)
    assert len(placed) == len(ys)
    assert all(b - a >= gap * (1 - 1e-9) for a, b in zip(placed, placed[1:]))
    # a label whose wanted place is at least two gaps from every other one stays there
    for i, y in enumerate(ys):
        if all(abs(y - other) >= 2 * gap * len(ys) for j, other in enumerate(ys) if j != i):
            assert placed[i] == y
    if ys:  # a block is centred on its labels: the placed mean is the wanted one
        assert abs(sum(placed) / len(placed) - sum(ys) / len(ys)) < 1e-6 * max(1.0, max(map(abs, ys)))


def test_close_targets_labels_do_not_overlap_in_a_drawn_figure(tmp_path: Path) -> None:
    runs = [Run(Path(f"r{s}"), {"algorithm": "fedavg", "run": {"seed": s}},
                [{"round": r, "test_acc": min(0.1 + 0.05 * r, 0.99)} for r in range(40)]) for s in (0, 1)]
    targets = [0.92, 0.93, 0.935, 0.5]
    fig = _make_figure(runs, ["test_acc"], targets=targets)
    fig.canvas.draw()  # drawn: the layout settled, the labels placed
    renderer = fig.canvas.get_renderer()
    (artist,) = [a for ax in fig.axes for a in ax.artists if isinstance(a, TargetLabels)]
    boxes = {label.get_text(): label.get_window_extent(renderer) for label in artist.labels}
    assert sorted(boxes) == ["0.5", "0.92", "0.93", "0.935"]
    for (a, box_a), (b, box_b) in combinations(boxes.items(), 2):
        assert not box_a.overlaps(box_b), (a, b, box_a, box_b)
    ax = artist.panel
    line_y = {f"{t:g}": ax.transData.transform((0, t))[1] for t in targets}
    centres = {text: (box.y0 + box.y1) / 2 for text, box in boxes.items()}
    assert sorted(centres, key=centres.get) == sorted(line_y, key=line_y.get)  # in the lines' order
    assert abs(centres["0.5"] - line_y["0.5"]) < 1  # a target far from the others: beside its line
    assert max(abs(centres[t] - line_y[t]) for t in centres) < 3 * boxes["0.93"].height  # near their lines
