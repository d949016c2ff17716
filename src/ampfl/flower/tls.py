"""TLS material for a local Flower federation (``ampfl deploy --tls``): a throw-away CA and a server
certificate for 127.0.0.1, and one authentication key pair per SuperNode, written with :mod:`cryptography`
(a dependency of flwr). The SuperLink runs with ``--enable-supernode-auth``: only SuperNodes whose public key
was registered (``flwr supernode register``) may connect.

The SuperLink serves with ``--ssl-ca-certfile ca.crt --ssl-certfile server.crt --ssl-keyfile server.key``; the
SuperNodes and ``flwr run`` verify it with ``ca.crt`` (``--root-certificates``, ``root-certificates`` in
``$FLWR_HOME/config.toml``). The keys live in the run's temporary folder and are deleted with it. For a
SuperLink on another machine, use certificates from your own CA (docs/deploy.md).
"""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

#: File names in the TLS folder.
CA_CERT, SERVER_CERT, SERVER_KEY = "ca.crt", "server.crt", "server.key"


def write_local_tls(folder: Path, *, days: int = 2) -> dict[str, Path]:
    """A CA and a server certificate for 127.0.0.1/localhost in ``folder``; returns their paths by name."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    folder.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    later = now + datetime.timedelta(days=days)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "ampfl local federation CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(later)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    names = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    server = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(later)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    paths = {name: folder / name for name in (CA_CERT, SERVER_CERT, SERVER_KEY)}
    paths[CA_CERT].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[SERVER_CERT].write_bytes(server.public_bytes(serialization.Encoding.PEM))
    paths[SERVER_KEY].write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    paths[SERVER_KEY].chmod(0o600)
    return paths


def write_node_keys(folder: Path, count: int) -> list[tuple[Path, Path]]:
    """``count`` SuperNode authentication key pairs (ECDSA P-384, OpenSSH format, as Flower expects):
    ``[(private, public)]``; the public keys are registered with ``flwr supernode register``."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    folder.mkdir(parents=True, exist_ok=True)
    pairs = []
    for i in range(count):
        key = ec.generate_private_key(ec.SECP384R1())
        private, public = folder / f"node-{i}", folder / f"node-{i}.pub"
        private.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.OpenSSH,
                serialization.NoEncryption(),
            )
        )
        private.chmod(0o600)
        public.write_bytes(
            key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
        )
        pairs.append((private, public))
    return pairs
