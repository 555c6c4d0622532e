//! Which template revision the groups should run, and which ControllerRevisions to record.
//!
//! The revision a leader StatefulSet runs is named by its `template-revision-hash` label; an
//! LWS seen for the first time gets one computed from its spec (upstream's hash, byte for
//! byte, so groups built by upstream are adopted unchanged). The template changed when the
//! spec's revision data differs from the recorded data of the running revision.
//!
//! A Rollout holds an LWS on its stable revision with the annotation
//! `rollouts.kruise.io/stable-revision` (set by our LWS webhook in the same admission as the
//! template change): while it names a revision, the groups stay on it and no new revision is
//! recorded — the new template runs in the Rollout's canary LWS instead.

use std::sync::Arc;

use k8s_openapi::api::apps::v1::{ControllerRevision, StatefulSet};
use kube::ResourceExt;
use serde_json::Value;

use super::{How, Write, reasons};
use crate::{
    api::leaderworkerset::LeaderWorkerSet,
    k8s::events::EventSpec,
    lws::{
        error::Failure,
        labels, objects,
        observe::Observed,
        remembered::{RevisionMatch, version_of},
        upstream::revision,
    },
};

/// The revision decision.
#[derive(Clone, Debug, PartialEq)]
pub struct Revisions {
    /// The revision the leader StatefulSet should run.
    pub key: String,
    /// The revision of the template as it is now: the running one when it matches the spec
    /// (even recorded under another key, by another controller), else the spec's own key.
    /// Differs from `key` while held and the template has moved on.
    pub spec_key: String,
    /// The template differs from the running revision: a rolling update starts or goes on.
    pub template_changed: bool,
    /// ControllerRevisions to record.
    pub writes: Vec<Write<ControllerRevision>>,
    /// The running revision's comparison with the spec, for the next reconcile to reuse.
    pub matched: Option<RevisionMatch>,
}

fn key_of(rev: &ControllerRevision) -> Option<&str> {
    rev.labels().get(labels::REVISION).map(String::as_str)
}

/// The recorded revision with `key`.
pub fn with_key<'a>(observed: &'a Observed, key: &str) -> Option<&'a Arc<ControllerRevision>> {
    observed.revisions.iter().find(|r| key_of(r) == Some(key))
}

/// The release partition of a partition-style release ([`labels::RELEASE_PARTITION`]), if set
/// and a group ordinal.
pub fn release_partition(lws: &LeaderWorkerSet) -> Option<i32> {
    lws.annotations()
        .get(labels::RELEASE_PARTITION)?
        .trim()
        .parse()
        .ok()
        .filter(|p: &i32| *p >= 0)
}

/// The revision the hold names, if any.
pub fn held(lws: &LeaderWorkerSet) -> Option<&str> {
    lws.annotations()
        .get(labels::HELD_REVISION)
        .map(String::as_str)
        .filter(|k| !k.is_empty())
}

fn record(
    lws: &LeaderWorkerSet,
    key: &str,
    number: i64,
    data: &str,
    note: String,
) -> Result<Write<ControllerRevision>, Failure> {
    let object = objects::controller_revision(lws, key, number, data)
        .map_err(|e| Failure::spec("InvalidSpec", format!("malformed revision data: {e}")))?;
    Ok(Write {
        object,
        how: How::CreateIfAbsent,
        on_success: vec![EventSpec::normal(reasons::CREATING_REVISION, note)],
        on_failure: Vec::new(),
        on_refusal: None,
    })
}

