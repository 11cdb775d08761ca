"""The papers: each paper's claims as rows of data (``<paper>.py``: TITLE, INTRO, CLAIMS), judged on
paired seeds by :mod:`fedaccel.report.claims`; ``reproduce`` runs a paper's grids and draws its report,
and ``snapshot`` packs the runs into the committed data beside it (``docs/reproductions/<paper>/data``)."""
