"""A report's opening answer as data: sentences that cite their claim rows and say how strongly they speak.

A paper's module gives ``OPENING = Opening(question, [Finding(text, rows, strength), ...])``. Each finding
cites the rows whose claim text contains one of its ``rows`` fragments (and, if it names one, whose measure
contains its ``measure``: a speed claim's rounds row or its loss row), and its ``strength`` must be what
those rows' verdicts allow (:func:`problems`), so that no sentence says more than its rows:

- ``agrees`` / ``disagrees``: every cited row has that verdict;
- ``no effect``: every cited row is a "no difference" row (``expect: equal``, a margin stated with its reason
  in the claims) that agrees; only such a sentence may use the words of no effect (:data:`NULL_WORDS`), and it
  says "median seed" (its test is about the median seed's difference, not every seed's);
- ``could not tell``: every cited row is inconclusive, and the sentence says "could not tell".

:func:`render` writes the sentences with their rows' numbers in the report's claims table and, from the
rows themselves, their verdicts and q-values (for "could not tell": the smallest effect each row would have
detected), so the numbers in the brackets cannot go stale; a sentence citing a row added after the runs had
been seen, or a row whose seeds were raised after a look, says so in its brackets, as the row does. No sentence
rests on a row whose seeds were raised after a look with its p not adjusted (no stages to combine).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fedaccel.errors import UserError
from fedaccel.report.claims import COMBINED, RAISED, labels

STRENGTHS = ("agrees", "disagrees", "no effect", "could not tell")
NULL_WORDS = ("no effect", "not accelerate", "doesn't accelerate", "no faster", "not faster", "no slower",
              "no difference", "cannot be told", "can't be told", "as fast as", "is the same as", "are the same",
              "equally fast", "no better", "no worse")  # a claim of no effect, in words
UNSURE = "could not tell"


@dataclass(frozen=True)
class Finding:
    """One sentence of the opening answer: its text, fragments of the claim texts it rests on, its strength."""

    text: str
    rows: tuple[str, ...]
    strength: str
    measure: str = ""  # if given: only the rows whose measure contains it (a speed claim's rounds or loss row)


@dataclass(frozen=True)
class Opening:
    """The question a report answers (in bold) and its findings, one sentence each."""

    question: str
    findings: tuple[Finding, ...]


NOT_RUN = "not run"  # the verdict of a claim whose experiment has no data


def cited(finding: Finding, rows: Sequence[Mapping[str, Any]]) -> list[int]:
    """The indices of the rows (claims.json's entries, in table order) whose text contains a fragment (and whose
    measure contains the finding's ``measure``)."""
    return [i for i, row in enumerate(rows) if any(fragment in row["text"] for fragment in finding.rows)
            and finding.measure in row["measure"]]


def problems(opening: Opening, rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """Why sentences of ``opening`` say more (or other) than the rows they cite (``rows``: claims.json's
    entries, with ``text``, ``verdict``, ``expect`` and ``margin``); empty when none."""
    found = []
    for finding in opening.findings:
        where = f"{finding.text[:60]!r}"
        if finding.strength not in STRENGTHS:
            found.append(f"{where}: strength {finding.strength!r} is none of {', '.join(STRENGTHS)}")
            continue
        for fragment in finding.rows:
            if not any(fragment in row["text"] for row in rows):
                found.append(f"{where}: no claim row's text contains {fragment!r}")
        mine = [rows[i] for i in cited(finding, rows)]
        if not mine:
            found.append(f"{where}: cites no claim row")
            continue
        verdicts = {row["verdict"] for row in mine}
        unadjusted = [i + 1 for i in cited(finding, rows) if rows[i].get("seeds_raised") and not rows[i].get("stages")]
        if unadjusted:
            found.append(f"{where}: rests on row(s) {', '.join(map(str, unadjusted))}, whose seeds were raised after a "
                         "look with p not adjusted (no stages to combine)")
        if NOT_RUN in verdicts:
            continue  # rendered as "not run yet", never as the finding (reproduce --only draws partial reports)
        lowered = finding.text.lower()
        if finding.strength in ("agrees", "disagrees") and verdicts != {finding.strength}:
            found.append(f"{where}: says {finding.strength}, its rows are {', '.join(sorted(verdicts))}")
        if finding.strength == "no effect" and (verdicts != {"agrees"} or any(
                row["expect"] != "equal" or not row["margin"] for row in mine)):
            found.append(f"{where}: says no effect, which takes 'no difference' rows with a margin that agree; "
                         f"its rows: {', '.join(sorted(verdicts))}")
        if finding.strength == UNSURE and verdicts != {"inconclusive"}:
            found.append(f"{where}: says it could not tell, its rows are {', '.join(sorted(verdicts))}")
        if (finding.strength == UNSURE) != (UNSURE in lowered):
            found.append(f"{where}: 'could not tell' is the words of, and only of, a sentence on inconclusive rows")
        if finding.strength == "no effect" and "median seed" not in lowered:
            found.append(f"{where}: a 'no difference' row's test is about the median seed, and its sentence must "
                         "say so ('the median seed'), not read as a bound on every seed")
        if finding.strength != "no effect" and any(word in lowered for word in NULL_WORDS):
            word = next(word for word in NULL_WORDS if word in lowered)
            found.append(f"{where}: {word!r} claims no effect, which only an agreeing 'no difference' row can")
    return found


def render(opening: Opening, rows: Sequence[Mapping[str, Any]], fmt: Mapping[str, str] | None = None) -> str:
    """The opening as Markdown: the question in bold, then each sentence with its rows (numbered as in the
    claims table, from 1), their verdicts and q-values; a sentence stronger than its rows is a
    :class:`UserError` naming it (``rows``: claims.json's entries; ``fmt``: a number format per measure)."""
    wrong = problems(opening, rows)
    if wrong:
        raise UserError(f"the opening says more than its claim rows: {wrong[0]}"
                        + (f" (and {len(wrong) - 1} more)" if len(wrong) > 1 else ""))
    sentences = []
    for finding in opening.findings:
        indices = cited(finding, rows)
        numbers = ("rows " if len(indices) > 1 else "row ") + ", ".join(str(i + 1) for i in indices)
        if any(rows[i]["verdict"] == NOT_RUN for i in indices):
            sentences.append(f"(A finding waits for {numbers}: not run yet.)")
            continue
        qs = [rows[i]["q"] for i in indices if rows[i]["q"] is not None]
        if finding.strength == UNSURE:
            detail = _detectables([rows[i] for i in indices], fmt or {})
            decided = f", q ≥ {min(qs):.3g}" if qs else ""  # 3 digits: 0.0504 is not "0.05"
            note = f"{numbers}: inconclusive{decided}; smallest detectable: {detail}"
        else:
            verdict = "agree" if finding.strength in ("agrees", "no effect") else "disagree"
            note = f"{numbers}: {verdict}{'s' if len(indices) == 1 else ''}, q ≤ {max(qs):.2g}"
        sentences.append(f"{finding.text} ({note}{how_judged([rows[i] for i in indices])}.)")
    return f"**{opening.question}** " + " ".join(sentences)


def how_judged(rows: Sequence[Mapping[str, Any]]) -> str:
    """What a sentence's rows say of how they were judged (:func:`fedaccel.report.claims.labels`), once each:
    "; added after the runs had been seen …; seeds raised after a look (from 5 to 15; from 5 to 13): p combines …"."""
    post_hoc = any(row.get("post_hoc") for row in rows)
    said = labels({"post_hoc": post_hoc})
    for staged, words in ((True, COMBINED), (False, RAISED)):
        raised = list(dict.fromkeys(row["seeds_raised"] for row in rows
                                    if row.get("seeds_raised") and bool(row.get("stages")) == staged))
        if raised:
            said.append(words.format("; ".join(raised), *([""] if staged else [])))
    return "".join(f"; {label}" for label in said)


def _detectables(rows: Sequence[Mapping[str, Any]], fmt: Mapping[str, str]) -> str:
    """The rows' smallest detectable effects in a few words: "0.234 rounds to 0.935 test accuracy", marked when it
    is for the seeds pooled rather than the stages the row's p combines; rows whose stages cannot reach the level
    at all (:func:`fedaccel.report.claims.staged_detectable`) said once, with the smallest p those give."""
    words = [_detectable(row, fmt.get(row["measure"], ".3g")) for row in rows if _reaches(row)]
    floors = [row["smallest_p_at_stages"] for row in rows if not _reaches(row)]
    if floors:
        rows_ = "its stages" if len(floors) == 1 else f"the stages of {len(floors)} rows"
        words.append(f"none at {rows_} (no p below {min(floors):.3g} there)")
    return "; ".join(words)


def _reaches(row: Mapping[str, Any]) -> bool:
    return row.get("mde") is not None or row.get("smallest_p_at_stages") is None


def _detectable(row: Mapping[str, Any], fmt: str) -> str:
    what = "margin" if row["expect"] == "equal" else row["measure"].split(" (")[0]
    if row.get("mde") is not None:
        return f"{row['mde']:{fmt}} {what}" + (" (seeds pooled)" if row.get("mde_pooled") else "")
    return f"none at {row['seeds']} seeds ({what})"
