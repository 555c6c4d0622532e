//! What a real vLLM server would show on `/metrics` for the requests this pod answered — the
//! metric names and histogram buckets of vLLM's own exporter — and the faults a test plays a
//! bad model with, read from the pod's own spec (`AGENT_ERROR_RATIO`, `AGENT_TTFT_MS` in the
//! first container's env), so a release test changes the template exactly as a user would.

use std::fmt::Write as _;
use std::time::Duration;

/// vLLM's buckets for `vllm:time_to_first_token_seconds`.
pub const TTFT_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
];
/// vLLM's buckets for `vllm:e2e_request_latency_seconds`.
pub const E2E_BUCKETS: &[f64] = &[
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
    480.0, 960.0, 1920.0, 7680.0,
];

/// Env var: the share (0..=1) of requests answered 500.
pub const ERROR_RATIO_ENV: &str = "AGENT_ERROR_RATIO";
/// Env var: each request's time to first token, in milliseconds.
pub const TTFT_ENV: &str = "AGENT_TTFT_MS";

/// A pod's faults, from its first container's env. A malformed value is ignored: a typo must
/// not look like a deliberately bad model.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Faults {
    /// Share of requests answered 500.
    pub error_ratio: f64,
    /// Time to first token of every request (absent: the answer's own time).
    pub ttft: Option<Duration>,
}

impl Faults {
    /// Reads `env` (name, value) pairs.
    pub fn from_env<'a>(env: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        let mut f = Faults::default();
        for (k, v) in env {
            match k {
                ERROR_RATIO_ENV => {
                    if let Ok(r) = v.trim().parse::<f64>()
                        && (0.0..=1.0).contains(&r)
                    {
                        f.error_ratio = r;
                    }
                }
                TTFT_ENV => {
                    if let Ok(ms) = v.trim().parse::<u64>() {
                        f.ttft = Some(Duration::from_millis(ms));
                    }
                }
                _ => {}
            }
        }
        f
    }

    /// Whether the `n`-th request (1-based) of a pod fails: spread evenly, never at random, so
    /// a test's counts do not depend on luck — with 0.5 every second request fails.
    pub fn fails(&self, n: u64) -> bool {
        if self.error_ratio <= 0.0 {
            return false;
        }
        let n = n as f64;
        (n * self.error_ratio).floor() > ((n - 1.0) * self.error_ratio).floor()
    }
}

/// A histogram with fixed bounds.
#[derive(Clone, Debug, PartialEq)]
pub struct Histogram {
    bounds: &'static [f64],
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    pub fn new(bounds: &'static [f64]) -> Self {
        Histogram {
            bounds,
            counts: vec![0; bounds.len()],
            sum: 0.0,
            count: 0,
        }
    }

    pub fn observe(&mut self, v: f64) {
        for (i, b) in self.bounds.iter().enumerate() {
            if v <= *b {
                self.counts[i] += 1;
            }
        }
        self.sum += v;
        self.count += 1;
    }

    fn render(&self, out: &mut String, name: &str, labels: &str) {
        for (b, c) in self.bounds.iter().zip(&self.counts) {
            let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{b:?}\"}} {c}");
        }
        let _ = writeln!(out, "{name}_bucket{{{labels},le=\"+Inf\"}} {}", self.count);
        let _ = writeln!(out, "{name}_sum{{{labels}}} {}", self.sum);
        let _ = writeln!(out, "{name}_count{{{labels}}} {}", self.count);
    }
}

/// One pod's serving figures.
#[derive(Clone, Debug, PartialEq)]
pub struct Metrics {
    /// Requests received (the fault's counter).
    pub received: u64,
    /// Requests answered successfully.
    pub success: u64,
    /// Requests being answered now.
    pub running: i64,
    pub ttft: Histogram,
    pub e2e: Histogram,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            received: 0,
            success: 0,
            running: 0,
            ttft: Histogram::new(TTFT_BUCKETS),
            e2e: Histogram::new(E2E_BUCKETS),
        }
    }
}

impl Metrics {
    /// The Prometheus text exposition, as vLLM names it, for `model`.
    pub fn render(&self, model: &str) -> String {
        let model = model.replace('\\', "\\\\").replace('"', "\\\"");
        let labels = format!("model_name=\"{model}\"");
        let mut out = String::new();
        out.push_str("# HELP vllm:num_requests_running Number of requests currently running.\n");
        out.push_str("# TYPE vllm:num_requests_running gauge\n");
        let _ = writeln!(
            out,
            "vllm:num_requests_running{{{labels}}} {}",
            self.running
        );
        out.push_str(
            "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.\n",
        );
        out.push_str("# TYPE vllm:num_requests_waiting gauge\n");
        let _ = writeln!(out, "vllm:num_requests_waiting{{{labels}}} 0");
        out.push_str(
            "# HELP vllm:request_success_total Count of successfully processed requests.\n",
        );
        out.push_str("# TYPE vllm:request_success_total counter\n");
        let _ = writeln!(
            out,
            "vllm:request_success_total{{{labels},finished_reason=\"stop\"}} {}",
            self.success
        );
        out.push_str("# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.\n");
        out.push_str("# TYPE vllm:time_to_first_token_seconds histogram\n");
        self.ttft
            .render(&mut out, "vllm:time_to_first_token_seconds", &labels);
        out.push_str("# HELP vllm:e2e_request_latency_seconds Histogram of end to end request latency in seconds.\n");
        out.push_str("# TYPE vllm:e2e_request_latency_seconds histogram\n");
        self.e2e
            .render(&mut out, "vllm:e2e_request_latency_seconds", &labels);
        out
    }
}

