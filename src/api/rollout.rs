//! `Rollout` (`rollouts.kruise.io/v1beta1`): Kruise Rollout v0.6's API with the same JSON
//! names, so existing Rollout manifests and `kubectl get rollout` output carry over.
//!
//! Phases, step states and finalising steps are plain strings in the schema, as upstream's CRD
//! has them, and enums here ([`Phase`], [`StepState`], [`FinalisingStep`]) that read and write
//! Kruise's exact strings and keep an unknown value visible. Validations that upstream checks in its webhook and CEL can express are
//! CEL rules here.

// `printcolumn(...)` entries repeat keys like `type_`; that is the derive's syntax, not a mistake.
#![allow(clippy::duplicated_attributes)]

use gateway_api::apis::standard::httproutes::{
    HttpRouteRulesFiltersRequestHeaderModifier, HttpRouteRulesMatchesHeaders,
    HttpRouteRulesMatchesPath, HttpRouteRulesMatchesQueryParams,
};
use k8s_openapi::apimachinery::pkg::{apis::meta::v1::Time, util::intstr::IntOrString};
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// API group of Rollout and BatchRelease.
pub const GROUP: &str = "rollouts.kruise.io";

/// CEL: step replicas never decrease (compared, as upstream, only when two neighbouring steps
/// are both integers or both percentages). Index-aware `all(i, s, …)` needs Kubernetes ≥ 1.33.
const NON_DECREASING_RULE: &str = "self.steps.all(i, s, i == 0 || !has(s.replicas) || \
    !has(self.steps[i - 1].replicas) || \
    (type(s.replicas) == int && type(self.steps[i - 1].replicas) == int ? \
      s.replicas >= self.steps[i - 1].replicas : \
     type(s.replicas) == string && type(self.steps[i - 1].replicas) == string ? \
      int(string(s.replicas).replace('%', '')) >= int(string(self.steps[i - 1].replicas).replace('%', '')) : true))";

/// CEL: a percentage string between 0% and 100%.
/// A regex rather than parsing keeps the rule cheap enough for the CRD cost budget.
const PERCENT_RULE: &str = "self.matches('^(100|[1-9]?[0-9])%$')";

/// A progressive release plan for one workload.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "rollouts.kruise.io",
    version = "v1beta1",
    kind = "Rollout",
    plural = "rollouts",
    namespaced,
    status = "RolloutStatus",
    derive = "Default",
    derive = "PartialEq",
    printcolumn(
        name = "STATUS",
        type_ = "string",
        json_path = ".status.phase",
        description = "The rollout status phase"
    ),
    printcolumn(
        name = "CANARY_STEP",
        type_ = "integer",
        json_path = ".status.currentStepIndex",
        description = "The rollout canary status step"
    ),
    printcolumn(
        name = "CANARY_STATE",
        type_ = "string",
        json_path = ".status.currentStepState",
        description = "The rollout canary status step state"
    ),
    printcolumn(
        name = "MESSAGE",
        type_ = "string",
        json_path = ".status.message",
        description = "The rollout canary status message"
    ),
    printcolumn(
        name = "AGE",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct RolloutSpec {
    /// The workload this Rollout releases, in the Rollout's namespace.
    #[x_kube(validation = Rule::new(
        "(self.apiVersion == 'leaderworkerset.x-k8s.io/v1' && self.kind == 'LeaderWorkerSet') || (self.apiVersion == 'disaggregatedset.x-k8s.io/v1' && self.kind == 'DisaggregatedSet')"
    ).message("workloadRef must be a leaderworkerset.x-k8s.io/v1 LeaderWorkerSet or a disaggregatedset.x-k8s.io/v1 DisaggregatedSet; other workload kinds are not supported"))]
    pub workload_ref: ObjectRef,
    /// How the release proceeds.
    pub strategy: RolloutStrategy,
    /// Turns the Rollout off: the workload updates as if there were no Rollout.
    #[serde(default)]
    #[schemars(extend("default" = false))]
    pub disabled: bool,
}

