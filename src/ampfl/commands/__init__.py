"""CLI command modules: one per analysis or feature, each thin over the Python API.

Every module in this package (names not starting with ``_``) defines ``register(registry)`` and adds its
subcommands through :class:`Registry`. Modules must import heavy dependencies (numpy, scipy, dp-accounting,
``ampfl.accounting``, torch, matplotlib, the simulator ``ampfl.fl``) inside their handlers, never at module
level or in ``register``, so ``ampfl --version`` and ``ampfl account ... --help`` start in well under a
second and work without the ``train`` extra (``tests/cli/test_startup.py`` checks it, ``bench/startup.py``
times it).

A handler takes the parsed ``argparse.Namespace`` and returns a ``dict`` (the JSON object printed with
``--json``). It raises ``ValueError`` for bad input (one line, exit 2) and never prints tracebacks.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

Handler = Callable[[argparse.Namespace], dict[str, Any]]


class CommandFailed(Exception):
    """A command ran but did not achieve its goal (e.g. a dataset could not be fetched).

    The CLI prints ``result`` as JSON when ``--json`` was given, one ``ampfl: error:`` line per entry of
    ``lines`` on stderr, and exits with ``code`` (default 1).
    """

    def __init__(self, lines: list[str], *, result: dict[str, Any] | None = None, code: int = 1) -> None:
        super().__init__("; ".join(lines))
        self.lines = [" ".join(line.split()) for line in lines]
        self.result = result
        self.code = code


#: The verbs that group subcommands (``ampfl account random-checkin ...``).
GROUP_VERBS: dict[str, str] = {
    "account": "privacy of a given mechanism: epsilon or delta",
    "calibrate": "smallest noise for a target (epsilon, delta)",
    "audit": "numerical lower bounds that try to break a published bound",
    "plan": "choose sampling and noise parameters",
}


@dataclass
class Registry:
    """Where command modules attach their subcommands."""

    top: Any  # argparse._SubParsersAction of the root parser
    groups: dict[str, Any]  # verb -> argparse._SubParsersAction

    def command(self, verb: str | None, name: str, handler: Handler, *, help: str) -> argparse.ArgumentParser:
        """Add ``ampfl [verb] name`` with a ``--json`` flag and return its parser for more arguments.

        ``verb=None`` adds a top-level command (``ampfl run``, ``ampfl demo``).
        """
        actions = self.top if verb is None else self.groups[verb]
        parser: argparse.ArgumentParser = actions.add_parser(name, help=help, description=help)
        parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")
        parser.set_defaults(handler=handler)
        return parser


def command_modules() -> list[Any]:
    """Import every command module of this package, in name order."""
    modules = []
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if not info.name.startswith("_"):
            modules.append(importlib.import_module(f"{__name__}.{info.name}"))
    return modules


def parse_orders(text: str) -> list[int]:
    """``--orders`` parser: comma-separated integers >= 2 (argparse ``type=``)."""
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--orders must be a comma-separated list of integers >= 2. Found {text!r}."
        ) from None
    if not values or min(values) < 2:
        raise argparse.ArgumentTypeError(
            f"--orders must be a comma-separated list of integers >= 2. Found {text!r}."
        )
    return values


def parse_float_list(flag: str) -> Callable[[str], list[float]]:
    """argparse ``type=`` for comma-separated floats, with an error naming ``flag``."""

    def parse(text: str) -> list[float]:
        try:
            values = [float(part) for part in text.split(",") if part.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{flag} must be a comma-separated list of numbers. Found {text!r}."
            ) from None
        if not values:
            raise argparse.ArgumentTypeError(
                f"{flag} must be a non-empty comma-separated list. Found {text!r}."
            )
        return values

    return parse


def _flag_pattern(name: str) -> re.Pattern[str]:
    # A parameter name as a whole word, optionally followed by an index such as ``epsilons[0]``.
    return re.compile(rf"(?<![\w.-]){re.escape(name)}(?=\[|(?![\w-]))")


def rename_parameters(message: str, flags: dict[str, str]) -> str:
    """Rewrite Python parameter names in an error message as the command's flag names.

    ``flags`` maps a keyword of the Python API (``noise_multiplier``) to its flag (``--noise-multiplier``).
    Names with an underscore are rewritten wherever they occur as a whole word; short names (``p``,
    ``delta``) only where the message starts with them, so ordinary words in the rest of the sentence are left
    alone.
    """
    for name, flag in flags.items():
        pattern = _flag_pattern(name)
        if "_" in name:
            message = pattern.sub(flag, message)
        elif pattern.match(message):
            message = pattern.sub(flag, message, count=1)
    return message


@contextmanager
def flag_errors(flags: dict[str, str]) -> Iterator[None]:
    """Re-raise a ``ValueError`` from the Python API with its parameter names replaced by flag names.

    With ``flags`` mapping every keyword the command passes to the flag that sets it, the one-line error the
    user sees names the flag (``--noise-multiplier must be in (0, inf). Found 0.0.``), not the keyword
    (``noise_multiplier``).
    """
    try:
        yield
    except ValueError as exc:
        raise ValueError(rename_parameters(str(exc), flags)) from None
