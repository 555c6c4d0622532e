//! What Go's `encoding/json` makes of an LWS spec: decode into the typed Go structs, encode
//! again. That drops unknown fields, fills in non-`omitempty` zero values (`"resources":{}`,
//! `"containers":null`), drops `omitempty` zero values, and canonicalises quantities.
//!
//! The shapes of the Go types come from `go_types.json`, printed by upstream's own types via
//! reflection (`test/lwsref gotypes`, k8s.io/api v0.36.2 as LWS v0.9.0 pins); an e2e test
//! regenerates it and fails on drift.

use std::{collections::BTreeMap, sync::LazyLock};

use serde::Deserialize;
use serde_json::Value;
use thiserror::Error;

use super::quantity;

/// One JSON field of a Go struct (embedded structs already inlined).
#[derive(Debug, Deserialize)]
struct GoField {
    name: String,
    #[serde(rename = "type")]
    ty: String,
    #[serde(default)]
    omitempty: bool,
    #[serde(default)]
    omitzero: bool,
}

#[derive(Debug, Deserialize)]
struct GoStruct {
    #[serde(rename = "type")]
    name: String,
    fields: Vec<GoField>,
}

static GO_TYPES: LazyLock<BTreeMap<String, Vec<GoField>>> = LazyLock::new(|| {
    let list: Vec<GoStruct> =
        serde_json::from_str(include_str!("go_types.json")).expect("go_types.json is valid");
    list.into_iter().map(|s| (s.name, s.fields)).collect()
});

/// Go type name of the LWS `leaderWorkerTemplate`.
pub const LEADER_WORKER_TEMPLATE: &str =
    "sigs.k8s.io/lws/api/leaderworkerset/v1.LeaderWorkerTemplate";
/// Go type name of the LWS `networkConfig`.
pub const NETWORK_CONFIG: &str = "sigs.k8s.io/lws/api/leaderworkerset/v1.NetworkConfig";

/// A value Go could not have decoded into its type.
#[derive(Debug, Error, PartialEq)]
pub enum GoJsonError {
    /// JSON of the wrong shape for the Go type at `path`.
    #[error("{path}: expected {expected}")]
    Shape {
        /// Where in the object.
        path: String,
        /// What Go wanted there.
        expected: String,
    },
    /// A quantity Go would not parse.
    #[error("{path}: {source}")]
    Quantity {
        /// Where in the object.
        path: String,
        /// The parse error.
        source: quantity::QuantityError,
    },
    /// The type table lacks a type (the table is stale).
    #[error("unknown Go type {0}")]
    UnknownType(String),
}

/// A value as Go's encoder holds it after decoding into the typed structs: struct fields keep
/// their declaration order, integers stay integers. [`Go::to_value`] gives what the LWS
/// revision hash sees (a second pass through `map[string]interface{}`: numbers become float64,
/// keys sorted); [`Go::write_typed`] what `json.Marshal` of the typed value writes.
#[derive(Clone, Debug, PartialEq)]
enum Go {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    /// `interface{}` and raw JSON: written as JSON.
    Json(Value),
    List(Vec<Go>),
    /// A Go map: keys sorted when written.
    Map(Vec<(String, Go)>),
    /// A Go struct: fields in declaration order.
    Struct(Vec<(String, Go)>),
}

impl Go {
    fn to_value(&self) -> Value {
        match self {
            Go::Null => Value::Null,
            Go::Bool(b) => Value::Bool(*b),
            Go::Int(i) => go_number(*i as f64),
            Go::Float(f) => go_number(*f),
            Go::Str(s) => Value::String(s.clone()),
            Go::Json(v) => v.clone(),
            Go::List(items) => Value::Array(items.iter().map(Go::to_value).collect()),
            Go::Map(entries) | Go::Struct(entries) => Value::Object(
                entries
                    .iter()
                    .map(|(k, v)| (k.clone(), v.to_value()))
                    .collect(),
            ),
        }
    }

