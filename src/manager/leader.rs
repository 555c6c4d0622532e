//! Leader election on a `coordination.k8s.io` Lease: of several manager replicas only the holder
//! runs the controllers; every replica serves the webhooks (they are stateless). A holder that
//! loses its lease stops at once (fail-stop, like kube-controller-manager): its replacement
//! rebuilds everything from the cluster, since no state lives only in memory.
//!
//! The protocol is client-go's: optimistic concurrency on the Lease's `resourceVersion` picks one
//! writer, and a holder counts as gone when its record has not changed for the lease duration
//! *as measured on our own clock* (no trust in other machines' clocks). A standby watches the
//! Lease, so a released lease is taken at once rather than after it would have expired.

use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::{
    api::coordination::v1::{Lease, LeaseSpec},
    apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta},
    jiff::Timestamp,
};
use kube::{
    Api, Client,
    api::PostParams,
    runtime::{WatchStreamExt, watcher},
};
use tokio::{
    sync::{oneshot, watch},
    task::JoinHandle,
};
use tracing::{info, warn};

/// A standby takes over at most this long after a holder vanished without releasing (SIGKILL,
/// node loss). A graceful stop releases the lease at once.
pub const LEASE_DURATION: Duration = Duration::from_secs(15);
/// How often the holder renews. A renewal is one write (with the version the holder wrote
/// last), so renewing often costs little; and it bounds [`RIDES_THROUGH`].
const RENEW_EVERY: Duration = Duration::from_secs(3);
/// How soon to try again after an API error.
const RETRY: Duration = Duration::from_secs(1);
/// What a renewal in flight may take: the holder's term ends this long before a standby may
/// take the Lease.
const IN_FLIGHT: Duration = Duration::from_secs(2);
/// How long after its last renewal a holder counts the Lease as its own: a standby takes it
/// [`LEASE_DURATION`] after it saw that renewal, later still, so the two never lead at once.
const TERM: Duration = Duration::from_secs(LEASE_DURATION.as_secs() - IN_FLIGHT.as_secs());
/// The longest API-server outage a holder rides through whatever its timing: its last renewal
/// may be [`RENEW_EVERY`] old when the outage starts, and its first try after the outage up to
/// [`RETRY`] late, all within [`TERM`] (less a second for the requests themselves). docs/install.md
/// gives this figure; a chaos test restarts the API server within it.
pub const RIDES_THROUGH: Duration =
    Duration::from_secs(TERM.as_secs() - RENEW_EVERY.as_secs() - RETRY.as_secs() - 1);
/// How long the in-flight reconciles of a holder whose term has ended may go on before they
/// are dropped: they end before a standby may take the Lease ([`LEASE_DURATION`] after the
/// last renewal it saw, [`TERM`] + 2 s), so two replicas never write at once.
pub const AFTER_TERM: Duration = Duration::from_secs(1);

/// The longest one look at the Lease may take when there is no term to protect (a standby).
const STEP_TIMEOUT: Duration = RENEW_EVERY;

/// How long the next look at the Lease may take: [`STEP_TIMEOUT`], and for a holder no longer
/// than what is left of its term, so that a request which never answers ends the term on time
/// (zero once it is over: the holder stops without waiting for the answer).
fn step_budget(renewed: Option<Instant>, now: Instant) -> Duration {
    match renewed {
        Some(at) => (at + TERM).saturating_duration_since(now).min(STEP_TIMEOUT),
        None => STEP_TIMEOUT,
    }
}

/// Where the lease lives and who we are.
#[derive(Debug, Clone)]
pub struct LeaderElection {
    /// Namespace of the Lease.
    pub namespace: String,
    /// Name of the Lease.
    pub lease_name: String,
    /// Our identity in `holderIdentity`.
    pub identity: String,
}

impl LeaderElection {
    /// Identity: the pod name when running in a cluster, else the host name; with the process
    /// id, so two processes on one machine are distinct.
    pub fn default_identity() -> String {
        let host = std::env::var("POD_NAME").ok().unwrap_or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|h| h.trim().to_string())
                .unwrap_or_else(|_| "lws-rollout".into())
        });
        format!("{host}_{}", std::process::id())
    }
}

/// What the Lease says, as far as the election cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// `holderIdentity`; empty when released.
    pub holder: String,
    /// `resourceVersion`: any write changes it.
    pub version: String,
    /// `leaseDurationSeconds`.
    pub duration: Duration,
}

/// The decision for one look at the Lease (pure).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Write ourselves in as holder (acquire or renew).
    Claim,
    /// Someone else holds it and is alive: wait at most this long before looking again.
    Wait(Duration),
}

/// `unchanged_for`: how long the record has been seen with this `resourceVersion`.
pub fn decide(record: &Record, identity: &str, unchanged_for: Duration) -> Decision {
    if record.holder.is_empty() || record.holder == identity || unchanged_for >= record.duration {
        Decision::Claim
    } else {
        Decision::Wait(record.duration - unchanged_for)
    }
}

