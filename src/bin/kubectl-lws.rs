//! `kubectl-lws`: a kubectl plugin for lws-rollout (`kubectl lws rollout …` once on PATH).
//! Reads and writes only through the API server, like kubectl; every decision is in
//! `lws_rollout::cli` (unit-tested). See docs/kubectl-lws.md.

use std::{io::Write, path::PathBuf, process::ExitCode, time::Duration};

use anyhow::{Context, anyhow};
use clap::{Parser, Subcommand};
use futures::{Stream, StreamExt, TryStreamExt};
use k8s_openapi::api::{apps::v1::ControllerRevision, networking::v1::Ingress};
use kube::{
    Api, Client, ResourceExt,
    api::{DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams},
    discovery::ApiResource,
    runtime::{reflector, watcher},
};
use lws_rollout::{
    api::{DisaggregatedSet, LeaderWorkerSet, Rollout, disaggregatedset::SET_NAME_LABEL},
    batchrelease::names::CANARY_LABEL,
    cli::{
        self, actions, pair_revert,
        status::{self, Verdict},
        summary, traffic,
    },
    lws::labels,
};
use serde_json::Value;

/// Exit code: the release was cancelled, or the Rollout is disabled, refused or deleted.
const EXIT_RELEASE_FAILED: u8 = 2;
/// Exit code: `--timeout` passed before the release finished.
const EXIT_TIMEOUT: u8 = 3;

#[derive(Parser)]
#[command(
    name = "kubectl-lws",
    version,
    about = "Drive and watch lws-rollout releases of LeaderWorkerSets (rollouts.kruise.io Rollouts)"
)]
struct Args {
    /// Path to the kubeconfig file (default: $KUBECONFIG, then ~/.kube/config).
    #[arg(long, global = true)]
    kubeconfig: Option<PathBuf>,
    /// Namespace (default: the kubeconfig context's namespace, then `default`).
    #[arg(short = 'n', long, global = true)]
    namespace: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Rollout commands.
    Rollout {
        #[command(subcommand)]
        command: RolloutCommand,
    },
}