    fn write_typed(&self, out: &mut String) {
        match self {
            Go::Null => out.push_str("null"),
            Go::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Go::Int(i) => out.push_str(&i.to_string()),
            Go::Float(f) => write_number(out, *f),
            Go::Str(s) => write_string(out, s),
            Go::Json(v) => write_value(out, v),
            Go::List(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    item.write_typed(out);
                }
                out.push(']');
            }
            Go::Map(entries) => {
                let mut sorted: Vec<&(String, Go)> = entries.iter().collect();
                sorted.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
                write_entries(out, sorted.into_iter());
            }
            Go::Struct(entries) => write_entries(out, entries.iter()),
        }
    }
}

fn write_entries<'a>(out: &mut String, entries: impl Iterator<Item = &'a (String, Go)>) {
    out.push('{');
    for (i, (k, v)) in entries.enumerate() {
        if i > 0 {
            out.push(',');
        }
        write_string(out, k);
        out.push(':');
        v.write_typed(out);
    }
    out.push('}');
}

/// The result of decoding one field: its encoding, and whether `omitempty` drops it.
struct Encoded {
    value: Go,
    empty: bool,
    zero: bool,
}

/// Re-encodes `input` (a JSON value of Go type `ty`) the way Go's encoding/json would, then
/// through `map[string]interface{}` (float64 numbers): the form the LWS revision hashes.
pub fn normalize(input: Option<&Value>, ty: &str) -> Result<Value, GoJsonError> {
    Ok(encode(input, ty, "")?.value.to_value())
}

/// What Go's `json.Marshal` writes for `input` decoded into Go type `ty`: struct fields in
/// declaration order, integers as integers, map keys sorted, HTML characters escaped — the
/// bytes a hash over a typed Go value (e.g. a DisaggregatedSet's revision) is taken of.
pub fn marshal_typed(input: Option<&Value>, ty: &str) -> Result<String, GoJsonError> {
    let mut out = String::new();
    encode(input, ty, "")?.value.write_typed(&mut out);
    Ok(out)
}

fn shape(path: &str, expected: &str) -> GoJsonError {
    GoJsonError::Shape {
        path: if path.is_empty() {
            ".".into()
        } else {
            path.into()
        },
        expected: expected.into(),
    }
}

