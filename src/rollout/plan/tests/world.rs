//! A tiny stand-in for the cluster around the pure plan: it applies a plan's effects to the
//! observed data the way the apply step and the other controllers would (BatchRelease status,
//! traffic read-back, the stable LWS rolling once released), so tests can drive a whole
//! release through `plan` and assert on each status. Plain data; no part of our code is faked.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use crate::api::batchrelease::{BatchReleaseCanaryStatus, BatchReleaseStatus};
use crate::api::rollout::{
    CanaryStep, CanaryStrategy, ObjectRef, Rollout, RolloutPause, RolloutSpec, RolloutStrategy,
    TrafficRoutingRef,
};
use crate::release::{
    groups::{desired_groups, scaled},
    progress::CanaryCounts,
};
use crate::rollout::names;
use crate::rollout::observe::{BatchReleaseSummary, RolloutObserved, RunSummary, StableWorkload};
use crate::rollout::plan::{BatchReleaseAction, FinalizerAction, HoldAction, RolloutPlan, plan};
use crate::traffic::{fixtures, intent::TrafficIntent, observe::TrafficObserved};

pub fn t0() -> Timestamp {
    Timestamp::from_second(1_795_327_200).unwrap()
}

pub fn step(replicas: IntOrString, traffic: Option<&str>, pause: Option<i32>) -> CanaryStep {
    CanaryStep {
        replicas: Some(replicas),
        traffic: traffic.map(Into::into),
        pause: Some(RolloutPause { duration: pause }),
        ..CanaryStep::default()
    }
}

pub fn pct(p: &str) -> IntOrString {
    IntOrString::String(p.into())
}

/// The release: 1 group at 5%, 50% at 50%, 100% — manual approval after the first two.
pub fn three_steps() -> Vec<CanaryStep> {
    vec![
        step(IntOrString::Int(1), Some("5%"), None),
        step(pct("50%"), Some("50%"), None),
        step(pct("100%"), None, None),
    ]
}

pub fn rollout(steps: Vec<CanaryStep>) -> Rollout {
    let mut r = Rollout::new(
        "vllm",
        RolloutSpec {
            workload_ref: ObjectRef {
                api_version: names::LWS_API_VERSION.into(),
                kind: names::LWS_KIND.into(),
                name: "vllm".into(),
            },
            strategy: RolloutStrategy {
                paused: false,
                canary: Some(CanaryStrategy {
                    steps,
                    // The traffic fixtures' Service `svc` and HTTPRoute `route`.
                    traffic_routings: Some(vec![TrafficRoutingRef {
                        grace_period_seconds: Some(3),
                        ..crate::traffic::fixtures::gateway_routing()
                    }]),
                    enable_extra_workload_for_canary: true,
                    ..CanaryStrategy::default()
                }),
                blue_green: None,
            },
            disabled: false,
        },
    );
    r.metadata = ObjectMeta {
        name: Some("vllm".into()),
        namespace: Some("ns".into()),
        uid: Some("rollout-uid".into()),
        generation: Some(1),
        ..ObjectMeta::default()
    };
    r
}

pub fn stable() -> StableWorkload {
    StableWorkload {
        name: "vllm".into(),
        uid: "lws-uid".into(),
        generation: 1,
        observed_generation: Some(1),
        current_revision: "rev1".into(),
        update_revision: "rev1".into(),
        replicas: 4,
        ready_replicas: 4,
        updated_replicas: 4,
        hold: None,
        release_partition: None,
        rollout_id: None,
        ..StableWorkload::default()
    }
}

/// The cluster as the tests see it.
pub struct World {
    pub obs: RolloutObserved,
    pub now: Timestamp,
    /// The last traffic the plans asked for (the objects themselves are in `obs.traffic`,
    /// changed by executing each plan's writes).
    pub traffic: Option<TrafficIntent>,
    /// The canary's groups become ready as soon as the BatchRelease asks for them.
    pub canary_healthy: bool,
    /// The stable LWS rolls (all groups updated and ready) once the hold is released.
    pub stable_rolls: bool,
    /// The BatchRelease says Completed as soon as its spec says finalise.
    pub br_finalises: bool,
    /// The phase the analysis controller gives each run the plans create, with its message.
    pub analysis_outcome: (String, Option<String>),
    /// Every plan so far.
    pub plans: Vec<RolloutPlan>,
}

impl World {
    pub fn new(steps: Vec<CanaryStep>) -> Self {
        Self {
            obs: RolloutObserved {
                rollout: rollout(steps),
                workload: Some(stable()),
                traffic: Some(TrafficObserved {
                    stable_service: Some(fixtures::service(serde_json::json!({"app": "vllm"}))),
                    http_route: Some(fixtures::simple_route()),
                    ..TrafficObserved::default()
                }),
                ..RolloutObserved::default()
            },
            now: t0(),
            traffic: None,
            canary_healthy: true,
            stable_rolls: true,
            br_finalises: true,
            analysis_outcome: ("Successful".into(), None),
            plans: Vec::new(),
        }
    }

    pub fn status(&self) -> crate::api::rollout::RolloutStatus {
        self.obs.rollout.status.clone().unwrap_or_default()
    }

