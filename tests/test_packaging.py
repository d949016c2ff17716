"""What a packaged ampfl carries: a license, a changelog, type information, ``python -m ampfl``, bounded
dependencies."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_license_changelog_and_type_marker_exist() -> None:
    assert "Apache License" in (REPO / "LICENSE").read_text()
    assert (REPO / "CHANGELOG.md").read_text().startswith("# Changelog")
    assert (REPO / "src" / "ampfl" / "py.typed").is_file()
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert "py.typed" in project["tool"]["setuptools"]["package-data"]["ampfl"]


def test_python_dash_m_ampfl_is_the_cli() -> None:
    done = subprocess.run([sys.executable, "-m", "ampfl", "--help"], capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0 and "account" in done.stdout and "calibrate" in done.stdout


def test_every_runtime_dependency_has_an_upper_bound() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    runtime = list(project["dependencies"])
    for extra in ("plot", "train", "flower", "opacus"):
        runtime += project["optional-dependencies"][extra]
    for requirement in runtime:
        assert re.search(r"<\s*[0-9]", requirement), f"{requirement} has no upper bound"


def test_accounting_commands_work_without_torch_and_matplotlib(tmp_path: Path) -> None:
    """What an install without extras can do: ``account`` and ``calibrate`` import neither torch nor
    matplotlib (both blocked here), and matplotlib is not a core dependency."""
    blocked = ("torch", "matplotlib", "sklearn", "flwr", "opacus")
    (tmp_path / "sitecustomize.py").write_text(
        f"import sys\nfor name in {blocked!r}:\n    sys.modules[name] = None\n"
    )
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{REPO / 'src'}"}
    poisson = ["poisson", "--delta", "1e-5", "--rate", "0.01", "--steps", "100"]
    for argv in (["account", *poisson, "--noise-multiplier", "1"], ["calibrate", *poisson, "--epsilon", "1"]):
        command = [sys.executable, "-m", "ampfl", *argv, "--json"]
        done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path)
        assert done.returncode == 0, done.stderr[-1500:]
        assert '"epsilon"' in done.stdout
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert not any(d.startswith("matplotlib") for d in project["dependencies"])
