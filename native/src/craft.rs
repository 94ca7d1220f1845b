//! TiCDC Craft: row and resolved events of well-formed messages, as Python objects.
//!
//! The layout, checks and value rules follow `streams/codecs/craft.py` step by step; where that
//! codec raises, this one hands the message back.

use std::collections::HashMap;
use std::sync::Mutex;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyFloat, PyList, PyString};

use crate::model::{Model, Row};

const VERSION: u64 = 1;
const TYPE_ROW: u64 = 1;
const TYPE_RESOLVED: u64 = 3;
const GROUP_NEW: u8 = 1;
const GROUP_OLD: u8 = 2;
const NULL_ID: i64 = -1;
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
    // Column types by `type << 16 | flags`, made once by the model's `column_type`.
    kinds: Mutex<HashMap<u32, Py<PyAny>>>,
}

#[pymethods]
impl CraftDecoder {
    /// The model and its `column_type` function.
    #[new]
    fn new(model: Py<Model>, column_type: Py<PyAny>) -> Self {
        CraftDecoder {
            model,
            column_type,
            kinds: Mutex::default(),
        }
    }

    /// The message's events, or `None` when the Python codec must decide.
    fn decode<'py>(&self, py: Python<'py>, value: &[u8]) -> PyResult<Option<Bound<'py, PyList>>> {
        let Some(message) = Message::parse(value) else {
            return Ok(None);
        };
        self.events(py, &message)
    }
}

impl CraftDecoder {
    fn events<'py>(
        &self,
        py: Python<'py>,
        message: &Message<'_>,
    ) -> PyResult<Option<Bound<'py, PyList>>> {
        let count = message.tables[1].len();
        let Some(mut header) =
            Reader::new(message.data, message.header_start, message.body_offsets[0])
        else {
            return Ok(None);
        };
        let chunks = (|| {
            let timestamps = header.delta_uvarint_chunk(count)?;
            let types = header.uvarint_chunk(count)?;
            let partitions = header.delta_varint_chunk(count)?;
            let schemas = header.delta_varint_chunk(count)?;
            let tables = header.delta_varint_chunk(count)?;
            (header.remaining() == 0).then_some((timestamps, types, partitions, schemas, tables))
        })();
        let Some((timestamps, types, partitions, schemas, tables)) = chunks else {
            return Ok(None);
        };
        let terms: Vec<Bound<'py, PyString>> =
            message.terms.iter().map(|t| PyString::new(py, t)).collect();
        let term = |id: i64| -> Option<Option<Bound<'py, PyString>>> {
            message.term(id)?;
            Some(usize::try_from(id).ok().map(|i| terms[i].clone()))
        };
        let events = PyList::empty(py);
        let mut rows = 0;
        let mut kinds = self
            .kinds
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        for index in 0..count {
            let (Some(schema), Some(table)) = (term(schemas[index]), term(tables[index])) else {
                return Ok(None);
            };
            let Some(mut body) = Reader::new(
                message.data,
                message.body_offsets[index],
                message.body_offsets[index + 1],
            ) else {
                return Ok(None);
            };
            match types[index] {
                TYPE_RESOLVED => {
                    events.append(self.model.get().resolved(py, timestamps[index])?)?
                }
                TYPE_ROW => {
                    let Some(group_sizes) = message.tables.get(2 + rows) else {
                        return Ok(None);
                    };
                    rows += 1;
                    let Some((op, columns, new, old)) =
                        self.row(py, &mut body, group_sizes, &term, &mut kinds)?
                    else {
                        return Ok(None);
                    };
                    let empty = PyString::new(py, "");
                    let partition_id = match partitions[index] {
                        NULL_ID => None,
                        id => Some(id.into_pyobject(py)?.into_any()),
                    };
                    let row = Row {
                        commit_ts: timestamps[index],
                        schema: schema.unwrap_or_else(|| empty.clone()),
                        table: table.unwrap_or(empty),
                        op,
                        columns: columns.into_any(),
                        new: new.map(Bound::into_any),
                        old: old.map(Bound::into_any),
                        partition_id,
                        handle_key_only: false,
                    };
                    events.append(self.model.get().row(py, row)?)?;
                }
                // DDL (rare) and unknown types: the Python codec.
                _ => return Ok(None),
            }
        }
        Ok(Some(events))
    }

    #[allow(clippy::type_complexity)]
    fn row<'py>(
        &self,
        py: Python<'py>,
        body: &mut Reader<'_>,
        group_sizes: &[i64],
        term: &dyn Fn(i64) -> Option<Option<Bound<'py, PyString>>>,
        kinds: &mut HashMap<u32, Py<PyAny>>,
    ) -> PyResult<
        Option<(
            usize,
            Bound<'py, PyDict>,
            Option<Bound<'py, PyDict>>,
            Option<Bound<'py, PyDict>>,
        )>,
    > {
        let columns = PyDict::new(py);
        let (mut new, mut old) = (None, None);
        for &size in group_sizes {
            let Some(size) = usize::try_from(size)
                .ok()
                .filter(|&s| s <= body.remaining())
            else {
                return Ok(None);
            };
            let mut group = Reader {
                data: body.data,
                pos: body.pos,
                end: body.pos + size,
            };
            body.pos += size;
            let Some(image) = self.group(py, &mut group, term, kinds, &columns)? else {
                return Ok(None);
            };
            match image.0 {
                GROUP_NEW => new = Some(image.1),
                _ => old = Some(image.1),
            }
        }
        if body.remaining() > 0 {
            return Ok(None);
        }
        let op = match (&new, &old) {
            (None, None) => return Ok(None),
            (None, Some(_)) => 2,
            (Some(_), Some(_)) => 1,
            (Some(_), None) => 0,
        };
        Ok(Some((op, columns, new, old)))
    }

    fn group<'py>(
        &self,
        py: Python<'py>,
        group: &mut Reader<'_>,
        term: &dyn Fn(i64) -> Option<Option<Bound<'py, PyString>>>,
        kinds: &mut HashMap<u32, Py<PyAny>>,
        columns: &Bound<'py, PyDict>,
    ) -> PyResult<Option<(u8, Bound<'py, PyDict>)>> {
        let parsed = (|| {
            let group_type = group
                .byte()
                .filter(|t| matches!(*t, GROUP_NEW | GROUP_OLD))?;
            let width = group.count()?;
            let names = group
                .delta_varint_chunk(width)?
                .into_iter()
                .map(|id| term(id)?)
                .collect::<Option<Vec<_>>>()?;
            let types = group.uvarint_chunk(width)?;
            let flags = group.uvarint_chunk(width)?;
            let values = group.nullable_bytes_chunk(width)?;
            Some((group_type, names, types, flags, values))
        })();
        let Some((group_type, names, types, flags, values)) = parsed else {
            return Ok(None);
        };
        let image = PyDict::new(py);
        for (((name, mysql_type), flag), raw) in names.into_iter().zip(types).zip(flags).zip(values)
        {
            if mysql_type > 0xFF || flag >= 1 << 16 {
                return Ok(None);
            }
            let code = (mysql_type << 16 | flag) as u32;
            let kind = match kinds.get(&code) {
                Some(kind) => kind.bind(py).clone(),
                None => {
                    let kind = self.column_type.bind(py).call1((mysql_type, flag))?;
                    kinds.insert(code, kind.clone().unbind());
                    kind
                }
            };
            let value = match raw {
                None => py.None().into_bound(py),
                Some(raw) => match cell(py, raw, mysql_type, flag) {
                    Some(value) => value,
                    None => return Ok(None),
                },
            };
            columns.set_item(&name, kind)?;
            image.set_item(name, value)?;
        }
        Ok(Some((group_type, image)))
    }
}