fn record(lease: &Lease) -> Record {
    let spec = lease.spec.clone().unwrap_or_default();
    Record {
        holder: spec.holder_identity.unwrap_or_default(),
        version: lease.metadata.resource_version.clone().unwrap_or_default(),
        duration: Duration::from_secs(spec.lease_duration_seconds.unwrap_or(15).max(1) as u64),
    }
}

/// A running election: `is_leader` follows the lease; [`Election::release`] gives it up.
pub struct Election {
    /// True while we hold the lease.
    pub is_leader: watch::Receiver<bool>,
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

impl Election {
    /// Joins the election.
    pub fn start(client: Client, cfg: &LeaderElection) -> Self {
        let (tx, is_leader) = watch::channel(false);
        let (stop, stopped) = oneshot::channel();
        let api = Api::<Lease>::namespaced(client, &cfg.namespace);
        info!(lease = %cfg.lease_name, namespace = %cfg.namespace, identity = %cfg.identity, "joined leader election");
        let task = tokio::spawn(campaign(api, cfg.clone(), tx, stopped));
        Self {
            is_leader,
            stop,
            task,
        }
    }

    /// Gives the lease up (if held) so a standby takes over without waiting for it to expire.
    pub async fn release(self) {
        let _ = self.stop.send(());
        if tokio::time::timeout(Duration::from_secs(5), self.task)
            .await
            .is_err()
        {
            warn!("releasing the leader lease timed out; it expires on its own");
        }
    }
}

struct Campaign {
    api: Api<Lease>,
    cfg: LeaderElection,
    /// The record as last seen, and since when (our clock).
    seen: Option<(Record, Instant)>,
    /// When we last wrote ourselves in.
    renewed: Option<Instant>,
    /// The Lease as we last wrote it: the next renewal writes on top of its version without
    /// reading first (one request, not two). Dropped on any refusal, so a conflict (someone
    /// else wrote) or a deleted Lease sends the next look through a fresh read.
    written: Option<Lease>,
}

impl Campaign {
    fn lease(
        &self,
        transitions: i32,
        acquired: Option<MicroTime>,
        version: Option<String>,
    ) -> Lease {
        let now = MicroTime(Timestamp::now());
        Lease {
            metadata: ObjectMeta {
                name: Some(self.cfg.lease_name.clone()),
                namespace: Some(self.cfg.namespace.clone()),
                resource_version: version,
                ..Default::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(self.cfg.identity.clone()),
                lease_duration_seconds: Some(LEASE_DURATION.as_secs() as i32),
                acquire_time: Some(acquired.unwrap_or_else(|| now.clone())),
                renew_time: Some(now),
                lease_transitions: Some(transitions),
                ..Default::default()
            }),
        }
    }

    /// One look at the Lease: claim it if we may. Returns whether we hold it, and how long to
    /// wait before looking again.
    async fn step(&mut self) -> Result<(bool, Duration), kube::Error> {
        let name = self.cfg.lease_name.clone();
        if let Some(ours) = self.written.take() {
            let spec = ours.spec.clone().unwrap_or_default();
            let lease = self.lease(
                spec.lease_transitions.unwrap_or(0),
                spec.acquire_time,
                ours.metadata.resource_version.clone(),
            );
            return match self
                .api
                .replace(&name, &PostParams::default(), &lease)
                .await
            {
                Ok(written) => Ok(self.claimed(written)),
                // Someone else wrote, or the Lease is gone: look again, reading it first.
                Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => {
                    Ok((self.still_held(), Duration::ZERO))
                }
                Err(err) => Err(err),
            };
        }
        let Some(current) = self.api.get_opt(&name).await? else {
            return match self
                .api
                .create(&PostParams::default(), &self.lease(0, None, None))
                .await
            {
                Ok(written) => Ok(self.claimed(written)),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok((false, Duration::ZERO)),
                Err(err) => Err(err),
            };
        };
        let rec = record(&current);
        let since = match &self.seen {
            Some((seen, at)) if seen.version == rec.version => *at,
            _ => Instant::now(),
        };
        self.seen = Some((rec.clone(), since));
        match decide(&rec, &self.cfg.identity, since.elapsed()) {
            Decision::Wait(wait) => Ok((false, wait)),
            Decision::Claim => {
                let spec = current.spec.clone().unwrap_or_default();
                let ours = rec.holder == self.cfg.identity;
                let transitions = spec.lease_transitions.unwrap_or(0) + i32::from(!ours);
                let acquired = if ours { spec.acquire_time } else { None };
                let lease = self.lease(transitions, acquired, current.metadata.resource_version);
                match self
                    .api
                    .replace(&name, &PostParams::default(), &lease)
                    .await
                {
                    Ok(written) => Ok(self.claimed(written)),
                    // Someone else wrote first: look again.
                    Err(kube::Error::Api(s)) if s.code == 409 => Ok((false, Duration::ZERO)),
                    Err(err) => Err(err),
                }
            }
        }
    }

