//! Table tests of the BatchRelease plan: plain data in, plan out.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;

use super::*;
use crate::api::batchrelease::{
    BatchRelease, BatchReleaseSpec, BatchReleaseStatus, FinalizingPolicy, ReleaseBatch, ReleasePlan,
};
use crate::api::leaderworkerset::LeaderWorkerSet;
use crate::api::leaderworkerset::{
    LeaderWorkerSetSpec, LeaderWorkerSetStatus, LeaderWorkerTemplate,
};
use crate::api::rollout::{ObjectRef, PatchPodTemplateMetadata};
use crate::batchrelease::names::{CANARY_LABEL, CONTROL_INFO};
use crate::batchrelease::observe::CanaryLws;
use crate::batchrelease::observe::{GroupOnRevision, GroupReadiness, StableLws};

fn now() -> Timestamp {
    Timestamp::from_second(1_795_327_200).unwrap()
}

fn br(partition: Option<i32>, threshold: Option<IntOrString>) -> BatchRelease {
    let mut br = BatchRelease::new(
        "vllm",
        BatchReleaseSpec {
            workload_ref: ObjectRef {
                api_version: "leaderworkerset.x-k8s.io/v1".into(),
                kind: "LeaderWorkerSet".into(),
                name: "vllm".into(),
            },
            release_plan: ReleasePlan {
                batches: Some(
                    [
                        IntOrString::Int(1),
                        IntOrString::String("50%".into()),
                        IntOrString::String("100%".into()),
                    ]
                    .into_iter()
                    .map(|canary_replicas| ReleaseBatch { canary_replicas })
                    .collect(),
                ),
                batch_partition: partition,
                rollout_id: Some("r1".into()),
                failure_threshold: threshold,
                patch_pod_template_metadata: Some(PatchPodTemplateMetadata {
                    labels: Some(BTreeMap::from([("release".into(), "canary".into())])),
                    annotations: None,
                }),
                rolling_style: Some(RollingStyle::Canary),
                enable_extra_workload_for_canary: true,
                ..ReleasePlan::default()
            },
        },
    );
    br.metadata.namespace = Some("ns".into());
    br.metadata.uid = Some("br-uid".into());
    br.metadata.generation = Some(1);
    br.status = Some(BatchReleaseStatus {
        phase: Some(phase::PROGRESSING.into()),
        update_revision: Some("rev2".into()),
        stable_revision: Some("rev1".into()),
        ..BatchReleaseStatus::default()
    });
    br
}

fn stable(replicas: i32) -> StableLws {
    let worker = PodTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: Some(BTreeMap::from([("app".into(), "vllm".into())])),
            ..ObjectMeta::default()
        }),
        spec: None,
    };
    let lws = LeaderWorkerSet {
        metadata: ObjectMeta {
            name: Some("vllm".into()),
            namespace: Some("ns".into()),
            generation: Some(3),
            ..ObjectMeta::default()
        },
        spec: LeaderWorkerSetSpec {
            replicas: Some(replicas),
            leader_worker_template: LeaderWorkerTemplate {
                worker_template: worker,
                size: Some(4),
                ..LeaderWorkerTemplate::default()
            },
            ..LeaderWorkerSetSpec::default()
        },
        status: Some(LeaderWorkerSetStatus {
            observed_generation: Some(3),
            replicas: Some(replicas),
            ready_replicas: Some(replicas),
            updated_replicas: Some(0),
            ..LeaderWorkerSetStatus::default()
        }),
    };
    StableLws {
        lws,
        update_revision: "rev2".into(),
        hold: Some("rev1".into()),
        release_partition: None,
        on_update: Vec::new(),
        gang_waits: Default::default(),
        leaders_confirmed: false,
    }
}

/// The stable LWS's status says `n` groups are on its template.
fn set_updated(o: &mut BatchReleaseObserved, n: i32) {
    let stable = o.stable.as_mut().expect("a stable LWS");
    stable
        .lws
        .status
        .as_mut()
        .expect("a status")
        .updated_replicas = Some(n);
}

fn canary(spec_replicas: i32, existing: i32, ready: i32, not_ready: &[(i32, i32)]) -> CanaryLws {
    let mut lws = stable(4).lws;
    lws.metadata.name = Some("vllm-canary-rev2".into());
    lws.metadata.generation = Some(2);
    lws.spec.replicas = Some(spec_replicas);
    lws.status = Some(LeaderWorkerSetStatus {
        observed_generation: Some(2),
        replicas: Some(existing),
        ready_replicas: Some(ready),
        updated_replicas: Some(existing),
        ..LeaderWorkerSetStatus::default()
    });
    CanaryLws {
        lws,
        not_ready_groups: not_ready
            .iter()
            .map(|(index, ready_pods)| GroupReadiness {
                index: *index,
                ready_pods: *ready_pods,
                pods: 4,
                kueue: None,
                gang: None,
            })
            .collect(),
    }
}

fn observed(br: BatchRelease, canaries: Vec<CanaryLws>) -> BatchReleaseObserved {
    BatchReleaseObserved {
        br,
        stable: Some(stable(4)),
        canaries,
    }
}

