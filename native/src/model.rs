//! The Python event model the decoders build (`RowChange`, `Resolved`, the row ops) and the
//! values rows hold.

use std::borrow::Cow;
use std::ops::Range;

use pyo3::exceptions::PyTypeError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyFloat, PyString, PyType};

use crate::msgpack;

const ROW_FIELDS: [&str; 10] = [
    "commit_ts",
    "schema",
    "table",
    "op",
    "columns",
    "new",
    "old",
    "partition_id",
    "handle_key_only",
    "row_id",
];
const RESOLVED_FIELDS: [&str; 1] = ["commit_ts"];

/// The model's classes and ops, shared by every native decoder.
#[pyclass(frozen, module = "ticdc_sink_native")]
pub struct Model {
    row: Builder<10>,
    resolved: Builder<1>,
    ops: [Py<PyAny>; 3],
}

#[pymethods]
impl Model {
    /// `RowChange`, `Resolved` and the insert, update and delete ops.
    #[new]
    fn new(
        row: &Bound<'_, PyAny>,
        resolved: &Bound<'_, PyAny>,
        insert: Py<PyAny>,
        update: Py<PyAny>,
        delete: Py<PyAny>,
    ) -> PyResult<Self> {
        Ok(Model {
            row: Builder::new(row, ROW_FIELDS)?,
            resolved: Builder::new(resolved, RESOLVED_FIELDS)?,
            ops: [insert, update, delete],
        })
    }
}

/// A row change's fields, in the model's order; `op` is 0 insert, 1 update, 2 delete.
pub struct Row<'py> {
    pub commit_ts: u64,
    pub schema: Bound<'py, PyString>,
    pub table: Bound<'py, PyString>,
    pub op: usize,
    pub columns: Bound<'py, PyAny>,
    pub new: Option<Bound<'py, PyAny>>,
    pub old: Option<Bound<'py, PyAny>>,
    pub partition_id: Option<Bound<'py, PyAny>>,
    pub handle_key_only: bool,
    /// The upstream's row identity where the protocol carries it (Open Protocol's `rid`).
    pub row_id: Option<i64>,
}

impl Model {
    pub fn row<'py>(&self, py: Python<'py>, row: Row<'py>) -> PyResult<Bound<'py, PyAny>> {
        let none = || py.None().into_bound(py);
        self.row.build(
            py,
            [
                row.commit_ts.into_pyobject(py)?.into_any(),
                row.schema.into_any(),
                row.table.into_any(),
                self.ops[row.op].bind(py).clone(),
                row.columns,
                row.new.unwrap_or_else(none),
                row.old.unwrap_or_else(none),
                row.partition_id.unwrap_or_else(none),
                PyBool::new(py, row.handle_key_only).to_owned().into_any(),
                match row.row_id {
                    Some(id) => id.into_pyobject(py)?.into_any(),
                    None => none(),
                },
            ],
        )
    }

    pub fn resolved<'py>(&self, py: Python<'py>, commit_ts: u64) -> PyResult<Bound<'py, PyAny>> {
        self.resolved
            .build(py, [commit_ts.into_pyobject(py)?.into_any()])
    }
}

/// Makes instances of a slots dataclass by assigning its fields, as its generated `__init__`
/// would: calling that Python function costs more per row than the row's values do.
struct Builder<const N: usize> {
    cls: Py<PyAny>,
    fields: [Py<PyString>; N],
}

impl<const N: usize> Builder<N> {
    /// Refuses a class whose fields are not `fields` or whose `__init__` does more than assign
    /// (a `__post_init__`): the model changed and this module must follow.
    fn new(cls: &Bound<'_, PyAny>, fields: [&str; N]) -> PyResult<Self> {
        let py = cls.py();
        let slots: Vec<String> = cls.getattr("__slots__")?.extract()?;
        let object_new = py.get_type::<PyAny>().getattr("__new__")?;
        let plain = cls.is_instance_of::<PyType>()
            && cls.getattr("__new__")?.is(&object_new)
            && !cls.hasattr("__post_init__")?;
        if slots != fields || !plain {
            return Err(PyTypeError::new_err(format!(
                "{cls} is not a plain slots dataclass with exactly the fields {fields:?}: \
                 native/src/model.rs must follow the model"
            )));
        }
        Ok(Builder {
            cls: cls.clone().unbind(),
            fields: fields.map(|name| PyString::intern(py, name).unbind()),
        })
    }

