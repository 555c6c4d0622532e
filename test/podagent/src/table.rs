//! The answer table: which pod answers on which address right now (a pure function of the
//! previous table, the pods and the time).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;

use crate::pods::{self, Cidr, PodInfo};

#[derive(Clone, Debug)]
pub struct Entry {
    pub info: Arc<PodInfo>,
    /// Set once the pod is being deleted or gone: it keeps answering until then, as a real
    /// server with a preStop sleep does while the proxies drop its endpoint.
    pub drain_until: Option<Instant>,
}

pub type Table = HashMap<SocketAddr, Entry>;

/// The next table. A Ready pod answers on each containerPort of its pod IP (a new pod that got a
/// recycled IP takes the address over). A pod that stops being Ready but still exists stops at
/// once; a pod being deleted or gone drains for its drain time (`default_drain` unless
/// annotated), then stops.
pub fn next(
    old: &Table,
    pods: &HashMap<String, Pod>,
    range: &Cidr,
    default_drain: Duration,
    now: Instant,
) -> Table {
    let mut new = Table::new();
    for pod in pods.values().filter(|p| pods::is_serving(p)) {
        for (addr, info) in pods::endpoints(pod, range) {
            let info = match old.get(&addr) {
                Some(e) if *e.info == info => e.info.clone(),
                _ => Arc::new(info),
            };
            new.insert(
                addr,
                Entry {
                    info,
                    drain_until: None,
                },
            );
        }
    }
    for (addr, e) in old {
        if new.contains_key(addr) {
            continue;
        }
        let leaving = pods.get(&e.info.uid).is_none_or(pods::is_terminating);
        if !leaving {
            continue;
        }
        let until = e
            .drain_until
            .unwrap_or_else(|| now + e.info.behaviour.drain.unwrap_or(default_drain));
        if until > now {
            new.insert(
                *addr,
                Entry {
                    info: e.info.clone(),
                    drain_until: Some(until),
                },
            );
        }
    }
    new
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(uid: &str, ip: &str, ready: bool, deleting: bool) -> Pod {
        let mut p: Pod = serde_json::from_value(json!({
            "metadata": {"name": format!("p-{uid}"), "namespace": "t", "uid": uid},
            "spec": {"containers": [{"name": "c", "image": "i", "ports": [{"containerPort": 80}]}]},
            "status": {"phase": "Running", "podIP": ip,
                "conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"}}]}
        }))
        .unwrap();
        if deleting {
            p.metadata.deletion_timestamp =
                Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
                ));
        }
        p
    }

    fn pods(list: Vec<Pod>) -> HashMap<String, Pod> {
        list.into_iter()
            .map(|p| (p.metadata.uid.clone().unwrap(), p))
            .collect()
    }

    const DRAIN: Duration = Duration::from_secs(2);

    fn range() -> Cidr {
        "198.18.0.0/19".parse().unwrap()
    }

    fn addr(ip: &str) -> SocketAddr {
        format!("{ip}:80").parse().unwrap()
    }

    #[test]
    fn ready_pods_answer_and_unready_ones_stop_at_once() {
        let t0 = Instant::now();
        let t = next(
            &Table::new(),
            &pods(vec![pod("a", "198.18.0.1", true, false)]),
            &range(),
            DRAIN,
            t0,
        );
        assert_eq!(t.len(), 1);
        assert!(t[&addr("198.18.0.1")].drain_until.is_none());
        let t = next(
            &t,
            &pods(vec![pod("a", "198.18.0.1", false, false)]),
            &range(),
            DRAIN,
            t0,
        );
        assert!(t.is_empty());
    }

    #[test]
    fn deleted_pods_drain_then_stop() {
        let t0 = Instant::now();
        let t = next(
            &Table::new(),
            &pods(vec![pod("a", "198.18.0.1", true, false)]),
            &range(),
            DRAIN,
            t0,
        );
        // Deleting: still answers, with a deadline.
        let t = next(
            &t,
            &pods(vec![pod("a", "198.18.0.1", true, true)]),
            &range(),
            DRAIN,
            t0,
        );
        assert_eq!(t[&addr("198.18.0.1")].drain_until, Some(t0 + DRAIN));
        // Gone: the deadline does not move.
        let t = next(
            &t,
            &pods(vec![]),
            &range(),
            DRAIN,
            t0 + Duration::from_secs(1),
        );
        assert_eq!(t[&addr("198.18.0.1")].drain_until, Some(t0 + DRAIN));
        let t = next(&t, &pods(vec![]), &range(), DRAIN, t0 + DRAIN);
        assert!(t.is_empty());
    }

    #[test]
    fn a_new_pod_takes_over_a_recycled_ip_from_a_draining_one() {
        let t0 = Instant::now();
        let t = next(
            &Table::new(),
            &pods(vec![pod("a", "198.18.0.1", true, false)]),
            &range(),
            DRAIN,
            t0,
        );
        let t = next(&t, &pods(vec![]), &range(), DRAIN, t0);
        assert_eq!(t[&addr("198.18.0.1")].info.uid, "a");
        let t = next(
            &t,
            &pods(vec![pod("b", "198.18.0.1", true, false)]),
            &range(),
            DRAIN,
            t0,
        );
        assert_eq!(t[&addr("198.18.0.1")].info.uid, "b");
        assert!(t[&addr("198.18.0.1")].drain_until.is_none());
    }

    #[test]
    fn unchanged_pods_keep_their_info_allocation() {
        let t0 = Instant::now();
        let ps = pods(vec![pod("a", "198.18.0.1", true, false)]);
        let t1 = next(&Table::new(), &ps, &range(), DRAIN, t0);
        let t2 = next(&t1, &ps, &range(), DRAIN, t0);
        assert!(Arc::ptr_eq(
            &t1[&addr("198.18.0.1")].info,
            &t2[&addr("198.18.0.1")].info
        ));
    }
}
