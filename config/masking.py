"""Secrets masked: a setting's value as logs, ``config describe``, errors and ``repr()`` show it.

A secret setting shows as ``***``, an address its password as ``***``, an S3 URI its secret key
as ``***``; everything else as it is.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from pydantic import SecretStr

# What a secret prints as, wherever it is shown.
MASK = "***"
# Settings that are addresses and may carry a password.
ADDRESSES = ("downstream", "upstream", "redis_url", "schema_registry")
# An S3 URI may carry its secret key as TiCDC's URIs do; it never prints.
_SECRET_KEY = re.compile(r"(secret-access-key=)[^&]*")


def replace_url_password(url: str, password: str | None) -> str:
    """``url`` with its password, if it has one, replaced by ``password`` (None: removed)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rsplit("@", 1)[1]
    login = (parts.username or "") + ("" if password is None else f":{password}")
    return urlunsplit(parts._replace(netloc=f"{login}@{host}" if login else host))


def masked(name: str, value: Any) -> str:
    """Setting ``name``'s value as text with what is secret in it masked: a secret is ``***``
    (empty when it is not set)."""
    if isinstance(value, SecretStr):
        return MASK if value.get_secret_value() else ""
    text = str(value)
    if name in ADDRESSES:
        return replace_url_password(text, MASK)
    if name == "claim_check_storage":
        return _SECRET_KEY.sub(r"\1" + MASK, text)
    return text


def shown_value(name: str, value: Any, *, secret: bool) -> str:
    """A raw value of setting ``name`` as an error quotes it: masked, text quoted, a ``secret``
    (a password as given, before it is one) only ``***``."""
    if secret:
        return MASK
    return repr(masked(name, value)) if isinstance(value, str) else repr(value)