    fn build<'py>(
        &self,
        py: Python<'py>,
        values: [Bound<'py, PyAny>; N],
    ) -> PyResult<Bound<'py, PyAny>> {
        // What `object.__new__(cls)` does for a class without its own `__new__` (checked above).
        // SAFETY: `cls` is a type object, held for the duration of the call.
        let object = unsafe {
            Bound::from_owned_ptr_or_err(py, ffi::PyType_GenericAlloc(self.cls.as_ptr().cast(), 0))?
        };
        for (name, value) in self.fields.iter().zip(values) {
            // The generic setter, as a frozen dataclass's own `__init__` uses it.
            // SAFETY: three valid references held for the duration of the call.
            let status = unsafe {
                ffi::PyObject_GenericSetAttr(object.as_ptr(), name.as_ptr(), value.as_ptr())
            };
            if status != 0 {
                return Err(PyErr::fetch(py));
            }
        }
        Ok(object)
    }
}

/// A column value as the model holds it: None, bool, int, float, str or bytes.
pub enum Value<'a> {
    Null,
    Bool(bool),
    Signed(i64),
    Unsigned(u64),
    Float(f64),
    Text(Cow<'a, str>),
    Bytes(Cow<'a, [u8]>),
}

impl Value<'_> {
    pub fn to_py<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        Ok(match self {
            Value::Null => py.None().into_bound(py),
            Value::Bool(value) => PyBool::new(py, *value).to_owned().into_any(),
            Value::Signed(value) => value.into_pyobject(py)?.into_any(),
            Value::Unsigned(value) => value.into_pyobject(py)?.into_any(),
            Value::Float(value) => PyFloat::new(py, *value).into_any(),
            Value::Text(text) => PyString::new(py, text).into_any(),
            Value::Bytes(data) => PyBytes::new(py, data).into_any(),
        })
    }

    /// The value in the packed form of a row (see `core/packed.py`).
    pub fn pack(&self, out: &mut Vec<u8>) {
        match self {
            Value::Null => msgpack::nil(out),
            Value::Bool(value) => msgpack::boolean(out, *value),
            Value::Signed(value) => msgpack::signed(out, *value),
            Value::Unsigned(value) => msgpack::unsigned(out, *value),
            Value::Float(value) => msgpack::float(out, *value),
            Value::Text(text) => msgpack::text(out, text),
            Value::Bytes(data) => msgpack::binary(out, data),
        }
    }
}

/// The integers a column of `mysql_type` holds, as the Python model's `integer_range` says
/// (None: not an integer type): MySQL's ranges per type, signed or unsigned; YEAR 0..=2155,
/// ENUM's index up to 65,535, SET and BIT 64 bits whatever the flags.
pub fn integer_range(mysql_type: u32, unsigned: bool) -> Option<(i128, i128)> {
    let bits = match mysql_type {
        1 => 8,
        2 => 16,
        9 => 24,
        3 => 32,
        8 => 64,
        13 => return Some((0, 2155)),
        247 => return Some((0, 65535)),
        16 | 248 => return Some((0, u64::MAX as i128)),
        _ => return None,
    };
    Some(if unsigned {
        (0, (1i128 << bits) - 1)
    } else {
        (-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1)
    })
}

/// Whether a column of `mysql_type` with `flags` holds `value`: an integer type's value must be
/// an integer in its range (the Python codecs refuse anything else); other types hold anything.
pub fn holds(mysql_type: u32, flags: u32, value: &Value<'_>) -> bool {
    let Some((low, high)) = integer_range(mysql_type, flags & UNSIGNED_FLAG != 0) else {
        return true;
    };
    let number = match value {
        Value::Null => return true,
        Value::Signed(number) => i128::from(*number),
        Value::Unsigned(number) => i128::from(*number),
        _ => return false,
    };
    (low..=high).contains(&number)
}

