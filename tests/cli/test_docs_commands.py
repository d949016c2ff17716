"""Every ``ampfl`` command shown in README.md and docs/ still parses, and the accounting ones print the
numbers written beside them.

Commands are read from fenced blocks (lines starting ``$A``, ``ampfl``, ``.venv/bin/ampfl`` or ``python -m
ampfl``; a trailing ``\\`` continues a line) and from inline code spans. A command with a placeholder
(``CONFIG``, ``DIR``, ``[...]``, ``a|b``, ``…``) is a synopsis and is not checked. Every other one is parsed
by the real parser; one that does not parse for want of its required arguments is a mention (``deploy
--resume``): its command must exist and each of its flags must be one of that command's options. Every
config file a command names must exist and load.

The accounting commands (``account``, ``calibrate``, ``plan``, ``audit random-checkin``: each a second or
less) are run with ``--json``. Each decimal number written beside one (the comment line above it or after it
in a block; its sentence for an inline command) that is not one of its own arguments must be a value of its
JSON report, rounded to the decimals the doc writes. Training, deployment and reproduction commands (minutes
each) are parsed, not run: the suite runs each of them elsewhere at a smaller size.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from ampfl.cli import UsageError, build_parser

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
_PROMPT = re.compile(r"^(?:\$ ?)?(?:\$A|\.venv/bin/ampfl|python -m ampfl|ampfl)\s+(?P<body>.*)$")
_PLACEHOLDER = re.compile(r"[\[\]|…<>]|\.\.\.|\b[A-Z][A-Z0-9_~]*\b|\.\.")
_NUMBER = re.compile(r"(?<![\w.])-?\d+\.\d+(?:e-?\d+)?(?![\w.]*\d)")
_RUN = ("account ", "calibrate ", "plan ", "audit random-checkin ")
_SENTENCE_END = re.compile(r"\.\s")  # a full stop before a space or a line break (not a decimal point)


class Shown(NamedTuple):
    doc: str
    argv: list[str]
    context: str  # the text beside it that may quote what it prints

    def __str__(self) -> str:
        return f"{self.doc}: ampfl {' '.join(self.argv)}"


def _from_blocks(text: str) -> Iterator[tuple[str, str]]:
    for block in re.finditer(r"```[a-z]*\n(.*?)```", text, re.S):
        lines = block.group(1).replace("\\\n", " ").splitlines()
        for i, line in enumerate(lines):
            found = _PROMPT.match(line.strip())
            if found:
                body, _, comment = found.group("body").partition(" #")
                above = lines[i - 1] if i and lines[i - 1].lstrip().startswith("#") else ""
                yield body, f"{above} {comment}"


def _from_prose(text: str) -> Iterator[tuple[str, str]]:
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    for paragraph in re.split(r"\n\s*\n", prose):
        for span in re.finditer(r"`(?:\.venv/bin/)?ampfl ([a-z][^`]*)`", paragraph):
            before = [m.end() for m in _SENTENCE_END.finditer(paragraph, 0, span.start())]
            after = _SENTENCE_END.search(paragraph, span.end())
            yield span.group(1), paragraph[before[-1] if before else 0 : after.start() if after else None]


def shown_commands() -> list[Shown]:
    """Every concrete command the docs show (synopses left out)."""
    out = []
    for path in DOCS:
        text = path.read_text()
        doc = str(path.relative_to(REPO))
        for body, context in [*_from_blocks(text), *_from_prose(text)]:
            body = " ".join(body.split())
            if not _PLACEHOLDER.search(body):
                out.append(Shown(doc, body.split(), context))
    return out


def _parses(argv: list[str]) -> bool:
    try:
        build_parser().parse_args(argv)
    except UsageError:
        return False  # a mention: parsed as one below
    return True


SHOWN = shown_commands()
RUN = [shown for shown in SHOWN if f"{' '.join(shown.argv)} ".startswith(_RUN) and _parses(shown.argv)]
#: Numbers written beside a command that are not its output, each with what it is instead.
NOT_PRINTED = {
    ("docs/pld.md", "2.673"): "the noise multiplier on the unrefined grid, where calibrate no longer stops",
    ("docs/performance.md", "5.0"): "the machine's load average while the command was timed",
}


def _subparser(parser: argparse.ArgumentParser, words: list[str]) -> tuple[argparse.ArgumentParser, int]:
    """The (sub)parser of the longest command prefix of ``words`` and how many words it took."""
    taken = 0
    while taken < len(words):
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs or words[taken] not in subs[0].choices:
            break
        parser = subs[0].choices[words[taken]]
        taken += 1
    return parser, taken


def test_the_docs_show_commands() -> None:
    """The reader finds them (a change of format would silently leave nothing to check)."""
    assert len(SHOWN) > 100 and len(RUN) > 15
    assert {"README.md", "docs/cli.md", "docs/partition.md"} <= {shown.doc for shown in RUN}


@pytest.mark.parametrize("shown", SHOWN, ids=str)
def test_a_shown_command_parses(shown: Shown, capsys: pytest.CaptureFixture[str]) -> None:
    parser = build_parser()
    if "--help" in shown.argv:
        with pytest.raises(SystemExit) as done:
            parser.parse_args(shown.argv)
        assert done.value.code == 0 and "usage: ampfl" in capsys.readouterr().out
        return
    try:
        parser.parse_args(shown.argv)
    except UsageError as exc:
        command, taken = _subparser(parser, shown.argv)
        assert taken, f"{shown}: no such command ({exc})"
        options = {flag for action in command._actions for flag in action.option_strings}
        flags = [word.split("=")[0] for word in shown.argv[taken:] if word.startswith("--")]
        assert flags or "required" in str(exc), f"{shown}: {exc}"
        unknown = sorted(set(flags) - options)
        assert not unknown, f"{shown}: {unknown} are not options of `ampfl {' '.join(shown.argv[:taken])}`"
    for word in shown.argv:
        if word.endswith(".toml") and not word.startswith("runs/"):
            from ampfl.fl.config import load_config

            assert (REPO / word).is_file(), f"{shown}: {word} does not exist"
            load_config(REPO / word)


def _values(report: Any) -> Iterator[float]:
    if isinstance(report, dict):
        for value in report.values():
            yield from _values(value)
    elif isinstance(report, list):
        for value in report:
            yield from _values(value)
    elif isinstance(report, int | float) and not isinstance(report, bool):
        yield float(report)


@pytest.mark.parametrize("shown", RUN, ids=str)
def test_a_shown_accounting_command_prints_the_numbers_beside_it(cli_json: Any, shown: Shown) -> None:
    argv = shown.argv if "--json" in shown.argv else [*shown.argv, "--json"]
    values = list(_values(cli_json(argv)))
    arguments = set(_NUMBER.findall(" ".join(shown.argv)))
    for written in _NUMBER.findall(shown.context):
        if written in arguments or (shown.doc, written) in NOT_PRINTED:
            continue
        decimals = len(written.split(".")[1].split("e")[0])
        assert any(f"{value:.{decimals}f}" == written for value in values), (
            f"{shown} is quoted as printing {written}; it prints none such ({shown.context.strip()!r})"
        )
