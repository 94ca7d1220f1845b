//! TiCDC Open Protocol: row and resolved events of well-formed messages, as Python objects.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyList, PyString};
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Mutex;

use serde::de::Deserializer;
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::go_string;
use crate::json::{flag, integer_text, parse, string, Ordered};
use crate::model::{Model, Row};

const VERSION: u64 = 1;
const KEY_ROW: u64 = 1;
const KEY_RESOLVED: u64 = 3;
const BINARY: u32 = 0x01;
const HANDLE_KEY: u32 = 0x02;

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
    // Looked up once per process rather than once per column (the GIL holds them uncontended).
    cache: Mutex<Cache>,
}

/// Column types by `type << 16 | flags`, and column names as Python strings.
#[derive(Default)]
struct Cache {
    kinds: HashMap<u32, Py<PyAny>>,
    names: HashMap<String, Py<PyString>>,
}

// Distinct column names kept before the name cache starts over (hostile streams stay bounded).
const MAX_CACHED_NAMES: usize = 65_536;

#[pymethods]
impl OpenDecoder {
    #[new]
    fn new(model: Py<Model>) -> Self {
        OpenDecoder {
            model,
            cache: Mutex::default(),
        }
    }

    /// The message's events, or `None` when the Python codec must decide. `kinds` maps
    /// `type << 16 | flags` to a tuple whose first item is the shared column type.
    fn decode<'py>(
        &self,
        py: Python<'py>,
        key: &[u8],
        value: &[u8],
        kinds: &Bound<'py, PyDict>,
    ) -> PyResult<Option<Bound<'py, PyList>>> {
        match self.events(py, key, value, kinds) {
            Ok(events) => Ok(Some(events)),
            Err(Refusal::Fallback) => Ok(None),
            Err(Refusal::Python(error)) => Err(error),
        }
    }
}

impl OpenDecoder {
    fn events<'py>(
        &self,
        py: Python<'py>,
        key: &[u8],
        value: &[u8],
        kinds: &Bound<'py, PyDict>,
    ) -> Outcome<Bound<'py, PyList>> {
        let version = u64::from_be_bytes(key.get(..8).or_fallback()?.try_into().unwrap());
        if version != VERSION {
            return Err(Refusal::Fallback);
        }
        let keys = frames(key, 8).or_fallback()?;
        let values = frames(value, 0).or_fallback()?;
        if keys.len() != values.len() {
            return Err(Refusal::Fallback);
        }
        let events = PyList::empty(py);
        for (key, value) in keys.into_iter().zip(values) {
            events.append(self.event(py, key, value, kinds)?)?;
        }
        Ok(events)
    }

    fn event<'py>(
        &self,
        py: Python<'py>,
        key: &[u8],
        value: &[u8],
        kinds: &Bound<'py, PyDict>,
    ) -> Outcome<Bound<'py, PyAny>> {
        let header: Header = parse(key).or_fallback()?;
        let ts = unsigned(header.ts).or_fallback()?;
        match unsigned(header.t) {
            Some(KEY_RESOLVED) => Ok(self.model.get().resolved(py, ts)?),
            Some(KEY_ROW) => self.row(py, ts, &header, value, kinds),
            // DDL (rare) and anything unknown: the Python codec.
            _ => Err(Refusal::Fallback),
        }
    }

    fn row<'py>(
        &self,
        py: Python<'py>,
        ts: u64,
        header: &Header<'_>,
        value: &[u8],
        kinds: &Bound<'py, PyDict>,
    ) -> Outcome<Bound<'py, PyAny>> {
        let schema = optional_text(header.scm).or_fallback()?;
        let table = optional_text(header.tbl).or_fallback()?;
        let handle_key_only = flag(header.ohk).or_fallback()?;
        // A claim-check location is the Python codec's error to raise.
        let no_claim_check = flag(header.ccl) == Some(false);
        if !no_claim_check && header.ccl.map(RawValue::get) != Some("\"\"") {
            return Err(Refusal::Fallback);
        }
        // Python keeps an integer partition id and drops any other JSON there.
        let partition_id = match header.ptn.map(|raw| scalar(py, raw)).transpose()? {
            Some(id) if id.is_exact_instance_of::<pyo3::types::PyInt>() => Some(id),
            _ => None,
        };
        let body: Body = parse(value).or_fallback()?;
        let columns = PyDict::new(py);
        let mut cache = self
            .cache
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let mut image = |raw| image(py, raw, kinds, &columns, &mut cache).map(Bound::into_any);
        let (op, new, old) = if let Some(deleted) = body.d {
            (2, None, Some(image(deleted)?))
        } else if let Some(upserted) = body.u {
            let new = Some(image(upserted)?);
            match body.p {
                Some(previous) => (1, new, Some(image(previous)?)),
                None => (0, new, None),
            }
        } else {
            return Err(Refusal::Fallback);
        };
        let row = Row {
            commit_ts: ts,
            schema: PyString::new(py, &schema.unwrap_or_default()),
            table: PyString::new(py, &table.unwrap_or_default()),
            op,
            columns: columns.into_any(),
            new,
            old,
            partition_id,
            handle_key_only,
        };
        Ok(self.model.get().row(py, row)?)
    }
}