/// A raw value as the model holds it, by the same rules as the Python codec's value decoders.
fn cell<'py>(
    py: Python<'py>,
    raw: &[u8],
    mysql_type: u64,
    flags: u64,
) -> Option<Bound<'py, PyAny>> {
    let uvarint = || Reader::new(raw, 0, raw.len())?.uvarint();
    Some(match mysql_type {
        // TINY, SHORT, LONG, LONGLONG, INT24
        1 | 2 | 3 | 8 | 9 if flags & UNSIGNED != 0 => uvarint()?.into_pyobject(py).ok()?.into_any(),
        1 | 2 | 3 | 8 | 9 | 13 => zigzag(uvarint()?).into_pyobject(py).ok()?.into_any(),
        // BIT, ENUM, SET
        16 | 247 | 248 => uvarint()?.into_pyobject(py).ok()?.into_any(),
        4 | 5 => PyFloat::new(py, f64::from_le_bytes(raw.try_into().ok()?)).into_any(),
        // DECIMAL, dates and times, JSON: exact text
        7 | 10 | 11 | 12 | 14 | 245 | 246 => {
            PyString::new(py, std::str::from_utf8(raw).ok()?).into_any()
        }
        6 | 255 => py.None().into_bound(py),
        15 | 249..=254 if flags & BINARY == 0 => match std::str::from_utf8(raw) {
            Ok(text) => PyString::new(py, text).into_any(),
            Err(_) => PyBytes::new(py, raw).into_any(),
        },
        _ => PyBytes::new(py, raw).into_any(),
    })
}
