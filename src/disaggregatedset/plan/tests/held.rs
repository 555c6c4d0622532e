//! A set held by a release: the held revision `H` at the roles' replicas, the template's
//! revision `C` at the release's groups, other revisions drained, no rolling-update step; and
//! the resume once the hold is lifted.

use super::*;
use crate::api::disaggregatedset::{HELD_REVISION_ANNOTATION, RELEASE_GROUPS_ANNOTATION};

/// `s` held on `h`, with the release-groups annotation when given.
fn held(mut s: DisaggregatedSet, h: &str, groups: Option<&str>) -> DisaggregatedSet {
    s.annotations_mut()
        .insert(HELD_REVISION_ANNOTATION.into(), h.into());
    if let Some(g) = groups {
        s.annotations_mut()
            .insert(RELEASE_GROUPS_ANNOTATION.into(), g.into());
    }
    s
}

/// A stable 2/2 pair on v1 and the template at v2: (old, new, H, C, the world with H's LWSs).
fn stable_pair() -> (DisaggregatedSet, DisaggregatedSet, String, String, World) {
    let old = pd(2, 2, "v1");
    let new = pd(2, 2, "v2");
    let (h, c) = (rev(&old), rev(&new));
    let mut w = World::default();
    w.lws(&old, &h, "prefill", 2, 2, 10)
        .lws(&old, &h, "decode", 2, 2, 10);
    (old, new, h, c, w)
}

