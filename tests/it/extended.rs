//! The extended and capability tiers beyond what golden cases show: WATCH polling as files
//! arrive, metric registries that are wrong in each way, and `metadata.metrics`.

use crate::common;

use std::path::Path;

use chrono::{DateTime, Utc};
use signalql::ast::Statement;
use signalql::watch::Watcher;
use signalql::{Engine, EngineOptions, ErrorKind};

fn at(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

fn engine_at(root: &Path, now: &str) -> Engine {
    Engine::open_with(
        root,
        EngineOptions {
            now: Some(at(now)),
            ..Default::default()
        },
    )
    .unwrap()
}

/// Ingest `n` error events at `ts` (one new Parquet file).
fn add_errors(root: &Path, name: &str, n: usize, ts: &str) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join(format!("{name}.jsonl"));
    let lines: Vec<String> = (0..n)
        .map(|i| {
            format!(
                r#"{{"event_name": "error", "user_id": "u{i}", "timestamp": "{ts}", "properties": {{"code": 500}}}}"#
            )
        })
        .collect();
    std::fs::write(&file, lines.join("\n")).unwrap();
    signalql::catalog::ingest::ingest_events(root, &[file]).unwrap();
}

fn watch_statement(text: &str) -> signalql::ast::WatchQuery {
    match signalql::parse(text).unwrap() {
        Statement::Watch(w) => w,
        other => panic!("not a WATCH: {other:?}"),
    }
}

#[tokio::test]
async fn watch_alerts_when_files_arrive_and_again_only_after_false() {
    let root = tempfile::tempdir().unwrap();
    add_errors(root.path(), "a", 2, "2026-06-12T23:30:00Z");
    let mut w = Watcher::new(watch_statement(
        r#"WATCH (FROM events WHERE event_name = "error" DURING LAST 1 h RETURN count) WHEN count >= 3"#,
    ));
    let t = "2026-06-13T00:00:00Z";

    // 2 errors in the last hour: false, no alert.
    let engine = engine_at(root.path(), t);
    let p = w.poll(&engine).await.unwrap();
    assert!(!p.holds && p.alert.is_none());

    // A file arrives with 2 more: 4 >= 3 becomes true, one alert with the triggering rows.
    // The same engine polls, as `signalql watch` does: it must see the new file.
    add_errors(root.path(), "b", 2, "2026-06-12T23:45:00Z");
    let p = w.poll(&engine).await.unwrap();
    assert!(p.holds);
    let alert = p.alert.expect("an alert when the condition becomes true");
    assert_eq!(alert.poll, 2);
    assert_eq!(alert.envelope.rows, vec![vec![serde_json::json!(4)]]);
    assert_eq!(alert.condition, "count >= 3");

    // Still true: no second alert.
    let p = w.poll(&engine).await.unwrap();
    assert!(p.holds && p.alert.is_none());

    // Two hours later the window is empty (false); back at T it is true again: a new alert.
    let later = engine_at(root.path(), "2026-06-13T02:00:00Z");
    let p = w.poll(&later).await.unwrap();
    assert!(!p.holds && p.alert.is_none());
    let p = w.poll(&engine).await.unwrap();
    assert_eq!(p.alert.map(|a| a.poll), Some(5));
}

#[tokio::test]
async fn watch_condition_is_checked_per_group() {
    let root = tempfile::tempdir().unwrap();
    add_errors(root.path(), "a", 3, "2026-06-12T23:30:00Z");
    let mut w = Watcher::new(watch_statement(
        r#"WATCH (FROM events DURING LAST 1 d GROUP BY event_name RETURN event_name, count) WHEN count > 2 AND event_name = "error""#,
    ));
    let p = w
        .poll(&engine_at(root.path(), "2026-06-13T00:00:00Z"))
        .await
        .unwrap();
    let rows = p.alert.unwrap().envelope.rows;
    assert_eq!(
        rows,
        vec![vec![serde_json::json!("error"), serde_json::json!(3)]]
    );
}

/// A dataset with the sample's events (linked) and the given metrics.toml.
fn with_metrics(toml: &str) -> tempfile::TempDir {
    let root = common::sample_events_dataset();
    std::fs::write(root.path().join("metrics.toml"), toml).unwrap();
    root
}

async fn metric_error(toml: &str, query: &str) -> signalql::Error {
    let root = with_metrics(toml);
    Engine::open(root.path())
        .unwrap()
        .query(query)
        .await
        .expect_err("the query must fail")
}

