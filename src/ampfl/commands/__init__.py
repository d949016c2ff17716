"""CLI command modules: one per analysis or feature, each thin over the Python API.

Every module in this package (names not starting with ``_``) defines ``register(registry)`` and adds its
subcommands through :class:`Registry`. Modules must import heavy dependencies (numpy, scipy, dp-accounting,
``ampfl.accounting``, torch, matplotlib, the simulator ``ampfl.fl``) inside their handlers, never at module
level or in ``register``, so ``ampfl --version`` and ``ampfl account ... --help`` start in well under a
second and work without the ``train`` extra (``tests/cli/test_startup.py`` checks it, ``bench/startup.py``
times it).

:data:`COMMANDS` names the module of every command, so that the CLI imports and builds only the parser of the
command it runs (:func:`ampfl.cli.build_parser`; ``--help`` of a group and the error for an unknown command
build them all). A module that adds a command adds it there too (``tests/test_startup_imports.py`` checks it).

A handler takes the parsed ``argparse.Namespace`` and returns a ``dict`` (the JSON object printed with
``--json``). It raises ``ValueError`` for bad input (one line, exit 2) and never prints tracebacks.

The flags that several commands share are declared here once (``add_noise_multiplier``, ``add_delta``,
``add_clip``, ...), and :func:`keywords` reads a handler's keywords from the flags that set them.
"""

from __future__ import annotations

import argparse
import importlib
import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

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


#: Every command (``"verb name"``, or ``"name"`` for a top-level one) -> the module of this package that
#: registers it.
COMMANDS: dict[str, str] = {
    "account ms-pafl": "ms_pafl",
    "account model-split": "partition",
    "account bis": "partition",
    "account poisson": "partition",
    "account dropout": "partition",
    "account pm-sfl-smashed": "pm_sfl",
    "account random-checkin": "random_checkin",
    "calibrate model-split": "partition",
    "calibrate bis": "partition",
    "calibrate poisson": "partition",
    "calibrate random-checkin": "random_checkin",
    "audit random-checkin": "audit",
    "audit run": "audit",
    "plan groups": "groups",
    "attack": "attack",
    "data": "data",
    "deploy": "deploy",
    "reproduce": "reproduce",
    "run": "run",
    "demo": "run",
}


def command_of(argv: Sequence[str]) -> str | None:
    """The key of :data:`COMMANDS` that a command line runs (``["account", "poisson", ...]`` → ``"account
    poisson"``), or ``None`` (no command, ``--version``, a group's ``--help``, an unknown name)."""
    if len(argv) >= 2 and f"{argv[0]} {argv[1]}" in COMMANDS:
        return f"{argv[0]} {argv[1]}"
    if argv and argv[0] in COMMANDS:
        return argv[0]
    return None


_Action = TypeVar("_Action", bound=argparse.Action)
_Item = TypeVar("_Item")


class _Unbuilt(argparse.ArgumentParser):
    """Takes the place of the parser of a command that is not built (:attr:`Registry.only`): the arguments a
    module adds to it are dropped, so building one command of a module costs that command alone."""

    def add_argument(self, *args: Any, **kwargs: Any) -> Any:
        return None

    def _add_action(self, action: _Action) -> _Action:  # what a mutually exclusive group adds
        return action

    def add_subparsers(self, **kwargs: Any) -> Any:
        self._subparsers = None  # each dropped command may add its own
        return super().add_subparsers(**kwargs)


@dataclass
class Registry:
    """Where command modules attach their subcommands.

    With ``only`` (a key of :data:`COMMANDS`), only that command is built; :meth:`command` hands every other
    one a parser that drops its arguments, and ``groups`` needs only that command's verb.
    """

    top: Any  # argparse._SubParsersAction of the root parser
    groups: dict[str, Any]  # verb -> argparse._SubParsersAction
    only: str | None = None
    _unbuilt: argparse.ArgumentParser | None = field(default=None, init=False, repr=False)

    def command(self, verb: str | None, name: str, handler: Handler, *, help: str) -> argparse.ArgumentParser:
        """Add ``ampfl [verb] name`` with a ``--json`` flag and return its parser for more arguments.

        ``verb=None`` adds a top-level command (``ampfl run``, ``ampfl demo``).
        """
        if self.only is not None and self.only != (name if verb is None else f"{verb} {name}"):
            if self._unbuilt is None:
                self._unbuilt = _Unbuilt(add_help=False)
            return self._unbuilt
        actions = self.top if verb is None else self.groups[verb]
        parser: argparse.ArgumentParser = actions.add_parser(name, help=help, description=help)
        parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")
        parser.set_defaults(handler=handler)
        return parser


def command_modules() -> list[Any]:
    """Import every command module of this package, in name order."""
    import pkgutil

    modules = []
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if not info.name.startswith("_"):
            modules.append(importlib.import_module(f"{__name__}.{info.name}"))
    return modules


def _split_list(text: str, convert: Callable[[str], _Item]) -> list[_Item] | None:
    """The comma-separated items of ``text`` (empty ones skipped), or ``None`` if one does not convert."""
    try:
        return [convert(part) for part in text.split(",") if part.strip()]
    except ValueError:
        return None


