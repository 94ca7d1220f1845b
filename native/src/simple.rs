//! TiCDC Simple protocol, JSON: DML and watermark messages whose table layout Python has made.
//!
//! The Python codec keeps the table schemas and, per (schema, table, version), a layout: each
//! column's type, the function that reads its values and its declared bound (length or
//! members). This decoder reads that layout (and prepares it once per layout object), applies
//! the same readers' rules and bounds, and hands back any message it cannot decode exactly as
//! they would: BOOTSTRAP and DDL, a table without a layout yet, anything malformed or past a
//! bound.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Mutex;

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyFloat, PyList, PyString, PyTuple};
use serde::de::{Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::json::{flag, integer_text, parse, string, BorrowedStr, Ordered};
use crate::model::{self, exact_bytes, Model, Row};

/// How a column's non-null values are read (the Python codec's reader functions, in order).
#[derive(Clone, Copy, PartialEq)]
enum Read {
    Binary,
    Integer,
    Float,
    Timestamp,
    Text,
}

const READS: [Read; 5] = [
    Read::Binary,
    Read::Integer,
    Read::Float,
    Read::Timestamp,
    Read::Text,
];

struct Column {
    name: Py<PyString>,
    kind: Py<PyAny>,
    read: Read,
    // The integers an integer column holds (`model::integer_range` of its type and flags).
    integers: Option<(i128, i128)>,
    // The column's declared bound (the Python layout's `Limit`), if known.
    limit: Option<Limit>,
}

/// A declared bound, as `streams.codecs.limits.Limit` checks it (its `unit` numbers, in order).
#[derive(Clone, Copy)]
enum Limit {
    Characters(u64),
    Bytes(u64),
    EnumMembers(u64),
    SetMembers(u64),
}

impl Limit {
    fn new(unit: u8, maximum: u64) -> Option<Self> {
        match unit {
            0 => Some(Limit::Characters(maximum)),
            1 => Some(Limit::Bytes(maximum)),
            2 => Some(Limit::EnumMembers(maximum)),
            3 => Some(Limit::SetMembers(maximum)),
            _ => None,
        }
    }

    /// Whether text fits (a string's length counts bytes; characters are counted only when
    /// the bytes alone do not settle it).
    fn text_fits(self, text: &str) -> bool {
        let size = text.len() as u64;
        match self {
            Limit::Characters(maximum) => size <= maximum || text.chars().count() as u64 <= maximum,
            Limit::Bytes(maximum) => size <= maximum,
            Limit::EnumMembers(_) | Limit::SetMembers(_) => true,
        }
    }

    fn bytes_fit(self, data: &[u8]) -> bool {
        match self {
            Limit::Bytes(maximum) => data.len() as u64 <= maximum,
            _ => true,
        }
    }

    /// Whether an ENUM index or SET bitmask (already within its type's range) fits.
    fn integer_fits(self, number: i128) -> bool {
        match self {
            Limit::EnumMembers(maximum) => number <= i128::from(maximum),
            Limit::SetMembers(maximum) => maximum >= 127 || number >> maximum == 0,
            Limit::Characters(_) | Limit::Bytes(_) => true,
        }
    }
}

/// A layout prepared from the Python layout object it was made from.
struct Prepared {
    source: Py<PyAny>,
    // In the layout's order: images list their columns in that order, so most lookups are one
    // comparison at the expected position.
    columns: Vec<(String, Column)>,
    positions: HashMap<String, usize>,
    // Every column's type in layout order: a row image listing them all copies it.
    kinds: Py<PyDict>,
    // Every column set to None in layout order: an image listing them all starts as its copy,
    // which is already sized for them.
    blank: Py<PyDict>,
}

impl Prepared {
    /// Whether an image names exactly the layout's columns, in its order.
    fn is_whole(&self, values: &Values<'_>) -> bool {
        values.0.len() == self.columns.len()
            && values
                .0
                .iter()
                .zip(&self.columns)
                .all(|((name, _), (expected, _))| name == expected)
    }

    fn column(&self, position: usize, name: &str) -> Option<&Column> {
        match self.columns.get(position) {
            Some((expected, column)) if expected == name => Some(column),
            _ => self.positions.get(name).map(|&i| &self.columns[i].1),
        }
    }
}

#[derive(Deserialize)]
struct Message<'a> {
    #[serde(borrow)]
    version: Option<&'a RawValue>,
    #[serde(borrow, rename = "type")]
    kind: Option<&'a RawValue>,
    #[serde(borrow, rename = "buildTs")]
    build_ts: Option<&'a RawValue>,
    #[serde(borrow, rename = "tableID")]
    table_id: Option<&'a RawValue>,
    #[serde(borrow, rename = "claimCheckLocation")]
    claim_check: Option<&'a RawValue>,
    #[serde(borrow)]
    database: Option<&'a RawValue>,
    #[serde(borrow)]
    table: Option<&'a RawValue>,
    #[serde(borrow, rename = "schemaVersion")]
    schema_version: Option<&'a RawValue>,
    #[serde(borrow, rename = "commitTs")]
    commit_ts: Option<&'a RawValue>,
    #[serde(borrow, rename = "handleKeyOnly")]
    handle_key_only: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "nullable")]
    data: Option<Values<'a>>,
    #[serde(borrow, default, deserialize_with = "nullable")]
    old: Option<Values<'a>>,
}

