"""Bring-up of a local federation (issue 31): node discovery on the console (part 3):
:meth:`LocalFederation.connected` counts the SuperNodes the SuperLink accepted in this start only (their logs
append across ``--resume``), from what the processes wrote; and the number of SuperNodes that fit in this
machine's memory (part 6), refused in one line before anything starts."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("flwr")

from ampfl.cli import main
from ampfl.flower import deploy
from ampfl.flower.deploy import MAX_LOCAL_CLIENTS, MESSAGE_MEMORY_MB, NODE_MEMORY_MB, local_capacity
from ampfl.flower.local import CONNECTED_LINE, LocalFederation, marked_processes


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


@pytest.mark.parametrize("nodes", [1, 7, 40, 300])
@pytest.mark.parametrize("asked", [None, 1, 5])
def test_local_capacity_is_the_most_nodes_whose_memory_fits(nodes: int, asked: int | None) -> None:
    def need(n: int) -> int:  # N idle SuperNodes plus min(asked, N) training at once
        return n * NODE_MEMORY_MB + min(n if asked is None else asked, n) * MESSAGE_MEMORY_MB

    available = float(need(nodes))
    most = local_capacity(asked, available)
    assert most == min(nodes, MAX_LOCAL_CLIENTS)  # exactly enough memory for `nodes`
    assert local_capacity(asked, available - 1.0) == min(nodes - 1, MAX_LOCAL_CLIENTS) or nodes == 1
    assert local_capacity(asked, None) == MAX_LOCAL_CLIENTS  # memory unknown: the hard cap alone


def test_a_federation_that_does_not_fit_is_refused_in_one_line(  # type: ignore[no-untyped-def]
    tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "c.toml"
    config.write_text(
        'rounds = 1\n[dataset]\nname = "digits"\n[partition]\nnum_clients = 3\n'
        '[algorithm]\nname = "fedavg"\ncohort_size = 3\n'
    )
    monkeypatch.setattr(deploy, "available_memory_mb", lambda: 2.0 * (NODE_MEMORY_MB + MESSAGE_MEMORY_MB))
    out = tmp_path / "run"
    code = main(["deploy", str(config), "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert "partition.num_clients:" in err and "at most 2 fit" in err and "Found 3." in err
    assert not out.exists() and marked_processes(str(out.resolve())) == []
