//! The Rollout admission rules behind `/validate-rollout` (pure; the endpoint is in
//! `src/webhook/rollout.rs`): Kruise Rollout v0.6.2's own webhook rules with its messages, and a
//! refusal, naming what is supported, of everything this controller cannot honour — so such a
//! Rollout is refused when it is written, never accepted and then stalled mid-release.
//!
//! Kruise's rules:
//! - one Rollout per workload ("… one workload only have less than one Rollout");
//! - while the stored Rollout is Progressing or Terminating, `workloadRef`, `trafficRoutings`,
//!   the style (canary / partition / blue-green) and the number of steps are immutable;
//! - steps: at least one; `replicas` set, an integer > 0 or a percentage in (0%, 100%], never
//!   decreasing (compared when both neighbours are integers or both percentages); `traffic` a
//!   percentage in (0%, 100%] (blue-green: [0%, 100%]);
//! - at most one `trafficRoutings` entry, with a Service, one of ingress / gateway /
//!   customNetworkRefs, an Ingress name or an HTTPRoute name, a grace period ≥ 0.
//!
//! Ours (not honoured here; each message says what is): the canary fields `enableExtraWorkloadForCanary` and `patchPodTemplateMetadata` under
//! `blueGreen`, an ingress `classType` other than nginx, `customNetworkRefs`, `trafficRoutingRef`,
//! `disableGenerateCanaryService`, a step that moves traffic without `trafficRoutings`, and on
//! the nginx canary Ingress anything it cannot express (path and query-parameter matches, more
//! than one header per match or per kind, `requestHeaderModifier`).
//!
//! On UPDATE only a change that *introduces* a problem is refused (the immutability rules
//! excepted), so a Rollout stored before these rules existed stays editable and deletable; a
//! Rollout being deleted is never refused (its finalizer must come off). A Rollout of another
//! workload kind is another controller's: it is left to that controller.

use std::fmt;

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::api::rollout::{CanaryStep, Phase, Rollout, RolloutStrategy, TrafficRoutingRef};
use crate::rollout::plan::{analysis, deadline};

/// One refused field: its path and what is allowed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// JSON path of the field, e.g. `spec.strategy.canary.steps[1].replicas`.
    pub path: String,
    /// What is wrong and what is allowed.
    pub message: String,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

fn refusal(path: impl Into<String>, message: impl Into<String>) -> Refusal {
    Refusal {
        path: path.into(),
        message: message.into(),
    }
}

/// The release styles (Kruise's `GetRollingStyle`, with `IsRealPartition` for an LWS).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Style {
    /// `canary` with `enableExtraWorkloadForCanary: true`: a canary LWS beside the stable one.
    Canary,
    /// `canary` without it: groups updated in place.
    Partition,
    /// `blueGreen`.
    BlueGreen,
}

/// The style a strategy asks for (`None` when neither canary nor blueGreen is set).
pub fn style(strategy: &RolloutStrategy) -> Option<Style> {
    match (&strategy.canary, &strategy.blue_green) {
        (_, Some(_)) => Some(Style::BlueGreen),
        (Some(c), None) if c.enable_extra_workload_for_canary => Some(Style::Canary),
        (Some(_), None) => Some(Style::Partition),
        (None, None) => None,
    }
}

/// The refusals for `new`. `old` is the stored Rollout on UPDATE (`None` on CREATE); `others`
/// are the Rollouts of the namespace (the one being written may be among them).
pub fn validate(new: &Rollout, old: Option<&Rollout>, others: &[Rollout]) -> Vec<Refusal> {
    if new.metadata.deletion_timestamp.is_some() {
        return Vec::new();
    }
    let Some(old) = old else {
        let target = &new.spec.workload_ref;
        if !target.is_leader_worker_set() && !target.is_disaggregated_set() {
            // The CRD's own rule refuses it first; say the same if it ever gets here.
            return vec![refusal(
                "spec.workloadRef",
                "only a leaderworkerset.x-k8s.io/v1 LeaderWorkerSet or a \
                 disaggregatedset.x-k8s.io/v1 DisaggregatedSet can be released",
            )];
        }
        return problems(new, others);
    };
    let ours = |r: &Rollout| {
        r.spec.workload_ref.is_leader_worker_set() || r.spec.workload_ref.is_disaggregated_set()
    };
    if !ours(old) && !ours(new) {
        return Vec::new();
    }
    if old.spec == new.spec
        && deadline::of(old) == deadline::of(new)
        && analysis::of(old) == analysis::of(new)
        && analysis::background_of(old) == analysis::background_of(new)
    {
        return Vec::new();
    }
    let mut out = immutable_while_releasing(old, new);
    let before = problems(old, others);
    out.extend(
        problems(new, others)
            .into_iter()
            .filter(|p| !before.contains(p)),
    );
    out
}

/// Everything wrong with a Rollout on its own (spec rules) and among `others` (a conflict).
fn problems(r: &Rollout, others: &[Rollout]) -> Vec<Refusal> {
    let mut out = spec_problems(&r.spec.strategy);
    out.extend(conflict(r, others));
    if let Err(why) = deadline::of(r) {
        out.push(refusal("metadata.annotations", why));
    }
    if let Err(why) = analysis::of(r) {
        out.push(refusal("metadata.annotations", why));
    }
    if let Err(why) = analysis::background_of(r) {
        out.push(refusal("metadata.annotations", why));
    }
    out
}

/// What a pair Rollout's admission reads from the cluster to check its Service.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PairServiceCheck {
    /// The DisaggregatedSet the Rollout releases.
    pub set: String,
    /// The Service its first trafficRouting names.
    pub service: String,
    /// Where that Service is named: the canary or the blue-green strategy's trafficRoutings.
    pub field: &'static str,
}

