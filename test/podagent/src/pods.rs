//! Which pods the agent answers for, on which addresses, and how (pure functions of a Pod).

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::str::FromStr;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;

/// Test-only pod annotations that change how the agent answers (documented in
/// docs/local-cluster.md). They let a test play a bad model version without a real one.
pub const STATUS_ANNOTATION: &str = "traffic.lws-rollout.test/status";
pub const DELAY_ANNOTATION: &str = "traffic.lws-rollout.test/delay-ms";
pub const DRAIN_ANNOTATION: &str = "traffic.lws-rollout.test/drain-ms";

const LWS_NAME_LABEL: &str = "leaderworkerset.sigs.k8s.io/name";
const GROUP_INDEX_LABEL: &str = "leaderworkerset.sigs.k8s.io/group-index";
const WORKER_INDEX_LABEL: &str = "leaderworkerset.sigs.k8s.io/worker-index";
const REVISION_LABEL: &str = "leaderworkerset.sigs.k8s.io/template-revision-hash";

/// An IPv4 range `a.b.c.d/n`: the agent binds only inside the cluster's own pod range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cidr {
    base: u32,
    mask: u32,
}

impl Cidr {
    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        u32::from(ip) & self.mask == self.base
    }
}

impl FromStr for Cidr {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (ip, len) = s
            .split_once('/')
            .ok_or_else(|| format!("{s}: not a.b.c.d/n"))?;
        let ip: Ipv4Addr = ip.parse().map_err(|e| format!("{s}: {e}"))?;
        let len: u32 = len.parse().map_err(|e| format!("{s}: {e}"))?;
        if len > 32 {
            return Err(format!("{s}: prefix longer than 32"));
        }
        let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
        Ok(Cidr {
            base: u32::from(ip) & mask,
            mask,
        })
    }
}

/// How a pod answers, from its annotations.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Behaviour {
    pub status: u16,
    pub delay: Duration,
    /// How long the pod keeps answering after it is deleted (None: the agent's default).
    pub drain: Option<Duration>,
}

/// What the agent says about the pod in every answer.
#[derive(Clone, Debug, PartialEq)]
pub struct PodInfo {
    pub uid: String,
    pub namespace: String,
    pub name: String,
    pub lws: Option<String>,
    pub group_index: Option<String>,
    pub worker_index: Option<String>,
    pub revision: Option<String>,
    pub container: String,
    pub image: String,
    /// vLLM's `model_name` label: the first `--served-model-name`, else the image.
    pub model_name: String,
    pub behaviour: Behaviour,
    /// A bad model's faults, from the first container's env (`vllm::Faults`).
    pub faults: crate::vllm::Faults,
    /// The pod's labels (Prometheus's target labels).
    pub labels: BTreeMap<String, String>,
}

/// Reads the test annotations; a malformed value is ignored (the pod answers normally), as a
/// wrong annotation must not look like a deliberately failing pod.
pub fn behaviour(annotations: &BTreeMap<String, String>) -> Behaviour {
    let status = annotations
        .get(STATUS_ANNOTATION)
        .and_then(|v| v.trim().parse::<u16>().ok())
        .filter(|s| (200..=599).contains(s))
        .unwrap_or(200);
    let ms = |key: &str| {
        annotations
            .get(key)
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_millis)
    };
    Behaviour {
        status,
        delay: ms(DELAY_ANNOTATION).unwrap_or_default(),
        drain: ms(DRAIN_ANNOTATION),
    }
}

/// Running, ready and not being deleted: the agent answers for it. Ready is the pod's `Ready`
/// condition, or its `ContainersReady` one: the node lifecycle controller sets only `Ready` to
/// False when a node's heartbeats lapse (after a long API-server outage), and that takes the
/// pod out of its Services but does not stop its containers — a real pod keeps answering
/// whoever still sends to it, so the agent does too (`stages/pod-ready-again.yaml` then sets
/// `Ready` back, as a kubelet would).
pub fn is_serving(pod: &Pod) -> bool {
    if pod.metadata.deletion_timestamp.is_some() {
        return false;
    }
    let Some(status) = &pod.status else {
        return false;
    };
    status.phase.as_deref() == Some("Running")
        && status
            .conditions
            .iter()
            .flatten()
            .any(|c| (c.type_ == "Ready" || c.type_ == "ContainersReady") && c.status == "True")
}

