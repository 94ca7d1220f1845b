//! The CSV a `LOAD DATA LOCAL` of the sink reads, written from the batch's images in one pass.
//!
//! `spark_sink/load/csv_rows.py::python_csv_rows` is the reference these bytes equal: every cell
//! quoted (a `"` inside doubled), SQL NULL as a bare `NULL`, a line per image; a column goes as
//! hex when it is binary downstream or any of its values is bytes (the server unhexes it).
//! Building the cells here spares the sink a Python list and an Arrow array per column.

use memchr::memchr;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyFloat, PyInt, PyList, PyString};

use crate::staging::decimal;

const NULL: &[u8] = b"NULL";
const HEX: &[u8; 16] = b"0123456789abcdef";

/// The CSV of `images` (dicts) over the columns `names`, with a trailing `flags` cell per line
/// when given, and per column whether it went as hex; `binary` says which columns do anyway.
#[pyfunction]
#[pyo3(signature = (images, names, binary, flags=None))]
pub fn csv_rows<'py>(
    py: Python<'py>,
    images: &Bound<'py, PyList>,
    names: Vec<Bound<'py, PyString>>,
    binary: Vec<bool>,
    flags: Option<Vec<i64>>,
) -> PyResult<(Bound<'py, PyBytes>, Vec<bool>)> {
    let dicts = images
        .iter()
        .map(|image| image.cast_into::<PyDict>().map_err(PyErr::from))
        .collect::<PyResult<Vec<_>>>()?;
    let mut hexed = binary;
    hexed.resize(names.len(), false);
    loop {
        // Written assuming only the binary columns go as hex; a bytes value met in another
        // column marks it and starts over (rare: bytes outside binary columns).
        if let Some(data) = write(&dicts, &names, &hexed, flags.as_deref())? {
            return Ok((PyBytes::new(py, &data), hexed));
        }
        for (column, name) in names.iter().enumerate() {
            if !hexed[column] {
                for dict in &dicts {
                    if let Some(value) = dict.get_item(name)? {
                        if value.is_instance_of::<PyBytes>() {
                            hexed[column] = true;
                            break;
                        }
                    }
                }
            }
        }
    }
}

/// The CSV, or None when a column not going as hex holds bytes.
fn write(
    dicts: &[Bound<'_, PyDict>],
    names: &[Bound<'_, PyString>],
    hexed: &[bool],
    flags: Option<&[i64]>,
) -> PyResult<Option<Vec<u8>>> {
    let mut out = Vec::with_capacity(dicts.len() * (names.len() * 12 + 8));
    for (line, dict) in dicts.iter().enumerate() {
        for (column, name) in names.iter().enumerate() {
            if column > 0 {
                out.push(b',');
            }
            match dict.get_item(name)? {
                None => out.extend_from_slice(NULL),
                Some(value) if value.is_none() => out.extend_from_slice(NULL),
                Some(value) if hexed[column] => hex_cell(&mut out, &value)?,
                Some(value) if value.is_instance_of::<PyBytes>() => return Ok(None),
                Some(value) => text_cell(&mut out, &value)?,
            }
        }
        if let Some(flags) = flags {
            out.extend_from_slice(b",\"");
            signed(&mut out, flags.get(line).copied().unwrap_or(0));
            out.push(b'"');
        }
        out.push(b'\n');
    }
    Ok(Some(out))
}

/// A value as text, quoted: `str` of it, `repr` of a float (exact), as Python writes them.
fn text_cell(out: &mut Vec<u8>, value: &Bound<'_, PyAny>) -> PyResult<()> {
    out.push(b'"');
    if let Ok(text) = value.cast_exact::<PyString>() {
        quoted(out, text.to_str()?.as_bytes());
    } else if value.is_exact_instance_of::<PyInt>() {
        match value.extract::<i64>() {
            Ok(number) => signed(out, number),
            Err(_) => out.extend_from_slice(value.str()?.to_str()?.as_bytes()),
        }
    } else if value.is_instance_of::<PyFloat>() {
        let number = PyFloat::new(value.py(), value.extract::<f64>()?);
        out.extend_from_slice(number.repr()?.to_str()?.as_bytes());
    } else {
        quoted(out, value.str()?.to_str()?.as_bytes());
    }
    out.push(b'"');
    Ok(())
}

/// A value as quoted hex: the bytes, or the UTF-8 of the text of anything else.
fn hex_cell(out: &mut Vec<u8>, value: &Bound<'_, PyAny>) -> PyResult<()> {
    out.push(b'"');
    if let Ok(bytes) = value.cast::<PyBytes>() {
        hex(out, bytes.as_bytes());
    } else {
        hex(out, value.str()?.to_str()?.as_bytes());
    }
    out.push(b'"');
    Ok(())
}

/// `text` with every `"` doubled (the CSV has no escape character).
fn quoted(out: &mut Vec<u8>, text: &[u8]) {
    let mut rest = text;
    while let Some(at) = memchr(b'"', rest) {
        out.extend_from_slice(&rest[..=at]);
        out.push(b'"');
        rest = &rest[at + 1..];
    }
    out.extend_from_slice(rest);
}

/// `value` in decimal, without an allocation (this runs for most cells).
fn signed(out: &mut Vec<u8>, value: i64) {
    if value < 0 {
        out.push(b'-');
    }
    decimal(out, value.unsigned_abs());
}

fn hex(out: &mut Vec<u8>, data: &[u8]) {
    for byte in data {
        out.push(HEX[(byte >> 4) as usize]);
        out.push(HEX[(byte & 0xf) as usize]);
    }
}

#[cfg(test)]
mod tests {
    use super::{hex, quoted, signed};

    #[test]
    fn numbers_are_written_as_python_writes_them() {
        for value in [0i64, 7, -7, 10, -10, 1_234_567, i64::MAX, i64::MIN] {
            let mut out = Vec::new();
            signed(&mut out, value);
            assert_eq!(out, value.to_string().into_bytes());
        }
    }

    #[test]
    fn quotes_double_and_hex_is_lower_case() {
        let mut out = Vec::new();
        quoted(&mut out, br#"a"b""c"#);
        assert_eq!(out, br#"a""b""""c"#);
        let mut out = Vec::new();
        hex(&mut out, &[0x00, 0xab, 0x7f]);
        assert_eq!(out, b"00ab7f");
    }
}
