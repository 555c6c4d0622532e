//! Upstream LWS v0.9.0's own Go code (`test/lwsref`, importing `sigs.k8s.io/lws`) is the
//! reference: our revision keys must equal its keys byte for byte over a varied set of specs,
//! our table of Go JSON shapes must equal what its types say, and we must take a stored
//! revision for the template's own exactly when its `SetMatchesRevision` does. v0.8.0's code
//! (`test/lwsref/v08`) writes the revisions a cluster upgraded or taken over from v0.8 holds.

use std::{path::PathBuf, process::Command, sync::OnceLock};

use anyhow::{Context, bail};
use lws_rollout::lws::upstream::revision::{matches, revision_data, revision_key};
use serde_json::{Value, json};

const REF_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/test/lwsref");

/// Set by test/run-tests.sh: the reference tool, built with the other tools before the suite
/// (test/upstream/build-lwsref.sh), so no test waits on a Go build.
pub const LWSREF_ENV: &str = "LWS_E2E_LWSREF_BIN";

/// The reference tool: the one test/run-tests.sh built, or built once per test run here when the
/// suite runs by hand (cold: downloads and compiles the LWS module).
pub fn lwsref() -> anyhow::Result<PathBuf> {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BUILT
        .get_or_init(|| match std::env::var_os(LWSREF_ENV) {
            Some(path) => Ok(PathBuf::from(path)),
            None => build_tool(REF_DIR, "lwsref"),
        })
        .clone()
        .map_err(anyhow::Error::msg)
}

/// The v0.8.0 reference (`test/lwsref/v08`), built once per test run (only by the ignored
/// freshness check: the other tests read its checked-in output, [`v08_revisions`]).
pub fn lwsref08() -> anyhow::Result<PathBuf> {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BUILT
        .get_or_init(|| build_tool(&format!("{REF_DIR}/v08"), "lwsref08"))
        .clone()
        .map_err(anyhow::Error::msg)
}

fn build_tool(dir: &str, name: &str) -> Result<PathBuf, String> {
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    let status = Command::new("go")
        .args(["build", "-o"])
        .arg(&out)
        .arg(".")
        .current_dir(dir)
        .env("GOTOOLCHAIN", "local")
        .env("GOFLAGS", "-mod=readonly")
        .status()
        .map_err(|e| {
            format!("running go: {e} (Go is needed for the upstream reference vectors)")
        })?;
    if status.success() {
        Ok(out)
    } else {
        Err(format!("go build of {dir} failed: {status}"))
    }
}

/// What upstream v0.8.0 records for each vector (`test/lwsref/v08/vectors.v08.jsonl`, its own
/// code's output, checked in so the suite does not build a second LWS module with its own
/// Kubernetes dependencies — ~5 min of a cold CI run; `v08_reference_file_is_what_v08_writes`,
/// ignored, rebuilds it and checks).
fn v08_revisions() -> anyhow::Result<Vec<Value>> {
    std::fs::read_to_string(format!("{REF_DIR}/v08/vectors.v08.jsonl"))?
        .lines()
        .map(|l| Ok(serde_json::from_str(l)?))
        .collect()
}

/// The checked-in v0.8.0 output is what v0.8.0's code writes for today's vectors. Ignored in the
/// suite (it builds `sigs.k8s.io/lws` v0.8.0); run it after changing `vectors.json`:
/// `cargo test --test e2e v08_reference_file -- --ignored`.
#[test]
#[ignore]
fn v08_reference_file_is_what_v08_writes() -> anyhow::Result<()> {
    let vectors_path = format!("{REF_DIR}/vectors.json");
    let live = json_lines(&lwsref08()?, &["hash", &vectors_path])?;
    assert!(
        live == v08_revisions()?,
        "test/lwsref/v08/vectors.v08.jsonl is stale: regenerate with (cd test/lwsref/v08 && go run . hash ../vectors.json) > test/lwsref/v08/vectors.v08.jsonl"
    );
    Ok(())
}

