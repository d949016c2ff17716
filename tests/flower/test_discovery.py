"""Node discovery on the console (issue 31, part 3): :meth:`LocalFederation.connected` counts the SuperNodes
the SuperLink accepted in this start only (their logs append across ``--resume``), from what the processes
wrote."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("flwr")

from ampfl.flower.local import CONNECTED_LINE, LocalFederation


def test_connected_counts_this_starts_supernodes_only(tmp_path: Path) -> None:
    # Arrange: node 0's log holds an earlier run's acceptance; three stand-in processes write like SuperNodes
    (tmp_path / "supernode-0.log").write_bytes(b"INFO: " + CONNECTED_LINE + b" 111\nINFO: stopped\n")
    federation = LocalFederation(3, tmp_path, tmp_path / "home")
    says = {0: "Starting Flower SuperNode", 1: "Starting\\nSuperNode ID: 222", 2: "SuperNode ID: 333"}
    # Execute
    before = federation.connected()
    for node, text in says.items():
        federation._spawn(["python", "-c", f"print('{text}')"], f"supernode-{node}.log")
    for process in federation.processes:
        process.wait(timeout=60)
    # Assert
    assert before == 0
    assert federation.connected() == 2  # nodes 1 and 2; node 0's line is from the earlier run
    with (tmp_path / "supernode-0.log").open("ab") as log:
        log.write(CONNECTED_LINE + b" 444\n")
    assert federation.connected() == 3
    assert federation.stop() >= 0.0
