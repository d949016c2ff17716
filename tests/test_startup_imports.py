"""What the CLI adds to ``ampfl account poisson ... --json`` (issue 32 item 2: commands start fast).

``tests/accounting/test_startup_imports.py`` checks that the poisson commands' accountants import neither
SciPy nor dp-accounting; this file checks the CLI around them. The default (PLD) path needs numpy and the
accountants and nothing else heavy: no torch, scipy, dp-accounting, matplotlib or rich, no other command
module, none of the stdlib modules that only the writers of :mod:`ampfl.io` use. The CLI builds only the
parser of the command it runs (:data:`ampfl.commands.COMMANDS`); the tests below check that this parser is
the full parser's (help, arguments, errors). The one-shot commands let OpenBLAS's idle threads sleep.

Each import check runs in a fresh interpreter and counts only the modules imported after start-up (a
``.pth`` file of the environment may import some at start). Timings are not asserted here;
``bench/startup.py`` measures them.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import pytest

from ampfl.cli import UsageError, build_parser
from ampfl.commands import COMMANDS, GROUP_VERBS, command_of

POISSON = ["account", "poisson", "--noise-multiplier", "1", "--rate", "0.01", "--steps", "1000"]
POISSON += ["--delta", "1e-5", "--json"]

#: Packages (and their submodules) the default ``account poisson`` never imports.
NEVER = (
    "torch",
    "scipy",
    "dp_accounting",
    "matplotlib",
    "rich",
    "ampfl.fl",
    "ampfl.flower",
    "ampfl.reproduce",
)
#: Modules it never imports: what only the writers of ampfl.io and the full parser need.
NEVER_MODULES = ("pathlib", "tempfile", "csv", "pkgutil")

_PROBE = """
import contextlib, io, json, sys
start = set(sys.modules)
from ampfl.cli import main
out = io.StringIO()
with contextlib.redirect_stdout(out):
    code = main(json.loads(sys.argv[1]))
print(json.dumps({"code": code, "output": out.getvalue(), "new": sorted(set(sys.modules) - start)}))
"""


def _new_modules(argv: list[str]) -> tuple[dict[str, object], list[str]]:
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(argv)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout.splitlines()[-1])
    new = result["new"]
    assert isinstance(new, list)
    return result, new


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """Every command's parser, keyed as :data:`COMMANDS`."""
    found = {}
    for verb, sub in _subparsers(parser).items():
        if verb in GROUP_VERBS:
            found.update({f"{verb} {name}": leaf for name, leaf in _subparsers(sub).items()})
        else:
            found[verb] = sub
    return found


def _signature(parser: argparse.ArgumentParser) -> list[tuple[object, ...]]:
    rows = []
    for a in parser._actions:
        choices = sorted(a.choices) if isinstance(a, argparse._SubParsersAction) else a.choices
        kind = getattr(a.type, "__name__", None) if a.type is not None else None
        rows.append((type(a).__name__, tuple(a.option_strings), a.dest, repr(a.default), a.required, choices))
        rows.append((a.nargs, kind, a.help, a.metavar, a.const))
    return rows


def test_default_account_poisson_imports_nothing_it_does_not_use():
    result, new = _new_modules(POISSON)
    assert result["code"] == 0
    assert json.loads(str(result["output"]))["accountant"] == "pld"
    heavy = [m for m in new if any(m == name or m.startswith(f"{name}.") for name in NEVER)]
    assert heavy == []
    assert [m for m in NEVER_MODULES if m in new] == []
    # the command's own module, no other command module
    assert [m for m in new if m.startswith("ampfl.commands.")] == ["ampfl.commands.partition"]


