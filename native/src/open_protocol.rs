//! TiCDC Open Protocol: row and resolved events of well-formed messages, as Python objects or
//! as packed rows. A message outside the grammar of `streams/codecs/open_grammar.py` is handed
//! to the Python codec, which refuses it naming the rule (tests/streams/codecs/test_open_grammar.py
//! runs every rule's examples through both).

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString};
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Mutex;

use serde::de::Deserializer;
use serde::Deserialize;

use crate::go_string;
use crate::json::{flag_text, integer_text, parse_text, raw_text, string_text, Ordered, Scanner};
use crate::model::{self, Cell, Images, Model, Packed, PackedMessage, Row, Slot, Value};

const VERSION: u64 = 1;
const KEY_ROW: u64 = 1;
const KEY_RESOLVED: u64 = 3;
const BINARY: u32 = 0x01;
const HANDLE_KEY: u32 = 0x02;
// MySQL FLOAT and DOUBLE.
const FLOAT_TYPES: [u32; 2] = [4, 5];
// The longest column name TiDB takes, in characters (grammar rule `column-name`).
const MAX_NAME: usize = 64;

/// Why a message is not decoded here: hand it to the Python codec, or a Python error.
enum Refusal {
    Fallback,
    Python(PyErr),
}

impl From<PyErr> for Refusal {
    fn from(error: PyErr) -> Self {
        Refusal::Python(error)
    }
}

impl From<std::convert::Infallible> for Refusal {
    fn from(never: std::convert::Infallible) -> Self {
        match never {}
    }
}

type Outcome<T> = Result<T, Refusal>;

trait OrFallback<T> {
    fn or_fallback(self) -> Outcome<T>;
}

impl<T> OrFallback<T> for Option<T> {
    fn or_fallback(self) -> Outcome<T> {
        self.ok_or(Refusal::Fallback)
    }
}

/// Decodes Open Protocol messages into the model's `RowChange` and `Resolved` objects.
#[pyclass(frozen, module = "ticdc_sink_native")]
pub struct OpenDecoder {
    model: Py<Model>,
    column_type: Py<PyAny>,
    max_bytes: usize,
    // Looked up once per decoder rather than once per column (the GIL holds them uncontended).
    cache: Mutex<Cache>,
}

/// Column types by `type << 16 | flags` (made by the model's `column_type`), and column names
/// as Python strings.
#[derive(Default)]
struct Cache {
    kinds: HashMap<u32, Py<PyAny>>,
    names: HashMap<String, Py<PyString>>,
}

// Distinct column names kept before the name cache starts over (hostile streams stay bounded).
const MAX_CACHED_NAMES: usize = 65_536;

#[pymethods]
impl OpenDecoder {
    /// The model, its `column_type` function, and the size above which a message (key and
    /// value) is handed back.
    #[new]
    fn new(model: Py<Model>, column_type: Py<PyAny>, max_bytes: usize) -> Self {
        OpenDecoder {
            model,
            column_type,
            max_bytes,
            cache: Mutex::default(),
        }
    }

    /// The message's events, or `None` when the Python codec must decide.
    fn decode<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        value: &Bound<'py, PyAny>,
    ) -> PyResult<Option<Bound<'py, PyList>>> {
        let Some((key, value)) = self.taken(key, value) else {
            return Ok(None);
        };
        let events = PyList::empty(py);
        let decoded = each_event(key, value, |event| {
            let made = match event {
                Event::Resolved(ts) => self.model.get().resolved(py, ts)?,
                Event::Row(ts, row) => self.row(py, ts, row)?,
            };
            Ok(events.append(made)?)
        });
        accepted(decoded).map(|taken| taken.map(|()| events))
    }

    /// The message's rows packed and its resolved timestamps, or `None` when the Python codec
    /// must decide: what `decode` would return, already packed.
    fn decode_packed(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
    ) -> PyResult<Option<Py<PackedMessage>>> {
        let Some((key, value)) = self.taken(key, value) else {
            return Ok(None);
        };
        // Parsing and packing touch no Python object: other threads (Faust's consumer) run
        // meanwhile.
        let packed = py.detach(|| pack_message(key, value));
        Ok(accepted(packed)?
            .map(|packed| packed.into_py(py))
            .transpose()?
            .flatten())
    }

    /// `decode_packed` of many (key, value) messages in one stretch without the GIL, so a
    /// thread decodes a whole batch while the event loop goes on; `None` for each message the
    /// Python codec must decide (an error included: it raises its own).
    fn decode_packed_many<'py>(
        &self,
        py: Python<'py>,
        messages: Vec<(Bound<'py, PyAny>, Bound<'py, PyAny>)>,
    ) -> PyResult<Vec<Option<Py<PackedMessage>>>> {
        let slices: Vec<Option<(&[u8], &[u8])>> = messages
            .iter()
            .map(|(key, value)| self.taken(key, value))
            .collect();
        model::pack_many(py, &slices, |message| {
            let (key, value) = (*message)?;
            pack_message(key, value).ok()
        })
    }
}

