//! Label, annotation and field-manager names, exactly upstream LWS's (see
//! docs/lws.md): tools and users select on them.

/// LWS name, on every object the controller makes.
pub const NAME: &str = "leaderworkerset.sigs.k8s.io/name";
/// Revision key of the template a group runs.
pub const REVISION: &str = "leaderworkerset.sigs.k8s.io/template-revision-hash";
/// Position of a pod in its group; the leader is `"0"`.
pub const WORKER_INDEX: &str = "leaderworkerset.sigs.k8s.io/worker-index";
/// Index of the group.
pub const GROUP_INDEX: &str = "leaderworkerset.sigs.k8s.io/group-index";
/// sha1 of `<namespace>/<leader pod name>`: unique per group incarnation.
pub const GROUP_KEY: &str = "leaderworkerset.sigs.k8s.io/group-key";
/// Subgroup index of a pod.
pub const SUBGROUP_INDEX: &str = "leaderworkerset.sigs.k8s.io/subgroup-index";
/// sha1 of `<leader pod name>/<subgroup index>`.
pub const SUBGROUP_KEY: &str = "leaderworkerset.sigs.k8s.io/subgroup-key";

/// Group size, on pod templates.
pub const SIZE: &str = "leaderworkerset.sigs.k8s.io/size";
/// LWS replicas when the leader StatefulSet was last written.
pub const REPLICAS: &str = "leaderworkerset.sigs.k8s.io/replicas";
/// Leader pod name, on worker pods.
pub const LEADER_NAME: &str = "leaderworkerset.sigs.k8s.io/leader-name";
/// Topology key a whole group must share and own exclusively.
pub const EXCLUSIVE_TOPOLOGY: &str = "leaderworkerset.sigs.k8s.io/exclusive-topology";
/// Topology key a subgroup must share and own exclusively.
pub const SUBGROUP_EXCLUSIVE_TOPOLOGY: &str =
    "leaderworkerset.sigs.k8s.io/subgroup-exclusive-topology";
/// Subgroup size, on pod templates.
pub const SUBGROUP_SIZE: &str = "leaderworkerset.sigs.k8s.io/subgroup-size";
/// Subgroup policy type, on the leader template.
pub const SUBGROUP_POLICY_TYPE: &str = "leaderworkerset.sigs.k8s.io/subgroup-policy-type";
/// `UniquePerReplica` on leader pods that get their own subdomain.
pub const SUBDOMAIN_POLICY: &str = "leaderworkerset.sigs.k8s.io/subdomainPolicy";
/// Set on worker templates when the leader requests TPUs.
pub const LEADER_REQUESTS_TPUS: &str = "leaderworkerset.sigs.k8s.io/leader-requests-tpus";

/// On an LWS: recreate groups only once they have started, as the v0.9 restart policy
/// `RecreateGroupAfterStart` does (v0.8's experimental switch; any value, still honoured).
pub const RECREATE_GROUP_AFTER_START: &str =
    "leaderworkerset.sigs.k8s.io/experimental-recreate-group-after-start";

/// On an LWS (ours): seconds a group may stay not ready after its newest pod was created before
/// the LWS reports `ReplicaFailure` / `ProgressDeadlineExceeded` (default 1800).
pub const PROGRESS_DEADLINE: &str = "lws-rollout.x-k8s.io/progress-deadline-seconds";

/// On an LWS (ours; docs/lws.md "Gang scheduling"): `"native"` schedules each group all or
/// nothing through a Kubernetes `scheduling.k8s.io/v1alpha2` PodGroup of its own. Copied to the
/// pod templates, where the pod webhook reads it. Fixed at creation (the LWS webhook refuses a
/// change): the templates carry it, and a template change would replace every leader at once.
pub const GANG_SCHEDULING: &str = "lws-rollout.x-k8s.io/gang-scheduling";
/// The one value [`GANG_SCHEDULING`] takes.
pub const GANG_NATIVE: &str = "native";

/// Pod index label the StatefulSet controller sets (Kubernetes ≥ 1.28).
pub const POD_INDEX: &str = "apps.kubernetes.io/pod-index";

/// Annotation on an LWS held by a Rollout: the revision key its groups must stay on while the
/// new template runs in the Rollout's canary LWS. Set by our LWS webhook in the same admission
/// as the template change, removed by the Rollout controller to release the LWS. Kruise's key
/// for the stable revision (a label on Deployments there).
pub const HELD_REVISION: &str = "rollouts.kruise.io/stable-revision";

/// Annotation on an LWS held by a partition-style Rollout (ours): the lowest group ordinal the
/// release lets move to the new template in place, in the user's LWS itself; groups below it
/// stay on the held revision. While it is set the hold ([`HELD_REVISION`]) no longer keeps
/// every group back: the spec's template is the update revision, and the leader StatefulSet's
/// partition is the larger of the user's and this one. Written per batch by the BatchRelease;
/// raised to `replicas` by our LWS webhook in the same admission as a template change mid-release
/// (so a revert or a third template moves no group before the Rollout has moved traffic);
/// removed with the hold.
pub const RELEASE_PARTITION: &str = "lws-rollout.x-k8s.io/release-partition";

/// Annotation on a worker StatefulSet (ours, not upstream's): the uids of the worker pods of
/// this group incarnation, in ordinal order, recorded once all of them exist. A worker that
/// goes away — however fast, even without ever being seen terminating — is then missing from
/// the pods the StatefulSet has, and its group is rebuilt.
pub const WORKER_ROSTER: &str = "lws-rollout.x-k8s.io/worker-uids";
