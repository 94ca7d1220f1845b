//! TiCDC Craft: row and resolved events of well-formed messages, as Python objects or as
//! packed rows.
//!
//! The layout, checks and value rules follow `streams/codecs/craft.py` step by step; where that
//! codec raises, this one hands the message back. That includes a message outside the grammar of
//! `streams/codecs/craft_grammar.py` (tests/streams/codecs/test_craft_grammar.py runs every rule's
//! examples through both).

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Mutex;

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString};

use crate::model::{self, Cell, Images, Model, Packed, PackedMessage, Row, Slot, Value};

const VERSION: u64 = 1;
const TYPE_ROW: u64 = 1;
const TYPE_RESOLVED: u64 = 3;
const GROUP_NEW: u8 = 1;
const GROUP_OLD: u8 = 2;
const NULL_ID: i64 = -1;
// The longest column name TiDB takes, in characters (grammar rule `group-columns`).
const MAX_NAME: usize = 64;
const MAX_VARINT_BYTES: usize = 10;
const BINARY: u64 = 0x01;
const UNSIGNED: u64 = 0x80;

/// Cursor over one region of a message.
struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
    end: usize,
}

impl<'a> Reader<'a> {
    fn new(data: &'a [u8], pos: usize, end: usize) -> Option<Self> {
        (pos <= end && end <= data.len()).then_some(Reader { data, pos, end })
    }

    fn remaining(&self) -> usize {
        self.end - self.pos
    }

    fn byte(&mut self) -> Option<u8> {
        if self.pos >= self.end {
            return None;
        }
        self.pos += 1;
        Some(self.data[self.pos - 1])
    }

    fn uvarint(&mut self) -> Option<u64> {
        let mut result = 0u64;
        for count in 0..MAX_VARINT_BYTES {
            let byte = self.byte()?;
            if byte < 0x80 {
                if count == MAX_VARINT_BYTES - 1 && byte > 1 {
                    return None;
                }
                return Some(result | u64::from(byte) << (7 * count));
            }
            result |= u64::from(byte & 0x7F) << (7 * count);
        }
        None
    }

    fn varint(&mut self) -> Option<i64> {
        self.uvarint().map(zigzag)
    }

    /// An element count: each element takes at least one byte.
    fn count(&mut self) -> Option<usize> {
        let size = self.uvarint()?;
        (size <= self.remaining() as u64).then_some(size as usize)
    }

    fn take(&mut self, size: usize) -> Option<&'a [u8]> {
        if size > self.remaining() {
            return None;
        }
        self.pos += size;
        Some(&self.data[self.pos - size..self.pos])
    }

    fn uvarint_chunk(&mut self, size: usize) -> Option<Vec<u64>> {
        (0..size).map(|_| self.uvarint()).collect()
    }

    fn delta_uvarint_chunk(&mut self, size: usize) -> Option<Vec<u64>> {
        let mut last = 0u64;
        let mut values = self.uvarint_chunk(size)?;
        for (index, value) in values.iter_mut().enumerate() {
            last = if index == 0 {
                *value
            } else {
                last.wrapping_add(*value)
            };
            *value = last;
        }
        Some(values)
    }

    fn delta_varint_chunk(&mut self, size: usize) -> Option<Vec<i64>> {
        let mut last = 0i64;
        let mut values = Vec::with_capacity(size);
        for index in 0..size {
            let delta = self.varint()?;
            last = if index == 0 {
                delta
            } else {
                last.wrapping_add(delta)
            };
            values.push(last);
        }
        Some(values)
    }

    fn nullable_bytes_chunk(&mut self, size: usize) -> Option<Vec<Option<&'a [u8]>>> {
        let lengths: Vec<i64> = (0..size).map(|_| self.varint()).collect::<Option<_>>()?;
        lengths
            .into_iter()
            .map(|length| match length {
                NULL_ID => Some(None),
                _ => self.take(usize::try_from(length).ok()?).map(Some),
            })
            .collect()
    }

    fn string_chunk(&mut self, size: usize) -> Option<Vec<&'a str>> {
        let mut lengths = Vec::with_capacity(size);
        for _ in 0..size {
            let length = self.uvarint()?;
            if length > self.remaining() as u64 {
                return None;
            }
            lengths.push(length as usize);
        }
        lengths
            .into_iter()
            .map(|length| std::str::from_utf8(self.take(length)?).ok())
            .collect()
    }
}

fn zigzag(raw: u64) -> i64 {
    (raw >> 1) as i64 ^ -((raw & 1) as i64)
}