/// Runs `tool <args…>` and parses its JSON lines.
fn json_lines(tool: &PathBuf, args: &[&str]) -> anyhow::Result<Vec<Value>> {
    let out = Command::new(tool).args(args).output()?;
    if !out.status.success() {
        bail!(
            "{} {args:?} failed: {}",
            tool.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    String::from_utf8(out.stdout)?
        .lines()
        .map(|l| Ok(serde_json::from_str(l)?))
        .collect()
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

/// Upstream v0.10.0's own code's revisions of every vector (`test/lwsref/v10/vectors.v10.jsonl`,
/// checked in; `test/lwsref/v10/regen.sh` writes it) are byte for byte ours, key and data: a
/// cluster run by v0.10.0 is taken over, and upgraded to, without a new revision.
#[test]
fn revision_keys_are_byte_identical_to_upstream_v10() -> anyhow::Result<()> {
    let vectors_path = format!("{REF_DIR}/vectors.json");
    let objects: Vec<Value> = serde_json::from_str(&std::fs::read_to_string(&vectors_path)?)?;
    let v10: Vec<Value> = std::fs::read_to_string(format!("{REF_DIR}/v10/vectors.v10.jsonl"))?
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()?;
    assert_eq!(
        objects.len(),
        v10.len(),
        "vectors.v10.jsonl is stale: run test/lwsref/v10/regen.sh"
    );
    let mut mismatches = Vec::new();
    for (object, reference) in objects.iter().zip(&v10) {
        let name = reference["name"].as_str().context("name")?;
        let raw = revision_data(&object["spec"]).with_context(|| format!("vector {name}"))?;
        let key = revision_key(&raw);
        if raw != reference["raw"] || key != reference["key"] {
            mismatches.push(format!(
                "{name}: key {key} vs v0.10.0 {}\n  ours:   {raw}\n  v0.10.0: {}",
                reference["key"], reference["raw"]
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

/// v0.8.0 wrote the revisions of clusters upgraded or taken over from it. For every vector its
/// revision either is byte for byte ours, or (a template using a field v0.8's Kubernetes types
/// did not know, which v0.8 dropped) both upstream v0.9.0 and we call it a different template.
#[test]
fn v08_revisions_are_ours_or_differ_for_upstream_v09_too() -> anyhow::Result<()> {
    let vectors_path = format!("{REF_DIR}/vectors.json");
    let v08 = v08_revisions()?;
    let objects: Vec<Value> = serde_json::from_str(&std::fs::read_to_string(&vectors_path)?)?;
    assert_eq!(objects.len(), v08.len(), "vectors.v08.jsonl is stale");
    let pairs: Vec<Value> = objects
        .iter()
        .zip(&v08)
        .map(|(o, r)| json!({"lws": o, "raw": r["raw"]}))
        .collect();
    let upstream = upstream_matches(&pairs)?;
    let (mut identical, mut different) = (0, 0);
    let mut problems = Vec::new();
    for ((object, reference), up) in objects.iter().zip(&v08).zip(upstream) {
        let name = reference["name"].as_str().context("name")?;
        let ours = revision_data(&object["spec"])?;
        let raw = reference["raw"].as_str().context("raw")?;
        if ours == raw {
            identical += 1;
            if revision_key(&ours) != reference["key"] {
                problems.push(format!("{name}: same data, another key"));
            }
        } else {
            different += 1;
            let our_match = matches(&serde_json::from_str(raw)?, &object["spec"], &ours);
            if our_match || up {
                problems.push(format!(
                    "{name}: v0.8 wrote {raw}, we write {ours}; match ours {our_match}, upstream v0.9 {up}"
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(
        identical >= 37,
        "the v0.8.0 vectors hash as v0.8.0 hashed them: {identical}"
    );
    assert!(different >= 2, "fields v0.8 did not know: {different}");
    Ok(())
}

/// Upstream v0.9.0's decision for each `{lws, raw}`: the stored revision is the object's own.
fn upstream_matches(pairs: &[Value]) -> anyhow::Result<Vec<bool>> {
    let file = tempfile_path("lwsref-pairs.json");
    std::fs::write(&file, serde_json::to_vec(pairs)?)?;
    let out = json_lines(&lwsref()?, &["matches", file.to_str().context("path")?]);
    let _ = std::fs::remove_file(&file);
    out?.iter()
        .map(|l| l["match"].as_bool().context("match"))
        .collect()
}

/// Our revision matching decides as upstream v0.9.0's `SetMatchesRevision` does, over each
/// vector's revision written differently (pretty-printed, `"creationTimestamp": null` in the
/// pod templates as clients before Kubernetes 1.34 wrote it, by v0.8.0) and over every vector's
/// revision against its neighbour's template.
#[test]
fn revision_matching_decides_as_upstream_v09() -> anyhow::Result<()> {
    let vectors_path = format!("{REF_DIR}/vectors.json");
    let objects: Vec<Value> = serde_json::from_str(&std::fs::read_to_string(&vectors_path)?)?;
    let v08 = v08_revisions()?;
    assert_eq!(objects.len(), v08.len(), "vectors.v08.jsonl is stale");
    let mut pairs = Vec::new();
    for (i, object) in objects.iter().enumerate() {
        let data = revision_data(&object["spec"])?;
        let mut value: Value = serde_json::from_str(&data)?;
        pairs.push(
            json!({"lws": object, "raw": serde_json::to_string_pretty(&value)?,
            "variant": "pretty"}),
        );
        let template = &mut value["spec"]["leaderWorkerTemplate"];
        for part in ["workerTemplate", "leaderTemplate"] {
            if let Some(meta) = template.get_mut(part).and_then(|t| t.get_mut("metadata")) {
                meta["creationTimestamp"] = Value::Null;
            }
        }
        pairs.push(json!({"lws": object, "raw": value.to_string()}));
        pairs.push(json!({"lws": object, "raw": v08[i]["raw"]}));
        let next = &v08[(i + 1) % v08.len()];
        pairs.push(json!({"lws": object, "raw": next["raw"]}));
    }
    let upstream = upstream_matches(&pairs)?;
    let mut disagreements = Vec::new();
    let (mut same_other_bytes, mut different) = (0, 0);
    for (pair, up) in pairs.iter().zip(upstream) {
        let raw = pair["raw"].as_str().context("raw")?;
        let data = revision_data(&pair["lws"]["spec"])?;
        let ours = matches(&serde_json::from_str(raw)?, &pair["lws"]["spec"], &data);
        // The one known difference: our cache holds a revision's data as parsed JSON, not its
        // bytes, so "the same bytes" means "what Go's marshalling of it prints" (every LWS
        // version writes exactly that). Upstream compares bytes, then cannot decode an int64
        // that the float64 round trip made 2^63 — a pretty-printed revision with one differs.
        let known = pair["variant"] == "pretty"
            && pair["lws"]["metadata"]["name"] == "large-integers"
            && ours
            && !up;
        if ours != up && !known {
            disagreements.push(format!(
                "{}: ours {ours}, upstream {up}: {raw}",
                pair["lws"]["metadata"]["name"]
            ));
        }
        same_other_bytes += usize::from(up && raw != data);
        different += usize::from(!up);
    }
    assert!(
        disagreements.is_empty(),
        "{} of {} pairs:\n{}",
        disagreements.len(),
        pairs.len(),
        disagreements.join("\n")
    );
    // Pretty-printed and null-timestamp variants of every vector match (but the known one).
    assert!(
        same_other_bytes >= 2 * objects.len() - 1,
        "{same_other_bytes}"
    );
    assert!(different >= objects.len() / 2, "{different}");
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
        "/src/lws/upstream/go_types.json"
    )))?;
    assert!(
        live == checked_in,
        "src/lws/upstream/go_types.json is stale: regenerate with (cd test/lwsref && go run . gotypes) > src/lws/upstream/go_types.json"
    );
    Ok(())
}

#[test]
fn quantity_canonical_forms_are_what_go_prints() -> anyhow::Result<()> {
    use lws_rollout::lws::upstream::quantity::{QuantityError, canonical};
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
    // The unit tests of src/lws/upstream/quantity.rs read the checked-in copy: it must be current.
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

/// DisaggregatedSet revisions (`disaggregatedset.x-k8s.io/revision`, part of every LWS and
/// Service name of a set) equal upstream v0.9.0's `ComputeRevision` over sets whose roles are
/// the LWS reference vectors' specs, paired — so a set upstream built is adopted with its LWSs.
#[test]
fn disaggregatedset_revisions_are_byte_identical_to_upstream() -> anyhow::Result<()> {
    use lws_rollout::{api::DisaggregatedSet, disaggregatedset::revision};
    let vectors: Vec<Value> =
        serde_json::from_str(&std::fs::read_to_string(format!("{REF_DIR}/vectors.json"))?)?;
    let sets: Vec<Value> = vectors
        .iter()
        .zip(vectors.iter().cycle().skip(1))
        .enumerate()
        .map(|(i, (a, b))| {
            json!({
                "apiVersion": "disaggregatedset.x-k8s.io/v1", "kind": "DisaggregatedSet",
                "metadata": {"name": format!("set-{i}"), "namespace": "default"},
                "spec": {"roles": [
                    {"name": "prefill", "spec": a["spec"]},
                    {"name": "decode", "metadata": {"labels": {"x": "y"}}, "spec": b["spec"]}
                ]}
            })
        })
        .collect();
    let file = tempfile_path("lwsref-sets.json");
    std::fs::write(&file, serde_json::to_vec(&sets)?)?;
    let upstream = json_lines(&lwsref()?, &["dsrevision", file.to_str().context("path")?]);
    let _ = std::fs::remove_file(&file);
    let upstream = upstream?;
    assert_eq!(upstream.len(), sets.len());
    let mut mismatches = Vec::new();
    let mut distinct = std::collections::BTreeSet::new();
    for (set, want) in sets.iter().zip(&upstream) {
        let typed: DisaggregatedSet = serde_json::from_value(set.clone())
            .with_context(|| format!("{}", set["metadata"]["name"]))?;
        let ours = revision::revision(&typed.spec.roles)?;
        distinct.insert(ours.clone());
        if want["revision"] != ours {
            mismatches.push(format!(
                "{}: ours {ours}, upstream {}; our bytes {}",
                want["name"],
                want["revision"],
                revision::revision_data(&typed.spec.roles)?
            ));
        }
    }
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
    assert!(
        distinct.len() > sets.len() / 2,
        "the sets are not all alike"
    );
    Ok(())
}

/// Our DisaggregatedSet rolling-update planner computes exactly upstream v0.9.0's sequences
/// (`ComputeAllSteps`) over a grid of pairs and triples: sizes 0–6, scale-ups, scale-downs,
/// removed roles (target 0), surge and unavailability mixes.
#[test]
fn disaggregatedset_plans_are_upstreams() -> anyhow::Result<()> {
    use lws_rollout::disaggregatedset::plan::steps::{RoleConfig, all_steps};
    let configs = [(1, 0), (2, 0), (0, 1), (0, 2), (1, 1), (3, 1)];
    let mut cases = Vec::new();
    for a in 0..=6 {
        for b in 0..=4 {
            for (ta, tb) in [(a, b), (b, a), (a + 1, b), (a, 0), (2, 3)] {
                for (i, c1) in configs.iter().enumerate() {
                    let c2 = configs[(i + a as usize) % configs.len()];
                    cases.push(json!({"initial": [a, b], "target": [ta, tb],
                        "config": [{"maxSurge": c1.0, "maxUnavailable": c1.1},
                                   {"maxSurge": c2.0, "maxUnavailable": c2.1}]}));
                }
            }
        }
    }
    for (initial, target) in [
        ([3, 2, 1], [3, 2, 0]),
        ([2, 2, 0], [2, 2, 2]),
        ([5, 1, 3], [2, 4, 3]),
    ] {
        cases.push(json!({"initial": initial, "target": target,
            "config": vec![json!({"maxSurge": 1, "maxUnavailable": 0}); 3]}));
    }
    let file = tempfile_path("lwsref-plans.json");
    std::fs::write(&file, serde_json::to_vec(&cases)?)?;
    let upstream = json_lines(&lwsref()?, &["dsplan", file.to_str().context("path")?]);
    let _ = std::fs::remove_file(&file);
    let upstream = upstream?;
    assert_eq!(upstream.len(), cases.len());
    let mut mismatches = Vec::new();
    for (case, want) in cases.iter().zip(&upstream) {
        let ints = |v: &Value| -> Vec<i32> {
            v.as_array()
                .map(|a| a.iter().map(|x| x.as_i64().unwrap_or(-1) as i32).collect())
                .unwrap_or_default()
        };
        let config: Vec<RoleConfig> = case["config"]
            .as_array()
            .context("config")?
            .iter()
            .map(|c| RoleConfig {
                max_surge: c["maxSurge"].as_i64().unwrap_or(0) as i32,
                max_unavailable: c["maxUnavailable"].as_i64().unwrap_or(0) as i32,
            })
            .collect();
        let ours: Vec<(Vec<i32>, Vec<i32>)> =
            all_steps(&ints(&case["initial"]), &ints(&case["target"]), &config)
                .into_iter()
                .map(|s| (s.old, s.new))
                .collect();
        let theirs: Vec<(Vec<i32>, Vec<i32>)> = want
            .as_array()
            .context("steps")?
            .iter()
            .map(|s| (ints(&s["old"]), ints(&s["new"])))
            .collect();
        if ours != theirs {
            mismatches.push(format!(
                "{case}:\n  ours     {ours:?}\n  upstream {theirs:?}"
            ));
        }
    }
    assert!(
        mismatches.is_empty(),
        "{} of {} plans differ:\n{}",
        mismatches.len(),
        cases.len(),
        mismatches
            .iter()
            .take(5)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(cases.len() > 1000);
    Ok(())
}
