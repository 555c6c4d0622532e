//! Group Services (UniquePerReplica) live exactly as long as their groups: every ordinal the
//! leader StatefulSet has — surge groups included — has its Service, through a whole rolling
//! update, and a Service goes only once its group's pods are gone. Proved from watches of the
//! StatefulSet, the Services and the pods, replayed in etcd order (resourceVersion), so no
//! state between two polls is missed.

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::{Arc, Mutex},
    time::Duration,
};

use futures::StreamExt;
use k8s_openapi::api::{
    apps::v1::StatefulSet,
    core::v1::{Pod, Service},
};
use kube::{
    Api, Resource, ResourceExt,
    runtime::{WatchStreamExt, watcher},
};
use lws_rollout::api::LeaderWorkerSet;
use serde_json::json;

use crate::{
    harness::{wait_for, with_ns},
    lws_support::{GROUP_INDEX, NAME, apply, available_with, create_available, lws},
};

/// One change seen by a watch.
#[derive(Clone, Debug)]
enum Change {
    /// The leader StatefulSet's spec.replicas.
    StsReplicas(i32),
    /// A Service of group `i` exists (true) or is gone (false).
    Service(i32, bool),
    /// Pod `name` of group `i` exists (true) or is gone (false).
    Pod(i32, String, bool),
}

type Log = Arc<Mutex<Vec<(u64, Change)>>>;

fn rv<K: Resource>(obj: &K) -> u64 {
    obj.meta()
        .resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn record<K, F>(
    api: Api<K>,
    config: watcher::Config,
    log: Log,
    to_change: F,
) -> tokio::task::JoinHandle<()>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
    F: Fn(&K, bool) -> Option<Change> + Send + 'static,
{
    tokio::spawn(async move {
        let mut stream = watcher(api, config).default_backoff().boxed();
        while let Some(Ok(event)) = stream.next().await {
            let (obj, live) = match event {
                watcher::Event::Apply(o) | watcher::Event::InitApply(o) => (o, true),
                watcher::Event::Delete(o) => (o, false),
                _ => continue,
            };
            if let Some(change) = to_change(&obj, live) {
                log.lock().expect("log").push((rv(&obj), change));
            }
        }
    })
}

fn group_of(obj: &impl Resource) -> Option<i32> {
    obj.meta().labels.as_ref()?.get(GROUP_INDEX)?.parse().ok()
}

#[tokio::test]
async fn surge_groups_keep_their_services_for_as_long_as_they_run() -> anyhow::Result<()> {
    with_ns("lws-surge-svc", |ns| async move {
        let mut obj = lws("ss", 4, 2, "vllm:1");
        obj["spec"]["networkConfig"] = json!({"subdomainPolicy": "UniquePerReplica"});
        obj["spec"]["rolloutStrategy"] =
            json!({"type": "RollingUpdate", "rollingUpdateConfiguration": {"maxSurge": 4}});
        create_available(&ns, &obj).await?;

        let log: Log = Arc::default();
        let selector = format!("{NAME}=ss");
        let tasks = vec![
            record(
                ns.api::<StatefulSet>(),
                watcher::Config::default().fields("metadata.name=ss"),
                log.clone(),
                |sts: &StatefulSet, live| {
                    live.then(|| sts.spec.as_ref()?.replicas).flatten().map(Change::StsReplicas)
                },
            ),
            record(
                ns.api::<Service>(),
                watcher::Config::default().labels(&selector),
                log.clone(),
                |svc: &Service, live| {
                    // `ss-<i>`: the group index is in the name (and the selector), not a label.
                    let index = svc.name_any().strip_prefix("ss-")?.parse().ok()?;
                    Some(Change::Service(
                        index,
                        live && svc.metadata.deletion_timestamp.is_none(),
                    ))
                },
            ),
            record(
                ns.api::<Pod>(),
                watcher::Config::default().labels(&selector),
                log.clone(),
                |pod: &Pod, live| Some(Change::Pod(group_of(pod)?, pod.name_any(), live)),
            ),
        ];

        let mut next = obj.clone();
        next["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]["image"] =
            json!("vllm:2");
        apply(&ns, &next).await?;
        wait_for(
            &ns.api::<LeaderWorkerSet>(),
            "ss",
            Duration::from_secs(180),
            available_with(4, 4),
        )
        .await?;
        // The surge groups' pods and Services are gone at the end.
        let gone = |names: &[&str]| {
            let names: BTreeSet<String> = names.iter().map(|s| s.to_string()).collect();
            move |list: &[Arc<Service>]| {
                list.iter().map(|s| s.name_any()).collect::<BTreeSet<_>>() == names
            }
        };
        crate::harness::wait_for_all(
            &ns.api::<Service>(),
            &selector,
            Duration::from_secs(60),
            gone(&["ss-0", "ss-1", "ss-2", "ss-3"]),
        )
        .await?;
        for t in &tasks {
            t.abort();
        }

        // Replay in etcd order.
        let mut events = log.lock().expect("log").clone();
        events.sort_by_key(|(rv, _)| *rv);
        let mut replicas = 0;
        let mut max_replicas = 0;
        let mut services: BTreeSet<i32> = BTreeSet::new();
        let mut pods: BTreeMap<i32, BTreeSet<String>> = BTreeMap::new();
        for (rv, change) in &events {
            match change {
                Change::StsReplicas(n) => replicas = *n,
                Change::Service(i, true) => {
                    services.insert(*i);
                }
                Change::Service(i, false) => {
                    services.remove(i);
                    let running = pods.get(i).map_or(0, BTreeSet::len);
                    assert!(
                        running == 0,
                        "Service ss-{i} deleted at rv {rv} while {running} pods of its group ran"
                    );
                    assert!(*i >= replicas, "Service ss-{i} deleted while the StatefulSet has {replicas} replicas");
                }
                Change::Pod(i, name, live) => {
                    let set = pods.entry(*i).or_default();
                    if *live {
                        set.insert(name.clone());
                    } else {
                        set.remove(name);
                    }
                }
            }
            max_replicas = max_replicas.max(replicas);
            let missing: Vec<i32> = (0..replicas).filter(|i| !services.contains(i)).collect();
            assert!(
                missing.is_empty(),
                "at rv {rv} the StatefulSet has {replicas} replicas but groups {missing:?} have no Service"
            );
        }
        assert_eq!(max_replicas, 7, "the update surged to 4 + 4 - 1 groups");
        Ok(())
    })
    .await
}
