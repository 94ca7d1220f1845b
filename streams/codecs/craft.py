"""TiCDC Craft: a columnar binary protocol with varints, delta chunks and a term dictionary.

Message layout::

    uvarint version | headers | bodies | term dictionary | size tables | reversed uvarint size

Headers are five chunks over all events (commit ts as delta uvarints, event types, partition ids,
schema and table term ids as delta varints). Size tables give the header and dictionary sizes,
each body's size, and for row events each column group's size; the last bytes of the message are
the size of the size tables as a uvarint written most significant group first.

The codec (decode and encode over one message frame) is here; the wire reader and writer it
fills are in ``craft_wire.py``. Longer than the usual module on purpose: each column type's
reading (``_value_decoder``) sits beside its writing (``_encode_value``), as in tiflow's package.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from config.errors import DecodeError, EncodeError, GrammarError, shown
from core.model import (
    BLOB_TYPES,
    CHAR_TYPES,
    FLOAT_TYPES,
    INTEGER_TYPES,
    NULL_TYPES,
    STRING_TYPES,
    ColumnFlag,
    ColumnType,
    DDLEvent,
    Event,
    MySQLType,
    Op,
    Resolved,
    RowChange,
    Value,
    column_type,
)
from core.native import native_model
from streams.codecs import craft_grammar as grammar
from streams.codecs.base import MAX_MESSAGE_BYTES, KafkaMessage, PackingCodec
from streams.codecs.craft_wire import (
    FLOAT64,
    PROTOCOL,
    Reader,
    Writer,
    reversed_uvarint,
    uvarint,
    varint,
)
from streams.codecs.values import as_bytes, checked_integer, text_or_bytes

if TYPE_CHECKING:
    from ticdc_sink_native import CraftDecoder

VERSION = 1
TYPE_ROW, TYPE_DDL, TYPE_RESOLVED = 1, 2, 3
GROUP_NEW, GROUP_OLD = 1, 2
NULL_ID = -1


class _Message:
    """The parsed frame of a message: size tables, term dictionary and each region's offsets."""

    def __init__(self, data: bytes) -> None:
        head = Reader(data, 0, len(data))
        version = head.uvarint()
        if version != VERSION:
            raise DecodeError(PROTOCOL, f"unsupported version {version}", where="byte 0")
        tables_size, tail = reversed_uvarint(data)
        tables_end = len(data) - tail
        tables_start = tables_end - tables_size
        if tables_start < head.pos:
            raise DecodeError(
                PROTOCOL, "size tables overlap the header", where=f"byte {tables_end}"
            )
        reader = Reader(data, tables_start, tables_end)
        self.tables: list[list[int]] = []
        while reader.remaining():
            self.tables.append(reader.delta_varint_chunk(reader.count("size table")))
        if len(self.tables) < 2 or len(self.tables[0]) != 2:
            raise DecodeError(PROTOCOL, "size tables lack the meta or body table", where="tables")
        header_size, dict_size = self.tables[0]
        bodies = self.tables[1]
        if min([header_size, dict_size, *bodies]) < 0:
            raise DecodeError(PROTOCOL, "negative size in the size tables", where="tables")
        self.data = data
        self.header_start = head.pos
        self.body_start = head.pos + header_size
        dict_start = self.body_start + sum(bodies)
        if dict_start + dict_size != tables_start:
            raise DecodeError(
                PROTOCOL,
                "sizes in the size tables do not add up to the message length",
                where=f"byte {dict_start}",
            )
        self.body_offsets = [self.body_start]
        for size in bodies:
            self.body_offsets.append(self.body_offsets[-1] + size)
        self.terms: list[str] = []
        if dict_size:
            terms = Reader(data, dict_start, dict_start + dict_size)
            self.terms = terms.string_chunk(terms.count("term dictionary"))

    @property
    def count(self) -> int:
        return len(self.tables[1])

    def term(self, term_id: int, event: int) -> str | None:
        if term_id == NULL_ID:
            return None
        if not 0 <= term_id < len(self.terms):
            raise _broken(grammar.TERM_ID, f"term id {term_id} not in the dictionary", event)
        return self.terms[term_id]