/// A missing or null image is none (as in Python); anything but an object is refused.
fn nullable<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Values<'de>>, D::Error> {
    Option::<Values<'de>>::deserialize(deserializer)
}

/// An image's values in the order written.
type Values<'a> = Ordered<'a, Token<'a>>;

/// One JSON value of an image, as orjson would hand it to the Python readers.
enum Token<'a> {
    Null,
    Bool,
    /// Within 64 bits: Ok(signed) or Err(unsigned above i64).
    Integer(Result<i64, u64>),
    Float(f64),
    Text(Cow<'a, str>),
    /// An object (a TIMESTAMP value is `{"location": ..., "value": ...}`): its "value" string.
    Object(Option<Cow<'a, str>>),
}

impl<'de> Deserialize<'de> for Token<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> Visitor<'de> for Visit {
            type Value = Token<'de>;
            fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
                formatter.write_str("a JSON value")
            }
            fn visit_unit<E>(self) -> Result<Self::Value, E> {
                Ok(Token::Null)
            }
            fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
                Ok(Token::Bool)
            }
            fn visit_i64<E>(self, value: i64) -> Result<Self::Value, E> {
                Ok(Token::Integer(Ok(value)))
            }
            fn visit_u64<E>(self, value: u64) -> Result<Self::Value, E> {
                Ok(Token::Integer(i64::try_from(value).map_err(|_| value)))
            }
            fn visit_f64<E>(self, value: f64) -> Result<Self::Value, E> {
                Ok(Token::Float(value))
            }
            fn visit_borrowed_str<E>(self, text: &'de str) -> Result<Self::Value, E> {
                Ok(Token::Text(Cow::Borrowed(text)))
            }
            fn visit_str<E>(self, text: &str) -> Result<Self::Value, E> {
                Ok(Token::Text(Cow::Owned(text.to_owned())))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut value = None;
                while let Some(key) = map.next_key::<BorrowedStr<'de>>()? {
                    if key.0 == "value" {
                        value = match map.next_value::<Token<'de>>()? {
                            Token::Text(text) => Some(text),
                            _ => return Err(serde::de::Error::custom("a non-text value")),
                        };
                    } else {
                        map.next_value::<serde::de::IgnoredAny>()?;
                    }
                }
                Ok(Token::Object(value))
            }
        }
        deserializer.deserialize_any(Visit)
    }
}

/// Decodes Simple JSON messages into the model's `RowChange` and `Resolved` objects.
#[pyclass(frozen, module = "ticdc_sink_native")]
pub struct SimpleDecoder {
    model: Py<Model>,
    readers: [Py<PyAny>; 5],
    layouts: Py<PyDict>,
    max_bytes: usize,
    state: Mutex<State>,
}

/// What one (schema, table, version) resolves to, made once.
struct Table {
    /// The codec's layouts key, and the names rows carry, as Python objects.
    key: Py<PyTuple>,
    schema: Py<PyString>,
    table: Py<PyString>,
    /// The layout last found under `key`, prepared.
    layout: Option<Prepared>,
}

#[derive(Default)]
struct State {
    /// By `Table::id` of (schema, table, version).
    tables: HashMap<Vec<u8>, Table>,
    id: Vec<u8>,
}

// Tables kept before the cache starts over (each schema version is one; hostile streams stay
// bounded).
const MAX_TABLES: usize = 4_096;

impl Table {
    /// Writes the identity of (schema, table, version) into `id`, a reused buffer.
    fn id(id: &mut Vec<u8>, schema: &str, table: &str, version: u64) {
        id.clear();
        id.extend_from_slice(&schema.len().to_le_bytes());
        id.extend_from_slice(schema.as_bytes());
        id.extend_from_slice(&version.to_le_bytes());
        id.extend_from_slice(table.as_bytes());
    }

