//! Release deadlines (ours, not Kruise's) against the real control plane: a canary whose
//! group can never be scheduled misses the Rollout's deadline, the status says which group and
//! why, and with automatic rollback the release undoes itself — traffic first, the canary
//! removed — while the user's groups never restart and stay held until the template changes.

use anyhow::{Context, ensure};
use lws_rollout::api::LeaderWorkerSet;
use serde_json::json;

use crate::harness::with_ns;
use crate::lws_support::uids;
use crate::rollout_canary::{RATE, is_canary, three_steps};
use crate::rollout_support::*;
use crate::traffic_driver::{
    Outcome, ReleaseTraffic, RequestSpec, traffic_or_skip, wait_until_served,
};

#[test]
fn rollout_deadline_missed_rolls_back_by_itself_and_holds_until_the_template_changes()
-> anyhow::Result<()> {
    on_big_stack(|| {
        with_ns("rollout-deadline", |ns| async move {
            let v1 = stable_lws(2, "vllm:1");
            let mut r = rollout(three_steps(), Some(gateway_routing()));
            r["metadata"]["annotations"] = json!({
                "lws-rollout.x-k8s.io/progress-deadline-seconds": "8",
                "lws-rollout.x-k8s.io/rollback-on-deadline": "true"
            });
            release_setup(&ns, &v1, &r).await?;
            let user_pods = uids(&ns, STABLE).await?;
            let traffic = match traffic_or_skip("rollout_deadline (requests)") {
                Some(t) => {
                    let plain = RequestSpec::new(&host(&ns));
                    wait_until_served(&t, &plain, |o| o.lws.clone(), &[STABLE], WAIT).await?;
                    Some(ReleaseTraffic::start(
                        &t,
                        plain,
                        None,
                        RATE,
                        is_canary as fn(&Outcome) -> bool,
                    ))
                }
                None => None,
            };
            // A template whose groups can never be scheduled.
            let mut broken = with_image(&v1, "vllm:2");
            for t in ["leaderTemplate", "workerTemplate"] {
                broken["spec"]["leaderWorkerTemplate"][t]["spec"]["nodeSelector"] =
                    json!({"lws-rollout.test/no-such-node": "true"});
            }
            apply_lws(&ns, &broken).await?;
            let late = wait_rollout(&ns, "deadline missed", |r| {
                condition(r, "Progressing")
                    .is_some_and(|c| c.0 == "False" && c.1 == "RolledBackOnDeadline")
            })
            .await?;
            let msg = condition(&late, "Progressing").context("condition")?.2;
            ensure!(
                msg.contains("not ready within 8s") && msg.contains("not ready: group 0"),
                "the message names the late group: {msg}"
            );
            wait_event(&ns, "ProgressDeadlineExceeded", "not ready within 8s").await?;
            // Argo CD (its own evaluator, docs/argocd.md's customization) reads it Degraded.
            if let Some(bin) = crate::lws_argocd::argocd_tool() {
                let (health, why) =
                    crate::rollout_argocd::rollout_health_with_customization(&bin, &late).await?;
                ensure!(
                    health == "Degraded" && why.contains("RolledBackOnDeadline"),
                    "Argo CD reads {health}: {why}"
                );
            }
            // Rolled back: the canary and its traffic gone, the user's objects restored, the
            // user's groups untouched and still held on their revision.
            wait_rollout(&ns, "canary removed", |r| {
                finalising(r) == "END" && phase(r) == "Progressing"
            })
            .await?;
            crate::rollout_crash::wait_for_all_canary(&ns, |c| c.is_empty()).await?;
            ensure!(batch_release(&ns).await?.is_none());
            ensure!(route_backends(&ns).await? == users_route());
            let lws = ns.api::<LeaderWorkerSet>().get(STABLE).await?;
            ensure!(
                lws.metadata
                    .annotations
                    .unwrap_or_default()
                    .contains_key("rollouts.kruise.io/stable-revision"),
                "the workload stays held until its template changes"
            );
            ensure!(
                uids(&ns, STABLE).await? == user_pods,
                "a user pod restarted"
            );
            // Back to the old template: a cancel that moves no group.
            apply_lws(&ns, &v1).await?;
            wait_rollout(&ns, "cancelled", finished("False")).await?;
            nothing_left(&ns).await?;
            ensure!(
                uids(&ns, STABLE).await? == user_pods,
                "a user pod restarted"
            );
            if let Some(t) = traffic {
                t.assert_rolled_back(200).await?;
                t.finish().await?;
            }
            Ok(())
        })
    })
}