#[tokio::test]
async fn metric_registry_errors_are_clear() {
    let cycle = r#"
[[metric]]
name = "a"
version = "1"
expression = "metric(b) + 1"
[[metric]]
name = "b"
version = "1"
expression = "metric(a) * 2"
"#;
    let e = metric_error(cycle, "FROM metric(a) RETURN metric_value").await;
    assert_eq!(e.kind, ErrorKind::Type, "{e}");
    assert!(
        e.message.contains("cycle") && e.message.contains("a → b → a"),
        "{e}"
    );

    let dangling = "[[metric]]\nname = \"c\"\nversion = \"1\"\nexpression = \"metric(zzz)\"\n";
    let e = metric_error(dangling, "FROM metric(c) RETURN metric_value").await;
    assert_eq!(e.kind, ErrorKind::UnknownField, "{e}");
    assert!(e.message.contains("zzz"), "{e}");

    let unbound = "[[metric]]\nname = \"d\"\nversion = \"1\"\nexpression = \"sum(amount_usd)\"\n";
    let e = metric_error(unbound, "FROM events DURING LAST 7 d RETURN metric(d)").await;
    assert_eq!(e.kind, ErrorKind::UnknownField, "{e}");
    assert!(e.message.contains("metric `d` does not bind"), "{e}");
    assert_eq!(e.span.map(|s| (s.line, s.column)), Some((1, 36)));

    let bad = "[[metric]]\nname = \"e\"\nversion = \"1\"\nexpression = \"sum(\"\n";
    let e = metric_error(bad, "FROM metric(e) RETURN metric_value").await;
    assert_eq!(e.kind, ErrorKind::Parse, "{e}");
    assert!(e.message.contains("metrics.toml, metric `e`"), "{e}");

    let filter = "[[metric]]\nname = \"f\"\nversion = \"1\"\nexpression = \"count()\"\nfilter = \"event_name = \"\n";
    let e = metric_error(filter, "FROM metric(f) RETURN metric_value").await;
    assert_eq!(e.kind, ErrorKind::Parse, "{e}");

    let other_source = "[[metric]]\nname = \"g\"\nversion = \"1\"\nexpression = \"count()\"\nsource = \"entity(analytics.user)\"\n";
    let e = metric_error(other_source, "FROM events RETURN metric(g)").await;
    assert_eq!(e.kind, ErrorKind::Type, "{e}");

    let twice = "[[metric]]\nname = \"h\"\nversion = \"1\"\nexpression = \"count()\"\n[[metric]]\nname = \"h\"\nversion = \"2\"\nexpression = \"count()\"\n";
    let e = metric_error(twice, "FROM metric(h) RETURN metric_value").await;
    assert!(e.message.contains("defined twice"), "{e}");

    let unknown_key = "[[metric]]\nname = \"i\"\nversion = \"1\"\nexpresion = \"count()\"\n";
    let e = metric_error(unknown_key, "FROM metric(i) RETURN metric_value").await;
    assert!(e.message.contains("metrics.toml"), "{e}");
}

#[tokio::test]
async fn metric_arithmetic_and_division_by_zero() {
    // 2 · count() − count() / 0: the division is NULL, so the whole value is NULL; a
    // negated count is the count with its sign flipped.
    let toml = r#"
[[metric]]
name = "n"
version = "1"
expression = "count()"
filter = 'event_name = "purchase"'
[[metric]]
name = "zero"
version = "1"
expression = "count()"
filter = 'event_name = "no_such_event"'
[[metric]]
name = "broken"
version = "1"
expression = "2 * metric(n) - metric(n) / metric(zero)"
[[metric]]
name = "neg"
version = "1"
expression = "-(metric(n) - 1) * 1.5"
"#;
    let root = with_metrics(toml);
    let engine = Engine::open(root.path()).unwrap();
    let env = engine
        .query("FROM events DURING LAST 7 d RETURN metric(n), metric(broken), metric(neg)")
        .await
        .unwrap();
    // Purchases in [2026-06-06, 2026-06-13) of the sample, by DuckDB:
    // SELECT count(*) FROM events WHERE event_name = 'purchase' AND timestamp >= '2026-06-06' AND < '2026-06-13' → 45.
    let n = env.rows[0][0].as_i64().unwrap();
    assert_eq!(n, 45);
    assert_eq!(env.rows[0][1], serde_json::Value::Null);
    assert_eq!(env.rows[0][2].as_f64().unwrap(), -((n - 1) as f64) * 1.5);
}

#[tokio::test]
async fn metadata_lists_metrics_with_versions_and_resolved_expressions() {
    let engine = Engine::open(signalql::sample_dataset()).unwrap();
    let env = engine
        .query("FROM metric(analytics.revenue_per_purchaser) DURING LAST 7 d RETURN metric_value")
        .await
        .unwrap();
    assert_eq!(env.columns[0].name, "metric_value");
    assert_eq!(env.columns[0].unit.as_deref(), Some("USD"));
    let m: Vec<(String, String)> = env
        .metadata
        .metrics
        .iter()
        .map(|m| (m.name.clone(), m.version.clone()))
        .collect();
    assert_eq!(
        m,
        vec![
            ("analytics.revenue_per_purchaser".into(), "1.1.0".into()),
            ("analytics.revenue".into(), "2.0.0".into()),
            ("analytics.purchasers".into(), "1.0.0".into()),
        ]
    );
    assert_eq!(
        env.metadata.metrics[0].resolved_expression,
        r#"((sum(properties.amount) FILTER (WHERE event_name = "purchase")) / (count_distinct(user_id) FILTER (WHERE event_name = "purchase")))"#
    );
    let json = serde_json::to_value(&env).unwrap();
    assert_eq!(json["metadata"]["metrics"][1]["version"], "2.0.0");
    // Queries without metrics do not carry the key.
    let plain = engine
        .query("FROM events DURING LAST 7 d RETURN count")
        .await
        .unwrap();
    assert!(
        serde_json::to_value(&plain).unwrap()["metadata"]
            .get("metrics")
            .is_none()
    );
}
