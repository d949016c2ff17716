"""Smoke tests of bench/: every script imports against today's API, and the cheap ones run at a tiny size.

Benchmarks are never timed here (they print their own numbers); these only catch a script that drifted from
the code it measures."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
SCRIPTS = sorted(BENCH.glob("*.py"))


@pytest.mark.parametrize("script", SCRIPTS, ids=[s.stem for s in SCRIPTS])
def test_every_bench_script_imports(script: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if script.stem == "opacus":
        pytest.importorskip("opacus")
    if script.stem in {"deploy", "flower_workload"}:
        pytest.importorskip("flwr")
    monkeypatch.syspath_prepend(str(BENCH))  # scripts import their siblings, as when run from bench/
    spec = importlib.util.spec_from_file_location(f"bench_{script.stem}", script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)  # the scripts run only under __main__


@pytest.mark.parametrize(
    "argv",
    [
        ["scale.py", "--clients", "1000"],
        ["allocation_pld.py", "--quick"],
        ["pld_subsampled_split.py", "--quick"],
    ],
    ids=lambda argv: argv[0],
)
def test_cheap_benchmarks_run_at_a_tiny_size(argv: list[str]) -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH / argv[0]), *argv[1:]], capture_output=True, text=True, cwd=BENCH.parent
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip()
