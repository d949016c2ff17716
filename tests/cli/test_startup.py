"""CLI start-up stays light (issue 10 part 8): building the parser imports no heavy dependency.

Each check runs in a fresh interpreter (``sys.executable -c ...``) so modules imported by other tests do
not hide an import. Timings are not asserted here; ``bench/startup.py`` measures them.
"""

from __future__ import annotations

import importlib
import json
import pkgutil
import subprocess
import sys

import pytest

#: Never imported by building the parser, ``--version`` or ``--help`` (the brief's contract).
FORBIDDEN = ("torch", "matplotlib", "ampfl.fl")
#: The scientific stack: imported by the handler that computes, never by parsing (this is what start-up
#: time is made of: scipy + dp-accounting alone take about a second).
SCIENTIFIC = ("numpy", "scipy", "dp_accounting")

_PROBE = """
import contextlib, io, json, sys
argv = json.loads(sys.argv[1])
out = io.StringIO()
code = None
with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
    if argv is None:
        from ampfl.cli import build_parser
        build_parser()
    else:
        from ampfl.cli import main
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code
print(json.dumps({"code": code, "output": out.getvalue(), "modules": sorted(sys.modules)}))
"""


def _probe(argv: list[str] | None) -> dict[str, object]:
    """Run ``build_parser()`` (``argv=None``) or ``main(argv)`` in a fresh interpreter."""
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(argv)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout.splitlines()[-1])
    return result


def _loaded(modules: object, names: tuple[str, ...]) -> list[str]:
    assert isinstance(modules, list)
    return [name for name in names if name in modules]


def test_build_parser_imports_nothing_heavy():
    result = _probe(None)
    modules = result["modules"]
    assert isinstance(modules, list)
    assert _loaded(modules, FORBIDDEN) == []
    assert _loaded(modules, SCIENTIFIC) == [], [m for m in modules if m.startswith("ampfl")]
    # No figure module is imported to list the figure names.
    assert [m for m in modules if m.startswith("ampfl.reproduce.")] == []


@pytest.mark.parametrize(
    "argv",
    [
        ["--version"],
        ["account", "poisson", "--help"],
        ["calibrate", "--help"],
        ["reproduce", "--help"],
        ["run", "--help"],
        ["data", "fetch", "--help"],
    ],
    ids=" ".join,
)
def test_version_and_help_import_nothing_heavy(argv):
    result = _probe(argv)
    assert result["code"] == 0
    assert _loaded(result["modules"], FORBIDDEN) == []
    assert _loaded(result["modules"], SCIENTIFIC) == []


def test_version_prints_the_version():
    from ampfl import __version__

    result = _probe(["--version"])
    assert result["output"] == f"ampfl {__version__}\n"


def test_import_accounting_imports_no_torch():
    result = subprocess.run(
        [sys.executable, "-c", "import sys, ampfl.accounting; print('torch' in sys.modules)"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert result.stdout.strip() == "False"


def test_accounting_modules_import_neither_torch_nor_matplotlib():
    # Every module of ampfl.accounting (the package rule: pure numpy/scipy + dp-accounting).
    code = (
        "import importlib, json, pkgutil, sys, ampfl.accounting as a\n"
        "for m in pkgutil.walk_packages(a.__path__, 'ampfl.accounting.'):\n"
        "    importlib.import_module(m.name)\n"
        f"print(json.dumps([n for n in {list(FORBIDDEN)!r} if n in sys.modules]))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(result.stdout.splitlines()[-1]) == []


def test_figure_table_matches_the_figure_modules():
    # The static table (names listed without importing) agrees with each module's own FIGURES.
    import ampfl.reproduce as reproduce

    modules = sorted(
        info.name for info in pkgutil.iter_modules(reproduce.__path__) if not info.name.startswith("_")
    )
    assert sorted({entry.module for entry in reproduce.FIGURES.values()}) == modules
    for module_name in modules:
        module = importlib.import_module(f"ampfl.reproduce.{module_name}")
        listed = {name for name, entry in reproduce.FIGURES.items() if entry.module == module_name}
        assert set(module.FIGURES) == listed, module_name
        for name in listed:
            assert module.FIGURES[name] is reproduce.figure_function(name), name
    assert all(entry.help for entry in reproduce.FIGURES.values())


def test_reproduce_help_lists_every_figure_with_its_help(capsys):
    from ampfl.cli import main
    from ampfl.reproduce import figure_help, figure_names

    with pytest.raises(SystemExit) as info:
        main(["reproduce", "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    lines = out.split("figures:\n", 1)[1].splitlines()
    assert [line.split()[0] for line in lines] == figure_names()
    for line, name in zip(lines, figure_names(), strict=True):
        assert line.split(None, 1)[1] == figure_help(name)


def test_unknown_figure_is_a_one_line_error(run_cli):
    code, out, err = run_cli(["reproduce", "NOPE"])
    assert code == 2
    assert out == ""
    assert err.startswith("ampfl: error: argument NAME: invalid choice") and err.count("\n") == 1


def test_run_figure_rejects_unknown_name(tmp_path):
    from ampfl.reproduce import run_figure

    with pytest.raises(ValueError, match="NAME must be one of"):
        run_figure("NOPE", tmp_path)
    assert list(tmp_path.iterdir()) == []