    fn claimed(&mut self, written: Lease) -> (bool, Duration) {
        self.renewed = Some(Instant::now());
        self.written = Some(written);
        (true, RENEW_EVERY)
    }

    /// Still ours: renewed recently enough that no one else can have taken it.
    fn still_held(&self) -> bool {
        self.renewed.is_some_and(|at| at.elapsed() < TERM)
    }

    async fn release(&self) {
        let name = &self.cfg.lease_name;
        let Ok(Some(current)) = self.api.get_opt(name).await else {
            return;
        };
        if record(&current).holder != self.cfg.identity {
            return;
        }
        let mut released = current.clone();
        if let Some(spec) = released.spec.as_mut() {
            spec.holder_identity = None;
            spec.lease_duration_seconds = Some(1);
            spec.renew_time = Some(MicroTime(Timestamp::now()));
        }
        match self
            .api
            .replace(name, &PostParams::default(), &released)
            .await
        {
            Ok(_) => info!("released the leader lease"),
            Err(err) => {
                warn!(error = %err, "could not release the leader lease; it expires on its own")
            }
        }
    }
}

async fn campaign(
    api: Api<Lease>,
    cfg: LeaderElection,
    tx: watch::Sender<bool>,
    mut stopped: oneshot::Receiver<()>,
) {
    // Changes of the Lease wake a standby at once (a release, a holder's renewal).
    let changes = crate::k8s::watch::retried(watcher::watcher(
        api.clone(),
        watcher::Config::default().fields(&format!("metadata.name={}", cfg.lease_name)),
    ))
    .touched_objects();
    let mut changes = std::pin::pin!(changes);
    let mut campaign = Campaign {
        api,
        cfg,
        seen: None,
        renewed: None,
        written: None,
    };
    loop {
        // A request that hangs (the manager cut off from the API server without the
        // connection failing) must not keep a holder leading past its term: each look at the
        // Lease gets at most what is left of the term.
        let budget = step_budget(campaign.renewed, Instant::now());
        let (leading, wait) = match tokio::time::timeout(budget, campaign.step()).await {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(err)) => {
                warn!(error = %err, "leader election: cannot read or write the Lease");
                (campaign.still_held(), RETRY)
            }
            Err(_) => {
                warn!(
                    waited = ?budget,
                    "leader election: the Lease request did not answer in time"
                );
                (campaign.still_held(), Duration::ZERO)
            }
        };
        if !leading {
            campaign.renewed = None;
            campaign.written = None;
        }
        tx.send_if_modified(|was| std::mem::replace(was, leading) != leading);
        if leading {
            // Our own renewals show up on the watch too: only the timer matters now.
            tokio::select! {
                _ = &mut stopped => break,
                _ = tokio::time::sleep(wait) => {}
            }
        } else {
            tokio::select! {
                _ = &mut stopped => break,
                _ = tokio::time::sleep(wait) => {}
                _ = changes.next() => {}
            }
        }
    }
    if *tx.borrow() {
        campaign.release().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(holder: &str) -> Record {
        Record {
            holder: holder.into(),
            version: "7".into(),
            duration: Duration::from_secs(15),
        }
    }

    #[test]
    fn a_holder_never_waits_on_the_lease_past_its_term() {
        let t0 = Instant::now();
        assert_eq!(step_budget(None, t0), STEP_TIMEOUT, "a standby");
        assert_eq!(step_budget(Some(t0), t0), STEP_TIMEOUT, "just renewed");
        assert_eq!(
            step_budget(Some(t0), t0 + TERM - Duration::from_secs(1)),
            Duration::from_secs(1),
            "a second of the term left"
        );
        assert_eq!(step_budget(Some(t0), t0 + TERM), Duration::ZERO, "over");
        assert_eq!(
            step_budget(Some(t0), t0 + LEASE_DURATION * 2),
            Duration::ZERO
        );
        assert!(TERM + AFTER_TERM < LEASE_DURATION);
    }

    #[test]
    fn an_api_server_restart_of_eight_seconds_is_ridden_through() {
        // docs/install.md promises 8 s, and a chaos test restarts the API server within it.
        assert!(RIDES_THROUGH >= Duration::from_secs(8), "{RIDES_THROUGH:?}");
        assert!(RENEW_EVERY + RIDES_THROUGH + RETRY < TERM);
    }

    #[test]
    fn a_free_or_own_lease_is_claimed() {
        assert_eq!(decide(&rec(""), "me", Duration::ZERO), Decision::Claim);
        assert_eq!(decide(&rec("me"), "me", Duration::ZERO), Decision::Claim);
    }

    #[test]
    fn a_live_holder_is_waited_out_for_the_rest_of_its_duration() {
        assert_eq!(
            decide(&rec("other"), "me", Duration::from_secs(4)),
            Decision::Wait(Duration::from_secs(11))
        );
    }

    #[test]
    fn a_holder_silent_for_the_whole_duration_is_gone() {
        assert_eq!(
            decide(&rec("other"), "me", Duration::from_secs(15)),
            Decision::Claim
        );
    }
}
