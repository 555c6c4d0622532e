//! The one-way import rule, checked: every top-level module of the crate imports only modules of
//! a lower layer (docs/architecture.md). One crate keeps the build simple; this test is what a
//! workspace of crates would give us from the compiler.

use std::{collections::BTreeSet, path::Path};

/// The layers, ground first. A module may import any module of a lower layer, none of its own
/// layer and none above.
const LAYERS: &[&[&str]] = &[
    &["api", "k8s"],
    &["lws", "kueue", "analysis"],
    &["traffic", "release", "disaggregatedset"],
    &["rollout", "batchrelease"],
    &["webhook", "cli"],
    &["manager"],
];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|layer| layer.contains(&module))
}

/// The top-level modules a source file names through `crate::`, comments left out:
/// `crate::a::…` and every top-level name of `crate::{a::…, b, …}`.
fn imported_modules(source: &str) -> BTreeSet<String> {
    let code: String = source
        .lines()
        .map(|line| match line.find("//") {
            Some(i) => &line[..i],
            None => line,
        })
        .collect::<Vec<_>>()
        .join("\n");
    let mut found = BTreeSet::new();
    let mut rest = code.as_str();
    while let Some(i) = rest.find("crate::") {
        rest = &rest[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            // Top-level names of the group: those at brace depth 0.
            let mut depth = 0usize;
            let mut name = String::new();
            let mut at_start = true;
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => at_start = true,
                    c if depth == 0 && at_start && (c.is_alphanumeric() || c == '_') => {
                        name.push(c)
                    }
                    _ if !name.is_empty() => {
                        found.insert(std::mem::take(&mut name));
                        at_start = false;
                    }
                    _ => {}
                }
            }
            if !name.is_empty() {
                found.insert(name);
            }
        } else {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            found.insert(name);
        }
    }
    found
}

fn sources(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("source directory readable") {
        let path = entry.expect("directory entry").path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn every_module_imports_only_the_layers_below_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut wrong = Vec::new();
    for layer in LAYERS {
        for module in *layer {
            let own = layer_of(module).expect("listed");
            let mut files = Vec::new();
            sources(&src.join(module), &mut files);
            assert!(!files.is_empty(), "src/{module}/ holds no source");
            for file in files {
                let text = std::fs::read_to_string(&file).expect("source readable");
                for imported in imported_modules(&text) {
                    let Some(theirs) = layer_of(&imported) else {
                        continue;
                    };
                    if imported != *module && theirs >= own {
                        wrong.push(format!("{} imports {imported}", file.display()));
                    }
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports that run sideways or up:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn every_top_level_module_has_a_layer() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let lib = std::fs::read_to_string(src.join("lib.rs")).expect("lib.rs readable");
    for line in lib.lines() {
        if let Some(name) = line
            .strip_prefix("pub mod ")
            .and_then(|l| l.strip_suffix(';'))
        {
            assert!(
                layer_of(name).is_some(),
                "module {name} has no layer in LAYERS"
            );
        }
    }
}

#[test]
fn imports_are_read_from_paths_and_groups() {
    let found = imported_modules(
        "use crate::{\n    api::rollout::Rollout,\n    k8s::{apply::Applier, events},\n    lws,\n};\n\
         // crate::manager in a comment\nfn f() { crate::traffic::plan(); }",
    );
    assert_eq!(
        found.into_iter().collect::<Vec<_>>(),
        ["api", "k8s", "lws", "traffic"]
    );
}
