"""The integration examples run as a user runs them (a subprocess from the repository root)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def test_opacus_example_runs_and_ampfl_needs_less_noise() -> None:
    pytest.importorskip("opacus")
    script = REPO / "examples" / "opacus" / "ampfl_accountant.py"
    done = subprocess.run([sys.executable, str(script), "1"], capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 4 and lines[0].startswith("poisson") and lines[3].startswith("shuffled"), done.stdout
    ours, prv, rdp = (float(v) for v in re.findall(r"(?:ampfl|prv|rdp) ([0-9.]+)", lines[0]))
    assert ours <= rdp and abs(ours - prv) <= 0.03 * prv
    z_ampfl, z_rdp = (float(re.search(r"z=([0-9.]+)", line).group(1)) for line in lines[1:3])  # type: ignore[union-attr]
    assert z_ampfl < z_rdp


def test_flower_example_app_wires_ampfl_in() -> None:
    """The example's ClientApp carries SecAgg+ then ampfl's Mod; its server module builds (the deployment
    itself is the same wiring as tests/integrations/test_flower_mods.py's federation)."""
    pytest.importorskip("flwr")
    import importlib

    monkey = sys.path.copy()
    sys.path.insert(0, str(REPO / "examples" / "flower_app"))
    try:
        client = importlib.import_module("flower_app.client_app")
        server = importlib.import_module("flower_app.server_app")
    finally:
        sys.path[:] = monkey
    from flwr.client.mod import secaggplus_mod

    from ampfl.integrations.flower import PrivacyMod

    mods = client.app._mods
    assert mods[0] is secaggplus_mod and isinstance(mods[1], PrivacyMod)
    assert server.app is not None and client.MECHANISM == server.MECHANISM