fn encode(input: Option<&Value>, ty: &str, path: &str) -> Result<Encoded, GoJsonError> {
    // JSON null decodes to the zero value, exactly like an absent field.
    let input = input.filter(|v| !v.is_null());
    let scalar = |value: Go, empty: bool| {
        Ok(Encoded {
            value,
            empty,
            zero: empty,
        })
    };

    if let Some(elem) = ty.strip_prefix('*') {
        return match input {
            None => scalar(Go::Null, true),
            Some(v) => Ok(Encoded {
                empty: false,
                zero: false,
                ..encode(Some(v), elem, path)?
            }),
        };
    }
    if let Some(elem) = ty.strip_prefix("[]") {
        return match input {
            None => scalar(Go::Null, true),
            Some(Value::Array(items)) => {
                let out = items
                    .iter()
                    .enumerate()
                    .map(|(i, item)| Ok(encode(Some(item), elem, &format!("{path}[{i}]"))?.value))
                    .collect::<Result<Vec<_>, GoJsonError>>()?;
                Ok(Encoded {
                    empty: out.is_empty(),
                    zero: false,
                    value: Go::List(out),
                })
            }
            Some(_) => Err(shape(path, "an array")),
        };
    }
    if let Some(elem) = ty.strip_prefix("map[]") {
        return match input {
            None => scalar(Go::Null, true),
            Some(Value::Object(entries)) => {
                let mut out = Vec::with_capacity(entries.len());
                for (k, v) in entries {
                    out.push((
                        k.clone(),
                        encode(Some(v), elem, &format!("{path}.{k}"))?.value,
                    ));
                }
                Ok(Encoded {
                    empty: out.is_empty(),
                    zero: false,
                    value: Go::Map(out),
                })
            }
            Some(_) => Err(shape(path, "an object")),
        };
    }
    match ty {
        "string" => match input {
            None => scalar(Go::Str(String::new()), true),
            Some(Value::String(s)) => scalar(Go::Str(s.clone()), s.is_empty()),
            Some(_) => Err(shape(path, "a string")),
        },
        "bytes" => match input {
            None => scalar(Go::Null, true),
            Some(Value::String(s)) => scalar(Go::Str(s.clone()), s.is_empty()),
            Some(_) => Err(shape(path, "base64 bytes")),
        },
        "int" => match input {
            None => scalar(Go::Int(0), true),
            Some(Value::Number(n)) => {
                // Go's integer fields are at most int64 here: 2^63 and above (what an int64 near
                // its limit becomes after a float64 round trip) does not decode.
                let i = n.as_i64().ok_or_else(|| shape(path, "an integer"))?;
                scalar(Go::Int(i), i == 0)
            }
            Some(_) => Err(shape(path, "an integer")),
        },
        "float" => match input {
            None => scalar(Go::Float(0.0), true),
            Some(Value::Number(n)) => {
                let f = n.as_f64().ok_or_else(|| shape(path, "a number"))?;
                scalar(Go::Float(f), f == 0.0)
            }
            Some(_) => Err(shape(path, "a number")),
        },
        "bool" => match input {
            None => scalar(Go::Bool(false), true),
            Some(Value::Bool(b)) => scalar(Go::Bool(*b), !*b),
            Some(_) => Err(shape(path, "a boolean")),
        },
        "any" | "!raw" => Ok(Encoded {
            value: input.cloned().map_or(Go::Null, Go::Json),
            empty: input.is_none(),
            zero: input.is_none(),
        }),
        "!quantity" => {
            let text = match input {
                None => "0".to_string(),
                Some(Value::String(s)) => s.clone(),
                Some(Value::Number(n)) => n.to_string(),
                Some(_) => return Err(shape(path, "a quantity")),
            };
            let canonical = quantity::canonical(&text).map_err(|source| GoJsonError::Quantity {
                path: path.into(),
                source,
            })?;
            // A struct: omitempty never drops it.
            Ok(Encoded {
                zero: input.is_none(),
                value: Go::Str(canonical),
                empty: false,
            })
        }
        "!intorstring" => match input {
            None => Ok(Encoded {
                value: Go::Int(0),
                empty: false,
                zero: true,
            }),
            Some(Value::Number(n)) => Ok(Encoded {
                value: n
                    .as_i64()
                    .map_or_else(|| Go::Float(n.as_f64().unwrap_or_default()), Go::Int),
                empty: false,
                zero: false,
            }),
            Some(Value::String(s)) => Ok(Encoded {
                value: Go::Str(s.clone()),
                empty: false,
                zero: false,
            }),
            Some(_) => Err(shape(path, "an integer or a string")),
        },
        "!time" | "!microtime" | "!duration" => match input {
            None => Ok(Encoded {
                value: if ty == "!duration" {
                    Go::Str("0s".into())
                } else {
                    Go::Null
                },
                empty: false,
                zero: true,
            }),
            Some(Value::String(s)) => Ok(Encoded {
                value: Go::Str(s.clone()),
                empty: false,
                zero: false,
            }),
            Some(_) => Err(shape(path, "a time string")),
        },
        name => {
            let fields = GO_TYPES
                .get(name)
                .ok_or_else(|| GoJsonError::UnknownType(name.to_string()))?;
            let object = match input {
                None => None,
                Some(Value::Object(o)) => Some(o),
                Some(_) => return Err(shape(path, "an object")),
            };
            let mut out = Vec::with_capacity(fields.len());
            let mut all_zero = true;
            for field in fields {
                let child = object.and_then(|o| o.get(&field.name));
                let encoded = encode(child, &field.ty, &format!("{path}.{}", field.name))?;
                all_zero &= encoded.zero;
                if (field.omitempty && encoded.empty) || (field.omitzero && encoded.zero) {
                    continue;
                }
                out.push((field.name.clone(), encoded.value));
            }
            Ok(Encoded {
                value: Go::Struct(out),
                empty: false,
                zero: all_zero,
            })
        }
    }
}

