"""The code explains itself: no docstring or comment in ``src/`` names the project's tracker (issue numbers),
narrates its history ("before this change") or cites a path outside the repository (the papers and
their recovered math are cited by name and section, as sources). A reference to another
project's issue keeps its ``#`` (``dp-accounting issue #378``) and is allowed."""

from __future__ import annotations

import re
from pathlib import Path

import ampfl

SRC = Path(ampfl.__file__).parent

FORBIDDEN = re.compile(
    r"(?<![#\w])issues?[ -]\d+"  # the tracker's issue numbers
    r"|\.\./shared|(?-i:\b(?:ROUND|SPINE|INTEGRATIONS|ARCHITECTURE)\.md)"  # the tracker's notes
    r"|/work/|/tmp/helpers"
    r"|before this change|in this session|this stop\b",
    re.IGNORECASE,
)


def offending_lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if FORBIDDEN.search(line)]


def test_the_pattern_finds_tracker_words_and_spares_other_projects_issues() -> None:
    assert offending_lines("x = 1  # see issue 32\n(issue 10, part 7c)\nissue-4 contract")
    assert offending_lines('"""From ../shared/ROUND.md."""') and offending_lines("before this change it was")
    assert offending_lines("dp-accounting issue #378 reports it; 4 issues were found") == []
    assert offending_lines("(docs/architecture.md)") == [] and offending_lines("see ARCHITECTURE.md")


def test_no_source_file_names_the_tracker() -> None:
    found = {
        str(path.relative_to(SRC)): lines
        for path in sorted(SRC.rglob("*.py"))
        if (lines := offending_lines(path.read_text(encoding="utf-8")))
    }
    assert found == {}