def test_commands_table_lists_every_command_and_its_module():
    found = _commands(build_parser())
    assert sorted(found) == sorted(COMMANDS)
    for key, parser in found.items():
        handler = parser.get_default("handler")
        assert handler.__module__ == f"ampfl.commands.{COMMANDS[key]}", key


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_one_command_parser_is_the_full_parsers(command):
    full = _commands(build_parser())[command]
    alone = build_parser(command)
    only = _commands(alone)
    assert list(only) == [command]
    assert only[command].format_help() == full.format_help()
    assert only[command].prog == full.prog
    assert _signature(only[command]) == _signature(full)
    assert list(_subparsers(alone)) == [command.split()[0]]


@pytest.mark.parametrize(
    "argv",
    [
        [
            "account",
            "poisson",
            "--noise-multiplier",
            "1e-9",
            "--rate",
            "0.1",
            "--steps",
            "3",
            "--delta",
            "0.1",
        ],
        ["account", "poisson", "--rate", "0.1"],
        ["account", "poisson", "--noise-multiplier", "1", "--bogus"],
        ["calibrate", "poisson", "--epsilon", "nan", "--rate", "0.1", "--steps", "3", "--delta", "1e-5"],
        ["run"],
        ["data", "fetch"],
        ["demo", "--nope"],
    ],
    ids=" ".join,
)
def test_one_command_parser_gives_the_full_parsers_errors(argv):
    command = command_of(argv)
    assert command is not None
    errors = []
    for parser in (build_parser(), build_parser(command)):
        try:
            parser.parse_args(argv)
        except UsageError as exc:
            errors.append(str(exc))
        else:
            errors.append("parsed")
    assert errors[0] == errors[1]


@pytest.mark.parametrize(
    ("argv", "before", "after"),
    [
        (["account", "poisson"], None, "4"),
        (["calibrate", "poisson"], None, "4"),
        (["plan", "groups"], None, "4"),
        (["account", "poisson"], "30", "30"),  # the user's setting wins
        (["run", "config.toml"], None, None),
        (["--version"], None, None),
        ([], None, None),
    ],
)
def test_idle_blas_threads_sleep_for_one_shot_commands_only(monkeypatch, argv, before, after):
    import os

    from ampfl.cli import _idle_blas_threads_sleep

    if before is None:
        monkeypatch.delenv("OPENBLAS_THREAD_TIMEOUT", raising=False)
    else:
        monkeypatch.setenv("OPENBLAS_THREAD_TIMEOUT", before)
    _idle_blas_threads_sleep(argv)
    assert os.environ.get("OPENBLAS_THREAD_TIMEOUT") == after
    monkeypatch.delenv("OPENBLAS_THREAD_TIMEOUT", raising=False)


@pytest.mark.parametrize(("argv", "frozen"), [(["account", "poisson"], True), (["run", "x.toml"], False)])
def test_whole_process_freezes_the_gc_after_a_one_shot_command_only(monkeypatch, argv, frozen):
    import gc

    from ampfl import cli

    calls = []

    def main(argv, numpy_untracked):
        calls.append(("main", argv, numpy_untracked))
        return 3

    monkeypatch.setattr(cli, "main", main)
    monkeypatch.setattr(gc, "freeze", lambda: calls.append(("freeze", None)))
    monkeypatch.setattr(cli, "_idle_blas_threads_sleep", lambda a: calls.append(("blas", a)))
    assert cli._whole_process(argv) == 3
    # main runs with numpy to be loaded untracked (one-shot commands only)
    assert calls == [("blas", argv), ("main", argv, frozen), *([("freeze", None)] if frozen else [])]


@pytest.mark.parametrize(
    ("flag", "argv", "loads"),
    [
        (True, POISSON, True),
        (True, ["account", "poisson", "--help"], False),  # parsing exits first: no numpy for --help
        (True, ["account", "poisson", "--rate", "0.01"], False),  # a usage error: no numpy either
        (False, POISSON, False),  # main() called by a library: its collector is left alone
    ],
)
def test_numpy_is_loaded_untracked_after_parsing_only_in_a_whole_process(
    monkeypatch, capsys, flag, argv, loads
):
    from ampfl import cli

    calls = []
    monkeypatch.setattr(cli, "_load_numpy_untracked", lambda: calls.append("load"))
    try:
        cli.main(argv, numpy_untracked=flag)
    except SystemExit:
        pass
    capsys.readouterr()
    assert calls == (["load"] if loads else [])


