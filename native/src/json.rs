//! JSON reading shared by the native decoders: whole-document checks, borrowed strings, objects
//! kept in written order.

use std::borrow::Cow;
use std::marker::PhantomData;

use serde::de::{Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

/// `data` read as JSON, whose whole text must be UTF-8 as orjson requires (serde_json checks
/// only the strings it keeps, not those of fields it skips).
pub fn parse<'a, T: Deserialize<'a>>(data: &'a [u8]) -> Option<T> {
    parse_text(std::str::from_utf8(data).ok()?)
}

/// `text` read as JSON (see `parse`).
pub fn parse_text<'a, T: Deserialize<'a>>(text: &'a str) -> Option<T> {
    if has_surrogate_escape(text.as_bytes()) || !finite_numbers(text.as_bytes()) {
        return None;
    }
    serde_json::from_str(text).ok()
}

/// Whether every number of `data` outside its strings is one orjson reads: finite as a double
/// (orjson refuses the whole document over one that is not, where serde_json skips the numbers
/// of fields it does not keep without reading them).
fn finite_numbers(data: &[u8]) -> bool {
    let mut pos = 0;
    while pos < data.len() {
        match data[pos] {
            b'"' => {
                pos += 1;
                while pos < data.len() && data[pos] != b'"' {
                    pos += if data[pos] == b'\\' { 2 } else { 1 };
                }
                pos += 1;
            }
            b'-' | b'0'..=b'9' => {
                let start = pos;
                while pos < data.len()
                    && matches!(data[pos], b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9')
                {
                    pos += 1;
                }
                if !finite_number(&data[start..pos]) {
                    return false;
                }
            }
            _ => pos += 1,
        }
    }
    true
}

/// Whether a number's text is finite as a double; only a long one or one with an exponent can
/// be anything else.
fn finite_number(number: &[u8]) -> bool {
    if number.len() < 300 && !number.iter().any(|&b| b == b'e' || b == b'E') {
        return true;
    }
    std::str::from_utf8(number)
        .ok()
        .and_then(|text| text.parse::<f64>().ok())
        .is_some_and(f64::is_finite)
}

/// A JSON value kept as its own text (`Option<&RawValue>`'s text: `null` is `None`), for
/// `#[serde(borrow, default, deserialize_with = "raw_text")]` fields.
pub fn raw_text<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<&'de str>, D::Error> {
    Option::<&'de RawValue>::deserialize(deserializer).map(|raw| raw.map(RawValue::get))
}

/// Whether `data` holds a `\uD...` escape: serde_json does not pair the surrogates of strings it
/// skips, orjson refuses a lone one anywhere. Rare (Go writes non-ASCII as UTF-8): left to Python.
fn has_surrogate_escape(data: &[u8]) -> bool {
    let mut from = 0;
    while let Some(found) = memchr::memchr(b'\\', &data[from..]) {
        let at = from + found;
        match data.get(at + 1) {
            Some(b'u') if data.get(at + 2).is_some_and(|b| b | 0x20 == b'd') => return true,
            // An escape is two characters at least: `\\u` is a backslash, then text.
            _ => from = at + 2,
        }
        if from >= data.len() {
            return false;
        }
    }
    false
}

/// A string borrowed from the input where it has no escapes.
pub struct BorrowedStr<'a>(pub Cow<'a, str>);

impl<'de> Deserialize<'de> for BorrowedStr<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> Visitor<'de> for Visit {
            type Value = BorrowedStr<'de>;
            fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
                formatter.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, text: &'de str) -> Result<Self::Value, E> {
                Ok(BorrowedStr(Cow::Borrowed(text)))
            }
            fn visit_str<E>(self, text: &str) -> Result<Self::Value, E> {
                Ok(BorrowedStr(Cow::Owned(text.to_owned())))
            }
        }
        deserializer.deserialize_str(Visit)
    }
}

/// An object's members in the order written (a repeated name included, as a dict sees it).
#[derive(Debug, PartialEq)]
pub struct Ordered<'a, V>(pub Vec<(Cow<'a, str>, V)>);

impl<'de, V: Deserialize<'de>> Deserialize<'de> for Ordered<'de, V> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visit<V>(PhantomData<V>);
        impl<'de, V: Deserialize<'de>> Visitor<'de> for Visit<V> {
            type Value = Ordered<'de, V>;
            fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
                formatter.write_str("an object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut members = Vec::with_capacity(map.size_hint().unwrap_or(16));
                while let Some((name, value)) = map.next_entry::<BorrowedStr<'de>, V>()? {
                    members.push((name.0, value));
                }
                Ok(Ordered(members))
            }
        }
        deserializer.deserialize_map(Visit(PhantomData))
    }
}

/// A JSON string's text, borrowed where it has no escapes; `None` for any other JSON.
pub fn string(raw: &RawValue) -> Option<Cow<'_, str>> {
    string_text(raw.get())
}

