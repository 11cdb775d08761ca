"""Reading results: run folders in, tables, figures and verdicts out (nothing here trains).

- ``reading``: run folders, groups of seeds, curves and their confidence intervals;
- ``tables``: rounds to a target and the comparison table (``fedaccel compare``);
- ``figures``: the curves figure (``fedaccel plot``, ``curves.png``);
- ``diagnostics``: plots of the algorithms' per-round diagnostics;
- ``statistics``: the exact paired sign-flip test, t intervals, TOST, Benjamini-Hochberg, seeds for power;
- ``claims``: a claim as data and its verdict on paired seeds (docs/statistics.md);
- ``judge``: a user's claims in an experiment file (``fedaccel judge``).
"""
