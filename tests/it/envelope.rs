//! The typed result envelope: truncation at the result-row cap, limit_applied, ordered, units
//! from signalql.toml, column types, and the compiled SQL digest.

use serde_json::json;
use signalql::{Engine, Envelope};

async fn sample(query: &str) -> Envelope {
    let engine = Engine::open(signalql::sample_dataset()).unwrap();
    engine
        .query(query)
        .await
        .unwrap_or_else(|e| panic!("{query}: {e}"))
}

#[tokio::test]
async fn result_row_cap_truncates_and_says_so() {
    // The sample has 150 000 events (signalql gen --rows 150000), far above the 10 000 cap.
    let env = sample("FROM events RETURN user_id, timestamp").await;
    assert_eq!(env.rows.len(), 10_000);
    assert_eq!(env.metadata.row_count, 10_000);
    assert!(env.metadata.truncated);
    assert_eq!(env.metadata.limit_applied, 10_000);

    let env = sample("FROM events RETURN user_id, timestamp LIMIT 20000").await;
    assert_eq!(env.metadata.row_count, 10_000);
    assert!(env.metadata.truncated);
    assert_eq!(env.metadata.limit_applied, 10_000);

    let env = sample("FROM events RETURN user_id, timestamp ORDER BY timestamp DESC LIMIT 5").await;
    assert_eq!(env.metadata.row_count, 5);
    assert!(!env.metadata.truncated);
    assert_eq!(env.metadata.limit_applied, 5);
    assert!(env.metadata.ordered);
    // Descending timestamps, all before T.
    let ts: Vec<&str> = env.rows.iter().map(|r| r[1].as_str().unwrap()).collect();
    let mut sorted = ts.clone();
    sorted.sort_by(|a, b| b.cmp(a));
    assert_eq!(ts, sorted);
    assert!(ts[0] < "2026-06-13T00:00:00Z");

    // Exactly the cap is not truncation.
    let env = sample("FROM events RETURN user_id LIMIT 10000").await;
    assert_eq!(env.metadata.row_count, 10_000);
    assert!(!env.metadata.truncated);
}

#[tokio::test]
async fn column_types_and_units() {
    let env = sample(
        r#"FROM events WHERE event_name = "purchase" DURING LAST 30 d BUCKET BY w GROUP BY properties.platform
           RETURN timestamp, properties.platform, count, count_distinct(user_id), sum(properties.amount),
                  variance(properties.amount), stats(properties.amount)"#,
    )
    .await;
    let cols: Vec<_> = env
        .columns
        .iter()
        .map(|c| json!([c.name, c.data_type, c.unit]))
        .collect();
    assert_eq!(
        cols,
        vec![
            json!(["timestamp", "timestamp", null]),
            json!(["properties.platform", "string", null]),
            json!(["count", "integer", "events"]),
            json!(["count_distinct(user_id)", "integer", "users"]),
            json!(["sum(properties.amount)", "number", "USD"]),
            json!(["variance(properties.amount)", "number", "USD^2"]),
            json!(["stats(properties.amount)", "struct", "USD"]),
        ]
    );
    // A struct value is a JSON object with the eight sufficient statistics.
    let stats = env
        .rows
        .iter()
        .find_map(|r| r[6].as_object().cloned())
        .unwrap();
    let keys: Vec<&str> = stats.keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        [
            "n", "sum", "sum_sq", "mean", "variance", "stddev", "min", "max"
        ]
    );
}

#[tokio::test]
async fn digest_is_stable_and_depends_on_the_plan() {
    let a = sample("FROM events DURING LAST 7 d RETURN count").await;
    let b = sample("from events during last 7 DAYS return count").await;
    let c = sample("FROM events DURING LAST 8 d RETURN count").await;
    let d = |e: &Envelope| e.metadata.compiled_sql_digest.clone().unwrap();
    assert_eq!(d(&a), d(&b), "same query, same plan, same digest");
    assert_ne!(d(&a), d(&c));
}

#[tokio::test]
async fn staged_execution_equals_the_single_plan() {
    // A dense series per group runs its aggregate once, then the rest over the result; the
    // single logical plan (what compile shows and the digest covers) must give the same rows.
    let engine = Engine::open(signalql::sample_dataset()).unwrap();
    for q in [
        r#"FROM events WHERE event_name = "session_start" DURING LAST 30 d BUCKET BY d GROUP BY properties.platform RETURN timestamp, properties.platform, count_distinct(user_id)"#,
        r#"FROM events DURING LAST 8 w BUCKET BY w GROUP BY properties.plan, event_name HAVING count > 5 RETURN timestamp, event_name, properties.plan, count, max(properties.amount) ORDER BY count DESC LIMIT 40"#,
    ] {
        let compiled = engine.compile(q).await.unwrap();
        assert!(compiled.lowered.staged.is_some(), "{q} should be staged");
        let staged = engine.query(q).await.unwrap();
        let batches = engine
            .session()
            .execute_logical_plan(compiled.lowered.plan.clone())
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
        let single = signalql::envelope::rows(&batches, usize::MAX).unwrap();
        assert!(!single.is_empty());
        assert_eq!(staged.rows, single, "{q}");
    }
}

