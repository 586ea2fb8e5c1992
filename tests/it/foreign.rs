//! Datasets other tools wrote (tests/data/foreign, made by pyarrow; docs/mapping.md): DESCRIBE
//! shows how each field is read, and a value the mapping cannot read is an error naming the
//! column. Their query results are golden cases (tests/golden/foreign, DuckDB oracle).

use std::path::Path;
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, RecordBatch, StringArray};
use datafusion::arrow::datatypes::{Field, Schema};
use serde_json::Value;
use signalql::{Engine, EngineOptions};

fn foreign(name: &str) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/foreign")
        .join(name);
    crate::common::copy_dir(&src, tmp.path());
    tmp
}

#[test]
fn describe_names_the_file_column_each_mapped_field_reads() {
    let tmp = foreign("segment");
    let env = crate::common::rt()
        .block_on(async {
            let engine = Engine::open_with(tmp.path(), EngineOptions::default())?;
            engine.query("DESCRIBE events").await
        })
        .unwrap();
    let json = serde_json::to_value(&env).unwrap();
    let columns: Vec<&str> = json["columns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    let at = columns.iter().position(|c| *c == "fields").unwrap();
    let fields = json["rows"][0][at].as_array().unwrap().clone();
    let source = |name: &str| -> Value {
        fields
            .iter()
            .find(|f| f["name"] == name)
            .unwrap_or_else(|| panic!("no field {name} in {fields:?}"))
            .get("source")
            .cloned()
            .unwrap_or(Value::Null)
    };
    assert_eq!(source("event_name"), "event");
    assert_eq!(source("user_id"), "anonymous_id");
    assert_eq!(source("session_id"), "context_session_id");
    assert_eq!(source("timestamp"), "received_at (epoch ms)");
    assert_eq!(source("properties.plan"), "plan");
    // The export's own `timestamp` text is a property, read from the column of that name.
    assert_eq!(source("properties.timestamp"), "timestamp");
    let ty = |name: &str| {
        fields.iter().find(|f| f["name"] == name).unwrap()["type"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert_eq!(ty("timestamp"), "timestamp");
    assert!(
        !fields.iter().any(|f| f["name"] == "received_at"),
        "{fields:?}"
    );
}

#[test]
fn an_unreadable_text_time_is_an_io_error_naming_the_column() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(
        tmp.path().join("signalql.toml"),
        "now = \"2026-06-06T00:00:00Z\"\n[tables.events.columns]\ntimestamp = \"ts\"\n",
    )
    .unwrap();
    let dir = tmp.path().join("events");
    std::fs::create_dir_all(&dir).unwrap();
    let col = |v: &[&str]| Arc::new(StringArray::from(v.to_vec())) as ArrayRef;
    let batch = RecordBatch::try_new(
        Arc::new(Schema::new(vec![
            Field::new(
                "event_name",
                datafusion::arrow::datatypes::DataType::Utf8,
                false,
            ),
            Field::new("ts", datafusion::arrow::datatypes::DataType::Utf8, true),
        ])),
        vec![
            col(&["a", "b"]),
            col(&["2026-06-05T10:00:00+02:00", "last tuesday"]),
        ],
    )
    .unwrap();
    let file = std::fs::File::create(dir.join("part-0.parquet")).unwrap();
    let mut w =
        datafusion::parquet::arrow::ArrowWriter::try_new(file, batch.schema(), None).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
    let err = crate::common::rt()
        .block_on(async {
            let engine = Engine::open_with(tmp.path(), EngineOptions::default())?;
            engine
                .query("FROM events DURING LAST 3 d RETURN count")
                .await
        })
        .unwrap_err();
    assert_eq!(err.code(), "io_error", "{err}");
    let m = err.to_string();
    assert!(
        m.contains("timestamp of the events table (file column ts)") && m.contains("last tuesday"),
        "{m}"
    );
    // The file holding the value is named, relative to the root.
    let json = err.to_json();
    assert_eq!(json["error"]["file"], "events/part-0.parquet", "{json}");
}

/// CONTEXT FOR on a root whose context store cannot be written (here `contexts` is a file, as
/// good as a read-only lake: the tests run as root, so permissions would not stop them): the
/// bundle is returned and says it was not stored; EXPLAIN CONTEXT of it is unknown_context.
/// With `[context] store` naming a writable folder, it is stored there.
#[test]
fn an_unwritable_root_still_answers_context_and_a_configured_store_keeps_bundles() {
    let tmp = foreign("objects");
    std::fs::write(tmp.path().join("contexts"), "not a folder").unwrap();
    let run = |root: &Path| {
        crate::common::rt().block_on(async {
            let engine = Engine::open_with(root, EngineOptions::default())?;
            let bundle = match engine.answer(r#"CONTEXT FOR "parquet storage""#).await? {
                signalql::Answer::Bundle(b) => *b,
                _ => panic!("CONTEXT FOR gives a bundle"),
            };
            let explained = engine.explain_context(&bundle.id).await;
            Ok::<_, signalql::Error>((bundle, explained))
        })
    };
    let (bundle, explained) = run(tmp.path()).unwrap();
    assert_eq!(bundle.items[0].object, "object://doc-a@1");
    assert_eq!(bundle.metadata.stored_in, None);
    assert!(bundle.metadata.not_stored.is_some());
    assert_eq!(explained.unwrap_err().code(), "unknown_context");

    let store = tempfile::tempdir().unwrap();
    let config = tmp.path().join("signalql.toml");
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str(&format!(
        "[context]\nstore = {:?}\n",
        store.path().display().to_string()
    ));
    std::fs::write(&config, text).unwrap();
    let (again, explained) = run(tmp.path()).unwrap();
    assert_eq!(
        again.id, bundle.id,
        "the address does not depend on where it is stored"
    );
    assert!(again.metadata.stored_in.is_some() && again.metadata.not_stored.is_none());
    assert!(explained.is_ok());
    let stored = store.path().join("contexts").join(format!(
        "{}.json",
        bundle.id.trim_start_matches("context://")
    ));
    assert!(stored.exists(), "{}", stored.display());
}

/// Rows in the Parquet files under `dir` (their footers), recursively.
fn footer_rows(dir: &Path) -> i64 {
    use datafusion::parquet::file::reader::{FileReader, SerializedFileReader};
    let mut n = 0;
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            n += footer_rows(&p);
        } else if p.extension().is_some_and(|x| x == "parquet") {
            let r = SerializedFileReader::new(std::fs::File::open(&p).unwrap()).unwrap();
            n += r.metadata().file_metadata().num_rows();
        }
    }
    n
}