/// The check of a pair Rollout's `trafficRoutings[0].service` (canary or blue-green, the one
/// the release routes through), on CREATE or when the set or the Service named changed (a
/// Rollout stored before stays editable); `None` for anything else.
pub fn pair_service_to_check(new: &Rollout, old: Option<&Rollout>) -> Option<PairServiceCheck> {
    fn named(r: &Rollout) -> Option<PairServiceCheck> {
        if !r.spec.workload_ref.is_disaggregated_set() {
            return None;
        }
        let strategy = &r.spec.strategy;
        let (routings, field) = match (&strategy.canary, &strategy.blue_green) {
            (Some(c), _) => (
                c.traffic_routings.as_ref(),
                "spec.strategy.canary.trafficRoutings[0].service",
            ),
            (None, Some(b)) => (
                b.traffic_routings.as_ref(),
                "spec.strategy.blueGreen.trafficRoutings[0].service",
            ),
            (None, None) => return None,
        };
        Some(PairServiceCheck {
            set: r.spec.workload_ref.name.clone(),
            service: routings?.first()?.service.clone(),
            field,
        })
    }
    if new.metadata.deletion_timestamp.is_some() {
        return None;
    }
    let wanted = named(new)?;
    (old.and_then(named).as_ref() != Some(&wanted)).then_some(wanted)
}

/// The refusal of a pair Rollout whose Service (`service`, read at admission, named at
/// `field`) is not a role Service of `set` ([`crate::rollout::plan::pair_service`]).
pub fn pair_service_refusal(
    field: &str,
    set: &crate::api::disaggregatedset::DisaggregatedSet,
    service: &k8s_openapi::api::core::v1::Service,
) -> Option<Refusal> {
    let roles: Vec<String> = set.spec.roles.iter().map(|r| r.name.clone()).collect();
    let name = set.metadata.name.as_deref().unwrap_or_default();
    crate::rollout::plan::pair_service::problem(service, name, &roles)
        .map(|why| refusal(field, why))
}

/// Kruise: a second Rollout naming the same workload is refused.
fn conflict(r: &Rollout, others: &[Rollout]) -> Option<Refusal> {
    let other = others.iter().find(|o| {
        o.metadata.name != r.metadata.name
            && o.metadata.namespace == r.metadata.namespace
            && o.spec.workload_ref == r.spec.workload_ref
    })?;
    Some(refusal(
        "spec.workloadRef",
        format!(
            "This rollout conflict with Rollout({}/{}), one workload only have less than one \
             Rollout",
            other.metadata.namespace.as_deref().unwrap_or_default(),
            other.metadata.name.as_deref().unwrap_or_default()
        ),
    ))
}

/// Kruise: while a release runs, what it is built on must not move under it.
fn immutable_while_releasing(old: &Rollout, new: &Rollout) -> Vec<Refusal> {
    let stored_phase = old.status.as_ref().map(|s| &s.phase);
    if !matches!(stored_phase, Some(Phase::Progressing | Phase::Terminating)) {
        return Vec::new();
    }
    let mut out = Vec::new();
    if old.spec.workload_ref != new.spec.workload_ref {
        out.push(refusal(
            "spec.workloadRef",
            "Rollout 'ObjectRef' field is immutable",
        ));
    }
    let (os, ns) = (&old.spec.strategy, &new.spec.strategy);
    if routings(os) != routings(ns) {
        out.push(refusal(
            format!("{}.trafficRoutings", strategy_path(ns)),
            "Rollout 'Strategy.Canary|BlueGreen.TrafficRoutings' field is immutable",
        ));
    }
    if style(os) != style(ns) {
        out.push(refusal(
            "spec.strategy",
            "Rollout style and enableExtraWorkloadForCanary are immutable",
        ));
    }
    if steps(os).len() != steps(ns).len() {
        out.push(refusal(
            format!("{}.steps", strategy_path(ns)),
            "Amount of Rollout steps are immutable",
        ));
    }
    out
}

fn strategy_path(s: &RolloutStrategy) -> &'static str {
    if s.blue_green.is_some() {
        "spec.strategy.blueGreen"
    } else {
        "spec.strategy.canary"
    }
}

fn routings(s: &RolloutStrategy) -> &[TrafficRoutingRef] {
    let r = match (&s.canary, &s.blue_green) {
        (_, Some(b)) => b.traffic_routings.as_deref(),
        (Some(c), None) => c.traffic_routings.as_deref(),
        (None, None) => None,
    };
    r.unwrap_or_default()
}

fn steps(s: &RolloutStrategy) -> &[CanaryStep] {
    match (&s.canary, &s.blue_green) {
        (_, Some(b)) => &b.steps,
        (Some(c), None) => &c.steps,
        (None, None) => &[],
    }
}

/// The strategy's own problems: Kruise's rules, then what this controller does not honour.
fn spec_problems(s: &RolloutStrategy) -> Vec<Refusal> {
    let Some(style) = style(s) else {
        return vec![refusal(
            "spec.strategy",
            "Canary and BlueGreen cannot both be empty",
        )];
    };
    if s.canary.is_some() && s.blue_green.is_some() {
        return vec![refusal(
            "spec.strategy",
            "Canary and BlueGreen cannot both be set",
        )];
    }
    let base = strategy_path(s);
    let mut out = step_problems(base, steps(s), style);
    let routings = routings(s);
    out.extend(routing_problems(base, routings));
    if style == Style::BlueGreen {
        out.extend(canary_only_fields(s));
    }
    let (routing_ref, no_canary_service) = match (&s.canary, &s.blue_green) {
        (_, Some(b)) => (&b.traffic_routing_ref, b.disable_generate_canary_service),
        (Some(c), None) => (&c.traffic_routing_ref, c.disable_generate_canary_service),
        (None, None) => (&None, false),
    };
    if routing_ref.is_some() {
        out.push(refusal(
            format!("{base}.trafficRoutingRef"),
            "TrafficRouting objects (v1alpha1) are not supported; name the Service and its \
             ingress or gateway in trafficRoutings",
        ));
    }
    if no_canary_service {
        out.push(refusal(
            format!("{base}.disableGenerateCanaryService"),
            "not supported: the canary LeaderWorkerSet's leaders are reached through the \
             Service <service>-canary, which this controller creates",
        ));
    }
    let nginx = routings.iter().any(|r| r.ingress.is_some());
    for (i, step) in steps(s).iter().enumerate() {
        let path = format!("{base}.steps[{i}]");
        let moves_traffic = step.traffic.is_some()
            || step.matches.as_ref().is_some_and(|m| !m.is_empty())
            || step.request_header_modifier.is_some();
        if moves_traffic && routings.is_empty() {
            out.push(refusal(
                path.clone(),
                format!(
                    "traffic, matches and requestHeaderModifier need {base}.trafficRoutings: \
                     without one there is nothing to move traffic through"
                ),
            ));
        }
        if nginx {
            out.extend(nginx_step_problems(&path, step));
        }
    }
    out
}

