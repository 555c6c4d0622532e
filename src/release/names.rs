//! Names of what a release creates beside the user's LWS, shared by the Rollout and
//! BatchRelease controllers.
//!
//! The canary LWS: `<stable>-canary-<revision key>`, derived only from the stable LWS's name and the
//! revision key of the template being released. A restarted manager computes the same name, so
//! the canary is never created twice (Kruise uses `generateName` plus an in-memory expectation,
//! which a crash forgets). The revision in the name means a third template mid-release gets a
//! new canary that can never be mistaken for, or collide with, the one still being deleted,
//! and a canary Service selecting `leaderworkerset.sigs.k8s.io/name` can never pick leaders of
//! a different revision. Length: the StatefulSet controller labels pods
//! `controller-revision-hash: <lws>-<group>-<hash ≤10>` (≤ 63 characters), so a name of at
//! most 47 characters is safe up to group index 9999; a longer stable name is cut and a short
//! hash of the full name keeps two long names apart.

/// Label on the canary LWS: the stable workload's name (Kruise's key; it says "deployment"
/// because Kruise's canary workloads were Deployments).
pub const CANARY_LABEL: &str = "rollouts.kruise.io/canary-deployment";
/// Kruise's annotation on a Rollout (`"true"`) asking a reverted template to roll back step by
/// step instead of at once (partition style without `trafficRoutings`); the Rollout copies it
/// to its BatchRelease while rolling back.
pub const ROLLBACK_IN_BATCH: &str = "rollouts.kruise.io/rollback-in-batch";

/// A BatchRelease's `status.phase` values (the BatchRelease controller writes them, the Rollout
/// waits for `COMPLETED` before it deletes the BatchRelease).
pub mod batch_release_phase {
    /// Not started.
    pub const PREPARING: &str = "Preparing";
    /// Running batches.
    pub const PROGRESSING: &str = "Progressing";
    /// `batchPartition` is null (or the workload is gone): finishing.
    pub const FINALIZING: &str = "Finalizing";
    /// Done.
    pub const COMPLETED: &str = "Completed";
}

/// Longest canary LWS name: 63 − len("-<group ≤ 9999>") − len("-<hash ≤ 10>").
pub const MAX_NAME: usize = 47;
/// Longest revision key (32-bit FNV in decimal, safe-encoded).
const MAX_REVISION: usize = 10;

/// The canary LWS's name for a stable LWS and the revision key being released.
pub fn canary_name(stable: &str, revision: &str) -> String {
    let revision: String = revision.chars().take(MAX_REVISION).collect();
    let suffix = format!("-canary-{revision}");
    if stable.len() + suffix.len() <= MAX_NAME {
        return format!("{stable}{suffix}");
    }
    let hash = short_hash(stable);
    let keep = MAX_NAME - suffix.len() - 1 - hash.len();
    let prefix = stable
        .get(..keep)
        .unwrap_or(stable)
        .trim_end_matches(['-', '.']);
    format!("{prefix}-{hash}{suffix}")
}

/// 6 characters of FNV-1a over the name, in the LWS revision alphabet (no vowels, no 0/1/3).
fn short_hash(name: &str) -> String {
    const ALPHANUMS: &[u8; 27] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut hash: u32 = 0x811c_9dc5;
    for byte in name.as_bytes() {
        hash ^= u32::from(*byte);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    (0..6)
        .map(|i| ALPHANUMS[(hash >> (i * 5)) as usize % ALPHANUMS.len()] as char)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_deterministic_length_safe_and_distinct() {
        assert_eq!(canary_name("vllm", "5d7f9c"), "vllm-canary-5d7f9c");
        let long = "a".repeat(50);
        let other = format!("{}b", "a".repeat(49));
        let a = canary_name(&long, "bcdfghjklm");
        let b = canary_name(&other, "bcdfghjklm");
        assert_eq!(a, canary_name(&long, "bcdfghjklm"), "deterministic");
        assert_ne!(a, b, "two long names that share a prefix stay apart");
        for name in [&a, &b] {
            assert!(name.len() <= MAX_NAME, "{name} is {} long", name.len());
            assert!(name.ends_with("-canary-bcdfghjklm"), "{name}");
            assert!(name.starts_with('a'));
        }
        // A cut that lands on a dash leaves no double dash.
        let dashed = format!("{}-{}", "a".repeat(21), "b".repeat(30));
        assert!(!canary_name(&dashed, "x").contains("--"));
        // Another revision, another canary.
        assert_ne!(canary_name("vllm", "a1"), canary_name("vllm", "a2"));
    }
}
