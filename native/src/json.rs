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
    let mut rest = data;
    while let Some(at) = rest.iter().position(|&b| b == b'\\') {
        if rest.get(at + 1) == Some(&b'u') && rest.get(at + 2).is_some_and(|b| b | 0x20 == b'd') {
            return true;
        }
        rest = &rest[at + 1..];
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
    let digits = text.strip_prefix('-').unwrap_or(text);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    match text.parse::<i64>() {
        Ok(value) => Some(Ok(value)),
        Err(_) => text.parse::<u64>().ok().map(Err),
    }
}