    /// The release's progress in the plan's working shape, from whichever field holds it.
    pub fn canary(&self) -> crate::api::rollout::CanaryStatus {
        let field = crate::rollout::plan::style::in_flight(&self.obs.rollout).status_field();
        crate::rollout::plan::substatus::working(self.status(), field)
            .canary_status
            .unwrap_or_default()
    }

    /// The same release as a blue-green one (steps and routing kept).
    pub fn blue_green(steps: Vec<CanaryStep>) -> Self {
        let mut w = Self::new(steps);
        let c = w.obs.rollout.spec.strategy.canary.take().unwrap();
        w.obs.rollout.spec.strategy.blue_green = Some(crate::api::rollout::BlueGreenStrategy {
            steps: c.steps,
            traffic_routings: c.traffic_routings,
            ..Default::default()
        });
        w
    }

    /// (currentStepIndex, currentStepState, finalisingStep, phase).
    pub fn at(&self) -> (i32, String, String, String) {
        let c = self.canary();
        (
            c.common.current_step_index,
            c.common.current_step_state.to_string(),
            c.common.finalising_step.to_string(),
            self.status().phase.to_string(),
        )
    }

    pub fn advance(&mut self, secs: i64) {
        self.now = self
            .now
            .checked_add(SignedDuration::from_secs(secs))
            .unwrap();
    }

    /// The webhook's part of a template change: new revision, hold on the stable revision.
    pub fn change_template(&mut self, revision: &str) {
        let w = self.obs.workload.as_mut().unwrap();
        if w.hold.is_none() {
            w.hold = Some(w.current_revision.clone());
        }
        w.update_revision = revision.into();
        w.generation += 1;
        w.observed_generation = Some(w.generation);
        w.updated_replicas = if w.current_revision == revision {
            w.replicas
        } else {
            0
        };
    }

    /// `kubectl-kruise rollout approve`: the status patch StepPaused → StepReady.
    pub fn approve(&mut self) {
        let mut s = self.status();
        let common = match (s.canary_status.as_mut(), s.blue_green_status.as_mut()) {
            (Some(c), _) => &mut c.common,
            (None, Some(b)) => &mut b.common,
            (None, None) => panic!("approve needs a release status"),
        };
        assert_eq!(
            common.current_step_state, "StepPaused",
            "approve needs StepPaused"
        );
        common.current_step_state = "StepReady".into();
        self.obs.rollout.status = Some(s);
    }

    /// One reconcile: plan, then apply its effects.
    pub fn reconcile(&mut self) -> RolloutPlan {
        let p = plan(&self.obs, self.now);
        // No hidden state: a restarted manager given the same cluster decides the same.
        assert_eq!(
            p,
            plan(&self.obs, self.now),
            "plan is not a function of its input"
        );
        self.obs.rollout.status = Some(p.status.clone());
        if let Some(h) = &p.hash_annotation {
            self.obs
                .rollout
                .metadata
                .annotations
                .get_or_insert_with(BTreeMap::new)
                .insert(names::HASH_ANNOTATION.into(), h.clone());
        }
        match p.finalizer {
            FinalizerAction::Add => {
                self.obs.rollout.metadata.finalizers = Some(vec![names::FINALIZER.into()])
            }
            FinalizerAction::Remove => self.obs.rollout.metadata.finalizers = None,
            FinalizerAction::Keep => {}
        }
        if let Some(objects) = self.obs.traffic.as_mut() {
            fixtures::execute(objects, &p.traffic_writes);
        }
        if p.traffic.is_some() {
            self.traffic = p.traffic.clone();
        }
        // A set's release-groups go with the hold, or alone when a restart takes them back.
        if matches!(p.hold, HoldAction::Release | HoldAction::ReturnMoved)
            && let Some(w) = self.obs.workload.as_mut()
        {
            w.release_groups = false;
        }
        if p.hold == HoldAction::Release
            && let Some(w) = self.obs.workload.as_mut()
        {
            w.hold = None;
            if self.stable_rolls {
                w.current_revision = w.update_revision.clone();
                w.updated_replicas = w.replicas;
                w.ready_replicas = w.replicas;
            }
        }
        match &p.batch_release {
            BatchReleaseAction::Apply(br) => {
                let generation = self
                    .obs
                    .batch_release
                    .as_ref()
                    .map_or(1, |b| b.generation + 1);
                let status = self
                    .obs
                    .batch_release
                    .as_ref()
                    .map(|b| b.status.clone())
                    .unwrap_or_default();
                let canary = self.obs.batch_release.as_ref().and_then(|b| b.canary);
                self.obs.batch_release = Some(BatchReleaseSummary {
                    generation,
                    resource_version: generation.to_string(),
                    spec: br.spec.clone(),
                    status,
                    rollback_in_batch: br
                        .metadata
                        .annotations
                        .as_ref()
                        .and_then(|a| a.get(crate::release::names::ROLLBACK_IN_BATCH))
                        .cloned(),
                    canary,
                });
            }
            BatchReleaseAction::Delete => self.obs.batch_release = None,
            BatchReleaseAction::Keep => {}
        }
        for run in &p.analysis.create {
            let name = run.metadata.name.clone().unwrap_or_default();
            self.obs
                .analysis
                .runs
                .entry(name)
                .or_insert_with(|| RunSummary {
                    phase: self.analysis_outcome.0.clone(),
                    message: self.analysis_outcome.1.clone(),
                    created: Some(Time(self.now)),
                    last_values: vec![("error-ratio".into(), "[0.01]".into())],
                    terminated: false,
                });
        }
        for name in &p.analysis.delete {
            self.obs.analysis.runs.remove(name);
        }
        for name in &p.analysis.terminate {
            if let Some(r) = self.obs.analysis.runs.get_mut(name) {
                r.terminated = true;
            }
        }
        for name in &p.analysis.terminate {
            if let Some(r) = self.obs.analysis.runs.get_mut(name) {
                r.terminated = true;
            }
        }
        self.run_batch_release();
        self.plans.push(p.clone());
        p
    }

