"""Reading back the messages TiCDC's claim-check stored (``large-message-handle-option``).

TiCDC writes each message too large for Kafka to ``claim-check-storage-uri`` as the JSON
``{"key": base64, "value": base64}`` (Go's encoding of its key and value bytes; canal-json with
``claim-check-raw-value=true`` writes the bare value instead) under a file name ending in
``.json``, and sends its location in the message's place. TiCDC's location is that URI joined
with the name by Go's ``filepath.Join``, which folds ``file:///dir`` into ``file:/dir`` and
``s3://bucket`` into ``s3:/bucket``. As TiCDC's own consumer does, an object is read by its file
name under the configured storage URI; without one, from the location as written.
"""

from __future__ import annotations

import base64
import binascii
import logging
import posixpath
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit, urlunsplit

import orjson

from config.errors import LargeMessageError
from core.outage import RETRY_FIRST_S

log = logging.getLogger("ticdc_sink.claim_check")

# The storage schemes read here: TiCDC's local one and S3 (or any S3-compatible store).
SCHEMES = ("file", "s3")
# The most a wait between attempts at an unreadable object grows to (from RETRY_FIRST_S): it is
# written before its message is sent, so what fails is the store (a network blip, a throttled
# request), and a short wait may do.
FETCH_RETRY_MAX_S = 2.0

# S3 reads run where messages are decoded: bounded, so a stalled store holds a batch briefly, and
# retried here rather than by botocore too, so a read costs the attempts the settings name.
S3_CONNECT_TIMEOUT_S = 5.0
S3_READ_TIMEOUT_S = 30.0

Fetch = Callable[[str], bytes]


def object_url(location: str, storage: str = "") -> str:
    """The URL to read the object of a claim-check ``location`` from: its file name under
    ``storage`` when set, else the location itself with ``//`` restored after the scheme."""
    if storage:
        parts = urlsplit(storage)
        name = posixpath.basename(location)
        path = parts.path.rstrip("/") + "/" + name
        return urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))
    scheme, colon, rest = location.partition(":")
    if not colon or not rest.startswith("/") or rest.startswith("//"):
        return location
    if scheme == "file":
        return "file://" + rest
    return f"{scheme}://{rest.lstrip('/')}"


def shown_url(url: str) -> str:
    """``url`` for logs and dead letters: without its options, which may hold a secret key."""
    return urlunsplit(urlsplit(url)._replace(query=""))


def stored_message(data: bytes) -> tuple[bytes | None, bytes]:
    """The key and value of a stored message: TiCDC's JSON envelope, or a raw value (canal-json
    with ``claim-check-raw-value``). Raises ``ValueError`` on a broken envelope."""
    try:
        envelope = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None, data  # a compressed raw value
    if not isinstance(envelope, dict) or not envelope or set(envelope) - {"key", "value"}:
        return None, data  # a raw canal-json value is an object with other fields
    key, value = envelope.get("key"), envelope.get("value")
    for field, encoded in (("key", key), ("value", value)):
        if encoded is not None and not isinstance(encoded, str):
            raise ValueError(f"'{field}' must be base64 text or null")
    try:
        return (
            None if key is None else base64.b64decode(key, validate=True),
            b"" if value is None else base64.b64decode(value, validate=True),
        )
    except binascii.Error as exc:
        raise ValueError(f"bad base64: {exc}") from None


def read_file(url: str) -> bytes:
    """A ``file://`` object's bytes."""
    return Path(unquote(urlsplit(url).path)).read_bytes()


class S3Reader:
    """Reads ``s3://bucket/key`` objects with boto3. TiCDC's URI options apply: ``endpoint``
    (an S3-compatible store), ``region``, ``force-path-style``, ``access-key`` and
    ``secret-access-key``; without keys, boto3's own chain (environment, profile, role)."""

    def __init__(self) -> None:
        self._clients: dict[tuple[tuple[str, str], ...], Any] = {}

    def __call__(self, url: str) -> bytes:
        parts = urlsplit(url)
        options = {name: values[-1] for name, values in parse_qs(parts.query).items()}
        response = self._client(options).get_object(Bucket=parts.netloc, Key=parts.path[1:])
        body: bytes = response["Body"].read()
        return body

    def _client(self, options: dict[str, str]) -> Any:
        known = tuple(sorted(options.items()))
        client = self._clients.get(known)
        if client is None:
            import boto3
            from botocore.config import Config

            path_style = options.get("force-path-style", "").lower() in ("1", "true")
            client = self._clients[known] = boto3.client(
                "s3",
                endpoint_url=options.get("endpoint") or None,
                region_name=options.get("region") or None,
                aws_access_key_id=options.get("access-key") or None,
                aws_secret_access_key=options.get("secret-access-key") or None,
                config=Config(
                    s3={"addressing_style": "path" if path_style else "auto"},
                    connect_timeout=S3_CONNECT_TIMEOUT_S,
                    read_timeout=S3_READ_TIMEOUT_S,
                    retries={"total_max_attempts": 1},
                ),
            )
        return client


class ClaimCheckReader:
    """Fetches a claim-check location's stored message, retrying an unreadable store
    ``attempts`` times in all before giving up with a :class:`LargeMessageError`."""

    def __init__(
        self,
        storage: str = "",
        attempts: int = 3,
        readers: dict[str, Fetch] | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.storage = storage
        self.attempts = attempts
        self._readers: dict[str, Fetch] = (
            readers if readers is not None else {"file": read_file, "s3": S3Reader()}
        )
        self._sleep = sleep

    def read(self, location: str, protocol: str) -> tuple[bytes | None, bytes]:
        """The key and value TiCDC stored for ``location`` (``protocol`` names the errors)."""
        url = object_url(location, self.storage)
        reader = self._readers.get(urlsplit(url).scheme)
        if reader is None:
            raise LargeMessageError(
                protocol,
                f"claim-check location {location!r}: only {', '.join(SCHEMES)} storage is read; "
                "set TICDC_SINK_CLAIM_CHECK_STORAGE to where the objects are",
            )
        data = self._fetch(reader, url, location, protocol)
        try:
            return stored_message(data)
        except ValueError as exc:
            raise LargeMessageError(
                protocol,
                f"claim-check object {shown_url(url)} is not TiCDC's stored message: {exc}",
            ) from None

    def _fetch(self, reader: Fetch, url: str, location: str, protocol: str) -> bytes:
        delay = RETRY_FIRST_S
        attempt = 1
        while True:
            try:
                return reader(url)
            except Exception as error:  # each store fails its own way (OSError, botocore's)
                if attempt >= self.attempts:
                    raise LargeMessageError(
                        protocol,
                        f"claim-check object {shown_url(url)} (location {location!r}) "
                        f"unreadable after "
                        f"{attempt} attempts: {error}",
                    ) from None
                log.warning(
                    "claim-check object %s unreadable (attempt %d of %d): %s; again in %.1f s",
                    shown_url(url), attempt, self.attempts, error, delay,
                )  # fmt: skip
                self._sleep(delay)
                delay = min(delay * 2, FETCH_RETRY_MAX_S)
                attempt += 1