impl OpenDecoder {
    /// The key and value when this decoder is to try them: both exactly `bytes`, within the
    /// size together.
    fn taken<'a>(
        &self,
        key: &'a Bound<'_, PyAny>,
        value: &'a Bound<'_, PyAny>,
    ) -> Option<(&'a [u8], &'a [u8])> {
        let (key, value) = (model::exact_bytes(key)?, model::exact_bytes(value)?);
        (key.len() + value.len() <= self.max_bytes).then_some((key, value))
    }
}

/// A message's rows packed and its resolved timestamps (no Python object touched).
fn pack_message(key: &[u8], value: &[u8]) -> Outcome<Packed> {
    let mut packed = Packed::default();
    each_event(key, value, |event| match event {
        Event::Resolved(ts) => {
            packed.resolved(ts);
            Ok(())
        }
        // A handle-key-only row is made whole (read upstream) before it is staged.
        Event::Row(_, row) if row.handle_key_only => Err(Refusal::Fallback),
        Event::Row(ts, row) => packed.row(ts, |out| pack_row(row, out)),
    })
    .map(|()| packed)
}

fn accepted<T>(outcome: Outcome<T>) -> PyResult<Option<T>> {
    match outcome {
        Ok(value) => Ok(Some(value)),
        Err(Refusal::Fallback) => Ok(None),
        Err(Refusal::Python(error)) => Err(error),
    }
}

/// One event of a message, its fields checked and its row body parsed.
enum Event<'a> {
    Resolved(u64),
    Row(u64, RowParts<'a>),
}

struct RowParts<'a> {
    schema: Cow<'a, str>,
    table: Cow<'a, str>,
    handle_key_only: bool,
    partition_id: Option<Value<'a>>,
    /// `rid`: TiDB's integer handle of the row (a key-less table's hidden row id).
    row_id: Option<i64>,
    op: usize,
    /// The new image (insert, update) or the deleted one.
    image: Entries<'a>,
    /// An update's old image.
    previous: Option<Entries<'a>>,
}

impl OpenDecoder {
    fn row<'py>(&self, py: Python<'py>, ts: u64, row: RowParts<'_>) -> Outcome<Bound<'py, PyAny>> {
        let columns = PyDict::new(py);
        let mut cache = self
            .cache
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let column_type = self.column_type.bind(py);
        let mut image =
            |raw| image(py, raw, column_type, &columns, &mut cache).map(Bound::into_any);
        let first = Some(image(row.image)?);
        let previous = row.previous.map(&mut image).transpose()?;
        let (new, old) = match row.op {
            2 => (None, first),
            _ => (first, previous),
        };
        let partition_id = row.partition_id.map(|id| id.to_py(py)).transpose()?;
        let row = Row {
            commit_ts: ts,
            schema: PyString::new(py, &row.schema),
            table: PyString::new(py, &row.table),
            op: row.op,
            columns: columns.into_any(),
            new,
            old,
            partition_id,
            handle_key_only: row.handle_key_only,
            row_id: row.row_id,
        };
        Ok(self.model.get().row(py, row)?)
    }
}