/// Canary fields written under `blueGreen` (Kruise's blue-green has neither): refused rather
/// than silently dropped, so a manifest that meant a canary does not run as a blue-green.
fn canary_only_fields(s: &RolloutStrategy) -> Vec<Refusal> {
    let Some(bg) = s.blue_green.as_ref() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    if bg.enable_extra_workload_for_canary.is_some() {
        out.push(refusal(
            "spec.strategy.blueGreen.enableExtraWorkloadForCanary",
            "a canary field: a blue-green release always runs the new template in a second \
             LeaderWorkerSet; remove it, or use spec.strategy.canary for a canary release",
        ));
    }
    if bg.patch_pod_template_metadata.is_some() {
        out.push(refusal(
            "spec.strategy.blueGreen.patchPodTemplateMetadata",
            "a canary field: blue-green's new side becomes the user's LeaderWorkerSet at \
             promotion, so its pods carry the template's own labels; remove it, or use \
             spec.strategy.canary",
        ));
    }
    out
}

/// Kruise's step rules (it stops at the first; all are reported here).
fn step_problems(base: &str, steps: &[CanaryStep], style: Style) -> Vec<Refusal> {
    let mut out = Vec::new();
    if steps.is_empty() {
        out.push(refusal(
            format!("{base}.steps"),
            "The number of Canary.Steps cannot be empty",
        ));
        return out;
    }
    for (i, s) in steps.iter().enumerate() {
        let path = format!("{base}.steps[{i}]");
        match &s.replicas {
            None => out.push(refusal(
                format!("{path}.replicas"),
                "replicas cannot be empty",
            )),
            Some(r) if !replicas_valid(r) => out.push(refusal(
                format!("{path}.replicas"),
                "replicas must be positive number, or a percentage with \"0%\" < canaryReplicas \
                 <= \"100%\"",
            )),
            Some(_) => {}
        }
        if let Some(t) = &s.traffic {
            let weight = percent(t);
            match style {
                Style::BlueGreen if weight.is_none_or(|w| !(0..=100).contains(&w)) => {
                    out.push(refusal(
                        format!("{path}.traffic"),
                        "traffic must be percentage with \"0%\" <= traffic <= \"100%\" in \
                         blueGreen strategy",
                    ));
                }
                Style::Canary | Style::Partition
                    if weight.is_none_or(|w| !(1..=100).contains(&w)) =>
                {
                    out.push(refusal(
                        format!("{path}.traffic"),
                        "traffic must be percentage with \"0%\" < traffic <= \"100%\" in canary \
                         strategy",
                    ));
                }
                _ => {}
            }
        }
        if let Some(d) = s.pause.as_ref().and_then(|p| p.duration)
            && d < 0
        {
            out.push(refusal(
                format!("{path}.pause.duration"),
                "pause.duration must not be negative (absent waits for approval, 0 goes on at \
                 once)",
            ));
        }
    }
    for i in 1..steps.len() {
        let (Some(prev), Some(cur)) = (&steps[i - 1].replicas, &steps[i].replicas) else {
            continue;
        };
        let comparable = matches!(
            (prev, cur),
            (IntOrString::Int(_), IntOrString::Int(_))
                | (IntOrString::String(_), IntOrString::String(_))
        );
        if let (true, Some(p), Some(c)) = (comparable, scaled(prev), scaled(cur))
            && c < p
        {
            out.push(refusal(
                format!("{base}.steps[{i}].replicas"),
                "Steps.CanaryReplicas must be a non decreasing sequence",
            ));
        }
    }
    out
}

/// `"N%"` as N.
fn percent(s: &str) -> Option<i64> {
    s.strip_suffix('%')?.parse().ok()
}

/// Replicas as Kruise scales them against 100: an integer as itself, a percentage as its number.
fn scaled(r: &IntOrString) -> Option<i64> {
    match r {
        IntOrString::Int(n) => Some(i64::from(*n)),
        IntOrString::String(s) => percent(s),
    }
}

fn replicas_valid(r: &IntOrString) -> bool {
    match r {
        IntOrString::Int(n) => *n > 0,
        IntOrString::String(s) => percent(s).is_some_and(|p| (1..=100).contains(&p)),
    }
}

