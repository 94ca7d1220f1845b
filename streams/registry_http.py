"""A Confluent-API schema registry over HTTP: its address, one request, what an answer means.

The standard library's urllib and ssl: a GET of a schema by id and a POST of one need no HTTP
package, and the TLS context is config/tls.py's, as for every other client. What an answer
means is decided by pure functions (:func:`schema_of`, :func:`registered_id`); an answer that
says the registry is away (no connection, a timeout, 5xx, a refused login, a page that is no
registry's) is :class:`RegistryUnavailableError`, which the client waits out.
"""

from __future__ import annotations

import base64
import http.client
import json
import ssl
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote, urlsplit, urlunsplit

from config.errors import RegistryUnavailableError, SchemaRegistryError, UnknownSchemaError
from config.masking import MASK, replace_url_password
from config.settings import SchemaRegistrySettings
from config.tls import client_context

# Confluent's error code for an id it has no schema for (HTTP 404).
SCHEMA_NOT_FOUND = 40403
# The largest id a Confluent registry hands out (a Java int).
MAX_SCHEMA_ID = (1 << 31) - 1
# One request's bound: a registry answers a lookup in milliseconds; a hung one is an outage.
REQUEST_TIMEOUT_S = 10.0
# What Confluent's clients send and accept.
CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
ACCEPT = "application/vnd.schemaregistry.v1+json, application/vnd.schemaregistry+json, " + (
    "application/json"
)
# What the registry calls an Avro schema when it says (older registries say nothing).
AVRO = "AVRO"


@dataclass(frozen=True)
class RegistryAddress:
    """Where a registry is and how to reach it: ``base`` (no login in it, no trailing slash),
    the basic-auth header, the TLS context, and ``shown``, the address as messages name it."""

    base: str
    shown: str
    authorization: str | None = None
    context: ssl.SSLContext | None = None

    @classmethod
    def from_settings(cls, settings: SchemaRegistrySettings) -> RegistryAddress:
        given = settings.password.get_secret_value()
        base, user, password = split_login(settings.url)
        if given:
            password = given
        context = None
        if urlsplit(base).scheme == "https":
            context = client_context(
                ca=settings.ssl_ca,
                cert=settings.ssl_cert,
                key=settings.ssl_key,
                setting="TICDC_SINK_SCHEMA_REGISTRY_SSL_*",
            )
        return cls(base, shown_address(settings.url), basic_auth(user, password), context)


def split_login(url: str) -> tuple[str, str | None, str | None]:
    """``url`` without its ``user:password@`` and trailing slash, and the login, URL-decoded."""
    parts = urlsplit(url)
    host = parts.netloc.rsplit("@", 1)[-1]
    base = urlunsplit(parts._replace(netloc=host)).rstrip("/")
    user = None if parts.username is None else unquote(parts.username)
    password = None if parts.password is None else unquote(parts.password)
    return base, user, password


def shown_address(url: str) -> str:
    """``url`` as logs and errors show it: its password masked, no trailing slash."""
    return replace_url_password(url, MASK).rstrip("/")


def basic_auth(user: str | None, password: str | None) -> str | None:
    """The ``Authorization`` header of a login (None: no login given)."""
    if user is None and password is None:
        return None
    token = f"{user or ''}:{password or ''}".encode()
    return "Basic " + base64.b64encode(token).decode("ascii")


def is_schema_id(schema_id: int) -> bool:
    """Whether a registry can have ``schema_id``: Confluent's ids are positive 32-bit integers
    (a registry answers others with errors that would read as an outage)."""
    return 0 < schema_id <= MAX_SCHEMA_ID


def schema_path(schema_id: int) -> str:
    return f"/schemas/ids/{schema_id}"


