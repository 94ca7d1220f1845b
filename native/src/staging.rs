//! The staging script's arguments for natively packed messages, as Redis bulk strings.
//!
//! A worker stages a partition's messages in one script call; per message the arguments are its
//! Kafka offset, watermark, row count, row bytes, each row as a ZADD score/member pair, and its
//! DDL count (none: a packed message carries none). Encoding them here, without the GIL, spares
//! Python a bytes object per row and the Redis client its per-argument encoding.
//! `frame_message` in `streams/staging.py` is the reference these bytes equal.

use std::io::Write;

use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::model::{Packed, PackedMessage};

// A row member's commit ts, offset and index (`row_member` in streams/staging.py) before the row.
const MEMBER_HEADER: usize = 16 + 16 + 4;

/// Each (offset, message) framed: how many script arguments it adds, and their encoding.
#[pyfunction]
pub fn stage_frames<'py>(
    py: Python<'py>,
    messages: Vec<(u64, Bound<'py, PackedMessage>)>,
) -> Vec<(usize, Bound<'py, PyBytes>)> {
    let taken: Vec<(u64, &Packed)> = messages
        .iter()
        .map(|(offset, message)| (*offset, message.get().packed()))
        .collect();
    let framed: Vec<(usize, Vec<u8>)> = py.detach(|| {
        taken
            .iter()
            .map(|(offset, packed)| frame(*offset, packed))
            .collect()
    });
    framed
        .into_iter()
        .map(|(args, data)| (args, PyBytes::new(py, &data)))
        .collect()
}

/// One message's script arguments: the count and their encoding.
fn frame(offset: u64, packed: &Packed) -> (usize, Vec<u8>) {
    let rows = packed.rows();
    let count = rows.len();
    let row_bytes: usize = rows.map(|(_, row)| MEMBER_HEADER + row.len()).sum();
    let mut out = Vec::with_capacity(row_bytes + count * 24 + 96);
    bulk(&mut out, format!("{offset}").as_bytes());
    match packed.resolved_ts().iter().max() {
        Some(mark) => bulk(&mut out, format!("{mark:016x}").as_bytes()),
        None => bulk(&mut out, b""),
    }
    bulk(&mut out, format!("{count}").as_bytes());
    bulk(&mut out, format!("{row_bytes}").as_bytes());
    for (index, (ts, row)) in packed.rows().enumerate() {
        bulk(&mut out, b"0");
        let header = format!("{ts:016x}{offset:016x}{index:04x}");
        write!(out, "${}\r\n{header}", header.len() + row.len()).expect("writes to a Vec");
        out.extend_from_slice(row);
        out.extend_from_slice(b"\r\n");
    }
    bulk(&mut out, b"0");
    (5 + 2 * count, out)
}

/// `data` as a RESP bulk string.
fn bulk(out: &mut Vec<u8>, data: &[u8]) {
    write!(out, "${}\r\n", data.len()).expect("writes to a Vec");
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}