/// Calls `take` with each event of the message, in order.
fn each_event<'a>(
    key: &'a [u8],
    value: &'a [u8],
    mut take: impl FnMut(Event<'a>) -> Outcome<()>,
) -> Outcome<()> {
    let version = u64::from_be_bytes(key.get(..8).or_fallback()?.try_into().unwrap());
    if version != VERSION {
        return Err(Refusal::Fallback);
    }
    let keys = frames(key, 8).or_fallback()?;
    let mut values = frames(value, 0).or_fallback()?;
    if values.is_empty() {
        // Resolved events may come without values (a row event then fails to parse).
        values = vec![&[][..]; keys.len()];
    }
    if keys.len() != values.len() {
        return Err(Refusal::Fallback);
    }
    for (key, value) in keys.into_iter().zip(values) {
        let header = header(key).or_fallback()?;
        let ts = unsigned(header.ts).or_fallback()?;
        take(match unsigned(header.t) {
            Some(KEY_RESOLVED) => Event::Resolved(ts),
            Some(KEY_ROW) => Event::Row(ts, row_parts(&header, value)?),
            // DDL (rare) and anything unknown: the Python codec.
            _ => return Err(Refusal::Fallback),
        })?;
    }
    Ok(())
}

/// A row event's key fields and parsed value, as far as both ways of building it share them.
fn row_parts<'a>(header: &Header<'a>, value: &'a [u8]) -> Outcome<RowParts<'a>> {
    // Rule `key-names`: a row names its schema and table.
    let schema = optional_text(header.scm)
        .flatten()
        .filter(|name| !name.is_empty())
        .or_fallback()?;
    let table = optional_text(header.tbl)
        .flatten()
        .filter(|name| !name.is_empty())
        .or_fallback()?;
    let handle_key_only = flag_text(header.ohk).or_fallback()?;
    // A claim-check location is the Python codec's error to raise.
    let no_claim_check = flag_text(header.ccl) == Some(false);
    if !no_claim_check && header.ccl != Some("\"\"") {
        return Err(Refusal::Fallback);
    }
    // Python keeps an integer partition id and drops any other JSON there.
    let partition_id = match header.ptn.map(scalar).transpose()? {
        Some(id @ (Value::Signed(_) | Value::Unsigned(_))) => Some(id),
        _ => None,
    };
    // Python keeps a 64-bit signed row id and drops any other JSON there, as TiCDC writes an int64.
    let row_id = match header.rid.map(scalar).transpose()? {
        Some(Value::Signed(id)) => Some(id),
        _ => None,
    };
    let body = body(value).or_fallback()?;
    // Rule `row-images`: `d` alone, `u` alone, or `u` with `p`.
    let (op, image, previous) = match (body.u, body.p, body.d) {
        (None, None, Some(deleted)) => (2, deleted, None),
        (Some(upserted), None, None) => (0, upserted, None),
        (Some(upserted), Some(previous), None) => (1, upserted, Some(previous)),
        _ => return Err(Refusal::Fallback),
    };
    if !well_formed(&image) || previous.as_ref().is_some_and(|p| !well_formed(p)) {
        return Err(Refusal::Fallback);
    }
    Ok(RowParts {
        schema,
        table,
        handle_key_only,
        partition_id,
        row_id,
        op,
        image,
        previous,
    })
}

/// Rules `image-non-empty-object` and `column-name`: an image holds columns, each named by 1 to
/// `MAX_NAME` characters.
fn well_formed(entries: &Entries<'_>) -> bool {
    !entries.0.is_empty()
        && entries.0.iter().all(|(name, _)| {
            !name.is_empty() && (name.len() <= MAX_NAME || name.chars().count() <= MAX_NAME)
        })
}

/// A row in the packed form (see `model::pack_row`).
fn pack_row(row: RowParts<'_>, out: &mut Vec<u8>) -> Outcome<()> {
    let first = image_cells(row.image)?;
    let mut read = vec![(if row.op == 2 { Slot::Old } else { Slot::New }, first)];
    if let Some(previous) = row.previous {
        read.push((Slot::Old, image_cells(previous)?));
    }
    let images = Images { read };
    let partition_id = row.partition_id.as_ref();
    if !model::pack_row(
        out,
        &row.schema,
        &row.table,
        partition_id,
        row.handle_key_only,
        row.row_id,
        &images,
    ) {
        return Err(Refusal::Fallback);
    }
    Ok(())
}

