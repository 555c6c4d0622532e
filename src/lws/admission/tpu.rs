//! The TPU environment of an LWS pod (upstream's `AddTPUVariables`): `TPU_WORKER_HOSTNAMES`,
//! `TPU_WORKER_ID`, `TPU_NAME`, `TPU_PROCESS_ADDRESSES` and `TPU_PROCESS_PORT` in every
//! container that requests `google.com/tpu` (with subgroups, in the first one), listing the hosts
//! of its group or subgroup. Part of the pod defaults ([`super::pod_defaults`]).

use k8s_openapi::api::core::v1::{Container, EnvVar, Pod};
use kube::ResourceExt;

use super::error::PodDefaultError;
use crate::lws::{labels, objects::parent_and_ordinal, upstream::quantity};

pub(super) const TPU: &str = "google.com/tpu";
const TPU_DEFAULT_PORT: &str = "8476";
const TPU_DEFAULT_PORT_NUMBER: i32 = 8476;

fn requests_tpus(c: &Container) -> bool {
    let nonzero = |m: &Option<
        std::collections::BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
    >| {
        m.as_ref()
            .and_then(|m| m.get(TPU))
            .is_some_and(|q| quantity::canonical(&q.0).is_ok_and(|v| v != "0"))
    };
    c.resources
        .as_ref()
        .is_some_and(|r| nonzero(&r.limits) || nonzero(&r.requests))
}