/// Numbers come back from Go's second pass through `map[string]interface{}` as float64.
fn go_number(f: f64) -> Value {
    serde_json::Number::from_f64(f)
        .map(Value::Number)
        .unwrap_or(Value::Null)
}

/// Compact JSON exactly as Go's `json.Marshal` writes a `map[string]interface{}`: keys sorted
/// bytewise, `<`, `>`, `&`, U+2028 and U+2029 escaped, numbers in float64's shortest form.
pub fn marshal(value: &Value) -> String {
    let mut out = String::new();
    write_value(&mut out, value);
    out
}

fn write_value(out: &mut String, value: &Value) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => write_number(out, n.as_f64().unwrap_or_default()),
        Value::String(s) => write_string(out, s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(out, item);
            }
            out.push(']');
        }
        Value::Object(entries) => {
            let mut keys: Vec<&String> = entries.keys().collect();
            keys.sort_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(out, key);
                out.push(':');
                write_value(out, &entries[key]);
            }
            out.push('}');
        }
    }
}

/// Go's float64 encoding: shortest round-trip digits, plain below 1e21, exponent form above.
fn write_number(out: &mut String, f: f64) {
    let abs = f.abs();
    if abs != 0.0 && !(1e-6..1e21).contains(&abs) {
        // Go: 'e' format with an explicit exponent sign and no padding (1e+21, 1e-7).
        let s = format!("{f:e}");
        let (mantissa, exp) = s.split_once('e').unwrap_or((&s, "0"));
        let exp: i32 = exp.parse().unwrap_or(0);
        let sign = if exp < 0 { '-' } else { '+' };
        out.push_str(&format!("{mantissa}e{sign}{}", exp.abs()));
    } else {
        out.push_str(&format!("{f}"));
    }
}

fn write_string(out: &mut String, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' | '\0'..='\u{1f}' => {
                let code = c as u32;
                out.push_str("\\u");
                for shift in [12, 8, 4, 0] {
                    out.push(HEX[((code >> shift) & 0xf) as usize] as char);
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn go_marshal_sorts_keys_and_escapes_html() {
        let v = json!({"b": "<a&b>", "a": [1, 2.5, null, true], "c": "\u{2028}\u{1}\n"});
        assert_eq!(
            marshal(&v),
            r#"{"a":[1,2.5,null,true],"b":"\u003ca\u0026b\u003e","c":"\u2028\u0001\n"}"#
        );
    }

    #[test]
    fn large_integers_lose_precision_like_float64() {
        assert_eq!(
            marshal(&go_number(9_007_199_254_740_993_i64 as f64)),
            "9007199254740992"
        );
        assert_eq!(
            marshal(&json!(9_223_372_036_854_775_807_i64)),
            "9223372036854776000"
        );
        assert_eq!(
            marshal(&json!([1e21, 0.000001, 1e-7, 123456789.125])),
            "[1e+21,0.000001,1e-7,123456789.125]"
        );
    }

    #[test]
    fn structs_fill_non_omitempty_zero_values_and_drop_empty_ones() {
        let container =
            json!({"name": "c", "image": "x", "args": [], "unknown": 1, "resources": null});
        let out = normalize(Some(&container), "k8s.io/api/core/v1.Container").unwrap();
        // resources is a struct (never omitted), args is empty (omitempty), unknown is dropped.
        assert_eq!(out, json!({"name": "c", "image": "x", "resources": {}}));
    }

    #[test]
    fn pod_template_gets_metadata_and_null_containers_like_go() {
        let out = normalize(Some(&json!({})), "k8s.io/api/core/v1.PodTemplateSpec").unwrap();
        assert_eq!(out, json!({"metadata": {}, "spec": {"containers": null}}));
    }

    #[test]
    fn wrong_shapes_are_errors_not_panics() {
        let err = normalize(
            Some(&json!({"containers": "nope"})),
            "k8s.io/api/core/v1.PodSpec",
        )
        .unwrap_err();
        assert_eq!(
            err,
            GoJsonError::Shape {
                path: ".containers".into(),
                expected: "an array".into()
            }
        );
    }
}