def _decode_value(kind: ColumnType, raw: bytes | None, name: str, event: int) -> Value:
    if raw is None:
        return None
    code = kind.mysql_type << 16 | kind.flags
    convert = _VALUE_DECODERS.get(code) or _value_decoder(kind, code)
    try:
        return checked_integer(kind, convert(raw))
    except (DecodeError, struct.error, UnicodeDecodeError, ValueError) as exc:
        reason = exc.reason if isinstance(exc, DecodeError) else str(exc)
        raise GrammarError(
            PROTOCOL,
            grammar.COLUMN_VALUE,
            f"bad value: {reason}",
            event_index=event,
            where=f"column {name}",
        ) from None


def _raw_uvarint(raw: bytes) -> int:
    if len(raw) == 1 and raw[0] < 0x80:
        return raw[0]
    reader = Reader(raw, 0, len(raw))
    value = reader.uvarint()
    if reader.remaining():
        raise ValueError(f"{reader.remaining()} bytes after the varint")
    return value


def _raw_varint(raw: bytes) -> int:
    value = _raw_uvarint(raw)
    return (value >> 1) ^ -(value & 1)


def _raw_float(raw: bytes) -> float:
    return float(FLOAT64.unpack(raw)[0])


def _utf8(raw: bytes) -> str:
    return raw.decode("utf-8")


def _null(raw: bytes) -> None:
    return None


def _same(raw: bytes) -> bytes:
    return raw


# type << 16 | flags -> the function turning a raw value into the model's value (an int key: the
# frozen dataclass's hash is a Python-level call).
_VALUE_DECODERS: dict[int, Callable[[bytes], Value]] = {}


def _value_decoder(kind: ColumnType, code: int) -> Callable[[bytes], Value]:
    mysql_type = kind.mysql_type
    convert: Callable[[bytes], Value]
    if mysql_type in INTEGER_TYPES:
        convert = _raw_uvarint if kind.is_unsigned else _raw_varint
    elif mysql_type == MySQLType.YEAR:
        convert = _raw_varint
    elif mysql_type in (MySQLType.BIT, MySQLType.ENUM, MySQLType.SET):
        convert = _raw_uvarint
    elif mysql_type in FLOAT_TYPES:
        convert = _raw_float
    elif mysql_type in STRING_TYPES:
        convert = _utf8
    elif mysql_type in NULL_TYPES:
        convert = _null
    elif (mysql_type in BLOB_TYPES or mysql_type in CHAR_TYPES) and not kind.is_binary:
        convert = text_or_bytes
    else:
        convert = _same
    _VALUE_DECODERS[code] = convert
    return convert


def _encode_value(kind: ColumnType, value: Value, name: str) -> bytes | None:
    if value is None:
        return None
    mysql_type = kind.mysql_type
    try:
        if mysql_type in INTEGER_TYPES:
            return uvarint(value) if kind.is_unsigned else varint(value)  # type: ignore[arg-type]
        if mysql_type == MySQLType.YEAR:
            return varint(value)  # type: ignore[arg-type]
        if mysql_type in (MySQLType.BIT, MySQLType.ENUM, MySQLType.SET):
            return uvarint(value)  # type: ignore[arg-type]
        if mysql_type in FLOAT_TYPES:
            return FLOAT64.pack(value)
        if mysql_type in NULL_TYPES:
            return None
        return as_bytes(value)  # type: ignore[arg-type]
    except (TypeError, struct.error, AttributeError) as exc:
        raise EncodeError(f"column {name}: cannot encode {value!r} as type {mysql_type}") from exc