/// The model a vLLM server names in its metrics' `model_name`: the first name after
/// `--served-model-name` in its command line (vLLM takes one or more), else `image` (vLLM's
/// default is the model's path, which a test pod has none of).
pub fn model_name<'a>(image: &str, argv: impl IntoIterator<Item = &'a str>) -> String {
    let mut argv = argv.into_iter();
    while let Some(a) = argv.next() {
        if a == "--served-model-name" {
            if let Some(name) = argv.next().filter(|n| !n.starts_with("--")) {
                return name.to_string();
            }
        } else if let Some(name) = a.strip_prefix("--served-model-name=")
            && !name.is_empty()
        {
            return name.to_string();
        }
    }
    image.to_string()
}

/// Prometheus's file service discovery for `table`: one target per serving leader address (the
/// pods that answer requests; workers are reached through them), labelled as a Kubernetes pod
/// scrape with `labelmap` would label it — every pod label, its name made a Prometheus label
/// name (`leaderworkerset.sigs.k8s.io/name` → `leaderworkerset_sigs_k8s_io_name`) — plus
/// `namespace` and `pod`.
pub fn targets(table: &crate::table::Table) -> String {
    let mut groups: Vec<(String, serde_json::Value)> = table
        .iter()
        .filter(|(_, e)| e.drain_until.is_none())
        .filter(|(_, e)| e.info.worker_index.as_deref().is_none_or(|w| w == "0"))
        .map(|(addr, e)| {
            let mut labels = serde_json::Map::new();
            for (k, v) in &e.info.labels {
                labels.insert(label_name(k), v.clone().into());
            }
            labels.insert("namespace".into(), e.info.namespace.clone().into());
            labels.insert("pod".into(), e.info.name.clone().into());
            (
                addr.to_string(),
                serde_json::json!({"targets": [addr.to_string()], "labels": labels}),
            )
        })
        .collect();
    groups.sort_by(|a, b| a.0.cmp(&b.0));
    serde_json::Value::Array(groups.into_iter().map(|(_, g)| g).collect()).to_string()
}

/// A Kubernetes label key as a Prometheus label name.
pub fn label_name(key: &str) -> String {
    key.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_keys_become_prometheus_label_names() {
        assert_eq!(
            label_name("leaderworkerset.sigs.k8s.io/name"),
            "leaderworkerset_sigs_k8s_io_name"
        );
        assert_eq!(label_name("app"), "app");
    }

    #[test]
    fn model_name_is_the_first_served_model_name_else_the_image() {
        let argv = [
            "vllm",
            "serve",
            "/models/m",
            "--served-model-name",
            "llama",
            "l3",
        ];
        assert_eq!(model_name("vllm:1", argv), "llama");
        assert_eq!(
            model_name("vllm:1", ["--port", "8000", "--served-model-name=mistral"]),
            "mistral"
        );
        assert_eq!(model_name("vllm:1", ["--served-model-name"]), "vllm:1");
        assert_eq!(model_name("vllm:1", ["--port", "8000"]), "vllm:1");
    }

    #[test]
    fn faults_read_from_env_and_bad_values_are_ignored() {
        let f = Faults::from_env([(ERROR_RATIO_ENV, "0.05"), (TTFT_ENV, "900"), ("X", "y")]);
        assert_eq!(f.error_ratio, 0.05);
        assert_eq!(f.ttft, Some(Duration::from_millis(900)));
        assert_eq!(
            Faults::from_env([(ERROR_RATIO_ENV, "2"), (TTFT_ENV, "soon")]),
            Faults::default()
        );
    }

    #[test]
    fn errors_are_spread_evenly_never_by_chance() {
        let half = Faults {
            error_ratio: 0.5,
            ttft: None,
        };
        let failed: Vec<u64> = (1..=6).filter(|n| half.fails(*n)).collect();
        assert_eq!(failed, [2, 4, 6]);
        let five = Faults {
            error_ratio: 0.05,
            ttft: None,
        };
        assert_eq!((1..=100).filter(|n| five.fails(*n)).count(), 5);
        assert!(!(1..=100).any(|n| Faults::default().fails(n)));
    }

    #[test]
    fn metrics_render_with_vllm_names_and_cumulative_buckets() {
        let mut m = Metrics {
            success: 2,
            ..Metrics::default()
        };
        m.ttft.observe(0.9);
        m.ttft.observe(0.015);
        let text = m.render("vllm:1");
        assert!(text.contains(
            "vllm:request_success_total{model_name=\"vllm:1\",finished_reason=\"stop\"} 2"
        ));
        assert!(text.contains(
            "vllm:time_to_first_token_seconds_bucket{model_name=\"vllm:1\",le=\"0.02\"} 1"
        ));
        assert!(text.contains(
            "vllm:time_to_first_token_seconds_bucket{model_name=\"vllm:1\",le=\"1.0\"} 2"
        ));
        assert!(text.contains(
            "vllm:time_to_first_token_seconds_bucket{model_name=\"vllm:1\",le=\"+Inf\"} 2"
        ));
        assert!(text.contains("vllm:time_to_first_token_seconds_count{model_name=\"vllm:1\"} 2"));
        assert!(text.contains("# TYPE vllm:e2e_request_latency_seconds histogram"));
    }
}
