//! The JSON we send as a server-side apply body.
//!
//! The API server reads apply bodies as YAML (`application/apply-patch+yaml`; JSON is a subset),
//! and its YAML reader (go-yaml, via sigs.k8s.io/yaml) handles characters that JSON allows raw
//! inside strings differently. Measured on kube-apiserver v1.36.3 with a raw body:
//! - DEL, the C1 controls U+0080–U+009F except U+0085, U+FFFE and U+FFFF: the body is refused,
//!   `error converting YAML to JSON: yaml: control characters are not allowed`;
//! - U+0085 (NEL) is a YAML line break: in a value it silently becomes a space, in a key the
//!   body is refused; U+2028 and U+2029 are line breaks too: refused in a key;
//! - U+FEFF is skipped as a byte order mark at the start of a line; escaped for safety.
//!
//! So a pod template the API server accepted in an LWS (sent as JSON) could never be applied,
//! or would be applied changed. Escaping these characters as `\uXXXX` keeps the body valid JSON
//! with the same value, and YAML decodes the escapes back (checked for each). Go's own JSON
//! encoder escapes U+2028 and U+2029, which is why upstream's clients never hit that case.

use serde::Serialize;
use serde_json::value::RawValue;
use thiserror::Error;

/// An object that cannot be written as JSON.
#[derive(Debug, Error)]
#[error("cannot encode the apply body: {0}")]
pub struct ApplyBodyError(#[from] serde_json::Error);

/// Whether the YAML reader would refuse `c` raw, or read it as a line break.
fn needs_escape(c: char) -> bool {
    matches!(
        c,
        '\u{7f}'..='\u{9f}' | '\u{2028}' | '\u{2029}' | '\u{feff}' | '\u{fffe}' | '\u{ffff}'
    )
}

/// `object` as compact JSON with the characters YAML cannot read raw escaped, ready for
/// `kube::api::Patch::Apply` (a `RawValue` is sent byte for byte).
pub fn apply_body<T: Serialize>(object: &T) -> Result<Box<RawValue>, ApplyBodyError> {
    let mut out = Vec::new();
    let mut serializer = serde_json::Serializer::with_formatter(&mut out, YamlSafe);
    object.serialize(&mut serializer)?;
    // serde_json only writes valid UTF-8.
    let text = String::from_utf8(out).expect("serde_json writes UTF-8");
    Ok(RawValue::from_string(text)?)
}

/// serde_json's compact formatter, with [`needs_escape`] characters of strings (values and
/// keys alike) written as `\uXXXX`.
struct YamlSafe;

impl serde_json::ser::Formatter for YamlSafe {
    fn write_string_fragment<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        fragment: &str,
    ) -> std::io::Result<()> {
        let mut rest = fragment;
        while let Some((at, c)) = rest.char_indices().find(|&(_, c)| needs_escape(c)) {
            writer.write_all(&rest.as_bytes()[..at])?;
            write!(writer, "\\u{:04x}", u32::from(c))?;
            rest = &rest[at + c.len_utf8()..];
        }
        writer.write_all(rest.as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    #[test]
    fn yaml_unreadable_characters_are_escaped_in_values_and_keys() {
        let object = json!({
            "a\u{2028}b": "x\u{2029}y\u{7f}z\u{80}\u{85}\u{9f}\u{a0}",
            "bom\u{feff}": ["\u{fffe}\u{ffff}\u{fffd}"],
        });
        let body = apply_body(&object).unwrap();
        assert_eq!(
            body.get(),
            r#"{"a\u2028b":"x\u2029y\u007fz\u0080\u0085\u009f"#.to_string()
                + "\u{a0}"
                + r#"","bom\ufeff":["\ufffe\uffff"#
                + "\u{fffd}"
                + r#""]}"#
        );
        // Same value once decoded.
        let back: Value = serde_json::from_str(body.get()).unwrap();
        assert_eq!(back, object);
    }

    #[test]
    fn everything_else_is_serde_json_compact_output() {
        let object = json!({"s": "tab\tquote\"back\\slash\u{1}<>&é😀", "n": [1, -2.5, null, true]});
        let body = apply_body(&object).unwrap();
        assert_eq!(body.get(), serde_json::to_string(&object).unwrap());
    }

    #[test]
    fn the_body_is_sent_unchanged_by_patch_apply() {
        // kube serialises Patch::Apply's value with serde_json: a RawValue stays byte for byte.
        let body = apply_body(&json!({"k": "\u{2028}"})).unwrap();
        let sent = serde_json::to_string(&body).unwrap();
        assert_eq!(sent, r#"{"k":"\u2028"}"#);
    }
}