/// A reference to an object in the same namespace.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ObjectRef {
    /// API version of the referent, e.g. `leaderworkerset.x-k8s.io/v1`.
    pub api_version: String,
    /// Kind of the referent, e.g. `LeaderWorkerSet`.
    pub kind: String,
    /// Name of the referent.
    pub name: String,
}

/// The LeaderWorkerSet's `apiVersion`.
pub const LWS_API_VERSION: &str = "leaderworkerset.x-k8s.io/v1";
/// The LeaderWorkerSet's `kind`.
pub const LWS_KIND: &str = "LeaderWorkerSet";
/// The DisaggregatedSet's `apiVersion`: a prefill/decode pair released as one.
pub const DISAGGREGATEDSET_API_VERSION: &str = "disaggregatedset.x-k8s.io/v1";
/// The DisaggregatedSet's `kind`.
pub const DISAGGREGATEDSET_KIND: &str = "DisaggregatedSet";

impl ObjectRef {
    /// Whether this names a LeaderWorkerSet. A Rollout whose `workloadRef` names anything else
    /// is not ours: it was stored under Kruise Rollout's CRD (ours refuses it at admission) and
    /// belongs to another controller, so nothing of ours reads or writes it.
    pub fn is_leader_worker_set(&self) -> bool {
        self.api_version == LWS_API_VERSION && self.kind == LWS_KIND
    }

    /// Whether this names a DisaggregatedSet.
    pub fn is_disaggregated_set(&self) -> bool {
        self.api_version == DISAGGREGATEDSET_API_VERSION && self.kind == DISAGGREGATEDSET_KIND
    }
}

/// Exactly one of `canary` and `blueGreen`.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.canary) != has(self.blueGreen)")
    .message("exactly one of strategy.canary and strategy.blueGreen must be set"))]
pub struct RolloutStrategy {
    /// Stops the step machine where it is until set back to false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub paused: bool,
    /// Canary (or partition) release.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canary: Option<CanaryStrategy>,
    /// Blue-green release.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blue_green: Option<BlueGreenStrategy>,
}

/// Canary release: new pods in batches, traffic shifted step by step.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new(
    "self.steps.all(s, !has(s.traffic) || s.traffic != '0%')"
).message("canary step traffic must be greater than 0% (only blue-green steps may send 0%)"))]
#[x_kube(validation = Rule::new(NON_DECREASING_RULE).message("steps[].replicas must not decrease from one step to the next"))]
pub struct CanaryStrategy {
    /// The steps, in order; each one's `replicas` is cumulative.
    // maxItems rather than CEL: the API server skips CEL rules once a schema check failed,
    // and its "must have at most 50 items" is clear on its own.
    #[schemars(length(max = 50))]
    #[x_kube(validation = Rule::new("self.size() >= 1").message("canary.steps must have at least one step"))]
    pub steps: Vec<CanaryStep>,
    /// Where traffic is shifted (at most one entry).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1))]
    pub traffic_routings: Option<Vec<TrafficRoutingRef>>,
    /// Updated pods that may be not ready before a batch counts as ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_threshold: Option<IntOrString>,
    /// Labels and annotations added to the canary workload's pod template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub patch_pod_template_metadata: Option<PatchPodTemplateMetadata>,
    /// Create a separate canary workload instead of partitioning the stable one.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub enable_extra_workload_for_canary: bool,
    /// Name of a v1alpha1 TrafficRouting (kept for compatibility).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traffic_routing_ref: Option<String>,
    /// Do not create `<service>-canary`; use the stable Service for both sides.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub disable_generate_canary_service: bool,
}

