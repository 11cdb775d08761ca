"""Seeds raised after a look, under no effect: how often the inverse-normal combination of the stages (fedaccel's
rule for such rows) decides, against the pooled seeds judged as if their number had been fixed, for the `--plan`
raising rule from 10 seeds to at most 15 (and, as the audit ran it, stopping at the look on a decided row), the
reproductions' own 5 -> N and 5 -> 10 -> N, and an adversarial raiser; margin and equivalence rows too. The suite
runs the same simulations at 600-2,000 reps (tests/test_raised_seeds.py).

    python scripts/raised_seeds.py [REPS]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from test_raised_seeds import EQUAL, MARGIN, MEAN, monte_carlo_error, raised_rates  # noqa: E402


def main() -> None:
    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
    print(f"{reps} reps each, no true effect; ± one Monte Carlo standard error. Decided: p <= 0.05 (an equivalence "
          "row: decided inside, its level 2.5%)")
    print("| row | raising rule | combined (fedaccel) | pooled, unadjusted | as the audit (stop at the look) |")
    print("|---|---|---:|---:|---:|")
    for claim, row in ((MEAN, "mean (sign flip)"), (MARGIN, "margin, log-normal skew (sign test)"),
                       (EQUAL, "equivalence at the margin (TOST)")):
        designs = (("plan 10 to 15", "5 to N", "5 to 10 to N", "adversarial 5 to N") if claim is MEAN
                   else ("5 to N", "adversarial 5 to N"))
        for design in designs:
            rates = raised_rates(design, reps, claim)
            cells = [f"{100 * r:.2f} ± {100 * monte_carlo_error(r, reps):.2f}%" for r in rates.values()]
            print(f"| {row} | {design} | " + " | ".join(cells + [""] * (3 - len(cells))) + " |", flush=True)


if __name__ == "__main__":
    main()
