"""No documentation page over ~3,000 words: a long page is split into pages by topic (docs/development.md).

Exempt: the reproduction reports, which `fedaccel reproduce PAPER --render-only` writes from the packed runs and
tests/test_reproductions.py compares with what the code draws (their length is their claims' table)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_WORDS = 3000
# a report is what `fedaccel reproduce` writes beside its claims (<report>.claims.json): bherd.md, bherd-paper.md, ...
GENERATED = {f"docs/reproductions/{p.name.removesuffix('.claims.json')}.md"
             for p in (ROOT / "docs" / "reproductions").glob("*.claims.json")}


def test_no_page_is_over_3000_words() -> None:
    pages = sorted((ROOT / "docs").rglob("*.md"))
    assert len(pages) > 20
    long = {str(p.relative_to(ROOT)): len(p.read_text(encoding="utf-8").split()) for p in pages}
    long = {page: words for page, words in long.items() if words > MAX_WORDS and page not in GENERATED}
    assert not long, f"pages over {MAX_WORDS} words (split them by topic, nav and links with them): {long}"


def test_the_exempt_reports_are_the_generated_ones() -> None:
    from fedaccel.reproductions.reproduce import DOCS

    assert len(GENERATED) >= 6  # the three papers, BHerd's paper scale, the field, privacy
    assert all((ROOT / page).is_file() and (ROOT / page).parent == DOCS for page in GENERATED)