def test_load_numpy_untracked_freezes_and_leaves_the_collector_on():
    code = (
        "import gc, sys\n"
        "from ampfl import cli\n"
        "cli._load_numpy_untracked()\n"
        "print('numpy' in sys.modules, gc.isenabled(), gc.get_freeze_count() > 10000)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["True", "True", "True"]


def test_python_m_ampfl_cli_runs_account_poisson():
    done = subprocess.run(
        [sys.executable, "-m", "ampfl.cli", *POISSON], capture_output=True, text=True, check=False
    )
    assert (done.returncode, done.stderr) == (0, "")
    assert json.loads(done.stdout)["accountant"] == "pld"


def test_registry_only_drops_the_other_commands_whatever_they_add():
    # Two dropped commands that both add a mutually exclusive group, the same flags and subcommands.
    from ampfl.cli import _Parser
    from ampfl.commands import Registry

    root = _Parser(prog="ampfl")
    top = root.add_subparsers(dest="verb", parser_class=_Parser)
    registry = Registry(top=top, groups={}, only="kept")
    for name in ("dropped-a", "dropped-b", "kept"):
        parser = registry.command(None, name, lambda args: {}, help=name)
        group = parser.add_mutually_exclusive_group()
        group.add_argument("--x", type=int)
        parser.add_argument("--y", type=float)
        actions = parser.add_subparsers(dest="action", parser_class=type(parser))
        actions.add_parser("go").add_argument("--z")
    assert list(_subparsers(root)) == ["kept"]
    args = root.parse_args(["kept", "--x", "1", "--y", "2", "go", "--z", "3"])
    assert (args.verb, args.x, args.y, args.action, args.z) == ("kept", 1, 2.0, "go", "3")


def test_events_compare_hash_and_print_as_dataclasses():
    # Events leave ==, hash and repr to PrivacyEvent (fewer methods generated at import): the same as a
    # frozen dataclass's, i.e. the field values as a tuple, between events of the same type only.
    import dataclasses

    from ampfl.accounting import events as ev

    gaussian = ev.GaussianEvent(noise_multiplier=1.5)
    samples = [
        gaussian,
        ev.LaplaceEvent(noise_multiplier=1.5),
        ev.PoissonSampledEvent(sampling_rate=0.01, event=gaussian),
        ev.RandomCheckInEvent(
            participation=0.5, sampling_rate=0.1, noise_multiplier=1.0, local_dataset_size=9
        ),
        ev.ModelSplitEvent(num_submodels=3, noise_multiplier=2.0),
        ev.ComposedEvent(events=(gaussian, ev.SelfComposedEvent(event=gaussian, count=3))),
    ]
    for event in samples:
        names = [f.name for f in dataclasses.fields(event)]
        values = tuple(getattr(event, name) for name in names)
        text = ", ".join(f"{name}={value!r}" for name, value in zip(names, values, strict=True))
        assert repr(event) == f"{type(event).__qualname__}({text})"
        assert hash(event) == hash(values)
        twin = dataclasses.replace(event)
        assert twin == event and twin is not event and hash(twin) == hash(event)
        assert event != values and (event == values) is False
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(event, names[0], None)
    assert ev.GaussianEvent(noise_multiplier=1.5) != ev.LaplaceEvent(noise_multiplier=1.5)
    assert ev.GaussianEvent(noise_multiplier=1.5) != ev.GaussianEvent(noise_multiplier=2)
    assert samples[2] != ev.PoissonSampledEvent(sampling_rate=0.02, event=gaussian)
    assert samples[3] != dataclasses.replace(samples[3], local_dataset_size=None)
    assert len({gaussian, ev.GaussianEvent(noise_multiplier=1.5), samples[1]}) == 2
