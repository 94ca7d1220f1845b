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
    if has_surrogate_escape(data) {
        return None;
    }
    serde_json::from_str(std::str::from_utf8(data).ok()?).ok()
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
    let text = raw.get();
    if !text.starts_with('"') {
        return None;
    }
    if !text.contains('\\') {
        return Some(Cow::Borrowed(&text[1..text.len() - 1]));
    }
    serde_json::from_str::<BorrowedStr>(text).ok().map(|s| s.0)
}

/// An absent, null or boolean flag (other JSON is left to Python's idea of truth).
pub fn flag(raw: Option<&RawValue>) -> Option<bool> {
    match raw.map(RawValue::get) {
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

#[cfg(test)]
mod tests {
    use super::{has_surrogate_escape, integer_text};

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
