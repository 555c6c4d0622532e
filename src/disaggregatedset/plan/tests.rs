//! Table tests of the DisaggregatedSet plan: a set and the LWSs and Services the caches show,
//! built as plain data; the plan checked as plain data.

use std::sync::Arc;

use k8s_openapi::{
    api::core::v1::Service,
    apimachinery::pkg::apis::meta::v1::{Condition, Time},
    jiff::Timestamp,
};
use kube::ResourceExt;
use serde_json::{Value, json};

use super::*;
use crate::{
    api::{
        LeaderWorkerSetStatus,
        disaggregatedset::{DisaggregatedSet, REVISION_LABEL, SLICE_LABEL},
    },
    disaggregatedset::{objects, observe::Observed, revision, status},
};

fn now() -> Time {
    Time(Timestamp::from_second(1_795_327_200).unwrap())
}

fn role(name: &str, replicas: i32, image: &str) -> Value {
    json!({"name": name, "spec": {"replicas": replicas, "leaderWorkerTemplate": {"size": 2,
        "workerTemplate": {"spec": {"containers": [{"name": "c", "image": image}]}}}}})
}

fn set(roles: Value) -> DisaggregatedSet {
    serde_json::from_value(json!({
        "apiVersion": "disaggregatedset.x-k8s.io/v1", "kind": "DisaggregatedSet",
        "metadata": {"name": "pd", "namespace": "ns", "uid": "set-uid", "generation": 3},
        "spec": {"roles": roles}
    }))
    .unwrap()
}

fn pd(prefill: i32, decode: i32, image: &str) -> DisaggregatedSet {
    set(json!([
        role("prefill", prefill, image),
        role("decode", decode, image)
    ]))
}

fn rev(s: &DisaggregatedSet) -> String {
    revision::revision(&s.spec.roles).unwrap()
}

/// The set's world: its LWSs (as the set made them) and Services.
#[derive(Default)]
struct World {
    observed: Observed,
}

impl World {
    /// An LWS of `s`'s role `role` at revision `r` with `replicas`, `ready` of them ready,
    /// created at second `created`.
    fn lws(
        &mut self,
        s: &DisaggregatedSet,
        r: &str,
        role: &str,
        replicas: i32,
        ready: i32,
        created: i64,
    ) -> &mut Self {
        let spec = s
            .spec
            .roles
            .iter()
            .find(|x| x.name == role)
            .cloned()
            .unwrap_or_else(|| serde_json::from_value(self::role(role, 1, "old")).unwrap());
        let mut lws = objects::lws(s, 0, &spec, r, replicas);
        lws.metadata.uid = Some(format!("uid-{r}-{role}"));
        lws.metadata.generation = Some(1);
        lws.metadata.creation_timestamp = Some(Time(Timestamp::from_second(created).unwrap()));
        lws.status = Some(LeaderWorkerSetStatus {
            replicas: Some(replicas),
            ready_replicas: Some(ready),
            observed_generation: Some(1),
            ..Default::default()
        });
        self.observed.lws.push(Arc::new(lws));
        self
    }

    /// An LWS of slice `slice` (`None`: a v0.9 child, named and labelled without a slice).
    #[allow(clippy::too_many_arguments)]
    fn lws_in(
        &mut self,
        s: &DisaggregatedSet,
        slice: Option<i32>,
        r: &str,
        role: &str,
        replicas: i32,
        ready: i32,
        created: i64,
    ) -> &mut Self {
        self.lws(s, r, role, replicas, ready, created);
        let lws = Arc::make_mut(self.observed.lws.last_mut().unwrap());
        match slice {
            Some(n) => {
                let mut again = objects::lws(
                    s,
                    n,
                    &s.spec
                        .roles
                        .iter()
                        .find(|x| x.name == role)
                        .unwrap()
                        .clone(),
                    r,
                    replicas,
                );
                again.metadata.uid = Some(format!("uid-{n}-{r}-{role}"));
                again.metadata.generation = lws.metadata.generation;
                again.metadata.creation_timestamp = lws.metadata.creation_timestamp.clone();
                again.status = lws.status.clone();
                *lws = again;
            }
            None => {
                lws.metadata.name = Some(objects::legacy_lws_name("pd", role, r));
                lws.metadata.uid = Some(format!("uid-v09-{r}-{role}"));
                lws.labels_mut().remove(SLICE_LABEL);
                lws.labels_mut().insert("app".into(), format!("pd-{role}"));
            }
        }
        self
    }

    /// A Service of slice `slice` (`None`: a v0.9 one).
    fn service_in(
        &mut self,
        s: &DisaggregatedSet,
        slice: Option<i32>,
        role: &str,
        r: &str,
    ) -> &mut Self {
        let mut svc: Service = objects::service(s, slice.unwrap_or(0), role, r);
        if slice.is_none() {
            svc.metadata.name = Some(format!("pd-{r}-{role}-prv"));
            svc.labels_mut().remove(SLICE_LABEL);
            svc.spec
                .as_mut()
                .unwrap()
                .selector
                .as_mut()
                .unwrap()
                .remove(SLICE_LABEL);
        }
        svc.metadata.uid = Some(format!("svc-{slice:?}-{r}-{role}"));
        self.observed.services.push(Arc::new(svc));
        self
    }

