//! Labels or annotations as the pod cache keeps them: every key and value packed into one
//! string, in key order. A `BTreeMap<String, String>` costs a 540-byte node and two heap
//! strings per entry; a cached pod has two such maps (a dozen labels, a few annotations), and
//! with a thousand pods they were the largest part of the manager's heap. Packed, a map is two
//! allocations whatever its size, and decoding it from the watch's JSON allocates nothing else.
//!
//! What kube lacks (k8s-openapi 0.28 / kube 4.2.0): a compact label map; delete this when object
//! metadata can be decoded into something smaller than `BTreeMap<String, String>`.

use std::{collections::BTreeMap, fmt};

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, Visitor};

/// Keys and values in one string, sorted by key, each key once.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Pairs {
    /// `key₀ value₀ key₁ value₁ …` without separators.
    text: Box<str>,
    /// Where each key and each value ends in `text`: `[key₀ end, value₀ end, key₁ end, …]`.
    ends: Box<[u32]>,
}

impl Pairs {
    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        let entries = self.ends.len() / 2;
        let (mut low, mut high) = (0, entries);
        while low < high {
            let mid = (low + high) / 2;
            match self.key(mid).cmp(key) {
                std::cmp::Ordering::Less => low = mid + 1,
                std::cmp::Ordering::Greater => high = mid,
                std::cmp::Ordering::Equal => return Some(self.value(mid)),
            }
        }
        None
    }

    /// Whether `key` is there.
    pub fn contains_key(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// Every key and value, in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> + '_ {
        (0..self.len()).map(|i| (self.key(i), self.value(i)))
    }

    /// How many keys.
    pub fn len(&self) -> usize {
        self.ends.len() / 2
    }

    /// No keys at all.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// A copy with `key` set to `value`.
    pub fn with(&self, key: &str, value: &str) -> Self {
        self.iter()
            .filter(|(k, _)| *k != key)
            .chain([(key, value)])
            .collect()
    }

    /// The same keys and values as a map (for code that builds objects from them).
    pub fn to_map(&self) -> BTreeMap<String, String> {
        self.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn start(&self, slot: usize) -> usize {
        if slot == 0 {
            0
        } else {
            self.ends[slot - 1] as usize
        }
    }

    fn key(&self, entry: usize) -> &str {
        &self.text[self.start(2 * entry)..self.ends[2 * entry] as usize]
    }

    fn value(&self, entry: usize) -> &str {
        &self.text[self.start(2 * entry + 1)..self.ends[2 * entry + 1] as usize]
    }
}

/// Collects pairs in the order they come, then puts them in key order (a later key wins, as
/// in a JSON object decoded into a map).
#[derive(Default)]
struct Packer {
    text: String,
    ends: Vec<u32>,
    sorted: bool,
}

impl Packer {
    fn new() -> Self {
        Self {
            sorted: true,
            ..Default::default()
        }
    }

    fn push(&mut self, key: &str, value: &str) {
        self.text.push_str(key);
        self.key_done();
        self.text.push_str(value);
        self.end();
    }

    /// Ends the key just appended, noting whether it still follows the key before it.
    fn key_done(&mut self) {
        let n = self.ends.len();
        if n >= 2 {
            let previous = if n == 2 { 0 } else { self.ends[n - 3] as usize };
            let start = self.ends[n - 1] as usize;
            if self.text[previous..self.ends[n - 2] as usize] >= self.text[start..] {
                self.sorted = false;
            }
        }
        self.end();
    }

    fn end(&mut self) {
        // Object metadata is capped far below 4 GiB by the API server (256 KiB for all
        // annotations together), so a u32 offset cannot overflow on a real object.
        self.ends
            .push(u32::try_from(self.text.len()).unwrap_or(u32::MAX));
    }

    fn finish(self) -> Pairs {
        let packed = Pairs {
            text: self.text.into_boxed_str(),
            ends: self.ends.into_boxed_slice(),
        };
        if self.sorted {
            return packed;
        }
        let map: BTreeMap<&str, &str> = packed.iter().collect();
        map.into_iter().collect()
    }
}

impl<K: AsRef<str>, V: AsRef<str>> FromIterator<(K, V)> for Pairs {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        let mut packer = Packer::new();
        for (k, v) in iter {
            packer.push(k.as_ref(), v.as_ref());
        }
        packer.finish()
    }
}

