//! The Argo CD resource actions docs/argocd.md ships for Rollouts (approve, pause, resume,
//! undo-fast), run by Argo CD's own code (test/tools/argocd-health --action: Argo CD v3.6.1's
//! settings manager reads the page's `argocd-cm` block, util/lua runs the action's Lua on the
//! live Rollout, and the patches are the API server's merge patch split as its
//! `patchResource` splits it). Each patch is sent as Argo CD sends it (the status part to the
//! status subresource), on live canary, partition and blue-green releases, and must move the
//! release exactly as Kruise's own kubectl-kruise does the same thing: each action is followed
//! by kubectl-kruise's counterpart from the same state, and both must land where the other did.
//! The buttons Argo CD offers (the discovery script) are checked at each state too.

use std::path::PathBuf;

use anyhow::{Context, bail, ensure};
use kube::{
    Resource,
    api::{Patch, PatchParams},
};
use lws_rollout::api::Rollout;
use serde_json::{Value, json};

use crate::{
    harness::{TestNs, with_ns},
    lws_argocd::{argocd_cm_from_docs, argocd_tool},
    lws_support::{apply, create_available, lws},
    rollout_support::{common, on_big_stack},
    rollout_tools::{KRUISE_BIN_ENV, create_rollout, phase_of, run_ok, tool, wait_rollout},
};

const NAME: &str = "vllm";

/// The three styles, each a Rollout over [`NAME`] with two approval pauses and no traffic
/// (kubectl-kruise's undo --fast goes back only to a step without traffic).
fn rollout_of(style: &str) -> anyhow::Result<Rollout> {
    let steps =
        json!([{"replicas": 1, "pause": {}}, {"replicas": 2, "pause": {}}, {"replicas": "100%"}]);
    let strategy = match style {
        "canary" => json!({"canary": {"enableExtraWorkloadForCanary": true, "steps": steps}}),
        "partition" => json!({"canary": {"enableExtraWorkloadForCanary": false, "steps": steps}}),
        "blue-green" => json!({"blueGreen": {"steps": steps}}),
        other => bail!("no style {other}"),
    };
    Ok(serde_json::from_value(json!({
        "apiVersion": "rollouts.kruise.io/v1beta1", "kind": "Rollout",
        "metadata": {"name": NAME},
        "spec": {
            "workloadRef": {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "name": NAME},
            "strategy": strategy
        }
    }))?)
}

/// The live Rollout as Argo CD's cluster cache holds it (with apiVersion and kind).
async fn live(ns: &TestNs) -> anyhow::Result<Value> {
    let mut r = ns.api::<Rollout>().get(NAME).await?;
    r.meta_mut().managed_fields = None;
    let mut value = serde_json::to_value(&r)?;
    value["apiVersion"] = json!(Rollout::api_version(&()));
    value["kind"] = json!(Rollout::kind(&()));
    Ok(value)
}