/// Kruise's routing rules, then ours.
fn routing_problems(base: &str, routings: &[TrafficRoutingRef]) -> Vec<Refusal> {
    let mut out = Vec::new();
    if routings.len() > 1 {
        out.push(refusal(
            format!("{base}.trafficRoutings"),
            "Rollout currently only support single TrafficRouting.",
        ));
    }
    for (i, r) in routings.iter().enumerate() {
        let path = format!("{base}.trafficRoutings[{i}]");
        if r.grace_period_seconds.is_some_and(|g| g < 0) {
            out.push(refusal(
                format!("{path}.gracePeriodSeconds"),
                "TrafficRouting.GracePeriodSeconds cannot be negative",
            ));
        }
        if r.service.is_empty() {
            out.push(refusal(
                format!("{path}.service"),
                "TrafficRouting.Service cannot be empty",
            ));
        }
        if r.gateway.is_none() && r.ingress.is_none() && r.custom_network_refs.is_none() {
            out.push(refusal(path.clone(), "TrafficRoutings are not set"));
        }
        if let Some(ing) = &r.ingress {
            if ing.name.is_empty() {
                out.push(refusal(
                    format!("{path}.ingress.name"),
                    "TrafficRouting.Ingress.Ingress cannot be empty",
                ));
            }
            let class = ing.class_type.as_deref().unwrap_or("nginx");
            if class != "nginx" {
                out.push(refusal(
                    format!("{path}.ingress.classType"),
                    format!(
                        "{class:?} is not supported: only nginx (ingress-nginx canary \
                         annotations); for other proxies use gateway (a Gateway API HTTPRoute)"
                    ),
                ));
            }
        }
        if let Some(gw) = &r.gateway
            && gw.http_route_name.as_deref().is_none_or(str::is_empty)
        {
            out.push(refusal(
                format!("{path}.gateway.httpRouteName"),
                "TrafficRouting.Gateway must set the name of HTTPRoute or HTTPsRoute",
            ));
        }
        if r.custom_network_refs.is_some() {
            out.push(refusal(
                format!("{path}.customNetworkRefs"),
                "custom network providers are not supported: use ingress (nginx) or gateway \
                 (a Gateway API HTTPRoute)",
            ));
        }
    }
    out
}