const UNSIGNED_FLAG: u32 = 0x80;

/// The bytes of `object` when it is exactly `bytes` (a subclass or another buffer is the Python
/// codec's to judge).
pub fn exact_bytes<'a>(object: &'a Bound<'_, PyAny>) -> Option<&'a [u8]> {
    object
        .cast_exact::<PyBytes>()
        .ok()
        .map(|bytes| bytes.as_bytes())
}

/// A message's rows packed into one buffer (which needs no GIL) and its resolved timestamps.
#[derive(Default)]
pub struct Packed {
    rows: Vec<(u64, Range<usize>)>,
    resolved: Vec<u64>,
    buffer: Vec<u8>,
}

/// A message's packed rows and resolved timestamps, handed to Python as one object: no Python
/// object is made per row unless asked for (staging frames them for Redis without the GIL).
#[pyclass(frozen, module = "ticdc_sink_native")]
pub struct PackedMessage {
    packed: Packed,
}

#[pymethods]
impl PackedMessage {
    /// The rows as (commit ts, packed row) pairs, in message order.
    fn rows<'py>(&self, py: Python<'py>) -> Vec<(u64, Bound<'py, PyBytes>)> {
        self.packed
            .rows()
            .map(|(ts, row)| (ts, PyBytes::new(py, row)))
            .collect()
    }

    /// The message's resolved timestamps.
    #[getter]
    fn resolved(&self) -> Vec<u64> {
        self.packed.resolved.clone()
    }

    fn __len__(&self) -> usize {
        self.packed.rows.len()
    }
}

/// Packs each message in one stretch without the GIL (a thread packs a whole batch while
/// Python goes on); `None` where `pack` refuses, or a row has no commit ts (the Python codec
/// words what is wrong with it).
pub fn pack_many<M: Sync>(
    py: Python<'_>,
    messages: &[M],
    pack: impl Fn(&M) -> Option<Packed> + Sync,
) -> PyResult<Vec<Option<Py<PackedMessage>>>> {
    let packed: Vec<Option<Packed>> = py.detach(|| messages.iter().map(&pack).collect());
    packed
        .into_iter()
        .map(|one| one.map(|packed| packed.into_py(py)).transpose())
        .map(|one| one.map(Option::flatten))
        .collect()
}

impl Packed {
    pub fn resolved(&mut self, commit_ts: u64) {
        self.resolved.push(commit_ts);
    }

    /// Adds the row `pack` writes (what it returns says whether it could).
    pub fn row<T>(&mut self, commit_ts: u64, pack: impl FnOnce(&mut Vec<u8>) -> T) -> T {
        let start = self.buffer.len();
        let outcome = pack(&mut self.buffer);
        self.rows.push((commit_ts, start..self.buffer.len()));
        outcome
    }

    /// The rows as (commit ts, packed bytes).
    pub fn rows(&self) -> impl ExactSizeIterator<Item = (u64, &[u8])> {
        self.rows
            .iter()
            .map(|(ts, range)| (*ts, &self.buffer[range.clone()]))
    }

    pub fn resolved_ts(&self) -> &[u64] {
        &self.resolved
    }

    /// The Python object for these rows; `None` if a row has no commit ts.
    pub fn into_py(self, py: Python<'_>) -> PyResult<Option<Py<PackedMessage>>> {
        if self.rows.iter().any(|(ts, _)| *ts == 0) {
            return Ok(None);
        }
        Py::new(py, PackedMessage { packed: self }).map(Some)
    }
}

impl PackedMessage {
    pub fn packed(&self) -> &Packed {
        &self.packed
    }
}

/// A column of a row image: its name, MySQL type and flags, and value.
pub struct Cell<'a> {
    pub name: Cow<'a, str>,
    pub kind: (u32, u32),
    pub value: Value<'a>,
}

/// A row's images: `new` (insert, update) and `old` (update, delete), at least one of them.
pub struct Images<'a> {
    /// In the order the Python codec reads them, which orders the row's columns.
    pub read: Vec<(Slot, Vec<Cell<'a>>)>,
}

