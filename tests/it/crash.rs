//! Ingest under SIGKILL: a real `signalql ingest objects` child killed at many points leaves
//! the old state or the new one in every table (never a mix), and re-running the same ingest
//! completes it and cleans up what the killed run left (crate::commit).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

use signalql::catalog::Dataset;

/// Rows visible to readers, per object table.
fn visible(root: &Path) -> BTreeMap<&'static str, usize> {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let ds = Dataset::open(root).unwrap();
        let ctx = datafusion::prelude::SessionContext::new();
        let mut out = BTreeMap::new();
        for t in ["objects", "revisions", "representations", "links"] {
            let n = match ds.table(&ctx, t).await {
                Ok(info) => {
                    let df = ctx.read_table(info.provider).unwrap();
                    df.count().await.unwrap()
                }
                Err(signalql::catalog::DatasetError::MissingTable { .. }) => 0,
                Err(e) => panic!("{t}: {e}"),
            };
            out.insert(t, n);
        }
        out
    })
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), &target).unwrap();
        }
    }
}

fn ingest(notes: &Path, root: &Path) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_signalql"))
        .args(["ingest", "objects"])
        .arg(notes)
        .args(["--project", "p", "--now", "2026-02-01T00:00:00Z", "--data"])
        .arg(root)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap()
}

/// Files named by the commit log with no commit record, and pending markers.
fn leftovers(root: &Path) -> Vec<String> {
    let commits: Vec<String> = std::fs::read_dir(root.join("_signalql/commits"))
        .map(|d| {
            d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    let mut out = Vec::new();
    for t in ["objects", "revisions", "representations", "links"] {
        let Ok(dir) = std::fs::read_dir(root.join(t)) else {
            continue;
        };
        for e in dir {
            let name = e.unwrap().file_name().to_string_lossy().into_owned();
            let id = signalql::catalog::commit::ingest_id(&name).map(|i| format!("{i}.json"));
            if name.starts_with('.') || id.is_some_and(|id| !commits.contains(&id)) {
                out.push(format!("{t}/{name}"));
            }
        }
    }
    if let Ok(d) = std::fs::read_dir(root.join("_signalql/pending")) {
        out.extend(d.map(|e| format!("pending/{}", e.unwrap().file_name().to_string_lossy())));
    }
    out
}

#[test]
fn a_killed_object_ingest_is_all_or_nothing_and_a_rerun_completes_it() {
    let tmp = tempfile::tempdir().unwrap();
    let notes = tmp.path().join("notes");
    std::fs::create_dir(&notes).unwrap();
    for i in 0..150 {
        let link = format!("[next](n{}.md)", i + 1);
        std::fs::write(
            notes.join(format!("n{i}.md")),
            format!("# Note {i}\n\nFirst version of note {i}. {link}\n"),
        )
        .unwrap();
    }
    let base = tmp.path().join("base");
    std::fs::create_dir(&base).unwrap();
    assert!(ingest(&notes, &base).wait().unwrap().success());
    let old = visible(&base);

    // The update: 100 files change, 50 are deleted, 50 are new.
    for i in 0..100 {
        std::fs::write(
            notes.join(format!("n{i}.md")),
            format!("# Note {i}\n\nSecond version of note {i}.\n"),
        )
        .unwrap();
    }
    for i in 100..150 {
        std::fs::remove_file(notes.join(format!("n{i}.md"))).unwrap();
    }
    for i in 150..200 {
        std::fs::write(
            notes.join(format!("n{i}.md")),
            format!("# New {i}\n\nNew.\n"),
        )
        .unwrap();
    }
    let whole = tmp.path().join("whole");
    copy_dir(&base, &whole);
    let started = Instant::now();
    assert!(ingest(&notes, &whole).wait().unwrap().success());
    let took = started.elapsed();
    let new = visible(&whole);
    assert_ne!(old, new);

    let mut seen = BTreeMap::<&str, u32>::new();
    let trials = 30u32;
    for trial in 0..trials {
        let root = tmp.path().join(format!("t{trial}"));
        copy_dir(&base, &root);
        let mut child = ingest(&notes, &root);
        // Kill points spread over the whole run, from the start to a little past its end.
        let at = took.mul_f64(1.2 * f64::from(trial) / f64::from(trials));
        std::thread::sleep(at);
        let _ = child.kill(); // SIGKILL
        child.wait().unwrap();
        let state = visible(&root);
        let which = if state == old {
            "old"
        } else if state == new {
            "new"
        } else {
            panic!("trial {trial} (killed at {at:?}): a mix: {state:?}, old {old:?}, new {new:?}")
        };
        *seen.entry(which).or_default() += 1;
        // Re-running the ingest completes it, and leaves nothing uncommitted behind.
        assert!(
            ingest(&notes, &root).wait().unwrap().success(),
            "trial {trial}: re-run"
        );
        assert_eq!(visible(&root), new, "trial {trial}: after the re-run");
        assert_eq!(leftovers(&root), Vec::<String>::new(), "trial {trial}");
        std::fs::remove_dir_all(&root).unwrap();
    }
    eprintln!("killed object ingests ({took:?} uninterrupted): {seen:?}");
    assert!(seen.contains_key("old"), "{seen:?}");
}
