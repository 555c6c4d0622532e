//! Writes the CRDs generated from `src/api` into `crds/` (or checks them with `--check`), and
//! regenerates the SSA list-marker table from a Kubernetes OpenAPI v3 document.
//!
//! ```text
//! cargo run --bin crdgen                         # write crds/*.yaml
//! cargo run --bin crdgen -- --check              # exit 1 if crds/ differs from the types
//! cargo run --bin crdgen -- list-markers api__v1_openapi.json > src/api/k8s_list_markers.json
//! ```

use std::path::PathBuf;

use anyhow::{Context, bail};
use lws_rollout::api::{self, markers, schema};

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        [] => write_or_check(false),
        ["--check"] => write_or_check(true),
        ["list-markers", path] => {
            let doc: serde_json::Value = serde_json::from_slice(
                &std::fs::read(path).with_context(|| format!("reading {path}"))?,
            )?;
            let table = markers::extract(
                &doc,
                &[schema::POD_TEMPLATE_SPEC, schema::PERSISTENT_VOLUME_CLAIM],
            );
            println!("{}", serde_json::to_string_pretty(&table)?);
            Ok(())
        }
        _ => bail!("usage: crdgen [--check | list-markers <openapi-v3.json>]"),
    }
}

fn write_or_check(check: bool) -> anyhow::Result<()> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("crds");
    std::fs::create_dir_all(&dir)?;
    let mut stale = Vec::new();
    for (file, crd) in api::crds() {
        let path = dir.join(file);
        let yaml = api::crd_yaml(&crd);
        if check {
            if std::fs::read_to_string(&path).ok().as_deref() != Some(yaml.as_str()) {
                stale.push(path.display().to_string());
            }
        } else {
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)?;
            }
            std::fs::write(&path, yaml).with_context(|| format!("writing {}", path.display()))?;
        }
    }
    if !stale.is_empty() {
        bail!(
            "CRDs out of date, run `cargo run --bin crdgen`: {}",
            stale.join(", ")
        );
    }
    Ok(())
}
