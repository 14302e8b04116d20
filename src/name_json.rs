//! File names and paths in JSON, without loss. A name is bytes; JSON
//! strings are Unicode. A name that is valid UTF-8 is written as a plain
//! string (what every program expects); any other is written as
//! `{"base64": "<its bytes, RFC 4648 base64 with padding>"}`, so that a
//! program that only handles strings fails loudly on it instead of acting
//! on a name with U+FFFD in it, and one that handles both gets the exact
//! bytes back (`base64 -d` in a shell). The control protocol and every
//! `--json` output use this one form (docs/cli.md, "Names in JSON").
//!
//! Use with `#[serde(with = "crate::name_json")]` on a `PathBuf` or
//! `OsString` field, `crate::name_json::option` on an `Option` of one, and
//! `crate::name_json::vec` on a `Vec` of them.

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::os::unix::ffi::{OsStrExt, OsStringExt};

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};

/// The key of the object that carries a name that is not UTF-8.
pub const BASE64_KEY: &str = "base64";

/// A borrowed name, serialized in the lossless form.
pub struct Name<'a>(pub &'a OsStr);

impl Serialize for Name<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0.to_str() {
            Some(text) => s.serialize_str(text),
            None => {
                let mut map = s.serialize_map(Some(1))?;
                map.serialize_entry(BASE64_KEY, &base64_encode(self.0.as_bytes()))?;
                map.end()
            }
        }
    }
}

/// An owned name read from either form.
pub struct NameBuf(pub OsString);

impl<'de> Deserialize<'de> for NameBuf {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<NameBuf, D::Error> {
        d.deserialize_any(NameVisitor)
    }
}

struct NameVisitor;