/// A key's fields, each kept as its JSON text; other fields are ignored, as Python does.
#[derive(Deserialize)]
struct Header<'a> {
    #[serde(borrow)]
    ts: Option<&'a RawValue>,
    #[serde(borrow)]
    t: Option<&'a RawValue>,
    #[serde(borrow)]
    scm: Option<&'a RawValue>,
    #[serde(borrow)]
    tbl: Option<&'a RawValue>,
    #[serde(borrow)]
    ptn: Option<&'a RawValue>,
    #[serde(borrow)]
    ohk: Option<&'a RawValue>,
    #[serde(borrow)]
    ccl: Option<&'a RawValue>,
}

/// A row value: new image `u`, old image `p` (updates), deleted image `d`. A null image is
/// refused (Python's error), not taken for a missing one.
#[derive(Deserialize)]
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

#[derive(Deserialize)]
struct Column<'a> {
    #[serde(borrow)]
    t: Option<&'a RawValue>,
    #[serde(borrow)]
    f: Option<&'a RawValue>,
    #[serde(borrow)]
    h: Option<&'a RawValue>,
    #[serde(borrow)]
    v: Option<&'a RawValue>,
}

/// An image's columns in the order written (a repeated name included, as a dict sees it).
type Entries<'a> = Ordered<'a, Column<'a>>;

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
    kinds: &Bound<'py, PyDict>,
    columns: &Bound<'py, PyDict>,
    cache: &mut Cache,
) -> Outcome<Bound<'py, PyDict>> {
    let image = PyDict::new(py);
    for (name, column) in entries.0 {
        let flags = match column.f.map(RawValue::get) {
            None | Some("null") => {
                if column.h.map(RawValue::get) == Some("true") {
                    HANDLE_KEY
                } else {
                    0
                }
            }
            Some(text) => below(text, 1 << 16).or_fallback()?,
        };
        let mysql_type = below(column.t.or_fallback()?.get(), 256).or_fallback()?;
        let code = mysql_type << 16 | flags;
        let kind = match cache.kinds.get(&code) {
            Some(kind) => kind.bind(py).clone(),
            None => {
                // A type not seen yet: Python's table, filled by the Python codec.
                let kind = kinds.get_item(code)?.or_fallback()?.get_item(0)?;
                cache.kinds.insert(code, kind.clone().unbind());
                kind
            }
        };
        let value = match column.v {
            None => py.None().into_bound(py),
            Some(value) => cell(py, value, mysql_type, flags)?,
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

/// A column's value as the model holds it: BLOB/TEXT from base64, binary CHAR from Go quoting.
fn cell<'py>(
    py: Python<'py>,
    raw: &RawValue,
    mysql_type: u32,
    flags: u32,
) -> Outcome<Bound<'py, PyAny>> {
    if !raw.get().starts_with('"') {
        return scalar(py, raw);
    }
    let text = string(raw).or_fallback()?;
    Ok(if (249..=252).contains(&mysql_type) {
        let data = STANDARD.decode(text.as_bytes()).ok().or_fallback()?;
        match std::str::from_utf8(&data) {
            Ok(text) if flags & BINARY == 0 => PyString::new(py, text).into_any(),
            _ => PyBytes::new(py, &data).into_any(),
        }
    } else if matches!(mysql_type, 15 | 253 | 254) && flags & BINARY != 0 {
        PyBytes::new(py, &go_string::unquote(&text).or_fallback()?).into_any()
    } else {
        PyString::new(py, &text).into_any()
    })
}

/// A JSON scalar as orjson reads it (an int within 64 bits, a finite float); else refused.
fn scalar<'py>(py: Python<'py>, raw: &RawValue) -> Outcome<Bound<'py, PyAny>> {
    let text = raw.get();
    Ok(match text {
        "null" => py.None().into_bound(py),
        "true" => PyBool::new(py, true).to_owned().into_any(),
        "false" => PyBool::new(py, false).to_owned().into_any(),
        _ if text.starts_with('"') => PyString::new(py, &string(raw).or_fallback()?).into_any(),
        _ if text.starts_with(['[', '{']) => return Err(Refusal::Fallback),
        _ if !text.contains(['.', 'e', 'E']) => match integer_text(text).or_fallback()? {
            Ok(signed) => signed.into_pyobject(py)?.into_any(),
            Err(unsigned) => unsigned.into_pyobject(py)?.into_any(),
        },
        _ => {
            let value: f64 = text.parse().ok().or_fallback()?;
            if !value.is_finite() {
                return Err(Refusal::Fallback);
            }
            PyFloat::new(py, value).into_any()
        }
    })
}

/// A non-negative integer written without a fraction or exponent.
fn unsigned(raw: Option<&RawValue>) -> Option<u64> {
    digits(raw?.get())
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
fn optional_text(raw: Option<&RawValue>) -> Option<Option<Cow<'_, str>>> {
    match raw.map(RawValue::get) {
        None | Some("null") => Some(None),
        Some(text) if text.starts_with('"') => Some(Some(string(raw?)?)),
        _ => None,
    }
}
