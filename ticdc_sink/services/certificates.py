"""A throwaway certificate authority for the secured local services and their clients.

``make_authority`` writes, once, into one folder: ``ca.pem`` (+ key), ``server.pem``/``server.key``
for 127.0.0.1 and localhost, and ``client.pem``/``client.key``. Keys are unencrypted PKCS#8, the
form Kafka's PEM key store, MariaDB, Redis and Python's ssl module all read, and only the owner
may read them.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

# Long enough for a development machine's lifetime; the CA is made anew for a new state dir.
VALID_DAYS = 3650
RSA_BITS = 2048
SERVER_NAMES = ("localhost",)
SERVER_ADDRESSES = ("127.0.0.1",)


@dataclass(frozen=True)
class Authority:
    """Where one authority's files are."""

    folder: Path

    @property
    def ca(self) -> Path:
        return self.folder / "ca.pem"

    @property
    def ca_key(self) -> Path:
        return self.folder / "ca.key"

    @property
    def server_cert(self) -> Path:
        return self.folder / "server.pem"

    @property
    def server_key(self) -> Path:
        return self.folder / "server.key"

    @property
    def client_cert(self) -> Path:
        return self.folder / "client.pem"

    @property
    def client_key(self) -> Path:
        return self.folder / "client.key"

    @property
    def server_bundle(self) -> Path:
        """Key and certificate in one PEM file (Kafka's PEM key store)."""
        return self.folder / "server-bundle.pem"


def make_authority(folder: Path, name: str = "ticdc-sink local CA") -> Authority:
    """The authority in ``folder``, made with its server and client certificates if missing."""
    authority = Authority(folder)
    if authority.server_bundle.exists():
        return authority
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    folder.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)

    def key() -> rsa.RSAPrivateKey:
        return rsa.generate_private_key(public_exponent=65537, key_size=RSA_BITS)

    def certificate(
        subject: str, public: rsa.RSAPrivateKey, issuer: x509.Name | None
    ) -> x509.CertificateBuilder:
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
        return (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(issuer or name)
            .public_key(public.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now)
            .not_valid_after(now + dt.timedelta(days=VALID_DAYS))
        )

    ca_key = key()
    ca_cert = (
        certificate(name, ca_key, None)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=True,
                crl_sign=True, encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), False)
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip

    def leaf(
        subject: str, usages: list[x509.ObjectIdentifier], server: bool
    ) -> tuple[bytes, bytes]:
        leaf_key = key()
        builder = (
            certificate(subject, leaf_key, ca_cert.subject)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
            )
        )
        if server:
            alternatives: list[x509.GeneralName] = [x509.DNSName(n) for n in SERVER_NAMES]
            alternatives += [x509.IPAddress(ipaddress.ip_address(a)) for a in SERVER_ADDRESSES]
            builder = builder.add_extension(x509.SubjectAlternativeName(alternatives), False)
        signed = builder.sign(ca_key, hashes.SHA256())
        return signed.public_bytes(serialization.Encoding.PEM), _pkcs8(leaf_key)

    # Servers also authenticate as clients: Kafka's broker talks to itself over its listener.
    server_pem, server_key = leaf(
        "127.0.0.1", [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH], True
    )
    client_pem, client_key = leaf("ticdc-sink client", [ExtendedKeyUsageOID.CLIENT_AUTH], False)
    ca_pem = ca_cert.public_bytes(serialization.Encoding.PEM)
    _write(authority.ca, ca_pem, private=False)
    _write(authority.ca_key, _pkcs8(ca_key), private=True)
    _write(authority.server_cert, server_pem + ca_pem, private=False)
    _write(authority.server_key, server_key, private=True)
    _write(authority.client_cert, client_pem, private=False)
    _write(authority.client_key, client_key, private=True)
    # Written last: its presence says the authority is complete.
    _write(authority.server_bundle, server_key + server_pem + ca_pem, private=True)
    return authority


def _pkcs8(private_key: object) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return private_key.private_bytes(  # type: ignore[attr-defined, no-any-return]
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _write(path: Path, data: bytes, *, private: bool) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
