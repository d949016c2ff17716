"""The ``ampfl`` command line: a thin layer over the Python API.

``ampfl account | calibrate | audit | plan | run | demo | reproduce | data``. Subcommands live in
:mod:`ampfl.commands` (one module per analysis or feature). With ``--json`` a command prints exactly one
JSON object on stdout. Bad input prints one line ``ampfl: error: ...`` on stderr and exits with code 2;
numerical trouble that cannot be resolved exits with code 1, also with one line and no traceback.

Start-up stays light: building the parser imports only the stdlib and the command modules' ``register``
functions; numpy, scipy, dp-accounting, matplotlib, torch and :mod:`ampfl.fl` are imported by the handler
that needs them (``tests/cli/test_startup.py``, ``bench/startup.py``). A command line that names a command
(``ampfl account poisson ...``) builds that command's parser alone (:data:`ampfl.commands.COMMANDS`): the
same parser, without importing the other command modules or building their parsers.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import os
import sys
import warnings
from collections.abc import Iterator, Sequence
from typing import Any, NoReturn

from ampfl import __version__
from ampfl.commands import COMMANDS, GROUP_VERBS, CommandFailed, Registry, command_modules, command_of
from ampfl.io import dumps_json
from ampfl.numeric_ranges import guard_numeric_flags


class UsageError(Exception):
    """Raised by the parser instead of printing usage and exiting."""


def _numerical_errors() -> tuple[type[BaseException], ...]:
    """``(NumericalError,)`` if :mod:`ampfl.accounting._checks` is loaded, else ``()`` (matches nothing).

    A ``NumericalError`` can only have been raised once its module is imported, so the CLI need not import
    it (and numpy with it) up front; an ``except`` clause evaluates this only when an exception reaches it.
    """
    checks = sys.modules.get("ampfl.accounting._checks")
    return () if checks is None else (checks.NumericalError,)


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The full ``ampfl`` parser, with every command module registered.

    With ``command`` (a key of :data:`~ampfl.commands.COMMANDS`, e.g. ``"account poisson"``): the parser with
    that command alone, which parses that command's command lines exactly as the full one (the same
    subparser, help and errors); only its module is imported.
    """
    parser = _Parser(prog="ampfl", description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--version", action="version", version=f"ampfl {__version__}")
    top = parser.add_subparsers(dest="verb", metavar="COMMAND", parser_class=_Parser)
    top.required = True
    groups = {}
    for verb, help_text in GROUP_VERBS.items():
        if command is not None and not command.startswith(f"{verb} "):
            continue
        sub = top.add_parser(verb, help=help_text, description=help_text)
        actions = sub.add_subparsers(dest="target", metavar="MECHANISM", parser_class=_Parser)
        actions.required = True
        groups[verb] = actions
    registry = Registry(top=top, groups=groups, only=command)
    if command is None:
        modules = command_modules()
    else:
        modules = [importlib.import_module(f"ampfl.commands.{COMMANDS[command]}")]
    for module in modules:
        module.register(registry)
    guard_numeric_flags(parser)
    return parser


#: Lists longer than this are summarised in a table cell (``--json`` prints them whole).
_LIST_CELL_ITEMS = 8


def _cell(value: Any) -> str:
    """A scalar or a list of scalars as the text of one table cell."""
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, list | tuple):
        items = [_cell(item) for item in value]
        if len(items) > _LIST_CELL_ITEMS:
            return f"{len(items)} values: {', '.join(items[:3])}, …, {items[-1]} (all with --json)"
        return ", ".join(items) if items else "(none)"
    return "null" if value is None else str(value)


def _rows(key: str, value: Any) -> Iterator[tuple[str, str]]:
    """Table rows of one result entry: nested objects flattened to dotted keys (``analyses.ols.epsilon``)."""
    if isinstance(value, dict):
        for sub, item in value.items():
            yield from _rows(f"{key}.{sub}", item)
    elif isinstance(value, list | tuple) and any(isinstance(item, dict | list | tuple) for item in value):
        for index, item in enumerate(value):
            yield from _rows(f"{key}[{index}]", item)
    else:
        yield key, _cell(value)


def _render(result: dict[str, Any]) -> None:
    """The human-readable form of a result: one row per scalar, no JSON in the cells."""
    from rich.console import Console
    from rich.table import Table

    table = Table(show_header=True, header_style="bold")
    table.add_column("key")
    table.add_column("value")
    for key, value in result.items():
        for row in _rows(str(key), value):
            table.add_row(*row)
    Console().print(table)


