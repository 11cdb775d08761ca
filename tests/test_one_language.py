"""One language: the grid's table, `compare` and `judge` give one comparison the same figures
(one speed-up, one final accuracy; docs/statistics.md states the definitions once)."""

from __future__ import annotations

import json
from pathlib import Path

from test_judge import CLAIMS, LR, write_grid

from fedaccel.cli import main
from fedaccel.report.claims import speed_up
from fedaccel.report.reading import load_runs
from fedaccel.report.tables import compare_table


def row_of(table: str, lr: float) -> list[str]:
    """The cells of the table row of the setup at learning rate ``lr``."""
    rows = [line for line in table.splitlines() if line.startswith("| ") and f"(train.lr={lr})" in line.split("|")[1]]
    assert len(rows) == 1, table
    return [cell.strip() for cell in rows[0].strip("|").split("|")]


def test_the_table_and_judge_give_one_speed_up_and_one_final_accuracy(tmp_path: Path, capsys) -> None:
    grid = write_grid(tmp_path / "toy", CLAIMS)
    assert main(["judge", str(grid)]) == 0
    judged = {c["text"]: c for c in json.loads((grid / "claims.json").read_text())}
    sooner, same_end = judged[CLAIMS[0]["text"]], judged[CLAIMS[2]["text"]]
    capsys.readouterr()
    assert main(["compare", str(grid), "--targets", "0.8"]) == 0
    table = capsys.readouterr().out  # compare prints the grid's table (its cells' order)
    assert "(baseline)" in table and "speed-up" in compare_table(load_runs(grid), [0.8])

    fast, slow, twin = row_of(table, LR["fast"]), row_of(table, LR["slow"]), row_of(table, LR["twin"])
    # speed-up: judge's mean rounds of the two sides, through the one definition, is the table's figure
    if "(baseline)" in slow[0]:
        assert fast[5].rstrip(" ≈") == f"{speed_up(sooner['a_mean'], sooner['b_mean']):.2f}×"
    else:
        assert "(baseline)" in fast[0] and slow[5].rstrip(" ≈") == f"{speed_up(sooner['b_mean'], sooner['a_mean']):.2f}×"
    assert fast[4].split()[0] == f"{sooner['a_mean']:.1f}" and slow[4].split()[0] == f"{sooner['b_mean']:.1f}"
    # final accuracy: each seed's mean of its last 3 evaluations, averaged over the seeds, in both
    assert twin[3].split()[0] == f"{same_end['a_mean']:.4f}" and fast[3].split()[0] == f"{same_end['b_mean']:.4f}"


def test_a_speed_up_says_which_bound_it_is_when_seeds_never_got_there() -> None:
    """A seed that never reaches the target counts as its last round, a lower bound on its rounds: against a
    baseline with such seeds the speed-up is at least the figure, for a row with them at most, with both unknown."""
    from fedaccel.report.tables import SeedRounds, speed_up as cell

    base = SeedRounds({0: 10.0, 1: 10.0, 2: 8.0}, 1, frozenset({1}))  # seed 1 never got there in 10 rounds
    fast = SeedRounds({0: 5.0, 1: 4.0, 2: 4.0}, 0)
    slow = SeedRounds({0: 10.0, 1: 3.0, 2: 9.0}, 1, frozenset({0}))
    assert cell(fast, base).startswith(f"≥ {speed_up(13 / 3, 28 / 3):.2f}×")
    assert cell(base, fast).startswith(f"≤ {speed_up(28 / 3, 13 / 3):.2f}×")
    assert " ?" in cell(slow, base) and not cell(slow, base).startswith(("≥", "≤"))
    assert cell(fast, fast) == f"{1.0:.2f}×"