/// Blue-green release: the new version at full size beside the old, traffic switched over.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new(NON_DECREASING_RULE).message("steps[].replicas must not decrease from one step to the next"))]
pub struct BlueGreenStrategy {
    /// The steps, in order.
    // maxItems rather than CEL: the API server skips CEL rules once a schema check failed,
    // and its "must have at most 50 items" is clear on its own.
    #[schemars(length(max = 50))]
    #[x_kube(validation = Rule::new("self.size() >= 1").message("blueGreen.steps must have at least one step"))]
    pub steps: Vec<CanaryStep>,
    /// Where traffic is shifted (at most one entry).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1))]
    pub traffic_routings: Option<Vec<TrafficRoutingRef>>,
    /// Passed to the BatchRelease; unused by blue-green batches, as upstream.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_threshold: Option<IntOrString>,
    /// Name of a v1alpha1 TrafficRouting (kept for compatibility).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traffic_routing_ref: Option<String>,
    /// Do not create `<service>-canary`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub disable_generate_canary_service: bool,
    /// Not a blue-green field (Kruise's blue-green has none): known to the schema only so that
    /// admission refuses it with a message instead of pruning it silently.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_extra_workload_for_canary: Option<bool>,
    /// Not a blue-green field: refused at admission (see `enableExtraWorkloadForCanary`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub patch_pod_template_metadata: Option<PatchPodTemplateMetadata>,
}

/// One step: how many new pods (groups, for an LWS), how much traffic, and the pause after.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CanaryStep {
    /// Share of traffic for the new version, e.g. `"5%"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 4))]
    #[x_kube(validation = Rule::new(PERCENT_RULE).message("traffic must be a percentage from 0% to 100%, like '5%'"))]
    pub traffic: Option<String>,
    /// Header changes for requests routed to the new version: a `RequestHeaderModifier`
    /// filter on the canary's HTTPRoute rules (Gateway API only; the nginx canary Ingress
    /// cannot modify headers, so the Rollout webhook refuses it there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_header_modifier: Option<HttpRouteRulesFiltersRequestHeaderModifier>,
    /// Requests matching any of these go to the new version; takes precedence over `traffic`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 16))]
    pub matches: Option<Vec<HttpRouteMatch>>,
    /// New replicas after this step: a number or a percentage of the workload's replicas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("maxLength" = 4))]
    #[x_kube(validation = Rule::new(
        "type(self) == int ? self > 0 : string(self).matches('^(100|[1-9][0-9]?)%$')"
    ).message("replicas must be an integer greater than 0 or a percentage from 1% to 100%"))]
    pub replicas: Option<IntOrString>,
    /// Pause after the step: absent duration waits for approval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pause: Option<RolloutPause>,
}

/// A match on path, headers and query parameters (Gateway API types).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HttpRouteMatch {
    /// Path match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<HttpRouteRulesMatchesPath>,
    /// Header matches, AND-ed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 16))]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["name".into()]))]
    pub headers: Option<Vec<HttpRouteRulesMatchesHeaders>>,
    /// Query parameter matches, AND-ed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 16))]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["name".into()]))]
    pub query_params: Option<Vec<HttpRouteRulesMatchesQueryParams>>,
}

/// The pause after a step.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RolloutPause {
    /// Seconds to wait; absent means wait for manual approval, 0 means go on at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self >= 0").message("pause.duration must not be negative"))]
    pub duration: Option<i32>,
}

/// Labels and annotations for the canary pod template.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PatchPodTemplateMetadata {
    /// Annotations to add.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<String, String>>,
    /// Labels to add.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<BTreeMap<String, String>>,
}

/// The Service, and the Ingress, HTTPRoute or custom objects in front of it.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.ingress) || has(self.gateway) || has(self.customNetworkRefs)")
    .message("a trafficRoutings entry needs one of ingress, gateway or customNetworkRefs"))]
pub struct TrafficRoutingRef {
    /// The stable Service that fronts the workload's leaders.
    pub service: String,
    /// Seconds to wait after each traffic change. Defaults to 3.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = 3))]
    #[x_kube(validation = Rule::new("self >= 0").message("gracePeriodSeconds must not be negative"))]
    pub grace_period_seconds: Option<i32>,
    /// An Ingress to weight.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ingress: Option<IngressTrafficRouting>,
    /// A Gateway API HTTPRoute to weight.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway: Option<GatewayTrafficRouting>,
    /// Other objects (Lua providers upstream).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub custom_network_refs: Option<Vec<ObjectRef>>,
}