    fn scaler(&mut self, role: &str, replicas: i32, owned: bool) -> &mut Self {
        let scaler = DisaggregatedSetRoleScaler {
            metadata: ObjectMeta {
                name: Some(format!("pd-{role}")),
                namespace: Some("ns".into()),
                uid: Some(format!("scaler-{role}")),
                generation: Some(2),
                labels: Some(BTreeMap::from([
                    (SET_NAME_LABEL.to_string(), "pd".to_string()),
                    (ROLE_LABEL.to_string(), role.to_string()),
                ])),
                ..Default::default()
            },
            spec: DisaggregatedSetRoleScalerSpec { replicas },
            status: None,
        };
        if owned {
            self.observed.scalers.push(Arc::new(scaler));
        } else {
            self.observed.foreign_scalers.insert(scaler.name_any());
        }
        self
    }

    fn initial(&mut self, name: &str, replicas: i32) -> &mut Self {
        let l = self
            .observed
            .lws
            .iter_mut()
            .find(|l| l.name_any() == name)
            .unwrap();
        Arc::make_mut(l)
            .annotations_mut()
            .insert(INITIAL_REPLICAS_ANNOTATION.into(), replicas.to_string());
        self
    }

    fn service(&mut self, s: &DisaggregatedSet, role: &str, r: &str) -> &mut Self {
        let mut svc: Service = objects::service(s, 0, role, r);
        svc.metadata.uid = Some(format!("svc-{r}-{role}"));
        self.observed.services.push(Arc::new(svc));
        self
    }

    fn plan(&self, s: &DisaggregatedSet) -> Plan {
        plan(s, &self.observed, &now())
    }
}

fn created(p: &Plan) -> Vec<(String, i32)> {
    p.create
        .iter()
        .map(|c| (c.lws.name_any(), c.lws.spec.replicas.unwrap_or(1)))
        .collect()
}

fn scaled(p: &Plan) -> Vec<(String, i32, i32)> {
    p.scale
        .iter()
        .map(|s| (s.name.clone(), s.from, s.replicas))
        .collect()
}

fn deleted(p: &Plan) -> Vec<String> {
    p.delete.iter().map(|d| d.name.clone()).collect()
}

fn cond<'a>(p: &'a Plan, type_: &str) -> &'a Condition {
    p.status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == type_)
        .unwrap()
}

#[test]
fn a_new_set_creates_one_lws_per_role() {
    let s = pd(2, 3, "v1");
    let r = rev(&s);
    let p = World::default().plan(&s);
    assert_eq!(
        created(&p),
        [
            (format!("pd-0-{r}-prefill"), 2),
            (format!("pd-0-{r}-decode"), 3)
        ]
    );
    assert!(p.services.is_empty(), "no Service before a ready group");
    assert_eq!(cond(&p, status::PROGRESSING).status, "True");
    assert_eq!(cond(&p, status::AVAILABLE).status, "False");
    assert!(
        p.status
            .conditions
            .iter()
            .flatten()
            .all(|c| c.observed_generation == Some(3))
    );
}

#[test]
fn a_settled_set_serves_each_role_and_writes_nothing_else() {
    let s = pd(2, 2, "v1");
    let r = rev(&s);
    let mut w = World::default();
    w.lws(&s, &r, "prefill", 2, 2, 10)
        .lws(&s, &r, "decode", 2, 2, 10);
    let p = w.plan(&s);
    assert!(p.create.is_empty() && p.scale.is_empty() && p.delete.is_empty());
    let services: Vec<_> = p.services.iter().map(|s| s.name_any()).collect();
    assert_eq!(
        services,
        [
            format!("pd-0-{r}-prefill-prv"),
            format!("pd-0-{r}-decode-prv")
        ]
    );
    assert_eq!(cond(&p, status::AVAILABLE).status, "True");
    assert_eq!(cond(&p, status::PROGRESSING).status, "False");
    assert_eq!(cond(&p, status::DEGRADED).status, "False");
    let roles = p.status.role_statuses.clone().unwrap();
    assert_eq!(
        (
            roles[0].name.as_str(),
            roles[0].replicas,
            roles[0].ready_replicas,
            roles[0].updated_replicas
        ),
        ("prefill", Some(2), Some(2), Some(2))
    );
    // With its Services there: nothing to create.
    w.service(&s, "prefill", &r).service(&s, "decode", &r);
    let p = w.plan(&s);
    assert!(p.services.is_empty() && p.delete_services.is_empty());
}

#[test]
fn scaling_a_role_scales_only_its_lws() {
    let s = pd(3, 2, "v1");
    let r = rev(&s);
    let mut w = World::default();
    w.lws(&s, &r, "prefill", 2, 2, 10)
        .lws(&s, &r, "decode", 2, 2, 10);
    let p = w.plan(&s);
    assert_eq!(scaled(&p), [(format!("pd-0-{r}-prefill"), 2, 3)]);
    assert_eq!(p.scale[0].event.reason, reasons::SCALING_UP);
    assert!(p.create.is_empty());
}

