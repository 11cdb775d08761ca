"""An "equal" rounds claim at its margin with 0-60% of runs censored, at n = 10 and 20: how often it decides
inside (agrees) and outside (disagrees), judged with censored differences as intervals (fedaccel's rule), and
inside as before (censored runs pinned at the budget). The suite runs the same simulation at 400 reps
(tests/test_statistics.py::test_equivalence_under_censoring_holds_its_level).

    python scripts/censored_equivalence.py [REPS]
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from test_statistics import censored_equivalence_rates  # noqa: E402


def main() -> None:
    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
    print(f"{reps} reps each; ± one Monte Carlo standard error")
    print("| n | censored | agrees | disagrees | agrees, pinned at the budget (before) |")
    print("|---:|---:|---:|---:|---:|")
    for n in (10, 20):
        for share in (0.0, 0.2, 0.3, 0.45, 0.6):
            rates = censored_equivalence_rates(n, share, reps)
            cells = [f"{100 * r:.2f} ± {100 * math.sqrt(r * (1 - r) / reps):.2f}%" for r in rates.values()]
            print(f"| {n} | {share:.0%} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
