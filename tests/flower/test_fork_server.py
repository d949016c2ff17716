"""ampfl.flower.fork_server: a shim's request runs the entry point in a forked child with the shim's
arguments, working directory, environment, standard streams and exit code; signals reach the child; each
child draws its own numpy randomness; a child dies with its shim; without a server, or for a command it does
not run, the shim runs the real command; every command's entry point is the installed Flower's."""

from __future__ import annotations

import importlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ampfl.flower.fork_server import ENTRIES, write_shim

ENTRY = """
import json, os, sys, time
import numpy as np

def main():
    args = sys.argv[1:]
    if args and args[0] == "sleep":
        print("sleeping", os.getpid(), flush=True)
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
    shim = write_shim(tmp_path / "bin", sock, "flwr-clientapp", [_real(tmp_path)])
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


def _sleeping(tmp_path: Path, sock: Path, command: str) -> tuple[subprocess.Popen[bytes], int]:
    """A shim of ``command`` whose forked child is asleep, and the child's process id (it says so first)."""
    shim = write_shim(tmp_path / "bin", sock, command, [_real(tmp_path)])
    process = subprocess.Popen([str(shim), "sleep"], stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
    assert process.stdout is not None
    word, pid = process.stdout.readline().split()
    assert word == b"sleeping"
    return process, int(pid)


def test_a_signal_to_the_shim_reaches_the_child(
    tmp_path: Path, server: tuple[Path, subprocess.Popen[bytes]]
) -> None:
    # Prepare
    process, _ = _sleeping(tmp_path, server[0], "flwr-clientapp")
    # Execute
    process.send_signal(signal.SIGTERM)
    # Assert
    assert process.wait(timeout=30) == 128 + signal.SIGTERM


def test_a_child_dies_with_its_shim_even_on_kill_9(
    tmp_path: Path, server: tuple[Path, subprocess.Popen[bytes]]
) -> None:
    # Prepare
    process, pid = _sleeping(tmp_path, server[0], "flower-supernode")
    assert pid != process.pid  # the forked child, not the shim
    # Execute
    process.kill()
    process.wait()
    # Assert: the server SIGKILLs the child (and reaps it)
    deadline = time.monotonic() + 30
    while Path(f"/proc/{pid}").exists():
        assert time.monotonic() < deadline, "the child outlived its shim"
        time.sleep(0.05)


def test_a_command_the_server_does_not_run_starts_cold(
    tmp_path: Path, server: tuple[Path, subprocess.Popen[bytes]]
) -> None:
    sock, _ = server
    shim = write_shim(tmp_path / "bin", sock, "python", [_real(tmp_path)])  # not one of ENTRIES
    run = subprocess.run([str(shim), "0"], capture_output=True, timeout=60, check=False)
    assert run.returncode == 3 and run.stdout.decode().split() == ["cold", "0"]


def test_every_entry_is_the_installed_flowers_entry_point() -> None:
    pytest.importorskip("flwr")
    from importlib.metadata import entry_points

    scripts = {e.name: e.value for e in entry_points(group="console_scripts") if e.module.startswith("flwr")}
    for command, entry in ENTRIES.items():
        module, _, function = entry.partition(":")
        assert callable(getattr(importlib.import_module(module), function)), entry
        assert command in scripts, command  # a command Flower's own package installs
        if not module.startswith("ampfl"):  # the prompt SuperNode wraps Flower's (test_polling.py)
            package, _, name = scripts[command].partition(":")
            assert getattr(importlib.import_module(package), name) is getattr(
                importlib.import_module(module), function
            )


def test_without_a_server_the_shim_runs_the_real_command(tmp_path: Path) -> None:
    shim = write_shim(tmp_path / "bin", tmp_path / "missing" / "socket", "flwr-clientapp", [_real(tmp_path)])
    run = subprocess.run([str(shim), "--token", "t"], capture_output=True, timeout=60, check=False)
    assert run.returncode == 3 and run.stdout.decode().split() == ["cold", "--token", "t"]


def test_the_federation_waits_for_a_listener_only_while_its_process_runs(tmp_path: Path) -> None:
    """``LocalFederation``'s wait (for the SuperLink's port, the fork server's socket): True once ready,
    False as soon as the process has exited, and False after the timeout while it runs but is not ready."""
    from ampfl.flower.local import _wait_until

    flag = tmp_path / "ready"
    running = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        begun = time.monotonic()
        assert not _wait_until(flag.exists, running, timeout=0.3, pause=0.05)
        assert time.monotonic() - begun >= 0.3 and running.poll() is None
        flag.touch()
        assert _wait_until(flag.exists, running, timeout=0.3, pause=0.05)
    finally:
        running.kill()
        running.wait()
    assert not _wait_until(flag.exists, running, timeout=30.0, pause=0.05)  # exited: ready or not
