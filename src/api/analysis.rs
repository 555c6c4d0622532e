//! Argo Rollouts' analysis kinds (`argoproj.io/v1alpha1`): `AnalysisTemplate`,
//! `ClusterAnalysisTemplate` and `AnalysisRun`, with Argo's JSON names, so a template a team
//! already uses with Argo Rollouts works unchanged and `kubectl get analysisrun` reads as users
//! know it.
//!
//! Only the fields this controller reads or writes are typed; a template's other fields (other
//! providers, dry-run settings) are kept by the API server and ignored here. The CRDs we ship
//! (`crds/argoproj.io/`) accept any spec and status, so templates written for Argo Rollouts'
//! stricter schema are always storable; where Argo Rollouts is installed its CRDs are used and
//! ours are not applied (docs/analysis.md, "Installing").
//!
//! Status is written through the main resource, as Argo does: its AnalysisRun CRD has no status
//! subresource, and ours matches it so both behave alike.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, CustomResourceValidation, JSONSchemaProps,
};
use k8s_openapi::apimachinery::pkg::{apis::meta::v1::Time, util::intstr::IntOrString};
use kube::{CustomResource, CustomResourceExt};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Argo's API group.
pub const GROUP: &str = "argoproj.io";

/// Argo Rollouts' label that picks which controller instance owns an object. A default Argo
/// Rollouts install only processes objects *without* it, so our AnalysisRuns — which carry it —
/// are never measured twice when Argo Rollouts runs in the same cluster.
pub const INSTANCE_ID_LABEL: &str = "argo-rollouts.argoproj.io/controller-instance-id";
/// The instance id our AnalysisRuns carry.
pub const INSTANCE_ID: &str = "lws-rollout";

/// A reusable analysis: arguments and metrics.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "argoproj.io",
    version = "v1alpha1",
    kind = "AnalysisTemplate",
    plural = "analysistemplates",
    shortname = "at",
    namespaced,
    schema = "disabled",
    derive = "Default",
    derive = "PartialEq"
)]
#[serde(rename_all = "camelCase")]
pub struct AnalysisTemplateSpec {
    /// Arguments the metrics' queries refer to as `{{args.NAME}}`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<Argument>,
    /// What to measure.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub metrics: Vec<Metric>,
}

/// The cluster-wide form of [`AnalysisTemplate`].
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "argoproj.io",
    version = "v1alpha1",
    kind = "ClusterAnalysisTemplate",
    plural = "clusteranalysistemplates",
    shortname = "cat",
    schema = "disabled",
    derive = "Default",
    derive = "PartialEq"
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterAnalysisTemplateSpec {
    /// Arguments.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<Argument>,
    /// Metrics.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub metrics: Vec<Metric>,
}

/// One analysis of a release: the templates' metrics with every argument resolved, and the
/// measurements taken so far in its status.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "argoproj.io",
    version = "v1alpha1",
    kind = "AnalysisRun",
    plural = "analysisruns",
    shortname = "ar",
    namespaced,
    schema = "disabled",
    status = "AnalysisRunStatus",
    derive = "Default",
    derive = "PartialEq"
)]
#[serde(rename_all = "camelCase")]
pub struct AnalysisRunSpec {
    /// The resolved arguments (recorded for whoever reads the run).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<Argument>,
    /// The metrics, queries already resolved.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub metrics: Vec<Metric>,
    /// Set to stop measuring (a background analysis at the end of its release).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub terminate: Option<bool>,
}

/// A named argument.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Argument {
    /// Name, as `{{args.NAME}}` refers to it.
    pub name: String,
    /// Value; a template's argument without one must be given by the Rollout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// Where the Rollout takes the value from instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value_from: Option<ValueFrom>,
}

/// Argo's `valueFrom`: a revision hash of the release, or a field of the Rollout.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ValueFrom {
    /// `Stable` or `Latest`: the stable or the new revision's hash.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_template_hash_value: Option<String>,
    /// A field of the Rollout (`metadata.name`, `metadata.namespace`, a label or annotation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field_ref: Option<FieldRef>,
}

/// A field path.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct FieldRef {
    /// E.g. `metadata.namespace`.
    pub field_path: String,
}

