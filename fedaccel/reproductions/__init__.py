"""Each paper's claims as rows of data (``fedaccel/reproductions/<paper>.py``: TITLE, INTRO, CLAIMS),
judged on paired seeds by :mod:`fedaccel.claims` and reported by :mod:`fedaccel.reproduce`."""