/// The uvarint at the end of `data`, most significant group first: (value, bytes).
fn reversed_uvarint(data: &[u8]) -> Option<(u128, usize)> {
    let mut result = 0u128;
    for count in 0..MAX_VARINT_BYTES.min(data.len()) {
        let byte = data[data.len() - 1 - count];
        if byte < 0x80 {
            return Some((result | u128::from(byte) << (7 * count), count + 1));
        }
        result |= u128::from(byte & 0x7F) << (7 * count);
    }
    None
}

/// The frame of a message: size tables, term dictionary and where each region starts.
struct Message<'a> {
    data: &'a [u8],
    tables: Vec<Vec<i64>>,
    header_start: usize,
    body_offsets: Vec<usize>,
    terms: Vec<&'a str>,
}

impl<'a> Message<'a> {
    fn parse(data: &'a [u8]) -> Option<Self> {
        let mut head = Reader::new(data, 0, data.len())?;
        if head.uvarint()? != VERSION {
            return None;
        }
        let (tables_size, tail) = reversed_uvarint(data)?;
        let tables_end = data.len() - tail;
        let tables_start = tables_end.checked_sub(usize::try_from(tables_size).ok()?)?;
        if tables_start < head.pos {
            return None;
        }
        let mut reader = Reader::new(data, tables_start, tables_end)?;
        let mut tables = Vec::new();
        while reader.remaining() > 0 {
            let size = reader.count()?;
            tables.push(reader.delta_varint_chunk(size)?);
        }
        if tables.len() < 2 || tables[0].len() != 2 {
            return None;
        }
        let sizes: Vec<usize> = tables[0]
            .iter()
            .chain(&tables[1])
            .map(|&size| usize::try_from(size).ok())
            .collect::<Option<_>>()?;
        let (header_size, dict_size) = (sizes[0], sizes[1]);
        let header_start = head.pos;
        let body_start = header_start.checked_add(header_size)?;
        let mut body_offsets = vec![body_start];
        for &size in &sizes[2..] {
            body_offsets.push(body_offsets.last()?.checked_add(size)?);
        }
        let dict_start = *body_offsets.last()?;
        if dict_start.checked_add(dict_size)? != tables_start {
            return None;
        }
        let mut terms = Vec::new();
        if dict_size > 0 {
            let mut reader = Reader::new(data, dict_start, dict_start + dict_size)?;
            let count = reader.count()?;
            terms = reader.string_chunk(count)?;
        }
        Some(Message {
            data,
            tables,
            header_start,
            body_offsets,
            terms,
        })
    }

    /// A term by id: `Some(None)` for the null id, `None` for an id not in the dictionary.
    fn term(&self, id: i64) -> Option<Option<&'a str>> {
        if id == NULL_ID {
            return Some(None);
        }
        usize::try_from(id)
            .ok()
            .and_then(|i| self.terms.get(i))
            .map(|t| Some(*t))
    }
}

/// Decodes Craft messages into the model's `RowChange` and `Resolved` objects.
#[pyclass(frozen, module = "ticdc_sink_native")]
pub struct CraftDecoder {
    model: Py<Model>,
    column_type: Py<PyAny>,
    max_bytes: usize,
    // Column types by `type << 16 | flags`, made once by the model's `column_type`.
    kinds: Mutex<HashMap<u32, Py<PyAny>>>,
}

#[pymethods]
impl CraftDecoder {
    /// The model, its `column_type` function, and the size above which a message is handed back.
    #[new]
    fn new(model: Py<Model>, column_type: Py<PyAny>, max_bytes: usize) -> Self {
        CraftDecoder {
            model,
            column_type,
            max_bytes,
            kinds: Mutex::default(),
        }
    }