#[derive(Subcommand)]
enum RolloutCommand {
    /// Watch the release: one line per change; exit 0 when done, 2 if it is cancelled (or the
    /// Rollout is disabled, refused or deleted), 3 on --timeout.
    Status {
        /// Rollout name (`NAME` or `rollout/NAME`).
        name: String,
        /// Give up after this long (e.g. 90s, 10m, 1h30m; 0 = never).
        #[arg(long, default_value = "0")]
        timeout: String,
        /// Keep watching until the release ends (false: print one line and exit).
        #[arg(long, short = 'w', default_value_t = true, action = clap::ArgAction::Set)]
        watch: bool,
    },
    /// Approve the step waiting for manual approval (as `kubectl-kruise rollout approve`).
    Approve {
        /// Rollout name.
        name: String,
    },
    /// Pause the Rollout (`spec.strategy.paused: true`).
    Pause {
        /// Rollout name.
        name: String,
    },
    /// Resume a paused Rollout (`spec.strategy.paused: null`).
    Resume {
        /// Rollout name.
        name: String,
    },
    /// Roll back: put the LWS template back to the stable revision (cancels the release); with
    /// --fast, jump back to an earlier step instead (as `kubectl-kruise rollout undo --fast`).
    Undo {
        /// Rollout name.
        name: String,
        /// Jump back to the previous step with no traffic and the most replicas.
        #[arg(long)]
        fast: bool,
        /// With --fast: the 1-based step to jump back to.
        #[arg(long, requires = "fast")]
        to_step: Option<i32>,
    },
    /// One screen about the release: steps, groups per side, traffic split.
    #[command(alias = "describe")]
    Summary {
        /// Rollout name.
        name: String,
    },
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let args = Args::parse();
    match run(args).await {
        Ok(code) => ExitCode::from(code),
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> anyhow::Result<u8> {
    let client = match &args.kubeconfig {
        Some(path) => lws_rollout::k8s::client::from_kubeconfig(path).await,
        None => lws_rollout::k8s::client::infer().await,
    }
    .context("building a client from the kubeconfig")?;
    let ns = args
        .namespace
        .clone()
        .unwrap_or_else(|| client.default_namespace().to_string());
    let rollouts: Api<Rollout> = Api::namespaced(client.clone(), &ns);
    let Command::Rollout { command } = args.command;
    match command {
        RolloutCommand::Status {
            name,
            timeout,
            watch,
        } => {
            let name = cli::rollout_name(&name)?;
            let timeout = cli::parse_timeout(&timeout)?;
            watch_status(&client, &ns, name, timeout, watch).await
        }
        RolloutCommand::Approve { name } => {
            let name = cli::rollout_name(&name)?;
            let rollout = rollouts
                .get(name)
                .await
                .with_context(|| format!("rollout {ns}/{name}"))?;
            let patch = actions::approve_patch(&rollout)?;
            rollouts
                .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .context("patching the Rollout's status")?;
            println!("rollout.rollouts.kruise.io/{name} approved");
            Ok(0)
        }
        RolloutCommand::Pause { name } => {
            let name = cli::rollout_name(&name)?;
            rollouts
                .patch(
                    name,
                    &PatchParams::default(),
                    &Patch::Merge(&actions::pause_patch()),
                )
                .await
                .with_context(|| format!("pausing rollout {ns}/{name}"))?;
            println!("rollout.rollouts.kruise.io/{name} paused");
            Ok(0)
        }
        RolloutCommand::Resume { name } => {
            let name = cli::rollout_name(&name)?;
            rollouts
                .patch(
                    name,
                    &PatchParams::default(),
                    &Patch::Merge(&actions::resume_patch()),
                )
                .await
                .with_context(|| format!("resuming rollout {ns}/{name}"))?;
            println!("rollout.rollouts.kruise.io/{name} resumed");
            Ok(0)
        }
        RolloutCommand::Undo {
            name,
            fast,
            to_step,
        } => {
            let name = cli::rollout_name(&name)?;
            let rollout = rollouts
                .get(name)
                .await
                .with_context(|| format!("rollout {ns}/{name}"))?;
            if fast {
                let (patch, step) = actions::fast_undo_patch(&rollout, to_step)?;
                rollouts
                    .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .context("patching the Rollout's status")?;
                println!("rollout.rollouts.kruise.io/{name} rolled back to step {step}");
            } else if rollout.spec.workload_ref.is_disaggregated_set() {
                let revision = undo_pair_template(&client, &ns, &rollout).await?;
                println!(
                    "disaggregatedset.disaggregatedset.x-k8s.io/{} role templates reverted to revision {revision}; rollout.rollouts.kruise.io/{name} cancels the release",
                    rollout.spec.workload_ref.name
                );
            } else {
                let revision = undo_template(&client, &ns, &rollout).await?;
                println!(
                    "leaderworkerset.leaderworkerset.x-k8s.io/{} template reverted to revision {revision}; rollout.rollouts.kruise.io/{name} cancels the release",
                    rollout.spec.workload_ref.name
                );
            }
            Ok(0)
        }
        RolloutCommand::Summary { name } => {
            let name = cli::rollout_name(&name)?;
            print!("{}", summary_text(&client, &ns, name).await?);
            Ok(0)
        }
    }
}

/// Watches the Rollout and its LWS; prints a line whenever it changes and returns the exit code.
async fn watch_status(
    client: &Client,
    ns: &str,
    name: &str,
    timeout: Option<Duration>,
    watch: bool,
) -> anyhow::Result<u8> {
    let rollouts: Api<Rollout> = Api::namespaced(client.clone(), ns);
    let lwss: Api<LeaderWorkerSet> = Api::namespaced(client.clone(), ns);
    let first = rollouts
        .get(name)
        .await
        .with_context(|| format!("rollout {ns}/{name}"))?;
    let workload = first.spec.workload_ref.name.clone();
    if first.spec.workload_ref.is_disaggregated_set() {
        return watch_pair_status(client, ns, &first, timeout, watch).await;
    }
    if !watch {
        let lws = lwss.get_opt(&workload).await?;
        return Ok(once(
            Some(status::line(&first, lws.as_ref())),
            status::verdict(Some(&first), lws.as_ref()),
        ));
    }
    // Two object watches (a watch per name, resumed by the watcher on errors); each event
    // replaces what we know of that object, then the pair is judged once both were seen.
    let events = futures::stream::select_all([
        watcher::watch_object(rollouts, name)
            .map_ok(|r| Seen::Rollout(Box::new(r)))
            .boxed(),
        watcher::watch_object(lwss, &workload)
            .map_ok(|l| Seen::Lws(Box::new(l)))
            .boxed(),
    ]);
    let mut rollout: Option<Option<Rollout>> = None;
    let mut lws: Option<Option<LeaderWorkerSet>> = None;
    watch_until_done(ns, name, timeout, events, |seen| {
        match seen {
            Seen::Rollout(r) => rollout = Some(*r),
            Seen::Lws(l) => lws = Some(*l),
            Seen::Set(_) | Seen::SetLws { .. } => {}
        }
        let (Some(r), Some(l)) = (&rollout, &lws) else {
            return None;
        };
        Some((
            r.as_ref().map(|r| status::line(r, l.as_ref())),
            status::verdict(r.as_ref(), l.as_ref()),
        ))
    })
    .await
}

/// `rollout status` of a pair release: the Rollout, its DisaggregatedSet and the set's LWSs
/// (both sides of every role, kept in a reflector's store), judged as [`watch_status`] judges
/// an LWS release.
async fn watch_pair_status(
    client: &Client,
    ns: &str,
    first: &Rollout,
    timeout: Option<Duration>,
    watch: bool,
) -> anyhow::Result<u8> {
    let name = first.name_any();
    let rollouts: Api<Rollout> = Api::namespaced(client.clone(), ns);
    let sets: Api<DisaggregatedSet> = Api::namespaced(client.clone(), ns);
    let lwss: Api<LeaderWorkerSet> = Api::namespaced(client.clone(), ns);
    let set_name = first.spec.workload_ref.name.clone();
    let selector = format!("{SET_NAME_LABEL}={set_name}");
    let judge = |r: Option<&Rollout>, set: Option<&DisaggregatedSet>, lws: &[LeaderWorkerSet]| {
        let sides = match (r, set) {
            (Some(r), Some(set)) => Some(status::pair_sides(r, set, lws)),
            _ => None,
        };
        let line = r.map(|r| status::line_of(r, sides.as_ref().map(status::Workload::Pair)));
        let verdict = status::verdict_of(r, sides.as_ref().map(status::Workload::Pair));
        (line, verdict)
    };
    if !watch {
        let set = sets.get_opt(&set_name).await?;
        let lws = lwss
            .list(&ListParams::default().labels(&selector))
            .await?
            .items;
        let (line, verdict) = judge(Some(first), set.as_ref(), &lws);
        return Ok(once(line, verdict));
    }
    let (store, writer) = reflector::store();
    let set_lws = reflector(
        writer,
        watcher::watcher(lwss, watcher::Config::default().labels(&selector)),
    )
    .map_ok(|event| Seen::SetLws {
        listed: matches!(event, watcher::Event::InitDone),
    });
    let events = futures::stream::select_all([
        watcher::watch_object(rollouts, &name)
            .map_ok(|r| Seen::Rollout(Box::new(r)))
            .boxed(),
        watcher::watch_object(sets, &set_name)
            .map_ok(|s| Seen::Set(Box::new(s)))
            .boxed(),
        set_lws.boxed(),
    ]);
    let mut rollout: Option<Option<Rollout>> = None;
    let mut set: Option<Option<DisaggregatedSet>> = None;
    let mut lws_listed = false;
    watch_until_done(ns, &name, timeout, events, |seen| {
        match seen {
            Seen::Rollout(r) => rollout = Some(*r),
            Seen::Set(s) => set = Some(*s),
            Seen::SetLws { listed } => lws_listed |= listed,
            Seen::Lws(_) => {}
        }
        let (Some(r), Some(s), true) = (&rollout, &set, lws_listed) else {
            return None;
        };
        let children: Vec<LeaderWorkerSet> =
            store.state().iter().map(|l| l.as_ref().clone()).collect();
        Some(judge(r.as_ref(), s.as_ref(), &children))
    })
    .await
}

/// One watch event. Boxed, the objects being large.
enum Seen {
    /// The Rollout as it is now (`None`: deleted).
    Rollout(Box<Option<Rollout>>),
    /// The released LWS as it is now.
    Lws(Box<Option<LeaderWorkerSet>>),
    /// The released DisaggregatedSet as it is now.
    Set(Box<Option<DisaggregatedSet>>),
    /// The set's LWSs changed (they are in the reflector's store); `listed` once the watch's
    /// first list is complete.
    SetLws { listed: bool },
}

/// The exit code of a one-shot `rollout status` (`--watch=false`), after printing its line.
fn once(line: Option<String>, verdict: Verdict) -> u8 {
    println!("{}", line.unwrap_or_default());
    match verdict {
        Verdict::Failed(why) => {
            eprintln!("{why}");
            EXIT_RELEASE_FAILED
        }
        _ => 0,
    }
}

/// The wait and the tail every `rollout status --watch` shares: each event of `events` goes
/// to `judge`, which answers (once it has seen enough) the status line and the verdict; a
/// changed line is printed, and a verdict other than Waiting ends the watch with its exit
/// code, as does `timeout` passing first ([`EXIT_TIMEOUT`]).
async fn watch_until_done<T>(
    ns: &str,
    name: &str,
    timeout: Option<Duration>,
    mut events: impl Stream<Item = Result<T, watcher::Error>> + Unpin,
    mut judge: impl FnMut(T) -> Option<(Option<String>, Verdict)>,
) -> anyhow::Result<u8> {
    let mut last = String::new();
    let deadline = timeout.map(|t| tokio::time::Instant::now() + t);
    loop {
        let next = events.try_next();
        let seen = match deadline {
            Some(d) => match tokio::time::timeout_at(d, next).await {
                Ok(seen) => seen,
                Err(_) => {
                    eprintln!(
                        "timed out after {:?} waiting for rollout {ns}/{name}",
                        timeout.unwrap_or_default()
                    );
                    return Ok(EXIT_TIMEOUT);
                }
            },
            None => next.await,
        };
        let Some(seen) = seen.context("watching")? else {
            return Err(anyhow!("the watch ended"));
        };
        let Some((line, verdict)) = judge(seen) else {
            continue;
        };
        if let Some(line) = line.filter(|l| *l != last) {
            println!("{line}");
            let _ = std::io::stdout().flush();
            last = line;
        }
        match verdict {
            Verdict::Waiting => {}
            Verdict::Succeeded => {
                println!("rollout {ns}/{name} successfully rolled out");
                return Ok(0);
            }
            Verdict::Failed(why) => {
                eprintln!("rollout {ns}/{name}: {why}");
                return Ok(EXIT_RELEASE_FAILED);
            }
        }
    }
}

/// `undo` without --fast: writes the held stable revision's template back into the LWS and
/// returns the revision key.
async fn undo_template(client: &Client, ns: &str, rollout: &Rollout) -> anyhow::Result<String> {
    let lwss: Api<LeaderWorkerSet> = Api::namespaced(client.clone(), ns);
    let name = &rollout.spec.workload_ref.name;
    let lws = lwss
        .get(name)
        .await
        .with_context(|| format!("leaderworkerset {ns}/{name}"))?;
    let key = actions::held_revision(&lws)?;
    let revisions: Api<ControllerRevision> = Api::namespaced(client.clone(), ns);
    let selector = format!("{}={name},{}={key}", labels::NAME, labels::REVISION);
    let found = revisions
        .list(&ListParams::default().labels(&selector))
        .await?;
    let revision = found
        .items
        .into_iter()
        .max_by_key(|r| r.revision)
        .ok_or_else(|| {
            anyhow!("no ControllerRevision of {name} with revision {key} (labels {selector})")
        })?;
    let data = revision.data.map(|d| d.0).unwrap_or(Value::Null);
    let patch = actions::template_revert_patch(&lws, &data)?;
    let patch: json_patch::Patch = serde_json::from_value(patch)?;
    lwss.patch(name, &PatchParams::default(), &Patch::<()>::Json(patch))
        .await
        .with_context(|| format!("reverting the template of leaderworkerset {ns}/{name}"))?;
    Ok(key)
}

/// `undo` of a pair release without --fast: writes the held pair's role templates, read back
/// from its LWSs, into the DisaggregatedSet and returns the revision.
async fn undo_pair_template(
    client: &Client,
    ns: &str,
    rollout: &Rollout,
) -> anyhow::Result<String> {
    let sets: Api<DisaggregatedSet> = Api::namespaced(client.clone(), ns);
    let lwss: Api<LeaderWorkerSet> = Api::namespaced(client.clone(), ns);
    let name = &rollout.spec.workload_ref.name;
    let set = sets
        .get(name)
        .await
        .with_context(|| format!("disaggregatedset {ns}/{name}"))?;
    let lws = lwss
        .list(&ListParams::default().labels(&format!("{SET_NAME_LABEL}={name}")))
        .await?
        .items;
    let (patch, revision) = pair_revert::pair_template_revert_patch(&set, &lws)?;
    let patch: json_patch::Patch = serde_json::from_value(patch)?;
    sets.patch(name, &PatchParams::default(), &Patch::<()>::Json(patch))
        .await
        .with_context(|| format!("reverting the role templates of disaggregatedset {ns}/{name}"))?;
    Ok(revision)
}

async fn summary_text(client: &Client, ns: &str, name: &str) -> anyhow::Result<String> {
    let rollouts: Api<Rollout> = Api::namespaced(client.clone(), ns);
    let lwss: Api<LeaderWorkerSet> = Api::namespaced(client.clone(), ns);
    let rollout = rollouts
        .get(name)
        .await
        .with_context(|| format!("rollout {ns}/{name}"))?;
    let workload = &rollout.spec.workload_ref.name;
    let traffic = traffic_lines(client, ns, &rollout).await?;
    if rollout.spec.workload_ref.is_disaggregated_set() {
        let sets: Api<DisaggregatedSet> = Api::namespaced(client.clone(), ns);
        let set = sets.get_opt(workload).await?;
        let lws = lwss
            .list(&ListParams::default().labels(&format!("{SET_NAME_LABEL}={workload}")))
            .await?
            .items;
        let sides = set.as_ref().map(|s| status::pair_sides(&rollout, s, &lws));
        return Ok(summary::render(&summary::SummaryInput {
            rollout: &rollout,
            workload: summary::Sides::Pair {
                set: set.as_ref(),
                sides: sides.as_ref(),
            },
            traffic,
        }));
    }
    let stable = lwss.get_opt(workload).await?;
    let canary = lwss
        .list(&ListParams::default().labels(&format!("{CANARY_LABEL}={workload}")))
        .await?
        .items
        .into_iter()
        .max_by_key(|l| l.creation_timestamp());
    Ok(summary::render(&summary::SummaryInput {
        rollout: &rollout,
        workload: summary::Sides::Lws {
            stable: stable.as_ref(),
            canary: canary.as_ref(),
        },
        traffic,
    }))
}

/// The traffic split of the Rollout's first trafficRouting as it is in the cluster: where it
/// was read from and its lines (`None`: no trafficRoutings).
async fn traffic_lines(
    client: &Client,
    ns: &str,
    rollout: &Rollout,
) -> anyhow::Result<Option<(String, Vec<String>)>> {
    let strategy = &rollout.spec.strategy;
    let routing = strategy
        .canary
        .as_ref()
        .and_then(|c| c.traffic_routings.as_ref())
        .or_else(|| {
            strategy
                .blue_green
                .as_ref()
                .and_then(|b| b.traffic_routings.as_ref())
        })
        .and_then(|r| r.first());
    let traffic = match routing {
        None => None,
        Some(r) => {
            if let Some(route) = r.gateway.as_ref().and_then(|g| g.http_route_name.as_ref()) {
                let gvk = GroupVersionKind::gvk("gateway.networking.k8s.io", "v1", "HTTPRoute");
                let ar = ApiResource::from_gvk_with_plural(&gvk, "httproutes");
                let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &ar);
                let lines = match api.get_opt(route).await? {
                    Some(obj) => traffic::route_split(&serde_json::to_value(&obj)?, &r.service),
                    None => vec!["HTTPRoute not found".into()],
                };
                Some((format!("HTTPRoute {route}"), lines))
            } else if let Some(ing) = &r.ingress {
                let api: Api<Ingress> = Api::namespaced(client.clone(), ns);
                let canary_name = format!("{}-canary", ing.name);
                let obj = api.get_opt(&canary_name).await?;
                let value = obj.map(|o| serde_json::to_value(&o)).transpose()?;
                Some((
                    format!("Ingress {}", ing.name),
                    traffic::ingress_split(value.as_ref()),
                ))
            } else {
                Some((
                    format!("Service {}", r.service),
                    vec!["customNetworkRefs: not shown".into()],
                ))
            }
        }
    };
    Ok(traffic)
}