/// An Ingress used for traffic shifting.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct IngressTrafficRouting {
    /// Ingress controller flavour. Defaults to `nginx`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "nginx"))]
    pub class_type: Option<String>,
    /// Name of the Ingress.
    pub name: String,
}

/// A Gateway API route used for traffic shifting.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct GatewayTrafficRouting {
    /// Name of the HTTPRoute in the Rollout's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_route_name: Option<String>,
}

/// Observed state of a Rollout.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RolloutStatus {
    /// The `metadata.generation` this status was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Progress of a canary or partition release.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canary_status: Option<CanaryStatus>,
    /// Progress of a blue-green release.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blue_green_status: Option<BlueGreenStatus>,
    /// `Progressing`, `Succeeded`, `Terminating`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    pub conditions: Option<Vec<RolloutCondition>>,
    /// `Initial`, `Healthy`, `Progressing`, `Terminating`, `Disabling` or `Disabled`.
    #[serde(default, skip_serializing_if = "Phase::is_unset")]
    pub phase: Phase,
    /// Human-readable state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Mirror of the sub-status step index, for `kubectl get`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_step_index: Option<i32>,
    /// Mirror of the sub-status step state, for `kubectl get`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_step_state: Option<StepState>,
}

/// Status fields shared by canary and blue-green releases.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CommonStatus {
    /// Workload generation observed with the current canary revision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_workload_generation: Option<i64>,
    /// Rollout id of the release.
    #[serde(
        default,
        rename = "observedRolloutID",
        skip_serializing_if = "Option::is_none"
    )]
    pub observed_rollout_id: Option<String>,
    /// The strategy hash this status was computed against.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout_hash: Option<String>,
    /// Revision of the stable workload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stable_revision: Option<String>,
    /// Revision label value that selects the new pods.
    #[serde(default)]
    pub pod_template_hash: String,
    /// 1-based index of the current step.
    #[serde(default)]
    pub current_step_index: i32,
    /// Step to go to next; writable by users to jump, -1 after the last step.
    #[serde(default)]
    pub next_step_index: i32,
    /// The finalising step (`FinalisingStepRouteTrafficToStable`, `ResumeWorkload`, …, `END`);
    /// empty while not finalising.
    #[serde(default)]
    pub finalising_step: FinalisingStep,
    /// `BeforeStepUpgrade`, `StepUpgrade`, `StepTrafficRouting`, `StepMetricsAnalysis`,
    /// `StepPaused`, `StepReady` or `Completed`.
    #[serde(default)]
    pub current_step_state: StepState,
    /// Human-readable state of the step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// When the step state last changed: the basis of pause and grace timers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_update_time: Option<Time>,
}

/// Canary progress.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CanaryStatus {
    /// Fields shared with blue-green.
    #[serde(flatten)]
    pub common: CommonStatus,
    /// Revision of the new template.
    #[serde(default)]
    pub canary_revision: String,
    /// New replicas (groups) that exist.
    #[serde(default)]
    pub canary_replicas: i32,
    /// New replicas (groups) that are ready.
    #[serde(default)]
    pub canary_ready_replicas: i32,
}

/// Blue-green progress.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct BlueGreenStatus {
    /// Fields shared with canary.
    #[serde(flatten)]
    pub common: CommonStatus,
    /// Revision of the new template.
    #[serde(default)]
    pub updated_revision: String,
    /// New replicas (groups) that exist.
    #[serde(default)]
    pub updated_replicas: i32,
    /// New replicas (groups) that are ready.
    #[serde(default)]
    pub updated_ready_replicas: i32,
}

/// A Kruise condition: like metav1.Condition, with `lastUpdateTime` and no generation.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RolloutCondition {
    /// Condition type.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// Last time the condition was written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_update_time: Option<Time>,
    /// Last time the status flipped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,
    /// Machine-readable reason.
    #[serde(default)]
    pub reason: String,
    /// Human-readable message.
    #[serde(default)]
    pub message: String,
}

