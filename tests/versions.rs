//! The crate's version, the chart's version and the chart's appVersion (the default image tag)
//! are one version: a release never ships a chart that pulls another build.

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The value of `key: value` (or `key = "value"`) on the first line that starts with `key`.
fn field(text: &str, key: &str, separator: char) -> Option<String> {
    text.lines()
        .filter_map(|l| l.strip_prefix(key))
        .find_map(|rest| rest.trim_start().strip_prefix(separator))
        .map(|v| v.trim().trim_matches('"').to_string())
}

#[test]
fn crate_and_chart_versions_are_in_step() {
    let chart = std::fs::read_to_string(format!("{ROOT}/charts/lws-rollout/Chart.yaml"))
        .expect("Chart.yaml");
    let crate_version = env!("CARGO_PKG_VERSION");
    assert_eq!(
        field(&chart, "version", ':').as_deref(),
        Some(crate_version),
        "Chart.yaml version"
    );
    assert_eq!(
        field(&chart, "appVersion", ':').as_deref(),
        Some(crate_version),
        "Chart.yaml appVersion"
    );
}

#[test]
fn the_changelog_names_the_current_version() {
    let changelog = std::fs::read_to_string(format!("{ROOT}/CHANGELOG.md")).expect("CHANGELOG.md");
    let heading = format!("## {}", env!("CARGO_PKG_VERSION"));
    assert!(
        changelog.lines().any(|l| l == heading),
        "CHANGELOG.md has a `{heading}` section"
    );
}

#[test]
fn a_field_is_read_from_its_own_line_only() {
    let text = "apiVersion: v2\nversion: 1.2.3\nappVersion: \"1.2.3\"\n";
    assert_eq!(field(text, "version", ':').as_deref(), Some("1.2.3"));
    assert_eq!(field(text, "appVersion", ':').as_deref(), Some("1.2.3"));
    assert_eq!(field(text, "kubeVersion", ':'), None);
}