/// Upstream v0.9's `AddTPUVariables`: no-op unless a container requests TPUs and the first
/// such container has neither `TPU_WORKER_HOSTNAMES` nor `TPU_WORKER_ID` yet. With subgroups,
/// the first TPU container gets its subgroup's hosts (as in v0.8); otherwise every TPU
/// container does (v0.9, #754): each pod is listed once per TPU container, container `i` on port
/// `8476 + i` unless it names its own `TPU_PROCESS_PORT`, and the worker id counts containers
/// (`pod index × containers + i`).
pub(super) fn add_tpu_variables(pod: &mut Pod, size: i32) -> Result<(), PodDefaultError> {
    let name = pod.name_any();
    let labels_ = pod.labels().clone();
    let annotations = pod.annotations().clone();
    let Some(spec) = pod.spec.as_mut() else {
        return Ok(());
    };
    let subdomain = spec.subdomain.clone().unwrap_or_default();
    let mut containers: Vec<&mut Container> = spec
        .containers
        .iter_mut()
        .chain(spec.init_containers.iter_mut().flatten())
        .filter(|c| requests_tpus(c))
        .collect();
    let Some(first) = containers.first() else {
        return Ok(());
    };
    if first
        .env
        .iter()
        .flatten()
        .any(|e| e.name == "TPU_WORKER_HOSTNAMES" || e.name == "TPU_WORKER_ID")
    {
        return Ok(());
    }
    let user_port = |c: &Container| {
        c.env
            .iter()
            .flatten()
            .find(|e| e.name == "TPU_PROCESS_PORT")
            .map(|e| e.value.clone().unwrap_or_default())
    };
    let is_leader = labels_.get(labels::WORKER_INDEX).map(String::as_str) == Some("0");
    let leader_has_tpus = annotations
        .get(labels::LEADER_REQUESTS_TPUS)
        .map(String::as_str)
        == Some("true");
    let parent = |n: &str| {
        parent_and_ordinal(n)
            .map(|(p, _)| p.to_string())
            .ok_or_else(|| PodDefaultError::NoOrdinal(n.to_string()))
    };
    let var = |name: &str, value: String| EnvVar {
        name: name.into(),
        value: Some(value),
        value_from: None,
    };

    if let Some(sgs) = annotations.get(labels::SUBGROUP_SIZE) {
        let num = |key: &'static str, v: Option<&String>| -> Result<i32, PodDefaultError> {
            let v = v.cloned().unwrap_or_default();
            v.parse().map_err(|_| PodDefaultError::NotANumber {
                pod: name.clone(),
                key,
                value: v,
            })
        };
        let sgs = num(labels::SUBGROUP_SIZE, Some(sgs))?.max(1);
        let mut subgroup = num(labels::SUBGROUP_INDEX, labels_.get(labels::SUBGROUP_INDEX))?;
        let worker = num(labels::WORKER_INDEX, labels_.get(labels::WORKER_INDEX))?;
        // Without TPUs on the leader the TPU hosts are the workers alone, numbered from worker
        // 1 (v0.10, #918: the leader keeps id 0 and its own subgroup; v0.9 gave it id -1).
        let worker_id = if worker != 0 && !leader_has_tpus {
            subgroup = (worker - 1) / sgs;
            (worker - 1) % sgs
        } else {
            worker % sgs
        };
        let mut hosts: Vec<String> = Vec::new();
        let leader;
        let (mut start, mut end) = (sgs * subgroup + 1, sgs * (subgroup + 1));
        if is_leader {
            leader = name.clone();
            hosts.push(leader.clone());
            end -= 1;
        } else {
            leader = parent(&name)?;
            if leader_has_tpus && subgroup == 0 {
                end -= 1;
                hosts.push(leader.clone());
            } else if leader_has_tpus {
                start -= 1;
                end -= 1;
            }
        }
        hosts.extend((start..=end).map(|i| format!("{leader}-{i}")));
        let container = &mut containers[0];
        let own_port = user_port(container);
        let port = own_port
            .clone()
            .unwrap_or_else(|| TPU_DEFAULT_PORT.to_string());
        let env = container.env.get_or_insert_with(Vec::new);
        env.push(var(
            "TPU_WORKER_HOSTNAMES",
            hosts
                .iter()
                .map(|h| format!("{h}.{subdomain}"))
                .collect::<Vec<_>>()
                .join(","),
        ));
        env.push(var("TPU_WORKER_ID", worker_id.to_string()));
        env.push(var("TPU_NAME", leader));
        env.push(var(
            "TPU_PROCESS_ADDRESSES",
            hosts
                .iter()
                .map(|h| format!("{h}.{subdomain}:{port}"))
                .collect::<Vec<_>>()
                .join(","),
        ));
        if own_port.is_none() {
            env.push(var("TPU_PROCESS_PORT", port));
        }
        return Ok(());
    }

    let (leader, pod_index) = if is_leader {
        (name.clone(), 0)
    } else {
        let ordinal = parent_and_ordinal(&name)
            .map(|(_, i)| i)
            .ok_or_else(|| PodDefaultError::NoOrdinal(name.clone()))?;
        (
            parent(&name)?,
            if leader_has_tpus {
                ordinal
            } else {
                ordinal - 1
            },
        )
    };
    let count = i32::try_from(containers.len()).unwrap_or(i32::MAX);
    let own_ports: Vec<Option<String>> = containers.iter().map(|c| user_port(c)).collect();
    let ports: Vec<String> = own_ports
        .iter()
        .zip(0..)
        .map(|(own, i)| {
            own.clone()
                .unwrap_or_else(|| (TPU_DEFAULT_PORT_NUMBER + i).to_string())
        })
        .collect();
    let mut pods: Vec<String> = Vec::new();
    if leader_has_tpus || is_leader {
        pods.push(leader.clone());
    }
    pods.extend((1..size).map(|i| format!("{leader}-{i}")));
    let subdomain = subdomain.as_str();
    let hostnames = pods
        .iter()
        .flat_map(|p| ports.iter().map(move |_| format!("{p}.{subdomain}")))
        .collect::<Vec<_>>()
        .join(",");
    let addresses = pods
        .iter()
        .flat_map(|p| {
            ports
                .iter()
                .map(move |port| format!("{p}.{subdomain}:{port}"))
        })
        .collect::<Vec<_>>()
        .join(",");
    for ((container, i), (own, port)) in containers
        .iter_mut()
        .zip(0..)
        .zip(own_ports.iter().zip(&ports))
    {
        let env = container.env.get_or_insert_with(Vec::new);
        env.push(var("TPU_WORKER_HOSTNAMES", hostnames.clone()));
        env.push(var("TPU_WORKER_ID", (pod_index * count + i).to_string()));
        env.push(var("TPU_NAME", leader.clone()));
        env.push(var("TPU_PROCESS_ADDRESSES", addresses.clone()));
        if own.is_none() {
            env.push(var("TPU_PROCESS_PORT", port.clone()));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::pod_defaults::{default_pod, tests::*};
    use super::*;

    #[test]
    fn tpu_variables_match_upstream_e2e_expectations() {
        // Upstream's e2e: size 2, leader and worker request TPUs (Shared and UniquePerReplica).
        let mut leader = tpu_pod(
            "test-sample-0",
            json!({labels::NAME: "test-sample", labels::WORKER_INDEX: "0"}),
            json!({labels::SIZE: "2"}),
            "test-sample",
        );
        default_pod(&mut leader).unwrap();
        assert_eq!(
            var(&leader, "TPU_WORKER_HOSTNAMES").as_deref(),
            Some("test-sample-0.test-sample,test-sample-0-1.test-sample")
        );
        assert_eq!(var(&leader, "TPU_WORKER_ID").as_deref(), Some("0"));
        assert_eq!(var(&leader, "TPU_NAME").as_deref(), Some("test-sample-0"));
        assert_eq!(var(&leader, "TPU_PROCESS_PORT").as_deref(), Some("8476"));
        assert_eq!(
            var(&leader, "TPU_PROCESS_ADDRESSES").as_deref(),
            Some("test-sample-0.test-sample:8476,test-sample-0-1.test-sample:8476")
        );
        assert_eq!(
            env(&leader, 0)[0].0,
            "LWS_LEADER_ADDRESS",
            "LWS variables still come first"
        );

        let mut worker = tpu_pod(
            "test-sample-0-1",
            json!({labels::NAME: "test-sample", labels::GROUP_INDEX: "0"}),
            json!({labels::SIZE: "2", labels::LEADER_REQUESTS_TPUS: "true", labels::LEADER_NAME: "test-sample-0"}),
            "test-sample-0",
        );
        default_pod(&mut worker).unwrap();
        assert_eq!(
            var(&worker, "TPU_WORKER_HOSTNAMES").as_deref(),
            Some("test-sample-0.test-sample-0,test-sample-0-1.test-sample-0")
        );
        assert_eq!(var(&worker, "TPU_WORKER_ID").as_deref(), Some("1"));
    }

    /// v0.9 (#754): every TPU container gets the variables; each pod is listed once per TPU
    /// container, container `i` on port 8476 + i (or its own), ids counting containers.
    /// Upstream's unit and e2e cases (replicas 2, size 2, two TPU containers).
    #[test]
    fn every_tpu_container_gets_the_variables() {
        let two = |name: &str, labels: serde_json::Value, annotations: serde_json::Value| {
            let mut p = pod(name, labels, annotations, "default");
            let tpu = json!({"limits": {TPU: "4"}});
            let spec = p.spec.as_mut().unwrap();
            spec.containers[0].resources = Some(serde_json::from_value(tpu.clone()).unwrap());
            spec.containers
                .push(serde_json::from_value(json!({"name": "c2", "resources": tpu})).unwrap());
            p
        };
        let value = |p: &Pod, container: usize, name: &str| {
            env(p, container)
                .into_iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v)
        };
        let hosts = "test-sample-0.default,test-sample-0.default,test-sample-0-1.default,test-sample-0-1.default";
        let mut leader = two(
            "test-sample-0",
            json!({labels::NAME: "test-sample", labels::WORKER_INDEX: "0"}),
            json!({labels::SIZE: "2"}),
        );
        default_pod(&mut leader).unwrap();
        for (c, id, port) in [(0, "0", "8476"), (1, "1", "8477")] {
            assert_eq!(
                value(&leader, c, "TPU_WORKER_HOSTNAMES").as_deref(),
                Some(hosts)
            );
            assert_eq!(value(&leader, c, "TPU_WORKER_ID").as_deref(), Some(id));
            assert_eq!(
                value(&leader, c, "TPU_NAME").as_deref(),
                Some("test-sample-0")
            );
            assert_eq!(value(&leader, c, "TPU_PROCESS_PORT").as_deref(), Some(port));
            assert_eq!(
                value(&leader, c, "TPU_PROCESS_ADDRESSES").as_deref(),
                Some(
                    "test-sample-0.default:8476,test-sample-0.default:8477,test-sample-0-1.default:8476,test-sample-0-1.default:8477"
                )
            );
        }
        let mut worker = two(
            "test-sample-0-1",
            json!({labels::NAME: "test-sample", labels::GROUP_INDEX: "0"}),
            json!({labels::SIZE: "2", labels::LEADER_REQUESTS_TPUS: "true", labels::LEADER_NAME: "test-sample-0"}),
        );
        default_pod(&mut worker).unwrap();
        assert_eq!(value(&worker, 0, "TPU_WORKER_ID").as_deref(), Some("2"));
        assert_eq!(value(&worker, 1, "TPU_WORKER_ID").as_deref(), Some("3"));
        assert_eq!(
            value(&worker, 1, "TPU_WORKER_HOSTNAMES").as_deref(),
            Some(hosts)
        );

        // Custom ports per container are used in the addresses and not repeated.
        let mut custom = two(
            "test-sample-0",
            json!({labels::NAME: "test-sample", labels::WORKER_INDEX: "0"}),
            json!({labels::SIZE: "2"}),
        );
        for (c, port) in custom
            .spec
            .as_mut()
            .unwrap()
            .containers
            .iter_mut()
            .zip(["8478", "8479"])
        {
            c.env = Some(vec![EnvVar {
                name: "TPU_PROCESS_PORT".into(),
                value: Some(port.into()),
                value_from: None,
            }]);
        }
        default_pod(&mut custom).unwrap();
        assert_eq!(
            value(&custom, 0, "TPU_PROCESS_ADDRESSES").as_deref(),
            Some(
                "test-sample-0.default:8478,test-sample-0.default:8479,test-sample-0-1.default:8478,test-sample-0-1.default:8479"
            )
        );
        assert_eq!(
            env(&custom, 1)
                .iter()
                .filter(|(n, _)| n == "TPU_PROCESS_PORT")
                .count(),
            1
        );
    }

    #[test]
    fn tpu_ids_shift_when_the_leader_has_no_tpus_and_subgroups_list_their_own_hosts() {
        let mut worker = tpu_pod(
            "g-0-2",
            json!({labels::NAME: "g"}),
            json!({labels::SIZE: "3", labels::LEADER_NAME: "g-0"}),
            "g",
        );
        default_pod(&mut worker).unwrap();
        assert_eq!(
            var(&worker, "TPU_WORKER_HOSTNAMES").as_deref(),
            Some("g-0-1.g,g-0-2.g")
        );
        assert_eq!(var(&worker, "TPU_WORKER_ID").as_deref(), Some("1"));

        // size 5, subgroups of 2, leader without TPUs: worker 3 is in subgroup 1 with worker 4.
        let mut sub = tpu_pod(
            "g-0-3",
            json!({labels::NAME: "g"}),
            json!({labels::SIZE: "5", labels::SUBGROUP_SIZE: "2", labels::LEADER_NAME: "g-0"}),
            "g",
        );
        default_pod(&mut sub).unwrap();
        assert_eq!(
            var(&sub, "TPU_WORKER_HOSTNAMES").as_deref(),
            Some("g-0-3.g,g-0-4.g")
        );
        assert_eq!(var(&sub, "TPU_WORKER_ID").as_deref(), Some("0"));
        assert_eq!(var(&sub, "TPU_NAME").as_deref(), Some("g-0"));
    }

    /// Upstream v0.10's `TestAddTPUVariablesSubGroup` cases for subgroups of 1 and the leader
    /// (#918): (pod, worker index label, subgroup label, leader requests TPUs, subgroup size,
    /// TPU_WORKER_ID, TPU_WORKER_HOSTNAMES).
    #[test]
    fn tpu_variables_with_subgroups_table() {
        for (name, worker, subgroup, leader_tpus, sgs, id, hosts) in [
            (
                "test-sample-0",
                "0",
                "0",
                false,
                "1",
                "0",
                "test-sample-0.default",
            ),
            (
                "test-sample-0",
                "0",
                "0",
                false,
                "2",
                "0",
                "test-sample-0.default,test-sample-0-1.default",
            ),
            (
                "prefill-0-1",
                "1",
                "1",
                true,
                "1",
                "0",
                "prefill-0-1.default",
            ),
            (
                "prefill-0-2",
                "2",
                "2",
                true,
                "1",
                "0",
                "prefill-0-2.default",
            ),
            (
                "prefill-0-1",
                "1",
                "1",
                false,
                "1",
                "0",
                "prefill-0-1.default",
            ),
            (
                "prefill-0-2",
                "2",
                "2",
                false,
                "1",
                "0",
                "prefill-0-2.default",
            ),
        ] {
            let mut annotations = json!({labels::SIZE: "3", labels::SUBGROUP_SIZE: sgs});
            if leader_tpus {
                annotations[labels::LEADER_REQUESTS_TPUS] = json!("true");
            }
            let mut p = tpu_pod(
                name,
                json!({labels::NAME: "x", labels::WORKER_INDEX: worker, labels::SUBGROUP_INDEX: subgroup}),
                annotations,
                "default",
            );
            default_pod(&mut p).unwrap();
            let case = format!("{name} leader TPUs {leader_tpus} subgroups of {sgs}");
            assert_eq!(var(&p, "TPU_WORKER_ID").as_deref(), Some(id), "{case}");
            assert_eq!(
                var(&p, "TPU_WORKER_HOSTNAMES").as_deref(),
                Some(hosts),
                "{case}"
            );
            let leader = name.rsplit_once('-').map_or(name, |(l, _)| l);
            let tpu_name = if worker == "0" { name } else { leader };
            assert_eq!(var(&p, "TPU_NAME").as_deref(), Some(tpu_name), "{case}");
        }
        // A whole group of 3 with subgroups of 1, leader without TPUs, through the webhook's
        // own subgroup labels: workers 1 and 2 each list only themselves, as id 0.
        for n in [1, 2] {
            let mut w = tpu_pod(
                &format!("g-0-{n}"),
                json!({labels::NAME: "g"}),
                json!({labels::SIZE: "3", labels::SUBGROUP_SIZE: "1", labels::LEADER_NAME: "g-0"}),
                "g",
            );
            default_pod(&mut w).unwrap();
            assert_eq!(w.labels()[labels::SUBGROUP_INDEX], n.to_string());
            assert_eq!(var(&w, "TPU_WORKER_ID").as_deref(), Some("0"));
            assert_eq!(var(&w, "TPU_WORKER_HOSTNAMES"), Some(format!("g-0-{n}.g")));
        }
    }

    #[test]
    fn a_user_tpu_port_is_kept_and_existing_tpu_variables_win() {
        let mut p = tpu_pod(
            "t-0",
            json!({labels::NAME: "t", labels::WORKER_INDEX: "0"}),
            json!({labels::SIZE: "1"}),
            "t",
        );
        p.spec.as_mut().unwrap().containers[0].env = Some(vec![EnvVar {
            name: "TPU_PROCESS_PORT".into(),
            value: Some("9000".into()),
            value_from: None,
        }]);
        default_pod(&mut p).unwrap();
        assert_eq!(
            var(&p, "TPU_PROCESS_ADDRESSES").as_deref(),
            Some("t-0.t:9000")
        );
        assert_eq!(
            env(&p, 0)
                .iter()
                .filter(|(n, _)| n == "TPU_PROCESS_PORT")
                .count(),
            1
        );

        let mut preset = tpu_pod(
            "t-0",
            json!({labels::NAME: "t", labels::WORKER_INDEX: "0"}),
            json!({labels::SIZE: "2"}),
            "t",
        );
        preset.spec.as_mut().unwrap().containers[0].env = Some(vec![EnvVar {
            name: "TPU_WORKER_ID".into(),
            value: Some("7".into()),
            value_from: None,
        }]);
        default_pod(&mut preset).unwrap();
        assert_eq!(var(&preset, "TPU_WORKER_ID").as_deref(), Some("7"));
        assert_eq!(var(&preset, "TPU_WORKER_HOSTNAMES"), None);
    }
}
