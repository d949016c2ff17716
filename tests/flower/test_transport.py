"""Secure transport for ``ampfl deploy`` (issue 31, part 5): TLS with SuperNode authentication on a local
federation (generated CA, server certificate and node keys), and no plain connection to a remote SuperLink
unless asked for."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

pytest.importorskip("flwr")

from ampfl.cli import main
from ampfl.fl.config import parse_config
from ampfl.flower.deploy import deploy
from ampfl.flower.local import marked_processes

CONFIG = """
seed = 3
rounds = 2

[dataset]
name = "digits"

[partition]
scheme = "iid"
num_clients = 3

[algorithm]
name = "fedavg"
cohort_size = 3
"""


@pytest.mark.slow
def test_a_tls_federation_with_supernode_authentication_trains(tmp_path: Path) -> None:
    # Execute
    out = tmp_path / "run"
    summary = deploy(parse_config(tomllib.loads(CONFIG)), out, tls=True)
    # Assert: trained over https, every SuperNode registered by its key, nothing left running
    assert summary["completed"] and summary["rounds_completed"] == 2 and 0.0 < summary["final_accuracy"] <= 1
    assert "running on https://127.0.0.1" in (out / "logs" / "superlink.log").read_text()
    assert (out / "logs" / "register.log").read_text().count("registered successfully") == 3
    assert marked_processes(str(out.resolve())) == []


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--superlink", "10.1.2.3:9093"], "a remote SuperLink needs TLS"),
        (["--superlink", "10.1.2.3:9093", "--tls"], "--tls starts a local federation"),
        (["--superlink", "10.1.2.3:9093", "--root-certificates", "missing.pem"], "no such file"),
        (["--insecure"], "apply to --superlink only"),
    ],
)
def test_transport_flags_are_checked_in_one_line(tmp_path: Path, capsys, flags, message) -> None:  # type: ignore[no-untyped-def]
    config = tmp_path / "c.toml"
    config.write_text(CONFIG)
    code = main(["deploy", str(config), "--out", str(tmp_path / "run"), "--no-progress", *flags])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and message in err
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_an_unregistered_supernode_is_refused(tmp_path: Path) -> None:
    # Prepare: a TLS federation with SuperNode authentication where only node 0's key is registered; node 1
    # presents a key of its own that the SuperLink never saw.
    import time

    from ampfl.flower.local import LocalFederation
    from ampfl.flower.tls import write_node_keys

    (tmp_path / "logs").mkdir()
    federation = LocalFederation(2, tmp_path / "logs", tmp_path / "home", tls_dir=tmp_path / "tls")
    registered = list(federation.node_keys)
    stranger = write_node_keys(tmp_path / "stranger", 1)[0]
    federation.node_keys = registered[:1]  # what `flwr supernode register` is given
    register = federation._register_nodes

    def register_then_swap() -> None:
        register()
        federation.node_keys = [registered[0], stranger]  # what the SuperNodes present

    federation._register_nodes = register_then_swap  # type: ignore[method-assign]
    # Execute
    with federation:
        deadline = time.monotonic() + 60
        while federation.connected() < 1 and time.monotonic() < deadline:
            time.sleep(1)
        time.sleep(10)  # time for node 1 to try (and retry) too
        connected = federation.connected()
    # Assert: the registered node is accepted, the stranger never is
    assert connected == 1
    assert b"SuperNode ID:" in (tmp_path / "logs" / "supernode-0.log").read_bytes()
    assert b"SuperNode ID:" not in (tmp_path / "logs" / "supernode-1.log").read_bytes()
