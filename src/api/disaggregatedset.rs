//! `DisaggregatedSet` (`disaggregatedset.x-k8s.io/v1`): upstream LWS v0.10.0's second API — one
//! object whose roles (prefill, decode, …) are each an LWS template, rolled together so the
//! roles never run mismatched revisions, in `slices` independent copies, placed by
//! `placementPolicy`, a role's replicas optionally driven through a
//! [`super::disaggregatedset_role_scaler`]. The same schema as upstream's CRD, field for field.
//!
//! Differences (docs/disaggregatedset.md): what upstream's webhook checks (partition, rollout
//! type, a placement policy's topology key, External roles with more than one slice) are CEL
//! rules here, so a bad set is refused with no webhook running; a set whose role LWS or Service
//! names would be invalid is refused at admission too (upstream creates nothing and retries
//! forever).

use k8s_openapi::{
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta},
};
use kube::{CustomResource, CustomResourceExt, KubeSchema};
use serde::{Deserialize, Serialize};

use super::{leaderworkerset::LeaderWorkerSetSpec, schema};

/// API group of DisaggregatedSet.
pub const GROUP: &str = "disaggregatedset.x-k8s.io";

/// Label on LWSs and Services: the DisaggregatedSet they belong to.
pub const SET_NAME_LABEL: &str = "disaggregatedset.x-k8s.io/name";
/// Label on LWSs and Services: the role (e.g. `prefill`, `decode`).
pub const ROLE_LABEL: &str = "disaggregatedset.x-k8s.io/role";
/// Label on LWSs, their pods and Services: the slice (`0`…`slices-1`). A v0.9 child has none and
/// belongs to slice 0.
pub const SLICE_LABEL: &str = "disaggregatedset.x-k8s.io/slice";
/// Label on LWSs and Services: the revision hash of the set's role templates.
pub const REVISION_LABEL: &str = "disaggregatedset.x-k8s.io/revision";
/// Annotation on an old revision's LWS: its replicas when the rolling update started.
pub const INITIAL_REPLICAS_ANNOTATION: &str = "disaggregatedset.x-k8s.io/initial-replicas";
/// Annotation on a set a Rollout releases: the revision the set ran when the release began (the
/// hold, set at admission; docs/rollout-design.md).
pub const HELD_REVISION_ANNOTATION: &str = "rollouts.kruise.io/stable-revision";
/// Annotation on a held set, written by its BatchRelease: the new revision's groups per role and
/// slice for the current batch, a JSON object of role name to groups.
pub const RELEASE_GROUPS_ANNOTATION: &str = "lws-rollout.x-k8s.io/release-groups";
/// Annotation on a held set, written by its BatchRelease with the release-groups: how the new
/// revision's groups are made room for. Absent (or any other value): beside the held revision,
/// which keeps the roles' replicas (canary and blue-green). [`RELEASE_STYLE_IN_PLACE`]: in place
/// of the held revision's groups, which shrinks by the same groups per role (partition style).
pub const RELEASE_STYLE_ANNOTATION: &str = "lws-rollout.x-k8s.io/release-style";
/// [`RELEASE_STYLE_ANNOTATION`]'s value for partition style: no second copy of the pair.
pub const RELEASE_STYLE_IN_PLACE: &str = "in-place";

