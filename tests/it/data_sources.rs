//! Datasets beyond the happy path: `properties` stored as a map or as JSON text (same answers as
//! the struct form, computed by hand), and bad data — a missing dataset or table, a corrupt
//! Parquet file, a properties column of an unexpected type — answered with a clear error.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use datafusion::arrow::array::{
    ArrayRef, Int64Array, MapBuilder, RecordBatch, StringArray, StringBuilder,
    TimestampMicrosecondArray,
};
use datafusion::arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use serde_json::{Value, json};
use signalql::catalog::write::write_parquet_atomic;
use signalql::{Engine, EngineOptions};

/// Four events on 2026-01-0{1,2,3,4} at noon: (page_view u1 {plan: free, amount: 5}),
/// (purchase u2 {plan: pro, amount: 49}), (purchase u3 {plan: pro, amount: 49.5}),
/// (page_view NULL user, no properties).
fn base_columns() -> Vec<(&'static str, ArrayRef)> {
    let day = 86_400_000_000i64;
    let noon = 1_767_268_800_000_000i64; // 2026-01-01T12:00:00Z
    vec![
        (
            "event_name",
            Arc::new(StringArray::from(vec![
                "page_view",
                "purchase",
                "purchase",
                "page_view",
            ])) as ArrayRef,
        ),
        (
            "user_id",
            Arc::new(StringArray::from(vec![
                Some("u1"),
                Some("u2"),
                Some("u3"),
                None,
            ])),
        ),
        (
            "session_id",
            Arc::new(StringArray::from(vec![
                Some("s1"),
                Some("s2"),
                Some("s3"),
                None,
            ])),
        ),
        (
            "timestamp",
            Arc::new(
                TimestampMicrosecondArray::from(vec![
                    noon,
                    noon + day,
                    noon + 2 * day,
                    noon + 3 * day,
                ])
                .with_timezone("UTC"),
            ),
        ),
    ]
}

fn write_events(root: &Path, properties: ArrayRef) {
    let mut cols = base_columns();
    cols.push(("properties", properties));
    let schema = Arc::new(Schema::new(
        cols.iter()
            .map(|(n, a)| Field::new(*n, a.data_type().clone(), true))
            .collect::<Vec<_>>(),
    ));
    let batch =
        RecordBatch::try_new(schema.clone(), cols.into_iter().map(|(_, a)| a).collect()).unwrap();
    write_parquet_atomic(&root.join("events"), "part-0", schema, &[batch]).unwrap();
    std::fs::write(
        root.join("signalql.toml"),
        "now = \"2026-01-10T00:00:00Z\"\n",
    )
    .unwrap();
}

fn map_properties() -> ArrayRef {
    let mut b = MapBuilder::new(None, StringBuilder::new(), StringBuilder::new());
    for entries in [
        vec![("plan", "free"), ("amount", "5")],
        vec![("plan", "pro"), ("amount", "49")],
        vec![("plan", "pro"), ("amount", "49.5")],
    ] {
        for (k, v) in entries {
            b.keys().append_value(k);
            b.values().append_value(v);
        }
        b.append(true).unwrap();
    }
    b.append(false).unwrap();
    Arc::new(b.finish())
}