fn image_cells(entries: Entries<'_>) -> Outcome<Vec<Cell<'_>>> {
    let mut cells = Vec::with_capacity(entries.0.len());
    for (name, column) in entries.0 {
        let (mysql_type, flags) = column_kind(&column)?;
        let value = match column.v {
            None => Value::Null,
            Some(value) => cell(value, mysql_type, flags)?,
        };
        cells.push(Cell {
            name,
            kind: (mysql_type, flags),
            value,
        });
    }
    Ok(cells)
}

/// A key's fields, each kept as its JSON text; other fields are ignored, as Python does.
#[derive(Deserialize, Default, Debug, PartialEq)]
struct Header<'a> {
    #[serde(borrow, default, deserialize_with = "raw_text")]
    ts: Option<&'a str>,
    #[serde(borrow, default, deserialize_with = "raw_text")]
    t: Option<&'a str>,
    #[serde(borrow, default, deserialize_with = "raw_text")]
    scm: Option<&'a str>,
    #[serde(borrow, default, deserialize_with = "raw_text")]
    tbl: Option<&'a str>,
    #[serde(borrow, default, deserialize_with = "raw_text")]
    rid: Option<&'a str>,
    #[serde(borrow, default, deserialize_with = "raw_text")]
    ptn: Option<&'a str>,
    #[serde(borrow, default, deserialize_with = "raw_text")]
    ohk: Option<&'a str>,
    #[serde(borrow, default, deserialize_with = "raw_text")]
    ccl: Option<&'a str>,
}

/// A row value: new image `u`, old image `p` (updates), deleted image `d`. A null image is
/// refused (Python's error), not taken for a missing one.
#[derive(Deserialize, Default, Debug, PartialEq)]
struct Body<'a> {
    #[serde(borrow, default, deserialize_with = "present")]
    u: Option<Entries<'a>>,
    #[serde(borrow, default, deserialize_with = "present")]
    p: Option<Entries<'a>>,
    #[serde(borrow, default, deserialize_with = "present")]
    d: Option<Entries<'a>>,
}

fn present<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Entries<'de>>, D::Error> {
    Entries::deserialize(deserializer).map(Some)
}

#[derive(Deserialize, Default, Debug, PartialEq)]
struct Column<'a> {
    #[serde(borrow, default, deserialize_with = "raw_text")]
    t: Option<&'a str>,
    #[serde(borrow, default, deserialize_with = "raw_text")]
    f: Option<&'a str>,
    #[serde(borrow, default, deserialize_with = "raw_text")]
    h: Option<&'a str>,
    #[serde(borrow, default, deserialize_with = "raw_text")]
    v: Option<&'a str>,
}

/// An image's columns in the order written (a repeated name included, as a dict sees it).
type Entries<'a> = Ordered<'a, Column<'a>>;

/// An event's key: read by `Scanner` as TiCDC writes it, else by serde_json (see `body`).
fn header(key: &[u8]) -> Option<Header<'_>> {
    let text = std::str::from_utf8(key).ok()?;
    // Rule `key-object`: serde_json would also read a struct from an array.
    scan_header(text).or_else(|| object(text).then(|| parse_text(text)).flatten())
}

/// Whether `text` starts as a JSON object does.
fn object(text: &str) -> bool {
    text.trim_start_matches([' ', '\t', '\n', '\r'])
        .starts_with('{')
}

/// Rules `row-value-object`, `image-non-empty-object` and `column-object` as far as serde_json
/// does not check them: it reads a struct from an array as well as from an object.
fn shaped_body(text: &str) -> bool {
    let Ok(serde_json::Value::Object(body)) = serde_json::from_str::<serde_json::Value>(text)
    else {
        return false;
    };
    ["u", "p", "d"].iter().all(|field| match body.get(*field) {
        None => true,
        Some(serde_json::Value::Object(columns)) => columns.values().all(|c| c.is_object()),
        Some(_) => false,
    })
}

/// `Header` as serde_json reads it, from compact JSON of only its known fields, each once, all
/// scalars; `None` for anything else.
fn scan_header(text: &str) -> Option<Header<'_>> {
    let mut scanner = Scanner::new(text);
    let mut header = Header::default();
    let mut seen = [false; 8];
    scanner.members(|scanner| {
        let (at, field) = match scanner.name()? {
            "ts" => (0, &mut header.ts),
            "t" => (1, &mut header.t),
            "scm" => (2, &mut header.scm),
            "tbl" => (3, &mut header.tbl),
            "rid" => (4, &mut header.rid),
            "ptn" => (5, &mut header.ptn),
            "ohk" => (6, &mut header.ohk),
            "ccl" => (7, &mut header.ccl),
            _ => return None,
        };
        if std::mem::replace(&mut seen[at], true) {
            return None;
        }
        *field = scanner.scalar()?;
        Some(())
    })?;
    scanner.at_end().then_some(header)
}

