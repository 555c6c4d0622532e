//! Answers a controller remembers per object uid between reconciles, as a shortcut only: each
//! is stored with the exact versions it was computed from and reused only while they hold,
//! so a remembered answer is what computing it again would give, and a restarted controller
//! simply computes each one again. Nothing here decides; the plans say what may be reused.

use std::{collections::HashMap, sync::Mutex};

/// More remembered objects than this (deleted ones are never forgotten one by one) and the
/// memo starts again empty.
const LIMIT: usize = 4096;

/// One value per object uid.
pub struct PerUid<V> {
    entries: Mutex<HashMap<String, V>>,
}

impl<V> Default for PerUid<V> {
    fn default() -> Self {
        Self {
            entries: Mutex::new(HashMap::new()),
        }
    }
}

impl<V: Clone> PerUid<V> {
    /// The value remembered for `uid`.
    pub fn get(&self, uid: &str) -> Option<V> {
        self.lock().get(uid).cloned()
    }

    /// Remembers `value` for `uid`, in place of what was.
    pub fn put(&self, uid: &str, value: V) {
        let mut entries = self.lock();
        if entries.len() >= LIMIT && !entries.contains_key(uid) {
            entries.clear();
        }
        entries.insert(uid.to_string(), value);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, V>> {
        // A panic elsewhere cannot leave a half-written entry: each is one insert.
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembers_the_last_value_per_uid_and_starts_again_when_full() {
        let memo = PerUid::default();
        assert_eq!(memo.get("a"), None);
        memo.put("a", 1);
        memo.put("a", 2);
        assert_eq!(memo.get("a"), Some(2));
        for i in 0..LIMIT {
            memo.put(&format!("u{i}"), 0);
        }
        assert_eq!(memo.get("a"), None, "a full memo starts again empty");
        assert_eq!(memo.get(&format!("u{}", LIMIT - 1)), Some(0));
    }
}