#[test]
fn a_template_change_starts_a_rolling_update() {
    let old = pd(2, 2, "v1");
    let new = pd(2, 2, "v2");
    let (r1, r2) = (rev(&old), rev(&new));
    assert_ne!(r1, r2);
    let mut w = World::default();
    w.lws(&old, &r1, "prefill", 2, 2, 10)
        .lws(&old, &r1, "decode", 2, 2, 10);
    let p = w.plan(&new);
    assert_eq!(
        created(&p),
        [
            (format!("pd-0-{r2}-prefill"), 0),
            (format!("pd-0-{r2}-decode"), 0)
        ]
    );
    let annotated: Vec<_> = p
        .annotate
        .iter()
        .map(|a| (a.name.clone(), a.replicas))
        .collect();
    assert_eq!(
        annotated,
        [
            (format!("pd-0-{r1}-decode"), 2),
            (format!("pd-0-{r1}-prefill"), 2)
        ]
    );
    assert_eq!(p.on_created[0].reason, reasons::ROLLING_UPDATE_STARTED);
    assert!(
        p.scale.is_empty(),
        "nothing moves before the new LWSs exist"
    );
    assert_eq!(cond(&p, status::PROGRESSING).reason, "RollingUpdate");
    // The old revision keeps its Services.
    w.service(&old, "prefill", &r1).service(&old, "decode", &r1);
    assert!(w.plan(&new).delete_services.is_empty());
}

/// One rolling update of a 2/2 pair at upstream's default (maxSurge 1, maxUnavailable 0),
/// reconcile by reconcile: (old LWS replicas, new LWS replicas, new ready) → what the plan does.
#[test]
fn rolling_update_steps_table() {
    let old = pd(2, 2, "v1");
    let new = pd(2, 2, "v2");
    let (r1, r2) = (rev(&old), rev(&new));
    // (name, old p/d, new p/d, new ready p/d, scales (name, from, to), deletes)
    type Case = (
        &'static str,
        [i32; 2],
        [i32; 2],
        [i32; 2],
        Vec<(String, i32, i32)>,
        Vec<String>,
    );
    let o = |role: &str| format!("pd-0-{r1}-{role}");
    let n = |role: &str| format!("pd-0-{r2}-{role}");
    let cases: Vec<Case> = vec![
        (
            "new at 0 and ready: both roles scale up together",
            [2, 2],
            [0, 0],
            [0, 0],
            vec![(n("prefill"), 0, 1), (n("decode"), 0, 1)],
            vec![],
        ),
        (
            "new not ready yet: wait",
            [2, 2],
            [1, 1],
            [1, 0],
            vec![],
            vec![],
        ),
        (
            "new ready: the old revision drains one group of each role",
            [2, 2],
            [1, 1],
            [1, 1],
            vec![(o("prefill"), 2, 1), (o("decode"), 2, 1)],
            vec![],
        ),
        (
            "surge room again: up to the target",
            [1, 1],
            [1, 1],
            [1, 1],
            vec![(n("prefill"), 1, 2), (n("decode"), 1, 2)],
            vec![],
        ),
        (
            "new at target: the old revision goes to 0, both roles at once",
            [1, 1],
            [2, 2],
            [2, 2],
            vec![(o("prefill"), 1, 0), (o("decode"), 1, 0)],
            vec![],
        ),
        (
            "both old roles at 0: deleted together",
            [0, 0],
            [2, 2],
            [2, 2],
            vec![],
            vec![o("decode"), o("prefill")],
        ),
    ];
    for (name, old_replicas, new_replicas, new_ready, scales, deletes) in cases {
        let mut w = World::default();
        w.lws(&old, &r1, "prefill", old_replicas[0], old_replicas[0], 10)
            .lws(&old, &r1, "decode", old_replicas[1], old_replicas[1], 10)
            .initial(&o("prefill"), 2)
            .initial(&o("decode"), 2)
            .lws(&new, &r2, "prefill", new_replicas[0], new_ready[0], 20)
            .lws(&new, &r2, "decode", new_replicas[1], new_ready[1], 20);
        let p = w.plan(&new);
        assert_eq!(scaled(&p), scales, "{name}");
        assert_eq!(deleted(&p), deletes, "{name}");
        assert!(p.create.is_empty(), "{name}");
    }
}

#[test]
fn an_old_revision_with_one_role_still_running_is_not_deleted() {
    let old = pd(2, 2, "v1");
    let new = pd(2, 2, "v2");
    let (r1, r2) = (rev(&old), rev(&new));
    let mut w = World::default();
    w.lws(&old, &r1, "prefill", 0, 0, 10)
        .lws(&old, &r1, "decode", 1, 1, 10)
        .initial(&format!("pd-0-{r1}-prefill"), 2)
        .initial(&format!("pd-0-{r1}-decode"), 2)
        .lws(&new, &r2, "prefill", 2, 2, 20)
        .lws(&new, &r2, "decode", 2, 2, 20);
    let p = w.plan(&new);
    assert!(
        p.delete.is_empty(),
        "a half-drained revision stays until every role is at 0"
    );
    assert_eq!(scaled(&p), [(format!("pd-0-{r1}-decode"), 1, 0)]);
}

#[test]
fn two_old_revisions_drain_newest_first() {
    let a = pd(2, 2, "v1");
    let b = pd(2, 2, "v2");
    let c = pd(2, 2, "v3");
    let (ra, rb, rc) = (rev(&a), rev(&b), rev(&c));
    let mut w = World::default();
    // Revision a at (1,1), b (newer) at (1,1), the new one c at (1,1) and ready.
    w.lws(&a, &ra, "prefill", 1, 1, 10)
        .lws(&a, &ra, "decode", 1, 1, 10)
        .lws(&b, &rb, "prefill", 1, 1, 20)
        .lws(&b, &rb, "decode", 1, 1, 20)
        .lws(&c, &rc, "prefill", 1, 1, 30)
        .lws(&c, &rc, "decode", 1, 1, 30);
    for name in [
        format!("pd-0-{ra}-prefill"),
        format!("pd-0-{ra}-decode"),
        format!("pd-0-{rb}-prefill"),
        format!("pd-0-{rb}-decode"),
    ] {
        w.initial(&name, 1);
    }
    let p = w.plan(&c);
    let names: Vec<_> = scaled(&p).into_iter().map(|(n, _, to)| (n, to)).collect();
    assert!(
        names.iter().all(|(n, to)| n.contains(&rb) && *to == 0),
        "the newest old revision goes first, whole: {names:?}"
    );
}

