//! The cluster scripts fail with one clear line when something is missing, and take prebuilt
//! binaries instead of building. These run the real scripts with a pared-down environment.

use std::process::{Command, Output};

const BINARIES: [&str; 6] = [
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubectl",
    "kwok",
];

fn scratch(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("lws-e2e-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

/// Runs `test/cluster/build.sh` with only the given environment (plus a scratch HOME and cache).
fn build_sh(name: &str, path: &str, extra: &[(&str, String)]) -> (Output, std::path::PathBuf) {
    let dir = scratch(name);
    let mut cmd = Command::new("bash");
    cmd.arg(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/test/cluster/build.sh"
    ))
    .env_clear()
    .env("PATH", path)
    .env("HOME", dir.join("home"))
    .env("LWS_ROLLOUT_CACHE", dir.join("cache"));
    for (k, v) in extra {
        cmd.env(k, v);
    }
    (cmd.output().expect("bash runs"), dir)
}

fn one_error_line(out: &Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<_> = stderr
        .lines()
        .filter(|l| l.starts_with("lws-rollout cluster:"))
        .collect();
    assert_eq!(
        lines.len(),
        1,
        "exactly one error line, stderr was:\n{stderr}"
    );
    lines[0].to_string()
}

#[test]
fn without_go_the_build_says_what_is_missing_and_how_to_provide_binaries() {
    let (out, _) = build_sh("nogo", "/usr/bin:/bin", &[]);
    assert!(!out.status.success());
    let line = one_error_line(&out);
    assert!(line.contains("no Go toolchain"), "{line}");
    assert!(line.contains("LWS_ROLLOUT_BIN_DIR"), "{line}");
}

#[test]
fn without_the_module_proxy_the_build_says_so_in_one_line() {
    let go = Command::new("sh")
        .args(["-c", "command -v go"])
        .output()
        .expect("sh");
    let go_dir = std::path::Path::new(String::from_utf8_lossy(&go.stdout).trim())
        .parent()
        .map(|p| p.display().to_string());
    let go_dir =
        go_dir.expect("go is on PATH where the e2e suite runs (it built the control plane)");
    let dir = scratch("noproxy-mod");
    let (out, _) = build_sh(
        "noproxy",
        &format!("{go_dir}:/usr/bin:/bin"),
        &[
            ("GOPROXY", "off".into()),
            ("GOMODCACHE", dir.join("mod").display().to_string()),
            ("GOCACHE", dir.join("build").display().to_string()),
        ],
    );
    assert!(!out.status.success());
    let line = one_error_line(&out);
    assert!(line.contains("cannot download k8s.io/kubernetes"), "{line}");
    assert!(line.contains("LWS_ROLLOUT_BIN_DIR"), "{line}");
}

#[test]
fn an_incomplete_binary_dir_is_refused_by_name() {
    let bin = scratch("partial-bin");
    std::fs::create_dir_all(&bin).expect("bin dir");
    let (out, _) = build_sh(
        "partial2",
        "/usr/bin:/bin",
        &[("LWS_ROLLOUT_BIN_DIR", bin.display().to_string())],
    );
    assert!(!out.status.success());
    let line = one_error_line(&out);
    assert!(
        line.contains("must contain") && line.contains("kube-apiserver"),
        "{line}"
    );
}

#[test]
fn prebuilt_binaries_on_path_are_used_without_building() {
    // The suite's own control-plane binaries stand in for ones a user installed.
    let cluster_env =
        std::env::var("LWS_E2E_BIN_DIR").expect("LWS_E2E_BIN_DIR is set by test/run-tests.sh");
    let (out, dir) = build_sh("onpath", &format!("{cluster_env}:/usr/bin:/bin"), &[]);
    assert!(
        out.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert_eq!(printed, dir.join("cache/path-bin").display().to_string());
    for b in BINARIES {
        assert!(
            std::path::Path::new(&printed).join(b).exists(),
            "{b} linked"
        );
    }
    assert!(!dir.join("cache/cp").exists(), "nothing was built");
}

#[test]
fn stopping_prometheus_of_a_cluster_without_one_says_why_in_one_line() {
    // A cluster started with LWS_CLUSTER_PROMETHEUS=0: up.sh wrote only the reason.
    let state = scratch("no-prometheus");
    std::fs::create_dir_all(state.join("prometheus")).expect("state dir");
    std::fs::write(
        state.join("prometheus/skipped"),
        "not requested (LWS_CLUSTER_PROMETHEUS=0)\n",
    )
    .expect("skipped file");
    let out = Command::new("bash")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/test/cluster/prometheus.sh"
        ))
        .args(["stop", &state.display().to_string()])
        .output()
        .expect("bash runs");
    assert!(!out.status.success());
    let line = one_error_line(&out);
    assert!(
        line.contains("runs no Prometheus") && line.contains("LWS_CLUSTER_PROMETHEUS=0"),
        "{line}"
    );
}