fn json_properties() -> ArrayRef {
    Arc::new(StringArray::from(vec![
        Some(r#"{"plan": "free", "amount": 5}"#),
        Some(r#"{"plan": "pro", "amount": 49}"#),
        Some(r#"{"plan": "pro", "amount": 49.5, "nested": {"a": 1}}"#),
        None,
    ]))
}

async fn rows(root: &Path, query: &str) -> Value {
    let engine = Engine::open_with(root, EngineOptions::default()).unwrap();
    let env = engine
        .query(query)
        .await
        .unwrap_or_else(|e| panic!("{query}: {e}"));
    json!(env.rows)
}

async fn error(root: &Path, query: &str) -> Value {
    let result = match Engine::open_with(root, EngineOptions::default()) {
        Ok(engine) => engine.query(query).await,
        Err(e) => Err(e),
    };
    match result {
        Ok(env) => panic!("{query}: expected an error, got {:?}", env.rows),
        Err(e) => e.to_json()["error"].clone(),
    }
}

/// The same questions have the same answers whichever way properties are stored.
async fn check_encoding(properties: ArrayRef) {
    let dir = tempfile::tempdir().unwrap();
    write_events(dir.path(), properties);
    let root = dir.path();
    // plan = "pro": u2 and u3.
    assert_eq!(
        rows(
            root,
            r#"FROM events WHERE properties.plan = "pro" RETURN count"#
        )
        .await,
        json!([[2]])
    );
    // Numbers compare by value: 49 and 49.5 are > 10; "49" matches the 49 only.
    assert_eq!(
        rows(
            root,
            "FROM events WHERE properties.amount > 10 RETURN count"
        )
        .await,
        json!([[2]])
    );
    assert_eq!(
        rows(
            root,
            r#"FROM events WHERE properties.amount = "49" RETURN count"#
        )
        .await,
        json!([[1]])
    );
    // sum 5 + 49 + 49.5 = 103.5; the event without properties is NULL, not 0.
    assert_eq!(
        rows(
            root,
            "FROM events RETURN sum(properties.amount), count(properties.plan)"
        )
        .await,
        json!([[103.5, 3]])
    );
    // A missing key is NULL.
    assert_eq!(
        rows(
            root,
            "FROM events WHERE properties.nope IS NULL RETURN count"
        )
        .await,
        json!([[4]])
    );
    assert_eq!(
        rows(
            root,
            "FROM events GROUP BY properties.plan RETURN properties.plan, count"
        )
        .await,
        json!([["free", 1], ["pro", 2], [null, 1]])
    );
}

#[tokio::test]
async fn map_properties_answer_like_struct() {
    check_encoding(map_properties()).await;
}

#[tokio::test]
async fn json_text_properties_answer_like_struct() {
    check_encoding(json_properties()).await;
    let dir = tempfile::tempdir().unwrap();
    write_events(dir.path(), json_properties());
    // A nested object reads as its JSON text, and nested paths chain.
    assert_eq!(
        rows(dir.path(), "FROM events WHERE properties.nested IS NOT NULL RETURN properties.nested, properties.nested.a").await,
        json!([[r#"{"a":1}"#, "1"]])
    );
}

#[tokio::test]
async fn missing_dataset_and_table_are_io_errors() {
    let e = error(
        Path::new("/definitely/not/here"),
        "FROM events RETURN count",
    )
    .await;
    assert_eq!(e["code"], "io_error");
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("/definitely/not/here"),
        "{e}"
    );

    let dir = tempfile::tempdir().unwrap();
    let e = error(dir.path(), "FROM events RETURN count").await;
    assert_eq!(e["code"], "io_error");
    assert!(
        e["message"].as_str().unwrap().contains("no events table"),
        "{e}"
    );
}

#[tokio::test]
async fn corrupt_parquet_is_an_io_error() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("events")).unwrap();
    std::fs::write(
        dir.path().join("events/part-0.parquet"),
        b"PAR1 this is not parquet at all",
    )
    .unwrap();
    let e = error(dir.path(), "FROM events RETURN count").await;
    assert_eq!(e["code"], "io_error", "{e}");
    assert!(e["message"].as_str().unwrap().contains("events"), "{e}");

    // A good file next to a truncated one: the query fails rather than answering from half the data.
    let dir = tempfile::tempdir().unwrap();
    write_events(dir.path(), json_properties());
    let good = std::fs::read(dir.path().join("events/part-0.parquet")).unwrap();
    std::fs::write(
        dir.path().join("events/part-1.parquet"),
        &good[..good.len() / 2],
    )
    .unwrap();
    let e = error(dir.path(), "FROM events RETURN count").await;
    assert_eq!(e["code"], "io_error", "{e}");
}

#[tokio::test]
async fn unexpected_properties_type_is_a_type_error() {
    let dir = tempfile::tempdir().unwrap();
    write_events(dir.path(), Arc::new(Int64Array::from(vec![1, 2, 3, 4])));
    let e = error(dir.path(), "FROM events RETURN count").await;
    assert_eq!(e["code"], "type_error", "{e}");
    assert!(e["message"].as_str().unwrap().contains("properties"), "{e}");
}

#[tokio::test]
async fn bad_signalql_toml_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    write_events(dir.path(), json_properties());
    std::fs::write(dir.path().join("signalql.toml"), "now = 5\n").unwrap();
    let e = error(dir.path(), "FROM events RETURN count").await;
    assert_eq!(e["code"], "io_error", "{e}");
    assert!(
        e["message"].as_str().unwrap().contains("signalql.toml"),
        "{e}"
    );
}

#[test]
fn timestamp_type_is_microsecond_utc() {
    // The columns written above use the type the engine compares in.
    let (_, ts) = &base_columns()[3];
    assert_eq!(
        ts.data_type(),
        &DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()))
    );
}

