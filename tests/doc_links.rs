//! Every relative link in README.md and docs/*.md names a file or directory of the repository,
//! and no doc cites a path on a build machine: a reader of a fresh clone can follow them all.

use std::path::{Path, PathBuf};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// Markdown link targets `[text](target)` outside fenced code blocks and inline code.
fn link_targets(markdown: &str) -> Vec<String> {
    let mut targets = Vec::new();
    let mut in_fence = false;
    for line in markdown.lines() {
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
            continue;
        }
        if in_fence {
            continue;
        }
        let mut in_code = false;
        let bytes = line.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            match bytes[i] {
                b'`' => in_code = !in_code,
                b']' if !in_code && bytes.get(i + 1) == Some(&b'(') => {
                    if let Some(len) = line[i + 2..].find(')') {
                        targets.push(line[i + 2..i + 2 + len].trim().to_string());
                        i += 2 + len;
                    }
                }
                _ => {}
            }
            i += 1;
        }
    }
    targets
}

/// The repository path a relative target names, or None for web links and in-page anchors.
fn local_path(doc: &Path, target: &str) -> Option<PathBuf> {
    let target = target.split_whitespace().next().unwrap_or("");
    if target.is_empty()
        || target.starts_with('#')
        || target.contains("://")
        || target.starts_with("mailto:")
    {
        return None;
    }
    let path = target.split('#').next().unwrap_or(target);
    Some(doc.parent().unwrap_or(Path::new(ROOT)).join(path))
}

/// Problems of one doc: links to missing paths, absolute links, build-machine paths.
fn problems(doc: &Path, markdown: &str) -> Vec<String> {
    let mut found = Vec::new();
    for target in link_targets(markdown) {
        if target.starts_with('/') {
            found.push(format!("{}: absolute link {target}", doc.display()));
        } else if let Some(path) = local_path(doc, &target)
            && !path.exists()
        {
            found.push(format!(
                "{}: link to a missing path {target}",
                doc.display()
            ));
        }
    }
    for machine_path in ["/work/", "/home/", "/tmp/"] {
        if markdown.contains(machine_path) {
            found.push(format!(
                "{}: cites a path outside the repository ({machine_path}…)",
                doc.display()
            ));
        }
    }
    found
}

fn docs() -> Vec<PathBuf> {
    let mut docs = vec![Path::new(ROOT).join("README.md")];
    for entry in std::fs::read_dir(Path::new(ROOT).join("docs")).expect("docs/") {
        let path = entry.expect("docs/ entry").path();
        if path.extension().is_some_and(|e| e == "md") {
            docs.push(path);
        }
    }
    docs.sort();
    docs
}

#[test]
fn readme_and_docs_link_only_to_paths_that_exist() {
    let docs = docs();
    assert!(docs.len() > 5, "README.md and docs/*.md read: {docs:?}");
    let found: Vec<String> = docs
        .iter()
        .flat_map(|doc| problems(doc, &std::fs::read_to_string(doc).expect("readable doc")))
        .collect();
    assert!(found.is_empty(), "broken doc links:\n{}", found.join("\n"));
}

#[test]
fn the_check_sees_a_missing_path_and_ignores_web_links_anchors_and_code() {
    let doc = Path::new(ROOT).join("docs/example.md");
    let markdown = "see [install](install.md#uninstall), [gone](gone.md), [web](https://x.io/a),\n\
                    [here](#top), `[code](nope.md)`, [root](../README.md)\n\
                    ```\n[fenced](nope.md)\n```\n";
    assert_eq!(
        problems(&doc, markdown),
        vec![format!("{}: link to a missing path gone.md", doc.display())]
    );
    assert_eq!(problems(&doc, "[abs](/etc/passwd)").len(), 1);
    assert_eq!(problems(&doc, "built in /work/x").len(), 1);
}
