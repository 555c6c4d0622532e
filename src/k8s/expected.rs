//! Creations the caches have not shown yet (kube-controller-manager's "expectations", reduced
//! to names). Our own create of an object reaches our cache a moment later, through the watch;
//! a reconcile started by another event in between plans the same create again, and the API
//! server answers 409. For a worker StatefulSet that is also one more fresh read of its leader.
//! Bursts of new groups make this common.
//!
//! Memory only as a shortcut, never for a decision: an entry lasts until the cache shows an
//! object of that name or [`PATIENCE`] has passed, whichever comes first, and a plan that skips
//! a create for it looks again within that time, so a watch event that never comes delays a
//! create by at most that much. A restart forgets everything and costs at most one 409 again.

use std::{
    collections::HashMap,
    sync::Mutex,
    time::{Duration, Instant},
};

/// How long a create we made holds back planning the same create.
pub const PATIENCE: Duration = Duration::from_secs(2);

/// Objects we created, by namespace and name, with when.
#[derive(Debug, Default)]
pub struct Expected {
    created: Mutex<HashMap<(String, String), Instant>>,
}

impl Expected {
    /// We created `ns/name` at `now`. Expired entries go at the same time, so names no
    /// reconcile asks about again (an LWS deleted meanwhile) do not pile up.
    pub fn created(&self, ns: &str, name: &str, now: Instant) {
        let mut created = self.lock();
        created.retain(|_, at| now.saturating_duration_since(*at) < PATIENCE);
        created.insert(key(ns, name), now);
    }

    /// We deleted `ns/name` again: nothing to wait for.
    pub fn forget(&self, ns: &str, name: &str) {
        self.lock().remove(&key(ns, name));
    }

    /// Whether a create of `ns/name` is still on its way to the cache: created less than
    /// [`PATIENCE`] before `now` and not `cached` yet. An entry the cache shows, or an
    /// expired one, is dropped.
    pub fn pending(&self, ns: &str, name: &str, cached: bool, now: Instant) -> bool {
        let mut created = self.lock();
        let key = key(ns, name);
        let pending = created
            .get(&key)
            .is_some_and(|at| !cached && now.saturating_duration_since(*at) < PATIENCE);
        if !pending {
            created.remove(&key);
        }
        pending
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), Instant>> {
        self.created.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn key(ns: &str, name: &str) -> (String, String) {
    (ns.to_string(), name.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_create_is_pending_until_cached_or_patience_runs_out() {
        let expected = Expected::default();
        let t0 = Instant::now();
        assert!(!expected.pending("ns", "a", false, t0), "never created");

        expected.created("ns", "a", t0);
        assert!(expected.pending("ns", "a", false, t0 + Duration::from_millis(500)));
        assert!(
            !expected.pending("ns", "a", true, t0 + Duration::from_millis(600)),
            "cached"
        );
        assert!(
            !expected.pending("ns", "a", false, t0 + Duration::from_millis(700)),
            "the cached entry is gone: a later deletion is seen as such"
        );

        expected.created("ns", "b", t0);
        assert!(
            !expected.pending("ns", "b", false, t0 + PATIENCE),
            "expired"
        );

        expected.created("ns", "c", t0);
        expected.forget("ns", "c");
        assert!(!expected.pending("ns", "c", false, t0));

        expected.created("ns", "d", t0);
        expected.created("ns", "e", t0 + PATIENCE);
        assert_eq!(
            expected.lock().len(),
            1,
            "the expired entry went with the next create"
        );
    }
}