impl<'de> Visitor<'de> for NameVisitor {
    type Value = NameBuf;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "a file name: a string, or {{\"{BASE64_KEY}\": \"...\"}} for one that is not UTF-8")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<NameBuf, E> {
        Ok(NameBuf(OsString::from(v)))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<NameBuf, E> {
        Ok(NameBuf(OsString::from(v)))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<NameBuf, A::Error> {
        let mut bytes = None;
        while let Some(key) = map.next_key::<String>()? {
            if key != BASE64_KEY || bytes.is_some() {
                return Err(de::Error::custom(format!("unexpected key {key:?} in a file name")));
            }
            let text: String = map.next_value()?;
            bytes = Some(base64_decode(&text).ok_or_else(|| de::Error::custom("a file name is not valid base64"))?);
        }
        let bytes = bytes.ok_or_else(|| de::Error::missing_field(BASE64_KEY))?;
        Ok(NameBuf(OsString::from_vec(bytes)))
    }
}

pub fn serialize<P: AsRef<OsStr>, S: Serializer>(name: &P, s: S) -> Result<S::Ok, S::Error> {
    Name(name.as_ref()).serialize(s)
}

pub fn deserialize<'de, P: From<OsString>, D: Deserializer<'de>>(d: D) -> Result<P, D::Error> {
    NameBuf::deserialize(d).map(|n| P::from(n.0))
}

/// For `Option<PathBuf>` fields (`null` when absent).
pub mod option {
    use super::*;

    pub fn serialize<P: AsRef<OsStr>, S: Serializer>(name: &Option<P>, s: S) -> Result<S::Ok, S::Error> {
        name.as_ref().map(|n| Name(n.as_ref())).serialize(s)
    }

    pub fn deserialize<'de, P: From<OsString>, D: Deserializer<'de>>(d: D) -> Result<Option<P>, D::Error> {
        Ok(Option::<NameBuf>::deserialize(d)?.map(|n| P::from(n.0)))
    }
}

/// For `Vec<PathBuf>` fields.
pub mod vec {
    use super::*;

    pub fn serialize<P: AsRef<OsStr>, S: Serializer>(names: &[P], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(names.iter().map(|n| Name(n.as_ref())))
    }

    pub fn deserialize<'de, P: From<OsString>, D: Deserializer<'de>>(d: D) -> Result<Vec<P>, D::Error> {
        Ok(Vec::<NameBuf>::deserialize(d)?.into_iter().map(|n| P::from(n.0)).collect())
    }
}

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Standard base64 (RFC 4648 section 4) with padding: what `base64 -d`,
/// Python's `base64.b64decode` and JavaScript's `atob` read.
pub fn base64_encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for group in bytes.chunks(3) {
        let b = [group[0], *group.get(1).unwrap_or(&0), *group.get(2).unwrap_or(&0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= group.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i)) as usize & 63] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The bytes of padded standard base64; None if `text` is not exactly that.
pub fn base64_decode(text: &str) -> Option<Vec<u8>> {
    let text = text.as_bytes();
    if !text.len().is_multiple_of(4) {
        return None;
    }
    let mut out = Vec::with_capacity(text.len() / 4 * 3);
    for (g, group) in text.chunks(4).enumerate() {
        let last = g + 1 == text.len() / 4;
        let pad = group.iter().rev().take_while(|c| **c == b'=').count();
        if pad > 2 || (pad > 0 && !last) {
            return None;
        }
        let mut n = 0u32;
        for c in &group[..4 - pad] {
            let v = ALPHABET.iter().position(|a| a == c)?;
            n = (n << 6) | v as u32;
        }
        n <<= 6 * pad as u32;
        let bytes = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        // Bits below the last byte must be zero: one text per byte string.
        if bytes[3 - pad..].iter().any(|b| *b != 0) {
            return None;
        }
        out.extend_from_slice(&bytes[..3 - pad]);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    #[derive(Serialize, Deserialize, Debug, PartialEq)]
    struct Entry {
        #[serde(with = "crate::name_json")]
        path: PathBuf,
        #[serde(with = "crate::name_json::option")]
        other: Option<PathBuf>,
        #[serde(with = "crate::name_json::vec")]
        list: Vec<PathBuf>,
    }

    fn path(bytes: &[u8]) -> PathBuf {
        PathBuf::from(OsStr::from_bytes(bytes))
    }

    #[test]
    fn utf8_names_are_plain_strings() {
        for name in ["app.py", "src/été/ü.txt", "", "a\nb", "\u{fffd}", "{\"base64\":\"AA==\"}"] {
            let e = Entry { path: name.into(), other: Some(name.into()), list: vec![name.into()] };
            let v = serde_json::to_value(&e).expect("encode");
            assert_eq!(v, serde_json::json!({ "path": name, "other": name, "list": [name] }));
            assert_eq!(serde_json::from_value::<Entry>(v).expect("decode"), e);
        }
    }

    #[test]
    fn other_names_are_base64_objects() {
        let e = Entry { path: path(b"bad\xff\xfe.txt"), other: None, list: vec![path(b"d\x80/f"), "ok".into()] };
        let v = serde_json::to_value(&e).expect("encode");
        assert_eq!(
            v,
            serde_json::json!({ "path": { "base64": "YmFk//4udHh0" }, "other": null, "list": [{ "base64": "ZIAvZg==" }, "ok"] })
        );
        assert_eq!(serde_json::from_value::<Entry>(v).expect("decode"), e);
    }

    /// Every byte string comes back exactly, whatever its length and bytes.
    #[test]
    fn arbitrary_bytes_round_trip() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        for len in 0..300 {
            let bytes: Vec<u8> = (0..len)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    (seed >> 24) as u8
                })
                .collect();
            let name = OsString::from_vec(bytes.clone());
            let text = serde_json::to_string(&Name(&name)).expect("encode");
            let back: NameBuf = serde_json::from_str(&text).expect("decode");
            assert_eq!(back.0.as_bytes(), &bytes[..], "{text}");
            assert_eq!(base64_decode(&base64_encode(&bytes)).as_deref(), Some(&bytes[..]));
        }
        for b in 0..=255u8 {
            let name = OsString::from_vec(vec![b'x', b, b'y']);
            let back: NameBuf =
                serde_json::from_str(&serde_json::to_string(&Name(&name)).expect("encode")).expect("decode");
            assert_eq!(back.0, name);
        }
    }

    #[test]
    fn base64_matches_rfc_4648() {
        // RFC 4648 section 10.
        for (plain, coded) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64_encode(plain.as_bytes()), coded);
            assert_eq!(base64_decode(coded).as_deref(), Some(plain.as_bytes()));
        }
        for bad in ["Zg", "Zg=", "Z===", "Zh==", "Zg==Zg==", "Zm9v!A==", "=Zm9"] {
            assert_eq!(base64_decode(bad), None, "{bad}");
        }
    }

    #[test]
    fn malformed_objects_are_refused() {
        for bad in [r#"{}"#, r#"{"bytes":[1]}"#, r#"{"base64":"Zg"}"#, r#"{"base64":"Zg==","x":1}"#, "12", "[1,2]"] {
            assert!(serde_json::from_str::<NameBuf>(bad).is_err(), "{bad}");
        }
    }
}
