//! Data signalql did not write well: schema drift between ingests and between files, corrupt
//! and empty files, dangling links, tables without the columns the engine needs, and a fuzz
//! over the Parquet open path. Every failure is an error with a code that names the file (or
//! the table and column); none is a panic or an `internal_error`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, Int64Array, StringArray};
use datafusion::arrow::datatypes::{DataType, Field};
use signalql::catalog::ingest::ingest_events;
use signalql::{Engine, EngineOptions, Error};

fn options() -> EngineOptions {
    EngineOptions {
        now: Some("2026-01-03T00:00:00Z".parse().unwrap()),
        ..Default::default()
    }
}

fn query(root: &Path, q: &str) -> Result<signalql::Envelope, Error> {
    crate::common::rt().block_on(async {
        let engine = Engine::open_with(root, options())?;
        engine.query(q).await
    })
}

fn write_jsonl(dir: &Path, name: &str, lines: &[&str]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, lines.join("\n")).unwrap();
    p
}

/// Three ingests see `properties.x` as an integer, text and a float: all three read as text
/// (DESIGN: int → float → text), on the files as written.
/// A new dataset `tmp/name` with one ingest per value of `properties.x` (JSON text), an hour
/// apart from 2026-01-02T00:00:00Z.
fn ingest_each(tmp: &Path, name: &str, values: &[&str]) -> PathBuf {
    let root = tmp.join(name);
    std::fs::create_dir(&root).unwrap();
    for (i, x) in values.iter().enumerate() {
        let line = format!(
            r#"{{"event_name":"a","timestamp":"2026-01-02T0{i}:00:00Z","properties":{{"x":{x}}}}}"#
        );
        let f = write_jsonl(tmp, &format!("{name}-{i}.jsonl"), &[&line]);
        ingest_events(root.as_path(), &[f]).unwrap();
    }
    root
}

#[test]
fn drifting_property_types_widen_instead_of_bricking_the_dataset() {
    let tmp = tempfile::tempdir().unwrap();
    let root = ingest_each(tmp.path(), "ds", &["1", "\"v1\"", "2.5"]);
    let env = query(
        &root,
        "FROM events DURING LAST 2 d GROUP BY properties.x RETURN properties.x, count",
    )
    .unwrap();
    let got: Vec<(String, u64)> = env
        .rows
        .iter()
        .map(|r| (r[0].as_str().unwrap().to_string(), r[1].as_u64().unwrap()))
        .collect();
    let want = [("1", 1), ("2.5", 1), ("v1", 1)];
    let want: Vec<(String, u64)> = want.iter().map(|(s, n)| (s.to_string(), *n)).collect();
    assert_eq!(got, want);
    // A numeric literal compares with the widened text column.
    let env = query(
        &root,
        "FROM events DURING LAST 2 d WHERE properties.x = 1 RETURN count",
    )
    .unwrap();
    assert_eq!(env.rows[0][0], 1);

    // Integer then float: the float column reads the integers exactly.
    let root2 = ingest_each(tmp.path(), "ds2", &["3", "0.5"]);
    let env = query(
        &root2,
        "FROM events DURING LAST 2 d RETURN sum(properties.x)",
    )
    .unwrap();
    assert_eq!(env.rows[0][0].as_f64(), Some(3.5));
}

/// A Parquet file of `columns` (each a name and an array) at `path`.
fn write_parquet(path: &Path, columns: Vec<(&str, ArrayRef)>) {
    crate::common::write_parquet(path, columns, None);
}

fn events_file(path: &Path, properties: ArrayRef) {
    use datafusion::arrow::array::TimestampMicrosecondArray;
    let ts = TimestampMicrosecondArray::from(vec![1_767_312_000_000_000i64]).with_timezone("UTC");
    write_parquet(
        path,
        vec![
            ("event_name", Arc::new(StringArray::from(vec!["a"]))),
            ("timestamp", Arc::new(ts)),
            ("properties", properties),
        ],
    );
}

