"""Each paper's claims as rows (:class:`fedaccel.claims.Claim`), judged by :mod:`fedaccel.claims`; see
:mod:`fedaccel.reproduce`. A paper module exports TITLE, INTRO and CLAIMS."""
