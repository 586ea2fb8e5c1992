//! Ingest stopped dead and under concurrent writers, on a local folder and on S3. A real
//! `signalql ingest objects` or `ingest events` child stopped before each of its durable
//! writes in turn (the `crash_at_write:N` failpoint aborts it, as SIGKILL would) leaves the old
//! state or the new one in every table (never a mix), old up to its commit record and new
//! after it, and FIND OBJECT and CONTEXT FOR agree with the tables on which; re-running the
//! same ingest completes it and cleans up what the stopped run left.
//! Concurrent event ingests all land; concurrent object ingests of the same files add each
//! revision once (crate::commit).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};

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
    for t in [
        "events",
        "objects",
        "revisions",
        "representations",
        "links",
        "index_terms",
        "index_reps",
        "index_files",
    ] {
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

/// `c` run to its end with the failpoint `crash_at_write:N` when `crash` is `Some(N)`
/// (catalog/src/failpoint.rs: the process aborts, as SIGKILL would end it, before its Nth
/// durable write), its stderr kept.
fn stopped_at(mut c: Command, crash: Option<u32>) -> std::process::Output {
    if let Some(n) = crash {
        c.env(
            signalql::catalog::failpoint::VAR,
            format!("crash_at_write:{n}"),
        );
    }
    c.stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .unwrap()
}

/// The object ingest of the kill tests: `notes` into project `p`.
fn ingest_objects_at(notes: &Path, target: &Target, crash: Option<u32>) -> std::process::Output {
    let mut c = crate::common::s3::signalql_command(&target.env);
    c.args(["ingest", "objects"])
        .arg(notes)
        .args(["--project", "p", "--now", "2026-02-01T00:00:00Z", "--data"])
        .arg(&target.url);
    stopped_at(c, crash)
}

/// `signalql ingest events FILE --data TARGET`.
fn ingest_events_at(file: &Path, target: &Target, crash: Option<u32>) -> std::process::Output {
    let mut c = crate::common::s3::signalql_command(&target.env);
    c.args(["ingest", "events"])
        .arg(file)
        .arg("--data")
        .arg(&target.url);
    stopped_at(c, crash)
}

/// What readers see of the events: the count per event name.
fn event_counts(target: &Target) -> Vec<(String, i64)> {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let env = rt.block_on(async {
        let options = EngineOptions {
            storage: target.storage.clone(),
            ..Default::default()
        };
        let engine = Engine::open_with(&target.url, options).unwrap();
        engine
            .query("FROM events GROUP BY event_name RETURN event_name, count")
            .await
            .unwrap()
    });
    env.rows
        .iter()
        .map(|r| (r[0].as_str().unwrap().to_string(), r[1].as_i64().unwrap()))
        .collect()
}

/// An ingest over copies of `base`, stopped before each of its durable writes in turn (the
/// failpoint counts them: the pending marker, each data file, the text index's files, the
/// commit record, the marker's removal). After each stop a reader sees the old state or the
/// new one entirely, never a mix: the old one up to the commit record, the new one after it,
/// so both are seen. `recover` then runs on the stopped copy (told whether it saw the new
/// state) and must leave the new state with nothing behind. Returns the steps with what was
/// seen after each.
fn crash_at_every_write<'a, S: PartialEq + std::fmt::Debug>(
    base: &Path,
    target: impl Fn(&str) -> Target<'a>,
    ingest: impl Fn(&Target, Option<u32>) -> std::process::Output,
    state: impl Fn(&Target) -> S,
    recover: impl Fn(&Target, bool),
) -> Vec<(String, &'static str)> {
    let old = state(&Target::local(base));
    let whole = target("whole");
    whole.fill_from(base);
    let o = ingest(&whole, None);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let new = state(&whole);
    assert_ne!(old, new);
    let mut steps = Vec::new();
    for n in 1u32.. {
        assert!(n <= 64, "an ingest of more than 64 writes? {steps:?}");
        let root = target(&format!("w{n}"));
        root.fill_from(base);
        let o = ingest(&root, Some(n));
        let said = String::from_utf8_lossy(&o.stderr).into_owned();
        let prefix = format!("failpoint: crash at write {n} (");
        let Some(step) = said.lines().find_map(|l| l.strip_prefix(prefix.as_str())) else {
            // Fewer than n writes: the ingest ran whole.
            assert!(o.status.success(), "write {n}: {said}");
            assert_eq!(state(&root), new);
            assert_eq!(leftovers(&root), Vec::<String>::new());
            break;
        };
        let step = step.trim_end_matches(')').to_string();
        assert!(!o.status.success(), "{step}: the process went on");
        let seen = state(&root);
        let which = if seen == old {
            "old"
        } else if seen == new {
            "new"
        } else {
            panic!("stopped before {step}: a mix {seen:?}\nold {old:?}\nnew {new:?}")
        };
        recover(&root, which == "new");
        assert_eq!(
            leftovers(&root),
            Vec::<String>::new(),
            "{step}: after recovery"
        );
        steps.push((step, which));
    }
    eprintln!("{}: stopped before each write: {steps:#?}", whole.url);
    let commit = steps
        .iter()
        .position(|(s, _)| s.starts_with("commit record"))
        .unwrap_or_else(|| panic!("no commit record among {steps:?}"));
    for (i, (s, w)) in steps.iter().enumerate() {
        let expected = if i <= commit { "old" } else { "new" };
        assert_eq!(*w, expected, "stopped before {s}: {steps:?}");
    }
    assert!(commit + 1 < steps.len(), "both outcomes seen: {steps:?}");
    steps
}

