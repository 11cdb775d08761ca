"""No warnings from fedaccel's own code: the cause of one fixed, and the check that would catch another."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from fedaccel.report.reading import Run, mean_ci, series


def test_a_diverged_seed_gives_an_infinite_mean_and_no_spread_without_a_warning() -> None:
    """The ``invalid value encountered in subtract`` of ``reproduce --render-only``: the std of a round
    where one seed's loss is infinite."""
    runs = [Run(Path(f"s{seed}"), {}, [{"round": 1, "loss": 1.0}, {"round": 2, "loss": value}])
            for seed, value in enumerate([math.inf, 2.0, 4.0])]
    x, mean, std = series(runs, "loss")
    assert x.tolist() == [1, 2] and mean[0] == 1.0 and std[0] == 0.0
    assert mean[1] == math.inf and math.isnan(std[1])
    assert math.isnan(mean_ci(runs, "loss")[2][1])
    both = [Run(Path("a"), {}, [{"round": 1, "loss": math.inf}]), Run(Path("b"), {}, [{"round": 1, "loss": -math.inf}])]
    assert math.isnan(series(both, "loss")[1][0])


def test_numpy_errors_in_fedaccels_code_fail_the_tests() -> None:
    """tests/conftest.py: numpy's floating-point warning, raised inside numpy for a call from fedaccel's
    code, is an error; the same call from elsewhere stays a warning (numpy's own behaviour)."""
    values = np.array([[np.inf], [1.0]])
    as_fedaccel = {"__name__": "fedaccel.report.example", "values": values}
    with pytest.raises(FloatingPointError, match="invalid value"):
        exec(compile("values.std(axis=0)", "example.py", "exec"), as_fedaccel)
    with pytest.warns(RuntimeWarning, match="invalid value"):
        values.std(axis=0)
    with np.errstate(invalid="ignore"):  # where a NaN is meant, code says so
        exec(compile("values.std(axis=0)", "example.py", "exec"), as_fedaccel)