#[test]
fn canary_is_the_stable_spec_with_batch_replicas_labels_owner_and_leader_only_patch() {
    let p = plan(&observed(br(Some(0), None), vec![]), now());
    let c = p.apply_canary.expect("canary wanted");
    assert_eq!(c.metadata.name.as_deref(), Some("vllm-canary-rev2"));
    assert_eq!(c.spec.replicas, Some(1));
    assert_eq!(
        c.labels().get(CANARY_LABEL).map(String::as_str),
        Some("vllm")
    );
    let info: serde_json::Value = serde_json::from_str(&c.annotations()[CONTROL_INFO]).unwrap();
    assert_eq!(info["kind"], "BatchRelease");
    assert_eq!(info["uid"], "br-uid");
    let owner = &c.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.controller),
        ("BatchRelease", Some(true))
    );
    let leader = c
        .spec
        .leader_worker_template
        .leader_template
        .as_ref()
        .expect("leader template");
    let leader_labels = leader.metadata.as_ref().unwrap().labels.as_ref().unwrap();
    assert_eq!(
        leader_labels.get("release").map(String::as_str),
        Some("canary")
    );
    assert_eq!(leader_labels.get("app").map(String::as_str), Some("vllm"));
    let worker_labels = c
        .spec
        .leader_worker_template
        .worker_template
        .metadata
        .as_ref()
        .unwrap()
        .labels
        .as_ref()
        .unwrap();
    assert!(
        !worker_labels.contains_key("release"),
        "workers are not patched"
    );
    let cs = p.status.canary_status.unwrap();
    assert_eq!(
        cs.current_batch_state.as_deref(),
        Some(batch_state::UPGRADING)
    );
}

#[test]
fn batch_states_follow_the_canary_lws() {
    // (partition, threshold, canary (spec, existing, ready, not ready groups), state, replicas applied)
    type Row = (
        Option<i32>,
        Option<IntOrString>,
        Option<CanaryLws>,
        &'static str,
        i32,
    );
    let table: Vec<Row> = vec![
        (Some(0), None, None, batch_state::UPGRADING, 1),
        (
            Some(0),
            None,
            Some(canary(1, 1, 0, &[(0, 3)])),
            batch_state::VERIFYING,
            1,
        ),
        (
            Some(0),
            None,
            Some(canary(1, 1, 1, &[])),
            batch_state::READY,
            1,
        ),
        // 50% of 4 groups = 2: one more group wanted.
        (
            Some(1),
            None,
            Some(canary(1, 1, 1, &[])),
            batch_state::UPGRADING,
            2,
        ),
        (
            Some(1),
            None,
            Some(canary(2, 2, 1, &[(1, 2)])),
            batch_state::VERIFYING,
            2,
        ),
        (
            Some(1),
            Some(IntOrString::Int(1)),
            Some(canary(2, 2, 1, &[(1, 2)])),
            batch_state::READY,
            2,
        ),
        (
            Some(1),
            Some(IntOrString::String("50%".into())),
            Some(canary(2, 2, 1, &[(1, 2)])),
            batch_state::READY,
            2,
        ),
        (
            Some(1),
            Some(IntOrString::String("25%".into())),
            Some(canary(2, 2, 1, &[(1, 2)])),
            batch_state::READY,
            2,
        ),
        // A threshold never makes zero ready groups ready.
        (
            Some(0),
            Some(IntOrString::Int(1)),
            Some(canary(1, 1, 0, &[(0, 0)])),
            batch_state::VERIFYING,
            1,
        ),
        // A jump back keeps the canary's groups (never scaled down mid-release).
        (
            Some(0),
            None,
            Some(canary(4, 4, 4, &[])),
            batch_state::READY,
            4,
        ),
    ];
    for (i, (partition, threshold, c, state, replicas)) in table.into_iter().enumerate() {
        let p = plan(
            &observed(br(partition, threshold), c.into_iter().collect()),
            now(),
        );
        let cs = p.status.canary_status.clone().unwrap();
        assert_eq!(
            cs.current_batch_state.as_deref(),
            Some(state),
            "row {i}: {p:#?}"
        );
        assert_eq!(
            p.apply_canary.unwrap().spec.replicas,
            Some(replicas),
            "row {i}"
        );
        assert_eq!(cs.current_batch, partition.unwrap(), "row {i}");
        assert_eq!(
            cs.batch_ready_time.is_some(),
            state == batch_state::READY,
            "row {i}"
        );
    }
}

#[test]
fn a_group_that_is_not_ready_is_named_in_the_message_and_an_event() {
    let p = plan(
        &observed(br(Some(1), None), vec![canary(2, 2, 1, &[(1, 2)])]),
        now(),
    );
    let msg = p.status.message.clone().unwrap();
    assert_eq!(
        msg,
        "batch 2 waits for LeaderWorkerSet vllm-canary-rev2: 1/2 groups ready; not ready: group 1"
    );
    assert!(
        p.events
            .iter()
            .any(|e| e.severity == crate::k8s::events::Severity::Warning
                && e.reason == event::CANARY_NOT_READY
                && e.note == msg)
    );
    // Same message stored: no second event.
    let mut again = br(Some(1), None);
    again.status = Some(p.status.clone());
    let p2 = plan(&observed(again, vec![canary(2, 2, 1, &[(1, 2)])]), now());
    assert!(
        !p2.events
            .iter()
            .any(|e| e.reason == event::CANARY_NOT_READY)
    );
    // Another pod of the group starting is no news: same status, so no status write.
    let p3 = plan(
        &observed(br(Some(1), None), vec![canary(2, 2, 1, &[(1, 3)])]),
        now(),
    );
    assert_eq!(
        p3.status, p.status,
        "pod progress inside a group is not written"
    );
}

