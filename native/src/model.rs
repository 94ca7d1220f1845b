//! The Python event model the decoders build (`RowChange`, `Resolved`, the row ops) and the
//! values rows hold.

use std::borrow::Cow;

use pyo3::exceptions::PyTypeError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyFloat, PyString, PyType};

use crate::msgpack;

const ROW_FIELDS: [&str; 9] = [
    "commit_ts",
    "schema",
    "table",
    "op",
    "columns",
    "new",
    "old",
    "partition_id",
    "handle_key_only",
];
const RESOLVED_FIELDS: [&str; 1] = ["commit_ts"];

/// The model's classes and ops, shared by every native decoder.
#[pyclass(frozen, module = "ticdc_sink_native")]
pub struct Model {
    row: Builder<9>,
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

    /// The value in the packed form of a row (see `streams/packed.py`).
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
