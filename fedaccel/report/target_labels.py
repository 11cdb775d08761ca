"""Target values labelled at the right of a panel, each beside its dotted line, never on top of each other.

Where targets lie closer than a label is tall (0.92, 0.93 and 0.935 on a panel spanning 0.5 to 1), the
labels are spread apart around their lines (:func:`spread`). How close is "closer" depends on the panel's
size in the drawn figure, which the layout settles only when it is drawn: :class:`TargetLabels` is an
artist that places its labels then, in display coordinates.

Example:
    >>> spread([10.0, 11.0, 30.0], gap=4.0)
    [8.5, 12.5, 30.0]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from matplotlib.artist import Artist
from matplotlib.text import Text
from matplotlib.transforms import Bbox, IdentityTransform


def spread(ys: Sequence[float], gap: float) -> list[float]:
    """Positions for labels wanted at ``ys`` (ascending) at least ``gap`` apart, in the same order: labels
    that would overlap are gathered into a block of equally spaced ones centred on their wanted
    positions' mean, and blocks that then meet are merged, until none do."""
    blocks: list[list[float]] = []  # each: the wanted positions of its labels
    for y in ys:
        blocks.append([y])
        while len(blocks) > 1 and _low(blocks[-1], gap) - _high(blocks[-2], gap) < gap:
            last = blocks.pop()
            blocks[-1].extend(last)
    return [_low(block, gap) + k * gap for block in blocks for k in range(len(block))]


def _low(block: list[float], gap: float) -> float:
    return sum(block) / len(block) - (len(block) - 1) / 2 * gap


def _high(block: list[float], gap: float) -> float:
    return sum(block) / len(block) + (len(block) - 1) / 2 * gap


class TargetLabels(Artist):
    """The labels of ``targets`` on ``ax`` (data values), just right of the panel, spread apart when drawn."""

    def __init__(self, ax: Any, targets: Sequence[float], **text: Any) -> None:
        super().__init__()
        self.panel = ax
        self.targets = [float(t) for t in targets]
        style = {"ha": "left", "va": "center", "fontsize": "x-small", "color": "0.3", **text}
        self.labels = [Text(0, 0, f"{t:g}", **style) for t in self.targets]
        for label in self.labels:
            label.set_figure(ax.figure)
            label.set_transform(IdentityTransform())
            label.set_clip_on(False)
        self.set_clip_on(False)

    def get_children(self) -> list[Any]:
        return list(self.labels)

    def place(self, renderer: Any) -> None:
        """Put each label beside its line, spread apart by the tallest label's height (and a tenth)."""
        if not self.labels:
            return
        x = self.panel.transAxes.transform((1.01, 0.0))[0]
        ys = [float(self.panel.transData.transform((0.0, t))[1]) for t in self.targets]
        gap = 1.1 * max(label.get_window_extent(renderer).height for label in self.labels)
        order = sorted(range(len(ys)), key=lambda i: ys[i])
        for i, y in zip(order, spread([ys[i] for i in order], gap)):
            self.labels[i].set_position((x, y))

    def draw(self, renderer: Any) -> None:
        if not self.get_visible():
            return
        self.place(renderer)
        for label in self.labels:
            label.draw(renderer)
        self.stale = False

    def get_window_extent(self, renderer: Any = None) -> Bbox:
        renderer = renderer or self.panel.figure.canvas.get_renderer()
        self.place(renderer)
        boxes = [label.get_window_extent(renderer) for label in self.labels]
        return Bbox.union(boxes) if boxes else Bbox.null()

    def get_tightbbox(self, renderer: Any = None) -> Bbox:
        return self.get_window_extent(renderer)
