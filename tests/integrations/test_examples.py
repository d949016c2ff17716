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