/// A row value's body: read by `Scanner` as TiCDC writes it (compact, the fields known),
/// else by serde_json, whose reading of the same text it equals.
fn body(value: &[u8]) -> Option<Body<'_>> {
    let text = std::str::from_utf8(value).ok()?;
    scan_body(text).or_else(|| shaped_body(text).then(|| parse_text(text)).flatten())
}

/// `Body` as serde_json reads it, from compact JSON of only its known fields, each once;
/// `None` for anything else.
fn scan_body(text: &str) -> Option<Body<'_>> {
    let mut scanner = Scanner::new(text);
    let mut body = Body::default();
    scanner.members(|scanner| {
        let image = match scanner.letter_name()? {
            b'u' => &mut body.u,
            b'p' => &mut body.p,
            b'd' => &mut body.d,
            _ => return None,
        };
        if image.is_some() {
            return None;
        }
        *image = Some(scan_image(scanner)?);
        Some(())
    })?;
    scanner.at_end().then_some(body)
}

/// An image's columns (see `scan_body`).
fn scan_image<'a>(scanner: &mut Scanner<'a>) -> Option<Entries<'a>> {
    let mut columns = Vec::with_capacity(16);
    scanner.members(|scanner| {
        let name = scanner.name()?;
        columns.push((Cow::Borrowed(name), scan_column(scanner)?));
        Some(())
    })?;
    Some(Ordered(columns))
}

/// A column's fields (see `scan_body`).
fn scan_column<'a>(scanner: &mut Scanner<'a>) -> Option<Column<'a>> {
    let mut column = Column::default();
    let mut seen = [false; 4];
    scanner.members(|scanner| {
        let (at, field) = match scanner.letter_name()? {
            b't' => (0, &mut column.t),
            b'f' => (1, &mut column.f),
            b'h' => (2, &mut column.h),
            b'v' => (3, &mut column.v),
            _ => return None,
        };
        if std::mem::replace(&mut seen[at], true) {
            return None;
        }
        *field = scanner.scalar()?;
        Some(())
    })?;
    Some(column)
}

/// The length-prefixed frames of `data` from `pos` on; `None` if one runs past the end.
fn frames(data: &[u8], mut pos: usize) -> Option<Vec<&[u8]>> {
    let mut out = Vec::new();
    while pos < data.len() {
        let length = u64::from_be_bytes(data.get(pos..pos + 8)?.try_into().ok()?);
        pos += 8;
        let end = pos.checked_add(usize::try_from(length).ok()?)?;
        out.push(data.get(pos..end)?);
        pos = end;
    }
    Some(out)
}

fn image<'py>(
    py: Python<'py>,
    entries: Entries<'_>,
    column_type: &Bound<'py, PyAny>,
    columns: &Bound<'py, PyDict>,
    cache: &mut Cache,
) -> Outcome<Bound<'py, PyDict>> {
    let image = PyDict::new(py);
    for (name, column) in entries.0 {
        let (mysql_type, flags) = column_kind(&column)?;
        let code = mysql_type << 16 | flags;
        let kind = match cache.kinds.get(&code) {
            Some(kind) => kind.bind(py).clone(),
            None => {
                let kind = column_type.call1((mysql_type, flags))?;
                cache.kinds.insert(code, kind.clone().unbind());
                kind
            }
        };
        let value = match column.v {
            None => py.None().into_bound(py),
            Some(value) => cell(value, mysql_type, flags)?.to_py(py)?,
        };
        let name = match cache.names.get(name.as_ref()) {
            Some(known) => known.bind(py).clone(),
            None => {
                if cache.names.len() >= MAX_CACHED_NAMES {
                    cache.names.clear();
                }
                let known = PyString::new(py, &name);
                cache
                    .names
                    .insert(name.into_owned(), known.clone().unbind());
                known
            }
        };
        columns.set_item(&name, kind)?;
        image.set_item(name, value)?;
    }
    Ok(image)
}

