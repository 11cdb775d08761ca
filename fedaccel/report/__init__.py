"""Reading results: run folders in, tables, figures and verdicts out (nothing here trains).

- ``reading``: run folders, groups of seeds, curves and their confidence intervals;
- ``tables``: rounds to a target and the comparison table (``fedaccel compare``);
- ``figures``: the curves figure (``fedaccel plot``, ``curves.png``);
- ``diagnostics``: plots of the algorithms' per-round diagnostics;
- ``claims``: the statistics that judge a claim on paired seeds (the verdicts of the reproductions).
"""
