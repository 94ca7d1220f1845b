"""The downstream's TLS, as MySQL's ssl-mode says, for PyMySQL and for Spark's Connector/J.

| ssl-mode | PyMySQL | Connector/J 2.7 (Spark) |
|---|---|---|
| disabled | no TLS | no TLS |
| preferred | TLS when the server offers it, unverified | no TLS (Connector/J has no fallback) |
| required | TLS, unverified | `useSsl`, `trustServerCertificate` |
| verify-ca | TLS, CA checked | `useSsl`, `serverSslCert`, `disableSslHostnameVerification` |
| verify-identity | TLS, CA and host name checked | `useSsl`, `serverSslCert` |
"""

from __future__ import annotations

import atexit
import functools
import os
import secrets
import shutil
import tempfile
from pathlib import Path
from typing import Any

from config.errors import ConfigError
from config.settings import Downstream, SslMode, env_name
from config.tls import client_context

# Connector/J reads a client certificate only from a key store: the PEM pair becomes one.
KEYSTORE_TYPE = "PKCS12"


def pymysql_tls(downstream: Downstream) -> dict[str, Any]:
    """PyMySQL ``connect`` arguments for the downstream's ssl-mode."""
    mode = downstream.effective_ssl_mode
    if mode is SslMode.DISABLED:
        return {"ssl_disabled": True}
    if mode is SslMode.PREFERRED:
        # PyMySQL's own default: TLS when the server offers it, plaintext when it does not.
        return {}
    context = client_context(
        ca=downstream.ssl_ca,
        cert=downstream.ssl_cert,
        key=downstream.ssl_key,
        verify=mode.verifies,
        check_hostname=mode is SslMode.VERIFY_IDENTITY,
        setting=env_name("downstream"),
    )
    # An SSLContext makes PyMySQL refuse a server without TLS.
    return {"ssl": context}


def jdbc_tls(downstream: Downstream) -> dict[str, str]:
    """Connector/J connection properties for the downstream's ssl-mode (passwords included, so
    they travel as properties, never in the URL Spark logs)."""
    mode = downstream.effective_ssl_mode
    if mode in {SslMode.DISABLED, SslMode.PREFERRED}:
        return {"useSsl": "false"}
    options = {"useSsl": "true"}
    if mode is SslMode.REQUIRED:
        options["trustServerCertificate"] = "true"
    else:
        if downstream.ssl_ca:
            options["serverSslCert"] = downstream.ssl_ca
        if mode is SslMode.VERIFY_CA:
            options["disableSslHostnameVerification"] = "true"
    if downstream.ssl_cert:
        path, password = client_keystore(downstream.ssl_cert, downstream.ssl_key)
        options |= {
            "keyStore": path,
            "keyStorePassword": password,
            "keyPassword": password,
            "keyStoreType": KEYSTORE_TYPE,
        }
    return options


@functools.cache
def client_keystore(cert: str, key: str) -> tuple[str, str]:
    """A PKCS12 key store holding ``cert`` (and its chain) and ``key``, in a folder only this
    user reads, under a random password; made once per process, removed at its exit."""
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import (
        BestAvailableEncryption,
        load_pem_private_key,
        pkcs12,
    )

    try:
        chain = x509.load_pem_x509_certificates(Path(cert).read_bytes())
        private_key = load_pem_private_key(Path(key).read_bytes(), password=None)
    except (OSError, ValueError, TypeError):
        # Neither the key's bytes nor the parser's words go into the message.
        raise ConfigError(
            f"{env_name('downstream')}: ssl-cert={cert} / ssl-key={key} is not a PEM "
            "certificate and unencrypted PEM key"
        ) from None
    password = secrets.token_urlsafe(24)
    blob = pkcs12.serialize_key_and_certificates(
        b"ticdc-sink",
        private_key,  # type: ignore[arg-type]
        chain[0],
        chain[1:] or None,
        BestAvailableEncryption(password.encode()),
    )
    folder = tempfile.mkdtemp(prefix="ticdc-sink-keystore-")
    # The store lives as long as the process: its password goes with it.
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    path = Path(folder) / "client.p12"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(blob)
    return str(path), password