#[test]
fn a_group_that_waits_for_kueue_says_so_in_kueues_words() {
    use crate::batchrelease::observe::KueueWait;
    let mut c = canary(2, 2, 1, &[(1, 0)]);
    c.not_ready_groups[0].kueue = Some(KueueWait {
        queue: "gpu-team".into(),
        why: "couldn't assign flavors to pod set leader: insufficient quota for nvidia.com/gpu in flavor pool-0".into(),
    });
    let p = plan(&observed(br(Some(1), None), vec![c.clone()]), now());
    let msg = p.status.message.clone().unwrap();
    assert_eq!(
        msg,
        "batch 2 waits for LeaderWorkerSet vllm-canary-rev2: 1/2 groups ready; not ready: group 1; \
         canary group 1 waits for Kueue admission in queue gpu-team: couldn't assign flavors to \
         pod set leader: insufficient quota for nvidia.com/gpu in flavor pool-0"
    );
    assert!(
        p.events
            .iter()
            .any(|e| e.severity == crate::k8s::events::Severity::Warning
                && e.reason == event::CANARY_NOT_READY
                && e.note == msg),
        "a Warning Event says the same"
    );
    // Kueue's reason changing (the LocalQueue created, quota now short) is news: new message.
    c.not_ready_groups[0].kueue = Some(KueueWait {
        queue: "gpu-team".into(),
        why: "LocalQueue gpu-team doesn't exist".into(),
    });
    let mut stored = br(Some(1), None);
    stored.status = Some(p.status.clone());
    let p2 = plan(&observed(stored, vec![c]), now());
    assert!(p2.events.iter().any(|e| e.reason == event::CANARY_NOT_READY
        && e.note.ends_with("LocalQueue gpu-team doesn't exist")));
}

#[test]
fn a_gang_group_the_scheduler_cannot_place_whole_is_named_with_the_schedulers_reason() {
    use crate::batchrelease::observe::{GangWait, GroupOnRevision};
    let why = "0/5 nodes are available: 1 Insufficient nvidia.com/gpu";
    let gang = GangWait {
        pod_group: "vllm-canary-rev2-1-abc".into(),
        why: why.into(),
    };
    // A canary group: the message and a Warning Event name the group, its PodGroup and why.
    let mut c = canary(2, 2, 1, &[(1, 0)]);
    c.not_ready_groups[0].gang = Some(gang.clone());
    let p = plan(&observed(br(Some(1), None), vec![c]), now());
    let msg = p.status.message.clone().unwrap();
    assert_eq!(
        msg,
        format!(
            "batch 2 waits for LeaderWorkerSet vllm-canary-rev2: 1/2 groups ready; not ready: \
             group 1; group 1 cannot be scheduled whole (PodGroup vllm-canary-rev2-1-abc): {why}"
        )
    );
    assert!(
        p.events
            .iter()
            .any(|e| e.reason == event::CANARY_NOT_READY && e.note == msg)
    );
    // A partition-style batch: the user's own group, on its new revision, says the same.
    let mut b = br(Some(0), None);
    b.spec.release_plan.rolling_style = Some(RollingStyle::Partition);
    b.spec.release_plan.enable_extra_workload_for_canary = false;
    let mut o = observed(b, vec![]);
    let stable = o.stable.as_mut().unwrap();
    stable.release_partition = Some(3);
    stable.on_update = vec![GroupOnRevision {
        index: 3,
        leader: true,
        ready_pods: 0,
        leader_pod: None,
    }];
    stable.gang_waits.insert(3, gang);
    let msg = plan(&o, now()).status.message.unwrap();
    assert!(
        msg.contains("not ready: group 3; group 3 cannot be scheduled whole (PodGroup vllm-canary-rev2-1-abc): 0/5 nodes"),
        "{msg}"
    );
}

#[test]
fn a_canary_keeps_the_kueue_queue_it_was_created_with() {
    // The stable LWS carries a queue; the canary as it exists was made without one (an older
    // manager): the plan does not add it (Kueue's webhook refuses changing a queue name).
    let mut stable_in_queue = stable(4);
    stable_in_queue
        .lws
        .metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert(crate::api::kueue::QUEUE_LABEL.into(), "gpu-team".into());
    let mut obs = observed(br(Some(1), None), vec![canary(1, 1, 1, &[])]);
    obs.stable = Some(stable_in_queue.clone());
    let wanted = plan(&obs, now()).apply_canary.unwrap();
    assert!(!wanted.labels().contains_key(crate::api::kueue::QUEUE_LABEL));
    // A new canary gets the stable's queue.
    let mut fresh = observed(br(Some(1), None), vec![]);
    fresh.stable = Some(stable_in_queue);
    let wanted = plan(&fresh, now()).apply_canary.unwrap();
    assert_eq!(
        wanted
            .labels()
            .get(crate::api::kueue::QUEUE_LABEL)
            .map(String::as_str),
        Some("gpu-team")
    );
}