#[test]
fn files_that_cannot_be_reconciled_are_an_error_naming_both() {
    use datafusion::arrow::array::StructArray;
    let tmp = tempfile::tempdir().unwrap();
    let as_struct = StructArray::from(vec![(
        Arc::new(Field::new("x", DataType::Int64, true)),
        Arc::new(Int64Array::from(vec![1])) as ArrayRef,
    )]);
    events_file(&tmp.path().join("events/a.parquet"), Arc::new(as_struct));
    events_file(
        &tmp.path().join("events/b.parquet"),
        Arc::new(StringArray::from(vec![r#"{"x": 1}"#])),
    );
    let e = query(tmp.path(), "FROM events DURING LAST 2 d RETURN count").unwrap_err();
    assert_eq!(e.code(), "io_error", "{e}");
    let m = e.to_string();
    assert!(
        m.contains("events/a.parquet")
            && m.contains("events/b.parquet")
            && m.contains("properties"),
        "{m}"
    );
}

/// A copy of the sample dataset's events (T fixed by its signalql.toml).
fn sample_copy() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    let events = tmp.path().join("events");
    std::fs::create_dir(&events).unwrap();
    for f in std::fs::read_dir(signalql::sample_dataset().join("events")).unwrap() {
        let f = f.unwrap();
        std::fs::copy(f.path(), events.join(f.file_name())).unwrap();
    }
    std::fs::write(
        tmp.path().join("signalql.toml"),
        "now = \"2026-06-13T00:00:00Z\"\n",
    )
    .unwrap();
    tmp
}

fn sample_query(root: &Path) -> Result<signalql::Envelope, Error> {
    crate::common::rt().block_on(async {
        let engine = Engine::open(root)?;
        engine
            .query("FROM events DURING LAST 366 d GROUP BY event_name RETURN event_name, count")
            .await
    })
}

/// A copy of the sample dataset with its events changed by `damage`, and the query's answer.
fn damaged(damage: impl FnOnce(&Path)) -> (tempfile::TempDir, Result<signalql::Envelope, Error>) {
    let tmp = sample_copy();
    damage(&tmp.path().join("events"));
    let r = sample_query(tmp.path());
    (tmp, r)
}

fn the_file(dir: &Path) -> PathBuf {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "parquet"))
        .unwrap()
}

fn rewrite(dir: &Path, f: impl FnOnce(&mut Vec<u8>)) -> String {
    let p = the_file(dir);
    let mut b = std::fs::read(&p).unwrap();
    f(&mut b);
    std::fs::write(&p, b).unwrap();
    format!("events/{}", p.file_name().unwrap().to_string_lossy())
}

fn assert_names(r: Result<signalql::Envelope, Error>, file: &str, what: &str) {
    let e = r.expect_err(what);
    assert_eq!(e.code(), "io_error", "{what}: {e}");
    assert!(e.to_string().contains(file), "{what}: {e}");
    assert_eq!(
        e.to_json()["error"]["file"],
        file,
        "{what}: {}",
        e.to_json()
    );
}

#[test]
fn corrupt_empty_and_dangling_files_are_errors_naming_them() {
    type Damage = Box<dyn Fn(&mut Vec<u8>)>;
    let cases: Vec<(&str, Damage)> = vec![
        (
            "footer length 0x7FFFFFFF",
            Box::new(|b: &mut Vec<u8>| {
                let n = b.len();
                b[n - 8..n - 4].copy_from_slice(&0x7FFF_FFFFu32.to_le_bytes());
            }),
        ),
        (
            "truncated footer",
            Box::new(|b: &mut Vec<u8>| {
                let n = b.len();
                b.drain(n - 200..n - 8);
            }),
        ),
        (
            "bad trailing magic",
            Box::new(|b: &mut Vec<u8>| {
                let n = b.len();
                b[n - 4..].copy_from_slice(b"PAR2");
            }),
        ),
        (
            "random bytes",
            Box::new(|b: &mut Vec<u8>| {
                *b = (0..4096u32)
                    .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
                    .collect();
            }),
        ),
        (
            "zeroed page data",
            Box::new(|b: &mut Vec<u8>| b[4..2000].fill(0)),
        ),
    ];
    for (what, f) in cases {
        let mut file = String::new();
        let (_tmp, r) = damaged(|dir| file = rewrite(dir, f));
        assert_names(r, &file, what);
    }
    let (_tmp, r) = damaged(|dir| std::fs::write(dir.join("empty.parquet"), b"").unwrap());
    assert_names(r, "events/empty.parquet", "zero-byte file");
    let (_tmp, r) = damaged(|dir| {
        std::os::unix::fs::symlink("/nonexistent/x.parquet", dir.join("gone.parquet")).unwrap()
    });
    assert_names(r, "events/gone.parquet", "dangling link");
}