/// A DURING window over a table whose time partition is `dt` reads only the folders of the
/// days it touches: the scan counts of the envelope are the rows of those files.
#[test]
fn a_window_prunes_the_date_partitions_it_does_not_touch() {
    let tmp = foreign("hive");
    let events = tmp.path().join("events");
    let day = footer_rows(&events.join("dt=2026-06-03"));
    let all = footer_rows(&events);
    assert!(day > 0 && day < all, "{day} of {all}");
    let run = |q: &str| {
        crate::common::rt()
            .block_on(async {
                let engine = Engine::open_with(tmp.path(), EngineOptions::default())?;
                engine.query(q).await
            })
            .unwrap()
    };
    let one = run(
        r#"FROM events DURING BETWEEN "2026-06-03T00:00:00Z" AND "2026-06-04T00:00:00Z" RETURN count"#,
    );
    let json = serde_json::to_value(&one).unwrap();
    assert_eq!(
        json["rows"][0][0], day,
        "every event of the day is in its folder"
    );
    assert_eq!(json["metadata"]["cost_estimate"]["scanned_rows"], day);
    let every = run("FROM events RETURN count");
    let json = serde_json::to_value(&every).unwrap();
    assert_eq!(json["rows"][0][0], all);
    assert_eq!(json["metadata"]["cost_estimate"]["scanned_rows"], all);

    // The other days' files are not even opened: with one of them corrupt, a fresh engine
    // still answers for 2026-06-03, and only a query over every day meets the bad file.
    let bad = events.join("dt=2026-06-01/platform=ios/part-0.parquet");
    std::fs::write(&bad, b"PAR1 not a parquet file at all PAR1").unwrap();
    let one = run(
        r#"FROM events DURING BETWEEN "2026-06-03T00:00:00Z" AND "2026-06-04T00:00:00Z" RETURN count"#,
    );
    assert_eq!(serde_json::to_value(&one).unwrap()["rows"][0][0], day);
    let err = crate::common::rt()
        .block_on(async {
            let engine = Engine::open_with(tmp.path(), EngineOptions::default())?;
            engine.query("FROM events RETURN count").await
        })
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("dt=2026-06-01/platform=ios/part-0.parquet"),
        "{err}"
    );
}