/// What the nginx canary Ingress cannot express: it matches on one header (value or pattern)
/// and one cookie per step, and cannot modify headers.
fn nginx_step_problems(path: &str, step: &CanaryStep) -> Vec<Refusal> {
    let mut out = Vec::new();
    if step.request_header_modifier.is_some() {
        out.push(refusal(
            format!("{path}.requestHeaderModifier"),
            "not supported by the nginx canary Ingress: requestHeaderModifier needs \
             trafficRoutings[].gateway (a Gateway API HTTPRoute)",
        ));
    }
    let (mut headers, mut cookies) = (0, 0);
    for (j, m) in step.matches.iter().flatten().enumerate() {
        let mpath = format!("{path}.matches[{j}]");
        if m.path.is_some() {
            out.push(refusal(
                format!("{mpath}.path"),
                "the nginx canary Ingress cannot match on a path: use headers (or a cookie), \
                 or trafficRoutings[].gateway for path matches",
            ));
        }
        if m.query_params.as_ref().is_some_and(|q| !q.is_empty()) {
            out.push(refusal(
                format!("{mpath}.queryParams"),
                "the nginx canary Ingress cannot match on query parameters: use headers (or a \
                 cookie), or trafficRoutings[].gateway for query matches",
            ));
        }
        let hs = m.headers.as_deref().unwrap_or_default();
        if hs.len() > 1 {
            out.push(refusal(
                format!("{mpath}.headers"),
                "the nginx canary Ingress matches one header per match (nginx's canary-by-header)",
            ));
        }
        match hs.first() {
            Some(h) if h.name == crate::traffic::ingress::COOKIE_MATCH_NAME => cookies += 1,
            Some(_) => headers += 1,
            None => {}
        }
    }
    if headers > 1 || cookies > 1 {
        out.push(refusal(
            format!("{path}.matches"),
            "the nginx canary Ingress takes one header match and one cookie match \
             (canary-by-cookie) per step",
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn rollout(name: &str, patch: Value) -> Rollout {
        let mut obj = json!({
            "apiVersion": "rollouts.kruise.io/v1beta1", "kind": "Rollout",
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {
                "workloadRef": {"apiVersion": "leaderworkerset.x-k8s.io/v1",
                    "kind": "LeaderWorkerSet", "name": "vllm"},
                "strategy": {"canary": {
                    "enableExtraWorkloadForCanary": true,
                    "steps": [
                        {"replicas": 1, "traffic": "5%", "pause": {}},
                        {"replicas": "50%", "traffic": "50%", "pause": {"duration": 60}},
                        {"replicas": "100%"}
                    ],
                    "trafficRoutings": [{"service": "vllm-api",
                        "gateway": {"httpRouteName": "vllm"}}]
                }}
            }
        });
        crate::lws::plan::merge_json(&mut obj, patch);
        serde_json::from_value(obj).unwrap()
    }

    fn nginx() -> Value {
        json!({"spec": {"strategy": {"canary": {"trafficRoutings": [{"service": "vllm-api",
            "gateway": null, "ingress": {"name": "web"}}]}}}})
    }

    fn step_patch(step: Value) -> Value {
        json!({"spec": {"strategy": {"canary": {"steps": [step]}}}})
    }

    fn messages(refusals: &[Refusal]) -> String {
        refusals
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ")
    }

    #[test]
    fn a_disaggregated_set_is_released_in_every_style() {
        let set = json!({"spec": {"workloadRef": {"apiVersion": "disaggregatedset.x-k8s.io/v1",
            "kind": "DisaggregatedSet", "name": "pd"}}});
        let with = |extra: Value| {
            let mut p = set.clone();
            crate::lws::plan::merge_json(&mut p, extra);
            validate(&rollout("r", p), None, &[])
        };
        assert_eq!(messages(&with(json!({}))), "");
        let partition = with(json!({"spec": {"strategy": {"canary": {
            "enableExtraWorkloadForCanary": false}}}}));
        assert_eq!(messages(&partition), "");
        let bg = with(json!({"spec": {"strategy": {"canary": null,
            "blueGreen": {"steps": [{"replicas": "100%"}]}}}}));
        assert_eq!(messages(&bg), "");
    }

    #[test]
    fn a_pair_rollouts_service_is_read_on_create_and_when_it_changes() {
        let pair = |service: &str| {
            rollout(
                "r",
                json!({"spec": {"workloadRef": {"apiVersion": "disaggregatedset.x-k8s.io/v1",
                    "kind": "DisaggregatedSet", "name": "pd"},
                    "strategy": {"canary": {"trafficRoutings": [{"service": service}]}}}}),
            )
        };
        let canary_field = "spec.strategy.canary.trafficRoutings[0].service";
        let wanted = |service: &str, field| {
            Some(PairServiceCheck {
                set: "pd".into(),
                service: service.into(),
                field,
            })
        };
        let lws = rollout("r", json!({}));
        let mut no_routing = pair("x");
        no_routing
            .spec
            .strategy
            .canary
            .as_mut()
            .unwrap()
            .traffic_routings = None;
        let mut deleting = pair("pd-prefill");
        deleting.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ));
        // Blue-green routes through its own strategy's trafficRoutings.
        let mut blue_green = pair("x");
        blue_green.spec.strategy = serde_json::from_value(json!({"blueGreen": {
            "steps": [{"replicas": "100%"}], "trafficRoutings": [{"service": "pd-decode"}]}}))
        .unwrap();
        let (prefill, old_name) = (pair("pd-prefill"), pair("pd-old"));
        // (new, old, what admission reads)
        type Case<'a> = (&'a Rollout, Option<&'a Rollout>, Option<PairServiceCheck>);
        let table: Vec<Case> = vec![
            (&prefill, None, wanted("pd-prefill", canary_field)),
            (
                &prefill,
                Some(&old_name),
                wanted("pd-prefill", canary_field),
            ),
            (&prefill, Some(&prefill), None),
            (
                &blue_green,
                None,
                wanted(
                    "pd-decode",
                    "spec.strategy.blueGreen.trafficRoutings[0].service",
                ),
            ),
            (&blue_green, Some(&blue_green), None),
            (&lws, None, None),
            (&no_routing, None, None),
            (&deleting, None, None),
        ];
        for (new, old, want) in table {
            assert_eq!(pair_service_to_check(new, old), want, "{:?}", new.spec);
        }
    }

    #[test]
    fn a_pair_rollouts_service_selecting_no_role_of_the_set_is_refused() {
        let set: crate::api::disaggregatedset::DisaggregatedSet = serde_json::from_value(json!({
            "apiVersion": "disaggregatedset.x-k8s.io/v1", "kind": "DisaggregatedSet",
            "metadata": {"name": "pd", "namespace": "ns"},
            "spec": {"roles": [{"name": "prefill"}, {"name": "decode"}]}
        }))
        .unwrap();
        let service = |role: &str| -> k8s_openapi::api::core::v1::Service {
            serde_json::from_value(json!({"metadata": {"name": "pd-x"},
                "spec": {"selector": {"disaggregatedset.x-k8s.io/name": "pd",
                    "disaggregatedset.x-k8s.io/role": role}}}))
            .unwrap()
        };
        let field = "spec.strategy.canary.trafficRoutings[0].service";
        assert_eq!(pair_service_refusal(field, &set, &service("decode")), None);
        let refused = pair_service_refusal(field, &set, &service("embed")).expect("refused");
        assert_eq!(
            refused.path,
            "spec.strategy.canary.trafficRoutings[0].service"
        );
        for part in ["Service pd-x", "role embed", "prefill, decode"] {
            assert!(refused.message.contains(part), "{refused}");
        }
    }

    /// CREATE: each case is one refusal (path, a piece of its message), or none.
    #[test]
    fn create_refusals_name_the_field_and_what_is_allowed() {
        let with_nginx = |extra: Value| {
            let mut p = nginx();
            crate::lws::plan::merge_json(&mut p, extra);
            p
        };
        // (what, patch of the worked example, the refusal: its path and a piece of its message)
        type Case = (&'static str, Value, Option<(&'static str, &'static str)>);
        let cases: Vec<Case> = vec![
            ("the worked example", json!({}), None),
            (
                "nginx with one header and a cookie",
                with_nginx(step_patch(json!({
                "replicas": 1, "matches": [
                    {"headers": [{"name": "x-canary", "value": "yes"}]},
                    {"headers": [{"name": "canary-by-cookie", "value": "beta"}]}]}))),
                None,
            ),
            (
                "gateway with path, query and header modifier",
                step_patch(json!({
                "replicas": 1, "matches": [{"path": {"type": "PathPrefix", "value": "/v2"},
                    "queryParams": [{"name": "canary", "value": "1"}]}],
                "requestHeaderModifier": {"set": [{"name": "x-release", "value": "canary"}]}})),
                None,
            ),
            (
                "no steps",
                json!({"spec": {"strategy": {"canary": {"steps": []}}}}),
                Some((
                    "spec.strategy.canary.steps",
                    "The number of Canary.Steps cannot be empty",
                )),
            ),
            (
                "replicas missing",
                step_patch(json!({"traffic": "5%"})),
                Some((
                    "spec.strategy.canary.steps[0].replicas",
                    "replicas cannot be empty",
                )),
            ),
            (
                "replicas 0",
                step_patch(json!({"replicas": 0})),
                Some((
                    "spec.strategy.canary.steps[0].replicas",
                    "replicas must be positive number",
                )),
            ),
            (
                "replicas 150%",
                step_patch(json!({"replicas": "150%"})),
                Some(("spec.strategy.canary.steps[0].replicas", "<= \"100%\"")),
            ),
            (
                "traffic 0% on canary",
                step_patch(json!({"replicas": 1, "traffic": "0%"})),
                Some((
                    "spec.strategy.canary.steps[0].traffic",
                    "\"0%\" < traffic <= \"100%\" in canary strategy",
                )),
            ),
            (
                "traffic not a percentage",
                step_patch(json!({"replicas": 1, "traffic": "5"})),
                Some((
                    "spec.strategy.canary.steps[0].traffic",
                    "traffic must be percentage",
                )),
            ),
            (
                "decreasing",
                json!({"spec": {"strategy": {"canary": {"steps": [
                    {"replicas": "50%"}, {"replicas": "20%"}]}}}}),
                Some((
                    "spec.strategy.canary.steps[1].replicas",
                    "Steps.CanaryReplicas must be a non decreasing sequence",
                )),
            ),
            (
                "negative pause",
                step_patch(json!({"replicas": 1, "pause": {"duration": -1}})),
                Some((
                    "spec.strategy.canary.steps[0].pause.duration",
                    "must not be negative",
                )),
            ),
            (
                "two routings",
                json!({"spec": {"strategy": {"canary": {"trafficRoutings": [
                    {"service": "a", "gateway": {"httpRouteName": "a"}},
                    {"service": "b", "gateway": {"httpRouteName": "b"}}]}}}}),
                Some((
                    "spec.strategy.canary.trafficRoutings",
                    "Rollout currently only support single TrafficRouting.",
                )),
            ),
            (
                "no service",
                json!({"spec": {"strategy": {"canary": {"trafficRoutings": [
                    {"service": "", "gateway": {"httpRouteName": "a"}}]}}}}),
                Some((
                    "spec.strategy.canary.trafficRoutings[0].service",
                    "TrafficRouting.Service cannot be empty",
                )),
            ),
            (
                "nothing to route through",
                json!({"spec": {"strategy": {"canary": {"trafficRoutings": [
                    {"service": "a"}]}}}}),
                Some((
                    "spec.strategy.canary.trafficRoutings[0]",
                    "TrafficRoutings are not set",
                )),
            ),
            (
                "negative grace",
                json!({"spec": {"strategy": {"canary": {"trafficRoutings": [
                    {"service": "a", "gracePeriodSeconds": -1, "gateway": {"httpRouteName": "a"}}]}}}}),
                Some((
                    "spec.strategy.canary.trafficRoutings[0].gracePeriodSeconds",
                    "cannot be negative",
                )),
            ),
            (
                "no route name",
                json!({"spec": {"strategy": {"canary": {"trafficRoutings": [
                    {"service": "a", "gateway": {}}]}}}}),
                Some((
                    "spec.strategy.canary.trafficRoutings[0].gateway.httpRouteName",
                    "must set the name of HTTPRoute",
                )),
            ),
            (
                "no ingress name",
                json!({"spec": {"strategy": {"canary": {"trafficRoutings": [
                    {"service": "a", "ingress": {"name": ""}}]}}}}),
                Some((
                    "spec.strategy.canary.trafficRoutings[0].ingress.name",
                    "TrafficRouting.Ingress.Ingress cannot be empty",
                )),
            ),
            (
                "alb ingress",
                json!({"spec": {"strategy": {"canary": {"trafficRoutings": [
                    {"service": "a", "ingress": {"name": "web", "classType": "aliyun-alb"}}]}}}}),
                Some((
                    "spec.strategy.canary.trafficRoutings[0].ingress.classType",
                    "only nginx",
                )),
            ),
            (
                "custom network refs",
                json!({"spec": {"strategy": {"canary": {"trafficRoutings": [
                    {"service": "a", "customNetworkRefs": [{"apiVersion": "networking.istio.io/v1", "kind": "VirtualService", "name": "vs"}]}]}}}}),
                Some((
                    "spec.strategy.canary.trafficRoutings[0].customNetworkRefs",
                    "use ingress (nginx) or gateway",
                )),
            ),
            (
                "traffic routing ref",
                json!({"spec": {"strategy": {"canary": {"trafficRoutingRef": "tr"}}}}),
                Some(("spec.strategy.canary.trafficRoutingRef", "not supported")),
            ),
            (
                "no canary service",
                json!({"spec": {"strategy": {"canary": {"disableGenerateCanaryService": true}}}}),
                Some((
                    "spec.strategy.canary.disableGenerateCanaryService",
                    "<service>-canary",
                )),
            ),
            (
                "traffic without routings",
                json!({"spec": {"strategy": {"canary": {"trafficRoutings": null}}}}),
                Some((
                    "spec.strategy.canary.steps[0]",
                    "need spec.strategy.canary.trafficRoutings",
                )),
            ),
            (
                "nginx path match",
                with_nginx(step_patch(json!({"replicas": 1,
                    "matches": [{"path": {"type": "PathPrefix", "value": "/v2"}}]}))),
                Some((
                    "spec.strategy.canary.steps[0].matches[0].path",
                    "cannot match on a path",
                )),
            ),
            (
                "nginx query match",
                with_nginx(step_patch(json!({"replicas": 1,
                    "matches": [{"queryParams": [{"name": "c", "value": "1"}]}]}))),
                Some((
                    "spec.strategy.canary.steps[0].matches[0].queryParams",
                    "query parameters",
                )),
            ),
            (
                "nginx two headers in a match",
                with_nginx(step_patch(json!({"replicas": 1,
                    "matches": [{"headers": [{"name": "a", "value": "1"}, {"name": "b", "value": "2"}]}]}))),
                Some((
                    "spec.strategy.canary.steps[0].matches[0].headers",
                    "one header per match",
                )),
            ),
            (
                "nginx two header matches",
                with_nginx(step_patch(json!({"replicas": 1,
                    "matches": [{"headers": [{"name": "a", "value": "1"}]}, {"headers": [{"name": "b", "value": "2"}]}]}))),
                Some((
                    "spec.strategy.canary.steps[0].matches",
                    "one header match and one cookie match",
                )),
            ),
            (
                "nginx header modifier",
                with_nginx(step_patch(json!({"replicas": 1, "traffic": "5%",
                    "requestHeaderModifier": {"set": [{"name": "x", "value": "y"}]}}))),
                Some((
                    "spec.strategy.canary.steps[0].requestHeaderModifier",
                    "needs trafficRoutings[].gateway",
                )),
            ),
            (
                "partition style",
                json!({"spec": {"strategy": {"canary": {"enableExtraWorkloadForCanary": false,
                    "trafficRoutings": null, "steps": [{"replicas": 1}]}}}}),
                None,
            ),
            (
                "partition style with traffic routing",
                json!({"spec": {"strategy": {"canary": {"enableExtraWorkloadForCanary": false}}}}),
                None,
            ),
            (
                "partition style with patchPodTemplateMetadata (on the moved leaders)",
                json!({"spec": {"strategy": {"canary": {"enableExtraWorkloadForCanary": false,
                    "trafficRoutings": null, "steps": [{"replicas": 1}],
                    "patchPodTemplateMetadata": {"labels": {"a": "b"}}}}}}),
                None,
            ),
            (
                "blue-green",
                json!({"spec": {"strategy": {"canary": null, "blueGreen": {
                    "steps": [{"replicas": "100%", "traffic": "0%"}],
                    "trafficRoutings": [{"service": "a", "gateway": {"httpRouteName": "a"}}]}}}}),
                None,
            ),
            (
                "blue-green with a canary field",
                json!({"spec": {"strategy": {"canary": null, "blueGreen": {
                    "steps": [{"replicas": "100%"}], "enableExtraWorkloadForCanary": true}}}}),
                Some((
                    "spec.strategy.blueGreen.enableExtraWorkloadForCanary",
                    "a canary field",
                )),
            ),
            (
                "blue-green with canary pod metadata",
                json!({"spec": {"strategy": {"canary": null, "blueGreen": {
                    "steps": [{"replicas": "100%"}],
                    "patchPodTemplateMetadata": {"labels": {"a": "b"}}}}}}),
                Some((
                    "spec.strategy.blueGreen.patchPodTemplateMetadata",
                    "a canary field",
                )),
            ),
            (
                "blue-green traffic without routings",
                json!({"spec": {"strategy": {"canary": null, "blueGreen": {
                    "steps": [{"replicas": "100%", "traffic": "100%"}]}}}}),
                Some((
                    "spec.strategy.blueGreen.steps[0]",
                    "need spec.strategy.blueGreen.trafficRoutings",
                )),
            ),
            (
                "blue-green traffic 101%",
                json!({"spec": {"strategy": {"canary": null, "blueGreen": {
                    "steps": [{"replicas": "100%", "traffic": "101%"}],
                    "trafficRoutings": [{"service": "a", "gateway": {"httpRouteName": "a"}}]}}}}),
                Some((
                    "spec.strategy.blueGreen.steps[0].traffic",
                    "\"0%\" <= traffic <= \"100%\" in blueGreen strategy",
                )),
            ),
            (
                "neither style",
                json!({"spec": {"strategy": {"canary": null}}}),
                Some(("spec.strategy", "Canary and BlueGreen cannot both be empty")),
            ),
            (
                "both styles",
                json!({"spec": {"strategy": {"blueGreen": {"steps": [{"replicas": 1}]}}}}),
                Some(("spec.strategy", "Canary and BlueGreen cannot both be set")),
            ),
            (
                "a deployment",
                json!({"spec": {"workloadRef": {"apiVersion": "apps/v1", "kind": "Deployment"}}}),
                Some((
                    "spec.workloadRef",
                    "only a leaderworkerset.x-k8s.io/v1 LeaderWorkerSet",
                )),
            ),
        ];
        for (what, patch, want) in cases {
            let got = validate(&rollout("vllm", patch), None, &[]);
            match want {
                None => assert!(got.is_empty(), "{what}: refused: {}", messages(&got)),
                Some((path, text)) => {
                    assert!(
                        got.iter()
                            .any(|r| r.path == path && r.message.contains(text)),
                        "{what}: want {path}: …{text}…, got: {}",
                        messages(&got)
                    );
                    // A deployment is refused for its kind and its fields, and both
                    // traffic steps lack a routing; every other case is refused for exactly
                    // the one thing it gets wrong.
                    let several = ["a deployment", "traffic without routings"];
                    if !several.iter().any(|p| what.starts_with(p)) {
                        assert_eq!(got.len(), 1, "{what}: {}", messages(&got));
                    }
                }
            }
        }
    }

    /// Our deadline annotations are checked on create and on an update that changes only them.
    #[test]
    fn bad_deadline_annotations_are_refused_with_what_is_allowed() {
        let bad = json!({"metadata": {"annotations": {
            "lws-rollout.x-k8s.io/progress-deadline-seconds": "10m"}}});
        let got = validate(&rollout("vllm", bad.clone()), None, &[]);
        assert!(
            got.iter().any(|r| r.path == "metadata.annotations"
                && r.message.contains("whole number of seconds")),
            "{}",
            messages(&got)
        );
        let good = rollout("vllm", json!({}));
        let got = validate(&rollout("vllm", bad), Some(&good), &[]);
        assert_eq!(
            got.len(),
            1,
            "an annotation-only update: {}",
            messages(&got)
        );
        let fine = json!({"metadata": {"annotations": {
            "lws-rollout.x-k8s.io/progress-deadline-seconds": "600",
            "lws-rollout.x-k8s.io/rollback-on-deadline": "true"}}});
        assert!(validate(&rollout("vllm", fine), Some(&good), &[]).is_empty());
    }

    /// Kruise's one-Rollout-per-workload rule, with its message; ratcheted on UPDATE so a
    /// duplicate stored before the rule can still be edited (and its finalizer removed).
    #[test]
    fn a_second_rollout_for_one_workload_is_refused_with_kruises_message() {
        let first = rollout("vllm", json!({}));
        let second = rollout("vllm-again", json!({}));
        let got = validate(&second, None, std::slice::from_ref(&first));
        assert_eq!(
            messages(&got),
            "spec.workloadRef: This rollout conflict with Rollout(ns/vllm), one workload only \
             have less than one Rollout"
        );
        // Itself in the list is no conflict; another LWS is none either.
        assert!(validate(&first, None, std::slice::from_ref(&first)).is_empty());
        let elsewhere = rollout("other", json!({"spec": {"workloadRef": {"name": "other"}}}));
        assert!(validate(&elsewhere, None, std::slice::from_ref(&first)).is_empty());
        // A stored duplicate stays editable: disable it, and its finalizer can come off.
        let others = [first.clone(), second.clone()];
        let disabled = rollout("vllm-again", json!({"spec": {"disabled": true}}));
        assert!(validate(&disabled, Some(&second), &others).is_empty());
        let mut finalizer_off = second.clone();
        finalizer_off.metadata.finalizers = None;
        assert!(validate(&finalizer_off, Some(&second), &others).is_empty());
        // Pointing a Rollout at a workload another one releases is refused.
        let moved = rollout("other", json!({}));
        let got = validate(
            &moved,
            Some(&elsewhere),
            &[first.clone(), elsewhere.clone()],
        );
        assert!(
            messages(&got).contains("one workload only have less than one Rollout"),
            "{}",
            messages(&got)
        );
    }

    /// Kruise's immutability while Progressing or Terminating, each with its message; the same
    /// edits are fine while Healthy, and other edits are fine while Progressing.
    #[test]
    fn a_release_in_flight_keeps_its_workload_routing_style_and_step_count() {
        let stored = |phase: &str| {
            let mut r = rollout("vllm", json!({}));
            r.status = Some(crate::api::rollout::RolloutStatus {
                phase: phase.into(),
                ..Default::default()
            });
            r
        };
        let cases: [(&str, Value, &str, &str); 4] = [
            (
                "workload",
                json!({"spec": {"workloadRef": {"name": "other"}}}),
                "spec.workloadRef",
                "Rollout 'ObjectRef' field is immutable",
            ),
            (
                "routing",
                json!({"spec": {"strategy": {"canary": {"trafficRoutings": [
                    {"service": "vllm-api", "gracePeriodSeconds": 10, "gateway": {"httpRouteName": "vllm"}}]}}}}),
                "spec.strategy.canary.trafficRoutings",
                "Rollout 'Strategy.Canary|BlueGreen.TrafficRoutings' field is immutable",
            ),
            (
                "style",
                json!({"spec": {"strategy": {"canary": {"enableExtraWorkloadForCanary": false}}}}),
                "spec.strategy",
                "Rollout style and enableExtraWorkloadForCanary are immutable",
            ),
            (
                "step count",
                json!({"spec": {"strategy": {"canary": {"steps": [
                    {"replicas": 1, "traffic": "5%", "pause": {}}, {"replicas": "100%"}]}}}}),
                "spec.strategy.canary.steps",
                "Amount of Rollout steps are immutable",
            ),
        ];
        for (what, patch, path, text) in cases {
            let new = rollout("vllm", patch);
            for p in ["Progressing", "Terminating"] {
                let got = validate(&new, Some(&stored(p)), &[]);
                assert!(
                    got.iter().any(|r| r.path == path && r.message == text),
                    "{what} while {p}: {}",
                    messages(&got)
                );
            }
            let got = validate(&new, Some(&stored("Healthy")), &[]);
            assert!(
                !got.iter().any(|r| r.message.contains("immutable")),
                "{what} while Healthy: {}",
                messages(&got)
            );
        }
        // Pauses and step sizes may change mid-release (Kruise recomputes the step).
        let resized = rollout(
            "vllm",
            json!({"spec": {"strategy": {"paused": true, "canary": {"steps": [
                {"replicas": 2, "traffic": "10%", "pause": {"duration": 30}},
                {"replicas": "60%", "traffic": "50%", "pause": {}},
                {"replicas": "100%"}]}}}}),
        );
        assert!(validate(&resized, Some(&stored("Progressing")), &[]).is_empty());
    }

    /// On UPDATE only what a change introduces is refused, a Rollout being deleted is never
    /// refused, and another controller's Rollout is left alone.
    #[test]
    fn updates_refuse_only_new_problems() {
        let stored_bad = rollout(
            "vllm",
            json!({"spec": {"strategy": {"canary": {"trafficRoutings": [
                {"service": "a", "customNetworkRefs": [{"apiVersion": "v1", "kind": "X", "name": "x"}]}]}}}}),
        );
        let mut edited = stored_bad.clone();
        edited.spec.disabled = true;
        assert!(validate(&edited, Some(&stored_bad), &[]).is_empty());
        let mut worse = edited.clone();
        worse.spec.strategy.canary.as_mut().unwrap().steps[0].replicas = Some(IntOrString::Int(0));
        let got = validate(&worse, Some(&stored_bad), &[]);
        assert_eq!(got.len(), 1, "{}", messages(&got));
        assert_eq!(got[0].path, "spec.strategy.canary.steps[0].replicas");

        let mut deleting = worse.clone();
        deleting.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::from_second(1_795_327_200).unwrap(),
            ));
        assert!(validate(&deleting, Some(&stored_bad), &[]).is_empty());

        let deployment = json!({"spec": {"workloadRef": {"apiVersion": "apps/v1", "kind": "Deployment"},
            "strategy": {"canary": {"enableExtraWorkloadForCanary": false}}}});
        let stored = rollout("web", deployment.clone());
        let mut updated = rollout("web", deployment);
        updated.spec.strategy.paused = true;
        assert!(validate(&updated, Some(&stored), &[]).is_empty());
    }
}
