//! The Helm chart (charts/lws-rollout) with a real Helm (built from its Go module by
//! test/tools/build-helm.sh): it lints, renders a least-privilege, non-root manager, installs
//! (test/run-tests.sh installs the release the suite's manager runs as), and bad values fail
//! with Helm's own validation (values.schema.json) before anything reaches the cluster.

use std::process::Output;

use anyhow::{Context, anyhow};
use k8s_openapi::api::core::v1::ServiceAccount;

use crate::harness::{kubeconfig_path, with_ns};

/// Set by test/run-tests.sh: the helm binary.
pub const HELM_ENV: &str = "LWS_E2E_HELM";

const CHART: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/charts/lws-rollout");

/// Runs helm against the suite's cluster.
pub fn helm(args: &[&str]) -> anyhow::Result<Output> {
    let bin = std::env::var(HELM_ENV)
        .map_err(|_| anyhow!("{HELM_ENV} is not set: run the e2e tests with test/run-tests.sh"))?;
    std::process::Command::new(&bin)
        .args(args)
        .env("KUBECONFIG", kubeconfig_path()?)
        .output()
        .with_context(|| format!("running {bin}"))
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The chart rendered for `namespace` with `values` (`--set` items), one document each.
pub fn render(namespace: &str, values: &[&str]) -> anyhow::Result<Vec<serde_json::Value>> {
    // `helm template` assumes Kubernetes v1.20 unless told; the chart needs ≥ 1.33.
    let mut args = vec![
        "template",
        "lws-rollout",
        CHART,
        "--namespace",
        namespace,
        "--kube-version",
        "v1.36.3",
    ];
    for v in values {
        args.extend(["--set", v]);
    }
    let out = helm(&args)?;
    anyhow::ensure!(out.status.success(), "helm template failed: {}", text(&out));
    let docs: Vec<serde_json::Value> = serde_yaml::Deserializer::from_slice(&out.stdout)
        .map(serde_json::Value::deserialize)
        .collect::<Result<_, _>>()?;
    Ok(docs.into_iter().filter(|d| !d.is_null()).collect())
}

use serde::Deserialize;

#[test]
fn the_chart_lints_strictly() -> anyhow::Result<()> {
    let out = helm(&["lint", "--strict", CHART])?;
    assert!(out.status.success(), "helm lint --strict: {}", text(&out));
    Ok(())
}

#[test]
fn the_chart_renders_a_non_root_manager_with_its_names_passed_by_flag() -> anyhow::Result<()> {
    let docs = render("lws-system", &["replicas=3", "logFormat=text"])?;
    let kinds: Vec<&str> = docs.iter().filter_map(|d| d["kind"].as_str()).collect();
    for kind in [
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "Service",
        "Deployment",
    ] {
        assert!(kinds.contains(&kind), "{kind} rendered: {kinds:?}");
    }
    let deployment = docs
        .iter()
        .find(|d| d["kind"] == "Deployment")
        .context("a Deployment")?;
    assert_eq!(deployment["metadata"]["namespace"], "lws-system");
    assert_eq!(deployment["spec"]["replicas"], 3);
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    let container = &pod["containers"][0];
    assert_eq!(container["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(
        container["securityContext"]["allowPrivilegeEscalation"],
        false
    );
    assert_eq!(
        container["image"], "ghcr.io/lws-rollout/lws-rollout:0.1.0",
        "the default image is where a release publishes it, tagged with the appVersion"
    );
    let args: Vec<&str> = container["args"]
        .as_array()
        .context("args")?
        .iter()
        .filter_map(|a| a.as_str())
        .collect();
    for want in [
        "--webhook-service=lws-system/lws-rollout-webhook:443",
        "--webhook-configuration=lws-rollout",
        "--webhook-owner=lws-rollout",
        "--webhook-secret=lws-rollout-webhook-cert",
        "--leader-election-id=lws-rollout",
    ] {
        assert!(args.contains(&want), "{want} in {args:?}");
    }
    let env = container["env"].as_array().context("env")?;
    assert!(
        env.iter()
            .any(|e| e["name"] == "LWS_ROLLOUT_LOG_JSON" && e["value"] == "false"),
        "logFormat=text turns JSON logs off: {env:?}"
    );
    assert_eq!(
        pod["containers"][0]["ports"][0]["containerPort"], 8081,
        "the health port also serves /metrics"
    );
    assert_eq!(
        deployment["spec"]["template"]["metadata"]["annotations"]["prometheus.io/path"],
        "/metrics"
    );
    // The names the manager is given are exactly the names its RBAC allows.
    let role = docs
        .iter()
        .find(|d| d["kind"] == "Role")
        .context("a Role")?;
    let names: Vec<&str> = role["rules"]
        .as_array()
        .context("rules")?
        .iter()
        .flat_map(|r| r["resourceNames"].as_array().into_iter().flatten())
        .filter_map(|n| n.as_str())
        .collect();
    assert_eq!(names, ["lws-rollout", "lws-rollout-webhook-cert"]);
    Ok(())
}

/// The rendered Deployment's pod spec and the PodDisruptionBudget, if any.
fn pod_and_budget(
    values: &[&str],
) -> anyhow::Result<(serde_json::Value, Option<serde_json::Value>)> {
    let docs = render("lws-system", values)?;
    let deployment = docs
        .iter()
        .find(|d| d["kind"] == "Deployment")
        .context("a Deployment")?;
    let budget = docs.iter().find(|d| d["kind"] == "PodDisruptionBudget");
    Ok((deployment["spec"]["template"].clone(), budget.cloned()))
}

#[test]
fn the_chart_takes_pull_secrets_flags_env_annotations_and_a_priority_class() -> anyhow::Result<()> {
    let (pod, _) = pod_and_budget(&[
        "imagePullSecrets[0].name=my-registry",
        "extraArgs[0]=--log-thing=1",
        "env[0].name=EXTRA",
        "env[0].value=yes",
        "podAnnotations.team=inference",
        "priorityClassName=system-cluster-critical",
        "topologySpreadConstraints[0].maxSkew=1",
        "topologySpreadConstraints[0].topologyKey=topology.kubernetes.io/zone",
        "topologySpreadConstraints[0].whenUnsatisfiable=ScheduleAnyway",
    ])?;
    let spec = &pod["spec"];
    assert_eq!(
        spec["imagePullSecrets"],
        serde_json::json!([{"name": "my-registry"}])
    );
    assert_eq!(spec["priorityClassName"], "system-cluster-critical");
    assert_eq!(
        spec["topologySpreadConstraints"][0]["topologyKey"],
        "topology.kubernetes.io/zone"
    );
    let container = &spec["containers"][0];
    let args = container["args"].as_array().context("args")?;
    assert_eq!(
        args.last(),
        Some(&serde_json::json!("--log-thing=1")),
        "after the chart's own flags"
    );
    let env = container["env"].as_array().context("env")?;
    assert!(
        env.iter()
            .any(|e| e["name"] == "EXTRA" && e["value"] == "yes"),
        "{env:?}"
    );
    assert!(
        env.iter().any(|e| e["name"] == "POD_NAMESPACE"),
        "the chart's own env kept: {env:?}"
    );
    let annotations = &pod["metadata"]["annotations"];
    assert_eq!(annotations["team"], "inference");
    assert_eq!(
        annotations["prometheus.io/path"], "/metrics",
        "the scrape annotations kept"
    );
    Ok(())
}

#[test]
fn two_replicas_get_a_disruption_budget_and_spread_over_nodes_one_gets_neither()
-> anyhow::Result<()> {
    let (pod, budget) = pod_and_budget(&[])?;
    let budget = budget.context("a PodDisruptionBudget for the default 2 replicas")?;
    assert_eq!(budget["spec"]["maxUnavailable"], 1);
    assert_eq!(
        budget["spec"]["selector"]["matchLabels"]["app.kubernetes.io/instance"],
        "lws-rollout"
    );
    let term = &pod["spec"]["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
        [0];
    assert_eq!(
        term["podAffinityTerm"]["topologyKey"],
        "kubernetes.io/hostname"
    );
    assert_eq!(
        term["podAffinityTerm"]["labelSelector"]["matchLabels"]["app.kubernetes.io/instance"],
        "lws-rollout"
    );

    let (pod, budget) = pod_and_budget(&["replicas=1"])?;
    assert!(
        budget.is_none(),
        "one replica: a budget would block every drain"
    );
    assert!(
        pod["spec"]["affinity"].is_null(),
        "{}",
        pod["spec"]["affinity"]
    );

    let (pod, _) = pod_and_budget(&[
        "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].key=pool",
    ])?;
    assert!(
        pod["spec"]["affinity"]["podAntiAffinity"].is_null(),
        "a user's affinity replaces the default: {}",
        pod["spec"]["affinity"]
    );
    let (_, budget) = pod_and_budget(&["podDisruptionBudget.enabled=false"])?;
    assert!(budget.is_none());
    Ok(())
}

#[test]
fn monitoring_renders_only_when_asked_and_only_where_the_operator_is_served() -> anyhow::Result<()>
{
    let all = [
        "metrics.serviceMonitor.enabled=true",
        "metrics.prometheusRule.enabled=true",
        "metrics.grafanaDashboard.enabled=true",
    ];
    let kinds = |docs: &[serde_json::Value]| -> Vec<String> {
        docs.iter()
            .filter_map(|d| d["kind"].as_str().map(str::to_string))
            .collect()
    };
    let off = kinds(&render("lws-system", &[])?);
    assert!(
        !off.iter()
            .any(|k| k == "ServiceMonitor" || k == "PrometheusRule" || k == "ConfigMap"),
        "nothing by default: {off:?}"
    );
    // Asked for, on a cluster without the Prometheus Operator: no kind the API server would
    // refuse; the dashboard ConfigMap needs nothing but Grafana's sidecar.
    let docs = render("lws-system", &all)?;
    let without = kinds(&docs);
    assert!(
        !without
            .iter()
            .any(|k| k == "ServiceMonitor" || k == "PrometheusRule"),
        "{without:?}"
    );
    let dashboard = docs
        .iter()
        .find(|d| d["kind"] == "ConfigMap")
        .context("the dashboard ConfigMap")?;
    assert_eq!(dashboard["metadata"]["labels"]["grafana_dashboard"], "1");
    let json: serde_json::Value = serde_json::from_str(
        dashboard["data"]["lws-rollout.json"]
            .as_str()
            .context("dashboard JSON")?,
    )?;
    assert_eq!(json["uid"], "lws-rollout");
    // Where the operator's kinds are served.
    let mut args = vec![
        "template",
        "lws-rollout",
        CHART,
        "--namespace",
        "lws-system",
        "--kube-version",
        "v1.36.3",
        "--api-versions",
        "monitoring.coreos.com/v1/ServiceMonitor",
        "--api-versions",
        "monitoring.coreos.com/v1/PrometheusRule",
    ];
    for v in all {
        args.extend(["--set", v]);
    }
    let out = helm(&args)?;
    assert!(out.status.success(), "{}", text(&out));
    let docs: Vec<serde_json::Value> = serde_yaml::Deserializer::from_slice(&out.stdout)
        .map(serde_json::Value::deserialize)
        .collect::<Result<_, _>>()?;
    let monitor = docs
        .iter()
        .find(|d| d["kind"] == "ServiceMonitor")
        .context("a ServiceMonitor")?;
    let service = docs
        .iter()
        .find(|d| d["kind"] == "Service" && d["metadata"]["name"] == "lws-rollout-metrics")
        .context("the metrics Service")?;
    assert_eq!(monitor["spec"]["endpoints"][0]["port"], "metrics");
    assert_eq!(service["spec"]["ports"][0]["name"], "metrics");
    for (k, v) in monitor["spec"]["selector"]["matchLabels"]
        .as_object()
        .context("selector")?
    {
        assert_eq!(
            &service["metadata"]["labels"][k], v,
            "the monitor selects the Service"
        );
    }
    let rules = docs
        .iter()
        .find(|d| d["kind"] == "PrometheusRule")
        .context("a PrometheusRule")?;
    let alerts: Vec<&str> = rules["spec"]["groups"][0]["rules"]
        .as_array()
        .context("rules")?
        .iter()
        .filter_map(|r| r["alert"].as_str())
        .collect();
    assert_eq!(
        alerts,
        [
            "LwsRolloutReleaseStuck",
            "LwsRolloutReleaseRolledBack",
            "LwsRolloutWebhookFailing",
            "LwsRolloutWebhookCertificateExpiring"
        ]
    );
    Ok(())
}

#[tokio::test]
async fn bad_values_fail_with_helms_own_validation_and_install_nothing() -> anyhow::Result<()> {
    with_ns("helm-bad", |ns| async move {
        for (value, complaint) in [
            ("replicas=-1", "/replicas"),
            ("logFormat=xml", "/logFormat"),
            ("healthPort=70000", "/healthPort"),
            ("replica=2", "additional properties"),
            ("imagePullSecret[0].name=reg", "additional properties"),
            ("podDisruptionBudget.enable=false", "/podDisruptionBudget"),
            (
                "metrics.serviceMonitor.enable=true",
                "/metrics/serviceMonitor",
            ),
        ] {
            let out = helm(&[
                "install",
                "bad",
                CHART,
                "--namespace",
                &ns.name,
                "--skip-crds",
                "--set",
                value,
            ])?;
            let said = text(&out);
            assert!(!out.status.success(), "{value} is refused");
            assert!(
                said.contains("values don't meet the specifications of the schema")
                    && said.contains(complaint),
                "{value}: Helm's schema validation names {complaint}: {said}"
            );
        }
        let releases = helm(&["list", "--namespace", &ns.name, "--all", "-q"])?;
        assert!(String::from_utf8_lossy(&releases.stdout).trim().is_empty());
        assert!(
            ns.api::<ServiceAccount>().get_opt("bad").await?.is_none(),
            "nothing was created"
        );
        Ok(())
    })
    .await
}

#[test]
fn the_suites_release_is_deployed() -> anyhow::Result<()> {
    let out = helm(&[
        "status",
        "lws-rollout",
        "--namespace",
        "default",
        "-o",
        "json",
    ])?;
    assert!(out.status.success(), "helm status: {}", text(&out));
    let status: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    assert_eq!(status["info"]["status"], "deployed");
    Ok(())
}