/// `string` of a JSON value's text.
pub fn string_text(text: &str) -> Option<Cow<'_, str>> {
    if !text.starts_with('"') {
        return None;
    }
    let inside = text.get(1..text.len() - 1)?;
    if !inside.contains('\\') {
        return Some(Cow::Borrowed(inside));
    }
    match unescape(inside) {
        Some(unescaped) => Some(Cow::Owned(unescaped)),
        None => serde_json::from_str::<BorrowedStr>(text).ok().map(|s| s.0),
    }
}

/// An absent, null or boolean flag (other JSON is left to Python's idea of truth).
pub fn flag(raw: Option<&RawValue>) -> Option<bool> {
    flag_text(raw.map(RawValue::get))
}

/// `flag` of a JSON value's text.
pub fn flag_text(text: Option<&str>) -> Option<bool> {
    match text {
        None | Some("null") | Some("false") => Some(false),
        Some("true") => Some(true),
        _ => None,
    }
}

/// `-?[0-9]+` within 64 bits: Ok(signed) or Err(unsigned above i64).
pub fn integer_text(text: &str) -> Option<Result<i64, u64>> {
    let (negative, digits) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    if digits.is_empty() {
        return None;
    }
    // One pass: digits only, and the magnitude within 64 bits.
    let mut magnitude: u64 = 0;
    for b in digits.bytes() {
        let digit = b.wrapping_sub(b'0');
        if digit > 9 {
            return None;
        }
        magnitude = magnitude.checked_mul(10)?.checked_add(u64::from(digit))?;
    }
    if negative {
        // Down to -2^63, whose magnitude is one past i64::MAX.
        0i64.checked_sub_unsigned(magnitude).map(Ok)
    } else {
        Some(i64::try_from(magnitude).map_err(|_| magnitude))
    }
}

/// A strict reader of compact JSON (no whitespace, as Go's encoder writes it) for decoders
/// that know the shape they expect: each step returns `None` at anything else (whitespace,
/// an escaped member name, a `\uD...` escape, nesting it was not asked for, bad JSON), and
/// the caller then reads the same text with serde_json, which decides. What it accepts it
/// reads as serde_json does: values are kept as their own text (`raw_text`).
pub struct Scanner<'a> {
    text: &'a str,
    pos: usize,
}

impl<'a> Scanner<'a> {
    pub fn new(text: &'a str) -> Self {
        Scanner { text, pos: 0 }
    }

    fn bytes(&self) -> &'a [u8] {
        self.text.as_bytes()
    }

    /// The next byte, taken.
    pub fn next(&mut self) -> Option<u8> {
        let byte = *self.bytes().get(self.pos)?;
        self.pos += 1;
        Some(byte)
    }

    /// Takes `expected`, the next byte.
    pub fn expect(&mut self, expected: u8) -> Option<()> {
        (self.next()? == expected).then_some(())
    }

    /// Takes `expected` when it is the next byte.
    pub fn take(&mut self, expected: u8) -> bool {
        let found = self.bytes().get(self.pos) == Some(&expected);
        self.pos += usize::from(found);
        found
    }

    /// An object: `{`, then `member` for each member (it reads the name and the value) with
    /// `,` between them, then `}`; `None` as soon as anything else comes.
    pub fn members(&mut self, mut member: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
        self.expect(b'{')?;
        if self.take(b'}') {
            return Some(());
        }
        loop {
            member(self)?;
            if !self.take(b',') {
                return self.expect(b'}');
            }
        }
    }

    /// Whether the whole text has been read.
    pub fn at_end(&self) -> bool {
        self.pos == self.text.len()
    }

    /// A member name without escapes and the colon after it.
    pub fn name(&mut self) -> Option<&'a str> {
        let (raw, escaped) = self.string()?;
        self.expect(b':')?;
        (!escaped).then(|| &raw[1..raw.len() - 1])
    }

    /// A one-letter member name (as `"t":`) and the colon after it; `None` for any other.
    pub fn letter_name(&mut self) -> Option<u8> {
        match self.bytes().get(self.pos..self.pos + 4)? {
            &[b'"', letter, b'"', b':'] if letter != b'\\' && letter != b'"' => {
                self.pos += 4;
                Some(letter)
            }
            _ => None,
        }
    }

    /// A scalar's text (`None` inside for `null`, as `raw_text` reads it); objects and arrays
    /// are refused.
    pub fn scalar(&mut self) -> Option<Option<&'a str>> {
        let start = self.pos;
        match *self.bytes().get(start)? {
            b'"' => return self.string().map(|(raw, _)| Some(raw)),
            b'n' => return self.literal("null").map(|()| None),
            b't' => self.literal("true")?,
            b'f' => self.literal("false")?,
            _ => self.number()?,
        }
        Some(Some(&self.text[start..self.pos]))
    }

    fn literal(&mut self, word: &str) -> Option<()> {
        let end = self.pos + word.len();
        (self.text.get(self.pos..end)? == word).then(|| self.pos = end)
    }

    /// `-?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?`
    fn number(&mut self) -> Option<()> {
        let start = self.pos;
        self.take(b'-');
        if !self.take(b'0') {
            self.digits()?;
        }
        if self.take(b'.') {
            self.digits()?;
        }
        if self.take(b'e') || self.take(b'E') {
            if !self.take(b'+') {
                self.take(b'-');
            }
            self.digits()?;
        }
        // orjson refuses a number that is infinite as a double.
        finite_number(&self.bytes()[start..self.pos]).then_some(())
    }

    /// One digit or more.
    fn digits(&mut self) -> Option<()> {
        let start = self.pos;
        let rest = &self.bytes()[start..];
        self.pos += rest.iter().take_while(|b| b.is_ascii_digit()).count();
        (self.pos > start).then_some(())
    }

    /// A string's text with its quotes, and whether it has escapes.
    fn string(&mut self) -> Option<(&'a str, bool)> {
        let (bytes, start) = (self.bytes(), self.pos);
        if bytes.get(start) != Some(&b'"') {
            return None;
        }
        let mut escaped = false;
        // Byte by byte: most strings here are a few bytes, shorter than a SIMD search's set-up.
        let mut at = start + 1;
        loop {
            let byte = *bytes.get(at)?;
            at += 1;
            match byte {
                b'"' => break,
                b'\\' => {
                    escaped = true;
                    at += escape_length(bytes.get(at..)?)?;
                }
                // serde_json refuses raw control characters in strings.
                0..=0x1f => return None,
                _ => {}
            }
        }
        self.pos = at;
        Some((&self.text[start..at], escaped))
    }
}

