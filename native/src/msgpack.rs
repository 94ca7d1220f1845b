//! MessagePack, written exactly as msgpack-python's `packb(..., use_bin_type=True)` writes the
//! same Python values: the smallest form of each integer, floats as float64, str and bin apart.

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
}
