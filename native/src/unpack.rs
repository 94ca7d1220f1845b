//! Staged rows back into the model's `RowChange`: every row the sink applies is read here.
//!
//! The packed form is what `core/packed.py` writes. Rows of one table version repeat their
//! schema, table and columns byte for byte, so those are turned into Python objects once and
//! each row only reads its values.
//!
//! `unpack_members` reads staged members (`core/staging/layout.py`, each a run of rows) a
//! slice at a time, as `core/staging/members.py::MemberReader.rows` does, copies collapsing
//! alike; a member it cannot read whole it hands back to Python whole. The rows it
//! makes of one layout share its `{name: ColumnType}` dict (the sink reads it, never changes
//! it), so the sink's planning decides per layout rather than per row; `unpack` gives each
//! row its own.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PySet, PyString};

use crate::model::{exact_bytes, Model, Row, Value};
use crate::msgpack::Reader;

// Layouts kept before the cache starts over (one per table version; bounded for any input).
const MAX_LAYOUTS: usize = 4_096;
// A staged member (core/staging/layout.py): commit ts (16 hex), Kafka offset (16 hex), first
// event index (4 hex), a row count (4 hex), then each row as a 4-byte big-endian length and the
// packed row.
const TS_DIGITS: usize = 16;
const ROW_PREFIX: usize = 36;
const MEMBER_HEAD: usize = ROW_PREFIX + 4;
const LENGTH_BYTES: usize = 4;
// TiCDC's HANDLE_KEY | PRIMARY_KEY column flags (`core.model.ColumnFlag`): a keyed table.
const KEY_FLAGS: u64 = 0x02 | 0x08;

/// One (schema, table, columns) as Python objects: the names, and `{name: ColumnType}`.
struct Layout {
    schema: Py<PyString>,
    table: Py<PyString>,
    columns: Py<PyDict>,
    names: Vec<(String, Py<PyString>)>,
    /// The layout as packed (schema, table and columns).
    raw: Vec<u8>,
    /// Whether a column has a handle or primary key flag (else identical rows are distinct).
    keyed: bool,
}

/// Reads packed rows into `RowChange` objects.
#[pyclass(frozen, module = "ticdc_sink_native")]
pub struct RowUnpacker {
    model: Py<Model>,
    column_type: Py<PyAny>,
    layouts: Mutex<HashMap<Vec<u8>, Arc<Layout>>>,
}

#[pymethods]
impl RowUnpacker {
    /// The model and `column_type(mysql_type, flags)`.
    #[new]
    fn new(model: Py<Model>, column_type: Py<PyAny>) -> Self {
        RowUnpacker {
            model,
            column_type,
            layouts: Mutex::default(),
        }
    }

