//! Ingest under SIGKILL and under concurrent writers, on a local folder and on S3. A real
//! `signalql ingest objects` child killed at many points leaves the old state or the new one
//! in every table (never a mix), and FIND OBJECT and CONTEXT FOR agree with the tables on
//! which; re-running the same ingest completes it and cleans up what the killed run left.
//! Concurrent event ingests all land; concurrent object ingests of the same files add each
//! revision once (crate::commit).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use signalql::catalog::commit::Snapshot;
use signalql::catalog::{Dataset, Root, StorageOptions};
use signalql::{Answer, Engine, EngineOptions};

use crate::common::s3::S3Server;

/// A dataset root the test writes to: a local folder, or an S3 prefix of the test server.
pub(crate) struct Target<'a> {
    /// A local path or `s3://bucket/prefix`.
    pub url: String,
    pub storage: StorageOptions,
    /// The environment a CLI child needs to reach it.
    pub env: Vec<(&'static str, String)>,
    pub s3: Option<&'a S3Server>,
}

impl<'a> Target<'a> {
    pub fn local(path: &Path) -> Target<'a> {
        Target {
            url: path.to_string_lossy().into_owned(),
            storage: StorageOptions::default(),
            env: Vec::new(),
            s3: None,
        }
    }

    pub fn s3(server: &'a S3Server, bucket: &str, prefix: &str) -> Target<'a> {
        Target {
            url: format!("s3://{bucket}/{prefix}"),
            storage: server.storage(),
            env: server.env(),
            s3: Some(server),
        }
    }

    fn root(&self) -> Root {
        Root::parse(&self.url, &self.storage).unwrap()
    }

    /// A copy of the local folder `from` here.
    fn fill_from(&self, from: &Path) {
        match self.s3 {
            Some(server) => {
                let (bucket, prefix) = self.url["s3://".len()..].split_once('/').unwrap();
                server.upload_dir(from, bucket, prefix);
            }
            None => crate::common::copy_dir(from, Path::new(&self.url)),
        }
    }
}

/// Rows visible to readers, per object table.
fn visible(target: &Target) -> BTreeMap<&'static str, usize> {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let ds = Dataset::open_with(&target.url, &target.storage).unwrap();
        let ctx = datafusion::prelude::SessionContext::new();
        ds.root().register(&ctx).unwrap();
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

/// What readers see: the tables' row counts, FIND OBJECT's (object, revision) rows and
/// CONTEXT FOR's bundle address, all of which must move from old to new together.
#[derive(Debug, PartialEq)]
struct State {
    tables: BTreeMap<&'static str, usize>,
    found: Vec<(String, i64)>,
    bundle: String,
}