def _broken(rule: str, reason: str, index: int | None = None) -> GrammarError:
    """The error of a message breaking ``rule`` of :mod:`streams.codecs.craft_grammar`."""
    return GrammarError(PROTOCOL, rule, reason, event_index=index)


# A column group as read: its type, and per column the name's term id, type, flags and value.
_Group = tuple[int, list[int], list[int], list[int], list[bytes | None]]


def _groups(body: Reader, group_sizes: list[int], index: int) -> list[_Group]:
    """A row body's column groups, each exactly the size its table gives (the framing)."""
    groups: list[_Group] = []
    for size in group_sizes:
        if size < 0 or size > body.remaining():
            raise body.fail(f"column group of {size} bytes does not fit its event", index)
        group = Reader(body.data, body.pos, body.pos + size)
        body.pos += size
        group_type = group.byte()
        width = group.count("column")
        ids = group.delta_varint_chunk(width)
        types = group.uvarint_chunk(width)
        flags = group.uvarint_chunk(width)
        values = group.nullable_bytes_chunk(width)
        if group.remaining():
            raise group.fail("column group is longer than its chunks", index)
        groups.append((group_type, ids, types, flags, values))
    if body.remaining():
        raise body.fail("row body is longer than its column groups", index)
    return groups


def _ddl(body: Reader, ts: int, schema: str | None, table: str | None, index: int) -> DDLEvent:
    action = body.uvarint()
    query = body.take(body.length("query"))
    try:
        text = query.decode("utf-8")
    except UnicodeDecodeError:
        raise _broken(grammar.DDL_BODY, "the statement is not UTF-8", index) from None
    if not text.strip() or body.remaining():
        raise _broken(
            grammar.DDL_BODY, f"statement {shown(text)}, then {body.remaining()} bytes", index
        )
    return DDLEvent(ts, schema, table, text, action)


class _Terms:
    def __init__(self) -> None:
        self.ids: dict[str, int] = {}

    def id(self, term: str | None) -> int:
        if term is None:
            return NULL_ID
        return self.ids.setdefault(term, len(self.ids))


