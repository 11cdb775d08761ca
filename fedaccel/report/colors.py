"""A method's colour, keyed by its name: FedAvg is the same blue in every figure fedaccel draws.

A method's family (:func:`fedaccel.runs.names.family_name`: the algorithm's name with its composed parts,
``fedavg + adam``) has one colour: a built-in method's from :data:`METHOD_COLORS`, any other name's (a
plugin's, a composition) one of :data:`FALLBACK_COLORS`, chosen by a hash of the name, so it is the same
in every figure and never a built-in method's. Where a figure shows several settings of one family
(BHerd at four α, FedAvg at two learning rates), the first in grid order has the family's colour and
the others darker and lighter shades of it (:func:`shade`, in the order of :data:`SHADES`).

Example:
    >>> family_color("fedavg")
    '#1f77b4'
"""

from __future__ import annotations

import hashlib

#: The built-in methods' colours (a composition of FedAvg with a server optimiser is its own name).
METHOD_COLORS: dict[str, str] = {
    "fedavg": "#1f77b4",
    "bherd": "#d62728",
    "bherd-fedavg": "#d62728",  # the same method
    "fedadam": "#ff7f0e",
    "fedavgm": "#2ca02c",
    "scaffold": "#9467bd",
    "fedprox": "#8c564b",
    "fedgsnr": "#e377c2",
    "centralized": "#7f7f7f",
    "fedumf": "#bcbd22",
    "fednova": "#17becf",
    "fedyogi": "#393b79",
    "fedadagrad": "#8c6d31",
    "feddyn": "#637939",
    "feddc": "#7b4173",
    "grab-fedavg": "#843c39",
    "grab-reorder": "#e7ba52",
    "bherd-fednova": "#1b9e77",
    "bherd-scaffold": "#a55194",
    "fedgsnr-fedprox": "#ce6dbd",
    "fedgsnr-scaffold": "#de9ed6",
    "fedumf-feddc": "#66a61e",
    "fedumf-fedprox": "#e6ab02",
    "fedumf-scaffold": "#6b6ecf",
    "bherd-fedprox": "#a63603",
    "fedgsnr-bherd": "#c51b7d",
    "fedumf-bherd": "#4d9221",
    "fedgsnr-fedumf": "#35978f",
}

#: Colours of other names (plugins, compositions), none of them a built-in method's: chosen for distance (CIE Lab)
#: from each other (at least 26.9) and from FedAvg, BHerd, centralized SGD, FedAdam, FedAvgM, SCAFFOLD and FedProx's
#: (at least 29.9), which most figures show beside them; neither grey nor near-white.
FALLBACK_COLORS: tuple[str, ...] = ("#ddcc77", "#e7298a", "#00a087", "#66ccee", "#882255", "#fb9a99",
                                    "#a6761d", "#332288", "#cab2d6", "#a6d854", "#f781bf", "#91d1c2")


#: How far each further setting of one family is shaded: towards black (< 0) or white (> 0).
SHADES: tuple[float, ...] = (0.0, -0.4, 0.45, -0.65, 0.7, -0.2, 0.25, -0.8, 0.85)


def family_color(family: str) -> str:
    """The colour (``#rrggbb``) of a method family: a built-in's own, else one of :data:`FALLBACK_COLORS` by the
    name's hash (the same name the same colour on any machine)."""
    if family in METHOD_COLORS:
        return METHOD_COLORS[family]
    return FALLBACK_COLORS[fallback_place(family)]


def fallback_place(family: str) -> int:
    """The place of ``family``'s colour in :data:`FALLBACK_COLORS`: its SHA-256, not Python's salted hash."""
    return int.from_bytes(hashlib.sha256(family.encode()).digest()[:8], "big") % len(FALLBACK_COLORS)


def shade(color: str, amount: float) -> str:
    """``color`` mixed with black (``amount`` < 0) or white (> 0) by ``|amount|``."""
    r, g, b = (int(color[i:i + 2], 16) / 255 for i in (1, 3, 5))
    mixed = [c + amount * (1 - c) if amount > 0 else c * (1 + amount) for c in (r, g, b)]
    return "#" + "".join(f"{round(min(max(c, 0.0), 1.0) * 255):02x}" for c in mixed)


def family_colors(families: list[str]) -> dict[str, str]:
    """The colour of each family of one figure (or one grid's figures): :func:`family_color`, except that two
    names whose hashes meet take the next free fallback colour, in name order."""
    colors: dict[str, str] = {}
    taken = {METHOD_COLORS[f] for f in families if f in METHOD_COLORS}
    for family in sorted(set(families)):
        if family in METHOD_COLORS:
            colors[family] = METHOD_COLORS[family]
            continue
        place = fallback_place(family)
        for step in range(len(FALLBACK_COLORS)):
            candidate = FALLBACK_COLORS[(place + step) % len(FALLBACK_COLORS)]
            if candidate not in taken:
                break
        else:  # more names than fallback colours: their hash's own (a shade tells them apart below)
            candidate = FALLBACK_COLORS[place]
        colors[family] = candidate
        taken.add(candidate)
    return colors