fn state(target: &Target) -> State {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (found, bundle) = rt.block_on(async {
        let now = chrono::DateTime::parse_from_rfc3339("2026-03-01T00:00:00Z").unwrap();
        let options = EngineOptions {
            now: Some(now.with_timezone(&chrono::Utc)),
            storage: target.storage.clone(),
            ..Default::default()
        };
        let engine = Engine::open_with(&target.url, options).unwrap();
        let env = engine
            .query(r#"FIND OBJECT ABOUT "version note" LIMIT 1000"#)
            .await
            .unwrap();
        let mut found: Vec<(String, i64)> = env
            .rows
            .iter()
            .map(|r| (r[0].as_str().unwrap().to_string(), r[1].as_i64().unwrap()))
            .collect();
        found.sort();
        let bundle = match engine
            .answer(r#"CONTEXT FOR "second version of note" BUDGET 400 TOKENS"#)
            .await
            .unwrap()
        {
            Answer::Bundle(b) => b.id,
            other => panic!("not a bundle: {other:?}"),
        };
        (found, bundle)
    });
    State {
        tables: visible(target),
        found,
        bundle,
    }
}

/// `signalql ingest objects DIR --project P --data TARGET` as a child.
fn ingest_project(dir: &Path, project: &str, target: &Target) -> Child {
    crate::common::s3::signalql_command(&target.env)
        .args(["ingest", "objects"])
        .arg(dir)
        .args([
            "--project",
            project,
            "--now",
            "2026-02-01T00:00:00Z",
            "--data",
        ])
        .arg(&target.url)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

fn ingest(notes: &Path, target: &Target) -> Child {
    ingest_project(notes, "p", target)
}

/// Files no reader reads (uncommitted data files, temporaries) and pending markers.
fn leftovers(target: &Target) -> Vec<String> {
    let root = target.root();
    let snapshot = Snapshot::read(&root).unwrap();
    let mut out = Vec::new();
    for t in ["events", "objects", "revisions", "representations", "links"] {
        for (name, _) in root.list_names(t).unwrap() {
            if name.starts_with('.') || !snapshot.visible(&name) {
                out.push(format!("{t}/{name}"));
            }
        }
    }
    for (name, _) in root.list_names("_signalql/pending").unwrap() {
        out.push(format!("pending/{name}"));
    }
    out
}

/// The kill test on `trial(n)`'s targets: an update of 100 changed, 50 deleted and 50 new
/// files over a base of 150, killed at `trials` points spread over its uninterrupted run.
fn kill_test<'a>(trials: u32, target: impl Fn(&str) -> Target<'a>) {
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
    // The base state is made locally and copied to each trial's target.
    let base = tmp.path().join("base");
    std::fs::create_dir(&base).unwrap();
    let base_target = Target::local(&base);
    assert!(ingest(&notes, &base_target).wait().unwrap().success());
    let old = state(&base_target);

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
    let whole = target("whole");
    whole.fill_from(&base);
    let started = Instant::now();
    assert!(ingest(&notes, &whole).wait().unwrap().success());
    let took = started.elapsed();
    let new = state(&whole);
    assert_ne!(old.tables, new.tables);
    assert_ne!(old.found, new.found);
    assert_ne!(old.bundle, new.bundle);

    let mut seen = BTreeMap::<&str, u32>::new();
    for trial in 0..trials {
        let root = target(&format!("t{trial}"));
        root.fill_from(&base);
        let mut child = ingest(&notes, &root);
        // Kill points spread over the whole run, from the start to a little past its end.
        let at = took.mul_f64(1.2 * f64::from(trial) / f64::from(trials));
        std::thread::sleep(at);
        let _ = child.kill(); // SIGKILL
        child.wait().unwrap();
        let now = state(&root);
        let which = if now == old {
            "old"
        } else if now == new {
            "new"
        } else {
            panic!("trial {trial} (killed at {at:?}): a mix: {now:?}, old {old:?}, new {new:?}")
        };
        *seen.entry(which).or_default() += 1;
        // Re-running the ingest completes it, and leaves nothing uncommitted behind.
        assert!(
            ingest(&notes, &root).wait().unwrap().success(),
            "trial {trial}: re-run"
        );
        assert_eq!(state(&root), new, "trial {trial}: after the re-run");
        assert_eq!(leftovers(&root), Vec::<String>::new(), "trial {trial}");
    }
    eprintln!(
        "killed object ingests on {} ({took:?} uninterrupted): {seen:?}",
        whole.url
    );
    assert!(seen.contains_key("old"), "{seen:?}");
}

#[test]
fn a_killed_object_ingest_is_all_or_nothing_and_a_rerun_completes_it() {
    let tmp = tempfile::tempdir().unwrap();
    kill_test(30, |name| Target::local(&tmp.path().join(name)));
}

/// The same on S3: the data objects, the commit record (a conditional PUT) and the markers
/// live on the S3-compatible test server, and the clean-up deletes there.
#[test]
fn a_killed_object_ingest_on_s3_is_all_or_nothing_and_a_rerun_completes_it() {
    let s3 = S3Server::start();
    s3.create_bucket("lake");
    kill_test(12, |name| Target::s3(&s3, "lake", name));
}

/// Eight event ingests into one root at once: all exit 0 and every row lands.
#[test]
fn concurrent_event_ingests_all_land() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("ds");
    let target = Target::local(&root);
    let children: Vec<_> = (0..8)
        .map(|w| {
            let file = tmp.path().join(format!("w{w}.jsonl"));
            let lines: String = (0..500)
                .map(|i| {
                    format!(
                        "{{\"event_name\":\"e{w}\",\"timestamp\":\"2026-01-01T00:00:{:02}Z\",\"user_id\":\"u{i}\"}}\n",
                        i % 60
                    )
                })
                .collect();
            std::fs::write(&file, lines).unwrap();
            Command::new(env!("CARGO_BIN_EXE_signalql"))
                .args(["ingest", "events"])
                .arg(&file)
                .arg("--data")
                .arg(&root)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for c in children {
        let o = c.wait_with_output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    let env = rt.block_on(async {
        let engine = Engine::open_with(&root, EngineOptions::default()).unwrap();
        engine
            .query("FROM events GROUP BY event_name RETURN event_name, count")
            .await
            .unwrap()
    });
    let rows: Vec<(String, i64)> = env
        .rows
        .iter()
        .map(|r| (r[0].as_str().unwrap().to_string(), r[1].as_i64().unwrap()))
        .collect();
    let expected: Vec<(String, i64)> = (0..8).map(|w| (format!("e{w}"), 500)).collect();
    assert_eq!(rows, expected);
    assert_eq!(leftovers(&target), Vec::<String>::new());
}

/// Object ingests at once: four of the same changed folder and two of other projects' folders.
/// All exit 0; the changed files get one new revision each (not one per writer), and the
/// other projects' objects all land.
#[test]
fn concurrent_object_ingests_add_each_revision_once() {
    let tmp = tempfile::tempdir().unwrap();
    let notes = tmp.path().join("notes");
    std::fs::create_dir(&notes).unwrap();
    let write_notes = |version: &str| {
        for i in 0..60 {
            std::fs::write(
                notes.join(format!("n{i}.md")),
                format!("# Note {i}\n\n{version} version of note {i}.\n"),
            )
            .unwrap();
        }
    };
    write_notes("First");
    let root = Target::local(&tmp.path().join("ds"));
    assert!(ingest(&notes, &root).wait().unwrap().success());
    write_notes("Second");
    let others: Vec<_> = ["q", "r"]
        .iter()
        .map(|p| {
            let dir = tmp.path().join(p);
            std::fs::create_dir(&dir).unwrap();
            for i in 0..40 {
                std::fs::write(
                    dir.join(format!("{p}{i}.md")),
                    format!("# {p} {i}\n\nText.\n"),
                )
                .unwrap();
            }
            (p.to_string(), dir)
        })
        .collect();
    let mut children: Vec<_> = (0..4).map(|_| ingest(&notes, &root)).collect();
    for (p, dir) in &others {
        children.push(ingest_project(dir, p, &root));
    }
    for mut c in children {
        assert!(c.wait().unwrap().success());
    }
    // Object rows: 60 notes (a new revision with the same title adds none) + 40 + 40.
    // Revisions: 60 first + 60 second + 40 + 40. FIND OBJECT sees each note once, at
    // revision 2.
    let s = state(&root);
    assert_eq!(s.tables["objects"], 60 + 40 + 40, "{s:?}");
    assert_eq!(s.tables["revisions"], 60 + 60 + 40 + 40, "{s:?}");
    let notes_found: Vec<_> = s.found.iter().filter(|(_, r)| *r == 2).collect();
    assert_eq!(notes_found.len(), 60, "{:?}", s.found);
    assert_eq!(
        s.found.len(),
        60,
        "only the notes mention 'version note': {:?}",
        s.found
    );
    assert_eq!(leftovers(&root), Vec::<String>::new());
}