    /// The message's events, or `None` when the Python codec must decide (the key is unused:
    /// Craft's is empty).
    fn decode<'py>(
        &self,
        py: Python<'py>,
        _key: &Bound<'py, PyAny>,
        value: &Bound<'py, PyAny>,
    ) -> PyResult<Option<Bound<'py, PyList>>> {
        let Some(value) = self.taken(value) else {
            return Ok(None);
        };
        let Some(message) = Message::parse(value) else {
            return Ok(None);
        };
        let Some(parsed) = events(&message) else {
            return Ok(None);
        };
        let terms: Vec<Bound<'py, PyString>> =
            message.terms.iter().map(|t| PyString::new(py, t)).collect();
        let empty = PyString::new(py, "");
        let name = |term: Option<usize>| term.map_or_else(|| empty.clone(), |i| terms[i].clone());
        let mut kinds = self
            .kinds
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let list = PyList::empty(py);
        for event in parsed {
            let made = match event {
                Event::Resolved(ts) => self.model.get().resolved(py, ts)?,
                Event::Row(row) => match self.row(py, row, &terms, &name, &mut kinds)? {
                    Some(row) => row,
                    None => return Ok(None),
                },
            };
            list.append(made)?;
        }
        Ok(Some(list))
    }

    /// The message's rows packed and its resolved timestamps, or `None` when the Python codec
    /// must decide: what `decode` would return, already packed.
    fn decode_packed(
        &self,
        py: Python<'_>,
        _key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
    ) -> PyResult<Option<Py<PackedMessage>>> {
        let Some(value) = self.taken(value) else {
            return Ok(None);
        };
        // Parsing and packing touch no Python object: other threads run meanwhile.
        match py.detach(|| pack_message(value)) {
            Some(packed) => packed.into_py(py),
            None => Ok(None),
        }
    }

    /// `decode_packed` of many (key, value) messages in one stretch without the GIL; `None`
    /// for each the Python codec must decide.
    fn decode_packed_many<'py>(
        &self,
        py: Python<'py>,
        messages: Vec<(Bound<'py, PyAny>, Bound<'py, PyAny>)>,
    ) -> PyResult<Vec<Option<Py<PackedMessage>>>> {
        let slices: Vec<Option<&[u8]>> = messages
            .iter()
            .map(|(_, value)| self.taken(value))
            .collect();
        model::pack_many(py, &slices, |value| pack_message((*value)?))
    }
}

impl CraftDecoder {
    /// The value's bytes when this decoder is to try it: exactly `bytes`, within the size.
    fn taken<'a>(&self, value: &'a Bound<'_, PyAny>) -> Option<&'a [u8]> {
        model::exact_bytes(value).filter(|data| data.len() <= self.max_bytes)
    }
}

/// A message's rows packed and its resolved timestamps (no Python object touched).
fn pack_message(value: &[u8]) -> Option<Packed> {
    let message = Message::parse(value)?;
    let mut packed = Packed::default();
    for event in events(&message)? {
        match event {
            Event::Resolved(ts) => packed.resolved(ts),
            Event::Row(row) => packed.row(row.commit_ts, |out| pack_row(&message, row, out))?,
        }
    }
    Some(packed)
}

impl CraftDecoder {
    /// The model's row: the images as dicts, the column types from the model's `column_type`;
    /// `None` when Python must decide.
    fn row<'py>(
        &self,
        py: Python<'py>,
        row: RowEvent<'_>,
        terms: &[Bound<'py, PyString>],
        name: &dyn Fn(Option<usize>) -> Bound<'py, PyString>,
        kinds: &mut HashMap<u32, Py<PyAny>>,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        let columns = PyDict::new(py);
        let (mut new, mut old) = (None, None);
        for group in row.groups {
            let image = PyDict::new(py);
            for (term, mysql_type, flags, raw) in group.columns {
                let code = mysql_type << 16 | flags;
                let kind = match kinds.get(&code) {
                    Some(kind) => kind.bind(py).clone(),
                    None => {
                        let kind = self.column_type.bind(py).call1((mysql_type, flags))?;
                        kinds.insert(code, kind.clone().unbind());
                        kind
                    }
                };
                let value = match raw.map(|raw| cell(raw, mysql_type, flags)) {
                    None => py.None().into_bound(py),
                    Some(Some(value)) => value.to_py(py)?,
                    Some(None) => return Ok(None),
                };
                columns.set_item(&terms[term], kind)?;
                image.set_item(&terms[term], value)?;
            }
            match group.slot {
                Slot::New => new = Some(image.into_any()),
                Slot::Old => old = Some(image.into_any()),
            }
        }
        let op = match (&new, &old) {
            (None, None) => return Ok(None),
            (None, Some(_)) => 2,
            (Some(_), Some(_)) => 1,
            (Some(_), None) => 0,
        };
        let partition_id = match row.partition {
            NULL_ID => None,
            id => Some(id.into_pyobject(py)?.into_any()),
        };
        let row = Row {
            commit_ts: row.commit_ts,
            schema: name(row.schema),
            table: name(row.table),
            op,
            columns: columns.into_any(),
            new,
            old,
            partition_id,
            handle_key_only: false,
            row_id: None,
        };
        self.model.get().row(py, row).map(Some)
    }
}