    fn new(py: Python<'_>, schema: &str, table: &str, version: u64) -> PyResult<Self> {
        let (schema, table) = (PyString::new(py, schema), PyString::new(py, table));
        let version = version.into_pyobject(py)?.into_any();
        let key = PyTuple::new(py, [schema.as_any(), table.as_any(), &version])?;
        Ok(Table {
            key: key.unbind(),
            schema: schema.unbind(),
            table: table.unbind(),
            layout: None,
        })
    }
}

#[pymethods]
impl SimpleDecoder {
    /// The model; the Python codec's value readers for binary, integer, float, timestamp and
    /// text columns; its layouts, a map of (schema, table, version) to {column: (column type,
    /// reader, limit or None)}; and the size above which a message is handed back.
    #[new]
    fn new(
        model: Py<Model>,
        readers: [Py<PyAny>; 5],
        layouts: Py<PyDict>,
        max_bytes: usize,
    ) -> Self {
        SimpleDecoder {
            model,
            readers,
            layouts,
            max_bytes,
            state: Mutex::default(),
        }
    }

    /// The message's events, or `None` when the Python codec must decide (the key is unused:
    /// a Simple message is its value).
    fn decode<'py>(
        &self,
        py: Python<'py>,
        _key: &Bound<'py, PyAny>,
        value: &Bound<'py, PyAny>,
    ) -> PyResult<Option<Bound<'py, PyList>>> {
        let Some(value) = exact_bytes(value).filter(|data| data.len() <= self.max_bytes) else {
            return Ok(None);
        };
        // Rule `message-object`: serde would also read the struct from an array.
        let Some(message) = object(value).then(|| parse::<Message>(value)).flatten() else {
            return Ok(None);
        };
        // Rules `version` and `ts-fields` (the commit ts is read below).
        if message.version.map(RawValue::get) != Some("1") || !int64(message.build_ts) {
            return Ok(None);
        }
        let event = match message.kind.map(RawValue::get) {
            Some("\"WATERMARK\"") => match uint64(message.commit_ts) {
                Some(ts) => Some(self.model.get().resolved(py, ts)?),
                None => None,
            },
            Some("\"INSERT\"") => self.row(py, &message, 0)?,
            Some("\"UPDATE\"") => self.row(py, &message, 1)?,
            Some("\"DELETE\"") => self.row(py, &message, 2)?,
            _ => None,
        };
        event.map(|event| PyList::new(py, [event])).transpose()
    }
}

