//! Our own writes the cache has not shown yet. A reconcile started by another watch event (a
//! canary's status, the BatchRelease) a moment after a write reads the written object from a
//! cache that may still hold the version the write replaced; planning from it repeats the last
//! decision and sends it again — a 409 for the Rollout's status (it carries a resourceVersion
//! precondition), a patch that changes nothing elsewhere, each a request the benchmark counted.
//! Recording the resourceVersion a write replaced lets the reconcile wait for the watch event
//! of that write instead, which starts the next reconcile by itself.
//!
//! Memory only as a shortcut, never for a decision: a lost entry (a restart) costs at most one
//! repeated write, and an entry is trusted for `PATIENCE` only, so a watch event that never
//! comes delays a reconcile by that much at worst.

use std::{
    collections::HashMap,
    sync::Mutex,
    time::{Duration, Instant},
};

/// The key `Written` records an object under.
pub fn key<K: kube::Resource<DynamicType = ()>>(namespace: &str, name: &str) -> String {
    format!("{}/{namespace}/{name}", K::kind(&()))
}

/// How long a recorded write holds reconciles of its object back at most.
pub const PATIENCE: Duration = Duration::from_secs(2);

/// The resourceVersion each of our recent writes replaced, per object key.
#[derive(Default)]
pub struct Written {
    replaced: Mutex<HashMap<String, (String, Instant)>>,
}

impl Written {
    /// A write to `key` turned resourceVersion `read` (empty: the cache had no object) into
    /// `written`. A write that changed nothing (same version) is not recorded: no watch event
    /// would follow it.
    pub fn record(&self, key: &str, read: &str, written: Option<&str>) {
        if written.is_some_and(|w| w == read) {
            return;
        }
        self.lock()
            .insert(key.to_string(), (read.to_string(), Instant::now()));
    }

    /// How long to wait before planning from the cached version `cached` of `key` (empty: not
    /// cached): `Some` while it is still the version our last write replaced.
    pub fn stale(&self, key: &str, cached: &str) -> Option<Duration> {
        let mut map = self.lock();
        let (read, at) = map.get(key)?;
        let left = PATIENCE.checked_sub(at.elapsed());
        if read == cached
            && let Some(left) = left
        {
            return Some(left);
        }
        map.remove(key);
        None
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (String, Instant)>> {
        // A poisoned map only loses shortcuts.
        self.replaced
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cache_holding_the_replaced_version_waits_until_it_moves_on() {
        let w = Written::default();
        w.record("ns/a", "10", Some("11"));
        assert!(
            w.stale("ns/a", "10").is_some(),
            "still the replaced version"
        );
        assert!(w.stale("ns/a", "11").is_none(), "our write arrived");
        assert!(
            w.stale("ns/a", "10").is_none(),
            "the entry is gone once seen"
        );
        // Created: the cache had nothing.
        w.record("ns/b", "", Some("5"));
        assert!(w.stale("ns/b", "").is_some());
        assert!(w.stale("ns/b", "5").is_none());
        // A write that changed nothing is never waited for.
        w.record("ns/c", "7", Some("7"));
        assert!(w.stale("ns/c", "7").is_none());
        assert!(w.stale("ns/unknown", "1").is_none());
    }
}
