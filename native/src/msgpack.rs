//! MessagePack, written exactly as msgpack-python's `packb(..., use_bin_type=True)` writes the
//! same Python values: the smallest form of each integer, floats as float64, str and bin apart;
//! and read back, for the same kinds of values (any width of integer or float that is valid).

use crate::model::Value;
use std::borrow::Cow;

pub fn nil(out: &mut Vec<u8>) {
    out.push(0xc0);
}

pub fn boolean(out: &mut Vec<u8>, value: bool) {
    out.push(if value { 0xc3 } else { 0xc2 });
}

pub fn unsigned(out: &mut Vec<u8>, value: u64) {
    if value < 0x80 {
        out.push(value as u8);
    } else if value < 0x100 {
        out.extend_from_slice(&[0xcc, value as u8]);
    } else if value < 0x1_0000 {
        out.push(0xcd);
        out.extend_from_slice(&(value as u16).to_be_bytes());
    } else if value < 0x1_0000_0000 {
        out.push(0xce);
        out.extend_from_slice(&(value as u32).to_be_bytes());
    } else {
        out.push(0xcf);
        out.extend_from_slice(&value.to_be_bytes());
    }
}

pub fn signed(out: &mut Vec<u8>, value: i64) {
    if value >= 0 {
        unsigned(out, value as u64);
    } else if value >= -32 {
        out.push(value as u8);
    } else if value >= i64::from(i8::MIN) {
        out.extend_from_slice(&[0xd0, value as u8]);
    } else if value >= i64::from(i16::MIN) {
        out.push(0xd1);
        out.extend_from_slice(&(value as i16).to_be_bytes());
    } else if value >= i64::from(i32::MIN) {
        out.push(0xd2);
        out.extend_from_slice(&(value as i32).to_be_bytes());
    } else {
        out.push(0xd3);
        out.extend_from_slice(&value.to_be_bytes());
    }
}

pub fn float(out: &mut Vec<u8>, value: f64) {
    out.push(0xcb);
    out.extend_from_slice(&value.to_be_bytes());
}

pub fn text(out: &mut Vec<u8>, value: &str) {
    let length = value.len();
    if length < 32 {
        out.push(0xa0 | length as u8);
    } else {
        sized(out, length, [0xd9, 0xda, 0xdb]);
    }
    out.extend_from_slice(value.as_bytes());
}

pub fn binary(out: &mut Vec<u8>, value: &[u8]) {
    sized(out, value.len(), [0xc4, 0xc5, 0xc6]);
    out.extend_from_slice(value);
}

pub fn array(out: &mut Vec<u8>, length: usize) {
    if length < 16 {
        out.push(0x90 | length as u8);
    } else {
        sized(out, length, [0x00, 0xdc, 0xdd]);
    }
}

pub fn map(out: &mut Vec<u8>, length: usize) {
    if length < 16 {
        out.push(0x80 | length as u8);
    } else {
        sized(out, length, [0x00, 0xde, 0xdf]);
    }
}

/// A length in the 8-, 16- or 32-bit form with those markers (0x00: no 8-bit form). The
/// callers' lengths come from messages capped far below 4 GiB.
fn sized(out: &mut Vec<u8>, length: usize, markers: [u8; 3]) {
    if length < 0x100 && markers[0] != 0 {
        out.extend_from_slice(&[markers[0], length as u8]);
    } else if length < 0x1_0000 {
        out.push(markers[1]);
        out.extend_from_slice(&(length as u16).to_be_bytes());
    } else {
        out.push(markers[2]);
        out.extend_from_slice(&(length as u32).to_be_bytes());
    }
}