    /// The row change packed in `data` (its commit ts travels beside it), or `None` when the
    /// Python reader must decide.
    fn unpack<'py>(
        &self,
        py: Python<'py>,
        commit_ts: &Bound<'py, PyAny>,
        data: &Bound<'py, PyAny>,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        let (Ok(commit_ts), Some(data)) = (commit_ts.extract::<u64>(), exact_bytes(data)) else {
            return Ok(None);
        };
        let Some((reader, head)) = self.head(py, data, &mut None)? else {
            return Ok(None);
        };
        self.read(py, commit_ts, reader, head, false)
    }

    /// The rows of `members[start:stop]` as `MemberReader.rows` reads them, collapsing copies
    /// as `copies` (its `ts`, `commit_ts` and `seen`) remembers and updating it; stops at the
    /// first member of which the Python reader must decide a row (none of that member's rows
    /// read here) and returns where it stopped.
    fn unpack_members<'py>(
        &self,
        py: Python<'py>,
        members: &Bound<'py, PyList>,
        start: usize,
        stop: usize,
        copies: &Bound<'py, PyAny>,
    ) -> PyResult<(Bound<'py, PyList>, usize)> {
        let seen = copies.getattr(intern!(py, "seen"))?.cast_into::<PySet>()?;
        let current = copies.getattr(intern!(py, "ts"))?;
        let mut current = current.cast::<PyBytes>()?.as_bytes().to_vec();
        let mut commit_ts: u64 = copies.getattr(intern!(py, "commit_ts"))?.extract()?;
        // Whether `seen` holds bodies of the current commit ts, from before this call.
        let mut seen_holds = !seen.is_empty();
        let stop = stop.min(members.len());
        let items = (start.min(stop)..stop)
            .map(|index| members.get_item(index))
            .collect::<PyResult<Vec<_>>>()?;
        // Keyed bodies at the current commit ts that a later row may copy: only those followed
        // by a row of the same ts, or last (handed to `seen` for what follows).
        let mut group: HashSet<&[u8]> = HashSet::new();
        // The member being read: its rows and the bodies it added to `group`, kept apart until
        // it is read whole (a member Python must decide goes back with none of its rows read).
        let mut pending = Vec::new();
        let mut added: Vec<&[u8]> = Vec::new();
        let rows = PyList::empty(py);
        let mut last = None;
        let mut read = 0;
        while read < items.len() {
            let Some(member) = exact_bytes(&items[read]) else {
                break;
            };
            let (Some(ts), Some(bodies)) = (member.get(..TS_DIGITS), member_rows(member)) else {
                break;
            };
            if ts != current.as_slice() {
                let Some(value) = hex_value(ts) else {
                    break;
                };
                current = ts.to_vec();
                commit_ts = value;
                if seen_holds {
                    seen.clear();
                    seen_holds = false;
                }
                group.clear();
            }
            let next_ts = items
                .get(read + 1)
                .and_then(|next| exact_bytes(next))
                .map(|next| next.get(..TS_DIGITS));
            // Whether a row after this member's last one shares its ts (or the slice ends here).
            let followed = next_ts.is_none_or(|next| next == Some(ts));
            let mut whole = true;
            for (index, &body) in bodies.iter().enumerate() {
                let Some((reader, head)) = self.head(py, body, &mut last)? else {
                    whole = false;
                    break;
                };
                let keyed = head.layout.keyed;
                if keyed
                    && (group.contains(body)
                        || (seen_holds && seen.contains(PyBytes::new(py, body))?))
                {
                    continue;
                }
                let Some(row) = self.read(py, commit_ts, reader, head, true)? else {
                    whole = false;
                    break;
                };
                if keyed && (index + 1 < bodies.len() || followed) && group.insert(body) {
                    added.push(body);
                }
                pending.push(row);
            }
            if !whole {
                for body in added.drain(..) {
                    group.remove(body);
                }
                break;
            }
            added.clear();
            for row in pending.drain(..) {
                rows.append(row)?;
            }
            read += 1;
        }
        for body in group {
            seen.add(PyBytes::new(py, body))?;
        }
        copies.setattr(intern!(py, "ts"), PyBytes::new(py, &current))?;
        copies.setattr(intern!(py, "commit_ts"), commit_ts)?;
        Ok((rows, start.min(stop) + read))
    }
}

/// The packed rows of a staged member, or None when it is not well formed.
fn member_rows(member: &[u8]) -> Option<Vec<&[u8]>> {
    let count = hex_value(member.get(ROW_PREFIX..MEMBER_HEAD)?)?;
    let mut rows = Vec::with_capacity(count.min(4_096) as usize);
    let mut at = MEMBER_HEAD;
    for _ in 0..count {
        let length = member.get(at..at + LENGTH_BYTES)?;
        let length = u32::from_be_bytes(length.try_into().ok()?) as usize;
        at += LENGTH_BYTES;
        rows.push(member.get(at..at + length)?);
        at += length;
    }
    (at == member.len()).then_some(rows)
}

/// What a packed row starts with: its field count, op and table layout.
struct Head {
    fields: usize,
    op: u64,
    layout: Arc<Layout>,
}