/// An enum of Kruise's exact strings. Reading never fails: a value this version does not know
/// (hand-edited, or written by another controller) is kept as [`Unknown`](Phase::Unknown) and
/// written back as it was, so one odd status never stops the Rollout watch; the plan handles
/// `Unknown` in an arm of its own, visibly (an Event), never in a catch-all. The empty string
/// is [`Unset`](Phase::Unset) (Kruise's "not set yet"). The CRD keeps the field a plain string.
macro_rules! kruise_strings {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident = $text:literal,)+ }) => {
        $(#[$meta])*
        #[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
        pub enum $name {
            /// The empty string: not set yet.
            #[default]
            Unset,
            $($(#[$vmeta])* $variant,)+
            /// A value this version does not know, kept as it was written.
            Unknown(String),
        }

        impl $name {
            /// Kruise's string.
            pub fn as_str(&self) -> &str {
                match self {
                    Self::Unset => "",
                    $(Self::$variant => $text,)+
                    Self::Unknown(s) => s,
                }
            }

            /// The value a string names (never fails: see [`Self::Unknown`]).
            pub fn parse(s: &str) -> Self {
                match s {
                    "" => Self::Unset,
                    $($text => Self::$variant,)+
                    other => Self::Unknown(other.to_string()),
                }
            }

            /// The empty string (for `skip_serializing_if`).
            pub fn is_unset(&self) -> bool {
                *self == Self::Unset
            }
        }

        impl From<&str> for $name {
            fn from(s: &str) -> Self {
                Self::parse(s)
            }
        }

        /// Compares with Kruise's string exactly (tests and fixtures read so).
        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.as_str() == *other
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                Ok(Self::parse(&String::deserialize(d)?))
            }
        }

        impl schemars::JsonSchema for $name {
            fn inline_schema() -> bool {
                true
            }

            fn schema_name() -> std::borrow::Cow<'static, str> {
                "String".into()
            }

            fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
                <String as schemars::JsonSchema>::json_schema(generator)
            }
        }
    };
}

kruise_strings! {
    /// `status.phase`.
    Phase {
        /// Just created; workload not seen yet.
        Initial = "Initial",
        /// No release in progress.
        Healthy = "Healthy",
        /// A release is in progress.
        Progressing = "Progressing",
        /// Being deleted.
        Terminating = "Terminating",
        /// Being disabled.
        Disabling = "Disabling",
        /// Disabled.
        Disabled = "Disabled",
    }
}

kruise_strings! {
    /// `currentStepState`.
    StepState {
        /// Before the step's pods are upgraded.
        BeforeStepUpgrade = "BeforeStepUpgrade",
        /// Upgrading the step's pods.
        StepUpgrade = "StepUpgrade",
        /// Applying the step's traffic.
        StepTrafficRouting = "StepTrafficRouting",
        /// Metrics analysis (a no-op upstream).
        StepMetricsAnalysis = "StepMetricsAnalysis",
        /// Paused after the step.
        StepPaused = "StepPaused",
        /// Step done.
        StepReady = "StepReady",
        /// All steps done.
        Completed = "Completed",
    }
}

kruise_strings! {
    /// `finalisingStep` (the inconsistent prefixes are upstream's).
    FinalisingStep {
        /// Blue-green: all traffic to the new version.
        RouteTrafficToNew = "FinalisingStepRouteTrafficToNew",
        /// All traffic back to stable.
        RouteTrafficToStable = "FinalisingStepRouteTrafficToStable",
        /// Restore the stable Service's selector.
        RestoreStableService = "RestoreStableService",
        /// Delete the canary Service.
        RemoveCanaryService = "RemoveCanaryService",
        /// Let the workload roll.
        ResumeWorkload = "ResumeWorkload",
        /// Give up control of the workload.
        ReleaseWorkloadControl = "ReleaseWorkloadControl",
        /// Done.
        End = "END",
    }
}