/// Two JSONL files to ingest one after the other, each lacking the other's property key:
/// a = one `view` {plan: pro}; b = two `buy`, one {amount: 7}, one without properties. Returns
/// them and an empty dataset root, all under `dir`.
fn files_with_different_keys(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let a = dir.join("a.jsonl");
    let b = dir.join("b.jsonl");
    std::fs::write(
        &a,
        r#"{"event_name":"view","user_id":"u1","timestamp":"2026-01-01T00:00:00Z","properties":{"plan":"pro"}}
"#,
    )
    .unwrap();
    std::fs::write(
        &b,
        r#"{"event_name":"buy","user_id":"u2","timestamp":"2026-01-02T00:00:00Z","properties":{"amount":7}}
{"event_name":"buy","user_id":"u3","timestamp":"2026-01-03T00:00:00Z"}
"#,
    )
    .unwrap();
    let root = dir.join("ds");
    std::fs::create_dir_all(&root).unwrap();
    (a, b, root)
}

#[tokio::test]
async fn ingests_with_different_property_keys_read_together() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b, root) = files_with_different_keys(dir.path());
    signalql::catalog::ingest::ingest_events(&root, &[a]).unwrap();
    signalql::catalog::ingest::ingest_events(&root, &[b]).unwrap();
    // Each file lacks the other's key: both read as NULL there.
    assert_eq!(
        rows(&root, "FROM events GROUP BY event_name RETURN event_name, count, count(properties.plan), sum(properties.amount)").await,
        json!([["buy", 2, 0, 7], ["view", 1, 1, null]])
    );
}

/// An engine reuses a table it opened while the table's files are the same, and opens it
/// again when a file arrives: a key only the new file has is then readable on the same engine.
#[tokio::test]
async fn one_engine_sees_files_ingested_after_it_opened_the_table() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b, root) = files_with_different_keys(dir.path());
    signalql::catalog::ingest::ingest_events(&root, &[a]).unwrap();
    let engine = Engine::open_with(&root, EngineOptions::default()).unwrap();
    let ctx = engine.session();
    let first = engine.dataset().events(ctx).await.unwrap();
    let again = engine.dataset().events(ctx).await.unwrap();
    assert!(Arc::ptr_eq(&first.provider, &again.provider), "reused");
    let q = "FROM events GROUP BY event_name RETURN event_name, count";
    assert_eq!(
        json!(engine.query(q).await.unwrap().rows),
        json!([["view", 1]])
    );
    // A key no file has reads as NULL (DESIGN: missing keys are NULL).
    let sum = "FROM events RETURN sum(properties.amount)";
    assert_eq!(
        json!(engine.query(sum).await.unwrap().rows),
        json!([[null]])
    );

    signalql::catalog::ingest::ingest_events(&root, &[b]).unwrap();
    let reopened = engine.dataset().events(ctx).await.unwrap();
    assert!(
        !Arc::ptr_eq(&first.provider, &reopened.provider),
        "reopened"
    );
    assert_eq!(reopened.files.len(), 2);
    assert_eq!(
        json!(engine.query(q).await.unwrap().rows),
        json!([["buy", 2], ["view", 1]])
    );
    assert_eq!(json!(engine.query(sum).await.unwrap().rows), json!([[7]]));
}

#[tokio::test]
async fn datafusion_settings_from_signalql_toml() {
    let dir = tempfile::tempdir().unwrap();
    write_events(dir.path(), json_properties());
    let toml = "now = \"2026-01-10T00:00:00Z\"\n[datafusion]\n\"datafusion.execution.target_partitions\" = \"1\"\n\"datafusion.execution.parquet.pushdown_filters\" = \"false\"\n";
    std::fs::write(dir.path().join("signalql.toml"), toml).unwrap();
    let engine = Engine::open_with(dir.path(), EngineOptions::default()).unwrap();
    assert_eq!(engine.session().state().config().target_partitions(), 1);
    assert_eq!(
        rows(
            dir.path(),
            r#"FROM events WHERE properties.plan = "pro" RETURN count"#
        )
        .await,
        json!([[2]])
    );

    std::fs::write(
        dir.path().join("signalql.toml"),
        "[datafusion]\n\"datafusion.no.such.key\" = \"1\"\n",
    )
    .unwrap();
    let e = error(dir.path(), "FROM events RETURN count").await;
    assert_eq!(e["code"], "io_error", "{e}");
    assert!(
        e["message"].as_str().unwrap().contains("signalql.toml"),
        "{e}"
    );
}