/// Desired state of a DisaggregatedSet: at least two roles, each an LWS template.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "disaggregatedset.x-k8s.io",
    version = "v1",
    kind = "DisaggregatedSet",
    plural = "disaggregatedsets",
    namespaced,
    status = "DisaggregatedSetStatus",
    derive = "Default",
    derive = "PartialEq",
    validation = Rule::new(
        "self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')"
    ).message(
        "metadata.name must start with a letter and hold only lowercase letters, digits and '-': it begins the name of every LeaderWorkerSet and Service of the set"
    ),
    validation = Rule::new(
        "self.spec.roles.all(r, size(self.metadata.name) + size(r.name) + size(string((has(self.spec.slices) ? self.spec.slices : 1) - 1)) <= 48)"
    ).message(
        "metadata.name, the highest slice index and each role name together must not exceed 48 characters: a role's Service is named <set>-<slice>-<revision>-<role>-prv, at most 63"
    ),
)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new(
        "self.roles.filter(r, !has(r.scaling) || !has(r.scaling.mode) || r.scaling.mode != 'External').all(r, !has(r.spec.replicas) || r.spec.replicas == 0) || self.roles.filter(r, !has(r.scaling) || !has(r.scaling.mode) || r.scaling.mode != 'External').all(r, has(r.spec.replicas) && r.spec.replicas > 0)"
    ).message("replicas must be zero for all non-External roles or non-zero for all non-External roles"),
    validation = Rule::new(
        "!has(self.slices) || self.slices <= 1 || self.roles.all(r, !has(r.scaling) || !has(r.scaling.mode) || r.scaling.mode != 'External')"
    ).message(
        "spec.slices > 1 is not supported while any role has scaling.mode: External (as upstream: one scaler per role drives one slice)"
    ).field_path(".slices"),
    validation = Rule::new(
        "!has(self.placementPolicy) || !has(self.placementPolicy.type) || self.placementPolicy.type == 'None' || self.roles.all(r, \
           (!has(r.metadata) || !has(r.metadata.annotations) || !('leaderworkerset.sigs.k8s.io/exclusive-topology' in r.metadata.annotations || 'leaderworkerset.sigs.k8s.io/subgroup-exclusive-topology' in r.metadata.annotations)) && \
           (!has(r.spec) || !has(r.spec.leaderWorkerTemplate.workerTemplate.metadata) || !has(r.spec.leaderWorkerTemplate.workerTemplate.metadata.annotations) || !('leaderworkerset.sigs.k8s.io/exclusive-topology' in r.spec.leaderWorkerTemplate.workerTemplate.metadata.annotations || 'leaderworkerset.sigs.k8s.io/subgroup-exclusive-topology' in r.spec.leaderWorkerTemplate.workerTemplate.metadata.annotations)) && \
           (!has(r.spec) || !has(r.spec.leaderWorkerTemplate.leaderTemplate) || !has(r.spec.leaderWorkerTemplate.leaderTemplate.metadata) || !has(r.spec.leaderWorkerTemplate.leaderTemplate.metadata.annotations) || !('leaderworkerset.sigs.k8s.io/exclusive-topology' in r.spec.leaderWorkerTemplate.leaderTemplate.metadata.annotations || 'leaderworkerset.sigs.k8s.io/subgroup-exclusive-topology' in r.spec.leaderWorkerTemplate.leaderTemplate.metadata.annotations)))"
    ).message(
        "a role's leaderworkerset.sigs.k8s.io/exclusive-topology or subgroup-exclusive-topology annotation must not be combined with a placementPolicy type other than None (as upstream)"
    ).field_path(".placementPolicy.type"),
)]
pub struct DisaggregatedSetSpec {
    /// The roles (2 to 10), each with a unique name.
    #[schemars(length(min = 2, max = 10))]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["name".into()]))]
    pub roles: Vec<DisaggregatedRoleSpec>,

    /// Independent copies of the whole set of roles (1 to 100, default 1), each rolled on its
    /// own. Changing it adds or removes copies; it does not roll.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = 1, "minimum" = 1, "maximum" = 100))]
    pub slices: Option<i32>,

    /// How a slice's roles share a topology domain and slices are spread over domains (applied
    /// when a slice's LWS is created: a change takes effect with the next rollout).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement_policy: Option<PlacementPolicy>,
}

impl DisaggregatedSetSpec {
    /// The names of the roles whose replicas come from their DisaggregatedSetRoleScaler.
    pub fn external_roles(&self) -> Vec<String> {
        self.roles
            .iter()
            .filter(|r| r.external())
            .map(|r| r.name.clone())
            .collect()
    }

    /// `spec.slices`, 1 when unset.
    pub fn slices(&self) -> i32 {
        self.slices.unwrap_or(1).max(1)
    }
}

/// The placement guarantee.
#[derive(
    schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq,
)]
pub enum PlacementType {
    /// No affinity is added (the default).
    #[default]
    None,
    /// A slice's pods share one topology domain; the set's slices use different domains.
    ExclusiveSlice,
    /// ExclusiveSlice, and no other DisaggregatedSet's slice shares the domain.
    ExclusiveTopology,
}

/// Topology placement of a set's slices.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new(
    "!has(self.type) || self.type == 'None' || (has(self.topology) && size(self.topology) > 0)"
).message("topology is required when type is not None").field_path(".topology"))]
pub struct PlacementPolicy {
    /// The guarantee (default None).
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "None"))]
    pub type_: Option<PlacementType>,
    /// The node label key that defines a domain (the affinity's topologyKey); required unless
    /// the type is None.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology: Option<String>,
}

impl PlacementPolicy {
    /// The type and topology key, when the policy places anything.
    pub fn effective(&self) -> Option<(PlacementType, &str)> {
        let t = self.type_.unwrap_or_default();
        let key = self.topology.as_deref().filter(|k| !k.is_empty())?;
        (t != PlacementType::None).then_some((t, key))
    }
}

/// Where a role's replicas come from.
#[derive(
    schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq,
)]
pub enum RoleScalingMode {
    /// The role's `spec.replicas` (the default).
    #[default]
    Static,
    /// The `spec.replicas` of the DisaggregatedSetRoleScaler `<set>-<role>` the controller
    /// creates (an HPA scales it); the role's `spec.replicas` is ignored.
    External,
}