class CraftCodec(PackingCodec):
    """Craft, version 1 (the Kafka key is empty)."""

    protocol = PROTOCOL

    def __init__(self, max_batch: int = 4096, native: bool = True) -> None:
        self.max_batch = max_batch
        model = native_model(native)
        decoder: CraftDecoder | None = None
        if model is not None:
            from ticdc_sink_native import CraftDecoder

            decoder = CraftDecoder(model, column_type, MAX_MESSAGE_BYTES)
        super().__init__(decoder)

    def decode(self, key: bytes | None, value: bytes) -> list[Event]:
        if len(value) > MAX_MESSAGE_BYTES:
            raise DecodeError(PROTOCOL, f"message over {MAX_MESSAGE_BYTES} bytes")
        if not value:
            raise DecodeError(PROTOCOL, "empty message", where="byte 0")
        message = _Message(bytes(value))
        count = message.count
        header = Reader(message.data, message.header_start, message.body_start)
        timestamps = header.delta_uvarint_chunk(count)
        types = header.uvarint_chunk(count)
        partitions = header.delta_varint_chunk(count)
        schemas = header.delta_varint_chunk(count)
        tables = header.delta_varint_chunk(count)
        if header.remaining():
            raise header.fail("headers are longer than the chunks they hold")
        if not count or (count > 1 and any(kind != TYPE_ROW for kind in types)):
            raise _broken(grammar.MESSAGE_EVENTS, f"events of types {types[:8]} in one message")
        if len(message.tables) != 2 + types.count(TYPE_ROW):
            raise _broken(
                grammar.SIZE_TABLES,
                f"{len(message.tables) - 2} column-group size tables for "
                f"{types.count(TYPE_ROW)} row events",
            )
        events: list[Event] = []
        for index in range(count):
            body = Reader(
                message.data, message.body_offsets[index], message.body_offsets[index + 1]
            )
            kind = types[index]
            if kind not in (TYPE_ROW, TYPE_DDL, TYPE_RESOLVED):
                raise _broken(grammar.EVENT_TYPE, f"event type {kind}", index)
            schema = message.term(schemas[index], index)
            table = message.term(tables[index], index)
            if kind == TYPE_RESOLVED:
                if body.remaining():
                    raise _broken(grammar.RESOLVED_BODY, f"{body.remaining()} bytes", index)
                events.append(Resolved(timestamps[index]))
            elif kind == TYPE_DDL:
                events.append(_ddl(body, timestamps[index], schema, table, index))
            else:
                if not schema or not table:
                    raise _broken(grammar.ROW_TABLE, "a row without its schema or table", index)
                if partitions[index] < NULL_ID:
                    raise _broken(grammar.PARTITION, f"partition {partitions[index]}", index)
                group_sizes = message.tables[2 + len(events)]
                op, columns, new, old = self._row(body, group_sizes, message, index)
                partition = None if partitions[index] == NULL_ID else partitions[index]
                events.append(
                    RowChange(
                        timestamps[index],
                        schema,
                        table,
                        op,
                        columns,
                        new,
                        old,
                        partition_id=partition,
                    )
                )
        return events

    @staticmethod
    def _row(
        body: Reader, group_sizes: list[int], message: _Message, index: int
    ) -> tuple[Op, dict[str, ColumnType], dict[str, Value] | None, dict[str, Value] | None]:
        groups = _groups(body, group_sizes, index)
        shape = tuple(group_type for group_type, *_ in groups)
        if shape not in grammar.GROUPS:
            raise _broken(grammar.COLUMN_GROUPS, f"column groups of types {shape[:4]}", index)
        columns: dict[str, ColumnType] = {}
        images: dict[int, dict[str, Value]] = {}
        kinds: dict[int, dict[str, ColumnType]] = {}
        for group_type, ids, types, flags, values in groups:
            if not ids:
                raise _broken(grammar.GROUP_COLUMNS, "a column group without columns", index)
            image: dict[str, Value] = {}
            kinds[group_type] = {}
            for term_id, mysql_type, flag, raw in zip(ids, types, flags, values, strict=True):
                name = message.term(term_id, index)
                if name is None:
                    raise _broken(grammar.TERM_ID, "a column without a name", index)
                if mysql_type > 0xFF or flag >= 1 << 16:
                    raise _broken(grammar.COLUMN_TYPE, f"type {mysql_type}, flags {flag}", index)
                if not 0 < len(name) <= grammar.MAX_NAME or name in image:
                    raise _broken(grammar.GROUP_COLUMNS, f"column name {shown(name)}", index)
                kind = column_type(mysql_type, flag)
                kinds[group_type][name] = columns[name] = kind
                image[name] = _decode_value(kind, raw, name, index)
            images[group_type] = image
        if len(kinds) == 2 and kinds[GROUP_OLD] != kinds[GROUP_NEW]:
            raise _broken(grammar.UPDATE_IMAGES, "old and new images of other columns", index)
        new, old = images.get(GROUP_NEW), images.get(GROUP_OLD)
        op = Op.UPDATE if new is not None and old is not None else Op.INSERT
        if new is None:
            op = Op.DELETE
        return op, columns, new, old

    def encode(self, events: Sequence[Event]) -> list[KafkaMessage]:
        messages: list[KafkaMessage] = []
        rows: list[RowChange] = []
        for event in events:
            if isinstance(event, RowChange):
                rows.append(event)
                if len(rows) >= self.max_batch:
                    messages.append(_encode_rows(rows))
                    rows = []
                continue
            if rows:
                messages.append(_encode_rows(rows))
                rows = []
            if isinstance(event, DDLEvent):
                if not isinstance(event.ddl_type, int):
                    raise EncodeError("craft DDL types are integers")
                messages.append(_encode_single(event.commit_ts, TYPE_DDL, event))
            elif isinstance(event, Resolved):
                messages.append(_encode_single(event.commit_ts, TYPE_RESOLVED, None))
            else:
                raise EncodeError(f"craft has no {type(event).__name__} event")
        if rows:
            messages.append(_encode_rows(rows))
        return messages