/// A link inside a table folder back to a folder the listing is already inside (a loop), or
/// a second name of a file already listed, is never followed into a repeated read: the table
/// is an `io_error` naming the link; with `skip_invalid_files` the link is skipped and listed,
/// and the answer is the files' own (a loop once answered 41 times the events, exit 0).
#[test]
fn folder_loops_and_second_names_of_a_file_are_errors_naming_the_link() {
    use std::os::unix::fs::symlink;
    let (_tmp, r) = damaged(|dir| symlink("../events", dir.join("loop")).unwrap());
    assert_names(r, "events/loop", "a link to the table's own folder");
    let (_tmp, r) = damaged(|dir| symlink(".", dir.join("here")).unwrap());
    assert_names(r, "events/here", "a link to .");
    let (_tmp, r) = damaged(|dir| {
        std::fs::create_dir(dir.join("day=1")).unwrap();
        symlink("../..", dir.join("day=1/up")).unwrap()
    });
    let e = r.expect_err("a link to the root, which holds the table's folder");
    assert_eq!(e.code(), "io_error", "{e}");
    assert!(e.to_string().contains("events/day=1/up/events"), "{e}");
    let (_tmp, r) = damaged(|dir| {
        let file = the_file(dir);
        symlink(&file, dir.join("again.parquet")).unwrap()
    });
    assert_names(r, "events/again.parquet", "a second name of a file");
    let (_tmp, r) = damaged(|dir| {
        let file = the_file(dir);
        std::fs::create_dir(dir.join("elsewhere")).unwrap();
        std::fs::hard_link(&file, dir.join("elsewhere/zz.parquet")).unwrap();
        symlink("elsewhere", dir.join("also")).unwrap()
    });
    // Three names of one file: the one reached without a link is read, the hard link's name
    // is the repeat first in order, and the name through the link to its folder is another.
    let e = r.expect_err("three names of one file");
    assert_eq!(e.code(), "io_error", "{e}");
    assert!(e.to_string().contains("read twice"), "{e}");

    // Skipped and listed with skip_invalid_files, the files' own answer.
    let tmp = sample_copy();
    let whole = sample_query(tmp.path()).unwrap();
    skip_invalid_files(tmp.path());
    let events = tmp.path().join("events");
    symlink("../events", events.join("loop")).unwrap();
    symlink(the_file(&events), events.join("again.parquet")).unwrap();
    let env = sample_query(tmp.path()).unwrap();
    assert_eq!(env.rows, whole.rows, "each file read once");
    assert_eq!(skipped(&env), ["events/again.parquet", "events/loop"]);
}

/// Sets `skip_invalid_files = true` in the signalql.toml of `root`.
fn skip_invalid_files(root: &Path) {
    let config = root.join("signalql.toml");
    let text = std::fs::read_to_string(&config).unwrap_or_default();
    std::fs::write(&config, format!("skip_invalid_files = true\n{text}")).unwrap();
}

/// The files an answer says it skipped.
fn skipped(env: &signalql::Envelope) -> Vec<&str> {
    env.metadata
        .skipped_files
        .iter()
        .map(|f| f.file.as_str())
        .collect()
}

#[test]
fn skip_invalid_files_reads_the_rest_and_says_so() {
    let tmp = sample_copy();
    let whole = sample_query(tmp.path()).unwrap();
    assert!(!whole.rows.is_empty());
    skip_invalid_files(tmp.path());
    std::fs::write(tmp.path().join("events/empty.parquet"), b"").unwrap();
    std::fs::write(
        tmp.path().join("events/junk.parquet"),
        b"not parquet at all",
    )
    .unwrap();
    let env = sample_query(tmp.path()).unwrap();
    assert_eq!(
        env.rows, whole.rows,
        "the readable files give the same answer"
    );
    assert_eq!(
        skipped(&env),
        ["events/empty.parquet", "events/junk.parquet"]
    );
    let json = serde_json::to_value(&env).unwrap();
    assert_eq!(
        json["metadata"]["skipped_files"][0]["file"],
        "events/empty.parquet"
    );
    assert!(whole.metadata.skipped_files.is_empty());
}

