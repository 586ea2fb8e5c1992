//! The documents say what the code has: the README's crate map names every module of the four
//! crates and no file that is gone, and every MCP tool the server offers is named by
//! docs/serve.md, the README and `signalql mcp --help`.

use std::path::{Path, PathBuf};

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The README's "Crate map" section: its table's rows.
fn crate_map_rows() -> Vec<String> {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let start = readme.find("## Crate map").expect("a Crate map section");
    let rest = &readme[start + 3..];
    let section = &rest[..rest.find("\n## ").unwrap_or(rest.len())];
    section
        .lines()
        .filter(|l| l.starts_with("| `"))
        .map(str::to_string)
        .collect()
}

/// The `.rs` files under `dir`, recursively.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    out.sort();
    out
}

/// The backticked words of `row`.
fn ticked(row: &str) -> Vec<&str> {
    row.split('`').skip(1).step_by(2).collect()
}

#[test]
fn the_crate_map_names_every_module_and_only_files_that_exist() {
    let rows = crate_map_rows();
    assert!(rows.len() > 10, "the crate map has its rows: {rows:?}");
    let mut missing = Vec::new();
    for krate in ["src", "engine/src", "catalog/src", "udfs/src"] {
        for file in rust_files(&repo().join(krate)) {
            let rel = file
                .strip_prefix(repo())
                .unwrap()
                .to_string_lossy()
                .into_owned();
            let name = file.file_stem().unwrap().to_string_lossy().into_owned();
            if name == "lib" || name == "mod" {
                continue;
            }
            // Named by its own path, or in the row of a folder it is in by its name or by the
            // sub-folder it is in (`engine/src/syntax/` with `parser/`; the facade's files in
            // the row of `src/`).
            let parts: Vec<&str> = rel.split('/').collect();
            let named = rows.iter().any(|row| {
                let words = ticked(row);
                words.contains(&rel.as_str())
                    || (1..parts.len()).any(|k| {
                        let folder = format!("{}/", parts[..k].join("/"));
                        let below = if k + 1 < parts.len() {
                            format!("{}/", parts[k])
                        } else {
                            format!("{name}.rs")
                        };
                        words.contains(&folder.as_str())
                            && (words.contains(&name.as_str()) || words.contains(&below.as_str()))
                    })
            });
            if !named {
                missing.push(rel);
            }
        }
    }
    assert!(
        missing.is_empty(),
        "modules the README's crate map does not name: {missing:?}"
    );
    let gone: Vec<&str> = rows
        .iter()
        .flat_map(|row| ticked(row))
        .filter(|w| w.contains("/src/") || w.starts_with("src/") || w.ends_with(".rs"))
        .filter(|w| w.contains('/'))
        .filter(|w| !repo().join(w.trim_end_matches('/')).exists())
        .collect();
    assert!(
        gone.is_empty(),
        "the crate map names files that are gone: {gone:?}"
    );
}

#[test]
fn every_mcp_tool_is_documented_where_users_look() {
    let serve = std::fs::read_to_string(repo().join("docs/serve.md")).unwrap();
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let help = std::process::Command::new(env!("CARGO_BIN_EXE_signalql"))
        .args(["mcp", "--help"])
        .output()
        .unwrap();
    assert!(help.status.success());
    let help = String::from_utf8_lossy(&help.stdout).to_string();
    for tool in crate::common::MCP_TOOLS {
        let word = |text: &str| {
            text.split(|c: char| !(c.is_alphanumeric() || c == '_'))
                .any(|w| w == tool)
        };
        assert!(
            serve.contains(&format!("`{tool}`")),
            "docs/serve.md: {tool}"
        );
        assert!(readme.contains(&format!("`{tool}`")), "README: {tool}");
        assert!(word(&help), "signalql mcp --help: {tool}\n{help}");
    }
}

/// The `.rs` files of the tests and the crates' sources.
fn all_sources() -> Vec<PathBuf> {
    [
        "tests",
        "src",
        "benches",
        "engine/src",
        "catalog/src",
        "udfs/src",
    ]
    .iter()
    .map(|d| repo().join(d))
    .filter(|d| d.is_dir())
    .flat_map(|d| rust_files(&d))
    .collect()
}

/// Tests that can be seen: none is compiled into one profile only (a test under
/// `#[cfg(debug_assertions)]` vanishes from a release run without a word), and every ignored
/// one names the `cargo test …` command that runs it.
#[test]
fn no_test_is_compiled_out_of_a_profile_and_each_ignored_one_names_its_command() {
    let mut bad = Vec::new();
    for f in all_sources() {
        let text = std::fs::read_to_string(&f).unwrap();
        let at =
            |line: usize| format!("{}:{}", f.strip_prefix(repo()).unwrap().display(), line + 1);
        // The attributes before each item: a run of lines of attributes (one spread over
        // lines read as one) and comments.
        let mut block: Vec<(usize, String)> = Vec::new();
        let mut open: Option<(usize, String)> = None;
        for (i, line) in text.lines().map(str::trim).enumerate() {
            if let Some((start, mut attr)) = open.take() {
                attr.push_str(line);
                if attr.ends_with(']') {
                    block.push((start, attr));
                } else {
                    open = Some((start, attr));
                }
                continue;
            }
            if line.starts_with("#[") {
                if line.ends_with(']') {
                    block.push((i, line.to_string()));
                } else {
                    open = Some((i, line.to_string()));
                }
                continue;
            }
            if line.starts_with("//") {
                continue;
            }
            let test = block
                .iter()
                .any(|(_, a)| a == "#[test]" || a.starts_with("#[tokio::test"));
            for (start, attr) in block.drain(..) {
                if test && attr.starts_with("#[cfg(") && attr.contains("debug_assertions") {
                    bad.push(format!(
                        "{}: a test compiled in one profile only",
                        at(start)
                    ));
                }
                let ignored = attr.starts_with("#[ignore")
                    || (attr.starts_with("#[cfg_attr(") && attr.contains("ignore"));
                if ignored && !attr.contains("cargo test") {
                    bad.push(format!(
                        "{}: #[ignore] without the `cargo test …` that runs it",
                        at(start)
                    ));
                }
            }
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}