#[test]
fn held_without_groups_runs_only_the_held_revision() {
    let (_, new, h, _, w) = stable_pair();
    for groups in [None, Some("{}"), Some(r#"{"router":3}"#)] {
        let p = w.plan(&held(new.clone(), &h, groups));
        assert!(
            p.create.is_empty(),
            "{groups:?}: no LWS of the new revision"
        );
        assert!(
            p.scale.is_empty(),
            "{groups:?}: the stable pair keeps its groups"
        );
        assert!(p.delete.is_empty() && p.on_created.is_empty());
        let progressing = cond(&p, status::PROGRESSING);
        assert_eq!(
            (progressing.status.as_str(), progressing.reason.as_str()),
            ("False", status::HELD_BY_ROLLOUT),
            "{groups:?}: settled on the held revision, not Degraded"
        );
        assert!(progressing.message.contains(&h), "{}", progressing.message);
        assert_eq!(cond(&p, status::DEGRADED).status, "False");
        assert_eq!(cond(&p, status::AVAILABLE).status, "True");
    }
}

#[test]
fn the_held_revision_records_what_the_resume_starts_from() {
    let (_, new, h, _, mut w) = stable_pair();
    let p = w.plan(&held(new.clone(), &h, None));
    let annotated: Vec<_> = p
        .annotate
        .iter()
        .map(|a| (a.name.clone(), a.replicas))
        .collect();
    assert_eq!(
        annotated,
        [
            (format!("pd-0-{h}-prefill"), 2),
            (format!("pd-0-{h}-decode"), 2)
        ]
    );
    // Recorded already (or a stale value from an earlier update corrected): nothing, or the
    // held replicas.
    w.initial(&format!("pd-0-{h}-prefill"), 2)
        .initial(&format!("pd-0-{h}-decode"), 5);
    let p = w.plan(&held(new, &h, None));
    let annotated: Vec<_> = p
        .annotate
        .iter()
        .map(|a| (a.name.clone(), a.replicas))
        .collect();
    assert_eq!(annotated, [(format!("pd-0-{h}-decode"), 2)]);
}

#[test]
fn release_groups_create_every_roles_canary_in_one_plan() {
    let (old, new, h, c, mut w) = stable_pair();
    let p = w.plan(&held(new.clone(), &h, Some(r#"{"prefill":1,"decode":1}"#)));
    assert_eq!(
        created(&p),
        [
            (format!("pd-0-{c}-prefill"), 1),
            (format!("pd-0-{c}-decode"), 1)
        ]
    );
    assert!(p.scale.is_empty(), "the stable pair is not touched");
    assert!(p.on_created.is_empty(), "no rolling update started");
    assert!(
        p.services.is_empty(),
        "no Service for the new revision before it has a ready pair"
    );

    // (C prefill/decode replicas and ready, release-groups) → scales of C's LWSs.
    type Case = (
        &'static str,
        [i32; 2],
        [i32; 2],
        &'static str,
        Vec<(String, i32, i32)>,
    );
    let p_ = |from: i32, to: i32| (format!("pd-0-{c}-prefill"), from, to);
    let d_ = |from: i32, to: i32| (format!("pd-0-{c}-decode"), from, to);
    let cases: Vec<Case> = vec![
        (
            "at the batch: nothing",
            [1, 1],
            [1, 1],
            r#"{"prefill":1,"decode":1}"#,
            vec![],
        ),
        (
            "the next batch, both roles at once",
            [1, 1],
            [1, 1],
            r#"{"prefill":2,"decode":2}"#,
            vec![p_(1, 2), d_(1, 2)],
        ),
        (
            "more than a role has: capped at its replicas",
            [2, 2],
            [2, 2],
            r#"{"prefill":9,"decode":2}"#,
            vec![],
        ),
        (
            "a rollback of the batch: back to 0 together",
            [1, 1],
            [1, 1],
            r#"{"prefill":0}"#,
            vec![p_(1, 0), d_(1, 0)],
        ),
        (
            "not a number of groups: 0, said in the status",
            [1, 1],
            [1, 1],
            r#"{"prefill":"one","decode":-1}"#,
            vec![p_(1, 0), d_(1, 0)],
        ),
        (
            "not JSON: 0, said in the status",
            [1, 1],
            [0, 1],
            "prefill=1",
            vec![p_(1, 0), d_(1, 0)],
        ),
    ];
    for (name, replicas, ready, groups, want) in cases {
        let mut w = World::default();
        w.lws(&old, &h, "prefill", 2, 2, 10)
            .lws(&old, &h, "decode", 2, 2, 10)
            .lws(&new, &c, "prefill", replicas[0], ready[0], 20)
            .lws(&new, &c, "decode", replicas[1], ready[1], 20);
        let p = w.plan(&held(new.clone(), &h, Some(groups)));
        let mut got = scaled(&p);
        got.sort();
        let mut want = want;
        want.sort();
        assert_eq!(got, want, "{name}");
        assert!(p.create.is_empty() && p.delete.is_empty(), "{name}");
        let degraded = cond(&p, status::DEGRADED);
        let invalid = name.ends_with("said in the status");
        assert_eq!(
            degraded.reason == reasons::INVALID_RELEASE_GROUPS,
            invalid,
            "{name}: {degraded:?}"
        );
        if invalid {
            assert!(degraded.message.contains(RELEASE_GROUPS_ANNOTATION));
        }
    }
    // The new pair serves once both roles have a ready group, the stable pair still does.
    w.lws(&new, &c, "prefill", 1, 1, 20)
        .lws(&new, &c, "decode", 1, 0, 20)
        .service(&old, "prefill", &h)
        .service(&old, "decode", &h);
    let groups = Some(r#"{"prefill":1,"decode":1}"#);
    let p = w.plan(&held(new.clone(), &h, groups));
    assert!(p.services.is_empty(), "decode has no ready group yet");
    assert!(p.delete_services.is_empty());
    let decode = w
        .observed
        .lws
        .iter_mut()
        .find(|l| l.name_any() == format!("pd-0-{c}-decode"))
        .unwrap();
    Arc::make_mut(decode)
        .status
        .as_mut()
        .unwrap()
        .ready_replicas = Some(1);
    let p = w.plan(&held(new.clone(), &h, groups));
    let names: Vec<_> = p.services.iter().map(|s| s.name_any()).collect();
    assert_eq!(
        names,
        [
            format!("pd-0-{c}-prefill-prv"),
            format!("pd-0-{c}-decode-prv")
        ]
    );
    assert!(
        p.delete_services.is_empty(),
        "the stable pair keeps serving"
    );
    assert!(p.scale.is_empty() && p.create.is_empty());
    assert_eq!(
        cond(&p, status::PROGRESSING).reason,
        status::HELD_BY_ROLLOUT,
        "the canary beside the settled stable pair is the release's business"
    );
}

#[test]
fn a_stable_group_lost_or_a_role_rescaled_while_held_goes_to_the_held_revision() {
    let (old, _, h, c, _) = stable_pair();
    let new = held(pd(3, 2, "v2"), &h, Some(r#"{"prefill":1,"decode":1}"#));
    assert_eq!(rev(&new), c, "replicas make no revision");
    let mut w = World::default();
    w.lws(&old, &h, "prefill", 2, 2, 10)
        .lws(&old, &h, "decode", 2, 1, 10)
        .lws(&new, &c, "prefill", 1, 1, 20)
        .lws(&new, &c, "decode", 1, 1, 20);
    let p = w.plan(&new);
    assert_eq!(scaled(&p), [(format!("pd-0-{h}-prefill"), 2, 3)]);
    assert!(p.create.is_empty());
    let progressing = cond(&p, status::PROGRESSING);
    assert_eq!(
        (progressing.status.as_str(), progressing.reason.as_str()),
        ("True", "RolesProgressing")
    );
}

#[test]
fn a_third_revision_drains_once_the_held_one_is_ready_and_goes_with_its_pair() {
    let (old, _, h, _, _) = stable_pair();
    let middle = pd(2, 2, "v2");
    let third = pd(2, 2, "v3");
    let (m, c) = (rev(&middle), rev(&third));
    // While the release-groups are on the set the release may still route to the second
    // template's pair: it keeps its groups.
    let routed = held(third.clone(), &h, Some(r#"{"prefill":1,"decode":1}"#));
    let mut w = World::default();
    w.lws(&old, &h, "prefill", 2, 2, 10)
        .lws(&old, &h, "decode", 2, 2, 10)
        .lws(&middle, &m, "prefill", 1, 1, 20)
        .lws(&middle, &m, "decode", 1, 1, 20);
    let p = w.plan(&routed);
    assert!(
        scaled(&p).iter().all(|s| !s.0.contains(&m)),
        "{:?}",
        scaled(&p)
    );
    // The release removed them (its traffic on H): the second template's pair drains.
    let set = held(third.clone(), &h, None);

    // The held revision not ready: the second template's canary stays.
    let mut w = World::default();
    w.lws(&old, &h, "prefill", 2, 1, 10)
        .lws(&old, &h, "decode", 2, 2, 10)
        .lws(&middle, &m, "prefill", 1, 1, 20)
        .lws(&middle, &m, "decode", 1, 1, 20);
    let p = w.plan(&set);
    assert!(scaled(&p).is_empty());
    assert_eq!(p.requeue, Some(STABILITY_RECHECK));
    assert!(created(&p).is_empty(), "no groups asked for {c} yet");
    let p = w.plan(&routed);
    assert_eq!(
        created(&p),
        [
            (format!("pd-0-{c}-prefill"), 1),
            (format!("pd-0-{c}-decode"), 1)
        ]
    );

    // Ready: both roles of it to 0 in one plan.
    let mut w = World::default();
    w.lws(&old, &h, "prefill", 2, 2, 10)
        .lws(&old, &h, "decode", 2, 2, 10)
        .lws(&middle, &m, "prefill", 1, 1, 20)
        .lws(&middle, &m, "decode", 1, 1, 20)
        .service(&middle, "prefill", &m)
        .service(&middle, "decode", &m);
    let p = w.plan(&set);
    let mut got = scaled(&p);
    got.sort();
    let mut want = vec![
        (format!("pd-0-{m}-prefill"), 1, 0),
        (format!("pd-0-{m}-decode"), 1, 0),
    ];
    want.sort();
    assert_eq!(got, want);
    assert_eq!(cond(&p, status::PROGRESSING).status, "True");

    // One role at 0, the other not: nothing deleted (a half pair never goes alone).
    let mut w = World::default();
    w.lws(&old, &h, "prefill", 2, 2, 10)
        .lws(&old, &h, "decode", 2, 2, 10)
        .lws(&middle, &m, "prefill", 0, 0, 20)
        .lws(&middle, &m, "decode", 1, 1, 20);
    let p = w.plan(&set);
    assert!(p.delete.is_empty());
    assert_eq!(scaled(&p), [(format!("pd-0-{m}-decode"), 1, 0)]);

    // Both at 0: deleted together; the held revision is never deleted, even at 0.
    let mut w = World::default();
    w.lws(&old, &h, "prefill", 2, 2, 10)
        .lws(&old, &h, "decode", 2, 2, 10)
        .lws(&middle, &m, "prefill", 0, 0, 20)
        .lws(&middle, &m, "decode", 0, 0, 20);
    let mut got = deleted(&w.plan(&set));
    got.sort();
    let mut want = vec![format!("pd-0-{m}-prefill"), format!("pd-0-{m}-decode")];
    want.sort();
    assert_eq!(got, want);
}

#[test]
fn a_reverted_template_keeps_the_held_revision_and_drains_the_canary() {
    let (old, new, h, c, _) = stable_pair();
    // The hold stays until the release lifts it; the template is back at H. While the
    // release-groups are on the set the release may still route to the canary: it stays.
    let set = held(old.clone(), &h, Some(r#"{"prefill":1,"decode":1}"#));
    let mut w = World::default();
    w.lws(&old, &h, "prefill", 2, 2, 10)
        .lws(&old, &h, "decode", 2, 2, 10)
        .lws(&new, &c, "prefill", 1, 1, 20)
        .lws(&new, &c, "decode", 1, 1, 20);
    let p = w.plan(&set);
    assert!(scaled(&p).is_empty() && p.create.is_empty() && p.delete.is_empty());
    // Without them (the traffic is on H), the canary drains, both roles in one plan.
    let set = held(old.clone(), &h, None);
    let p = w.plan(&set);
    let mut got = scaled(&p);
    got.sort();
    let mut want = vec![
        (format!("pd-0-{c}-prefill"), 1, 0),
        (format!("pd-0-{c}-decode"), 1, 0),
    ];
    want.sort();
    assert_eq!(got, want, "release-groups mean nothing once H == C");
    assert!(p.create.is_empty() && p.annotate.is_empty());
    assert_eq!(cond(&p, status::DEGRADED).status, "False");

    // A role's LWS of the held revision missing: recreated, its template is the spec's again.
    let mut w = World::default();
    w.lws(&old, &h, "prefill", 2, 2, 10);
    let p = w.plan(&set);
    assert_eq!(created(&p), [(format!("pd-0-{h}-decode"), 2)]);
}

#[test]
fn every_slice_takes_the_same_batch() {
    let old = with(pd(2, 1, "v1"), json!({"slices": 2}));
    let new = with(pd(2, 1, "v2"), json!({"slices": 2}));
    let (h, c) = (rev(&old), rev(&new));
    let mut w = World::default();
    for slice in [0, 1] {
        w.lws_in(&old, Some(slice), &h, "prefill", 2, 2, 10).lws_in(
            &old,
            Some(slice),
            &h,
            "decode",
            1,
            1,
            10,
        );
    }
    let p = w.plan(&held(new.clone(), &h, Some(r#"{"prefill":1,"decode":1}"#)));
    let mut got = created(&p);
    got.sort();
    let mut want = vec![];
    for slice in [0, 1] {
        want.push((format!("pd-{slice}-{c}-prefill"), 1));
        want.push((format!("pd-{slice}-{c}-decode"), 1));
    }
    want.sort();
    assert_eq!(got, want);
    assert!(p.scale.is_empty());
    assert_eq!(
        cond(&p, status::PROGRESSING).reason,
        status::HELD_BY_ROLLOUT
    );
}

/// The hold lifted with the canary at 1 of 2 per role: the set's own rolling update continues
/// from there — nothing created, the canary kept, the stable pair stepped down and deleted
/// together — reconcile by reconcile.
#[test]
fn lifting_the_hold_resumes_the_sets_own_rolling_update_from_the_canary() {
    let (old, new, h, c, _) = stable_pair();
    // (H p/d replicas, C p/d replicas (all ready)) → (scales, deletes)
    type Case = ([i32; 2], [i32; 2], Vec<(String, i32, i32)>, usize);
    let hs = |role: &str, from: i32, to: i32| (format!("pd-0-{h}-{role}"), from, to);
    let cs = |role: &str, from: i32, to: i32| (format!("pd-0-{c}-{role}"), from, to);
    let cases: Vec<Case> = vec![
        // Surge 1: 2 + 1 is the most a role may run; the stable side steps down first.
        (
            [2, 2],
            [1, 1],
            vec![hs("decode", 2, 1), hs("prefill", 2, 1)],
            0,
        ),
        (
            [1, 1],
            [1, 1],
            vec![cs("decode", 1, 2), cs("prefill", 1, 2)],
            0,
        ),
        (
            [1, 1],
            [2, 2],
            vec![hs("decode", 1, 0), hs("prefill", 1, 0)],
            0,
        ),
        ([0, 0], [2, 2], vec![], 2),
    ];
    for (held_replicas, canary, want, deletes) in cases {
        let mut w = World::default();
        w.lws(&old, &h, "prefill", held_replicas[0], held_replicas[0], 10)
            .lws(&old, &h, "decode", held_replicas[1], held_replicas[1], 10)
            .lws(&new, &c, "prefill", canary[0], canary[0], 20)
            .lws(&new, &c, "decode", canary[1], canary[1], 20)
            // What the hold recorded.
            .initial(&format!("pd-0-{h}-prefill"), 2)
            .initial(&format!("pd-0-{h}-decode"), 2);
        let p = w.plan(&new);
        let mut got = scaled(&p);
        got.sort();
        let mut want = want;
        want.sort();
        assert_eq!(got, want, "{held_replicas:?} {canary:?}");
        assert!(p.create.is_empty(), "nothing recreated");
        assert!(p.on_created.is_empty(), "no second RollingUpdateStarted");
        assert_eq!(p.delete.len(), deletes);
        assert!(
            p.delete.iter().all(|d| d.name.contains(&h)),
            "only the held revision goes"
        );
    }
    // The canary at the whole size (a 100% step): the stable pair drains at once.
    let mut w = World::default();
    w.lws(&old, &h, "prefill", 2, 2, 10)
        .lws(&old, &h, "decode", 2, 2, 10)
        .lws(&new, &c, "prefill", 2, 2, 20)
        .lws(&new, &c, "decode", 2, 2, 20)
        .initial(&format!("pd-0-{h}-prefill"), 2)
        .initial(&format!("pd-0-{h}-decode"), 2);
    let mut got = scaled(&w.plan(&new));
    got.sort();
    assert_eq!(got, [hs("decode", 2, 0), hs("prefill", 2, 0)]);
}

#[test]
fn a_hold_naming_a_revision_the_slice_does_not_run_holds_nothing() {
    let s = pd(2, 2, "v1");
    let r = rev(&s);
    let mut w = World::default();
    w.lws(&s, &r, "prefill", 2, 2, 10)
        .lws(&s, &r, "decode", 2, 2, 10);
    let p = w.plan(&held(s.clone(), "0badc0de", Some(r#"{"prefill":1}"#)));
    assert!(
        p.scale.is_empty() && p.create.is_empty() && p.delete.is_empty(),
        "the running pair is not taken to the release's groups"
    );
}

/// `s` held on `h` in partition style (`lws-rollout.x-k8s.io/release-style: in-place`).
fn held_in_place(s: DisaggregatedSet, h: &str, groups: &str) -> DisaggregatedSet {
    let mut s = held(s, h, Some(groups));
    s.annotations_mut().insert(
        crate::api::disaggregatedset::RELEASE_STYLE_ANNOTATION.into(),
        crate::api::disaggregatedset::RELEASE_STYLE_IN_PLACE.into(),
    );
    s
}

#[test]
fn partition_style_moves_groups_from_the_held_pair_to_the_new_one_role_by_role() {
    let (old, new, h, c, _) = stable_pair();
    let hs = |role: &str, from: i32, to: i32| (format!("pd-0-{h}-{role}"), from, to);
    let cs = |role: &str, from: i32, to: i32| (format!("pd-0-{c}-{role}"), from, to);
    // (what, H p/d replicas, C p/d replicas (None: no LWS yet), release-groups) →
    // (creates, scales): every role's total stays at its replicas (2), all roles in one plan.
    type Case = (
        &'static str,
        [i32; 2],
        Option<[i32; 2]>,
        &'static str,
        Vec<(String, i32)>,
        Vec<(String, i32, i32)>,
    );
    let cases: Vec<Case> = vec![
        (
            "batch 1: one group of each role moves",
            [2, 2],
            None,
            r#"{"prefill":1,"decode":1}"#,
            vec![
                (format!("pd-0-{c}-prefill"), 1),
                (format!("pd-0-{c}-decode"), 1),
            ],
            vec![hs("prefill", 2, 1), hs("decode", 2, 1)],
        ),
        (
            "at the batch: nothing",
            [1, 1],
            Some([1, 1]),
            r#"{"prefill":1,"decode":1}"#,
            vec![],
            vec![],
        ),
        (
            "batch 2 (100%): the held pair goes to 0 together",
            [1, 1],
            Some([1, 1]),
            r#"{"prefill":2,"decode":2}"#,
            vec![],
            vec![
                hs("prefill", 1, 0),
                hs("decode", 1, 0),
                cs("prefill", 1, 2),
                cs("decode", 1, 2),
            ],
        ),
        (
            "a role moved whole (capped): the held pair goes to 0 together, never half",
            [2, 2],
            Some([0, 0]),
            r#"{"prefill":9,"decode":1}"#,
            vec![],
            vec![
                hs("prefill", 2, 0),
                hs("decode", 2, 0),
                cs("prefill", 0, 2),
                cs("decode", 0, 1),
            ],
        ),
        (
            "the release-groups taken away (a missed deadline): groups go back",
            [1, 1],
            Some([1, 1]),
            r#"{}"#,
            vec![],
            vec![
                hs("prefill", 1, 2),
                hs("decode", 1, 2),
                cs("prefill", 1, 0),
                cs("decode", 1, 0),
            ],
        ),
    ];
    for (name, held_replicas, canary, groups, creates, scales) in cases {
        let mut w = World::default();
        w.lws(&old, &h, "prefill", held_replicas[0], held_replicas[0], 10)
            .lws(&old, &h, "decode", held_replicas[1], held_replicas[1], 10);
        if let Some([p, d]) = canary {
            w.lws(&new, &c, "prefill", p, p, 20)
                .lws(&new, &c, "decode", d, d, 20);
        }
        let p = w.plan(&held_in_place(new.clone(), &h, groups));
        let mut got = created(&p);
        got.sort();
        let mut want = creates;
        want.sort();
        assert_eq!(got, want, "{name}: creates");
        let mut got = scaled(&p);
        got.sort();
        let mut want = scales;
        want.sort();
        assert_eq!(got, want, "{name}: scales");
        assert!(p.delete.is_empty(), "{name}: nothing deleted while held");
        assert!(p.on_created.is_empty(), "{name}: no rolling update started");
        // What the set's own rolling update resumes from is the roles' replicas.
        assert!(
            p.annotate.iter().all(|a| a.replicas == 2),
            "{name}: {:?}",
            p.annotate.iter().map(|a| a.replicas).collect::<Vec<_>>()
        );
    }
    // Settled where the release wants it: the held pair at 1/1 beside the new 1/1 is not
    // Progressing (Argo CD reads the held set Healthy), as for a canary beside it.
    let mut w = World::default();
    w.lws(&old, &h, "prefill", 1, 1, 10)
        .lws(&old, &h, "decode", 1, 1, 10)
        .lws(&new, &c, "prefill", 1, 1, 20)
        .lws(&new, &c, "decode", 1, 1, 20);
    let p = w.plan(&held_in_place(
        new.clone(),
        &h,
        r#"{"prefill":1,"decode":1}"#,
    ));
    let progressing = cond(&p, status::PROGRESSING);
    assert_eq!(
        (progressing.status.as_str(), progressing.reason.as_str()),
        ("False", status::HELD_BY_ROLLOUT),
        "{}",
        progressing.message
    );
    // A reverted template (H == C) ignores the style: the held pair back at its replicas.
    let mut w = World::default();
    w.lws(&old, &h, "prefill", 1, 1, 10)
        .lws(&old, &h, "decode", 1, 1, 10)
        .lws(&new, &c, "prefill", 1, 1, 20)
        .lws(&new, &c, "decode", 1, 1, 20);
    let mut got = scaled(&w.plan(&held_in_place(
        old.clone(),
        &h,
        r#"{"prefill":1,"decode":1}"#,
    )));
    got.sort();
    assert_eq!(got, [hs("decode", 1, 2), hs("prefill", 1, 2)]);
}