/// Every table the engine reads, without one of its required columns or with a wrong type:
/// `io_error` / `type_error` naming the table and the column.
#[test]
fn tables_without_the_columns_the_engine_needs_name_table_and_column() {
    type Case = (
        &'static str,
        Vec<(&'static str, ArrayRef)>,
        &'static str,
        &'static str,
    );
    let s = |v: &str| Arc::new(StringArray::from(vec![v])) as ArrayRef;
    let i = |v: i64| Arc::new(Int64Array::from(vec![v])) as ArrayRef;
    let cases: Vec<Case> = vec![
        (
            "events",
            vec![("timestamp", i(1))],
            "event_name",
            "FROM events RETURN count",
        ),
        (
            "objects",
            vec![("object_id", s("o")), ("title", s("t"))],
            "kind",
            r#"CONTEXT FOR "anything""#,
        ),
        (
            "entities",
            vec![("entity_type", s("user")), ("entity_id", s("u"))],
            "updated_at",
            "FROM entity(user) RETURN count",
        ),
    ];
    for (table, columns, missing, q) in cases {
        let tmp = tempfile::tempdir().unwrap();
        write_parquet(&tmp.path().join(format!("{table}/part-0.parquet")), columns);
        let r = crate::common::rt().block_on(async {
            let engine = Engine::open_with(tmp.path(), options())?;
            engine.answer(q).await.map(|_| ())
        });
        let e = r.expect_err(table);
        assert_eq!(e.code(), "io_error", "{table}: {e}");
        let m = e.to_string();
        assert!(m.contains(table) && m.contains(missing), "{table}: {m}");
    }

    // A representations table whose content is an integer: a type_error, not an empty bundle.
    let tmp = tempfile::tempdir().unwrap();
    crate::common::ingest_docs(tmp.path(), &[("a.md", "# A\n\nsome words about storage\n")]);
    std::fs::remove_dir_all(tmp.path().join("representations")).unwrap();
    write_parquet(
        &tmp.path().join("representations/extra.parquet"),
        vec![
            ("object_id", s("o_x")),
            ("revision", i(1)),
            ("name", s("text")),
            ("media_type", s("text/plain")),
            ("content", i(7)),
            ("content_hash", s("h")),
        ],
    );
    let r = crate::common::rt().block_on(async {
        let engine = Engine::open_with(tmp.path(), options())?;
        engine.answer(r#"CONTEXT FOR "storage""#).await.map(|_| ())
    });
    let e = r.expect_err("content int64");
    assert_eq!(e.code(), "type_error", "{e}");
    assert!(e.to_string().contains("content"), "{e}");

    // The revisions ingest wrote, less their `roles`: io_error naming the table and column,
    // for FIND OBJECT as for CONTEXT FOR (both read the roles to keep secrets out).
    let tmp = tempfile::tempdir().unwrap();
    crate::common::ingest_docs(tmp.path(), &[("a.md", "# A\n\nsome words about storage\n")]);
    let dir = tmp.path().join("revisions");
    let mut batches = Vec::new();
    for e in std::fs::read_dir(&dir).unwrap() {
        let path = e.unwrap().path();
        let file = std::fs::File::open(&path).unwrap();
        let reader =
            datafusion::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
                file,
            )
            .unwrap()
            .build()
            .unwrap();
        for b in reader {
            let b = b.unwrap();
            let keep: Vec<usize> = (0..b.num_columns())
                .filter(|i| b.schema().field(*i).name() != "roles")
                .collect();
            batches.push(b.project(&keep).unwrap());
        }
        std::fs::remove_file(path).unwrap();
    }
    assert_eq!(batches.len(), 1);
    let b = &batches[0];
    let schema = b.schema();
    let columns = schema
        .fields()
        .iter()
        .zip(b.columns())
        .map(|(f, c)| (f.name().as_str(), Arc::clone(c)))
        .collect();
    write_parquet(&dir.join("extra.parquet"), columns);
    for q in [r#"CONTEXT FOR "storage""#, r#"FIND OBJECT ABOUT "storage""#] {
        let r = crate::common::rt().block_on(async {
            let engine = Engine::open_with(tmp.path(), options())?;
            engine.answer(q).await.map(|_| ())
        });
        let e = r.expect_err("revisions without roles");
        assert_eq!(e.code(), "io_error", "{q}: {e}");
        let m = e.to_string();
        assert!(m.contains("revisions") && m.contains("roles"), "{q}: {m}");
    }
}

/// The name of the fuzz's runtime threads, whose panics [`record_fuzz_panics`] records.
const FUZZ_THREADS: &str = "parquet-fuzz";

/// Panics on the fuzz's threads: those inside the parquet and arrow crates (by location), which
/// the engine catches and reports as the file's `io_error`, and every other one, which it would
/// report the same way and which is a bug.
struct FuzzPanics {
    library: std::collections::BTreeMap<String, u32>,
    other: Vec<String>,
}

static FUZZ_PANICS: std::sync::Mutex<FuzzPanics> = std::sync::Mutex::new(FuzzPanics {
    library: std::collections::BTreeMap::new(),
    other: Vec::new(),
});

/// Installs (once) a panic hook that records the panics of the thread `test` and of the
/// threads named [`FUZZ_THREADS`]; other threads' panics go to the hook there was before.
fn record_fuzz_panics(test: std::thread::ThreadId) {
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    INSTALLED.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let thread = std::thread::current();
            if thread.id() != test && thread.name() != Some(FUZZ_THREADS) {
                return previous(info);
            }
            let at = info
                .location()
                .map(|l| format!("{}:{}", l.file(), l.line()))
                .unwrap_or_default();
            // parquet 59.3.2's DELTA_BINARY_PACKED decoder slices a corrupt page's `Bytes`
            // past its end: the panic is in the bytes crate, called from parquet.
            let library = in_parquet_or_arrow(&at)
                || ((at.starts_with("/rustc/") || at.contains("/bytes-"))
                    && called_from_parquet_or_arrow());
            let mut seen = FUZZ_PANICS.lock().unwrap_or_else(|e| e.into_inner());
            if library {
                *seen.library.entry(at).or_default() += 1;
                return;
            }
            let payload = info.payload();
            let message = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            seen.other.push(format!("{at}: {message}"));
            drop(seen);
            // The test's own failed assertions are printed as usual.
            if thread.id() == test {
                previous(info);
            }
        }));
    });
}