    /// What the BatchRelease controller and the LWS controller make of the current spec: the
    /// canary LWS scaled to the batch (its status caught up) and the BatchRelease's status.
    fn run_batch_release(&mut self) {
        let replicas = self.obs.workload.as_ref().map_or(0, |w| w.replicas);
        // A set's BatchRelease gives every role of every slice the share of that slice's
        // groups, rounded up, at least one (`batchrelease::pair::plan::role_groups`, which
        // this layer may not import): its counts are complete pairs summed over slices.
        let slices = self
            .obs
            .workload
            .as_ref()
            .filter(|w| w.kind == crate::rollout::observe::WorkloadKind::DisaggregatedSet)
            .map(|w| w.slices.max(1));
        let releasing = self.canary().canary_revision;
        let healthy = self.canary_healthy;
        let finalises = self.br_finalises;
        let Some(br) = self.obs.batch_release.as_mut() else {
            return;
        };
        let Some(partition) = br.spec.release_plan.batch_partition else {
            // Blue-green promotion: the second LWS grows to every group the stable LWS has.
            let rp = &br.spec.release_plan;
            if rp.rolling_style == Some(crate::api::batchrelease::RollingStyle::BlueGreen)
                && rp.finalizing_policy
                    == Some(crate::api::batchrelease::FinalizingPolicy::WaitResume)
                && let Some(c) = br.canary.as_mut()
                && c.spec_replicas < replicas
            {
                c.spec_replicas = replicas;
                c.replicas = replicas;
                c.generation += 1;
                c.observed_generation = Some(c.generation);
                c.ready = if healthy { replicas } else { replicas - 1 };
            }
            // Finalised at once (the BatchRelease controller's own waits are its tests'):
            // Completed for this spec.
            if finalises {
                br.status.phase = Some("Completed".into());
                br.status.observed_generation = Some(br.generation);
            }
            return;
        };
        let batches = br.spec.release_plan.batches.clone().unwrap_or_default();
        let share = &batches[usize::try_from(partition).unwrap()].canary_replicas;
        let want = match slices {
            Some(slices) => {
                let per_slice = replicas / slices;
                let groups = scaled(share, per_slice).unwrap_or(0);
                slices * groups.clamp(1.min(per_slice), per_slice)
            }
            None => desired_groups(share, replicas),
        };
        let have = br
            .status
            .canary_status
            .as_ref()
            .map_or(0, |c| c.updated_replicas)
            .max(want);
        let ready = if healthy { have } else { have - 1 };
        let generation = br.canary.map_or(1, |c| c.generation + 1);
        br.canary = Some(CanaryCounts {
            spec_replicas: have,
            generation,
            observed_generation: Some(generation),
            replicas: have,
            ready,
        });
        br.status = BatchReleaseStatus {
            update_revision: Some(releasing),
            observed_generation: Some(br.generation),
            observed_rollout_id: br.spec.release_plan.rollout_id.clone(),
            phase: Some("Progressing".into()),
            message: (!healthy).then(|| {
                format!("batch {} waits for LeaderWorkerSet vllm-canary-rev2: {ready}/{want} groups ready; not ready: group {}", partition + 1, have - 1)
            }),
            canary_status: Some(BatchReleaseCanaryStatus {
                current_batch_state: Some(if healthy { "Ready" } else { "Verifying" }.into()),
                current_batch: partition,
                updated_replicas: have,
                updated_ready_replicas: ready,
                ..BatchReleaseCanaryStatus::default()
            }),
            ..BatchReleaseStatus::default()
        };
    }

    /// Reconciles until `done` holds, moving the clock by each plan's requeue. Panics after 40.
    pub fn until(&mut self, what: &str, done: impl Fn(&World) -> bool) {
        for _ in 0..40 {
            if done(self) {
                return;
            }
            let p = self.reconcile();
            if done(self) {
                return;
            }
            if let Some(d) = p.requeue_after {
                self.advance(i64::try_from(d.as_secs().max(1)).unwrap());
            }
        }
        panic!(
            "never reached {what}; at {:?}; last plan {:#?}",
            self.at(),
            self.plans.last()
        );
    }
}