def parse_orders(text: str) -> list[int]:
    """``--orders`` parser: comma-separated integers >= 2 (argparse ``type=``)."""
    values = _split_list(text, int)
    if not values or min(values) < 2:
        raise argparse.ArgumentTypeError(
            f"--orders must be a comma-separated list of integers >= 2. Found {text!r}."
        )
    return values


def parse_float_list(flag: str) -> Callable[[str], list[float]]:
    """argparse ``type=`` for comma-separated floats, with an error naming ``flag``."""

    def parse(text: str) -> list[float]:
        values = _split_list(text, float)
        if values is None:
            raise argparse.ArgumentTypeError(
                f"{flag} must be a comma-separated list of numbers. Found {text!r}."
            )
        if not values:
            raise argparse.ArgumentTypeError(
                f"{flag} must be a non-empty comma-separated list. Found {text!r}."
            )
        return values

    return parse


# ----------------------------------------------------------------------------------------- shared flags
# The flags that several commands share, each declared once: one name, one type and one help text per
# quantity across the CLI (docs/units.md); a command adds its own words to the common help with ``note``.
# Range checks stay with the Python API (``ampfl.accounting._checks``, ``ampfl.numeric_ranges``).

#: The accountants every ``--accountant`` offers; ``auto`` resolves to the tightest sound one that applies.
ACCOUNTANTS = ("auto", "rdp", "pld")


def _with_note(text: str, note: str | None) -> str:
    return text if note is None else f"{text}; {note}"


def _add_quantity(parser: Any, flag: str, kind: type, text: str, *, required: bool, note: str | None) -> None:
    """``flag`` of type ``kind``, required or else None when not given; help ``text`` and the command's
    ``note``. ``parser`` may be a mutually exclusive group."""
    parser.add_argument(flag, type=kind, required=required, default=None, help=_with_note(text, note))


def add_noise_multiplier(parser: Any, *, required: bool = True, note: str | None = None) -> None:
    """``--noise-multiplier`` z = σ/C (float). ``parser`` may be a mutually exclusive group."""
    text = "noise multiplier z = sigma/C: noise std over the clip norm (> 0)"
    _add_quantity(parser, "--noise-multiplier", float, text, required=required, note=note)


def add_delta(parser: argparse.ArgumentParser, *, required: bool = True, note: str | None = None) -> None:
    """``--delta`` (float): the δ of the guarantee, required unless a command has a default."""
    text = "delta of the (epsilon, delta) guarantee, in (0, 1)"
    _add_quantity(parser, "--delta", float, text, required=required, note=note)


def add_target_epsilon(parser: argparse.ArgumentParser) -> None:
    """``--epsilon`` (float, required) of a ``calibrate`` command: the ε the noise is calibrated to."""
    parser.add_argument("--epsilon", type=float, required=True, help="target epsilon (> 0)")


def add_clip(
    parser: argparse.ArgumentParser, *, default: float | None = None, note: str | None = None
) -> None:
    """``--clip`` C (float). Without a default it only adds ``noise_std`` = z·C to the report."""
    text = (
        "clip norm C (> 0): reports noise_std = z*C"
        if default is None
        else f"clip norm C (> 0, default {default:g})"
    )
    parser.add_argument("--clip", type=float, default=default, help=_with_note(text, note))


def add_rounds(parser: argparse.ArgumentParser, *, required: bool = True, note: str | None = None) -> None:
    """``--rounds`` T (int): federated rounds."""
    _add_quantity(parser, "--rounds", int, "number of rounds T (>= 1)", required=required, note=note)


def add_accountant(parser: argparse.ArgumentParser, *, auto: str, default: str | None = None) -> None:
    """``--accountant auto|rdp|pld``; ``auto`` says what ``auto`` resolves to for this command."""
    shown = "auto" if default is None else default
    parser.add_argument(
        "--accountant",
        choices=ACCOUNTANTS,
        default=default,
        help=f"accountant (default {shown}; auto: {auto})",
    )


def add_participation(parser: argparse.ArgumentParser) -> None:
    """``--p`` (float, required): the probability that a client takes part in (checks in to) a round."""
    parser.add_argument("--p", type=float, required=True, help="client participation probability p in (0, 1]")


def add_checkin(parser: argparse.ArgumentParser) -> None:
    """The random check-in mechanism of paper 004: ``--p``, ``--q``, ``--d`` (all required)."""
    add_participation(parser)
    parser.add_argument(
        "--q", type=float, required=True, help="local record sampling probability q in (0, 1]"
    )
    parser.add_argument("--d", type=int, required=True, help="records held by the client besides x' (>= 0)")


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


def keywords(args: argparse.Namespace, flags: dict[str, str], *names: str) -> dict[str, Any]:
    """The keywords ``names`` of the Python API, each read from the flag that ``flags`` maps it to.

    ``flags`` is the table a command gives :func:`flag_errors`, so the flag that sets a keyword and the flag
    its errors name are written once (``{"sampling_rate": "--rate"}`` reads ``args.rate``).
    """
    return {name: getattr(args, flags[name].lstrip("-").replace("-", "_")) for name in names}


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
