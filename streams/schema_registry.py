"""The schema registry client the Avro codec and `produce` use: schemas by id, cached; outages
waited out.

A Confluent schema id names one schema for good, so a schema is fetched once: kept in memory,
and in the pipeline's ``registry-schemas`` hash in Redis (field: the registry's address and the
id), so a restarted worker, or another one, reads it there instead of asking the registry for
thousands of ids at once. A registry that is away (refused, timed out, 5xx) is waited for, logged
once when the wait starts and once when it ends, and the call goes on: nothing is lost. Only the
registry's own "no such id" (40403) fails a message: :class:`UnknownSchemaError`, its dead
letter's reason.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from config.errors import ConfigError, RegistryUnavailableError, UnknownSchemaError
from config.settings import Settings, env_name
from core.outage import RETRY_FIRST_S, Outage, next_delay
from streams.registry_http import (
    SCHEMA_NOT_FOUND,
    RegistryAddress,
    answer_document,
    away,
    certificate_refused,
    error_code,
    is_schema_id,
    registered_id,
    request,
    schema_of,
    schema_path,
    versions_path,
)

if TYPE_CHECKING:
    # Types only: a codec may import this module without Redis's client coming with it.
    from core.staging import Staging
    from core.staging.schemas import SchemaHash

log = logging.getLogger("ticdc_sink.schema_registry")

T = TypeVar("T")
# A schema id no registry gives (Confluent's ids start at 1): the start check asks for it and
# expects the registry's own "not found".
PROBE_ID = 0


def never() -> bool:
    return False


class SchemaRegistry:
    """Avro schemas by Confluent schema id, from one registry, cached in memory and (given a
    ``store``) in Redis.

    ``patience`` bounds how long one call waits for a registry that is away (None: as long as it
    takes, the worker's choice; a one-shot command gives up with
    :class:`RegistryUnavailableError`); ``stopping`` ends a wait early the same way (the worker
    passes its should-stop flag). Thread-safe: the worker decodes on several threads."""

    def __init__(
        self,
        address: RegistryAddress,
        store: SchemaHash | None = None,
        *,
        patience: float | None = None,
        stopping: Callable[[], bool] = never,
    ) -> None:
        self.address = address
        self._store = store
        self._patience = patience
        self._stopping = stopping
        self._schemas: dict[int, str] = {}
        self._lock = threading.Lock()
        self._outage = Outage(f"schema registry at {address.shown}", log)

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        staging: Staging | None = None,
        *,
        patience: float | None = None,
        stopping: Callable[[], bool] = never,
    ) -> SchemaRegistry:
        """The registry ``TICDC_SINK_SCHEMA_REGISTRY`` names, its schemas cached in
        ``staging``'s Redis hash (None: in memory only, as for `decode`)."""
        store = staging.registry_schemas() if staging is not None else None
        address = RegistryAddress.from_settings(settings.schema_registry)
        return cls(address, store, patience=patience, stopping=stopping)

    def schema(self, schema_id: int) -> str:
        """The Avro schema (JSON text) of ``schema_id``: from memory, else Redis, else the
        registry (then kept in both). An id the registry does not know raises
        :class:`UnknownSchemaError` naming it and the registry. A Redis error passes through, as
        from any other staging call: the worker's line waits Redis out and asks again."""
        found = self._schemas.get(schema_id)
        if found is not None:
            return found
        if not is_schema_id(schema_id):
            raise UnknownSchemaError(schema_id, self.address.shown)
        with self._lock:
            found = self._schemas.get(schema_id)
            if found is None:
                found = self._stored(schema_id)
            if found is None:
                found = self._fetch(schema_id)
                if self._store is not None:
                    self._store.put(self._field(schema_id), found.encode())
            self._schemas[schema_id] = found
        return found

    def register(self, subject: str, schema: str) -> int:
        """Register ``schema`` (Avro JSON text) under ``subject`` and return its id (the same
        id again for a schema the subject already has). A schema the registry refuses raises
        :class:`SchemaRegistryError`."""
        payload = {"schema": schema}

        def post() -> int:
            status, body = request(self.address, "POST", versions_path(subject), payload)
            return registered_id(status, body, subject, self.address.shown)

        schema_id = self._until_answered(post, f"registering subject {subject!r}")
        self._schemas.setdefault(schema_id, schema)
        return schema_id

    def check(self) -> None:
        """At start: the address answers as a Confluent registry, and takes the login. A
        registry that is away is waited for (within ``patience``); one that refuses the login
        or answers as no registry does raises :class:`ConfigError` naming the setting."""

        def probe() -> tuple[int, bytes]:
            try:
                status, body = request(self.address, "GET", schema_path(PROBE_ID))
            except RegistryUnavailableError as error:
                if certificate_refused(error):
                    raise ConfigError(
                        f"{env_name('schema_registry_ssl_ca')}: the schema registry at "
                        f"{self.address.shown} has a certificate it does not verify "
                        f"({error.__cause__})"
                    ) from None
                raise
            if status >= 500:
                raise away(status, body, f"GET {schema_path(PROBE_ID)}")
            return status, body

        # A login or a path a registry refuses looks like an outage to a running worker (it
        # waits); at start it is a setting to fix, so the probe reads the answer itself.
        status, body = self._until_answered(probe, "starting")
        if status in (401, 403):
            raise ConfigError(
                f"{env_name('schema_registry')}: the schema registry at {self.address.shown} "
                f"refused the login (HTTP {status}); check its user and "
                f"{env_name('schema_registry_password')}"
            )
        code = error_code(answer_document(body))
        if status not in (200, 404) or (status == 404 and code != SCHEMA_NOT_FOUND):
            raise ConfigError(
                f"{env_name('schema_registry')}: {self.address.shown} does not answer as a "
                f"Confluent schema registry (GET {schema_path(PROBE_ID)}: HTTP {status}); it "
                "is the base URL the changefeed's schema-registry names (for Apicurio Registry "
                "its /apis/ccompat/v7)"
            )

    def _field(self, schema_id: int) -> bytes:
        # The registry's address is part of the field: ids of two registries are unrelated.
        return f"{self.address.base} {schema_id}".encode()

    def _stored(self, schema_id: int) -> str | None:
        if self._store is None:
            return None
        raw = self._store.get(self._field(schema_id))
        return None if raw is None else raw.decode()

    def _fetch(self, schema_id: int) -> str:
        def get() -> str:
            status, body = request(self.address, "GET", schema_path(schema_id))
            return schema_of(status, body, schema_id, self.address.shown)

        return self._until_answered(get, f"fetching schema id {schema_id}")

    def _until_answered(self, call: Callable[[], T], doing: str) -> T:
        """``call``'s result once the registry answers it, waiting while it is away."""
        delay = RETRY_FIRST_S
        deadline = None if self._patience is None else time.monotonic() + self._patience
        while True:
            try:
                result = call()
            except RegistryUnavailableError as error:
                if deadline is not None and time.monotonic() + delay > deadline:
                    raise self._gave_up(doing, error) from None
                self._outage.failed(error, doing)
                if self._stopping():
                    raise self._gave_up(doing, error) from None
                time.sleep(delay)
                delay = next_delay(delay)
                continue
            self._outage.answered()
            return result

    def _gave_up(self, doing: str, error: RegistryUnavailableError) -> RegistryUnavailableError:
        return RegistryUnavailableError(
            f"{env_name('schema_registry')}: the schema registry at {self.address.shown} did not"
            f" answer while {doing}: {error}"
        )
