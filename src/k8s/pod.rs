//! How every controller reads a pod: one definition of "ready".

use k8s_openapi::api::core::v1::Pod;

/// Running, with the `Ready` condition True (what the kubelet — here KWOK — reports once every
/// readiness probe passes).
pub fn ready(pod: &Pod) -> bool {
    let Some(status) = &pod.status else {
        return false;
    };
    status.phase.as_deref() == Some("Running")
        && status
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "Ready" && c.status == "True")
}

/// The pod is on its way out (deleted, waiting for its grace period or finalizers).
pub fn terminating(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodCondition, PodStatus};

    fn pod(phase: &str, ready: &str) -> Pod {
        Pod {
            status: Some(PodStatus {
                phase: Some(phase.into()),
                conditions: Some(vec![PodCondition {
                    type_: "Ready".into(),
                    status: ready.into(),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn ready_needs_running_and_the_ready_condition() {
        assert!(ready(&pod("Running", "True")));
        assert!(!ready(&pod("Running", "False")));
        assert!(!ready(&pod("Pending", "True")));
        assert!(!ready(&Pod::default()));
    }
}
