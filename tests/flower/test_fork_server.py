"""ampfl.flower.fork_server: a shim's request runs the entry point in a forked child with the shim's
arguments, working directory, environment, standard streams and exit code; signals reach the child; each
child draws its own numpy randomness; without a server the shim runs the real command."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ampfl.flower.fork_server import write_shim

ENTRY = """
import json, os, sys, time
import numpy as np

def main():
    args = sys.argv[1:]
    if args and args[0] == "sleep":
        print("sleeping", flush=True)
        time.sleep(60)
    line = sys.stdin.readline().strip()
    print(json.dumps({"argv": sys.argv, "cwd": os.getcwd(), "probe": os.environ.get("PROBE"),
                      "stdin": line, "draw": float(np.random.random())}))
    print("to stderr", file=sys.stderr)
    sys.exit(int(args[0]) if args and args[0].isdigit() else 0)
"""


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[Path, subprocess.Popen[bytes]]]:
    (tmp_path / "entry_module.py").write_text(ENTRY)
    sock = tmp_path / "s" / "socket"
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "OPENBLAS_NUM_THREADS": "1"}
    process = subprocess.Popen(
        [sys.executable, "-m", "ampfl.flower.fork_server", str(sock), "entry_module:main"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while not sock.exists():
        assert process.poll() is None, process.stdout.read() if process.stdout else ""
        assert time.monotonic() < deadline
        time.sleep(0.05)
    yield sock, process
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def _real(tmp_path: Path) -> Path:
    real = tmp_path / "real-clientapp"
    real.write_text(f"#!{sys.executable}\nimport sys\nprint('cold', *sys.argv[1:])\nsys.exit(3)\n")
    real.chmod(0o755)
    return real


def test_a_request_runs_forked_with_the_shims_arguments_streams_and_exit_code(
    tmp_path: Path, server: tuple[Path, subprocess.Popen[bytes]]
) -> None:
    # Prepare
    sock, _ = server
    shim = write_shim(tmp_path / "bin", sock, _real(tmp_path))
    work = tmp_path / "work"
    work.mkdir()
    # Execute
    runs = [
        subprocess.run(
            [str(shim), code, "--token", "abc"],
            input=b"hello\n",
            capture_output=True,
            cwd=work,
            env={**os.environ, "PROBE": f"p{code}"},
            timeout=60,
            check=False,
        )
        for code in ("0", "5")
    ]
    # Assert
    for run, code in zip(runs, (0, 5), strict=True):
        assert run.returncode == code, run.stderr
        out = json.loads(run.stdout.decode().splitlines()[0])
        assert out["argv"] == ["flwr-clientapp", str(code), "--token", "abc"]
        assert Path(out["cwd"]) == work and out["probe"] == f"p{code}" and out["stdin"] == "hello"
        assert run.stderr.decode().strip() == "to stderr"
    draws = [json.loads(r.stdout.decode().splitlines()[0])["draw"] for r in runs]
    assert draws[0] != draws[1]  # numpy's global generator is reseeded in every child


def test_a_signal_to_the_shim_reaches_the_child(
    tmp_path: Path, server: tuple[Path, subprocess.Popen[bytes]]
) -> None:
    # Prepare
    sock, _ = server
    shim = write_shim(tmp_path / "bin", sock, _real(tmp_path))
    process = subprocess.Popen([str(shim), "sleep"], stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
    assert process.stdout is not None
    assert process.stdout.readline().strip() == b"sleeping"
    # Execute
    process.send_signal(signal.SIGTERM)
    # Assert
    assert process.wait(timeout=30) == 128 + signal.SIGTERM


def test_without_a_server_the_shim_runs_the_real_command(tmp_path: Path) -> None:
    shim = write_shim(tmp_path / "bin", tmp_path / "missing" / "socket", _real(tmp_path))
    run = subprocess.run([str(shim), "--token", "t"], capture_output=True, timeout=60, check=False)
    assert run.returncode == 3 and run.stdout.decode().split() == ["cold", "--token", "t"]