#[test]
fn added_and_removed_roles_roll_with_the_rest() {
    let old = pd(1, 1, "v1");
    // Decode goes, router comes.
    let new = set(json!([role("prefill", 1, "v1"), role("router", 1, "v1")]));
    let (r1, r2) = (rev(&old), rev(&new));
    let mut w = World::default();
    w.lws(&old, &r1, "prefill", 1, 1, 10)
        .lws(&old, &r1, "decode", 1, 1, 10);
    let p = w.plan(&new);
    assert_eq!(
        created(&p),
        [
            (format!("pd-0-{r2}-prefill"), 0),
            (format!("pd-0-{r2}-router"), 0)
        ]
    );
    // Later: the new pair at target and ready; the old revision, decode included, drains whole.
    let mut w = World::default();
    w.lws(&old, &r1, "prefill", 1, 1, 10)
        .lws(&old, &r1, "decode", 1, 1, 10)
        .initial(&format!("pd-0-{r1}-prefill"), 1)
        .initial(&format!("pd-0-{r1}-decode"), 1)
        .lws(&new, &r2, "prefill", 1, 1, 20)
        .lws(&new, &r2, "router", 1, 1, 20);
    let p = w.plan(&new);
    let mut to: Vec<_> = scaled(&p).into_iter().map(|(n, _, to)| (n, to)).collect();
    to.sort();
    assert_eq!(
        to,
        [
            (format!("pd-0-{r1}-decode"), 0),
            (format!("pd-0-{r1}-prefill"), 0)
        ]
    );
}

#[test]
fn a_new_lws_deleted_by_hand_mid_update_is_recreated() {
    let old = pd(2, 2, "v1");
    let new = pd(2, 2, "v2");
    let (r1, r2) = (rev(&old), rev(&new));
    let mut w = World::default();
    w.lws(&old, &r1, "prefill", 2, 2, 10)
        .lws(&old, &r1, "decode", 2, 2, 10)
        .lws(&new, &r2, "prefill", 1, 1, 20);
    let p = w.plan(&new);
    assert_eq!(created(&p), [(format!("pd-0-{r2}-decode"), 0)]);
    assert!(p.scale.is_empty());
    // In the steady state, too.
    let mut w = World::default();
    w.lws(&new, &r2, "prefill", 2, 2, 20);
    assert_eq!(created(&w.plan(&new)), [(format!("pd-0-{r2}-decode"), 2)]);
}

#[test]
fn an_lws_of_another_owner_with_a_role_name_is_never_taken_over() {
    let s = pd(1, 1, "v1");
    let r = rev(&s);
    let mut w = World::default();
    let mut foreign = objects::lws(&s, 0, &s.spec.roles[1], &r, 1);
    foreign.metadata.owner_references = None;
    foreign.metadata.labels = None;
    w.observed
        .foreign
        .insert(foreign.name_any(), Arc::new(foreign));
    let p = w.plan(&s);
    assert_eq!(created(&p), [(format!("pd-0-{r}-prefill"), 1)]);
    let degraded = cond(&p, status::DEGRADED);
    assert_eq!(
        (degraded.status.as_str(), degraded.reason.as_str()),
        ("True", "ObjectConflict")
    );
    assert!(
        degraded.message.contains(&format!("pd-0-{r}-decode")),
        "{}",
        degraded.message
    );
}

#[test]
fn only_complete_revisions_keep_their_services() {
    let old = pd(1, 1, "v1");
    let new = pd(1, 1, "v2");
    let (r1, r2) = (rev(&old), rev(&new));
    // The new revision had its Services; its decode group died: its Services go (no traffic
    // to a prefill without a decode), the old complete revision keeps its own.
    let mut w = World::default();
    w.lws(&old, &r1, "prefill", 1, 1, 10)
        .lws(&old, &r1, "decode", 1, 1, 10)
        .initial(&format!("pd-0-{r1}-prefill"), 1)
        .initial(&format!("pd-0-{r1}-decode"), 1)
        .lws(&new, &r2, "prefill", 1, 1, 20)
        .lws(&new, &r2, "decode", 1, 0, 20)
        .service(&old, "prefill", &r1)
        .service(&old, "decode", &r1)
        .service(&new, "prefill", &r2)
        .service(&new, "decode", &r2);
    let p = w.plan(&new);
    let mut gone: Vec<_> = p.delete_services.iter().map(|d| d.name.clone()).collect();
    gone.sort();
    assert_eq!(
        gone,
        [
            format!("pd-0-{r2}-decode-prv"),
            format!("pd-0-{r2}-prefill-prv")
        ]
    );
    assert!(
        p.scale.is_empty(),
        "and nothing moves while the new pair is not whole"
    );
}