#[test]
fn finalizing_immediate_deletes_the_canary_wait_resume_waits_for_the_stable() {
    let mut b = br(None, None);
    b.spec.release_plan.finalizing_policy = Some(FinalizingPolicy::Immediate);
    let p = plan(&observed(b.clone(), vec![canary(1, 1, 1, &[])]), now());
    assert_eq!(p.delete_canaries, vec!["vllm-canary-rev2".to_string()]);
    assert_eq!(p.apply_canary, None);
    assert_eq!(p.status.phase.as_deref(), Some(phase::FINALIZING));
    let p = plan(&observed(b, vec![]), now());
    assert_eq!(p.status.phase.as_deref(), Some(phase::COMPLETED));

    let mut b = br(None, None);
    b.spec.release_plan.finalizing_policy = Some(FinalizingPolicy::WaitResume);
    let mut o = observed(b, vec![canary(4, 4, 4, &[])]);
    let p = plan(&o, now());
    assert_eq!(
        p.status.phase.as_deref(),
        Some(phase::FINALIZING),
        "stable has not rolled"
    );
    assert!(
        p.delete_canaries.is_empty(),
        "the canary keeps serving until the Rollout is done"
    );
    set_updated(&mut o, 4);
    let p = plan(&o, now());
    assert_eq!(p.status.phase.as_deref(), Some(phase::COMPLETED));
    assert!(p.delete_canaries.is_empty());

    // A third template while finalising: the stable rolls to it (the hold is gone), and
    // WaitResume ends once it has, as Kruise's, instead of waiting for a revision the
    // template has left (the Rollout waits for this Completed).
    o.stable.as_mut().unwrap().update_revision = "rev3".into();
    set_updated(&mut o, 1);
    let p = plan(&o, now());
    assert_eq!(p.status.phase.as_deref(), Some(phase::FINALIZING));
    set_updated(&mut o, 4);
    let p = plan(&o, now());
    assert_eq!(p.status.phase.as_deref(), Some(phase::COMPLETED));
}

#[test]
fn the_canary_keeps_the_last_steps_groups_less_those_the_stable_has_rolled_down_to_a_floor() {
    use crate::batchrelease::canary::keep_while_stable_rolls;
    // (has, last step's groups, stable groups moved and ready, floor, keep)
    let table = [
        (4, 4, 0, 1, 4),
        (4, 4, 1, 1, 3),
        (3, 4, 3, 1, 1),
        (1, 4, 4, 1, 1),
        // maxUnavailable 2: two canary groups stay while two stable groups may be down.
        (4, 4, 3, 2, 2),
        // maxUnavailable 0 (the LWS surges): still one group, for the traffic it has.
        (2, 2, 2, 0, 1),
        // A floor above the last step's groups is capped by them.
        (1, 1, 0, 3, 1),
        // Given back is given back: a stable group failing later grows nothing.
        (2, 4, 0, 1, 2),
        // A canary jumped past the last step (grown, never shrunk) comes down to it.
        (4, 2, 0, 1, 2),
        (0, 2, 0, 1, 0),
    ];
    for (has, last, moved, floor, want) in table {
        assert_eq!(
            keep_while_stable_rolls(has, last, moved, floor),
            want,
            "has {has}, last step {last}, moved {moved}, floor {floor}"
        );
    }
}

#[test]
fn wait_resume_gives_a_canary_group_back_for_each_stable_group_ready_on_the_new_template() {
    let mut b = br(None, None);
    b.spec.release_plan.finalizing_policy = Some(FinalizingPolicy::WaitResume);
    let mut o = observed(b, vec![canary(4, 4, 4, &[])]);
    let on_new = |ready: &[i32]| -> Vec<GroupOnRevision> {
        (0..4)
            .map(|index| GroupOnRevision {
                index,
                leader: ready.contains(&index),
                ready_pods: if ready.contains(&index) { 4 } else { 0 },
                leader_pod: None,
            })
            .collect()
    };
    let p = plan(&o, now());
    assert_eq!(
        p.apply_canary, None,
        "no stable group is on the new template"
    );
    // Group 3 rolled and whole: one canary group goes, with an Event saying why.
    o.stable.as_mut().unwrap().on_update = on_new(&[3]);
    let p = plan(&o, now());
    assert_eq!(
        p.apply_canary.as_ref().and_then(|c| c.spec.replicas),
        Some(3)
    );
    assert!(
        p.events
            .iter()
            .any(|e| e.note.contains("gives back 1 of its 4 groups")),
        "{:?}",
        p.events
    );
    assert_eq!(p.status.phase.as_deref(), Some(phase::FINALIZING));
    // A group with a pod still starting counts for nothing.
    let mut partial = on_new(&[3]);
    partial[3].ready_pods = 3;
    o.stable.as_mut().unwrap().on_update = partial;
    assert_eq!(plan(&o, now()).apply_canary, None);
    // Every stable group on the new template: one canary group stays (maxUnavailable 1) until
    // the Rollout has moved its traffic back; the release is Completed.
    o.stable.as_mut().unwrap().on_update = on_new(&[0, 1, 2, 3]);
    set_updated(&mut o, 4);
    let p = plan(&o, now());
    assert_eq!(
        p.apply_canary.as_ref().and_then(|c| c.spec.replicas),
        Some(1)
    );
    assert_eq!(p.status.phase.as_deref(), Some(phase::COMPLETED));
    assert!(p.delete_canaries.is_empty());
    // Groups counted on another template than the one released count for nothing.
    o.stable.as_mut().unwrap().update_revision = "rev3".into();
    assert_eq!(plan(&o, now()).apply_canary, None);
}

