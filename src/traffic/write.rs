//! The plan's output as plain data: writes for an applier to execute in order, and problems
//! for a Rollout to report (condition + Event).

use k8s_openapi::api::{core::v1::Service, networking::v1::Ingress};
use std::fmt;

/// The kinds of object the traffic layer reads or writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `v1/Service`.
    Service,
    /// `gateway.networking.k8s.io/v1/HTTPRoute`.
    HttpRoute,
    /// `networking.k8s.io/v1/Ingress`.
    Ingress,
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Kind::Service => "Service",
            Kind::HttpRoute => "HTTPRoute",
            Kind::Ingress => "Ingress",
        })
    }
}

/// One object, by kind and name, in the Rollout's namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// Its kind.
    pub kind: Kind,
    /// Its name.
    pub name: String,
}

/// An object the traffic layer owns outright (created by it, owned by the Rollout).
#[derive(Clone, Debug, PartialEq)]
pub enum Owned {
    /// The canary Service.
    Service(Box<Service>),
    /// The canary Ingress.
    Ingress(Box<Ingress>),
}

/// One write. A plan's writes must be executed in order, stopping at the first failure:
/// later writes rely on earlier ones (the canary Service exists before a route sends to it).
#[derive(Clone, Debug, PartialEq)]
pub enum Write {
    /// Server-side apply (creates when absent) of an object we own whole.
    Apply {
        /// The full desired object.
        object: Owned,
        /// `fieldManager` of the apply (force: the object is ours).
        field_manager: &'static str,
    },
    /// RFC 6902 JSON patch of a user's object, computed from the observed object. It starts
    /// with a `test` of `metadata.resourceVersion`, so a patch computed from a stale read fails
    /// (HTTP 422) instead of overwriting a change we did not see: re-observe and re-plan.
    Patch {
        /// The object.
        target: Target,
        /// The operations.
        patch: json_patch::Patch,
        /// `fieldManager` of the patch.
        field_manager: &'static str,
    },
    /// Delete one of our objects, with a uid precondition (never a same-named successor).
    Delete {
        /// The object.
        target: Target,
        /// Its observed uid.
        uid: String,
    },
}

impl Write {
    /// The object this write touches.
    pub fn target(&self) -> Target {
        match self {
            Write::Apply { object, .. } => match object {
                Owned::Service(s) => Target {
                    kind: Kind::Service,
                    name: s.metadata.name.clone().unwrap_or_default(),
                },
                Owned::Ingress(i) => Target {
                    kind: Kind::Ingress,
                    name: i.metadata.name.clone().unwrap_or_default(),
                },
            },
            Write::Patch { target, .. } | Write::Delete { target, .. } => target.clone(),
        }
    }
}

/// Something that keeps the cluster from matching the intent, for a condition and an Event.
/// Planning goes on for everything else, so a problem with one object never stalls the rest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Problem {
    /// An object `trafficRoutings` names does not exist.
    Missing(Target),
    /// An object with our canary name exists but is not owned by this Rollout: never touched.
    NotOurs(Target),
    /// The route or Ingress sends nothing to the stable Service, so there is nothing to split.
    NoStableBackend {
        /// The route or Ingress.
        target: Target,
        /// The stable Service's name.
        service: String,
    },
    /// The stable Service selects no pods by label (no selector, e.g. `ExternalName`).
    NoSelector(String),
    /// The change would break a limit of the API (name length, Gateway API list sizes).
    TooLarge {
        /// The object.
        target: Target,
        /// Which limit.
        limit: String,
    },
    /// A `trafficRoutings` feature this controller does not implement.
    Unsupported(String),
}

impl Problem {
    /// CamelCase reason for the Event and condition.
    pub fn reason(&self) -> &'static str {
        match self {
            Problem::Missing(_) => "TrafficObjectNotFound",
            Problem::NotOurs(_) => "TrafficObjectNotOwned",
            Problem::NoStableBackend { .. } => "NoStableBackend",
            Problem::NoSelector(_) => "ServiceWithoutSelector",
            Problem::TooLarge { .. } => "TrafficLimitExceeded",
            Problem::Unsupported(_) => "TrafficRoutingUnsupported",
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::Missing(t) => write!(f, "{} {} not found", t.kind, t.name),
            Problem::NotOurs(t) => write!(
                f,
                "{} {} exists and is not owned by this Rollout; rename or delete it",
                t.kind, t.name
            ),
            Problem::NoStableBackend { target, service } => write!(
                f,
                "{} {} has no backend that is Service {service}",
                target.kind, target.name
            ),
            Problem::NoSelector(s) => write!(
                f,
                "Service {s} has no selector, so it cannot be pinned to the stable leaders"
            ),
            Problem::TooLarge { target, limit } => {
                write!(f, "{} {}: {limit}", target.kind, target.name)
            }
            Problem::Unsupported(what) => write!(f, "{what} is not supported"),
        }
    }
}