/// `[tables.events] path = "s3://…"`: a local dataset root whose events are a Segment export
/// in a bucket of their own, read with the mapping, gives the answer the same files give
/// under the root (golden `foreign/segment_by_platform`).
#[test]
fn a_table_path_on_s3_outside_the_root_is_read_through_its_mapping() {
    use crate::common::s3::S3Server;
    let local = foreign("segment");
    let s3 = S3Server::start();
    s3.create_bucket("exports");
    s3.upload_dir(
        &local.path().join("raw/tracks"),
        "exports",
        "segment/tracks",
    );
    let elsewhere = tempfile::tempdir().unwrap();
    let config = std::fs::read_to_string(local.path().join("signalql.toml"))
        .unwrap()
        .replace(
            "path = \"raw/tracks\"",
            "path = \"s3://exports/segment/tracks\"",
        );
    assert!(config.contains("s3://exports"));
    std::fs::write(elsewhere.path().join("signalql.toml"), config).unwrap();
    let q = "FROM events DURING LAST 7 d GROUP BY properties.platform RETURN properties.platform, count, count_distinct(user_id)";
    let run = |root: &Path| {
        let options = EngineOptions {
            storage: s3.storage(),
            ..Default::default()
        };
        crate::common::rt()
            .block_on(async {
                let engine = Engine::open_with(root, options)?;
                engine.query(q).await
            })
            .unwrap()
    };
    let remote = serde_json::to_value(run(elsewhere.path())).unwrap();
    let here = serde_json::to_value(run(local.path())).unwrap();
    assert_eq!(remote["rows"], here["rows"]);
    assert_eq!(remote["rows"].as_array().unwrap().len(), 2, "{remote}");
}

/// `[context] store = "s3://…"`: a local root whose bundles are kept in a bucket.
#[test]
fn a_context_store_on_s3_keeps_the_bundles_of_a_local_root() {
    use crate::common::s3::S3Server;
    let tmp = foreign("objects");
    let s3 = S3Server::start();
    s3.create_bucket("bundles");
    let config = tmp.path().join("signalql.toml");
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str("[context]\nstore = \"s3://bundles/team\"\n");
    std::fs::write(&config, text).unwrap();
    let options = EngineOptions {
        storage: s3.storage(),
        ..Default::default()
    };
    let (bundle, explained) = crate::common::rt()
        .block_on(async {
            let engine = Engine::open_with(tmp.path(), options)?;
            let bundle = match engine.answer(r#"CONTEXT FOR "parquet storage""#).await? {
                signalql::Answer::Bundle(b) => *b,
                _ => panic!("CONTEXT FOR gives a bundle"),
            };
            let explained = engine.explain_context(&bundle.id).await;
            Ok::<_, signalql::Error>((bundle, explained))
        })
        .unwrap();
    assert_eq!(
        bundle.metadata.stored_in.as_deref(),
        Some("s3://bundles/team/contexts/")
    );
    assert!(explained.is_ok());
    let key = format!(
        "team/contexts/{}.json",
        bundle.id.trim_start_matches("context://")
    );
    assert!(
        s3.get("bundles", &key).is_some(),
        "{:?}",
        s3.keys("bundles", "")
    );
    assert!(!tmp.path().join("contexts").exists());
}

/// Object tables as DESIGN.md §3 lists them, written by pyarrow in the encodings other tools
/// use: `python3 -c FOREIGN_OBJECTS ROOT STRINGS TIMES OWN` with STRINGS `large_string` or
/// `string_view`, TIMES `ns` (no zone) or `ms_tz` (+02:00), and OWN `1` to add the two columns
/// signalql's ingest writes besides (`recorded_at`, `source_path`, and `tombstoned_at`).
const FOREIGN_OBJECTS: &str = r#"
import datetime as dt, hashlib, pathlib, sys
import pyarrow as pa, pyarrow.parquet as pq
root, strings, times, own = pathlib.Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4] == "1"
S = {"large_string": pa.large_string(), "string_view": pa.string_view()}[strings]
T = {"ns": pa.timestamp("ns"), "ms_tz": pa.timestamp("ms", tz="+02:00")}[times]
t0 = dt.datetime(2026, 5, 1, tzinfo=dt.timezone.utc)
docs = [("doc-a", "Parquet storage layout", "Parquet files hold the event tables; storage is columnar."),
        ("doc-b", "Funnel counting", "A funnel counts users who reach each step.")]