#[test]
fn other_canaries_and_unsupported_plans_and_a_changed_template() {
    let mut stray = canary(1, 1, 1, &[]);
    stray.lws.metadata.name = Some("vllm-canary-old".into());
    let p = plan(&observed(br(Some(0), None), vec![stray]), now());
    assert_eq!(p.delete_canaries, vec!["vllm-canary-old".to_string()]);

    let mut b = br(Some(0), None);
    b.spec.workload_ref.kind = "Deployment".into();
    b.spec.workload_ref.api_version = "apps/v1".into();
    let p = plan(&observed(b, vec![]), now());
    assert!(p.apply_canary.is_none());
    assert!(p.status.message.unwrap().contains("only releases of a"));

    let mut o = observed(br(Some(0), None), vec![canary(1, 1, 1, &[])]);
    o.stable.as_mut().unwrap().update_revision = "rev3".into();
    let p = plan(&o, now());
    assert!(
        p.apply_canary.is_none(),
        "never build a canary from a template the Rollout has not seen"
    );
    assert!(
        p.status
            .message
            .unwrap()
            .contains("waiting for the Rollout")
    );

    let mut o = observed(br(Some(0), None), vec![canary(1, 1, 1, &[])]);
    o.stable = None;
    let p = plan(&o, now());
    assert_eq!(p.delete_canaries, vec!["vllm-canary-rev2".to_string()]);
}

#[test]
fn preparing_records_revisions_and_percentages_round_up() {
    let mut b = br(Some(1), None);
    b.status = None;
    let mut o = observed(b, vec![]);
    o.stable = Some(stable(3));
    let p = plan(&o, now());
    assert_eq!(p.status.stable_revision.as_deref(), Some("rev1"));
    assert_eq!(p.status.update_revision.as_deref(), Some("rev2"));
    // 50% of 3 groups rounds up to 2.
    assert_eq!(p.apply_canary.unwrap().spec.replicas, Some(2));
}

#[test]
fn a_canary_that_already_is_as_wanted_is_not_written_again() {
    let obs = observed(br(Some(0), None), vec![]);
    let first = plan(&obs, now());
    assert!(!first.canary_in_place, "no canary yet: create it");
    // The canary as the API server stores what we applied (plus what it adds).
    let mut stored = first.apply_canary.clone().expect("canary wanted");
    stored.metadata.uid = Some("canary-uid".into());
    stored.metadata.resource_version = Some("7".into());
    stored.metadata.generation = Some(1);
    let mut c = canary(1, 1, 0, &[(0, 3)]);
    c.lws = stored.clone();
    let second = plan(&observed(br(Some(0), None), vec![c.clone()]), now());
    assert!(second.canary_in_place, "nothing would change: no write");
    // The next batch wants another group: written again.
    let third = plan(&observed(br(Some(1), None), vec![c]), now());
    assert!(!third.canary_in_place);
}

#[test]
fn a_canary_group_created_but_not_ready_is_not_written_on_its_own() {
    // Batch 2 verifying: one of two groups exists.
    let p = plan(
        &observed(br(Some(1), None), vec![canary(2, 1, 1, &[(1, 0)])]),
        now(),
    );
    let mut stored = br(Some(1), None);
    stored.status = Some(p.status.clone());
    // The second group is created, not ready yet: nothing a reader acts on changed.
    let p2 = plan(
        &observed(stored.clone(), vec![canary(2, 2, 1, &[(1, 0)])]),
        now(),
    );
    assert_eq!(p2.status, p.status);
    // It becomes ready: written, with the count.
    let p3 = plan(&observed(stored, vec![canary(2, 2, 2, &[])]), now());
    let c = p3.status.canary_status.unwrap();
    assert_eq!(
        (
            c.current_batch_state.as_deref(),
            c.updated_replicas,
            c.updated_ready_replicas
        ),
        (Some(batch_state::READY), 2, 2)
    );
}

#[test]
fn blue_green_runs_batches_as_a_canary_and_at_promotion_grows_to_every_stable_group() {
    let blue_green = |partition, policy| {
        let mut b = br(partition, None);
        let rp = &mut b.spec.release_plan;
        rp.rolling_style = Some(RollingStyle::BlueGreen);
        rp.enable_extra_workload_for_canary = false;
        rp.patch_pod_template_metadata = None;
        rp.finalizing_policy = policy;
        b
    };
    // A batch: the second LWS gets the batch's groups, as a canary would.
    let p = plan(&observed(blue_green(Some(0), None), vec![]), now());
    assert_eq!(p.apply_canary.unwrap().spec.replicas, Some(1));
    // Promotion: one group so far, the stable LWS has 4: the second grows to 4 and stays.
    let b = blue_green(None, Some(FinalizingPolicy::WaitResume));
    let mut o = observed(b, vec![canary(1, 1, 1, &[])]);
    let p = plan(&o, now());
    assert_eq!(p.apply_canary.unwrap().spec.replicas, Some(4));
    assert!(p.delete_canaries.is_empty());
    assert_eq!(p.status.phase.as_deref(), Some(phase::FINALIZING));
    assert!(
        p.status
            .message
            .unwrap()
            .contains("(1/4 groups ready on the new side)")
    );
    // The user's LWS rolled: done, the second LWS left for the Rollout to delete.
    set_updated(&mut o, 4);
    let p = plan(&o, now());
    assert_eq!(p.status.phase.as_deref(), Some(phase::COMPLETED));
    assert!(p.delete_canaries.is_empty());
    // A rollback finishes Immediate: the second LWS goes at once.
    let b = blue_green(None, Some(FinalizingPolicy::Immediate));
    let p = plan(&observed(b, vec![canary(4, 4, 4, &[])]), now());
    assert_eq!(p.delete_canaries, vec!["vllm-canary-rev2".to_string()]);
    assert_eq!(p.apply_canary, None);
}