def _finish(
    headers: Writer, bodies: list[bytes], terms: _Terms, group_tables: list[list[int]]
) -> KafkaMessage:
    out = Writer()
    out.uvarint(VERSION)
    out.out += headers.out
    for body in bodies:
        out.out += body
    dict_start = len(out.out)
    if terms.ids:
        out.uvarint(len(terms.ids))
        for term in terms.ids:
            out.uvarint(len(term.encode()))
        for term in terms.ids:
            out.out += term.encode()
    tables = [[len(headers.out), len(out.out) - dict_start], [len(b) for b in bodies]]
    tables.extend(group_tables)
    size_start = len(out.out)
    for table in tables:
        out.uvarint(len(table))
        out.delta_varint_chunk(table)
    size = uvarint(len(out.out) - size_start)
    out.out += size[::-1]
    return KafkaMessage(b"", bytes(out.out))


def _encode_single(ts: int, kind: int, ddl: DDLEvent | None) -> KafkaMessage:
    terms = _Terms()
    headers = Writer()
    headers.delta_uvarint_chunk([ts])
    headers.uvarint(kind)
    headers.delta_varint_chunk([NULL_ID])
    schema = ddl.schema or None if ddl else None
    table = ddl.table or None if ddl else None
    headers.delta_varint_chunk([terms.id(schema)])
    headers.delta_varint_chunk([terms.id(table)])
    body = Writer()
    if ddl is not None:
        query = ddl.query.encode()
        body.uvarint(int(ddl.ddl_type))
        body.uvarint(len(query))
        body.out += query
    return _finish(headers, [bytes(body.out)], terms, [])


def _encode_rows(rows: list[RowChange]) -> KafkaMessage:
    terms = _Terms()
    headers = Writer()
    headers.delta_uvarint_chunk([row.commit_ts for row in rows])
    for _ in rows:
        headers.uvarint(TYPE_ROW)
    headers.delta_varint_chunk(
        [NULL_ID if r.partition_id is None else r.partition_id for r in rows]
    )
    headers.delta_varint_chunk([terms.id(row.schema or None) for row in rows])
    headers.delta_varint_chunk([terms.id(row.table or None) for row in rows])
    bodies: list[bytes] = []
    group_tables: list[list[int]] = []
    for row in rows:
        body = bytearray()
        sizes = []
        for group_type, image in ((GROUP_NEW, row.new), (GROUP_OLD, row.old)):
            if not image:
                continue
            group = _encode_group(group_type, image, row.columns, terms)
            sizes.append(len(group))
            body += group
        bodies.append(bytes(body))
        group_tables.append(sizes)
    return _finish(headers, bodies, terms, group_tables)


def _encode_group(
    group_type: int, image: dict[str, Value], columns: dict[str, ColumnType], terms: _Terms
) -> bytes:
    writer = Writer()
    writer.out.append(group_type)
    writer.uvarint(len(image))
    writer.delta_varint_chunk([terms.id(name) for name in image])
    kinds = [columns[name] for name in image]
    for kind in kinds:
        writer.uvarint(kind.mysql_type)
    for kind in kinds:
        writer.uvarint(kind.flags)
    values = [_encode_value(k, v, n) for (n, v), k in zip(image.items(), kinds, strict=True)]
    for raw in values:
        writer.varint(-1 if raw is None else len(raw))
    for raw in values:
        if raw is not None:
            writer.out += raw
    return bytes(writer.out)


__all__ = ["ColumnFlag", "CraftCodec"]