impl From<&BTreeMap<String, String>> for Pairs {
    fn from(map: &BTreeMap<String, String>) -> Self {
        map.iter().collect()
    }
}

impl fmt::Debug for Pairs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

/// Decodes a JSON object of strings (or `null`, as no keys) straight into the packed string:
/// each key and value is appended as the parser yields it, borrowed or unescaped, never held
/// in a `String` of its own.
impl<'de> de::Deserialize<'de> for Pairs {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_option(PairsVisitor)
    }
}

struct PairsVisitor;

impl<'de> Visitor<'de> for PairsVisitor {
    type Value = Pairs;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a map of strings to strings")
    }

    fn visit_none<E: de::Error>(self) -> Result<Pairs, E> {
        Ok(Pairs::default())
    }

    fn visit_unit<E: de::Error>(self) -> Result<Pairs, E> {
        Ok(Pairs::default())
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Pairs, D::Error> {
        deserializer.deserialize_map(self)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Pairs, A::Error> {
        let mut packer = Packer::new();
        while map.next_key_seed(AppendTo(&mut packer.text))?.is_some() {
            packer.key_done();
            map.next_value_seed(AppendTo(&mut packer.text))?;
            packer.end();
        }
        Ok(packer.finish())
    }
}

/// Appends one JSON string to a buffer.
struct AppendTo<'a>(&'a mut String);

impl<'de> DeserializeSeed<'de> for AppendTo<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for AppendTo<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string")
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<(), E> {
        self.0.push_str(s);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(entries: &[(&str, &str)]) -> BTreeMap<String, String> {
        entries
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn reads_back_what_the_map_holds() {
        let labels = map(&[
            ("leaderworkerset.sigs.k8s.io/name", "vllm"),
            ("leaderworkerset.sigs.k8s.io/group-index", "3"),
            ("app", ""),
            ("", "empty key"),
        ]);
        let pairs = Pairs::from(&labels);
        assert_eq!(pairs.len(), 4);
        for (k, v) in &labels {
            assert_eq!(pairs.get(k), Some(v.as_str()), "{k}");
        }
        assert_eq!(pairs.get("leaderworkerset.sigs.k8s.io/worker-index"), None);
        assert_eq!(pairs.get("zzz"), None);
        assert!(pairs.contains_key("app"));
        assert_eq!(pairs.to_map(), labels);
        let changed = pairs.with("app", "x").with("new", "y");
        assert_eq!(
            (changed.get("app"), changed.get("new")),
            (Some("x"), Some("y"))
        );
        assert_eq!(changed.len(), 5);
        assert_eq!(pairs.get("app"), Some(""), "the original is unchanged");
        assert_eq!(
            pairs.iter().map(|(k, _)| k).collect::<Vec<_>>(),
            [
                "",
                "app",
                "leaderworkerset.sigs.k8s.io/group-index",
                "leaderworkerset.sigs.k8s.io/name"
            ]
        );
    }

    #[test]
    fn decodes_json_as_a_map_would() {
        let cases = [
            r#"{"b": "2", "a": "1", "c": "3"}"#,
            r#"{"a": "1", "b": "2", "c": "3"}"#,
            r#"{"k\"ey": "va\nlue", "ü": "ß", "a": "x", "a": "later wins"}"#,
            r#"{}"#,
            r#"{"only": ""}"#,
        ];
        for json in cases {
            let as_map: BTreeMap<String, String> = serde_json::from_str(json).unwrap();
            let pairs: Pairs = serde_json::from_str(json).unwrap();
            assert_eq!(pairs.to_map(), as_map, "{json}");
            assert_eq!(
                pairs,
                Pairs::from(&as_map),
                "{json}: one packed form per map"
            );
        }
        let none: Pairs = serde_json::from_str("null").unwrap();
        assert!(none.is_empty());
        assert!(serde_json::from_str::<Pairs>(r#"{"a": 1}"#).is_err());
        assert!(serde_json::from_str::<Pairs>(r#"["a"]"#).is_err());
    }

    #[test]
    fn empty_pairs_allocate_nothing_and_equal_each_other() {
        let empty: Pairs = serde_json::from_str("{}").unwrap();
        assert_eq!(empty, Pairs::default());
        assert!(empty.is_empty());
        assert_eq!(empty.get(""), None);
        assert_eq!(format!("{empty:?}"), "{}");
    }
}
