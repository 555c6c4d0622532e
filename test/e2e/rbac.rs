//! Least privilege, proven on the suite itself. test/run-tests.sh runs the suite's manager as
//! the chart's ServiceAccount (impersonation) with the API server's audit log on, and once
//! every other test has passed runs this check (ignored in the normal run: it must come last):
//! no request of the manager was forbidden (a missing rule would also have failed a test), and
//! every verb the chart grants was used — a rule nothing used is reported, unless it is listed
//! below with the reason the suite cannot show it.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{Context, anyhow};

use crate::helm_chart::render;

/// Set by test/run-tests.sh: the API server's audit log (JSON lines).
pub const AUDIT_LOG_ENV: &str = "LWS_E2E_AUDIT_LOG";
/// The user the suite's manager acts as.
const MANAGER: &str = "system:serviceaccount:default:lws-rollout";

/// (API group, resource[/subresource], verb).
type Grant = (String, String, String);

/// Granted but not shown used by the suite, and why.
const NOT_SHOWN: &[(&str, &str, &str, &str)] = &[
    (
        "rbac.authorization.k8s.io",
        "clusterroles",
        "get",
        "the webhook configurations' owner (--webhook-owner, which test/run-tests.sh does not pass to the suite's manager): uninstall.rs runs a manager with it as this ServiceAccount on a cluster of its own",
    ),
    (
        "admissionregistration.k8s.io",
        "*",
        "create",
        "a server-side apply that creates is also authorized as create, inside the patch request: the audit log shows only the patch (without create the manager cannot start: measured)",
    ),
    (
        "leaderworkerset.x-k8s.io",
        "leaderworkersets",
        "create",
        "the canary LWS is server-side applied: create is checked inside the patch request",
    ),
    (
        "rollouts.kruise.io",
        "batchreleases",
        "create",
        "the BatchRelease is server-side applied: create is checked inside the patch request",
    ),
    (
        "",
        "secrets",
        "update",
        "renewing the shared webhook certificate, due months after issue (webhook_cert.rs renews through the same library call, as the admin)",
    ),
    (
        "kueue.x-k8s.io",
        "workloads",
        "patch",
        "an owner reference on a MultiKueue worker's group Workload: kueue_multikueue.rs shows it on its own pair of clusters (MultiKueue needs two), as the admin",
    ),
    (
        "coordination.k8s.io",
        "leases",
        "list",
        "a standby watches the Lease; the suite's manager leads from its start (failover.rs shows standing by, as the admin)",
    ),
    ("coordination.k8s.io", "leases", "watch", "as list"),
    (
        "apps",
        "statefulsets",
        "delete",
        "a worker StatefulSet created for a leader replaced during the same reconcile (src/lws/apply.rs remove_stale_workers): a race the suite hits only sometimes (kueue::kueue_gates_groups_beyond_quota_and_scales_both_ways hit it; without the verb the delete was forbidden)",
    ),
    (
        "kueue.x-k8s.io",
        "workloads",
        "watch",
        "only where Kueue's CRD exists: the suite's cluster runs Kueue by default and the watch is used there; with LWS_CLUSTER_KUEUE=0 the list answers 404 and no watch follows (docs/kueue.md)",
    ),
    (
        "networking.k8s.io",
        "ingresses",
        "*",
        "the canary Ingress of an nginx release (traffic_plan.rs runs that plan as the admin)",
    ),
];

fn not_shown(grant: &Grant) -> Option<&'static str> {
    NOT_SHOWN.iter().find_map(|(g, r, v, why)| {
        (grant.0 == *g
            && (*r == "*" || grant.1.split('/').next() == Some(r))
            && (*v == "*" || grant.2 == *v))
            .then_some(*why)
    })
}

/// Every (group, resource, verb) the rendered chart grants.
fn granted() -> anyhow::Result<BTreeSet<Grant>> {
    let mut out = BTreeSet::new();
    for doc in render("default", &[])? {
        if !matches!(doc["kind"].as_str(), Some("ClusterRole" | "Role")) {
            continue;
        }
        for rule in doc["rules"].as_array().into_iter().flatten() {
            let list = |k: &str| -> Vec<String> {
                rule[k]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|v| v.as_str().map(String::from))
                    .collect()
            };
            for group in list("apiGroups") {
                for resource in list("resources") {
                    for verb in list("verbs") {
                        out.insert((group.clone(), resource.clone(), verb));
                    }
                }
            }
        }
    }
    Ok(out)
}

#[tokio::test]
#[ignore = "run last by test/run-tests.sh, over the audit log of the whole suite"]
async fn every_granted_verb_is_used_and_nothing_was_forbidden() -> anyhow::Result<()> {
    let path = std::env::var(AUDIT_LOG_ENV)
        .map_err(|_| anyhow!("{AUDIT_LOG_ENV} is not set: test/run-tests.sh runs this check"))?;
    let log = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    let mut used: BTreeMap<Grant, u64> = BTreeMap::new();
    let mut forbidden = BTreeSet::new();
    for line in log.lines() {
        let Ok(event) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if event["impersonatedUser"]["username"] != MANAGER {
            continue;
        }
        let object = &event["objectRef"];
        let mut resource = object["resource"].as_str().unwrap_or_default().to_string();
        if let Some(sub) = object["subresource"].as_str() {
            resource = format!("{resource}/{sub}");
        }
        let grant = (
            object["apiGroup"].as_str().unwrap_or_default().to_string(),
            resource,
            event["verb"].as_str().unwrap_or_default().to_string(),
        );
        // Only RBAC's refusals: a namespace being deleted also answers 403.
        let message = event["responseStatus"]["message"]
            .as_str()
            .unwrap_or_default();
        if event["responseStatus"]["code"] == 403 && message.contains(" cannot ") {
            forbidden.insert((
                grant,
                object["name"].as_str().unwrap_or_default().to_string(),
            ));
        } else {
            *used.entry(grant).or_default() += 1;
        }
    }
    eprintln!("requests the manager made as {MANAGER} (group, resource, verb: count):");
    for ((g, r, v), n) in &used {
        eprintln!("  {g:>28} {r:<34} {v:<7} {n}");
    }
    assert!(
        !used.is_empty(),
        "the audit log {path} holds requests of {MANAGER}"
    );
    let granted = granted()?;
    let mut unused = Vec::new();
    for grant in &granted {
        if used.contains_key(grant) {
            continue;
        }
        match not_shown(grant) {
            Some(why) => eprintln!("granted, not shown by the suite: {grant:?}: {why}"),
            None => unused.push(grant.clone()),
        }
    }
    assert!(
        forbidden.is_empty(),
        "requests of the manager were forbidden: {forbidden:?}; unused grants: {unused:?}"
    );
    assert!(
        unused.is_empty(),
        "the chart grants verbs the manager never used in the suite (drop them, or list them in NOT_SHOWN with the reason): {unused:?}"
    );
    Ok(())
}