/// Runs argocd-health with `args` on the live Rollout; its stdout as JSON.
async fn argocd(bin: &str, args: &[&str], obj: &Value) -> anyhow::Result<Value> {
    use tokio::io::AsyncWriteExt;
    let mut child = tokio::process::Command::new(bin)
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let mut stdin = child.stdin.take().context("stdin")?;
    stdin.write_all(&serde_json::to_vec(obj)?).await?;
    drop(stdin);
    let out = child.wait_with_output().await?;
    ensure!(
        out.status.success(),
        "argocd-health {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(serde_json::from_slice(&out.stdout)?)
}

struct Argo {
    bin: String,
    cm: PathBuf,
}

impl Argo {
    fn cm(&self) -> &str {
        self.cm.to_str().unwrap_or_default()
    }

    /// The actions Argo CD offers now: (name, enabled), sorted by name.
    async fn offered(&self, ns: &TestNs) -> anyhow::Result<Vec<(String, bool)>> {
        let list = argocd(
            &self.bin,
            &["--argocd-cm", self.cm(), "--actions"],
            &live(ns).await?,
        )
        .await?;
        Ok(list
            .as_array()
            .context("a list")?
            .iter()
            .map(|a| {
                (
                    a["name"].as_str().unwrap_or_default().to_string(),
                    a["disabled"] != json!(true),
                )
            })
            .collect())
    }

    /// Runs the action on the live Rollout and sends its patches as Argo CD's API server does:
    /// the status part as a merge patch of the status subresource, the rest as a merge patch.
    /// Returns the patches.
    async fn run(&self, ns: &TestNs, action: &str) -> anyhow::Result<Value> {
        let patches = argocd(
            &self.bin,
            &["--argocd-cm", self.cm(), "--action", action],
            &live(ns).await?,
        )
        .await?;
        let api = ns.api::<Rollout>();
        if !patches["status"].is_null() {
            api.patch_status(
                NAME,
                &PatchParams::default(),
                &Patch::Merge(&patches["status"]),
            )
            .await?;
        }
        if !patches["object"].is_null() {
            api.patch(
                NAME,
                &PatchParams::default(),
                &Patch::Merge(&patches["object"]),
            )
            .await?;
        }
        Ok(patches)
    }
}

/// `(currentStepIndex, currentStepState)` of whichever sub-status the style writes.
fn at(r: &Rollout) -> (i32, String) {
    common(r)
        .map(|c| (c.current_step_index, c.current_step_state.to_string()))
        .unwrap_or_default()
}

async fn paused_at(ns: &TestNs, index: i32) -> anyhow::Result<Rollout> {
    wait_rollout(
        ns,
        NAME,
        &format!("paused at step {index}"),
        move |r: &Rollout| {
            phase_of(r) == "Progressing" && at(r) == (index, "StepPaused".to_string())
        },
    )
    .await
}

async fn spec_paused(ns: &TestNs, paused: bool) -> anyhow::Result<Rollout> {
    let r = wait_rollout(
        ns,
        NAME,
        &format!("spec.strategy.paused {paused}"),
        move |r| r.spec.strategy.paused == paused,
    )
    .await?;
    ensure!(
        at(&r) == (1, "StepPaused".into()),
        "pause and resume leave the step: {:?}",
        at(&r)
    );
    Ok(r)
}

fn offers(list: &[(String, bool)], want: &[(&str, bool)]) -> anyhow::Result<()> {
    let want: Vec<(String, bool)> = want.iter().map(|(n, e)| (n.to_string(), *e)).collect();
    ensure!(list == want, "Argo CD offers {list:?}, want {want:?}");
    Ok(())
}

async fn actions_move_the_release_as_kubectl_kruise(style: &'static str) -> anyhow::Result<()> {
    let (Some(bin), Some(kruise)) = (
        argocd_tool(),
        tool(
            KRUISE_BIN_ENV,
            "kubectl-kruise",
            "test/tools/build-kruise.sh",
        ),
    ) else {
        return Ok(());
    };
    let prefix = format!("argocd-actions-{style}");
    with_ns(&prefix, |ns| async move {
        let argo = Argo {
            bin,
            cm: argocd_cm_from_docs()?,
        };
        let n = ns.name.clone();
        let rollout = format!("rollout/{NAME}");
        create_available(&ns, &lws(NAME, 3, 2, "model:v1")).await?;
        create_rollout(&ns, &rollout_of(style)?).await?;
        offers(
            &argo.offered(&ns).await?,
            &[
                ("approve", false),
                ("pause", true),
                ("resume", false),
                ("undo-fast", false),
            ],
        )?;
        apply(&ns, &lws(NAME, 3, 2, "model:v2")).await?;
        paused_at(&ns, 1).await?;
        offers(
            &argo.offered(&ns).await?,
            &[
                ("approve", true),
                ("pause", true),
                ("resume", false),
                ("undo-fast", false),
            ],
        )?;

        // Pause and resume, each after kubectl-kruise's counterpart from the same state.
        let patch = argo.run(&ns, "pause").await?;
        ensure!(
            patch == json!({"object": {"spec": {"strategy": {"paused": true}}}, "status": null}),
            "{patch}"
        );
        spec_paused(&ns, true).await?;
        offers(
            &argo.offered(&ns).await?,
            &[
                ("approve", true),
                ("pause", false),
                ("resume", true),
                ("undo-fast", false),
            ],
        )?;
        run_ok(&kruise, &n, &["rollout", "resume", &rollout]).await?;
        spec_paused(&ns, false).await?;
        run_ok(&kruise, &n, &["rollout", "pause", &rollout]).await?;
        spec_paused(&ns, true).await?;
        argo.run(&ns, "resume").await?;
        spec_paused(&ns, false).await?;

        // Approve: to step 2, as kubectl-kruise's approve does next.
        let patch = argo.run(&ns, "approve").await?;
        ensure!(
            patch["object"].is_null() && !patch["status"].is_null(),
            "approve writes the status only: {patch}"
        );
        paused_at(&ns, 2).await?;
        offers(
            &argo.offered(&ns).await?,
            &[
                ("approve", true),
                ("pause", true),
                ("resume", false),
                ("undo-fast", true),
            ],
        )?;
        // Back to step 1 (the earlier step without traffic), as kubectl-kruise's undo --fast.
        let patch = argo.run(&ns, "undo-fast").await?;
        let sub = if style == "blue-green" {
            "blueGreenStatus"
        } else {
            "canaryStatus"
        };
        ensure!(
            patch == json!({"object": null, "status": {"status": {sub: {"nextStepIndex": 1}}}}),
            "{patch}"
        );
        paused_at(&ns, 1).await?;
        run_ok(&kruise, &n, &["rollout", "approve", &rollout]).await?;
        paused_at(&ns, 2).await?;
        run_ok(&kruise, &n, &["rollout", "undo", &rollout, "--fast"]).await?;
        paused_at(&ns, 1).await?;

        // And through to the end with Argo CD's approve.
        argo.run(&ns, "approve").await?;
        paused_at(&ns, 2).await?;
        argo.run(&ns, "approve").await?;
        let released = |r: &Rollout| phase_of(r) == "Healthy" && at(r).1 == "Completed";
        let r = wait_rollout(
            &ns,
            NAME,
            "released, or paused at the last step",
            move |r| released(r) || at(r) == (3, "StepPaused".into()),
        )
        .await?;
        if !released(&r) {
            // Blue-green waits for approval at its last step too (a step without `pause`),
            // as Kruise's blue-green does before it switches everything over.
            ensure!(style == "blue-green", "{style} paused at its last step");
            argo.run(&ns, "approve").await?;
        }
        wait_rollout(&ns, NAME, "released", released).await?;
        offers(
            &argo.offered(&ns).await?,
            &[
                ("approve", false),
                ("pause", true),
                ("resume", false),
                ("undo-fast", false),
            ],
        )?;
        Ok(())
    })
    .await
}

#[test]
fn argocd_actions_drive_a_canary_release_as_kubectl_kruise() -> anyhow::Result<()> {
    on_big_stack(|| actions_move_the_release_as_kubectl_kruise("canary"))
}

#[test]
fn argocd_actions_drive_a_partition_release_as_kubectl_kruise() -> anyhow::Result<()> {
    on_big_stack(|| actions_move_the_release_as_kubectl_kruise("partition"))
}

#[test]
fn argocd_actions_drive_a_blue_green_release_as_kubectl_kruise() -> anyhow::Result<()> {
    on_big_stack(|| actions_move_the_release_as_kubectl_kruise("blue-green"))
}