#[test]
fn a_lws_failure_degrades_the_set() {
    let s = pd(1, 1, "v1");
    let r = rev(&s);
    let mut w = World::default();
    w.lws(&s, &r, "prefill", 1, 1, 10)
        .lws(&s, &r, "decode", 1, 0, 10);
    let l = w
        .observed
        .lws
        .iter_mut()
        .find(|l| l.name_any().ends_with("decode"))
        .unwrap();
    Arc::make_mut(l).status.as_mut().unwrap().conditions = Some(vec![Condition {
        type_: "ReplicaFailure".into(),
        status: "True".into(),
        reason: "ProgressDeadlineExceeded".into(),
        message: "group 0 stuck".into(),
        last_transition_time: now(),
        observed_generation: Some(1),
    }]);
    let p = w.plan(&s);
    let degraded = cond(&p, status::DEGRADED);
    assert_eq!(degraded.reason, "LeaderWorkerSetFailure");
    assert_eq!(
        degraded.message,
        format!(
            "role decode: LeaderWorkerSet pd-0-{r}-decode: ProgressDeadlineExceeded: group 0 stuck"
        )
    );
    let _ = REVISION_LABEL;
}

#[test]
fn role_configs_are_read_as_upstream_reads_them() {
    let with = |rc: Value| -> RoleConfig {
        let mut r = role("x", 4, "v1");
        r["spec"]["rolloutStrategy"] =
            json!({"type": "RollingUpdate", "rollingUpdateConfiguration": rc});
        let role: DisaggregatedRoleSpec = serde_json::from_value(r).unwrap();
        role_config(&role, role.replicas())
    };
    assert_eq!(
        role_config(&serde_json::from_value(role("x", 4, "v1")).unwrap(), 4),
        RoleConfig::DEFAULT
    );
    assert_eq!(
        with(json!({"maxSurge": 2})),
        RoleConfig {
            max_surge: 2,
            max_unavailable: 0
        }
    );
    assert_eq!(
        with(json!({"maxSurge": 2, "maxUnavailable": 1})),
        RoleConfig {
            max_surge: 2,
            max_unavailable: 1
        }
    );
    assert_eq!(
        with(json!({"maxSurge": "50%", "maxUnavailable": "25%"})),
        RoleConfig {
            max_surge: 2,
            max_unavailable: 1
        }
    );
    assert_eq!(
        with(json!({"maxSurge": 0, "maxUnavailable": 0})),
        RoleConfig::DEFAULT
    );
}

fn with(mut s: DisaggregatedSet, spec: Value) -> DisaggregatedSet {
    let mut v = serde_json::to_value(&s.spec).unwrap();
    for (k, x) in spec.as_object().unwrap() {
        v[k] = x.clone();
    }
    s.spec = serde_json::from_value(v).unwrap();
    s
}

fn external(mut s: DisaggregatedSet, role: &str) -> DisaggregatedSet {
    let r = s.spec.roles.iter_mut().find(|r| r.name == role).unwrap();
    r.scaling = serde_json::from_value(json!({"mode": "External"})).unwrap();
    s
}

#[test]
fn each_slice_gets_its_roles_with_upstreams_names() {
    let s = with(pd(2, 1, "v1"), json!({"slices": 3}));
    let r = rev(&s);
    let p = World::default().plan(&s);
    let mut names = created(&p);
    names.sort();
    let mut want = vec![];
    for n in 0..3 {
        want.push((format!("pd-{n}-{r}-decode"), 1));
        want.push((format!("pd-{n}-{r}-prefill"), 2));
    }
    want.sort();
    assert_eq!(names, want);
    for c in &p.create {
        let slice = c.lws.labels()[SLICE_LABEL].clone();
        assert!(c.lws.name_any().starts_with(&format!("pd-{slice}-")));
        let pod = c
            .lws
            .spec
            .leader_worker_template
            .worker_template
            .metadata
            .as_ref();
        assert_eq!(pod.unwrap().labels.as_ref().unwrap()[SLICE_LABEL], slice);
    }
    // Status counts every slice: 3 slices × 2 prefill groups wanted.
    let prefill = &p.status.role_statuses.clone().unwrap()[0];
    assert_eq!(
        (prefill.name.as_str(), prefill.replicas),
        ("prefill", Some(0))
    );
    assert_eq!(cond(&p, status::AVAILABLE).status, "False");
}

#[test]
fn each_slice_rolls_on_its_own() {
    let old = with(pd(1, 1, "v1"), json!({"slices": 2}));
    let new = with(pd(1, 1, "v2"), json!({"slices": 2}));
    let (r1, r2) = (rev(&old), rev(&new));
    let mut w = World::default();
    for slice in [0, 1] {
        w.lws_in(&old, Some(slice), &r1, "prefill", 1, 1, 10)
            .lws_in(&old, Some(slice), &r1, "decode", 1, 1, 10);
    }
    // Slice 0's new revision is up and ready; slice 1's is created but not ready yet.
    w.lws_in(&new, Some(0), &r2, "prefill", 0, 0, 20)
        .lws_in(&new, Some(0), &r2, "decode", 0, 0, 20)
        .lws_in(&new, Some(1), &r2, "prefill", 1, 0, 20)
        .lws_in(&new, Some(1), &r2, "decode", 0, 0, 20);
    let p = w.plan(&new);
    assert!(p.create.is_empty(), "{:?}", created(&p));
    // Slice 0 steps (its new revision is stable at 0), slice 1 waits for its prefill group.
    assert!(!p.scale.is_empty());
    assert!(
        p.scale.iter().all(|s| s.name.starts_with("pd-0-")),
        "only slice 0 moves: {:?}",
        scaled(&p)
    );
}