/// One event of a message, its chunks and groups read and checked.
enum Event<'a> {
    Resolved(u64),
    Row(RowEvent<'a>),
}

struct RowEvent<'a> {
    commit_ts: u64,
    /// Term indices; `None`: the null term (an empty name).
    schema: Option<usize>,
    table: Option<usize>,
    partition: i64,
    groups: Vec<Group<'a>>,
}

/// A column group: which image, and per column its name's term index, type, flags and raw value.
struct Group<'a> {
    slot: Slot,
    columns: Vec<(usize, u32, u32, Option<&'a [u8]>)>,
}

/// The message's events, in order; `None` when anything is not exactly as the Python codec
/// would accept it.
fn events<'a>(message: &Message<'a>) -> Option<Vec<Event<'a>>> {
    let count = message.tables[1].len();
    let mut header = Reader::new(message.data, message.header_start, message.body_offsets[0])?;
    let timestamps = header.delta_uvarint_chunk(count)?;
    let types = header.uvarint_chunk(count)?;
    let partitions = header.delta_varint_chunk(count)?;
    let schemas = header.delta_varint_chunk(count)?;
    let tables = header.delta_varint_chunk(count)?;
    if header.remaining() != 0 {
        return None;
    }
    // Rules `message-events` and `size-tables`: one resolved or DDL event, or rows only, each
    // row with its column-group size table.
    let rows = types.iter().filter(|&&kind| kind == TYPE_ROW).count();
    if count == 0 || (count > 1 && rows != count) || message.tables.len() != 2 + rows {
        return None;
    }
    let term_index = |id: i64| -> Option<Option<usize>> {
        message.term(id)?;
        Some(usize::try_from(id).ok())
    };
    let mut events = Vec::with_capacity(count);
    for index in 0..count {
        let (schema, table) = (term_index(schemas[index])?, term_index(tables[index])?);
        let mut body = Reader::new(
            message.data,
            message.body_offsets[index],
            message.body_offsets[index + 1],
        )?;
        events.push(match types[index] {
            // Rule `resolved-body`: empty.
            TYPE_RESOLVED if body.remaining() == 0 => Event::Resolved(timestamps[index]),
            TYPE_ROW => {
                // Rules `row-table` and `partition`.
                let named = |term: Option<usize>| term.filter(|&i| !message.terms[i].is_empty());
                if named(schema).is_none() || named(table).is_none() || partitions[index] < NULL_ID
                {
                    return None;
                }
                Event::Row(RowEvent {
                    commit_ts: timestamps[index],
                    schema,
                    table,
                    partition: partitions[index],
                    groups: groups(message, &mut body, &message.tables[2 + events.len()])?,
                })
            }
            // DDL (rare), unknown types and what breaks a rule: the Python codec.
            _ => return None,
        });
    }
    Some(events)
}

/// A row body's column groups, each exactly the size its table gives.
fn groups<'a>(
    message: &Message<'a>,
    body: &mut Reader<'a>,
    group_sizes: &[i64],
) -> Option<Vec<Group<'a>>> {
    let mut groups = Vec::with_capacity(group_sizes.len());
    for &size in group_sizes {
        let size = usize::try_from(size)
            .ok()
            .filter(|&s| s <= body.remaining())?;
        let mut group = Reader {
            data: body.data,
            pos: body.pos,
            end: body.pos + size,
        };
        body.pos += size;
        groups.push(group_columns(message, &mut group)?);
    }
    (body.remaining() == 0 && grammatical(message, &groups)).then_some(groups)
}

/// Rules `column-groups`, `group-columns` and `update-images`: new alone, old alone or new then
/// old; each group of columns named once by 1 to `MAX_NAME` characters; an update's two groups
/// of the same columns, types and flags.
fn grammatical(message: &Message<'_>, groups: &[Group<'_>]) -> bool {
    let shape: Vec<bool> = groups.iter().map(|g| matches!(g.slot, Slot::New)).collect();
    if !matches!(shape.as_slice(), [true] | [false] | [true, false]) {
        return false;
    }
    let mut seen: Vec<HashMap<&str, (u32, u32)>> = Vec::with_capacity(2);
    for group in groups {
        let mut names = HashMap::with_capacity(group.columns.len());
        for &(term, mysql_type, flags, _) in &group.columns {
            if names
                .insert(message.terms[term], (mysql_type, flags))
                .is_some()
            {
                return false;
            }
        }
        if names.is_empty() {
            return false;
        }
        seen.push(names);
    }
    seen.len() == 1 || seen[0] == seen[1]
}