#[derive(Clone, Copy, PartialEq)]
pub enum Slot {
    New,
    Old,
}

/// Writes a row in the packed form `core/packed.py` reads (msgpack of op, schema, table,
/// columns, new, old, partition id, handle-key-only, and the row id when there is one), as
/// Python packs the same decoded row; false
/// (nothing usable written) for what only a dict's merging would make sense of: a column named
/// twice in one image, or two images for one slot.
pub fn pack_row(
    out: &mut Vec<u8>,
    schema: &str,
    table: &str,
    partition_id: Option<&Value<'_>>,
    handle_key_only: bool,
    row_id: Option<i64>,
    images: &Images<'_>,
) -> bool {
    let find = |slot| images.read.iter().find(|(s, _)| *s == slot).map(|(_, c)| c);
    let (new, old) = (find(Slot::New), find(Slot::Old));
    let distinct = images.read.len() == usize::from(new.is_some()) + usize::from(old.is_some());
    if !distinct || images.read.iter().any(|(_, cells)| names_repeat(cells)) {
        return false;
    }
    let op = match (new, old) {
        (Some(_), None) => 0,
        (Some(_), Some(_)) => 1,
        (None, Some(_)) => 2,
        (None, None) => return false,
    };
    msgpack::array(out, if row_id.is_some() { 9 } else { 8 });
    msgpack::unsigned(out, op);
    msgpack::text(out, schema);
    msgpack::text(out, table);
    let columns = columns(&images.read);
    msgpack::array(out, columns.len());
    for (name, (mysql_type, flags)) in &columns {
        msgpack::array(out, 3);
        msgpack::text(out, name);
        msgpack::unsigned(out, u64::from(*mysql_type));
        msgpack::unsigned(out, u64::from(*flags));
    }
    for image in [new, old] {
        match image {
            None => msgpack::nil(out),
            Some(cells) => {
                msgpack::map(out, cells.len());
                for cell in cells {
                    msgpack::text(out, &cell.name);
                    cell.value.pack(out);
                }
            }
        }
    }
    match partition_id {
        Some(id) => id.pack(out),
        None => msgpack::nil(out),
    }
    msgpack::boolean(out, handle_key_only);
    if let Some(id) = row_id {
        msgpack::signed(out, id);
    }
    true
}

// Columns up to which repeated names are looked for pair by pair.
const FEW_COLUMNS: usize = 24;

fn names_repeat(cells: &[Cell<'_>]) -> bool {
    if cells.len() <= FEW_COLUMNS {
        // Pairwise: cheaper than a sorted copy for a row's few columns.
        return cells
            .iter()
            .enumerate()
            .any(|(i, cell)| cells[i + 1..].iter().any(|other| other.name == cell.name));
    }
    let mut names: Vec<&str> = cells.iter().map(|c| c.name.as_ref()).collect();
    names.sort_unstable();
    names.windows(2).any(|pair| pair[0] == pair[1])
}

/// The row's columns as the dict Python fills image by image: each in the place it was first
/// named, with the type it was named with last. (At most two images, of distinct names each.)
fn columns<'c>(images: &'c [(Slot, Vec<Cell<'_>>)]) -> Vec<(&'c str, (u32, u32))> {
    let Some(((_, first), rest)) = images.split_first() else {
        return Vec::new();
    };
    let mut columns: Vec<(&str, (u32, u32))> =
        first.iter().map(|c| (c.name.as_ref(), c.kind)).collect();
    if rest.is_empty() {
        return columns;
    }
    let mut sorted: Vec<usize> = (0..columns.len()).collect();
    sorted.sort_unstable_by_key(|&i| columns[i].0);
    for (_, cells) in rest {
        for (position, cell) in cells.iter().enumerate() {
            let name = cell.name.as_ref();
            let at = match columns.get(position) {
                Some(same) if same.0 == name => Some(position),
                _ => sorted
                    .binary_search_by_key(&name, |&i| columns[i].0)
                    .ok()
                    .map(|found| sorted[found]),
            };
            match at {
                Some(at) => columns[at].1 = cell.kind,
                None => columns.push((name, cell.kind)),
            }
        }
    }
    columns
}
