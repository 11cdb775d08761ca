"""TLS certificates and SuperNode keys for a Flower deployment: ``fedaccel certs DIR``.

Writes, with the ``cryptography`` package (no openssl or ssh-keygen needed):

* ``ca.crt`` / ``ca.key``          a certificate authority of this deployment (RSA 2048, PEM)
* ``server.pem`` / ``server.key``  the SuperLink's certificate, signed by the CA, valid for the
                                   given host names and IP addresses (default 127.0.0.1, localhost)
* ``node<i>_key`` / ``node<i>_key.pub``  one ECDSA P-384 key pair per SuperNode, OpenSSH format,
                                   as Flower's SuperNode authentication wants them

``fedaccel deploy --tls DIR`` then starts the SuperLink with TLS and ``--enable-supernode-auth``,
registers every ``node<i>_key.pub`` (``flwr supernode register``), and starts SuperNode i with
``node<i>_key``: a SuperNode whose key was not registered is refused.
"""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Sequence
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

from fedaccel.disk import refuse_planted_links, write_atomic
from fedaccel.errors import UserError

DAYS = 365


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _write_private(path: Path, key: object, fmt: serialization.PrivateFormat) -> None:
    """A private key, readable by its owner only from its first byte (mode 0600 at creation, no chmod)."""
    write_atomic(path, key.private_bytes(serialization.Encoding.PEM, fmt, serialization.NoEncryption()),  # type: ignore[attr-defined]
                 mode=0o600)


def node_key(path: Path) -> Path:
    """An ECDSA P-384 key pair in OpenSSH format at ``path`` and ``path.pub``."""
    key = ec.generate_private_key(ec.SECP384R1())
    _write_private(path, key, serialization.PrivateFormat.OpenSSH)
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    write_atomic(path.with_name(path.name + ".pub"), public + f" {path.name}\n".encode())
    return path


def make_certificates(folder: Path, clients: int, hosts: Sequence[str] = ("127.0.0.1", "localhost")) -> Path:
    """Write the CA, the SuperLink's certificate and ``clients`` SuperNode keys into ``folder``."""
    if clients < 1:
        raise UserError(f"--clients must be at least 1, got {clients}")
    names = ["ca.crt", "ca.key", "server.pem", "server.key", *(f"node{i}_key{s}" for i in range(clients) for s in ("", ".pub"))]
    refuse_planted_links(folder, names)  # before any file is written, not halfway through
    folder.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ca_cert = (
        x509.CertificateBuilder().subject_name(_name("fedaccel deployment CA")).issuer_name(_name("fedaccel deployment CA"))
        .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    server_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    server_cert = (
        x509.CertificateBuilder().subject_name(_name(hosts[0])).issuer_name(ca_cert.subject)
        .public_key(server_key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=DAYS))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    write_atomic(folder / "ca.crt", ca_cert.public_bytes(serialization.Encoding.PEM))
    _write_private(folder / "ca.key", ca_key, serialization.PrivateFormat.TraditionalOpenSSL)
    write_atomic(folder / "server.pem", server_cert.public_bytes(serialization.Encoding.PEM))
    _write_private(folder / "server.key", server_key, serialization.PrivateFormat.TraditionalOpenSSL)
    for i in range(clients):
        node_key(folder / f"node{i}_key")
    return folder


def check_certificates(folder: Path, clients: int) -> None:
    """One line naming what is missing, for ``fedaccel deploy --tls``."""
    needed = ["ca.crt", "server.pem", "server.key", *(f"node{i}_key{s}" for i in range(clients) for s in ("", ".pub"))]
    missing = [name for name in needed if not (folder / name).is_file()]
    if missing:
        raise UserError(f"{folder} lacks {missing[0]}; create it with `fedaccel certs {folder} --clients {clients}`")
