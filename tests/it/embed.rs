//! Embedding: signalql's functions from a user's own DataFusion SQL, and SignalQL over a
//! context and tables the user built (`Engine::with_session`).

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, RecordBatch, StringArray, TimestampMicrosecondArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use datafusion::datasource::MemTable;
use datafusion::prelude::{ParquetReadOptions, SessionContext};
use signalql::{Engine, EngineOptions};

async fn one_row(ctx: &SessionContext, sql: &str) -> Vec<String> {
    let batches = ctx.sql(sql).await.unwrap().collect().await.unwrap();
    let b = &batches[0];
    (0..b.num_columns())
        .map(|c| datafusion::arrow::util::display::array_value_to_string(b.column(c), 0).unwrap())
        .collect()
}

#[tokio::test]
async fn functions_work_from_plain_sql() {
    let ctx = SessionContext::new();
    signalql::register(&ctx);
    ctx.register_parquet(
        "events",
        signalql::sample_dataset()
            .join("events")
            .to_string_lossy()
            .as_ref(),
        ParquetReadOptions::default(),
    )
    .await
    .unwrap();
    // By hand: 5 characters are 2 tokens; "object storage" against the title "Object storage"
    // is (3 + 3) / 6 = 1 000 000; y = 2x + 1 has slope 2 and mean 3.
    let r = one_row(
        &ctx,
        "SELECT token_estimate('abcde'), lexical_score('object storage', 'Object storage', NULL, NULL), \
                json_get_text('{\"a\": 7}', 'a')",
    )
    .await;
    assert_eq!(r, ["2", "1000000", "7"]);
    let r = one_row(
        &ctx,
        "SELECT trend_slope(x, y, 3, false)['slope'], trend_slope(x, y, 3, false)['mean'] \
         FROM (VALUES (0.0, 1.0), (1.0, 3.0), (2.0, 5.0)) AS t(x, y)",
    )
    .await;
    assert_eq!(r, ["2.0", "3.0"]);
    // Purchases with an amount, by DuckDB over the same file: 447 values, sum 25189.22,
    // median (quantile_cont 0.5) 40.17.
    let r = one_row(
        &ctx,
        "SELECT stats(properties['amount'])['n'], round(stats(properties['amount'])['sum'], 2), \
                percentile(properties['amount'], 0.5) \
         FROM events WHERE event_name = 'purchase'",
    )
    .await;
    assert_eq!(r, ["447", "25189.22", "40.17"]);
}

#[tokio::test]
async fn signalql_runs_on_the_users_context_and_tables() {
    // The application's own events table, in memory: three events, two in the last day.
    let ts = DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()));
    let schema = Arc::new(Schema::new(vec![
        Field::new("event_name", DataType::Utf8, false),
        Field::new("user_id", DataType::Utf8, true),
        Field::new("timestamp", ts, false),
    ]));
    let at = |s: &str| {
        chrono::DateTime::parse_from_rfc3339(s)
            .unwrap()
            .timestamp_micros()
    };
    let batch = RecordBatch::try_new(
        Arc::clone(&schema),
        vec![
            Arc::new(StringArray::from(vec!["signup", "signup", "login"])) as ArrayRef,
            Arc::new(StringArray::from(vec![Some("a"), Some("b"), Some("a")])),
            Arc::new(
                TimestampMicrosecondArray::from(vec![
                    at("2026-01-09T12:00:00Z"),
                    at("2026-01-01T00:00:00Z"),
                    at("2026-01-09T13:00:00Z"),
                ])
                .with_timezone("UTC"),
            ),
        ],
    )
    .unwrap();
    let ctx = SessionContext::new();
    ctx.register_table(
        "events",
        Arc::new(MemTable::try_new(schema, vec![vec![batch]]).unwrap()),
    )
    .unwrap();
    // The root holds only configuration: no events folder.
    let root = tempfile::tempdir().unwrap();
    let now = chrono::DateTime::parse_from_rfc3339("2026-01-10T00:00:00Z")
        .unwrap()
        .with_timezone(&chrono::Utc);
    let engine = Engine::with_session(
        ctx.clone(),
        root.path(),
        EngineOptions {
            now: Some(now),
            ..Default::default()
        },
    )
    .unwrap();
    let env = engine
        .query("FROM events DURING LAST 1 d GROUP BY event_name RETURN event_name, count")
        .await
        .unwrap();
    assert_eq!(
        env.rows,
        vec![
            vec![serde_json::json!("login"), serde_json::json!(1)],
            vec![serde_json::json!("signup"), serde_json::json!(1)],
        ]
    );
    // A funnel over the user's table (no file list: ties by timestamp only).
    let env = engine
        .query(r#"FUNNEL "signup" -> "login" FROM events DURING LAST 30 d WITHIN 1 d"#)
        .await
        .unwrap();
    let users: Vec<_> = env.rows.iter().map(|r| r[2].clone()).collect();
    assert_eq!(users, [serde_json::json!(2), serde_json::json!(1)]);
    // The user's context can call signalql's functions now.
    let r = one_row(
        &ctx,
        "SELECT token_estimate(event_name) FROM events LIMIT 1",
    )
    .await;
    assert_eq!(r, ["2"]);
}