pub fn is_terminating(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
}

/// Every TCP `containerPort` of the pod on its pod IP (inside `range`), with what to answer there.
/// A pod without a pod IP in the range, or without a containerPort, has none.
pub fn endpoints(pod: &Pod, range: &Cidr) -> Vec<(SocketAddr, PodInfo)> {
    let Some(ip) = pod
        .status
        .as_ref()
        .and_then(|s| s.pod_ip.as_deref())
        .and_then(|ip| ip.parse::<Ipv4Addr>().ok())
        .filter(|ip| range.contains(*ip))
    else {
        return Vec::new();
    };
    let Some(spec) = &pod.spec else {
        return Vec::new();
    };
    let labels = pod.metadata.labels.clone().unwrap_or_default();
    let annotations = pod.metadata.annotations.clone().unwrap_or_default();
    let behaviour = behaviour(&annotations);
    let faults = spec
        .containers
        .first()
        .map(|c| {
            crate::vllm::Faults::from_env(
                c.env
                    .iter()
                    .flatten()
                    .filter_map(|e| Some((e.name.as_str(), e.value.as_deref()?))),
            )
        })
        .unwrap_or_default();
    let mut out = Vec::new();
    for c in &spec.containers {
        for p in c.ports.iter().flatten() {
            if p.protocol.as_deref().unwrap_or("TCP") != "TCP"
                || !(1..=65535).contains(&p.container_port)
            {
                continue;
            }
            let info = PodInfo {
                uid: pod.metadata.uid.clone().unwrap_or_default(),
                namespace: pod.metadata.namespace.clone().unwrap_or_default(),
                name: pod.metadata.name.clone().unwrap_or_default(),
                lws: labels.get(LWS_NAME_LABEL).cloned(),
                group_index: labels.get(GROUP_INDEX_LABEL).cloned(),
                worker_index: labels.get(WORKER_INDEX_LABEL).cloned(),
                revision: labels.get(REVISION_LABEL).cloned(),
                container: c.name.clone(),
                image: c.image.clone().unwrap_or_default(),
                model_name: crate::vllm::model_name(
                    c.image.as_deref().unwrap_or_default(),
                    c.command
                        .iter()
                        .chain(c.args.iter())
                        .flatten()
                        .map(String::as_str),
                ),
                behaviour: behaviour.clone(),
                faults: faults.clone(),
                labels: labels.clone(),
            };
            out.push((SocketAddr::from((ip, p.container_port as u16)), info));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(v: serde_json::Value) -> Pod {
        serde_json::from_value(v).unwrap()
    }

    fn ready_pod(ip: &str, ports: serde_json::Value) -> Pod {
        pod(json!({
            "metadata": {"name": "vllm-0", "namespace": "demo", "uid": "u1",
                "labels": {"leaderworkerset.sigs.k8s.io/name": "vllm",
                    "leaderworkerset.sigs.k8s.io/group-index": "0",
                    "leaderworkerset.sigs.k8s.io/template-revision-hash": "abc"},
                "annotations": {"traffic.lws-rollout.test/status": "500"}},
            "spec": {"containers": [{"name": "srv", "image": "vllm:1", "ports": ports}]},
            "status": {"phase": "Running", "podIP": ip,
                "conditions": [{"type": "Ready", "status": "True"}]}
        }))
    }

    #[test]
    fn a_pod_the_node_controller_marked_unready_keeps_answering_one_whose_containers_failed_does_not()
     {
        let with = |conditions: serde_json::Value| {
            let mut p = ready_pod("198.18.32.1", json!([{"containerPort": 8000}]));
            p.status.as_mut().unwrap().conditions = serde_json::from_value(conditions).unwrap();
            p
        };
        let node_lapsed = with(json!([{"type": "Ready", "status": "False"},
                                      {"type": "ContainersReady", "status": "True"}]));
        let failed = with(json!([{"type": "Ready", "status": "False"},
                                 {"type": "ContainersReady", "status": "False"}]));
        assert!(is_serving(&node_lapsed));
        assert!(!is_serving(&failed));
    }

    #[test]
    fn cidr_contains_only_its_range() {
        let c: Cidr = "198.18.32.0/19".parse().unwrap();
        assert!(c.contains("198.18.32.1".parse().unwrap()));
        assert!(c.contains("198.18.63.255".parse().unwrap()));
        assert!(!c.contains("198.18.64.0".parse().unwrap()));
        assert!(!c.contains("127.0.0.1".parse().unwrap()));
        assert!("1.2.3.4/33".parse::<Cidr>().is_err());
        assert!("1.2.3.4".parse::<Cidr>().is_err());
    }

    #[test]
    fn a_ready_pod_answers_on_each_tcp_container_port_in_range() {
        let p = ready_pod(
            "198.18.0.7",
            json!([{"containerPort": 8080}, {"containerPort": 53, "protocol": "UDP"}, {"containerPort": 6379}]),
        );
        assert!(is_serving(&p));
        let eps = endpoints(&p, &"198.18.0.0/19".parse().unwrap());
        let addrs: Vec<String> = eps.iter().map(|(a, _)| a.to_string()).collect();
        assert_eq!(addrs, ["198.18.0.7:8080", "198.18.0.7:6379"]);
        let info = &eps[0].1;
        assert_eq!(info.lws.as_deref(), Some("vllm"));
        assert_eq!(info.revision.as_deref(), Some("abc"));
        assert_eq!(info.image, "vllm:1");
        assert_eq!(info.behaviour.status, 500);
    }

    #[test]
    fn no_port_or_foreign_ip_means_not_served() {
        let range: Cidr = "198.18.0.0/19".parse().unwrap();
        assert!(endpoints(&ready_pod("198.18.0.7", json!(null)), &range).is_empty());
        assert!(
            endpoints(
                &ready_pod("10.244.0.7", json!([{"containerPort": 80}])),
                &range
            )
            .is_empty()
        );
        assert!(
            endpoints(
                &ready_pod("198.18.99.7", json!([{"containerPort": 80}])),
                &range
            )
            .is_empty()
        );
    }

    #[test]
    fn unready_pending_or_deleting_pods_are_not_serving() {
        let mut p = ready_pod("198.18.0.7", json!([{"containerPort": 80}]));
        p.status.as_mut().unwrap().conditions.as_mut().unwrap()[0].status = "False".into();
        assert!(!is_serving(&p));
        let mut p = ready_pod("198.18.0.7", json!([{"containerPort": 80}]));
        p.status.as_mut().unwrap().phase = Some("Pending".into());
        assert!(!is_serving(&p));
        let mut p = ready_pod("198.18.0.7", json!([{"containerPort": 80}]));
        p.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
        ));
        assert!(!is_serving(&p));
        assert!(is_terminating(&p));
    }

    #[test]
    fn behaviour_annotations_parse_and_bad_values_are_ignored() {
        let a = |pairs: &[(&str, &str)]| {
            behaviour(
                &pairs
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            )
        };
        assert_eq!(
            a(&[]),
            Behaviour {
                status: 200,
                delay: Duration::ZERO,
                drain: None
            }
        );
        let b = a(&[
            (STATUS_ANNOTATION, "503"),
            (DELAY_ANNOTATION, "250"),
            (DRAIN_ANNOTATION, "0"),
        ]);
        assert_eq!(
            b,
            Behaviour {
                status: 503,
                delay: Duration::from_millis(250),
                drain: Some(Duration::ZERO)
            }
        );
        assert_eq!(
            a(&[(STATUS_ANNOTATION, "99"), (DELAY_ANNOTATION, "x")]).status,
            200
        );
        assert_eq!(a(&[(STATUS_ANNOTATION, "abc")]).status, 200);
    }
}