/// Whether a panic's location is a source file of the parquet or arrow crates
/// (`…/parquet-59.0.0/src/…`, `…/arrow-array-59.0.0/src/…`).
fn in_parquet_or_arrow(file: &str) -> bool {
    file.split(['/', '\\']).any(|dir| {
        dir.rsplit_once('-').is_some_and(|(name, version)| {
            version.starts_with(|c: char| c.is_ascii_digit())
                && (name == "parquet" || name == "arrow" || name.starts_with("arrow-"))
        })
    })
}

/// For a panic the standard library raised (`capacity overflow`): whether its innermost frame
/// outside the standard library is in the parquet or arrow crates.
fn called_from_parquet_or_arrow() -> bool {
    let trace = std::backtrace::Backtrace::force_capture().to_string();
    trace
        .lines()
        .map(str::trim)
        .filter_map(|l| {
            let (n, f) = l.split_once(": ")?;
            n.chars().all(|c| c.is_ascii_digit()).then_some(f)
        })
        .map(|f| f.trim_start_matches('<'))
        .find(|f| {
            ![
                "std::",
                "core::",
                "alloc::",
                "rust_begin_unwind",
                "__rust",
                "bytes::",
                "it::bad_data",
                // The hook itself, as a debug build names it.
                "{closure",
            ]
            .iter()
            .any(|p| f.starts_with(p))
        })
        .is_some_and(|f| f.starts_with("parquet::") || f.starts_with("arrow"))
}

