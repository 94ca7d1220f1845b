//! The staging script's arguments for natively packed messages, as Redis bulk strings.
//!
//! A worker stages a partition's messages in one transaction: a ZADD of their rows, and a script
//! call that records each message's Kafka offset, watermark, row count and bytes, and DDL count
//! (none: a packed message carries none). Encoding both here, without the GIL, spares Python a
//! bytes object per row and the Redis client its per-argument encoding.
//! `frame_message` in `streams/staging/framing.py` is the reference these bytes equal; the layout
//! is defined in `streams/staging/layout.py`, whose `LAYOUT_VERSION` must equal this one.

use std::io::Write;

use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::model::{Packed, PackedMessage};

/// The member and argument layout written here (`LAYOUT_VERSION` in streams/staging/layout.py):
/// Python declines this module's framing unless the two are equal. Bump both on any change.
pub const LAYOUT_VERSION: u32 = 1;

// A row member's commit ts, offset and index (`row_member` in streams/staging/layout.py) before
// the row.
const MEMBER_HEADER: usize = 16 + 16 + 4;

/// Each (offset, message) framed: how many script arguments it adds, their encoding, and its
/// rows as ZADD's score/member pairs.
#[pyfunction]
#[allow(clippy::type_complexity)]
pub fn stage_frames<'py>(
    py: Python<'py>,
    messages: Vec<(u64, Bound<'py, PackedMessage>)>,
) -> Vec<(usize, Bound<'py, PyBytes>, Bound<'py, PyBytes>)> {
    let taken: Vec<(u64, &Packed)> = messages
        .iter()
        .map(|(offset, message)| (*offset, message.get().packed()))
        .collect();
    let framed: Vec<Frame> = py.detach(|| {
        taken
            .iter()
            .map(|(offset, packed)| frame(*offset, packed))
            .collect()
    });
    framed
        .into_iter()
        .map(|frame| {
            let data = PyBytes::new(py, &frame.data);
            (frame.args, data, PyBytes::new(py, &frame.members))
        })
        .collect()
}

/// One message's script arguments (their count and encoding) and ZADD pairs.
struct Frame {
    args: usize,
    data: Vec<u8>,
    members: Vec<u8>,
}

fn frame(offset: u64, packed: &Packed) -> Frame {
    let rows = packed.rows();
    let count = rows.len();
    let row_bytes: usize = rows.map(|(_, row)| MEMBER_HEADER + row.len()).sum();
    let mut data = Vec::with_capacity(96);
    bulk(&mut data, format!("{offset}").as_bytes());
    match packed.resolved_ts().iter().max() {
        Some(mark) => bulk(&mut data, format!("{mark:016x}").as_bytes()),
        None => bulk(&mut data, b""),
    }
    bulk(&mut data, format!("{count}").as_bytes());
    bulk(&mut data, format!("{row_bytes}").as_bytes());
    bulk(&mut data, b"0");
    let mut members = Vec::with_capacity(row_bytes + count * 24);
    for (index, (ts, row)) in packed.rows().enumerate() {
        // The score, 0, then the member (no formatting machinery: this runs once per row).
        members.extend_from_slice(b"$1\r\n0\r\n$");
        decimal(&mut members, MEMBER_HEADER + row.len());
        members.extend_from_slice(b"\r\n");
        hex(&mut members, ts, 16);
        hex(&mut members, offset, 16);
        hex(&mut members, index as u64, 4);
        members.extend_from_slice(row);
        members.extend_from_slice(b"\r\n");
    }
    Frame {
        args: 5,
        data,
        members,
    }
}

/// `value` in lower-case hex, zero-padded to `width` digits (as Python's `%016x`: a wider value
/// takes the digits it needs).
fn hex(out: &mut Vec<u8>, value: u64, width: u32) {
    let needed = (u64::BITS - value.leading_zeros()).div_ceil(4);
    for shift in (0..width.max(needed)).rev() {
        out.push(b"0123456789abcdef"[(value >> (4 * shift) & 0xf) as usize]);
    }
}

/// `value` in decimal.
fn decimal(out: &mut Vec<u8>, value: usize) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    let mut rest = value;
    loop {
        at -= 1;
        digits[at] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[at..]);
}

/// `data` as a RESP bulk string.
fn bulk(out: &mut Vec<u8>, data: &[u8]) {
    write!(out, "${}\r\n", data.len()).expect("writes to a Vec");
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::{decimal, hex};

    #[test]
    fn numbers_are_written_as_python_formats_them() {
        for value in [0u64, 1, 9, 10, 255, 4096, 449_000_000_000_000_000, u64::MAX] {
            let mut out = Vec::new();
            hex(&mut out, value, 16);
            assert_eq!(out, format!("{value:016x}").into_bytes());
            let mut out = Vec::new();
            decimal(&mut out, value as usize);
            assert_eq!(out, value.to_string().into_bytes());
        }
        for (value, shown) in [(0xabc, "0abc"), (0x1_0000, "10000"), (0, "0000")] {
            let mut out = Vec::new();
            hex(&mut out, value, 4);
            assert_eq!(out, shown.as_bytes());
        }
    }
}