/// How many bytes after a backslash its escape takes; `None` for an invalid escape or a
/// surrogate (left to `parse_text`, which leaves them to Python).
fn escape_length(rest: &[u8]) -> Option<usize> {
    match *rest.first()? {
        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => Some(1),
        b'u' => {
            let hex = rest.get(1..5)?;
            (hex.iter().all(u8::is_ascii_hexdigit) && hex[0] | 0x20 != b'd').then_some(5)
        }
        _ => None,
    }
}

/// The text of a JSON string's inside (its escapes valid), unescaped; `None` at a surrogate
/// escape, which serde_json pairs.
fn unescape(inside: &str) -> Option<String> {
    // Raw control characters are serde_json's to refuse (a checked value has none).
    if inside.bytes().any(|b| b < 0x20) {
        return None;
    }
    let mut out = String::with_capacity(inside.len());
    let mut rest = inside;
    while let Some(at) = rest.find('\\') {
        out.push_str(&rest[..at]);
        let bytes = &rest.as_bytes()[at + 1..];
        let length = escape_length(bytes)?;
        out.push(match bytes[0] {
            b'b' => '\u{8}',
            b'f' => '\u{c}',
            b'n' => '\n',
            b'r' => '\r',
            b't' => '\t',
            b'u' => char::from_u32(u32::from_str_radix(&rest[at + 2..at + 6], 16).ok()?)?,
            other => char::from(other),
        });
        rest = &rest[at + 1 + length..];
    }
    out.push_str(rest);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::{has_surrogate_escape, integer_text, string_text};

    #[test]
    fn integer_text_takes_64_bits_and_nothing_else() {
        assert_eq!(integer_text("0"), Some(Ok(0)));
        assert_eq!(integer_text("-0"), Some(Ok(0)));
        assert_eq!(integer_text("00012"), Some(Ok(12)));
        assert_eq!(integer_text("9223372036854775807"), Some(Ok(i64::MAX)));
        assert_eq!(integer_text("9223372036854775808"), Some(Err(1 << 63)));
        assert_eq!(integer_text("18446744073709551615"), Some(Err(u64::MAX)));
        assert_eq!(integer_text("-9223372036854775808"), Some(Ok(i64::MIN)));
        for refused in [
            "",
            "-",
            "+1",
            "1a",
            "1.0",
            " 1",
            "18446744073709551616",
            "-9223372036854775809",
            "99999999999999999999999",
        ] {
            assert_eq!(integer_text(refused), None, "{refused:?}");
        }
    }

    #[test]
    fn strings_unescape_as_serde_json_unescapes_them() {
        for text in [
            r#""plain""#,
            r#""a\"b\\c\/d\b\f\n\r\t""#,
            r#""\u00e9\u4E2D\u0000 x""#,
            r#""\\xd6#{.\\xd9""#,
            r#""\ud83d\ude00""#,
            r#""\q""#,
            r#""\u12""#,
            "\"tab\tinside\\n\"",
            r#""""#,
        ] {
            let serde = serde_json::from_str::<String>(text).ok();
            assert_eq!(string_text(text).map(|s| s.into_owned()), serde, "{text}");
        }
    }

    #[test]
    fn surrogate_escapes_are_found_anywhere() {
        assert!(has_surrogate_escape(br#"{"a":"\ud83d\ude00"}"#));
        assert!(has_surrogate_escape(br#"{"a":"x\uDC00"}"#));
        assert!(!has_surrogate_escape(br#"{"a":"\u00e9\\","b":"\n"}"#));
        assert!(!has_surrogate_escape(b"\\"));
        assert!(!has_surrogate_escape(b"\\u"));
        assert!(!has_surrogate_escape(br#"{"a":"\\ud800"}"#));
        assert!(has_surrogate_escape(br#"{"a":"\\\ud800"}"#));
    }
}