#[test]
fn lowering_slices_removes_the_slices_beyond() {
    let two = with(pd(1, 1, "v1"), json!({"slices": 2}));
    let one = with(pd(1, 1, "v1"), json!({"slices": 1}));
    let r = rev(&one);
    let mut w = World::default();
    for slice in [0, 1] {
        w.lws_in(&two, Some(slice), &r, "prefill", 1, 1, 10)
            .lws_in(&two, Some(slice), &r, "decode", 1, 1, 10)
            .service_in(&two, Some(slice), "prefill", &r)
            .service_in(&two, Some(slice), "decode", &r);
    }
    let p = w.plan(&one);
    let mut gone = deleted(&p);
    gone.sort();
    assert_eq!(
        gone,
        [format!("pd-1-{r}-decode"), format!("pd-1-{r}-prefill")]
    );
    let mut svcs: Vec<_> = p.delete_services.iter().map(|d| d.name.clone()).collect();
    svcs.sort();
    assert_eq!(
        svcs,
        [
            format!("pd-1-{r}-decode-prv"),
            format!("pd-1-{r}-prefill-prv")
        ]
    );
    assert!(p.create.is_empty() && p.scale.is_empty());
}

#[test]
fn a_v09_child_is_adopted_in_place_while_the_set_has_one_slice() {
    let s = pd(2, 2, "v1");
    let r = rev(&s);
    let mut w = World::default();
    w.lws_in(&s, None, &r, "prefill", 2, 2, 10)
        .lws_in(&s, None, &r, "decode", 2, 2, 10)
        .service_in(&s, None, "prefill", &r)
        .service_in(&s, None, "decode", &r);
    let p = w.plan(&s);
    assert!(
        p.create.is_empty() && p.scale.is_empty() && p.delete.is_empty(),
        "nothing restarts: {:?} {:?} {:?}",
        created(&p),
        scaled(&p),
        deleted(&p)
    );
    assert!(p.delete_services.is_empty(), "its Services keep serving");
    assert!(p.services.is_empty(), "no slice Service beside them");
    assert_eq!(cond(&p, status::AVAILABLE).status, "True");
    // Its Services missing: remade with v0.9 names and selectors (its pods have no slice).
    let mut bare = World::default();
    bare.lws_in(&s, None, &r, "prefill", 2, 2, 10)
        .lws_in(&s, None, &r, "decode", 2, 2, 10);
    let p = bare.plan(&s);
    let made: Vec<_> = p
        .services
        .iter()
        .map(|s| {
            let selector = s.spec.as_ref().and_then(|s| s.selector.clone()).unwrap();
            (s.name_any(), selector.contains_key(SLICE_LABEL))
        })
        .collect();
    assert_eq!(
        made,
        [
            (format!("pd-{r}-prefill-prv"), false),
            (format!("pd-{r}-decode-prv"), false)
        ]
    );
    // A scale reaches the v0.9 LWS by its name.
    let p = w.plan(&pd(3, 2, "v1"));
    assert_eq!(scaled(&p), [(format!("pd-{r}-prefill"), 2, 3)]);
}

#[test]
fn a_v09_child_at_an_old_revision_rolls_over_like_any_old_revision() {
    let old = pd(2, 2, "v1");
    let new = pd(2, 2, "v2");
    let (r1, r2) = (rev(&old), rev(&new));
    let mut w = World::default();
    w.lws_in(&old, None, &r1, "prefill", 2, 2, 10)
        .lws_in(&old, None, &r1, "decode", 2, 2, 10);
    let p = w.plan(&new);
    assert_eq!(
        created(&p),
        [
            (format!("pd-0-{r2}-prefill"), 0),
            (format!("pd-0-{r2}-decode"), 0)
        ]
    );
    let mut annotated: Vec<_> = p.annotate.iter().map(|a| a.name.clone()).collect();
    annotated.sort();
    assert_eq!(
        annotated,
        [format!("pd-{r1}-decode"), format!("pd-{r1}-prefill")]
    );
    assert!(p.delete.is_empty());
}