n = len(docs)
at = pa.array([t0 + dt.timedelta(days=i) for i in range(n)], T)
s = lambda v: pa.array(v, S)
def write(table, cols):
    (root / table).mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(cols), root / table / "part-0.parquet")
objects = {"object_id": s([d[0] for d in docs]), "project": s([None] * n),
           "kind": s(["note"] * n), "title": s([d[1] for d in docs]), "created_at": at}
if own:
    objects |= {"tombstoned_at": pa.array([None] * n, T), "recorded_at": at,
                "source_path": s([f"elsewhere/{d[0]}.md" for d in docs])}
write("objects", objects)
write("revisions", {"object_id": s([d[0] for d in docs]), "revision": pa.array([1] * n, pa.int32()),
    "created_at": at, "origin": s(["import"] * n), "trust": s(["verified"] * n),
    "validation": s(["none"] * n), "roles": pa.array([["data"]] * n, pa.list_(S)),
    "state": s(["current"] * n)})
write("representations", {"object_id": s([d[0] for d in docs]), "revision": pa.array([1] * n, pa.int32()),
    "name": s(["text"] * n), "media_type": s(["text/markdown"] * n),
    "content": pa.array([d[2] for d in docs], pa.large_string()),
    "content_hash": s([hashlib.sha256(d[2].encode()).hexdigest() for d in docs])})
"#;

/// `signalql ingest objects` appends to object tables other tools wrote, whatever their string
/// and time encodings, with or without the columns its own ingest adds (it once panicked on
/// large_string, and refused tables without `recorded_at`); a second run finds nothing new,
/// and CONTEXT FOR then reads the other tool's objects (recorded when created) beside the
/// ingested one.
#[test]
fn ingest_objects_appends_to_object_tables_other_tools_wrote() {
    crate::common::python_package("pyarrow", "pyarrow>=20");
    for (strings, times, own) in [
        ("large_string", "ns", "0"),
        ("large_string", "ns", "1"),
        ("string_view", "ms_tz", "0"),
        ("string_view", "ms_tz", "1"),
    ] {
        let case = format!("{strings} {times} own={own}");
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("store");
        let made = std::process::Command::new("python3")
            .args(["-c", FOREIGN_OBJECTS])
            .arg(&root)
            .args([strings, times, own])
            .output()
            .unwrap();
        assert!(
            made.status.success(),
            "{case}: {}",
            String::from_utf8_lossy(&made.stderr)
        );
        let docs = tmp.path().join("docs");
        std::fs::create_dir_all(&docs).unwrap();
        std::fs::write(
            docs.join("pricing.md"),
            "# Storage pricing\n\nParquet storage costs per gigabyte.\n",
        )
        .unwrap();
        let ingest = || {
            std::process::Command::new(env!("CARGO_BIN_EXE_signalql"))
                .args(["ingest", "objects"])
                .arg(&docs)
                .arg("--data")
                .arg(&root)
                .args(["--now", "2026-06-02T00:00:00Z"])
                .output()
                .unwrap()
        };
        let out = ingest();
        let said = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(
            out.status.success(),
            "{case}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            said.starts_with("1 file(s): 1 new, 0 revised"),
            "{case}: {said}"
        );
        // The second run reads the other tool's rows and its own back: nothing new.
        let out = ingest();
        let said = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(
            out.status.success() && said.contains("0 new, 0 revised, 1 unchanged"),
            "{case}: {said} {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let ingested = signalql::catalog::objects::ingest::object_id(None, "docs/pricing.md");
        let bundle = crate::common::rt().block_on(async {
            let engine = Engine::open_with(
                &root,
                EngineOptions {
                    now: Some("2026-06-03T00:00:00Z".parse().unwrap()),
                    ..Default::default()
                },
            )
            .unwrap();
            match engine.answer(r#"CONTEXT FOR "parquet storage""#).await {
                Ok(signalql::Answer::Bundle(b)) => *b,
                other => panic!("{case}: {other:?}"),
            }
        });
        let objects: Vec<&str> = bundle.items.iter().map(|i| i.object.as_str()).collect();
        assert!(
            objects.iter().any(|o| o.contains("doc-a"))
                && objects.iter().any(|o| o.contains(&ingested)),
            "{case}: {objects:?}"
        );
        assert!(
            !objects.iter().any(|o| o.contains("doc-b")),
            "doc-b holds no task term: {objects:?}"
        );
    }
}
