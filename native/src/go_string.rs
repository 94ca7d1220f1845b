//! The body of a Go `strconv.Quote` string back to its bytes (TiCDC's binary CHAR values).

/// The bytes `text` stands for, or `None` on an escape Go would not write.
pub fn unquote(text: &str) -> Option<Vec<u8>> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut pos = 0;
    while pos < bytes.len() {
        let byte = bytes[pos];
        if byte != b'\\' {
            out.push(byte);
            pos += 1;
            continue;
        }
        let kind = *bytes.get(pos + 1)?;
        pos += 2;
        match kind {
            b'x' => {
                out.push(digits(bytes.get(pos..pos + 2)?, 16)? as u8);
                pos += 2;
            }
            b'u' | b'U' => {
                let width = if kind == b'u' { 4 } else { 8 };
                push_code_point(&mut out, digits(bytes.get(pos..pos + width)?, 16)?)?;
                pos += width;
            }
            b'0'..=b'7' => {
                let number = digits(bytes.get(pos - 1..pos + 2)?, 8)?;
                out.push(u8::try_from(number).ok()?);
                pos += 2;
            }
            _ => out.push(simple_escape(kind)?),
        }
    }
    Some(out)
}

fn simple_escape(kind: u8) -> Option<u8> {
    Some(match kind {
        b'a' => 0x07,
        b'b' => 0x08,
        b'f' => 0x0c,
        b'n' => b'\n',
        b'r' => b'\r',
        b't' => b'\t',
        b'v' => 0x0b,
        b'\\' | b'\'' | b'"' => kind,
        _ => return None,
    })
}

fn digits(text: &[u8], radix: u32) -> Option<u32> {
    text.iter().try_fold(0u32, |acc, &b| {
        Some(acc * radix + (b as char).to_digit(radix)?)
    })
}

/// UTF-8 of a code point, surrogates included (as Python's "surrogatepass" writes them).
fn push_code_point(out: &mut Vec<u8>, code: u32) -> Option<()> {
    if (0xD800..=0xDFFF).contains(&code) {
        out.extend([
            0xE0 | (code >> 12) as u8,
            0x80 | ((code >> 6) & 0x3F) as u8,
            0x80 | (code & 0x3F) as u8,
        ]);
        return Some(());
    }
    let mut buffer = [0u8; 4];
    out.extend_from_slice(char::from_u32(code)?.encode_utf8(&mut buffer).as_bytes());
    Some(())
}

#[cfg(test)]
mod tests {
    use super::unquote;

    #[test]
    fn escapes() {
        assert_eq!(
            unquote(r#"a\x00\xff\n\\\"\101\u00e9\U0001f642"#).unwrap(),
            b"a\x00\xff\n\\\"A\xc3\xa9\xf0\x9f\x99\x82"
        );
        assert_eq!(unquote(r"\ud800").unwrap(), b"\xed\xa0\x80");
        for bad in [r"\", r"\x0", r"\q", r"\400", r"\U00110000", r"\xzz", r"\12"] {
            assert!(unquote(bad).is_none(), "{bad}");
        }
    }
}
