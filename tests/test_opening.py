"""A report's opening sentences are no stronger than the claim rows they cite (fedaccel.reproductions.opening)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fedaccel.errors import UserError
from fedaccel.reproductions.opening import STRENGTHS, Finding, Opening, problems, render

VERDICTS = ("agrees", "disagrees", "inconclusive")


def row(text: str, verdict: str, expect: str = "less", margin: float = 0.0, q: float | None = 0.01,
        mde: float | None = None) -> dict:
    return {"text": text, "verdict": verdict, "expect": expect, "margin": margin, "q": q, "mde": mde,
            "measure": "rounds to 0.8 test accuracy (interpolated, restricted)", "seeds": 10}


ROWS = [
    row("A is faster than B", "agrees", q=0.002),
    row("A is faster than B: lower train loss averaged over the rounds", "agrees", q=0.004),
    row("A is faster than C", "inconclusive", q=0.4, mde=3.25),
    row("A is as fast as D", "agrees", expect="equal", margin=2.0, q=0.01),
    row("A is as fast as E", "inconclusive", expect="equal", margin=2.0, q=0.3, mde=4.0),
]


def test_a_measure_narrows_a_finding_to_the_rows_on_that_measure() -> None:
    from fedaccel.reproductions.opening import cited

    rows = [*ROWS[:2], {**ROWS[1], "text": "A is faster than B: x", "measure": "mean train loss over rounds"}]
    assert cited(Finding("Yes.", ("faster than B",), "agrees"), rows) == [0, 1, 2]
    assert cited(Finding("Yes.", ("faster than B",), "agrees", measure="train loss"), rows) == [2]


def test_a_sentence_cites_every_row_its_fragment_names_and_renders_their_numbers() -> None:
    opening = Opening("Does A accelerate?", (
        Finding("Yes, against B.", ("A is faster than B",), "agrees"),
        Finding("Against C we could not tell.", ("A is faster than C",), "could not tell"),
        Finding("It has no effect against D: the median seed lies inside ±2 rounds.", ("as fast as D",), "no effect"),
    ))
    assert problems(opening, ROWS) == []
    assert render(opening, ROWS) == (
        "**Does A accelerate?** Yes, against B. (rows 1, 2: agree, q ≤ 0.004.) Against C we could not tell. "
        "(row 3: inconclusive, q ≥ 0.4; smallest detectable: 3.25 rounds to 0.8 test accuracy.) It has no effect "
        "against D: the median seed lies inside ±2 rounds. (row 4: agrees, q ≤ 0.01.)")


@pytest.mark.parametrize("finding, why", [
    (Finding("Yes.", ("A is faster than C",), "agrees"), "says agrees, its rows are inconclusive"),
    (Finding("Yes.", ("A is faster",), "agrees"), "says agrees, its rows are agrees, inconclusive"),
    (Finding("No: A does not accelerate against C.", ("faster than C",), "could not tell"), "'could not tell'"),
    (Finding("A does not accelerate against C; we could not tell.", ("faster than C",), "could not tell"),
     "'not accelerate' claims no effect"),
    (Finding("A is no faster than B.", ("faster than B",), "agrees"), "'no faster' claims no effect"),
    (Finding("No effect against E.", ("as fast as E",), "no effect"), "which takes 'no difference' rows"),
    (Finding("No effect against B.", ("faster than B",), "no effect"), "which takes 'no difference' rows"),
    (Finding("D is as fast as A: within ±2 rounds.", ("as fast as D",), "no effect"), "must say so ('the median seed')"),
    (Finding("We could not tell against B.", ("faster than B",), "could not tell"), "its rows are agrees"),
    (Finding("Yes.", ("A is slower than Z",), "agrees"), "no claim row's text contains 'A is slower than Z'"),
    (Finding("Yes.", ("faster than B",), "strongly"), "strength 'strongly' is none of"),
    (Finding("Yes.", ("faster than B",), "agrees", measure="final test accuracy"), "cites no claim row"),
])
def test_a_sentence_stronger_than_its_rows_is_named_and_refused(finding: Finding, why: str) -> None:
    opening = Opening("Does A accelerate?", (finding,))
    found = problems(opening, ROWS)
    assert len(found) >= 1 and why in found[0], found
    with pytest.raises(UserError, match="the opening says more than its claim rows") as raised:
        render(opening, ROWS)
    assert "\n" not in str(raised.value)


@given(verdicts=st.lists(st.sampled_from(VERDICTS), min_size=1, max_size=6), strength=st.sampled_from(STRENGTHS),
       equal=st.booleans())
def test_a_strength_passes_exactly_when_every_cited_row_allows_it(verdicts: list[str], strength: str,
                                                                  equal: bool) -> None:
    rows = [row(f"claim {i}", v, expect="equal" if equal else "greater", margin=1.0 if equal else 0.0, mde=1.0)
            for i, v in enumerate(verdicts)]
    words = {"could not tell": "We could not tell.", "no effect": "No effect within ±1 on the median seed."}.get(
        strength, "Yes.")
    allowed = {"agrees": set(verdicts) == {"agrees"}, "disagrees": set(verdicts) == {"disagrees"},
               "no effect": equal and set(verdicts) == {"agrees"},
               "could not tell": set(verdicts) == {"inconclusive"}}[strength]
    assert (problems(Opening("Q?", (Finding(words, ("claim",), strength),)), rows) == []) == allowed


def test_a_sentence_whose_rows_are_not_run_waits_for_them_instead_of_refusing_the_report() -> None:
    """`reproduce --only X` draws a report where the other experiments' rows are "not run": their sentences
    say they wait, whatever their strength, and the rest of the opening is still checked."""
    rows = [row("A is faster than B", "not run", q=None), row("A is faster than C", "agrees")]
    opening = Opening("Does A accelerate?", (Finding("Yes, against B.", ("faster than B",), "agrees"),
                                             Finding("Yes, against C.", ("faster than C",), "agrees")))
    text = render(opening, rows)
    assert "(A finding waits for row 1: not run yet.)" in text and "Yes, against B." not in text
    assert "Yes, against C. (row 2: agrees, q ≤ 0.01.)" in text
    wrong = Opening("Does A accelerate?", (Finding("No effect against C.", ("faster than C",), "no effect"),))
    with pytest.raises(UserError, match="says no effect"):
        render(wrong, rows)


def test_a_sentence_says_how_its_rows_were_judged() -> None:
    """Issue 46: BHerd's opening cited rows added after the runs had been seen, and rows whose seeds were raised
    after a look, without a word; the brackets now say both, once each."""
    stages = {"stages": [[0, 1, 2, 3, 4], [5, 6]], "stage_weights": [0.5, 0.75 ** 0.5]}
    rows = [row("A is faster than B", "agrees") | {"seeds_raised": "from 5 to 15"} | stages,
            row("A is faster than C", "agrees") | {"seeds_raised": "from 5 to 13", "post_hoc": "after the verdicts"}
            | stages]
    text = render(Opening("Q?", (Finding("Yes.", ("A is faster",), "agrees"),)), rows)
    assert text.endswith("(rows 1, 2: agree, q ≤ 0.01; added after the runs had been seen: its own Benjamini-Hochberg "
                         "family; seeds raised after a look (from 5 to 15; from 5 to 13): p combines its stages' own "
                         "tests (inverse normal).)")


@pytest.mark.parametrize("strength", ["agrees", "could not tell"])
def test_no_sentence_rests_on_a_raised_row_whose_p_is_not_adjusted(strength: str) -> None:
    """Issue 46: a row whose seeds were raised after a look with no stages to combine keeps p not adjusted for the
    look; no sentence of the opening may rest on it, whatever it says."""
    verdict = "agrees" if strength == "agrees" else "inconclusive"
    rows = [row("A is faster than B", verdict) | {"seeds_raised": "from 5 to 15"}]
    text = "Yes." if strength == "agrees" else "We could not tell."
    wrong = problems(Opening("Q?", (Finding(text, ("A is faster",), strength),)), rows)
    assert any("p not adjusted" in line and "row(s) 1" in line for line in wrong), wrong
    staged = [rows[0] | {"stages": [[0], [1]], "stage_weights": [0.5, 0.75 ** 0.5]}]
    assert not [line for line in problems(Opening("Q?", (Finding(text, ("A is faster",), strength),)), staged)
                if "p not adjusted" in line]


def test_rows_whose_stages_cannot_reach_the_level_are_cited_as_detecting_nothing() -> None:
    """BHerd's opening cited "smallest detectable: 0.0001851 final test acc" for rows whose stages (5, 5, 1) can
    never give p < 0.0625: such rows detect nothing, said once; a raised mean row's effect is the pooled seeds'."""
    rows = [row("A is faster than F", "inconclusive", q=0.1) | {"smallest_p_at_stages": 0.0625},
            row("A is faster than F: lower train loss", "inconclusive", q=0.1) | {"smallest_p_at_stages": 0.0625},
            row("A is faster than G", "inconclusive", q=0.3, mde=1.5) | {"mde_pooled": True}]
    opening = Opening("Does A accelerate?", (Finding("Against F and G we could not tell.", ("A is faster than",),
                                                      "could not tell"),))
    assert render(opening, rows).endswith(
        "(rows 1, 2, 3: inconclusive, q ≥ 0.1; smallest detectable: 1.5 rounds to 0.8 test accuracy (seeds pooled); "
        "none at the stages of 2 rows (no p below 0.0625 there).)")