/// One metric: what to query, how often, and what counts as success.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Metric {
    /// Name, unique in the analysis.
    pub name: String,
    /// Time between measurements (`30s`, `5m`); absent, one measurement.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<String>,
    /// Wait before the first measurement.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initial_delay: Option<String>,
    /// Measurements to take.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<IntOrString>,
    /// Expression over `result` that makes a measurement Successful.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub success_condition: Option<String>,
    /// Expression over `result` that makes a measurement Failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_condition: Option<String>,
    /// Failed measurements tolerated (default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_limit: Option<IntOrString>,
    /// Inconclusive measurements tolerated (default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inconclusive_limit: Option<IntOrString>,
    /// Consecutive measurement errors tolerated (default 4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub consecutive_error_limit: Option<IntOrString>,
    /// Where the figure comes from.
    #[serde(default)]
    pub provider: Provider,
}

/// A metric's provider. Only `prometheus` is measured here; another is kept and reported.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Provider {
    /// Prometheus.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prometheus: Option<PrometheusMetric>,
    /// Any other provider (web, datadog, job, …), kept as written.
    #[serde(flatten)]
    pub other: BTreeMap<String, serde_json::Value>,
}

/// Argo's Prometheus provider.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PrometheusMetric {
    /// Base URL of the Prometheus HTTP API.
    #[serde(default)]
    pub address: String,
    /// PromQL.
    #[serde(default)]
    pub query: String,
    /// Seconds a query may take (default 30).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<i64>,
}

/// Where an analysis stands, with every measurement kept (up to [`MEASUREMENTS_KEPT`] each).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct AnalysisRunStatus {
    /// Pending, Running, Successful, Failed, Inconclusive or Error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// Why it ended as it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// One entry per metric measured so far.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub metric_results: Vec<MetricResult>,
    /// When the first measurement was due to start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Time>,
}

/// Measurements kept per metric, oldest dropped first (Argo's default retention).
pub const MEASUREMENTS_KEPT: usize = 10;

/// One metric's measurements and counts.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MetricResult {
    /// The metric's name.
    pub name: String,
    /// The metric's phase.
    #[serde(default)]
    pub phase: String,
    /// The most recent measurements.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub measurements: Vec<Measurement>,
    /// Why the phase is what it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Measurements that reached a verdict (errors not counted).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub count: i32,
    /// Successful measurements.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub successful: i32,
    /// Failed measurements.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub failed: i32,
    /// Inconclusive measurements.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub inconclusive: i32,
    /// Measurements that could not be taken (the provider unreachable, a bad query).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub error: i32,
    /// Errors in a row, reset by any verdict.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub consecutive_error: i32,
}

// serde's skip_serializing_if passes a reference.
#[allow(clippy::trivially_copy_pass_by_ref)]
fn is_zero(n: &i32) -> bool {
    *n == 0
}

/// One measurement.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Measurement {
    /// Successful, Failed, Inconclusive or Error.
    pub phase: String,
    /// The query's value as text (`[0.05]` for a vector, `0.05` for a scalar).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// The error, for a measurement in Error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// When it started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Time>,
    /// When it finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<Time>,
}

/// Analysis phases (Argo's strings).
pub mod phase {
    /// Created, nothing measured yet.
    pub const PENDING: &str = "Pending";
    /// Measuring.
    pub const RUNNING: &str = "Running";
    /// Every metric passed.
    pub const SUCCESSFUL: &str = "Successful";
    /// A metric failed more often than it may.
    pub const FAILED: &str = "Failed";
    /// Neither condition held more often than allowed: a person decides.
    pub const INCONCLUSIVE: &str = "Inconclusive";
    /// Measurements could not be taken (the provider unreachable) more often than allowed.
    pub const ERROR: &str = "Error";

    /// A phase no further measurement changes.
    pub fn is_done(phase: &str) -> bool {
        matches!(phase, SUCCESSFUL | FAILED | INCONCLUSIVE | ERROR)
    }
}