#[test]
fn a_workload_scaled_mid_release_is_followed_and_said_once() {
    let mut b = br(Some(1), None);
    b.status.as_mut().unwrap().observed_workload_replicas = Some(4);
    let mut o = observed(b, vec![canary(2, 2, 2, &[])]);
    let stable = o.stable.as_mut().unwrap();
    stable.lws.spec.replicas = Some(6);
    stable.lws.status.as_mut().unwrap().replicas = Some(6);
    let p = plan(&o, now());
    assert_eq!(p.apply_canary.unwrap().spec.replicas, Some(3), "50% of 6");
    let said: Vec<_> = p
        .events
        .iter()
        .filter(|e| e.reason == event::WORKLOAD_SCALED)
        .collect();
    assert_eq!(said.len(), 1);
    assert!(
        said[0].note.contains("from 4 to 6 groups") && said[0].note.contains("batch 2 now asks 3"),
        "{}",
        said[0].note
    );
    assert_eq!(p.status.observed_workload_replicas, Some(6));
    // Seen once: the next reconcile says nothing more.
    o.br.status = Some(p.status);
    let p = plan(&o, now());
    assert!(p.events.iter().all(|e| e.reason != event::WORKLOAD_SCALED));
}

/// Partition style: the user's groups move in place, from the highest ordinal down, through
/// the release partition; no second LWS; progress read off the groups on the new revision.
#[test]
fn partition_style_moves_the_users_groups_in_place_batch_by_batch() {
    let partition_br = |batch: Option<i32>, policy: Option<FinalizingPolicy>| {
        let mut b = br(batch, None);
        b.spec.release_plan.rolling_style = Some(RollingStyle::Partition);
        b.spec.release_plan.enable_extra_workload_for_canary = false;
        b.spec.release_plan.finalizing_policy = policy;
        b
    };
    let with = |partition: Option<i32>, groups: &[(i32, bool, i32)]| {
        let mut o = observed(partition_br(Some(0), None), vec![]);
        let stable = o.stable.as_mut().unwrap();
        stable.release_partition = partition;
        stable.on_update = groups
            .iter()
            .map(
                |(index, leader, ready_pods)| crate::batchrelease::observe::GroupOnRevision {
                    index: *index,
                    leader: *leader,
                    ready_pods: *ready_pods,
                    leader_pod: None,
                },
            )
            .collect();
        o
    };
    let state = |p: &BatchReleasePlan| {
        let c = p.status.canary_status.clone().unwrap_or_default();
        (
            c.current_batch_state.unwrap_or_default(),
            c.updated_replicas,
            c.updated_ready_replicas,
        )
    };

    // Batch 1 (1 of 4 groups): the partition is written first; nothing counts until it is.
    let p = plan(&with(None, &[]), now());
    assert_eq!(p.release_partition, Some(3));
    assert!(p.apply_canary.is_none() && p.delete_canaries.is_empty());
    assert_eq!(state(&p), (batch_state::UPGRADING.into(), 0, 0));
    // Written, group 3 rolling: Verifying, and the message names it.
    let p = plan(&with(Some(3), &[(3, true, 2)]), now());
    assert_eq!(p.release_partition, None, "already written");
    assert_eq!(state(&p), (batch_state::VERIFYING.into(), 1, 0));
    let message = p.status.message.unwrap();
    assert!(
        message.contains("from ordinal 3 up") && message.contains("not ready: group 3"),
        "{message}"
    );
    // Group 3 whole and ready on the new revision: Ready.
    let p = plan(&with(Some(3), &[(3, true, 4)]), now());
    assert_eq!(state(&p), (batch_state::READY.into(), 1, 1));

    // Batch 2 (50%): the partition goes down to 2.
    let mut o = with(Some(3), &[(3, true, 4)]);
    o.br = partition_br(Some(1), None);
    assert_eq!(plan(&o, now()).release_partition, Some(2));

    // The template moved on mid-release: no partition written (the webhook froze it).
    let mut o = with(Some(4), &[]);
    o.stable.as_mut().unwrap().update_revision = "rev3".into();
    let p = plan(&o, now());
    assert_eq!(p.release_partition, None);
    assert!(
        p.status
            .message
            .unwrap()
            .contains("every group stays where it is")
    );

    // Finalising: WaitResume until every group has rolled; Immediate at once.
    let mut o = with(Some(2), &[]);
    // The leaders, read fresh at the end, carry no patch (the next test reads them).
    o.stable.as_mut().unwrap().leaders_confirmed = true;
    o.br = partition_br(None, Some(FinalizingPolicy::WaitResume));
    let p = plan(&o, now());
    assert_eq!(p.status.phase.as_deref(), Some(phase::FINALIZING));
    assert_eq!(
        p.release_partition, None,
        "the Rollout lifts it with the hold"
    );
    set_updated(&mut o, 4);
    assert_eq!(
        plan(&o, now()).status.phase.as_deref(),
        Some(phase::COMPLETED)
    );
    o.br = partition_br(None, Some(FinalizingPolicy::Immediate));
    set_updated(&mut o, 0);
    assert_eq!(
        plan(&o, now()).status.phase.as_deref(),
        Some(phase::COMPLETED)
    );
}