/// Decides the revision for `lws`.
pub fn plan(
    lws: &LeaderWorkerSet,
    observed: &Observed,
    leader_sts: Option<&StatefulSet>,
) -> Result<Revisions, Failure> {
    let computed;
    let revision = match &observed.spec_revision {
        Some(remembered) => remembered.as_ref(),
        None => {
            computed = revision::SpecRevision::of(&lws.spec)
                .map_err(|e| Failure::spec("InvalidSpec", e.to_string()))?;
            &computed
        }
    };
    let (spec, data) = (&revision.spec, &revision.data);
    let spec_key = revision.key.clone();
    let sts_key = leader_sts.and_then(|s| s.labels().get(labels::REVISION).cloned());
    let mut next_number = observed
        .revisions
        .iter()
        .map(|r| r.revision)
        .max()
        .unwrap_or(0)
        + 1;
    let mut writes = Vec::new();

    // The revision the leader StatefulSet runs: adopt an existing one, or record one for an
    // LWS seen for the first time (a StatefulSet labelled by an older controller keeps its key).
    let current_key = sts_key.clone().unwrap_or_else(|| spec_key.clone());
    // Whether the running revision is the spec's template: byte for byte, or once re-encoded
    // (a revision another version or client wrote differently is still ours: v0.9's
    // SetMatchesRevision).
    let mut matched = None;
    let same_template = match with_key(observed, &current_key) {
        Some(rev) => {
            let id = lws
                .metadata
                .uid
                .clone()
                .zip(lws.metadata.generation)
                .zip(version_of(&rev.metadata));
            let remembered = observed.remembered.revision_match.as_ref().filter(|m| {
                id.as_ref()
                    .is_some_and(|(lws, revision)| m.lws == *lws && m.revision == *revision)
            });
            let matches = match remembered {
                Some(m) => m.matches,
                None => {
                    revision::matches(rev.data.as_ref().map_or(&Value::Null, |d| &d.0), spec, data)
                }
            };
            matched = id.map(|(lws, revision)| RevisionMatch {
                lws,
                revision,
                matches,
            });
            matches
        }
        None => {
            let note = if sts_key.is_some() {
                format!(
                    "Creating missing revision with key {current_key} for existing LeaderWorkerSet"
                )
            } else {
                format!(
                    "Creating revision with key {current_key} for a newly created LeaderWorkerSet"
                )
            };
            writes.push(record(lws, &current_key, next_number, data, note)?);
            next_number += 1;
            true
        }
    };

    // Groups on an adopted revision that matches the spec are on the template, whatever its key.
    let template_key = if leader_sts.is_some() && same_template {
        current_key.clone()
    } else {
        spec_key.clone()
    };
    // Held by a Rollout: stay on the held revision while the spec moves on — unless the
    // release moves groups in place (partition style): then the spec's template is the
    // update revision and the release partition keeps the groups below it back.
    if let Some(held) = held(lws)
        && release_partition(lws).is_none()
        && leader_sts.is_some()
        && (held == current_key || with_key(observed, held).is_some())
    {
        return Ok(Revisions {
            key: held.to_string(),
            spec_key: template_key,
            template_changed: held != current_key,
            writes,
            matched,
        });
    }

    let template_changed = leader_sts.is_some() && !same_template;
    let key = if template_changed {
        if with_key(observed, &spec_key).is_none() {
            writes.push(record(
                lws,
                &spec_key,
                next_number,
                data,
                format!("Creating revision with key {spec_key} for updated LWS"),
            )?);
        }
        spec_key.clone()
    } else {
        current_key
    };
    Ok(Revisions {
        key,
        spec_key: template_key,
        template_changed,
        writes,
        matched,
    })
}

/// Revisions other than `key`, once the update to it is done.
pub fn obsolete(observed: &Observed, key: &str) -> Vec<super::Delete> {
    observed
        .revisions
        .iter()
        .filter(|r| key_of(r) != Some(key))
        .map(|r| super::Delete {
            name: r.name_any(),
            uid: r.metadata.uid.clone(),
        })
        .collect()
}

/// The LWS as its groups should run it. While a Rollout holds it, the spec already carries the
/// new template, but every group — including one rebuilt after a failure — must run the held
/// revision: its template and network config are taken from that revision's recorded data.
pub fn effective<'a>(
    lws: &'a LeaderWorkerSet,
    observed: &Observed,
    revisions: &Revisions,
) -> Result<std::borrow::Cow<'a, LeaderWorkerSet>, Failure> {
    if revisions.key == revisions.spec_key {
        return Ok(std::borrow::Cow::Borrowed(lws));
    }
    let Some(rev) = with_key(observed, &revisions.key) else {
        return Ok(std::borrow::Cow::Borrowed(lws));
    };
    let data = rev.data.as_ref().map(|d| d.0.clone()).unwrap_or_default();
    let part = |name: &str| {
        let mut value = data["spec"][name].clone();
        if let Some(map) = value.as_object_mut() {
            map.remove("$patch");
        }
        value
    };
    let unusable = |e: serde_json::Error| {
        Failure::spec(
            "InvalidSpec",
            format!("held revision {} is unusable: {e}", revisions.key),
        )
    };
    let mut held = lws.clone();
    held.spec.leader_worker_template =
        serde_json::from_value(part("leaderWorkerTemplate")).map_err(unusable)?;
    held.spec.network_config = serde_json::from_value(part("networkConfig")).map_err(unusable)?;
    Ok(std::borrow::Cow::Owned(held))
}
