//! The manager image built daemonlessly by test/image/build.sh (an OCI image layout): its
//! blobs match their digests, its config runs the binary as a non-root user with the OCI
//! labels, and the binary extracted from its layer is static and runs.

use std::{path::Path, process::Command};

use anyhow::{Context, anyhow, ensure};

/// Set by test/run-tests.sh: the OCI layout directory.
pub const IMAGE_ENV: &str = "LWS_E2E_IMAGE";

fn blob(layout: &Path, digest: &str) -> anyhow::Result<Vec<u8>> {
    let hex = digest
        .strip_prefix("sha256:")
        .with_context(|| format!("a sha256 digest: {digest}"))?;
    let path = layout.join("blobs/sha256").join(hex);
    let out = Command::new("sha256sum").arg(&path).output()?;
    let sum = String::from_utf8_lossy(&out.stdout);
    ensure!(
        sum.split_whitespace().next() == Some(hex),
        "blob {digest} matches its digest: {sum}"
    );
    Ok(std::fs::read(path)?)
}

fn json_blob(layout: &Path, digest: &str) -> anyhow::Result<serde_json::Value> {
    Ok(serde_json::from_slice(&blob(layout, digest)?)?)
}

#[test]
fn the_image_runs_the_static_manager_as_non_root() -> anyhow::Result<()> {
    let layout = std::env::var(IMAGE_ENV)
        .map_err(|_| anyhow!("{IMAGE_ENV} is not set: run the e2e tests with test/run-tests.sh"))?;
    let layout = Path::new(&layout);
    let layout_file: serde_json::Value =
        serde_json::from_slice(&std::fs::read(layout.join("oci-layout"))?)?;
    assert_eq!(layout_file["imageLayoutVersion"], "1.0.0");
    let index: serde_json::Value =
        serde_json::from_slice(&std::fs::read(layout.join("index.json"))?)?;
    let mut descriptor = index["manifests"][0].clone();
    // A multi-platform index nests the image manifest one level down.
    if descriptor["mediaType"] == "application/vnd.oci.image.index.v1+json" {
        let nested = json_blob(layout, descriptor["digest"].as_str().context("digest")?)?;
        descriptor = nested["manifests"][0].clone();
    }
    assert_eq!(
        descriptor["mediaType"],
        "application/vnd.oci.image.manifest.v1+json"
    );
    let manifest = json_blob(layout, descriptor["digest"].as_str().context("digest")?)?;
    let config = json_blob(
        layout,
        manifest["config"]["digest"].as_str().context("config")?,
    )?;
    assert_eq!(config["os"], "linux");
    assert_eq!(config["architecture"], "amd64");
    let c = &config["config"];
    assert_eq!(
        c["User"], "65532:65532",
        "a non-root user, by number (runAsNonRoot can check it)"
    );
    assert_eq!(c["Entrypoint"], serde_json::json!(["/lws-rollout"]));
    let labels = &c["Labels"];
    assert_eq!(labels["org.opencontainers.image.title"], "lws-rollout");
    assert_eq!(labels["org.opencontainers.image.licenses"], "Apache-2.0");
    assert_eq!(
        labels["org.opencontainers.image.version"],
        env!("CARGO_PKG_VERSION")
    );
    assert!(
        c["ExposedPorts"].get("8081/tcp").is_some() && c["ExposedPorts"].get("9443/tcp").is_some()
    );

    let layers = manifest["layers"].as_array().context("layers")?;
    assert_eq!(layers.len(), 1, "one layer: the binary");
    let layer = blob(
        layout,
        layers[0]["digest"].as_str().context("layer digest")?,
    )?;
    let dir = tempdir()?;
    let tarball = dir.join("layer.tar.gz");
    std::fs::write(&tarball, &layer)?;
    let listing = Command::new("tar").arg("-tvzf").arg(&tarball).output()?;
    let listing = String::from_utf8_lossy(&listing.stdout).to_string();
    assert!(
        listing
            .lines()
            .any(|l| l.starts_with("-rwxr-xr-x 0/0") && l.ends_with(" lws-rollout")),
        "/lws-rollout, root-owned, executable by the non-root user: {listing}"
    );
    let untar = Command::new("tar")
        .arg("-xzf")
        .arg(&tarball)
        .arg("-C")
        .arg(&dir)
        .status()?;
    ensure!(untar.success(), "extracting the layer");
    let bin = dir.join("lws-rollout");
    let ldd = Command::new("ldd").arg(&bin).output()?;
    assert!(
        !ldd.status.success() || String::from_utf8_lossy(&ldd.stdout).contains("statically linked"),
        "no dynamic libraries (distroless/static has none): {}",
        String::from_utf8_lossy(&ldd.stdout)
    );
    let version = Command::new(&bin).arg("--version").output()?;
    assert!(version.status.success());
    assert_eq!(
        String::from_utf8_lossy(&version.stdout).trim(),
        format!("lws-rollout {}", env!("CARGO_PKG_VERSION"))
    );
    // Without a cluster it fails with one clear line and no terminal escapes (stderr is a pipe).
    let run = Command::new(&bin)
        .args(["--health-addr=127.0.0.1:0", "--webhook-addr=127.0.0.1:0"])
        .env_remove("KUBECONFIG")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env("HOME", &dir)
        .output()?;
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(!run.status.success());
    assert!(
        stderr.contains("cannot build a Kubernetes client"),
        "stderr: {stderr}"
    );
    assert!(
        !stderr.contains('\u{1b}'),
        "plain text when stderr is not a terminal: {stderr:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

fn tempdir() -> anyhow::Result<std::path::PathBuf> {
    let dir = std::env::temp_dir().join(format!("lws-rollout-image-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}