/// The object kill test on `target`'s roots: an update of 100 changed, 50 deleted and 50 new
/// files over a base of 150 (with links), stopped before each of its writes; a re-run of the
/// same ingest completes it (or finds it done) whichever side of the commit it stopped.
fn object_ingest_stopped_at_every_write<'a>(target: impl Fn(&str) -> Target<'a>) {
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
    // The base state is made locally and copied to each stop's target.
    let base = tmp.path().join("base");
    std::fs::create_dir(&base).unwrap();
    assert!(
        ingest_objects_at(&notes, &Target::local(&base), None)
            .status
            .success()
    );
    for i in 0..100 {
        std::fs::write(
            notes.join(format!("n{i}.md")),
            format!(
                "# Note {i}\n\nSecond version of note {i}. [next](n{}.md)\n",
                i + 1
            ),
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
    let ingest = |t: &Target, crash| ingest_objects_at(&notes, t, crash);
    let whole = std::cell::RefCell::new(None);
    let steps = crash_at_every_write(&base, &target, ingest, state, |root, _| {
        let o = ingest(root, None);
        assert!(
            o.status.success(),
            "re-run: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let after = state(root);
        let mut whole = whole.borrow_mut();
        let expected = whole.get_or_insert_with(|| state(&target("whole")));
        assert_eq!(&after, expected, "after the re-run");
    });
    for table in [
        "representations/",
        "links/",
        "revisions/",
        "objects/",
        "index_terms/",
        "index_reps/",
        "index_files/",
    ] {
        assert!(
            steps.iter().any(|(s, _)| s.contains(table)),
            "no write of {table} among {steps:?}"
        );
    }
}

#[test]
fn an_object_ingest_stopped_at_any_write_is_all_or_nothing_and_a_rerun_completes_it() {
    let tmp = tempfile::tempdir().unwrap();
    object_ingest_stopped_at_every_write(|name| Target::local(&tmp.path().join(name)));
}

/// The same on S3: the data objects, the commit record (a conditional PUT) and the markers
/// live on the S3-compatible test server, and the clean-up deletes there.
#[test]
fn an_object_ingest_on_s3_stopped_at_any_write_is_all_or_nothing_and_a_rerun_completes_it() {
    let s3 = S3Server::start();
    s3.create_bucket("lake");
    object_ingest_stopped_at_every_write(|name| Target::s3(&s3, "lake", name));
}

/// The event kill test on `target`'s roots: 200 events of `a` and 100 of `b` over a base of
/// 300 `a`, stopped before each write. Stopped before the commit, a re-run completes it;
/// after it the events are in (a re-run would add them twice, as any second ingest of a file
/// does), and the next ingest clears what the stopped one left.
fn event_ingest_stopped_at_every_write<'a>(target: impl Fn(&str) -> Target<'a>) {
    let tmp = tempfile::tempdir().unwrap();
    let lines = |name: &str, n: usize, from: usize| -> String {
        (from..from + n)
            .map(|i| {
                format!(
                    "{{\"event_name\":\"{name}\",\"timestamp\":\"2026-01-01T00:{:02}:{:02}Z\",\"user_id\":\"u{i}\"}}\n",
                    (i / 60) % 60,
                    i % 60
                )
            })
            .collect()
    };
    let first = tmp.path().join("first.jsonl");
    std::fs::write(&first, lines("a", 300, 0)).unwrap();
    let second = tmp.path().join("second.jsonl");
    std::fs::write(&second, lines("a", 200, 300) + &lines("b", 100, 500)).unwrap();
    let third = tmp.path().join("third.jsonl");
    std::fs::write(&third, lines("c", 1, 0)).unwrap();
    let base = tmp.path().join("base");
    std::fs::create_dir(&base).unwrap();
    assert!(
        ingest_events_at(&first, &Target::local(&base), None)
            .status
            .success()
    );
    let ingest = |t: &Target, crash| ingest_events_at(&second, t, crash);
    let new = vec![("a".to_string(), 500), ("b".to_string(), 100)];
    let steps = crash_at_every_write(&base, target, ingest, event_counts, |root, committed| {
        if committed {
            let o = ingest_events_at(&third, root, None);
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
            let mut with_c = new.clone();
            with_c.push(("c".to_string(), 1));
            assert_eq!(event_counts(root), with_c);
        } else {
            assert!(ingest(root, None).status.success(), "re-run");
            assert_eq!(event_counts(root), new);
        }
    });
    assert!(
        steps.iter().any(|(s, _)| s.contains("events/")),
        "no write of events/ among {steps:?}"
    );
}

#[test]
fn an_event_ingest_stopped_at_any_write_is_all_or_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    event_ingest_stopped_at_every_write(|name| Target::local(&tmp.path().join(name)));
}

#[test]
fn an_event_ingest_on_s3_stopped_at_any_write_is_all_or_nothing() {
    let s3 = S3Server::start();
    s3.create_bucket("lake");
    event_ingest_stopped_at_every_write(|name| Target::s3(&s3, "lake", name));
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
