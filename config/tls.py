"""Client TLS contexts: one builder for Kafka, Redis and the downstream, so each verifies alike."""

from __future__ import annotations

import ssl

from config.errors import ConfigError


def client_context(
    *,
    ca: str = "",
    cert: str = "",
    key: str = "",
    key_password: str = "",
    verify: bool = True,
    check_hostname: bool = True,
    setting: str = "TLS",
) -> ssl.SSLContext:
    """A client context: trusts ``ca`` (the system's CAs when empty), presents ``cert``/``key``
    when given; ``setting`` names the settings family in the error a bad file raises."""
    try:
        context = ssl.create_default_context(cafile=ca or None) if verify else _unverified()
    except (OSError, ssl.SSLError):
        raise ConfigError(f"{setting}: CA file {ca} is not a readable PEM certificate") from None
    if verify:
        context.check_hostname = check_hostname
    if cert:
        try:
            context.load_cert_chain(cert, key or None, key_password or None)
        except (OSError, ssl.SSLError) as exc:
            # The reason only: an SSLError may quote the file, and the key must not reach a log.
            reason = getattr(exc, "strerror", None) or type(exc).__name__
            raise ConfigError(
                f"{setting}: client certificate {cert} with key {key or cert} not usable: {reason}"
            ) from None
    return context


def _unverified() -> ssl.SSLContext:
    """Encryption without verifying the server (MySQL's ssl-mode=required)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context
