//! Datasets other tools wrote (tests/data/foreign, made by pyarrow; docs/mapping.md): DESCRIBE
//! shows how each field is read, and a value the mapping cannot read is an error naming the
//! column. Their query results are golden cases (tests/golden/foreign, DuckDB oracle).

use std::path::Path;
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, RecordBatch, StringArray};
use datafusion::arrow::datatypes::{Field, Schema};
use serde_json::Value;
use signalql::{Engine, EngineOptions};

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

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
    let env = rt()
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
    let err = rt()
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
}
