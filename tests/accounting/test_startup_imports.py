"""Closed-form and ampfl-native commands compute without the heavy imports (issue 32, item 2).

``ampfl account poisson`` used to import dp-accounting through the accountants' base class, and with it
scipy.signal and scipy.stats (~1 s of a 1.2 s command). Each probe runs the command in a fresh interpreter
and lists what it imported, so a module-level import anywhere on the path makes it fail. Timings are not
asserted here: ``bench/startup.py`` measures them.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

_PROBE = """
import contextlib, io, json, sys
from ampfl.cli import main
out = io.StringIO()
with contextlib.redirect_stdout(out):
    code = main(json.loads(sys.argv[1]))
print(json.dumps({"code": code, "output": out.getvalue(), "modules": sorted(sys.modules)}))
"""

_POISSON = ["--rate", "0.01", "--steps", "100", "--delta", "1e-5", "--json"]
#: Never imported by these commands.
HEAVY = ("torch", "scipy.signal", "scipy.stats", "dp_accounting", "matplotlib", "ampfl.fl")


def _probe(argv: list[str]) -> tuple[dict[str, object], list[str]]:
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(argv)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["code"] == 0, result
    return json.loads(result["output"]), result["modules"]


def _heavy(modules: list[str], names: tuple[str, ...] = HEAVY) -> list[str]:
    return sorted({name for name in names for m in modules if m == name or m.startswith(name + ".")})


@pytest.mark.parametrize(
    ("argv", "accountant"),
    [
        (["account", "poisson", "--noise-multiplier", "1", *_POISSON], "pld"),
        (["account", "poisson", "--noise-multiplier", "1", "--accountant", "pld", *_POISSON], "pld"),
        (["calibrate", "poisson", "--epsilon", "2", *_POISSON], "pld"),
    ],
    ids=["account-auto", "account-pld", "calibrate-auto"],
)
def test_poisson_pld_commands_import_neither_scipy_nor_dp_accounting(argv, accountant):
    report, modules = _probe(argv)
    assert report["accountant"] == accountant and report["epsilon"] > 0
    assert _heavy(modules, (*HEAVY, "scipy")) == []


def test_poisson_rdp_imports_no_torch_scipy_signal_or_dp_accounting():
    report, modules = _probe(
        ["account", "poisson", "--noise-multiplier", "1", "--accountant", "rdp", *_POISSON]
    )
    assert report["accountant"] == "rdp"
    assert _heavy(modules) == []  # scipy.special only (the exact Poisson-Gaussian RDP sum)


def test_importing_the_accountants_imports_neither_scipy_nor_dp_accounting():
    code = (
        "import json, sys\n"
        "from ampfl.accounting.accountants import PLDAccountant, RDPAccountant, make_accountant\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert _heavy(json.loads(done.stdout.splitlines()[-1]), (*HEAVY, "scipy")) == []


def test_dp_accounting_relations_and_events_are_still_accepted():
    # The contract did not change for a caller that uses dp-accounting's types (imported here, by the test).
    from dp_accounting import dp_event
    from dp_accounting.privacy_accountant import NeighboringRelation as DpRelation

    from ampfl.accounting.accountants import NeighboringRelation, PLDAccountant, RDPAccountant

    rdp = RDPAccountant(neighboring_relation=DpRelation.REPLACE_ONE)
    assert rdp.neighboring_relation is NeighboringRelation.REPLACE_ONE
    event = dp_event.PoissonSampledDpEvent(0.01, dp_event.GaussianDpEvent(1.0))
    pld = PLDAccountant()
    assert pld.supports(event)
    ours = pld.compose(event, 100).get_epsilon(1e-5)
    reference = RDPAccountant().compose(event, 100).get_epsilon(1e-5)
    assert 0 < ours <= reference  # PLD is tighter than RDP on the same event
    refusal = PLDAccountant(neighboring_relation=DpRelation.REPLACE_ONE)._maybe_compose(event, 1, False)
    assert refusal is not None and "add/remove-one" in str(refusal.error_message)