#[test]
fn raising_slices_rolls_a_v09_slice_0_over_without_deleting_it_while_it_serves() {
    let s = with(pd(1, 1, "v1"), json!({"slices": 2}));
    let r = rev(&s);
    let mut w = World::default();
    w.lws_in(&s, None, &r, "prefill", 1, 1, 10)
        .lws_in(&s, None, &r, "decode", 1, 1, 10)
        .service_in(&s, None, "prefill", &r)
        .service_in(&s, None, "decode", &r);
    // Start: slice 0's slice-aware LWSs at 0; the v0.9 ones recorded, kept, still served; slice 1
    // waits (the v0.9 Service would select its pods).
    let p = w.plan(&s);
    assert_eq!(
        created(&p),
        [
            (format!("pd-0-{r}-prefill"), 0),
            (format!("pd-0-{r}-decode"), 0)
        ]
    );
    assert_eq!(p.annotate.len(), 2);
    assert!(p.delete.is_empty() && p.delete_services.is_empty());
    // The new LWSs are up at 0: the surge step adds a new group to each role.
    w.lws_in(&s, Some(0), &r, "prefill", 0, 0, 20)
        .lws_in(&s, Some(0), &r, "decode", 0, 0, 20);
    w.initial(&format!("pd-{r}-prefill"), 1)
        .initial(&format!("pd-{r}-decode"), 1);
    let p = w.plan(&s);
    let mut steps = scaled(&p);
    steps.sort();
    assert_eq!(
        steps,
        [
            (format!("pd-0-{r}-decode"), 0, 1),
            (format!("pd-0-{r}-prefill"), 0, 1)
        ]
    );
    assert!(p.delete.is_empty() && p.create.is_empty());
    // Both new groups ready: the v0.9 pair goes to 0 together.
    let mut w2 = World::default();
    w2.lws_in(&s, None, &r, "prefill", 1, 1, 10)
        .lws_in(&s, None, &r, "decode", 1, 1, 10)
        .lws_in(&s, Some(0), &r, "prefill", 1, 1, 20)
        .lws_in(&s, Some(0), &r, "decode", 1, 1, 20)
        .service_in(&s, None, "prefill", &r)
        .service_in(&s, None, "decode", &r);
    w2.initial(&format!("pd-{r}-prefill"), 1)
        .initial(&format!("pd-{r}-decode"), 1);
    let p = w2.plan(&s);
    let mut steps = scaled(&p);
    steps.sort();
    assert_eq!(
        steps,
        [
            (format!("pd-{r}-decode"), 1, 0),
            (format!("pd-{r}-prefill"), 1, 0)
        ]
    );
    assert!(p.create.is_empty(), "slice 1 still waits");
    // Drained: the v0.9 pair and its Services go, and slice 1 is created.
    let mut w3 = World::default();
    w3.lws_in(&s, None, &r, "prefill", 0, 0, 10)
        .lws_in(&s, None, &r, "decode", 0, 0, 10)
        .lws_in(&s, Some(0), &r, "prefill", 1, 1, 20)
        .lws_in(&s, Some(0), &r, "decode", 1, 1, 20)
        .service_in(&s, None, "prefill", &r)
        .service_in(&s, None, "decode", &r);
    let p = w3.plan(&s);
    let mut gone = deleted(&p);
    gone.sort();
    assert_eq!(gone, [format!("pd-{r}-decode"), format!("pd-{r}-prefill")]);
    let mut svcs: Vec<_> = p.delete_services.iter().map(|d| d.name.clone()).collect();
    svcs.sort();
    assert_eq!(
        svcs,
        [format!("pd-{r}-decode-prv"), format!("pd-{r}-prefill-prv")]
    );
    // Slice 1 waits for the v0.9 Services to be gone from the cache, then comes.
    assert!(p.create.is_empty());
    let mut w4 = World::default();
    w4.lws_in(&s, Some(0), &r, "prefill", 1, 1, 20)
        .lws_in(&s, Some(0), &r, "decode", 1, 1, 20);
    let p = w4.plan(&s);
    assert_eq!(
        created(&p),
        [
            (format!("pd-1-{r}-prefill"), 1),
            (format!("pd-1-{r}-decode"), 1)
        ]
    );
}

#[test]
fn an_external_role_gets_a_scaler_seeded_with_its_groups() {
    // A fresh set: seeded at 1 (an HPA reading 0 never scales up), the LWS created at 1.
    let s = external(pd(2, 7, "v1"), "decode");
    let r = rev(&s);
    let p = World::default().plan(&s);
    let scalers: Vec<_> = p
        .create_scalers
        .iter()
        .map(|s| {
            (
                s.name_any(),
                s.spec.replicas,
                s.labels()[ROLE_LABEL].clone(),
            )
        })
        .collect();
    assert_eq!(
        scalers,
        [("pd-decode".to_string(), 1, "decode".to_string())]
    );
    assert_eq!(p.create_scalers[0].owner_references()[0].uid, "set-uid");
    assert_eq!(
        created(&p),
        [
            (format!("pd-0-{r}-prefill"), 2),
            (format!("pd-0-{r}-decode"), 1)
        ]
    );
    // A running role turning External keeps its groups.
    let mut w = World::default();
    w.lws(&s, &r, "prefill", 2, 2, 10)
        .lws(&s, &r, "decode", 3, 3, 10);
    let p = w.plan(&s);
    assert_eq!(p.create_scalers[0].spec.replicas, 3);
    assert!(p.scale.is_empty(), "{:?}", scaled(&p));
}

#[test]
fn a_scalers_replicas_scale_only_its_role() {
    let s = external(pd(2, 1, "v1"), "decode");
    let r = rev(&s);
    let mut w = World::default();
    w.lws(&s, &r, "prefill", 2, 2, 10)
        .lws(&s, &r, "decode", 3, 3, 10)
        .scaler("decode", 5, true);
    let p = w.plan(&s);
    assert_eq!(scaled(&p), [(format!("pd-0-{r}-decode"), 3, 5)]);
    assert!(p.create_scalers.is_empty());
    let (name, status) = &p.scaler_status[0];
    assert_eq!(name, "pd-decode");
    assert_eq!(status.replicas, Some(3));
    assert_eq!(
        status.selector.as_deref(),
        Some(
            "disaggregatedset.x-k8s.io/name=pd,disaggregatedset.x-k8s.io/role=decode,leaderworkerset.sigs.k8s.io/worker-index=0"
        )
    );
    assert_eq!(status.observed_generation, Some(2));
    // The set's status wants the scaler's replicas for the role.
    let decode = &p.status.role_statuses.clone().unwrap()[1];
    assert_eq!(decode.name, "decode");
    assert_eq!(cond(&p, status::AVAILABLE).status, "False");
}

