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

The deployment's own secrets (:func:`write_secrets`, every ``fedaccel deploy`` and ``--prepare``),
in ``RUN_DIR/flower/secrets`` (0700, each file 0600, fresh random values):

* ``control-token``    the bearer token that fedaccel's SuperLink (:mod:`fedaccel.flower.link`)
                       asks of every Control API request (``flwr run``, ``flwr supernode register``);
                       the ``flwr`` CLI sends it from ``RUN_DIR/flower/home/credentials.yaml``
* ``superexec-secret`` the key of Flower's SuperExec authentication: only the SuperExec that the
                       SuperLink starts may take its runs (a ServerApp task) from the Runtime API
* ``run-token``        in the run config (``run-config.toml``, given to ``flwr run``): the ServerApp
                       serves a run folder only for a run whose ``run-token`` equals this file's
                       (:func:`check_run_token`)

See docs/threat-model.md for what they cover.
"""

from __future__ import annotations

import datetime
import hmac
import ipaddress
import json
import os
import re
import secrets
from collections.abc import Sequence
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

from fedaccel.disk import read_regular, refuse_planted_links, write_atomic
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


def served_name(folder: Path, placeholder: str = "SERVER") -> str:
    """The first name that ``folder/server.pem`` is valid for other than this host's own (``fedaccel certs --host``),
    for the commands other hosts run: a host name or an IP address (a wildcard, or anything else a certificate
    from someone else may hold, is passed over); ``placeholder`` when there is none or the file cannot be read (a FIFO or a device is not read: nothing blocks)."""
    from cryptography import x509

    try:
        cert = x509.load_pem_x509_certificate(read_regular(folder / "server.pem", follow=True, limit=1 << 20))
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        found = [str(name.value) for name in names if isinstance(name, (x509.DNSName, x509.IPAddress))]
    except Exception:  # noqa: BLE001 - any certificate it cannot read (cryptography raises several kinds)
        return placeholder
    for name in found:
        if name in ("localhost", "127.0.0.1", "::1"):
            continue
        try:
            ipaddress.ip_address(name)
            return name
        except ValueError:
            if _HOST_NAME.fullmatch(name):
                return name
    return placeholder


_HOST_NAME = re.compile(r"(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}"
                        r"[A-Za-z0-9])?)*\.?")


SECRETS = "secrets"  # RUN_DIR/flower/secrets
CONTROL_TOKEN, SUPEREXEC_SECRET, RUN_TOKEN = "control-token", "superexec-secret", "run-token"
RUN_CONFIG = "run-config.toml"  # what `flwr run --run-config` is given: run-dir and run-token
# the `flwr` CLI's credential store entries (flwr.cli.constant): it sends the "OIDC" access token as a bearer token
CREDENTIAL_KEYS = ("flower.account-auth.%s.authn-type", "flower.account-auth.%s.oidc-access-token",
                   "flower.account-auth.%s.oidc-refresh-token")


def private_folder(folder: Path) -> Path:
    """``folder``, made if absent, readable by this user only (0700)."""
    if folder.is_symlink():
        raise UserError(f"{folder} is a symbolic link; fedaccel keeps its secrets in a folder of its own, not through a link")
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    folder.chmod(0o700)  # not a link (refused above): an existing folder made before, narrowed
    return folder


def write_private(path: Path, data: str) -> None:
    """``path`` rewritten atomically, readable by this user only; in a :func:`private_folder`."""
    write_atomic(path, data, mode=0o600)


def write_secrets(flower: Path, run_dir: Path) -> Path:
    """Fresh secrets of a deployment in ``flower/secrets`` (see the module's docstring), with the
    run config that ``flwr run`` is given (``run-dir`` and ``run-token``); returns the folder."""
    folder = private_folder(flower / SECRETS)
    for name in (CONTROL_TOKEN, SUPEREXEC_SECRET, RUN_TOKEN):
        write_private(folder / name, secrets.token_urlsafe(32))
    run_token = (folder / RUN_TOKEN).read_text()
    write_private(folder / RUN_CONFIG, f"run-dir = {toml_string(str(run_dir))}\nrun-token = {toml_string(run_token)}\n")
    return folder


def toml_string(text: str) -> str:
    """``text`` as a TOML basic string, quotes included (JSON's escapes are TOML's, and DEL)."""
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f")


def write_flwr_home(home: Path, address: str, control_token: str, root_certificates: Path | None) -> None:
    """``home`` as the ``FLWR_HOME`` of the deploying user's ``flwr`` commands: its connection
    ``local`` to the SuperLink's Control API at ``address`` (TLS when ``root_certificates``), and
    the Control API's bearer token in its credential store (both 0600)."""
    import base64

    import yaml

    private_folder(home)
    security = f"root-certificates = {toml_string(str(root_certificates))}" if root_certificates else "insecure = true"
    write_private(home / "config.toml",
                  f'[superlink]\ndefault = "local"\n\n[superlink.local]\naddress = "{address}"\n{security}\n')
    values = ("oidc", control_token, "unused")  # never refreshed: fedaccel's SuperLink has no refresh route
    store = {key % address: base64.b64encode(value.encode()).decode() for key, value in zip(CREDENTIAL_KEYS, values)}
    write_private(home / "credentials.yaml", yaml.safe_dump(store))


def read_secret(path: Path) -> str:
    """The secret in ``path``, which must be this user's own file that no one else may read or
    change (a file planted by another user, or left readable, is refused in one line)."""
    try:
        info = path.lstat()
    except OSError:
        raise UserError(f"{path} is missing: the deployment's secrets are made by `fedaccel deploy` "
                        "(or `fedaccel deploy --prepare`)") from None
    if not path.is_file() or path.is_symlink() or info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise UserError(f"{path} is not a private file of this user (mode 0600, owned by uid {os.getuid()}): "
                        "refused as a secret")
    return path.read_text().strip()


def same_secret(given: object, secret: str) -> bool:
    """Whether ``given`` is ``secret`` (a non-empty string), compared in constant time."""
    return isinstance(given, str) and bool(secret) and hmac.compare_digest(given.encode(), secret.encode())


def check_run_token(run_dir: Path, given: object) -> None:
    """Refuse, in one line, a run that is not the deployment's own: its run config's
    ``run-token`` must equal ``run_dir``'s ``flower/secrets/run-token`` (a private file of
    this user). Someone who can start runs on the SuperLink with fedaccel's app (it is public)
    and a ``run-dir`` of this user's cannot make the ServerApp read or write that folder."""
    if not same_secret(given, read_secret(run_dir / "flower" / SECRETS / RUN_TOKEN)):
        raise UserError(f"refused: this run is not the deployment's own (its run config's run-token is not "
                        f"{run_dir / 'flower' / SECRETS / RUN_TOKEN}'s)")