/// A column's MySQL type and flags (a missing `f` from `h`, as older TiCDC writes it).
fn column_kind(column: &Column<'_>) -> Outcome<(u32, u32)> {
    let flags = match column.f {
        None | Some("null") => {
            if column.h == Some("true") {
                HANDLE_KEY
            } else {
                0
            }
        }
        Some(text) => below(text, 1 << 16).or_fallback()?,
    };
    let mysql_type = below(column.t.or_fallback()?, 256).or_fallback()?;
    Ok((mysql_type, flags))
}

/// A column's value as the model holds it: BLOB/TEXT from base64, binary CHAR from Go quoting,
/// FLOAT/DOUBLE always a float (Go's encoder writes a whole-number float64 as `3`).
fn cell(raw: &str, mysql_type: u32, flags: u32) -> Outcome<Value<'_>> {
    let value = cell_value(raw, mysql_type, flags)?;
    // A number out of its type's range is the Python codec's error to raise (text is taken).
    if !matches!(value, Value::Text(_)) && !model::holds(mysql_type, flags, &value) {
        return Err(Refusal::Fallback);
    }
    Ok(value)
}

fn cell_value(raw: &str, mysql_type: u32, flags: u32) -> Outcome<Value<'_>> {
    if !raw.starts_with('"') {
        if FLOAT_TYPES.contains(&mysql_type) {
            if let Some(number) = number(raw) {
                // orjson reads `-0` as the integer 0, which Python makes 0.0 (not -0.0).
                let whole = !raw.contains(['.', 'e', 'E']);
                return Ok(Value::Float(if whole { number + 0.0 } else { number }));
            }
        }
        return scalar(raw);
    }
    let text = string_text(raw).or_fallback()?;
    Ok(if (249..=252).contains(&mysql_type) {
        let data = STANDARD.decode(text.as_bytes()).ok().or_fallback()?;
        match String::from_utf8(data) {
            Ok(text) if flags & BINARY == 0 => Value::Text(Cow::Owned(text)),
            Ok(text) => Value::Bytes(Cow::Owned(text.into_bytes())),
            Err(not_text) => Value::Bytes(Cow::Owned(not_text.into_bytes())),
        }
    } else if matches!(mysql_type, 15 | 253 | 254) && flags & BINARY != 0 {
        Value::Bytes(Cow::Owned(go_string::unquote(&text).or_fallback()?))
    } else {
        Value::Text(text)
    })
}

/// A JSON scalar as orjson reads it (an int within 64 bits, a finite float); else refused.
fn scalar(text: &str) -> Outcome<Value<'_>> {
    Ok(match text {
        "null" => Value::Null,
        "true" => Value::Bool(true),
        "false" => Value::Bool(false),
        _ if text.starts_with('"') => Value::Text(string_text(text).or_fallback()?),
        _ if text.starts_with(['[', '{']) => return Err(Refusal::Fallback),
        _ if !text.contains(['.', 'e', 'E']) => match integer_text(text).or_fallback()? {
            Ok(signed) => Value::Signed(signed),
            Err(unsigned) => Value::Unsigned(unsigned),
        },
        _ => {
            let value: f64 = text.parse().ok().or_fallback()?;
            if !value.is_finite() {
                return Err(Refusal::Fallback);
            }
            Value::Float(value)
        }
    })
}

/// A JSON number (whole or not) as the nearest finite float.
fn number(text: &str) -> Option<f64> {
    let numeric = text.starts_with(|c: char| c == '-' || c.is_ascii_digit());
    numeric
        .then(|| text.parse().ok())?
        .filter(|value: &f64| value.is_finite())
}

/// A non-negative integer written without a fraction or exponent.
fn unsigned(raw: Option<&str>) -> Option<u64> {
    digits(raw?)
}

/// An integer in `0..limit`.
fn below(text: &str, limit: u64) -> Option<u32> {
    digits(text)
        .filter(|&value| value < limit)
        .map(|value| value as u32)
}

/// Text of ASCII digits only, within 64 bits.
fn digits(text: &str) -> Option<u64> {
    text.bytes()
        .all(|b| b.is_ascii_digit())
        .then(|| text.parse().ok())?
}