/// Reads MessagePack values from a buffer; `None` for anything malformed or outside the kinds
/// of values rows hold (extensions, nested containers as values, a text that is not UTF-8).
pub struct Reader<'a> {
    data: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        Reader { data, at: 0 }
    }

    pub fn at(&self) -> usize {
        self.at
    }

    pub fn is_done(&self) -> bool {
        self.at == self.data.len()
    }

    /// The bytes from `start` to where the reader is now.
    pub fn since(&self, start: usize) -> &'a [u8] {
        &self.data[start..self.at]
    }

    fn take(&mut self, length: usize) -> Option<&'a [u8]> {
        let end = self.at.checked_add(length)?;
        let taken = self.data.get(self.at..end)?;
        self.at = end;
        Some(taken)
    }

    fn byte(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }

    fn be<const N: usize>(&mut self) -> Option<[u8; N]> {
        self.take(N)?.try_into().ok()
    }

    /// The 8-, 16- or 32-bit length after `marker`, one of `forms` (0x00: no 8-bit form).
    fn length(&mut self, marker: u8, forms: [u8; 3]) -> Option<usize> {
        if marker == forms[0] && marker != 0 {
            Some(usize::from(self.byte()?))
        } else if marker == forms[1] {
            Some(usize::from(u16::from_be_bytes(self.be()?)))
        } else if marker == forms[2] {
            Some(u32::from_be_bytes(self.be()?) as usize)
        } else {
            None
        }
    }

    pub fn array(&mut self) -> Option<usize> {
        match self.byte()? {
            marker @ 0x90..=0x9f => Some(usize::from(marker - 0x90)),
            marker @ (0xdc | 0xdd) => self.length(marker, [0x00, 0xdc, 0xdd]),
            _ => None,
        }
    }

    /// A map's length, or `None` inside `Some` for nil.
    pub fn map_or_nil(&mut self) -> Option<Option<usize>> {
        match self.byte()? {
            0xc0 => Some(None),
            marker @ 0x80..=0x8f => Some(Some(usize::from(marker - 0x80))),
            marker @ (0xde | 0xdf) => self.length(marker, [0x00, 0xde, 0xdf]).map(Some),
            _ => None,
        }
    }

    pub fn text(&mut self) -> Option<&'a str> {
        let marker = self.byte()?;
        self.text_after(marker)
    }

    fn text_after(&mut self, marker: u8) -> Option<&'a str> {
        let length = match marker {
            0xa0..=0xbf => usize::from(marker - 0xa0),
            _ => self.length(marker, [0xd9, 0xda, 0xdb])?,
        };
        std::str::from_utf8(self.take(length)?).ok()
    }

    pub fn unsigned(&mut self) -> Option<u64> {
        match self.value()? {
            Value::Unsigned(value) => Some(value),
            Value::Signed(value) => u64::try_from(value).ok(),
            _ => None,
        }
    }

    pub fn boolean(&mut self) -> Option<bool> {
        match self.byte()? {
            0xc2 => Some(false),
            0xc3 => Some(true),
            _ => None,
        }
    }

    pub fn value(&mut self) -> Option<Value<'a>> {
        let marker = self.byte()?;
        Some(match marker {
            0x00..=0x7f => Value::Unsigned(u64::from(marker)),
            0xe0..=0xff => Value::Signed(i64::from(marker as i8)),
            0xc0 => Value::Null,
            0xc2 => Value::Bool(false),
            0xc3 => Value::Bool(true),
            0xcc => Value::Unsigned(u64::from(self.byte()?)),
            0xcd => Value::Unsigned(u64::from(u16::from_be_bytes(self.be()?))),
            0xce => Value::Unsigned(u64::from(u32::from_be_bytes(self.be()?))),
            0xcf => Value::Unsigned(u64::from_be_bytes(self.be()?)),
            0xd0 => Value::Signed(i64::from(i8::from_be_bytes(self.be()?))),
            0xd1 => Value::Signed(i64::from(i16::from_be_bytes(self.be()?))),
            0xd2 => Value::Signed(i64::from(i32::from_be_bytes(self.be()?))),
            0xd3 => Value::Signed(i64::from_be_bytes(self.be()?)),
            0xca => Value::Float(f64::from(f32::from_be_bytes(self.be()?))),
            0xcb => Value::Float(f64::from_be_bytes(self.be()?)),
            0xa0..=0xbf | 0xd9..=0xdb => Value::Text(Cow::Borrowed(self.text_after(marker)?)),
            0xc4..=0xc6 => {
                let length = self.length(marker, [0xc4, 0xc5, 0xc6])?;
                Value::Bytes(Cow::Borrowed(self.take(length)?))
            }
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packed(write: impl Fn(&mut Vec<u8>)) -> Vec<u8> {
        let mut out = Vec::new();
        write(&mut out);
        out
    }

    #[test]
    fn integers_take_msgpack_pythons_smallest_form() {
        let cases: [(i128, &str); 16] = [
            (0, "00"),
            (127, "7f"),
            (128, "cc80"),
            (256, "cd0100"),
            (65536, "ce00010000"),
            (1 << 32, "cf0000000100000000"),
            ((1 << 64) - 1, "cfffffffffffffffff"),
            (-1, "ff"),
            (-32, "e0"),
            (-33, "d0df"),
            (-128, "d080"),
            (-129, "d1ff7f"),
            (-32769, "d2ffff7fff"),
            (-(1 << 31), "d280000000"),
            (-(1 << 31) - 1, "d3ffffffff7fffffff"),
            (-(1 << 63), "d38000000000000000"),
        ];
        for (value, hex) in cases {
            let out = match i64::try_from(value) {
                Ok(signed_value) => packed(|o| signed(o, signed_value)),
                Err(_) => packed(|o| unsigned(o, value as u64)),
            };
            let written: String = out.iter().map(|b| format!("{b:02x}")).collect();
            assert_eq!(written, hex, "{value}");
        }
    }

    #[test]
    fn lengths_take_their_smallest_form() {
        assert_eq!(packed(|o| text(o, &"a".repeat(31)))[0], 0xbf);
        assert_eq!(packed(|o| text(o, &"a".repeat(32)))[..2], [0xd9, 32]);
        assert_eq!(packed(|o| text(o, &"a".repeat(256)))[..3], [0xda, 1, 0]);
        assert_eq!(packed(|o| binary(o, b"a"))[..2], [0xc4, 1]);
        assert_eq!(packed(|o| array(o, 16))[..3], [0xdc, 0, 16]);
        assert_eq!(packed(|o| map(o, 15)), [0x8f]);
        assert_eq!(packed(|o| map(o, 70_000))[..1], [0xdf]);
    }

    #[test]
    fn what_is_written_reads_back() {
        let mut out = Vec::new();
        array(&mut out, 20);
        for value in [0, 127, 128, 70_000, u64::MAX] {
            unsigned(&mut out, value);
        }
        for value in [-1, -33, -129, -32769, i64::MIN] {
            signed(&mut out, value);
        }
        float(&mut out, -0.5);
        text(&mut out, "名前");
        text(&mut out, &"x".repeat(300));
        binary(&mut out, b"\x00\xff");
        nil(&mut out);
        boolean(&mut out, true);
        map(&mut out, 0);
        map(&mut out, 20);
        let mut reader = Reader::new(&out);
        assert_eq!(reader.array(), Some(20));
        for value in [0, 127, 128, 70_000, u64::MAX] {
            assert_eq!(reader.unsigned(), Some(value));
        }
        for value in [-1, -33, -129, -32769, i64::MIN] {
            assert!(matches!(reader.value(), Some(Value::Signed(v)) if v == value));
        }
        assert!(matches!(reader.value(), Some(Value::Float(v)) if v == -0.5));
        assert_eq!(reader.text(), Some("名前"));
        assert!(matches!(reader.value(), Some(Value::Text(t)) if t.len() == 300));
        assert!(matches!(reader.value(), Some(Value::Bytes(b)) if *b == [0, 255]));
        assert!(matches!(reader.value(), Some(Value::Null)));
        assert_eq!(reader.boolean(), Some(true));
        assert_eq!(reader.map_or_nil(), Some(Some(0)));
        assert_eq!(reader.map_or_nil(), Some(Some(20)));
        assert!(reader.is_done());
    }

    #[test]
    fn malformed_input_reads_as_none() {
        // Cut short, a length past the end, bad UTF-8, an extension type.
        for data in [
            &b"\xcd\x01"[..],
            b"\xa3ab",
            b"\xa2\xff\xfe",
            b"\xd4\x01\x02",
            b"",
        ] {
            assert!(Reader::new(data).value().is_none(), "{data:?}");
        }
        assert_eq!(Reader::new(b"\xc0").array(), None);
        assert_eq!(Reader::new(b"\x01").map_or_nil(), None);
    }
}
