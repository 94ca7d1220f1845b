//! The staging script's arguments for natively packed messages, as Redis bulk strings.
//!
//! A worker stages a partition's messages in one transaction: a ZADD of their row members, and a
//! script call that records each message's Kafka offset, watermark, row count and bytes, and DDL
//! count (none: a packed message carries none). A member holds a run of consecutive rows of one
//! message at one commit ts (`member_runs`). Encoding both here, without the GIL, spares Python
//! a bytes object per member and the Redis client its per-argument encoding.
//! `frame_message` in `core/staging/framing.py` is the reference these bytes equal; the member
//! layout is defined in `core/staging/layout.py`, whose `LAYOUT_VERSION` must equal this one.

use std::io::Write;

use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::model::{Packed, PackedMessage};

/// The member layout (members and script arguments) written here (`LAYOUT_VERSION` in
/// core/staging/layout.py): core/native.py declines this module unless the two are equal. Bump
/// both on any change.
pub const LAYOUT_VERSION: u32 = 2;

// A row member's commit ts, offset, first row's index and row count (`row_member` in
// core/staging/layout.py) before its rows.
const MEMBER_HEADER: usize = 16 + 16 + 4 + 4;
// Each row's length before its bytes (4 bytes, big-endian).
const LENGTH_BYTES: usize = 4;
// Rows a member holds at most (`MEMBER_ROWS` in core/staging/layout.py).
pub const MEMBER_ROWS: usize = 64;
// A member's rows' bytes, lengths included, past which it takes no further row (`MEMBER_BYTES`).
pub const MEMBER_BYTES: usize = 8 << 10;

/// Each (offset, message) framed: how many script arguments it adds, their encoding, its row
/// members as ZADD's score/member pairs, and how many members.
#[pyfunction]
#[allow(clippy::type_complexity)]
pub fn stage_frames<'py>(
    py: Python<'py>,
    messages: Vec<(u64, Bound<'py, PackedMessage>)>,
) -> Vec<(usize, Bound<'py, PyBytes>, Bound<'py, PyBytes>, usize)> {
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
            let members = PyBytes::new(py, &frame.members);
            (frame.args, data, members, frame.member_count)
        })
        .collect()
}

/// One message's script arguments (their count and encoding), ZADD pairs and member count.
struct Frame {
    args: usize,
    data: Vec<u8>,
    members: Vec<u8>,
    member_count: usize,
}

/// Where `rows` (a message's, in event order) split into members, as `member_runs` in
/// core/staging/layout.py: runs of consecutive rows at one commit ts, of at most
/// `MEMBER_ROWS` rows and, past the first row, `MEMBER_BYTES` bytes.
fn member_runs(rows: &[(u64, &[u8])]) -> Vec<(usize, usize)> {
    let mut runs = Vec::new();
    let mut first = 0;
    while first < rows.len() {
        let ts = rows[first].0;
        let mut size = LENGTH_BYTES + rows[first].1.len();
        let mut stop = first + 1;
        while stop < rows.len() && stop - first < MEMBER_ROWS && rows[stop].0 == ts {
            size += LENGTH_BYTES + rows[stop].1.len();
            if size > MEMBER_BYTES {
                break;
            }
            stop += 1;
        }
        runs.push((first, stop));
        first = stop;
    }
    runs
}

fn frame(offset: u64, packed: &Packed) -> Frame {
    let rows: Vec<(u64, &[u8])> = packed.rows().collect();
    let runs = member_runs(&rows);
    let member_len = |first: usize, stop: usize| {
        MEMBER_HEADER
            + rows[first..stop]
                .iter()
                .map(|(_, row)| LENGTH_BYTES + row.len())
                .sum::<usize>()
    };
    let member_bytes: usize = runs
        .iter()
        .map(|&(first, stop)| member_len(first, stop))
        .sum();
    let mut data = Vec::with_capacity(96);
    bulk(&mut data, format!("{offset}").as_bytes());
    match packed.resolved_ts().iter().max() {
        Some(mark) => bulk(&mut data, format!("{mark:016x}").as_bytes()),
        None => bulk(&mut data, b""),
    }
    bulk(&mut data, format!("{}", rows.len()).as_bytes());
    bulk(&mut data, format!("{member_bytes}").as_bytes());
    bulk(&mut data, b"0");
    let mut members = Vec::with_capacity(member_bytes + runs.len() * 24);
    for &(first, stop) in &runs {
        // The score, 0, then the member (no formatting machinery: this runs once per member).
        members.extend_from_slice(b"$1\r\n0\r\n$");
        decimal(&mut members, member_len(first, stop) as u64);
        members.extend_from_slice(b"\r\n");
        hex(&mut members, rows[first].0, 16);
        hex(&mut members, offset, 16);
        hex(&mut members, first as u64, 4);
        hex(&mut members, (stop - first) as u64, 4);
        for (_, row) in &rows[first..stop] {
            // A row is far below 4 GiB (Kafka's message size bounds it).
            members.extend_from_slice(&(row.len() as u32).to_be_bytes());
            members.extend_from_slice(row);
        }
        members.extend_from_slice(b"\r\n");
    }
    Frame {
        args: 5,
        data,
        members,
        member_count: runs.len(),
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

/// `value` in decimal, without an allocation.
pub(crate) fn decimal(out: &mut Vec<u8>, value: u64) {
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
    use super::{decimal, hex, member_runs, MEMBER_BYTES, MEMBER_ROWS};

    #[test]
    fn members_are_runs_of_one_commit_ts_within_their_caps() {
        let small = [0u8; 10];
        let big = vec![0u8; MEMBER_BYTES];
        let rows: Vec<(u64, &[u8])> = vec![(1, &small), (1, &small), (2, &small), (1, &small)];
        assert_eq!(member_runs(&rows), vec![(0, 2), (2, 3), (3, 4)]);
        let many: Vec<(u64, &[u8])> = vec![(7, &small); MEMBER_ROWS + 1];
        assert_eq!(
            member_runs(&many),
            vec![(0, MEMBER_ROWS), (MEMBER_ROWS, MEMBER_ROWS + 1)]
        );
        let heavy: Vec<(u64, &[u8])> = vec![(7, &big), (7, &small), (7, &small)];
        assert_eq!(member_runs(&heavy), vec![(0, 1), (1, 3)]);
        assert_eq!(member_runs(&[]), Vec::<(usize, usize)>::new());
    }

    #[test]
    fn numbers_are_written_as_python_formats_them() {
        for value in [0u64, 1, 9, 10, 255, 4096, 449_000_000_000_000_000, u64::MAX] {
            let mut out = Vec::new();
            hex(&mut out, value, 16);
            assert_eq!(out, format!("{value:016x}").into_bytes());
            let mut out = Vec::new();
            decimal(&mut out, value);
            assert_eq!(out, value.to_string().into_bytes());
        }
        for (value, shown) in [(0xabc, "0abc"), (0x1_0000, "10000"), (0, "0000")] {
            let mut out = Vec::new();
            hex(&mut out, value, 4);
            assert_eq!(out, shown.as_bytes());
        }
    }
}