def main(argv: Sequence[str] | None = None, *, numpy_untracked: bool = False) -> int:
    """Entry point of the ``ampfl`` console script; returns the exit code. ``numpy_untracked``: load numpy
    through :func:`_load_numpy_untracked` once the command line has parsed, before the handler runs (only
    for the whole process of a one-shot command, :func:`_whole_process`: a library caller of :func:`main`
    keeps its own collector state)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            code = _main(argv, numpy_untracked)
        except BrokenPipeError:  # `ampfl ... | head`: the reader left; no traceback, the shell's code 141
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())  # so the interpreter's final flush cannot fail again
            return 141
    # ampfl's own warnings (e.g. a published bound that claims no noise is needed) become one line each;
    # third-party deprecation chatter is not shown to CLI users.
    package_dir = os.path.dirname(os.path.abspath(__file__)) + os.sep
    ours = [w for w in caught if os.path.abspath(w.filename).startswith(package_dir)]
    for message in dict.fromkeys(" ".join(str(w.message).split()) for w in ours):
        print(f"ampfl: warning: {message}", file=sys.stderr)
    return code


def _main(argv: Sequence[str] | None, numpy_untracked: bool) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        args = build_parser(command_of(argv)).parse_args(argv)
        if numpy_untracked:
            _load_numpy_untracked()
        result = args.handler(args)
    except CommandFailed as exc:
        if getattr(args, "json", False) and exc.result is not None:
            print(dumps_json(exc.result))
        for line in exc.lines:
            print(f"ampfl: error: {line}", file=sys.stderr)
        return exc.code
    except UsageError as exc:
        print(f"ampfl: error: {exc}", file=sys.stderr)
        return 2
    except ValueError as exc:
        print(f"ampfl: error: {_one_line(exc)}", file=sys.stderr)
        return 2
    except _numerical_errors() as exc:
        print(f"ampfl: numerical error: {_one_line(exc)}", file=sys.stderr)
        return 1
    except ArithmeticError as exc:  # an overflow the Python API did not turn into a NumericalError
        message = " ".join(str(exc).split()) or type(exc).__name__
        print(f"ampfl: numerical error: {type(exc).__name__}: {message}", file=sys.stderr)
        return 1
    except OSError as exc:  # a path the user gave cannot be read or written (e.g. --out in a read-only place)
        where = f": {exc.filename}" if exc.filename else ""
        reason = exc.strerror or type(exc).__name__
        print(f"ampfl: error: cannot use the path{where} ({reason})", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("ampfl: interrupted", file=sys.stderr)
        return 130
    if getattr(args, "json", False):
        print(dumps_json(result))
    elif result:
        _render(result)
    return 0


def _console_entry() -> NoReturn:  # pragma: no cover - exercised through the console script
    _prefer_huge_pages()
    sys.exit(_whole_process(sys.argv[1:]))


#: The verbs whose commands compute one answer with numpy and exit (no training, no long-lived process).
_ONE_SHOT_VERBS = ("account", "calibrate", "plan")


def _whole_process(argv: list[str]) -> int:
    """``main(argv)`` as the whole life of a process (the console script, ``python -m ampfl.cli``).

    A one-shot command (:data:`_ONE_SHOT_VERBS`) lets OpenBLAS's idle threads sleep
    (:func:`_idle_blas_threads_sleep`), loads numpy with the collector off (:func:`_load_numpy_untracked`)
    and, once it has printed its answer, freezes the objects the garbage
    collector tracks (``gc.freeze``): the collections of the interpreter's exit then skip the ~20 000 objects
    numpy and the accountants leave, ~12 ms of ~190 ms of ``account poisson``. Modules are still
    torn down, and atexit handlers and open files run and flush as usual.
    """
    one_shot = bool(argv[:1]) and argv[0] in _ONE_SHOT_VERBS
    _idle_blas_threads_sleep(argv)
    code = main(argv, numpy_untracked=one_shot)
    if one_shot:
        gc.freeze()
    return code


def _load_numpy_untracked() -> None:
    """Import numpy (every one-shot handler needs it) with the garbage collector off, then freeze what it
    created (``gc.freeze``) and turn the collector back on.

    Importing numpy creates ~20 000 long-lived objects; with the collector on, the allocations trigger
    collections that traverse them again and again (~47 collections, ~8 ms of ~170 CPU-ms of ``ampfl account
    poisson``). Frozen, they are never traversed; the collector runs as usual for everything the
    handler creates afterwards, so a long ``calibrate`` or ``plan`` keeps its memory bounded. Only for the
    whole process of a one-shot command (a library caller of :func:`main` keeps its own collector state).
    """
    gc.disable()
    try:
        import numpy  # noqa: F401
    finally:
        gc.freeze()
        gc.enable()


def _idle_blas_threads_sleep(argv: Sequence[str]) -> None:
    """For ``account``, ``calibrate`` and ``plan``: OpenBLAS's switch for how long an idle worker thread spins
    before it sleeps (2^n cycles; default 2^28, ~0.1 s), read when numpy loads it (no handler has imported
    numpy yet). Loading numpy starts the workers, and with the default they spin ~0.1 s on another core with
    no work to do: 40–50 ms of CPU in ``ampfl account poisson`` (~20 %), which on a busy 2-core machine is
    wall time too (docs/performance.md). With 2^4 cycles they sleep at once; the number of
    threads, hence how any BLAS call splits its work and its result, is unchanged. An explicit
    ``OPENBLAS_THREAD_TIMEOUT`` wins."""
    if argv[:1] and argv[0] in _ONE_SHOT_VERBS:
        os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")


def _prefer_huge_pages() -> None:
    """PyTorch's switch for 2 MB pages on CPU tensors of at least 2 MB, read at torch's first allocation (no
    handler has imported torch yet): without it a CNN round's tens of MB of activations page-fault anew at
    every step (docs/performance.md). An explicit ``THP_MEM_ALLOC_ENABLE`` wins."""
    os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")


if __name__ == "__main__":  # pragma: no cover
    _prefer_huge_pages()
    sys.exit(_whole_process(sys.argv[1:]))
