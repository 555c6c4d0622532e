//! What a release asks of the traffic layer, as plain data. The Rollout plan decides *where*
//! traffic should be; `src/traffic` plans *how* to bring the cluster's Services, HTTPRoutes and
//! Ingresses there, and reports back whether they already are (read from the cluster, never
//! remembered).

use crate::api::rollout::{CanaryStep, TrafficRoutingRef};

/// The traffic state one release wants, for one `trafficRoutings[]` entry.
#[derive(Clone, Debug, PartialEq)]
pub enum TrafficIntent {
    /// The user's objects exactly as they were before the release: stable Service selector
    /// restored, no canary Service, no canary backend in the HTTPRoute, no canary Ingress.
    Restored,
    /// A release is being finished: every request goes to the stable side and nothing of the
    /// split is left in the route — the HTTPRoute as the user wrote it, no canary Ingress
    /// (Kruise's `RestoreGateway` in its route-traffic-to-stable step) — while the stable
    /// Service stays pinned to the stable LWS's leaders (the canary LWS may still exist, and its
    /// leaders carry the same labels) and the canary Service stays until the step that removes it.
    ToStable {
        /// The stable side's leaders (stable Service pin).
        stable_lws: Leaders,
    },
    /// A release is under way: the stable Service is pinned to the leaders of `stable_lws` and
    /// the canary Service `<service>-canary` selects the canary LWS's leaders. `route` says
    /// what the HTTPRoute / canary Ingress sends to the canary.
    Release {
        /// The leaders the stable Service serves (its pin: `leaderworkerset.sigs.k8s.io/name`,
        /// and the template revision in partition style): the user's LWS, or the second LWS
        /// once a blue-green release switched over, so clients of the Service reach the new
        /// side too.
        stable_lws: Leaders,
        /// The canary side's leaders (canary Service selector).
        canary_lws: Leaders,
        /// What the route sends to the canary.
        route: CanaryRoute,
    },
}

/// The leader pods one side of a release is: those of an LWS, and in partition style (both
/// sides are the user's one LWS) only those on one template revision
/// (`leaderworkerset.sigs.k8s.io/template-revision-hash`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leaders {
    /// The LWS's name (the DisaggregatedSet's, with `set`).
    pub lws: String,
    /// The template revision, when the side is told apart by it (the set's revision label,
    /// with `set`).
    pub revision: Option<String>,
    /// The leaders of a DisaggregatedSet's LWSs: `lws` names the set and `revision` is its
    /// revision hash (`disaggregatedset.x-k8s.io/name` and `/revision`); the user's selector
    /// picks the role (the pair's prefill).
    pub set: bool,
}

impl Leaders {
    /// The leaders of DisaggregatedSet `set`, on `revision` only when given.
    pub fn of_set(set: impl Into<String>, revision: Option<String>) -> Self {
        Self {
            lws: set.into(),
            revision,
            set: true,
        }
    }

    /// The leaders of `lws` on `revision` only.
    pub fn at(lws: impl Into<String>, revision: impl Into<String>) -> Self {
        Self {
            lws: lws.into(),
            revision: Some(revision.into()),
            set: false,
        }
    }
}

impl From<&str> for Leaders {
    fn from(lws: &str) -> Self {
        lws.to_string().into()
    }
}

impl From<String> for Leaders {
    fn from(lws: String) -> Self {
        Self {
            lws,
            revision: None,
            set: false,
        }
    }
}

impl PartialEq<str> for Leaders {
    fn eq(&self, lws: &str) -> bool {
        self.revision.is_none() && !self.set && self.lws == lws
    }
}

impl PartialEq<&str> for Leaders {
    fn eq(&self, lws: &&str) -> bool {
        self == *lws
    }
}

/// What the HTTPRoute or the canary Ingress sends to the canary side.
#[derive(Clone, Debug, PartialEq)]
pub struct CanaryRoute {
    /// Percent of requests (0–100) for the canary; `None` with no matches = 0.
    pub weight: Option<i32>,
    /// Requests matching any of these go to the canary only (Kruise: matches take precedence
    /// over weight for Gateway API; nginx writes both).
    pub matches: Vec<crate::api::rollout::HttpRouteMatch>,
    /// Header changes on canary-bound requests (Gateway API `RequestHeaderModifier`).
    pub request_header_modifier:
        Option<gateway_api::apis::standard::httproutes::HttpRouteRulesFiltersRequestHeaderModifier>,
}

impl CanaryRoute {
    /// No request reaches the canary (traffic back to stable before the canary shrinks).
    pub fn none() -> Self {
        Self {
            weight: Some(0),
            matches: Vec::new(),
            request_header_modifier: None,
        }
    }

    /// Every request to the new side (a blue-green switch): matches cleared, as Kruise's
    /// `RouteTrafficToNew`.
    pub fn all() -> Self {
        Self {
            weight: Some(100),
            matches: Vec::new(),
            request_header_modifier: None,
        }
    }

    /// This route's weight for `serving` of the `groups` it was given for (fewer: the weight
    /// shrinks in proportion, rounded up, so each serving group keeps its load). Matches are
    /// kept: they name requests, not a share.
    pub fn scaled_to(mut self, serving: i32, groups: i32) -> Self {
        if groups > 0 && serving < groups {
            self.weight = self.weight.map(|w| {
                let w = i64::from(w) * i64::from(serving.max(0));
                i32::try_from((w + i64::from(groups) - 1) / i64::from(groups)).unwrap_or(0)
            });
        }
        self
    }

    /// The route a canary step asks for.
    pub fn for_step(step: &CanaryStep) -> Self {
        let weight = step
            .traffic
            .as_deref()
            .and_then(|t| t.trim_end_matches('%').parse().ok());
        Self {
            weight,
            matches: step.matches.clone().unwrap_or_default(),
            request_header_modifier: step.request_header_modifier.clone(),
        }
    }
}

/// The routing entry an intent applies to (the Rollout's `trafficRoutings[0]`).
pub type Routing = TrafficRoutingRef;