/// Kruise's rollback-in-batch on a partition-style release: a template reverted to the held
/// revision starts the release again for it, counting the groups already on it as needing no
/// update, so each batch's share is of the groups that moved; without the mark it only waits
/// (the Rollout cancels).
#[test]
fn partition_style_rolls_a_reverted_template_back_in_batches_when_marked() {
    let mut b = br(Some(0), None);
    b.spec.release_plan.rolling_style = Some(RollingStyle::Partition);
    b.spec.release_plan.enable_extra_workload_for_canary = false;
    let mut o = observed(b, vec![]);
    let on_rev1 = |groups: &[i32]| -> Vec<GroupOnRevision> {
        groups
            .iter()
            .map(|index| GroupOnRevision {
                index: *index,
                leader: true,
                ready_pods: 4,
                leader_pod: None,
            })
            .collect()
    };
    {
        // Groups 2 and 3 had moved to rev2; the template went back to rev1 and the webhook
        // froze every group.
        let stable = o.stable.as_mut().unwrap();
        stable.update_revision = "rev1".into();
        stable.hold = Some("rev1".into());
        stable.release_partition = Some(4);
        stable.on_update = on_rev1(&[0, 1]);
    }
    let p = plan(&o, now());
    assert_eq!(p.release_partition, None);
    assert!(
        p.status
            .message
            .unwrap()
            .contains("every group stays where it is")
    );

    o.br.metadata.annotations = Some(BTreeMap::from([(
        crate::release::names::ROLLBACK_IN_BATCH.to_string(),
        "true".to_string(),
    )]));
    let p = plan(&o, now());
    assert_eq!(p.status.update_revision.as_deref(), Some("rev1"));
    let c = p.status.canary_status.clone().unwrap();
    assert_eq!(c.no_need_update_replicas, Some(2));
    assert_eq!(
        p.release_partition,
        Some(3),
        "batch 1 (1 group) of the 2 that moved: group 3"
    );
    assert!(
        p.events.iter().any(|e| e
            .note
            .contains("rolling back in batches the 2 groups that moved")),
        "{:?}",
        p.events
    );

    // Group 3 back and ready: the batch is Ready, counted over the groups it moves.
    o.br.status = Some(p.status);
    let stable = o.stable.as_mut().unwrap();
    stable.release_partition = Some(3);
    stable.on_update = on_rev1(&[0, 1, 3]);
    let p = plan(&o, now());
    let c = p.status.canary_status.clone().unwrap();
    assert_eq!(
        (
            c.current_batch_state.as_deref(),
            c.updated_replicas,
            c.updated_ready_replicas,
            c.no_need_update_replicas
        ),
        (Some(batch_state::READY), 1, 1, Some(2))
    );
    assert!(
        p.events.iter().all(|e| !e.note.contains("rolling back")),
        "prepared once"
    );
    // The last batch (100% of the 2): group 2 goes back too.
    o.br.status = Some(p.status);
    o.br.spec.release_plan.batch_partition = Some(2);
    assert_eq!(plan(&o, now()).release_partition, Some(2));
}

/// Partition style: `patchPodTemplateMetadata` goes on the moved groups' leader pods (nothing
/// else: the LWS's template is the user's) and comes off them before the release is done,
/// except what the user's own leader template sets.
#[test]
fn partition_style_patches_the_moved_leaders_and_takes_the_patch_off_at_the_end() {
    use crate::batchrelease::observe::LeaderPod;
    let mut b = br(Some(0), None);
    b.spec.release_plan.rolling_style = Some(RollingStyle::Partition);
    b.spec.release_plan.enable_extra_workload_for_canary = false;
    let mut o = observed(b, vec![]);
    let leader = |index: i32, labels: &[(&str, &str)]| LeaderPod {
        name: format!("vllm-{index}"),
        labels: labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        annotations: BTreeMap::new(),
    };
    let group = |index: i32, moved: bool, labels: &[(&str, &str)]| GroupOnRevision {
        index,
        leader: moved,
        ready_pods: if moved { 4 } else { 0 },
        leader_pod: Some(leader(index, labels)),
    };
    {
        let stable = o.stable.as_mut().unwrap();
        stable.release_partition = Some(3);
        stable.on_update = vec![
            group(0, false, &[]),
            group(1, false, &[]),
            group(2, false, &[]),
            group(3, true, &[]),
        ];
    }
    let p = plan(&o, now());
    assert_eq!(
        p.leader_patches,
        vec![(
            "vllm-3".to_string(),
            serde_json::json!({"metadata": {"labels": {"release": "canary"}, "annotations": {}}})
        )],
        "only the moved group's leader"
    );
    o.stable.as_mut().unwrap().on_update[3] = group(3, true, &[("release", "canary")]);
    assert!(plan(&o, now()).leader_patches.is_empty(), "already on");

    // The end: the patch comes off, and the release is done only once it has.
    o.br.spec.release_plan.batch_partition = None;
    o.br.spec.release_plan.finalizing_policy = Some(FinalizingPolicy::Immediate);
    let p = plan(&o, now());
    assert_eq!(
        p.leader_patches,
        vec![(
            "vllm-3".to_string(),
            serde_json::json!({"metadata": {"labels": {"release": null}, "annotations": {}}})
        )]
    );
    assert_eq!(p.status.phase.as_deref(), Some(phase::FINALIZING));
    // What the user's own leader template sets stays.
    let stable = o.stable.as_mut().unwrap();
    stable
        .lws
        .spec
        .leader_worker_template
        .worker_template
        .metadata
        .as_mut()
        .unwrap()
        .labels
        .as_mut()
        .unwrap()
        .insert("release".into(), "canary".into());
    let p = plan(&o, now());
    assert!(p.leader_patches.is_empty());
    assert!(p.confirm_leaders, "the cache's word alone does not end it");
    assert_ne!(p.status.phase.as_deref(), Some(phase::COMPLETED));
    o.stable.as_mut().unwrap().leaders_confirmed = true;
    let p = plan(&o, now());
    assert!(p.leader_patches.is_empty() && !p.confirm_leaders);
    assert_eq!(p.status.phase.as_deref(), Some(phase::COMPLETED));
}