/// An absent, null or string name.
fn optional_text(raw: Option<&str>) -> Option<Option<Cow<'_, str>>> {
    match raw {
        None | Some("null") => Some(None),
        Some(text) if text.starts_with('"') => Some(Some(string_text(text)?)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::{body, header, Body, Header};
    use crate::json::parse;

    /// Event keys as TiCDC writes them.
    const KEYS: [&str; 4] = [
        r#"{"ts":449000000000000000,"scm":"bench","tbl":"orders","t":1}"#,
        r#"{"ts":449000000000000004,"scm":"db","tbl":"t\u00e9","rid":-3,"ptn":12,"t":1,"ohk":true,"ccl":""}"#,
        r#"{"ts":449000000000000008,"t":3}"#,
        r#"{"ts":1,"scm":null,"tbl":"x","t":2,"ohk":false,"ccl":"file:///tmp/a"}"#,
    ];

    /// Row values as TiCDC writes them: every kind of image and value the scanner reads.
    const VALUES: [&str; 6] = [
        r#"{"u":{"id":{"t":8,"h":true,"f":10,"v":0},"name":{"t":15,"f":64,"v":"customer 名前"},"score":{"t":5,"f":64,"v":582.7880059033552},"note":{"t":252,"f":64,"v":"bG9yZW0="},"tag":{"t":15,"f":65,"v":"\\xd6#{.\\xd9\\x1e?r"},"n":{"t":3,"f":64,"v":null}}}"#,
        r#"{"u":{"id":{"t":8,"f":10,"v":-12},"e":{"t":5,"v":1.5e-3},"big":{"t":8,"f":192,"v":18446744073709551615}},"p":{"id":{"t":8,"f":10,"v":-12},"e":{"t":5,"v":0}}}"#,
        r#"{"d":{"id":{"t":8,"h":true,"v":7},"flag":{"t":1,"v":true},"s":{"t":254,"v":"a\"b\\c\/d\b\f\n\r\t\u00e9\u4e2d"}}}"#,
        r#"{"u":{}}"#,
        r#"{"p":{"a":{}},"u":{"a":{"v":false,"t":1,"h":null,"f":null}}}"#,
        r#"{}"#,
    ];

    #[test]
    fn the_scanner_reads_what_ticdc_writes_as_serde_json_does() {
        for value in VALUES {
            let scanned = super::scan_body(value);
            assert!(scanned.is_some(), "{value}");
            assert_eq!(scanned, parse::<Body>(value.as_bytes()), "{value}");
        }
    }

    #[test]
    fn the_scanner_reads_keys_as_serde_json_does() {
        for key in KEYS {
            let scanned = super::scan_header(key);
            assert!(scanned.is_some(), "{key}");
            assert_eq!(scanned, parse::<Header>(key.as_bytes()), "{key}");
        }
    }

    /// Each text one byte away from `text` (that byte changed, dropped, or one added before it).
    fn one_byte_off(text: &str) -> Vec<Vec<u8>> {
        let replacements = b" \t\n\"\\/:,{}[]0123456789.eE+-ntfuvhpdxa\x01\xc3\xa9";
        let text = text.as_bytes();
        let mut variants = Vec::new();
        for at in 0..=text.len() {
            let after = &text[(at + 1).min(text.len())..];
            variants.push([&text[..at], after].concat());
            for &byte in replacements {
                variants.push([&text[..at], &[byte], after].concat());
                variants.push([&text[..at], &[byte], &text[at..]].concat());
            }
        }
        variants
    }

    /// Every value or key one byte away from those TiCDC writes: what is read is serde_json's
    /// reading, whether the scanner takes it or leaves it to serde_json.
    #[test]
    fn a_body_or_key_one_byte_off_reads_as_serde_json_reads_it() {
        for variant in VALUES.iter().flat_map(|value| one_byte_off(value)) {
            let shown = String::from_utf8_lossy(&variant);
            assert_eq!(body(&variant), parse::<Body>(&variant), "{shown}");
        }
        for variant in KEYS.iter().flat_map(|key| one_byte_off(key)) {
            let shown = String::from_utf8_lossy(&variant);
            assert_eq!(header(&variant), parse::<Header>(&variant), "{shown}");
        }
    }
}
