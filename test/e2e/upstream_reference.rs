//! Upstream LWS v0.8.0's own Go code (`test/lwsref`, importing `sigs.k8s.io/lws`) is the
//! reference: our revision keys must equal its keys byte for byte over a varied set of specs,
//! and our table of Go JSON shapes must equal what its types say.

use std::{path::PathBuf, process::Command, sync::OnceLock};

use anyhow::{Context, bail};
use lws_rollout::lws::revision::{revision_data, revision_key};
use serde_json::Value;

const REF_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/test/lwsref");

/// Builds the reference tool once per test run (cold: downloads and compiles the LWS module).
pub fn lwsref() -> anyhow::Result<PathBuf> {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("lwsref");
            let status = Command::new("go")
                .args(["build", "-o"])
                .arg(&out)
                .arg(".")
                .current_dir(REF_DIR)
                .env("GOTOOLCHAIN", "local")
                .env("GOFLAGS", "-mod=readonly")
                .status()
                .map_err(|e| {
                    format!("running go: {e} (Go is needed for the upstream reference vectors)")
                })?;
            if status.success() {
                Ok(out)
            } else {
                Err(format!("go build of test/lwsref failed: {status}"))
            }
        })
        .clone()
        .map_err(anyhow::Error::msg)
}

/// Upstream's revision key of each LWS object, computed by its own code.
pub fn upstream_keys(objects: &[Value]) -> anyhow::Result<Vec<String>> {
    let tool = lwsref()?;
    let file = tempfile_path("lwsref-input.json");
    std::fs::write(&file, serde_json::to_vec(objects)?)?;
    let out = Command::new(&tool).arg("hash").arg(&file).output()?;
    let _ = std::fs::remove_file(&file);
    if !out.status.success() {
        bail!(
            "lwsref hash failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    String::from_utf8(out.stdout)?
        .lines()
        .map(|line| {
            let entry: Value = serde_json::from_str(line)?;
            Ok(entry["key"].as_str().context("key")?.to_string())
        })
        .collect()
}

/// A path no other test (or concurrent run) uses.
fn tempfile_path(name: &str) -> PathBuf {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "{}-{}-{name}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ))
}

#[test]
fn revision_keys_are_byte_identical_to_upstream_lws() -> anyhow::Result<()> {
    let tool = lwsref()?;
    let vectors_path = format!("{REF_DIR}/vectors.json");
    let out = Command::new(&tool).args(["hash", &vectors_path]).output()?;
    if !out.status.success() {
        bail!(
            "lwsref hash failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let objects: Vec<Value> = serde_json::from_str(&std::fs::read_to_string(&vectors_path)?)?;
    let expected: Vec<Value> = String::from_utf8(out.stdout)?
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()?;
    assert_eq!(objects.len(), expected.len());
    assert!(objects.len() >= 20, "at least 20 vectors");

    let mut mismatches = Vec::new();
    for (object, reference) in objects.iter().zip(&expected) {
        let name = reference["name"].as_str().context("name")?;
        let raw = revision_data(&object["spec"]).with_context(|| format!("vector {name}"))?;
        let want_raw = reference["raw"].as_str().context("raw")?;
        let key = revision_key(&raw);
        if raw != want_raw || key != reference["key"] {
            mismatches.push(format!(
                "{name}: key {key} vs upstream {}\n  ours:     {raw}\n  upstream: {want_raw}",
                reference["key"]
            ));
        }
    }
    assert!(
        mismatches.is_empty(),
        "{} of {} vectors differ:\n{}",
        mismatches.len(),
        objects.len(),
        mismatches.join("\n")
    );
    Ok(())
}

#[test]
fn go_type_table_matches_upstream_types() -> anyhow::Result<()> {
    let tool = lwsref()?;
    let out = Command::new(&tool).arg("gotypes").output()?;
    assert!(
        out.status.success(),
        "lwsref gotypes failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let live: Value = serde_json::from_slice(&out.stdout)?;
    let checked_in: Value = serde_json::from_str(include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/src/lws/go_types.json"
    )))?;
    assert!(
        live == checked_in,
        "src/lws/go_types.json is stale: regenerate with (cd test/lwsref && go run . gotypes) > src/lws/go_types.json"
    );
    Ok(())
}

#[test]
fn quantity_canonical_forms_are_what_go_prints() -> anyhow::Result<()> {
    use lws_rollout::lws::quantity::{QuantityError, canonical};
    let tool = lwsref()?;
    let out = Command::new(&tool)
        .args(["quantity", &format!("{REF_DIR}/quantities.json")])
        .output()?;
    if !out.status.success() {
        bail!(
            "lwsref quantity failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let live = String::from_utf8(out.stdout)?;
    // The unit tests of src/lws/quantity.rs read the checked-in copy: it must be current.
    let checked_in = std::fs::read_to_string(format!("{REF_DIR}/quantities.go.jsonl"))?;
    assert!(
        live == checked_in,
        "test/lwsref/quantities.go.jsonl is stale: regenerate with (cd test/lwsref && go run . quantity quantities.json) > test/lwsref/quantities.go.jsonl"
    );
    let mut mismatches = Vec::new();
    for line in live.lines() {
        let entry: Value = serde_json::from_str(line)?;
        let input = entry["in"].as_str().context("in")?;
        let ours = canonical(input);
        let agrees = match (entry["out"].as_str(), &ours) {
            (Some(want), Ok(got)) => want == got,
            (None, Err(QuantityError::Invalid(_))) => true,
            _ => false,
        };
        if !agrees {
            mismatches.push(format!("{input:?}: Go {entry} vs ours {ours:?}"));
        }
    }
    assert!(live.lines().count() > 250);
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
    Ok(())
}