/// A number written in lowercase hex digits, as staged (a commit ts, a row count); None for
/// anything else.
fn hex_value(digits: &[u8]) -> Option<u64> {
    digits.iter().try_fold(0u64, |ts, digit| {
        let value = match digit {
            b'0'..=b'9' => digit - b'0',
            b'a'..=b'f' => digit - b'a' + 10,
            _ => return None,
        };
        Some(ts << 4 | u64::from(value))
    })
}

impl RowUnpacker {
    /// The field count, op and layout of the packed row in `data`, and the reader past them.
    /// `last` is the layout of the row read before, if any: rows of one table version repeat
    /// its bytes, which are compared rather than parsed and looked up (msgpack delimits itself,
    /// so equal bytes read as that layout).
    fn head<'a>(
        &self,
        py: Python<'_>,
        data: &'a [u8],
        last: &mut Option<Arc<Layout>>,
    ) -> PyResult<Option<(Reader<'a>, Head)>> {
        let mut reader = Reader::new(data);
        // Eight fields, and a ninth for a row that carries its upstream row id.
        let (Some(fields @ 8..=9), Some(op @ 0..=2)) = (reader.array(), reader.unsigned()) else {
            return Ok(None);
        };
        let start = reader.at();
        if let Some(layout) = last.as_ref() {
            if data[start..].starts_with(&layout.raw) {
                let reader = Reader::new(&data[start + layout.raw.len()..]);
                let layout = Arc::clone(layout);
                return Ok(Some((reader, Head { fields, op, layout })));
            }
        }
        let Some(parts) = layout_parts(&mut reader) else {
            return Ok(None);
        };
        let layout = self.layout(py, reader.since(start), parts)?;
        *last = Some(Arc::clone(&layout));
        Ok(Some((reader, Head { fields, op, layout })))
    }

    fn read<'py>(
        &self,
        py: Python<'py>,
        commit_ts: u64,
        mut reader: Reader<'_>,
        head: Head,
        share_columns: bool,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        let Head { fields, op, layout } = head;
        let (Some(new), Some(old)) = (
            image(py, &mut reader, &layout)?,
            image(py, &mut reader, &layout)?,
        ) else {
            return Ok(None);
        };
        let partition_id = match reader.value() {
            Some(Value::Null) => None,
            Some(id @ (Value::Signed(_) | Value::Unsigned(_))) => Some(id.to_py(py)?),
            _ => return Ok(None),
        };
        let Some(handle_key_only) = reader.boolean() else {
            return Ok(None);
        };
        let row_id = match (fields, reader.value()) {
            (8, _) => None,
            (_, Some(Value::Signed(id))) => Some(id),
            (_, Some(Value::Unsigned(id))) => match i64::try_from(id) {
                Ok(id) => Some(id),
                Err(_) => return Ok(None),
            },
            _ => return Ok(None),
        };
        if !reader.is_done() {
            return Ok(None);
        }
        let row = Row {
            commit_ts,
            schema: layout.schema.bind(py).clone(),
            table: layout.table.bind(py).clone(),
            op: op as usize,
            columns: if share_columns {
                layout.columns.bind(py).clone().into_any()
            } else {
                layout.columns.bind(py).copy()?.into_any()
            },
            new: new.map(Bound::into_any),
            old: old.map(Bound::into_any),
            partition_id,
            handle_key_only,
            row_id,
        };
        Ok(Some(self.model.get().row(py, row)?))
    }

    /// The layout of `raw` (schema, table and columns as packed), made on first sight. The
    /// lock is never held across a Python call: one could let another thread in, which would
    /// then wait for the lock holding the GIL.
    fn layout(&self, py: Python<'_>, raw: &[u8], parts: Parts<'_>) -> PyResult<Arc<Layout>> {
        let lock = || self.layouts.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(layout) = lock().get(raw) {
            return Ok(Arc::clone(layout));
        }
        let (schema, table, specs) = parts;
        let columns = PyDict::new(py);
        let mut names = Vec::with_capacity(specs.len());
        let column_type = self.column_type.bind(py);
        for (name, mysql_type, flags) in specs {
            let key = PyString::new(py, name);
            columns.set_item(&key, column_type.call1((mysql_type, flags))?)?;
            names.push((name.to_owned(), key.unbind()));
        }
        // From the types the dict kept (a repeated name keeps its last), as Python reads them.
        let mut keyed = false;
        for kind in columns.values() {
            let flags: u64 = kind.getattr(intern!(py, "flags"))?.extract()?;
            keyed |= flags & KEY_FLAGS != 0;
        }
        let layout = Arc::new(Layout {
            schema: PyString::new(py, schema).unbind(),
            table: PyString::new(py, table).unbind(),
            columns: columns.unbind(),
            names,
            raw: raw.to_vec(),
            keyed,
        });
        let mut layouts = lock();
        if layouts.len() >= MAX_LAYOUTS {
            layouts.clear();
        }
        layouts.insert(raw.to_vec(), Arc::clone(&layout));
        Ok(layout)
    }
}