#[tokio::test]
async fn funnel_envelope_units_types_and_order() {
    let env = sample(
        r#"FUNNEL "visit" -> "signup" -> "activated" FROM events DURING LAST 28 d WITHIN 7 d GROUP BY properties.plan"#,
    )
    .await;
    let cols: Vec<(String, String, Option<String>)> = env
        .columns
        .iter()
        .map(|c| (c.name.clone(), c.data_type.clone(), c.unit.clone()))
        .collect();
    let names: Vec<&str> = cols.iter().map(|c| c.0.as_str()).collect();
    assert_eq!(
        names,
        [
            "properties.plan",
            "step",
            "event",
            "users",
            "conversion_rate",
            "step_conversion_rate",
            "median_seconds_to_convert"
        ]
    );
    assert_eq!(cols[3].2.as_deref(), Some("users"));
    assert_eq!(cols[6].2.as_deref(), Some("s"));
    assert_eq!(cols[1].1, cols[3].1, "step and users are both integers");
    assert!(env.metadata.ordered);
    assert!(!env.metadata.truncated);
    // Three rows per group, steps 1..3 in order.
    assert_eq!(env.rows.len() % 3, 0);
    for (i, row) in env.rows.iter().enumerate() {
        assert_eq!(row[1], json!((i % 3) + 1));
    }
}

#[tokio::test]
async fn sequence_is_capped_at_the_row_limit_and_says_so() {
    let q = r#"FIND sequence WHERE "visit" -> "signup" WITHIN 7 d"#;
    let full = sample(q).await;
    assert!(!full.metadata.truncated);
    assert!(
        full.rows.len() > 50,
        "the sample has {} converting users",
        full.rows.len()
    );
    let ids: Vec<&str> = full.rows.iter().map(|r| r[0].as_str().unwrap()).collect();
    let mut sorted = ids.clone();
    sorted.sort();
    assert_eq!(ids, sorted, "rows are ordered by user_id");

    let mut options = signalql::EngineOptions::default();
    options.limits.max_result_rows = 50;
    let engine = Engine::open_with(signalql::sample_dataset(), options).unwrap();
    let capped = engine.query(q).await.unwrap();
    assert_eq!(capped.rows.len(), 50);
    assert!(capped.metadata.truncated);
    assert_eq!(capped.metadata.limit_applied, 50);
    assert_eq!(capped.rows[..], full.rows[..50]);
}

/// An Arrow answer (`Engine::query_batches`: Parquet output, Python's `to_arrow()`) makes no
/// JSON row: its envelope has none, its batches hold `row_count` rows, and
/// `envelope::with_rows` writes exactly the rows the JSON answer has.
#[tokio::test]
async fn an_arrow_answer_makes_no_json_rows_until_asked() {
    let engine = Engine::open(signalql::sample_dataset()).unwrap();
    for query in [
        "FROM events DURING LAST 7 d GROUP BY event_name RETURN event_name, count ORDER BY count DESC, event_name ASC",
        // Over the 10 000-row cap: truncated alike.
        "FROM events GROUP BY session_id RETURN session_id, count ORDER BY session_id ASC",
    ] {
        let whole = engine.query(query).await.unwrap();
        let (arrow, batches) = engine.query_batches(query).await.unwrap();
        assert!(arrow.rows.is_empty(), "{query}");
        let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
        assert_eq!(rows as u64, whole.metadata.row_count, "{query}");
        assert_eq!(whole.rows.len() as u64, whole.metadata.row_count, "{query}");
        assert_eq!(
            arrow.metadata.truncated, whole.metadata.truncated,
            "{query}"
        );
        let written = signalql::envelope::with_rows(arrow, &batches).unwrap();
        assert_eq!(
            serde_json::to_value(&written).unwrap(),
            serde_json::to_value(&whole).unwrap(),
            "{query}"
        );
    }
    let (truncated, _) = engine
        .query_batches(
            "FROM events GROUP BY session_id RETURN session_id, count ORDER BY session_id ASC",
        )
        .await
        .unwrap();
    assert!(truncated.metadata.truncated);
    assert_eq!(truncated.metadata.row_count, 10_000);
}