impl SimpleDecoder {
    fn row<'py>(
        &self,
        py: Python<'py>,
        message: &Message<'_>,
        op: usize,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        // Rule `dml-fields`: a DML names its table; a claim check is the Python codec's.
        let (Some(schema), Some(table)) = (text(message.database), text(message.table)) else {
            return Ok(None);
        };
        let absent = |raw: Option<&RawValue>| raw.is_none_or(|raw| raw.get() == "null");
        if schema.is_empty()
            || table.is_empty()
            || !(absent(message.table_id) || int64(message.table_id))
            || !absent(message.claim_check)
        {
            return Ok(None);
        }
        let version = match message.schema_version.map(RawValue::get) {
            None | Some("null") => 0,
            Some(_) => match uint64(message.schema_version) {
                Some(version) => version,
                None => return Ok(None),
            },
        };
        // A handle-key-only row (TiCDC's claim-check message is one) is the Python codec's:
        // this decoder skips `claimCheckLocation`.
        let (Some(commit_ts), Some(false)) =
            (uint64(message.commit_ts), flag(message.handle_key_only))
        else {
            return Ok(None);
        };
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let State { tables, id } = &mut *state;
        Table::id(id, &schema, &table, version);
        if !tables.contains_key(id.as_slice()) {
            if tables.len() >= MAX_TABLES {
                tables.clear();
            }
            tables.insert(id.clone(), Table::new(py, &schema, &table, version)?);
        }
        let entry = tables.get_mut(id.as_slice()).expect("made above");
        let Some(source) = self.layouts.bind(py).get_item(entry.key.bind(py))? else {
            return Ok(None);
        };
        // Python makes a new layout object when a table's schema is announced again.
        if !entry.layout.as_ref().is_some_and(|l| l.source.is(&source)) {
            entry.layout = self.prepare(py, &source)?;
        }
        let (schema, table) = (entry.schema.bind(py).clone(), entry.table.bind(py).clone());
        let Some(layout) = &entry.layout else {
            return Ok(None);
        };
        // The first image decides the order of `columns`, as in Python.
        let first = message.data.as_ref().or(message.old.as_ref());
        let whole = first.is_some_and(|values| layout.is_whole(values));
        let columns = if whole {
            layout.kinds.bind(py).copy()?
        } else {
            PyDict::new(py)
        };
        let mut images = [None, None];
        for (slot, raw) in [&message.data, &message.old].into_iter().enumerate() {
            if let Some(raw) = raw {
                let image = if layout.is_whole(raw) {
                    layout.blank.bind(py).copy()?
                } else {
                    PyDict::new(py)
                };
                for (position, (name, value)) in raw.0.iter().enumerate() {
                    let Some(column) = layout.column(position, name) else {
                        return Ok(None);
                    };
                    let Some(value) = cell(py, value, column)? else {
                        return Ok(None);
                    };
                    image.set_item(column.name.bind(py), value)?;
                    if !whole {
                        columns.set_item(column.name.bind(py), column.kind.bind(py))?;
                    }
                }
                images[slot] = Some(image.into_any());
            }
        }
        let [new, old] = images;
        // Rule `row-images`: INSERT data alone, DELETE old alone, UPDATE both, none empty.
        let carried = [op != 2, op != 0];
        let empty =
            [&message.data, &message.old].map(|raw| raw.as_ref().is_some_and(|v| v.0.is_empty()));
        if [new.is_some(), old.is_some()] != carried || empty.contains(&true) {
            return Ok(None);
        }
        let row = Row {
            commit_ts,
            schema,
            table,
            op,
            columns: columns.into_any(),
            new,
            old,
            partition_id: None,
            handle_key_only: false,
            row_id: None,
        };
        Ok(Some(self.model.get().row(py, row)?))
    }

    /// The Rust side of a Python layout; `None` if a column has a reader not known here.
    fn prepare(&self, py: Python<'_>, layout: &Bound<'_, PyAny>) -> PyResult<Option<Prepared>> {
        let Ok(layout) = layout.cast::<PyDict>() else {
            return Ok(None);
        };
        let mut columns = Vec::with_capacity(layout.len());
        for (name, entry) in layout.iter() {
            let (kind, reader, bound) =
                entry.extract::<(Bound<PyAny>, Bound<PyAny>, Bound<PyAny>)>()?;
            let Some(read) = self
                .readers
                .iter()
                .position(|r| r.bind(py).is(&reader))
                .map(|i| READS[i])
            else {
                return Ok(None);
            };
            // A name that is not text is the Python codec's to judge.
            let Ok(name) = name.cast_into::<PyString>() else {
                return Ok(None);
            };
            let (Ok(mysql_type), Ok(flags)) = (
                kind.getattr("mysql_type")?.extract::<u32>(),
                kind.getattr("flags")?.extract::<u32>(),
            ) else {
                return Ok(None);
            };
            let limit = if bound.is_none() {
                None
            } else {
                let (Ok(unit), Ok(maximum)) = (
                    bound.getattr("unit")?.extract::<u8>(),
                    bound.getattr("maximum")?.extract::<u64>(),
                ) else {
                    return Ok(None);
                };
                let Some(limit) = Limit::new(unit, maximum) else {
                    return Ok(None);
                };
                Some(limit)
            };
            let column = Column {
                name: name.clone().unbind(),
                kind: kind.unbind(),
                read,
                integers: model::integer_range(mysql_type, flags & 0x80 != 0),
                limit,
            };
            columns.push((name.to_str()?.to_owned(), column));
        }
        if columns.is_empty() {
            // No schema columns: Python passes values through untyped.
            return Ok(None);
        }
        let positions = columns
            .iter()
            .enumerate()
            .map(|(i, (name, _))| (name.clone(), i))
            .collect();
        let (kinds, blank) = (PyDict::new(py), PyDict::new(py));
        for (_, column) in &columns {
            kinds.set_item(column.name.bind(py), column.kind.bind(py))?;
            blank.set_item(column.name.bind(py), py.None())?;
        }
        Ok(Some(Prepared {
            source: layout.clone().into_any().unbind(),
            columns,
            positions,
            kinds: kinds.unbind(),
            blank: blank.unbind(),
        }))
    }
}

