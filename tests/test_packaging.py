"""What a packaged ampfl carries: a license, a changelog, type information, ``python -m ampfl``, bounded
dependencies."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path
from typing import Any

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


#: What an install without extras must not need: importing any of these fails in the wheel test's child.
OPTIONAL = ("torch", "matplotlib", "sklearn", "flwr", "opacus")

#: The child's bootstrap: a finder that refuses the optional packages, the installed wheel first on sys.path,
#: then the venv's site-packages read as a plain folder. ``-I -S`` keep out PYTHONPATH, the working folder
#: and the .pth files (the editable install's one would put the repository's src/ back on the path).
BOOTSTRAP = """
import runpy, sys, sysconfig
class RefuseOptional:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in {blocked!r}:
            raise ModuleNotFoundError(f"{{name}} is not installed (blocked)", name=name)
        return None
sys.meta_path.insert(0, RefuseOptional())
sys.path[:0] = [{target!r}]
sys.path.append(sysconfig.get_paths()["purelib"])
sys.argv = ["ampfl", *sys.argv[1:]]
try:
    runpy.run_module("ampfl", run_name="__main__", alter_sys=True)
finally:
    print("AMPFL_FILE=" + sys.modules["ampfl"].__file__, file=sys.stderr)
"""


def test_a_wheel_installed_without_extras_runs_the_accounting_commands(tmp_path: Path, cli_json: Any) -> None:
    """The wheel built from this tree (offline, the venv's setuptools), installed alone into a folder, runs
    ``python -m ampfl account`` and ``calibrate`` with torch, matplotlib, scikit-learn, flwr and opacus
    unimportable, and prints what the source tree prints. A few seconds: the build copies only what the
    wheel is made of."""
    source = tmp_path / "source"
    shutil.copytree(REPO / "src", source / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(REPO / name, source / name)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    offline = ["--no-deps", "--no-index"]
    build = [*pip, "wheel", *offline, "--no-build-isolation", "-w", str(tmp_path / "dist"), str(source)]
    subprocess.run(build, check=True, capture_output=True, cwd=tmp_path)
    (wheel,) = (tmp_path / "dist").glob("ampfl-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    assert "ampfl/py.typed" in names and "ampfl/__main__.py" in names
    assert any(re.fullmatch(r"ampfl-[^/]+\.dist-info/licenses/LICENSE", name) for name in names), names
    assert not [name for name in names if name.startswith("tests/") or "/tests/" in name]

    target = tmp_path / "site"
    install = [*pip, "install", *offline, "--target", str(target), str(wheel)]
    subprocess.run(install, check=True, capture_output=True, cwd=tmp_path)
    bootstrap = BOOTSTRAP.format(blocked=OPTIONAL, target=str(target))
    poisson = ["poisson", "--delta", "1e-5", "--rate", "0.01", "--steps", "100"]
    for argv in (["account", *poisson, "--noise-multiplier", "1"], ["calibrate", *poisson, "--epsilon", "1"]):
        command = [sys.executable, "-I", "-S", "-c", bootstrap, *argv, "--json"]
        done = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path)
        assert done.returncode == 0, done.stderr[-1500:]
        installed = Path(done.stderr.rsplit("AMPFL_FILE=", 1)[1].strip())
        assert installed.is_relative_to(target), installed  # the wheel's copy, not the source tree's
        assert json.loads(done.stdout) == cli_json(argv), argv
