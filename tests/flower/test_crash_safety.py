"""Crash safety of ``ampfl deploy`` (issue 31, part 1) and the run folder's lock (``run`` and ``deploy``).

A ``kill -9`` of ``ampfl deploy`` must leave no Flower process behind within 5 s (the watchdog), and an old
run must never write into a folder a new run took over (the lock's token, checked by the ServerApp before each
write). One real federation (~20 s); the lock itself is tested without processes.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("flwr")

from ampfl.cli import main
from ampfl.fl.run import lock as folder_lock
from ampfl.flower.local import marked_processes

#: What a SuperNode's command line holds: Flower's entry point, or ampfl's prompt one around it.
SUPERNODE_COMMANDS = (b"flower-supernode", b"ampfl.flower.prompt_supernode")

CONFIG = """
seed = 3
rounds = 40
eval_every = 1

[dataset]
name = "digits"

[partition]
scheme = "iid"
num_clients = 3

[model]
name = "logreg"

[algorithm]
name = "fedavg"
cohort_size = 3
"""


def _snapshot(folder: Path) -> dict[str, float]:
    return {str(p): p.stat().st_mtime for p in folder.rglob("*") if p.is_file() and "logs" not in p.parts}


@pytest.mark.slow
def test_kill_9_of_deploy_leaves_no_flower_process_and_no_writer(tmp_path: Path) -> None:
    # Prepare: a long deployment in its own process
    config, out = tmp_path / "c.toml", tmp_path / "run"
    config.write_text(CONFIG)
    env = {**os.environ, "FLWR_TELEMETRY_ENABLED": "0"}
    deploy = subprocess.Popen(
        [sys.executable, "-m", "ampfl.cli", "deploy", str(config), "--out", str(out)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    marker = str(out.resolve())
    try:
        deadline = time.monotonic() + 120
        while not (out / "metrics.jsonl").is_file() or len(marked_processes(marker)) < 4:
            assert time.monotonic() < deadline, "the federation did not come up"
            assert deploy.poll() is None, "ampfl deploy ended early"
            time.sleep(0.5)
        assert len(marked_processes(marker)) >= 4  # SuperLink, 3 SuperNodes (and their children)
        # Execute: kill -9 of ampfl deploy
        os.kill(deploy.pid, signal.SIGKILL)
        deploy.wait()
        killed = time.monotonic()
        while marked_processes(marker) and time.monotonic() < killed + 5.0:
            time.sleep(0.2)
        # Assert: nothing outlives it by 5 s, and nothing writes into the folder afterwards
        assert marked_processes(marker) == []
        before = _snapshot(out)
        time.sleep(4.0)
        assert _snapshot(out) == before
    finally:
        for pid in marked_processes(marker):
            os.kill(pid, signal.SIGKILL)
        if deploy.poll() is None:
            deploy.kill()


def test_a_second_run_into_a_live_runs_folder_fails_in_one_line(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    # Prepare: a folder locked by a live process (another run)
    out = tmp_path / "run"
    out.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        lock = {"token": "x", "pid": holder.pid, "host": socket.gethostname()}
        (out / folder_lock.LOCK).write_text(json.dumps(lock))
        config = tmp_path / "c.toml"
        config.write_text(CONFIG.replace("rounds = 40", "rounds = 1"))
        # Execute
        code = main(["run", str(config), "--out", str(out), "--no-progress"])
        # Assert
        err = capsys.readouterr().err
        assert code == 2 and err.count("\n") == 1 and f"in use by another ampfl run (pid {holder.pid})" in err
        assert json.loads((out / folder_lock.LOCK).read_text())["token"] == "x"  # untouched
    finally:
        holder.kill()
        holder.wait()


def test_a_stale_lock_is_taken_over_and_the_old_owner_loses_the_folder(tmp_path: Path) -> None:
    # Prepare: a lock whose owner died
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    out = tmp_path / "run"
    out.mkdir()
    lock = {"token": "old", "pid": dead.pid, "host": socket.gethostname()}
    (out / folder_lock.LOCK).write_text(json.dumps(lock))
    assert folder_lock.owns(out, "old")
    # Execute
    token = folder_lock.acquire(out)
    # Assert: a new token; the old run (a ServerApp that outlived its deploy) no longer owns the folder
    assert token != "old" and folder_lock.owns(out, token) and not folder_lock.owns(out, "old")
    folder_lock.release(out, "old")  # the old owner cannot release the new one's lock
    assert folder_lock.owns(out, token)
    folder_lock.release(out, token)
    assert not (out / folder_lock.LOCK).exists()


def test_a_bad_config_fails_before_any_flower_process_starts(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    # A fedavg cohort larger than the federation: `ampfl run` refuses it, and so does deploy, before bring-up.
    config = tmp_path / "c.toml"
    config.write_text(CONFIG.replace("cohort_size = 3", "cohort_size = 10"))
    out = tmp_path / "run"
    code = main(["deploy", str(config), "--out", str(out)])
    err = capsys.readouterr().err
    expected = "algorithm.cohort_size (10) exceeds partition.num_clients (3)"
    assert code == 2 and err.count("\n") == 1 and expected in err
    assert not out.exists() and marked_processes(str(out.resolve())) == []


@pytest.mark.slow
def test_a_dead_supernode_ends_deploy_in_one_line_within_seconds(tmp_path: Path) -> None:
    # Prepare: a long deployment; once it trains, one SuperNode is killed
    config, out = tmp_path / "c.toml", tmp_path / "run"
    config.write_text(CONFIG)
    env = {**os.environ, "FLWR_TELEMETRY_ENABLED": "0"}
    deploy = subprocess.Popen(
        [sys.executable, "-m", "ampfl.cli", "deploy", str(config), "--out", str(out), "--no-progress"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    marker = str(out.resolve())
    try:
        deadline = time.monotonic() + 300  # a guard against a hang, not a speed test (loaded CI machines)
        while not (out / "metrics.jsonl").is_file() or not (out / "metrics.jsonl").read_text():
            assert deploy.poll() is None, f"deploy ended before training: {deploy.stderr.read()[-2000:]}"  # type: ignore[union-attr]
            assert time.monotonic() < deadline, "the federation did not train within 300 s"
            time.sleep(0.5)
        nodes = [
            p
            for p in marked_processes(marker)
            if any(name in Path(f"/proc/{p}/cmdline").read_bytes() for name in SUPERNODE_COMMANDS)
        ]
        # Execute
        os.kill(nodes[0], signal.SIGKILL)
        killed = time.monotonic()
        _, err = deploy.communicate(timeout=60)
        # Assert: exit 1 with one line naming the dead process, quickly, and nothing left running
        assert deploy.returncode == 1 and time.monotonic() - killed < 30
        lines = [line for line in err.splitlines() if line.startswith("ampfl: error:")]
        assert len(lines) == 1 and "supernode-" in lines[0] and "exited" in lines[0]
        assert marked_processes(marker) == []
    finally:
        for pid in marked_processes(marker):
            os.kill(pid, signal.SIGKILL)
        if deploy.poll() is None:
            deploy.kill()