fn group_columns<'a>(message: &Message<'a>, group: &mut Reader<'a>) -> Option<Group<'a>> {
    let slot = match group.byte()? {
        GROUP_NEW => Slot::New,
        GROUP_OLD => Slot::Old,
        _ => return None,
    };
    let width = group.count()?;
    let names = group
        .delta_varint_chunk(width)?
        .into_iter()
        // A column needs a name: the null term is the Python codec's error.
        .map(|id| usize::try_from(message.term(id)?.map(|_| id)?).ok())
        .collect::<Option<Vec<_>>>()?;
    let types = group.uvarint_chunk(width)?;
    let flags = group.uvarint_chunk(width)?;
    let values = group.nullable_bytes_chunk(width)?;
    if group.remaining() != 0 {
        return None;
    }
    let mut columns = Vec::with_capacity(width);
    for (((name, mysql_type), flags), raw) in names.into_iter().zip(types).zip(flags).zip(values) {
        let length = message.terms[name].chars().count();
        if mysql_type > 0xFF || flags >= 1 << 16 || length == 0 || length > MAX_NAME {
            return None;
        }
        columns.push((name, mysql_type as u32, flags as u32, raw));
    }
    Some(Group { slot, columns })
}

/// A row in the packed form (see `model::pack_row`).
fn pack_row(message: &Message<'_>, row: RowEvent<'_>, out: &mut Vec<u8>) -> Option<()> {
    let name = |term: Option<usize>| term.map_or("", |i| message.terms[i]);
    let mut read = Vec::with_capacity(row.groups.len());
    for group in row.groups {
        let mut cells = Vec::with_capacity(group.columns.len());
        for (term, mysql_type, flags, raw) in group.columns {
            cells.push(Cell {
                name: Cow::Borrowed(message.terms[term]),
                kind: (mysql_type, flags),
                value: match raw {
                    None => Value::Null,
                    Some(raw) => cell(raw, mysql_type, flags)?,
                },
            });
        }
        read.push((group.slot, cells));
    }
    let partition_id = (row.partition != NULL_ID).then_some(Value::Signed(row.partition));
    let images = Images { read };
    let (schema, table) = (name(row.schema), name(row.table));
    model::pack_row(
        out,
        schema,
        table,
        partition_id.as_ref(),
        false,
        None,
        &images,
    )
    .then_some(())
}

/// A raw value as the model holds it, by the same rules as the Python codec's value decoders.
fn cell(raw: &[u8], mysql_type: u32, flags: u32) -> Option<Value<'_>> {
    // An integer out of its type's range is the Python codec's error to raise.
    cell_value(raw, mysql_type, flags).filter(|value| model::holds(mysql_type, flags, value))
}

fn cell_value(raw: &[u8], mysql_type: u32, flags: u32) -> Option<Value<'_>> {
    // Rule `column-value`: the varint fills the value's bytes.
    let uvarint = || {
        let mut reader = Reader::new(raw, 0, raw.len())?;
        let value = reader.uvarint()?;
        (reader.remaining() == 0).then_some(value)
    };
    let (unsigned, binary) = (
        u64::from(flags) & UNSIGNED != 0,
        u64::from(flags) & BINARY != 0,
    );
    Some(match mysql_type {
        // TINY, SHORT, LONG, LONGLONG, INT24
        1 | 2 | 3 | 8 | 9 if unsigned => Value::Unsigned(uvarint()?),
        1 | 2 | 3 | 8 | 9 | 13 => Value::Signed(zigzag(uvarint()?)),
        // BIT, ENUM, SET
        16 | 247 | 248 => Value::Unsigned(uvarint()?),
        4 | 5 => Value::Float(f64::from_le_bytes(raw.try_into().ok()?)),
        // DECIMAL, dates and times, JSON: exact text
        7 | 10 | 11 | 12 | 14 | 245 | 246 => {
            Value::Text(Cow::Borrowed(std::str::from_utf8(raw).ok()?))
        }
        6 | 255 => Value::Null,
        15 | 249..=254 if !binary => match std::str::from_utf8(raw) {
            Ok(text) => Value::Text(Cow::Borrowed(text)),
            Err(_) => Value::Bytes(Cow::Borrowed(raw)),
        },
        _ => Value::Bytes(Cow::Borrowed(raw)),
    })
}