/// Partition style, the end of a release with `patchPodTemplateMetadata`: the pod cache may not
/// show the patch we put on a leader a moment ago (CI saw the Rollout finish with a leader
/// still patched). The end is decided on a fresh read of the leaders, which finds the patch and
/// takes it off first; without a patch to take off there is nothing to confirm.
#[test]
fn partition_style_ends_a_patched_release_only_on_a_fresh_read_of_the_leaders() {
    use crate::batchrelease::observe::confirm_leaders;
    let mut b = br(None, None);
    b.spec.release_plan.rolling_style = Some(RollingStyle::Partition);
    b.spec.release_plan.enable_extra_workload_for_canary = false;
    b.spec.release_plan.finalizing_policy = Some(FinalizingPolicy::Immediate);
    let mut o = observed(b, vec![]);
    o.stable.as_mut().unwrap().on_update = (0..4)
        .map(|index| GroupOnRevision {
            index,
            leader: index >= 2,
            ready_pods: 4,
            leader_pod: Some(crate::batchrelease::observe::LeaderPod {
                name: format!("vllm-{index}"),
                ..Default::default()
            }),
        })
        .collect();
    // The cache: no leader carries the patch.
    let p = plan(&o, now());
    assert!(p.confirm_leaders && p.leader_patches.is_empty());
    assert_ne!(p.status.phase.as_deref(), Some(phase::COMPLETED));

    // The API server (the leaders' metadata): group 2's leader does, group 3's is being
    // replaced.
    let pod = |index: i32, extra: &[(&str, &str)], deleting: bool| {
        let mut labels: BTreeMap<String, String> = [
            ("leaderworkerset.sigs.k8s.io/name", "vllm".to_string()),
            ("leaderworkerset.sigs.k8s.io/worker-index", "0".into()),
            ("leaderworkerset.sigs.k8s.io/group-index", index.to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        labels.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        ObjectMeta {
            name: Some(format!("vllm-{index}")),
            labels: Some(labels),
            deletion_timestamp: deleting
                .then(|| k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now())),
            ..ObjectMeta::default()
        }
    };
    let fresh = [
        pod(0, &[], false),
        pod(1, &[], false),
        pod(2, &[("release", "canary")], false),
        pod(3, &[("release", "canary")], true),
    ];
    confirm_leaders(o.stable.as_mut().unwrap(), &fresh);
    let p = plan(&o, now());
    assert_eq!(
        p.leader_patches,
        vec![(
            "vllm-2".to_string(),
            serde_json::json!({"metadata": {"labels": {"release": null}, "annotations": {}}})
        )],
        "the patch the cache missed comes off; a terminating leader is left to go"
    );
    assert!(!p.confirm_leaders);
    assert_eq!(p.status.phase.as_deref(), Some(phase::FINALIZING));

    // The next reconcile reads the cache again, which now shows the leader clean: confirmed
    // again, then done.
    o.stable.as_mut().unwrap().leaders_confirmed = false;
    o.stable.as_mut().unwrap().on_update[2].leader_pod =
        Some(crate::batchrelease::observe::LeaderPod {
            name: "vllm-2".into(),
            ..Default::default()
        });
    assert!(plan(&o, now()).confirm_leaders);
    confirm_leaders(
        o.stable.as_mut().unwrap(),
        &[pod(0, &[], false), pod(2, &[], false)],
    );
    let p = plan(&o, now());
    assert_eq!(p.status.phase.as_deref(), Some(phase::COMPLETED));

    // Without patchPodTemplateMetadata nothing is read.
    o.br.spec.release_plan.patch_pod_template_metadata = None;
    o.stable.as_mut().unwrap().leaders_confirmed = false;
    let p = plan(&o, now());
    assert!(!p.confirm_leaders);
    assert_eq!(p.status.phase.as_deref(), Some(phase::COMPLETED));
}