/// How a role is scaled.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RoleScaling {
    /// Static (default) or External.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "Static"))]
    pub mode: Option<RoleScalingMode>,
}

/// One role: a name and the LWS template its LeaderWorkerSets are made from.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new(
    "!has(self.spec) || !has(self.spec.rolloutStrategy) || !has(self.spec.rolloutStrategy.rollingUpdateConfiguration) || !has(self.spec.rolloutStrategy.rollingUpdateConfiguration.partition) || self.spec.rolloutStrategy.rollingUpdateConfiguration.partition == 0"
).message(
    "spec.rolloutStrategy.rollingUpdateConfiguration.partition: partition is not supported by DisaggregatedSet; rolling updates are managed across roles by the DisaggregatedSet controller"
))]
pub struct DisaggregatedRoleSpec {
    /// The role's name (a DNS label), unique in the set.
    #[schemars(
        length(min = 1, max = 63),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    )]
    pub name: String,

    /// Static (the role's replicas) or External (a DisaggregatedSetRoleScaler's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scaling: Option<RoleScaling>,

    /// Labels and annotations of the role's LeaderWorkerSets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::template_metadata")]
    pub metadata: Option<ObjectMeta>,

    /// The role's LeaderWorkerSet spec (`rolloutStrategy.type` RollingUpdate, no partition).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<LeaderWorkerSetSpec>,
}

impl DisaggregatedRoleSpec {
    /// The role's LWS spec (an absent one is the empty spec, as Go decodes it).
    pub fn lws_spec(&self) -> LeaderWorkerSetSpec {
        self.spec.clone().unwrap_or_default()
    }

    /// `spec.replicas`, 1 when unset (the LWS default).
    pub fn replicas(&self) -> i32 {
        self.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
    }

    /// The role's replicas come from its DisaggregatedSetRoleScaler.
    pub fn external(&self) -> bool {
        self.scaling.as_ref().and_then(|s| s.mode) == Some(RoleScalingMode::External)
    }
}

/// Observed state of one role.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RoleStatus {
    /// The role's name.
    pub name: String,
    /// Groups of the role, every revision counted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// Ready groups of the role, every revision counted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_replicas: Option<i32>,
    /// Groups on the set's current revision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_replicas: Option<i32>,
}

/// Observed state of a DisaggregatedSet.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DisaggregatedSetStatus {
    /// One entry per role of the spec, in its order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["name".into()]))]
    pub role_statuses: Option<Vec<RoleStatus>>,

    /// `Available`, `Progressing` and `Degraded`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    pub conditions: Option<Vec<Condition>>,
}

/// Longest int-or-percent string (`maxSurge`, `maxUnavailable`) a role may write: "100%" and
/// then some. It bounds the cost the API server estimates for their CEL rules, which inside a
/// list of up to 10 roles would otherwise exceed the CRD's budget (measured: 2.5x).
pub const INT_OR_PERCENT_MAX_LENGTH: i64 = 8;

/// The CRD: the derived schema, with the roles' int-or-percent fields bounded (see
/// [`INT_OR_PERCENT_MAX_LENGTH`]).
pub fn crd() -> CustomResourceDefinition {
    let mut crd = DisaggregatedSet::crd();
    for version in &mut crd.spec.versions {
        let Some(schema) = version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
        else {
            continue;
        };
        let mut value = serde_json::to_value(&*schema).expect("a schema serializes");
        bound_int_or_string(&mut value);
        // A role's LWS spec is defaulted as upstream's CRD defaults it: no rolloutStrategy or
        // networkConfig appears unless written (the LWS webhook defaults those when the role's
        // LWS is created). Upstream's planner reads a role without a rollingUpdateConfiguration
        // as maxSurge 1, maxUnavailable 0; our LWS CRD's object defaults would make it 0 and 1.
        let role_spec = &mut value["properties"]["spec"]["properties"]["roles"]["items"]["properties"]
            ["spec"]["properties"];
        for path in [
            &["rolloutStrategy"][..],
            &[
                "rolloutStrategy",
                "properties",
                "rollingUpdateConfiguration",
            ][..],
            &["networkConfig"][..],
        ] {
            let mut node = &mut *role_spec;
            for key in path {
                node = &mut node[*key];
            }
            if let Some(obj) = node.as_object_mut() {
                obj.remove("default");
            }
        }
        *schema = serde_json::from_value(value).expect("still a schema");
    }
    crd
}

fn bound_int_or_string(node: &mut serde_json::Value) {
    match node {
        serde_json::Value::Object(map) => {
            if map.get("x-kubernetes-int-or-string") == Some(&serde_json::Value::Bool(true)) {
                map.insert("maxLength".into(), INT_OR_PERCENT_MAX_LENGTH.into());
            }
            map.values_mut().for_each(bound_int_or_string);
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(bound_int_or_string),
        _ => {}
    }
}