/// Mutated bytes anywhere in a small Parquet file (footer, page headers, metadata): each
/// query answers, or fails with `io_error`/`type_error` naming the file; never an
/// `internal_error`, and no panic anywhere but inside the parquet and arrow crates themselves
/// (which the engine catches and reports as the file's `io_error`): a panic elsewhere, though
/// caught and reported the same way, fails the test. The panics are counted and reported.
#[test]
fn mutated_parquet_files_never_panic() {
    let tmp = tempfile::tempdir().unwrap();
    let f = write_jsonl(
        tmp.path(),
        "e.jsonl",
        &[
            r#"{"event_name":"a","user_id":"u1","timestamp":"2026-01-02T00:00:00Z","properties":{"x":1,"p":"free"}}"#,
            r#"{"event_name":"b","user_id":"u2","timestamp":"2026-01-02T01:00:00Z","properties":{"x":2,"p":"pro"}}"#,
        ],
    );
    let base = tmp.path().join("base");
    std::fs::create_dir(&base).unwrap();
    let written = ingest_events(base.as_path(), &[f]).unwrap().written;
    let original = std::fs::read(&written).unwrap();
    let name = written.file_name().unwrap().to_string_lossy().into_owned();
    let n = original.len();
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    // Its own runtime, whose threads the panic hook knows by name.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name(FUZZ_THREADS)
        .enable_all()
        .build()
        .unwrap();
    record_fuzz_panics(std::thread::current().id());
    let mut outcomes = std::collections::BTreeMap::<String, u32>::new();
    for trial in 0..400 {
        let before = FUZZ_PANICS
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .other
            .len();
        let mut b = original.clone();
        // Half the mutations in the footer (the last 10 %), the rest anywhere.
        let span = if trial % 2 == 0 { n / 10 } else { n };
        for _ in 0..1 + next() % 4 {
            let at = n - 1 - (next() as usize % span);
            b[at] = match next() % 3 {
                0 => 0,
                1 => 0xFF,
                _ => next() as u8,
            };
        }
        let root = tmp.path().join(format!("t{trial}"));
        let dir = root.join("events");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::create_dir_all(root.join("_signalql/commits")).unwrap();
        for c in std::fs::read_dir(base.join("_signalql/commits")).unwrap() {
            let c = c.unwrap();
            std::fs::copy(c.path(), root.join("_signalql/commits").join(c.file_name())).unwrap();
        }
        std::fs::write(dir.join(&name), &b).unwrap();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            rt.block_on(async {
                let engine = Engine::open_with(&root, options())?;
                engine
                    .query("FROM events DURING LAST 2 d GROUP BY properties.p RETURN properties.p, count, sum(properties.x)")
                    .await
            })
        }));
        let other = FUZZ_PANICS.lock().unwrap_or_else(|e| e.into_inner()).other[before..].to_vec();
        assert!(
            other.is_empty(),
            "trial {trial}: panics outside the parquet and arrow crates, hidden by the answer:\n{}",
            other.join("\n")
        );
        let r = r.unwrap_or_else(|_| panic!("trial {trial} panicked"));
        let key = match r {
            Ok(_) => "answered".to_string(),
            Err(e) => {
                assert!(
                    matches!(e.code(), "io_error" | "type_error"),
                    "trial {trial}: {} {e}",
                    e.code()
                );
                assert!(e.to_string().contains(&name), "trial {trial}: {e}");
                e.code().to_string()
            }
        };
        *outcomes.entry(key).or_default() += 1;
        std::fs::remove_dir_all(&root).unwrap();
    }
    let seen = FUZZ_PANICS.lock().unwrap_or_else(|e| e.into_inner());
    let report = format!(
        "mutated Parquet files: {outcomes:?}; {} panics inside parquet/arrow (each caught and \
         reported as the file's io_error), at {:?}; {} elsewhere",
        seen.library.values().sum::<u32>(),
        seen.library,
        seen.other.len()
    );
    drop(seen);
    eprintln!("{report}");
    assert!(
        outcomes.get("io_error").copied().unwrap_or(0) > 50,
        "{outcomes:?}"
    );
}
