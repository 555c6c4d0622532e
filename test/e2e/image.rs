//! The manager image built daemonlessly by test/image/build.sh (an OCI image layout): its
//! blobs match their digests, it holds a linux/amd64 and a linux/arm64 image, each runs the
//! binary as a non-root user with the OCI labels, and each image's binary runs on the image's
//! own libraries (arm64 under qemu).

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

/// Set by test/run-tests.sh: qemu's user-mode emulator for aarch64
/// (test/tools/build-cross-aarch64.sh), which runs the arm64 image's binary here.
pub const QEMU_AARCH64_ENV: &str = "LWS_E2E_QEMU_AARCH64";

#[test]
fn the_image_runs_the_manager_as_non_root_on_amd64_and_arm64() -> anyhow::Result<()> {
    let layout = std::env::var(IMAGE_ENV)
        .map_err(|_| anyhow!("{IMAGE_ENV} is not set: run the e2e tests with test/run-tests.sh"))?;
    let layout = Path::new(&layout);
    let layout_file: serde_json::Value =
        serde_json::from_slice(&std::fs::read(layout.join("oci-layout"))?)?;
    assert_eq!(layout_file["imageLayoutVersion"], "1.0.0");
    let index: serde_json::Value =
        serde_json::from_slice(&std::fs::read(layout.join("index.json"))?)?;
    let top = &index["manifests"][0];
    assert_eq!(
        top["mediaType"], "application/vnd.oci.image.index.v1+json",
        "one multi-platform index"
    );
    let nested = json_blob(layout, top["digest"].as_str().context("digest")?)?;
    let mut arches = Vec::new();
    for descriptor in nested["manifests"].as_array().context("manifests")? {
        let arch = descriptor["platform"]["architecture"]
            .as_str()
            .context("platform")?
            .to_string();
        assert_eq!(descriptor["platform"]["os"], "linux");
        let root = tempdir(&arch)?;
        check_image(layout, descriptor, &arch, &root)?;
        smoke_test(&arch, &root)?;
        let _ = std::fs::remove_dir_all(&root);
        arches.push(arch);
    }
    arches.sort();
    assert_eq!(arches, ["amd64", "arm64"], "both platforms in the index");
    Ok(())
}

/// The image's config and layers, unpacked into `root`.
fn check_image(
    layout: &Path,
    descriptor: &serde_json::Value,
    arch: &str,
    root: &Path,
) -> anyhow::Result<()> {
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
    assert_eq!(config["architecture"], arch);
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
    assert_eq!(layers.len(), 2, "{arch}: the base (glibc) and the binary");
    let mut listing = String::new();
    for (i, layer) in layers.iter().enumerate() {
        let bytes = blob(layout, layer["digest"].as_str().context("layer digest")?)?;
        let tarball = root.join(format!("layer{i}.tar.gz"));
        std::fs::write(&tarball, &bytes)?;
        let list = Command::new("tar").arg("-tvzf").arg(&tarball).output()?;
        listing.push_str(&String::from_utf8_lossy(&list.stdout));
        let untar = Command::new("tar")
            .arg("-xzf")
            .arg(&tarball)
            .arg("-C")
            .arg(root)
            .status()?;
        ensure!(untar.success(), "extracting layer {i} of {arch}");
        std::fs::remove_file(&tarball)?;
    }
    assert!(
        listing
            .lines()
            .any(|l| l.starts_with("-rwxr-xr-x 0/0") && l.ends_with(" ./lws-rollout")),
        "/lws-rollout, root-owned, executable by the non-root user: {listing}"
    );
    let passwd = std::fs::read_to_string(root.join("etc/passwd"))?;
    assert!(
        passwd.contains("nonroot:x:65532:65532:"),
        "the nonroot user distroless has: {passwd}"
    );
    Ok(())
}

/// The image's binary, run with the image's own loader and libraries (under qemu for arm64):
/// `--version`, a clear one-line failure without a cluster, and `/healthz` answered while it
/// waits for an API server that is not there.
fn smoke_test(arch: &str, root: &Path) -> anyhow::Result<()> {
    let bin = root.join("lws-rollout");
    let command = || -> anyhow::Result<Command> {
        Ok(match arch {
            "amd64" => {
                let libs = root.join("lib/x86_64-linux-gnu");
                let mut c = Command::new(root.join("lib64/ld-linux-x86-64.so.2"));
                c.arg("--library-path").arg(libs).arg(&bin);
                c
            }
            "arm64" => {
                let qemu = std::env::var(QEMU_AARCH64_ENV).map_err(|_| {
                    anyhow!(
                        "{QEMU_AARCH64_ENV} is not set: run the e2e tests with test/run-tests.sh"
                    )
                })?;
                let mut c = Command::new(qemu);
                c.arg("-L").arg(root).arg(&bin);
                c
            }
            other => anyhow::bail!("no way to run a {other} binary here"),
        })
    };
    let version = command()?.arg("--version").output()?;
    assert!(
        version.status.success(),
        "{arch}: --version: {}",
        String::from_utf8_lossy(&version.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&version.stdout).trim(),
        format!("lws-rollout {}", env!("CARGO_PKG_VERSION")),
        "{arch}"
    );
    // Without a cluster it fails with one clear line and no terminal escapes (stderr is a pipe).
    let run = command()?
        .args(["--health-addr=127.0.0.1:0", "--webhook-addr=127.0.0.1:0"])
        .env_remove("KUBECONFIG")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env("HOME", root)
        .output()?;
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(!run.status.success(), "{arch}");
    assert!(
        stderr.contains("cannot build a Kubernetes client"),
        "{arch}: stderr: {stderr}"
    );
    assert!(
        !stderr.contains('\u{1b}'),
        "{arch}: plain text when stderr is not a terminal: {stderr:?}"
    );
    healthz_while_waiting(arch, root, command()?)
}

/// Started against an API server address nobody listens on, the manager is live (it waits for
/// the API server) and says so on `/healthz`.
fn healthz_while_waiting(arch: &str, root: &Path, mut command: Command) -> anyhow::Result<()> {
    let kubeconfig = root.join("kubeconfig");
    let closed = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://{closed}\n    insecure-skip-tls-verify: true\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\nusers:\n- name: u\n  user:\n    token: t\n"
        ),
    )?;
    let health = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    let mut child = command
        .arg(format!("--health-addr={health}"))
        .args(["--webhook-addr=127.0.0.1:0", "--leader-elect=false"])
        .env("KUBECONFIG", &kubeconfig)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()?;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let answer = loop {
        let out = Command::new("curl")
            .args(["-s", "-o", "/dev/null", "-w", "%{http_code}"])
            .arg(format!("http://{health}/healthz"))
            .output()?;
        let code = String::from_utf8_lossy(&out.stdout).to_string();
        if code == "200" || std::time::Instant::now() > deadline {
            break code;
        }
        if let Some(status) = child.try_wait()? {
            break format!("exited with {status}");
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    };
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(
        answer, "200",
        "{arch}: /healthz while waiting for the API server"
    );
    Ok(())
}

fn tempdir(arch: &str) -> anyhow::Result<std::path::PathBuf> {
    let dir = std::env::temp_dir().join(format!(
        "lws-rollout-image-test-{}-{arch}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}