/// A value read as the Python codec's reader for the column would; `None` where that reader
/// would refuse it (Python decides then).
/// An integer column's value must be an integer in `integers` (the Python codec refuses any
/// other), and any value must fit the column's declared bound.
fn cell<'py>(
    py: Python<'py>,
    token: &Token<'_>,
    column: &Column,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    let (read, integers, limit) = (column.read, column.integers, column.limit);
    let int = |value: Result<i64, u64>| match value {
        Ok(signed) => signed.into_pyobject(py).map(Bound::into_any),
        Err(unsigned) => unsigned.into_pyobject(py).map(Bound::into_any),
    };
    let held = |value: &Result<i64, u64>| {
        let number = match value {
            Ok(signed) => i128::from(*signed),
            Err(unsigned) => i128::from(*unsigned),
        };
        integers.is_none_or(|(low, high)| (low..=high).contains(&number))
            && limit.is_none_or(|limit| limit.integer_fits(number))
    };
    let text_fits = |text: &str| limit.is_none_or(|limit| limit.text_fits(text));
    if integers.is_some() && read != Read::Integer && !matches!(token, Token::Null) {
        return Ok(None);
    }
    Ok(match (token, read) {
        (Token::Null, _) => Some(py.None().into_bound(py)),
        (Token::Integer(value), Read::Integer) => held(value).then(|| int(*value)).transpose()?,
        (Token::Text(text), Read::Integer) => {
            integer_text(text).filter(held).map(int).transpose()?
        }
        (Token::Integer(Ok(value)), Read::Float) => {
            Some(PyFloat::new(py, *value as f64).into_any())
        }
        (Token::Integer(Err(value)), Read::Float) => {
            Some(PyFloat::new(py, *value as f64).into_any())
        }
        (Token::Float(value), Read::Float) => Some(PyFloat::new(py, *value).into_any()),
        (Token::Text(text), Read::Float) => text
            .parse::<f64>()
            .ok()
            .map(|v| PyFloat::new(py, v).into_any()),
        (Token::Text(text), Read::Text | Read::Timestamp) => {
            text_fits(text).then(|| PyString::new(py, text).into_any())
        }
        (Token::Object(Some(text)), Read::Timestamp) => {
            text_fits(text).then(|| PyString::new(py, text).into_any())
        }
        (Token::Text(text), Read::Binary) => STANDARD
            .decode(text.as_bytes())
            .ok()
            .filter(|data| limit.is_none_or(|limit| limit.bytes_fit(data)))
            .map(|data| PyBytes::new(py, &data).into_any()),
        _ => None,
    })
}

/// An integer within [0, 2^64) (rules `ts-fields` and `dml-fields`: JSON carries uint64s).
fn uint64(raw: Option<&RawValue>) -> Option<u64> {
    match integer_text(raw?.get())? {
        Ok(value) => u64::try_from(value).ok(),
        Err(value) => Some(value),
    }
}

/// Whether the value is a JSON integer within [-2^63, 2^63): Go's int64 (`buildTs`, `tableID`).
fn int64(raw: Option<&RawValue>) -> bool {
    matches!(raw.and_then(|raw| integer_text(raw.get())), Some(Ok(_)))
}

/// Whether `data` starts as a JSON object does.
fn object(data: &[u8]) -> bool {
    data.iter()
        .find(|byte| !matches!(byte, b' ' | b'\t' | b'\n' | b'\r'))
        .is_some_and(|&byte| byte == b'{')
}

fn text(raw: Option<&RawValue>) -> Option<Cow<'_, str>> {
    string(raw?)
}

#[cfg(test)]
mod tests {
    use super::Limit;

    #[test]
    fn characters_count_code_points_and_bytes_count_bytes() {
        assert!(Limit::Characters(3).text_fits("ü中😀"));
        assert!(!Limit::Characters(3).text_fits("ü中😀a"));
        assert!(Limit::Bytes(4).text_fits("üü"));
        assert!(!Limit::Bytes(4).text_fits("ü中"));
        assert!(Limit::Bytes(3).bytes_fit(b"abc"));
        assert!(!Limit::Bytes(3).bytes_fit(b"abcd"));
        // A count the unit does not make passes (Python's check ignores it too).
        assert!(Limit::EnumMembers(1).text_fits("abc"));
        assert!(Limit::Characters(1).bytes_fit(b"abc"));
    }

    #[test]
    fn enum_indexes_and_set_bits_stay_within_their_members() {
        assert!(Limit::EnumMembers(2).integer_fits(0));
        assert!(Limit::EnumMembers(2).integer_fits(2));
        assert!(!Limit::EnumMembers(2).integer_fits(3));
        assert!(Limit::SetMembers(2).integer_fits(3));
        assert!(!Limit::SetMembers(2).integer_fits(4));
        assert!(Limit::SetMembers(64).integer_fits(u64::MAX.into()));
        assert!(Limit::Bytes(1).integer_fits(1 << 40));
    }
}
