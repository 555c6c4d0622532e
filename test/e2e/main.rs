//! End-to-end tests against the real local control plane started by `test/run-tests.sh`
//! (`test/cluster/up.sh`). Each test works in its own namespace, so they run concurrently.
//!
//! The cluster is found through `LWS_E2E_KUBECONFIG`; without it every test fails with a line
//! saying how to run them, instead of silently passing.

mod harness;
mod isolated;

mod bench;
mod chaos;
mod cluster;
mod crash_support;
mod crds;
mod disaggregatedset;
mod disaggregatedset_release;
mod disaggregatedset_v10;
mod failover;
mod helm_chart;
mod image;
mod kueue;
mod kueue_faults;
mod kueue_multikueue;
mod kueue_release;
mod kueue_support;
mod lws;
mod lws_admission;
mod lws_argocd;
mod lws_crash;
mod lws_encoding;
mod lws_gang;
mod lws_lifecycle;
mod lws_placement;
mod lws_rolling;
mod lws_services;
mod lws_support;
mod lws_v09;
mod lws_v10;
mod lws_volcano;
mod manager;
mod markers;
mod metrics;
mod metrics_pipeline;
mod metrics_rollouts;
mod partition;
mod rbac;
mod rollout_admission;
mod rollout_analysis;
mod rollout_argocd;
mod rollout_argocd_actions;
mod rollout_bluegreen;
mod rollout_bluegreen_crash;
mod rollout_canary;
mod rollout_cli;
mod rollout_crash;
mod rollout_deadline;
mod rollout_disaggregatedset;
mod rollout_disaggregatedset_faults;
mod rollout_disaggregatedset_slices;
mod rollout_disaggregatedset_style_faults;
mod rollout_disaggregatedset_styles;
mod rollout_neighbours;
mod rollout_partition;
mod rollout_partition_crash;
mod rollout_rollback;
mod rollout_support;
mod rollout_tools;
mod scripts;
mod takeover;
mod traffic;
mod traffic_driver;
mod traffic_plan;
mod uninstall;
mod upstream;
mod upstream_reference;
mod webhook_cert;
