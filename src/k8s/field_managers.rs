//! Every field manager this manager writes under, in one place. `managedFields` on a user's
//! object then tell which writer of ours owns which field, and the webhook tells a release's
//! own write of an LWS from a person's by its manager.

/// The LWS controller. Upstream's name, so that taking over from the upstream controller
/// re-applies the same managed fields instead of conflicting.
pub const LWS: &str = "lws";

/// The DisaggregatedSet controller.
pub const DISAGGREGATEDSET: &str = "lws-rollout-disaggregatedset";

/// The Rollout controller.
pub const ROLLOUT: &str = "lws-rollout-rollout";

/// The Rollout controller's write that releases a held LWS (a separate name: the LWS webhook
/// lets exactly this writer lift the hold).
pub const RELEASE: &str = "lws-rollout-release";

/// The BatchRelease controller.
pub const BATCHRELEASE: &str = "lws-rollout-batchrelease";

/// The traffic layer's writes to Services, routes and Ingresses during a release.
pub const TRAFFIC: &str = "lws-rollout-traffic";

/// The AnalysisRun controller's status writes.
pub const ANALYSIS: &str = "lws-rollout-analysis";

/// The owner reference written on Kueue's Workloads.
pub const KUEUE: &str = "lws-rollout-kueue";

/// The webhook configurations the manager registers.
pub const WEBHOOK: &str = "lws-rollout-webhook";