/// A schema that accepts any object for `spec` and `status`: templates written for Argo
/// Rollouts' own schema (or a newer one) are always storable, and a field we do not type is
/// kept.
fn open_schema() -> CustomResourceValidation {
    let open = || JSONSchemaProps {
        type_: Some("object".into()),
        x_kubernetes_preserve_unknown_fields: Some(true),
        ..JSONSchemaProps::default()
    };
    CustomResourceValidation {
        open_api_v3_schema: Some(JSONSchemaProps {
            type_: Some("object".into()),
            properties: Some(BTreeMap::from([
                ("apiVersion".into(), string()),
                ("kind".into(), string()),
                (
                    "metadata".into(),
                    JSONSchemaProps {
                        type_: Some("object".into()),
                        ..JSONSchemaProps::default()
                    },
                ),
                ("spec".into(), open()),
                ("status".into(), open()),
            ])),
            ..JSONSchemaProps::default()
        }),
    }
}

fn string() -> JSONSchemaProps {
    JSONSchemaProps {
        type_: Some("string".into()),
        ..JSONSchemaProps::default()
    }
}

fn with_open_schema(mut crd: CustomResourceDefinition) -> CustomResourceDefinition {
    for v in &mut crd.spec.versions {
        v.schema = Some(open_schema());
        // Argo's AnalysisRun CRD has no status subresource; neither has ours.
        v.subresources = None;
    }
    crd
}

/// The three CRDs, for clusters without Argo Rollouts.
pub fn crds() -> Vec<(&'static str, CustomResourceDefinition)> {
    let mut run = with_open_schema(AnalysisRun::crd());
    if let Some(v) = run.spec.versions.first_mut() {
        v.additional_printer_columns = Some(vec![
            k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceColumnDefinition {
                name: "Status".into(),
                type_: "string".into(),
                json_path: ".status.phase".into(),
                description: Some("AnalysisRun status".into()),
                ..Default::default()
            },
            k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceColumnDefinition {
                name: "Age".into(),
                type_: "date".into(),
                json_path: ".metadata.creationTimestamp".into(),
                ..Default::default()
            },
        ]);
    }
    vec![
        (
            "argoproj.io/argoproj.io_analysistemplates.yaml",
            with_open_schema(AnalysisTemplate::crd()),
        ),
        (
            "argoproj.io/argoproj.io_clusteranalysistemplates.yaml",
            with_open_schema(ClusterAnalysisTemplate::crd()),
        ),
        ("argoproj.io/argoproj.io_analysisruns.yaml", run),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A template as Argo Rollouts' documentation writes one reads into our types, with the
    /// fields we do not type (another provider) kept.
    #[test]
    fn an_argo_template_reads_unchanged() {
        let doc = serde_json::json!({
            "apiVersion": "argoproj.io/v1alpha1", "kind": "AnalysisTemplate",
            "metadata": {"name": "success-rate"},
            "spec": {
                "args": [{"name": "service-name"}, {"name": "port", "value": "9090"}],
                "metrics": [{
                    "name": "success-rate", "interval": "5m", "count": 3,
                    "successCondition": "result[0] >= 0.95", "failureLimit": 3,
                    "provider": {"prometheus": {"address": "http://prometheus:9090", "timeout": 40,
                        "query": "sum(rate(x{service=\"{{args.service-name}}\"}[5m]))"}}
                }, {
                    "name": "web", "provider": {"web": {"url": "http://x"}}
                }]
            }
        });
        let t: AnalysisTemplate = serde_json::from_value(doc).expect("reads");
        let m = &t.spec.metrics[0];
        assert_eq!(m.count, Some(IntOrString::Int(3)));
        assert_eq!(m.failure_limit, Some(IntOrString::Int(3)));
        assert_eq!(
            m.provider.prometheus.as_ref().map(|p| p.timeout),
            Some(Some(40))
        );
        assert!(t.spec.metrics[1].provider.prometheus.is_none());
        assert!(t.spec.metrics[1].provider.other.contains_key("web"));
    }

    #[test]
    fn crds_accept_any_spec_and_have_no_status_subresource() {
        for (_, crd) in crds() {
            let v = &crd.spec.versions[0];
            assert!(v.subresources.is_none());
            let root = v
                .schema
                .as_ref()
                .and_then(|s| s.open_api_v3_schema.as_ref())
                .expect("schema");
            let spec = &root.properties.as_ref().expect("properties")["spec"];
            assert_eq!(spec.x_kubernetes_preserve_unknown_fields, Some(true));
        }
    }
}