#[test]
fn an_external_roles_new_revision_never_shrinks_mid_update() {
    // Upstream v0.10's no-shrink guard. decode External: the update is under way (old at 4,
    // new at 3 ready), and the scaler now says 2. The new LWS keeps its 3 while the old pair
    // drains; nothing scales it down until the update is over.
    let old = external(pd(2, 1, "v1"), "decode");
    let s = external(pd(2, 1, "v2"), "decode");
    let (ro, rn) = (rev(&old), rev(&s));
    let mut w = World::default();
    w.lws(&old, &ro, "prefill", 2, 2, 10)
        .lws(&old, &ro, "decode", 4, 4, 10)
        .initial(&format!("pd-0-{ro}-prefill"), 2)
        .initial(&format!("pd-0-{ro}-decode"), 4)
        .lws(&s, &rn, "prefill", 2, 2, 20)
        .lws(&s, &rn, "decode", 3, 3, 20)
        .scaler("decode", 2, true);
    let p = w.plan(&s);
    assert_eq!(
        scaled(&p),
        [
            (format!("pd-0-{ro}-prefill"), 2, 0),
            (format!("pd-0-{ro}-decode"), 4, 0)
        ]
    );
    // Once the old revision is gone, the scaler's value applies.
    let mut w = World::default();
    w.lws(&s, &rn, "prefill", 2, 2, 20)
        .lws(&s, &rn, "decode", 3, 3, 20)
        .scaler("decode", 2, true);
    assert_eq!(scaled(&w.plan(&s)), [(format!("pd-0-{rn}-decode"), 3, 2)]);
}

#[test]
fn scalers_of_roles_no_longer_external_go_and_foreign_ones_are_not_taken() {
    let s = pd(2, 2, "v1");
    let r = rev(&s);
    let mut w = World::default();
    w.lws(&s, &r, "prefill", 2, 2, 10)
        .lws(&s, &r, "decode", 2, 2, 10)
        .scaler("decode", 5, true);
    let p = w.plan(&s);
    assert_eq!(
        p.delete_scalers
            .iter()
            .map(|d| d.name.as_str())
            .collect::<Vec<_>>(),
        ["pd-decode"]
    );
    assert!(p.scale.is_empty(), "a Static role keeps its replicas");

    let s = external(pd(2, 2, "v1"), "decode");
    let mut w = World::default();
    w.lws(&s, &r, "prefill", 2, 2, 10)
        .lws(&s, &rev(&s), "decode", 2, 2, 10)
        .scaler("decode", 9, false);
    let p = w.plan(&s);
    assert!(p.create_scalers.is_empty() && p.scale.is_empty());
    assert_eq!(cond(&p, status::DEGRADED).reason, reasons::OBJECT_CONFLICT);
    assert!(
        p.events
            .iter()
            .any(|e| e.reason == reasons::SCALER_CONFLICT)
    );
}

#[test]
fn an_external_role_without_the_scaler_kind_runs_its_replicas_and_the_set_says_why() {
    let s = external(pd(2, 3, "v1"), "decode");
    let r = rev(&s);
    let mut w = World::default();
    w.observed.scalers_unserved = true;
    let p = w.plan(&s);
    assert!(p.create_scalers.is_empty());
    assert_eq!(
        created(&p),
        [
            (format!("pd-0-{r}-prefill"), 2),
            (format!("pd-0-{r}-decode"), 3)
        ]
    );
    let degraded = cond(&p, status::DEGRADED);
    assert_eq!(
        (degraded.status.as_str(), degraded.reason.as_str()),
        ("True", reasons::ROLE_SCALER_NOT_SERVED)
    );
    assert!(
        degraded.message.contains("role decode"),
        "{}",
        degraded.message
    );
    assert!(
        p.events
            .iter()
            .any(|e| e.reason == reasons::ROLE_SCALER_NOT_SERVED)
    );
    // A Static set is not concerned.
    let mut w = World::default();
    w.observed.scalers_unserved = true;
    let p = w.plan(&pd(2, 3, "v1"));
    assert_eq!(cond(&p, status::DEGRADED).status, "False");
}

#[test]
fn a_placement_policy_places_each_slices_pods() {
    let s = with(
        pd(1, 1, "v1"),
        json!({"slices": 2, "placementPolicy": {"type": "ExclusiveTopology", "topology": "zone"}}),
    );
    let p = World::default().plan(&s);
    assert_eq!(p.create.len(), 4);
    for c in &p.create {
        let slice = c.lws.labels()[SLICE_LABEL].clone();
        let pod = c
            .lws
            .spec
            .leader_worker_template
            .worker_template
            .spec
            .as_ref()
            .unwrap();
        let affinity = pod.affinity.as_ref().unwrap();
        let together = &affinity
            .pod_affinity
            .as_ref()
            .unwrap()
            .required_during_scheduling_ignored_during_execution
            .as_ref()
            .unwrap()[0];
        assert_eq!(together.topology_key, "zone");
        let exprs = together
            .label_selector
            .as_ref()
            .unwrap()
            .match_expressions
            .as_ref()
            .unwrap();
        assert_eq!(exprs[1].values, Some(vec![slice]));
        let apart = affinity
            .pod_anti_affinity
            .as_ref()
            .unwrap()
            .required_during_scheduling_ignored_during_execution
            .as_ref()
            .unwrap();
        assert_eq!(apart.len(), 2, "other slices and other sets kept out");
    }
    // Without a topology key nothing is placed (admission refuses it; the builder stays safe).
    let s = with(
        pd(1, 1, "v1"),
        json!({"placementPolicy": {"type": "ExclusiveSlice"}}),
    );
    let p = World::default().plan(&s);
    let pod = p.create[0]
        .lws
        .spec
        .leader_worker_template
        .worker_template
        .spec
        .as_ref()
        .unwrap();
    assert!(pod.affinity.is_none());
}

/// A set held by a release (the Rollout side's contract).
mod held;