/// Schema, table, and each column's (name, MySQL type, flags).
type Parts<'a> = (&'a str, &'a str, Vec<(&'a str, u64, u64)>);

fn layout_parts<'a>(reader: &mut Reader<'a>) -> Option<Parts<'a>> {
    let (schema, table) = (reader.text()?, reader.text()?);
    let count = reader.array()?;
    let mut specs = Vec::with_capacity(count.min(4_096));
    for _ in 0..count {
        if reader.array()? != 3 {
            return None;
        }
        specs.push((reader.text()?, reader.unsigned()?, reader.unsigned()?));
    }
    Some((schema, table, specs))
}

/// A row image: `Some(None)` for nil, `None` for what this reader refuses. Column names are
/// the layout's own strings when they come in the layout's order, as they do when packed.
fn image<'py>(
    py: Python<'py>,
    reader: &mut Reader<'_>,
    layout: &Layout,
) -> PyResult<Option<Option<Bound<'py, PyDict>>>> {
    let length = match reader.map_or_nil() {
        None => return Ok(None),
        Some(None) => return Ok(Some(None)),
        Some(Some(length)) => length,
    };
    let values = PyDict::new(py);
    for index in 0..length {
        let (Some(name), Some(value)) = (reader.text(), reader.value()) else {
            return Ok(None);
        };
        let value = value.to_py(py)?;
        match layout.names.get(index) {
            Some((known, key)) if known == name => values.set_item(key.bind(py), value)?,
            _ => values.set_item(PyString::new(py, name), value)?,
        }
    }
    Ok(Some(Some(values)))
}

#[cfg(test)]
mod tests {
    use super::member_rows;

    const PREFIX: &[u8] = b"0000000000000001000000000000000a0003";

    #[test]
    fn a_member_gives_its_rows() {
        let mut member = PREFIX.to_vec();
        member.extend_from_slice(b"0002");
        member.extend_from_slice(&[0, 0, 0, 2, 0x98, 1, 0, 0, 0, 1, 0x99]);
        assert_eq!(
            member_rows(&member),
            Some(vec![&[0x98, 1][..], &[0x99][..]])
        );
    }

    #[test]
    fn a_member_whose_lengths_do_not_add_up_is_refused() {
        for tail in [
            &b"0002\x00\x00\x00\x01\x98"[..],
            &b"0001\x00\x00\x00\x02\x98"[..],
            &b"0001\x00\x00\x00\x01\x98\x01"[..],
            &b"0001\x00\x00"[..],
            &b"00g1"[..],
            // A packed row right after the prefix: no row count.
            &[0x98, 1, 2, 3, 4][..],
        ] {
            let mut member = PREFIX.to_vec();
            member.extend_from_slice(tail);
            assert_eq!(member_rows(&member), None, "{tail:?}");
        }
        assert_eq!(member_rows(&PREFIX[..20]), None);
    }
}