def versions_path(subject: str) -> str:
    # Every character of a subject is escaped: TiCDC's subjects hold dots, a user's may hold "/".
    return f"/subjects/{quote(subject, safe='')}/versions"


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect is answered as it is: a registry's API does not redirect, and following one
    would send the login to wherever it points."""

    def redirect_request(self, *_: Any, **__: Any) -> None:
        return None


def request(
    address: RegistryAddress, method: str, path: str, payload: Any = None
) -> tuple[int, bytes]:
    """One HTTP request to the registry: its status and body. No answer at all (refused, reset,
    timed out, a TLS failure) raises :class:`RegistryUnavailableError`."""
    headers = {"Accept": ACCEPT}
    data = None
    if payload is not None:
        data = json.dumps(payload).encode()
        headers["Content-Type"] = CONTENT_TYPE
    if address.authorization:
        headers["Authorization"] = address.authorization
    call = urllib.request.Request(address.base + path, data=data, headers=headers, method=method)
    handlers: list[urllib.request.BaseHandler] = [_NoRedirect()]
    if address.context is not None:
        handlers.append(urllib.request.HTTPSHandler(context=address.context))
    try:
        with urllib.request.build_opener(*handlers).open(call, timeout=REQUEST_TIMEOUT_S) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as error:
        with error:
            return error.code, error.read()
    except (OSError, http.client.HTTPException) as error:
        # URLError, ConnectionRefusedError, TimeoutError, ssl.SSLError: all OSErrors. A
        # URLError wraps what happened: that is named.
        cause = error.reason if isinstance(error, urllib.error.URLError) else error
        name = type(cause).__name__ if isinstance(cause, BaseException) else "URLError"
        # Chained: the start check tells a certificate that does not verify by its cause.
        raise RegistryUnavailableError(f"{method} {path}: {name}: {cause}") from error


def certificate_refused(error: RegistryUnavailableError) -> bool:
    """Whether ``error`` is the registry's certificate failing verification (a CA setting to
    fix, not an outage, at start)."""
    cause = error.__cause__
    if isinstance(cause, urllib.error.URLError):
        cause = cause.reason  # type: ignore[assignment]
    return isinstance(cause, ssl.SSLCertVerificationError)


def answer_document(body: bytes) -> Any:
    """The JSON of an answer, or None when it is none (a proxy's page, an HTML root)."""
    try:
        return json.loads(body)
    except ValueError:
        return None


def error_code(document: Any) -> int | None:
    """Confluent's ``error_code`` of an error answer, if it has one."""
    if isinstance(document, dict) and isinstance(document.get("error_code"), int):
        code: int = document["error_code"]
        return code
    return None


def away(status: int, body: bytes, what: str) -> RegistryUnavailableError:
    """The outage an unexpected answer means, with as much of the answer as a log line takes."""
    document = answer_document(body)
    if isinstance(document, dict) and "message" in document:
        detail = str(document["message"])[:200]
    else:
        detail = "not a Confluent registry's answer" if document is None else str(document)[:200]
    return RegistryUnavailableError(f"{what}: HTTP {status}: {detail}")


def schema_of(status: int, body: bytes, schema_id: int, registry: str) -> str:
    """The Avro schema text a GET of ``schema_id`` answered. The registry's 40403 raises
    :class:`UnknownSchemaError` (the message goes to the dead letters); a schema that is not
    Avro raises :class:`SchemaRegistryError`; any other answer is an outage."""
    document = answer_document(body)
    if status == 404 and error_code(document) == SCHEMA_NOT_FOUND:
        raise UnknownSchemaError(schema_id, registry)
    if status != 200 or not isinstance(document, dict):
        raise away(status, body, f"GET {schema_path(schema_id)}")
    schema = document.get("schema")
    if not isinstance(schema, str):
        raise away(status, body, f"GET {schema_path(schema_id)}")
    kind = document.get("schemaType", AVRO)
    if kind != AVRO:
        raise SchemaRegistryError(
            f"schema id {schema_id} in the schema registry at {registry} is a {kind} schema, "
            "not Avro"
        )
    return schema


def registered_id(status: int, body: bytes, subject: str, registry: str) -> int:
    """The id a POST of a schema under ``subject`` answered. A schema the registry refuses
    (409 incompatible, 422 invalid) raises :class:`SchemaRegistryError`; any other answer that
    is not an id is an outage."""
    document = answer_document(body)
    if status in (409, 422) and error_code(document) is not None:
        message = str(document.get("message", ""))[:300]
        raise SchemaRegistryError(
            f"the schema registry at {registry} refused the schema of subject {subject!r} "
            f"(HTTP {status}, error {error_code(document)}): {message}"
        )
    if status == 200 and isinstance(document, dict) and isinstance(document.get("id"), int):
        schema_id: int = document["id"]
        return schema_id
    raise away(status, body, f"POST {versions_path(subject)}")
