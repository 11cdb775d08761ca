"""DP calibration: a known noise multiplier checked (``calibrate`` with its table,
fedaccel/algorithms/dp_calibrations.json) against dp-accounting's search (``search_noise_multiplier``, what
``calibrate`` did before), for every ``target_epsilon`` the privacy experiments ask for.

The script loads experiments/privacy/quick/*.yaml, collects the distinct (settings, target) they calibrate, then
times both ways on each, in turn first over ``--repeats``, checks that both give the same z, and prints the time
ratio table / search (the median of the per-repeat ratios) with the load average.

    python benchmarks/dp_calibration.py [--repeats 3] [--smoke]

``--smoke``: dp_case2.yaml's calibrations only (the cheapest: no subsampling), one repeat, to check that the script
runs (its figures then mean nothing).
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from pathlib import Path
from typing import Any

from fedaccel.algorithms import dp
from fedaccel.grids.experiment import load_experiment
from stacked import load  # benchmarks/: the load average, as the other scripts print it

ROOT = Path(__file__).resolve().parents[1]


def asked(files: list[Path]) -> dict[str, tuple[Any, float]]:
    """The distinct (settings, target) that loading ``files`` calibrates, by key."""
    seen: dict[str, tuple[Any, float]] = {}
    calibrate = dp.calibrate

    def recording(settings: Any, target: float) -> float:
        seen.setdefault(dp.calibration_key(settings, target), (settings, target))
        return calibrate(settings, target)

    dp.calibrate = recording  # dp_settings calls it by this name
    try:
        for file in files:
            load_experiment(file)
    finally:
        dp.calibrate = calibrate
    return seen


def time_both(cases: list[tuple[Any, float]], search_first: bool) -> tuple[float, float]:
    """Seconds to calibrate every case from the table and by the search (in the order asked), the z checked equal
    to 1e-9."""
    times, found = {}, {}
    for way in ("search", "table") if search_first else ("table", "search"):
        began = time.perf_counter()
        found[way] = [dp.search_noise_multiplier(s, t) if way == "search" else dp.calibrate.__wrapped__(s, t)
                      for s, t in cases]
        times[way] = time.perf_counter() - began
    # the same z but for the search's last digits, which differ between CPUs (1e-14 apart on an AVX-512 Intel)
    assert all(math.isclose(a, b, rel_tol=1e-9) for a, b in zip(found["table"], found["search"], strict=True)), found
    return times["table"], times["search"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--smoke", action="store_true", help="dp_case2 only, one repeat (a test, not a measurement)")
    args = parser.parse_args()
    folder = ROOT / "experiments" / "privacy" / "quick"
    files = [folder / "dp_case2.yaml"] if args.smoke else sorted(folder.glob("*.yaml"))
    if args.smoke:
        args.repeats = 1
    print(f"load average (1, 5, 15 min) before: {load()}")
    cases = list(asked(files).values())
    print(f"{len(cases)} calibration(s) asked by {len(files)} experiment file(s) of {folder.relative_to(ROOT)}")
    table, search = zip(*(time_both(cases, search_first=k % 2 == 1) for k in range(args.repeats)))
    ratio = statistics.median(a / b for a, b in zip(table, search))
    print(f"from the table {statistics.median(table):.2f} s, by the search {statistics.median(search):.2f} s "
          f"(medians of {args.repeats} repeats, each timing both, in turn first)")
    print(f"ratio table/search: {ratio:.3f}; load average (1, 5, 15 min) after: {load()}")


if __name__ == "__main__":
    main()
