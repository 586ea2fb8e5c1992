//! Every statement kind runs its plans on the engine's one execution path: with a timeout of 0
//! seconds (no time at all) each fails with the timeout's `limit_exceeded`, so a statement
//! that read its data some other way (a `DataFrame::collect`, a plan run outside the
//! executor) would answer instead. With the default limits each answers.

use std::path::Path;

use signalql::ast::Statement;
use signalql::watch::Watcher;
use signalql::{Answer, Engine, EngineOptions, Error, ErrorKind, Limits};

/// The sample's tables (events, entities, relationships, signals, metrics) and an object store.
fn dataset() -> tempfile::TempDir {
    let root = tempfile::tempdir().unwrap();
    for table in ["events", "entities", "relationships", "signals"] {
        let src = std::fs::canonicalize(signalql::sample_dataset().join(table)).unwrap();
        std::os::unix::fs::symlink(src, root.path().join(table)).unwrap();
    }
    for file in ["signalql.toml", "metrics.toml"] {
        std::fs::copy(
            signalql::sample_dataset().join(file),
            root.path().join(file),
        )
        .unwrap();
    }
    crate::common::ingest_docs(
        root.path(),
        &[
            (
                "storage.md",
                "# Object storage\n\nObjects are Parquet revisions. See [notes](notes.md).\n",
            ),
            ("notes.md", "# Notes\n\nParquet footers.\n"),
        ],
    );
    root
}

fn engine(root: &Path, timeout_seconds: u64) -> Engine {
    let options = EngineOptions {
        limits: Limits {
            timeout_seconds,
            ..Limits::default()
        },
        ..Default::default()
    };
    Engine::open_with(root, options).unwrap()
}

/// One query of each statement kind, and what it exercises.
const STATEMENTS: &[(&str, &str)] = &[
    (
        "retrieve",
        "FROM events DURING LAST 7 d GROUP BY event_name RETURN event_name, count",
    ),
    (
        "dense series over the data span",
        "FROM events BUCKET BY w RETURN timestamp, count",
    ),
    (
        "funnel",
        r#"FUNNEL "page_view" -> "purchase" FROM events DURING LAST 30 d WITHIN 7 d"#,
    ),
    (
        "sequence",
        r#"FIND sequence WHERE "page_view" -> "purchase" WITHIN 7 d"#,
    ),
    (
        "signals",
        "FROM entity(analytics.account) GROUP BY signal(account_health) \
         RETURN signal(account_health), count",
    ),
    (
        "traverse",
        "FROM entity(analytics.account) TRAVERSE partner_of DEPTH <= 2 RETURN entity_id, hops",
    ),
    (
        "trend",
        "FROM events DURING LAST 30 d BUCKET BY d RETURN timestamp, count TREND UP OVER 30 d",
    ),
    (
        "metric",
        "FROM metric(analytics.weekly_active_users) DURING LAST 28 d BUCKET BY w \
         RETURN timestamp, metric_value",
    ),
    ("describe", "DESCRIBE events"),
    ("describe entity", "DESCRIBE entity(analytics.account)"),
    ("find object", r#"FIND OBJECT ABOUT "parquet storage""#),
    (
        "context",
        r#"CONTEXT FOR "parquet storage" BUDGET 500 TOKENS WITH EVIDENCE"#,
    ),
];

fn is_timeout(e: &Error) -> bool {
    matches!(&e.kind, ErrorKind::LimitExceeded { limit, .. } if limit == "timeout_seconds")
}

#[tokio::test]
async fn every_statement_kind_runs_under_the_timeout() {
    let root = dataset();
    let (none, enough) = (engine(root.path(), 0), engine(root.path(), 60));
    for (kind, text) in STATEMENTS {
        match enough.answer(text).await {
            Ok(Answer::Envelope(_) | Answer::Bundle(_)) => {}
            other => panic!("{kind}: {text} should answer, got {other:?}"),
        }
        match none.answer(text).await {
            Err(e) if is_timeout(&e) => {}
            other => panic!("{kind}: {text} ran outside the timeout: {other:?}"),
        }
    }
    // `signalql describe` with no target, and a WATCH poll.
    assert!(enough.describe_all().await.is_ok());
    let e = none.describe_all().await.unwrap_err();
    assert!(is_timeout(&e), "describe_all: {e}");
    let Ok(Statement::Watch(w)) =
        signalql::parse("WATCH (FROM events DURING LAST 1 d RETURN count) WHEN count > 0")
    else {
        panic!("a WATCH statement")
    };
    assert!(Watcher::new(w.clone()).poll(&enough).await.is_ok());
    let e = Watcher::new(w).poll(&none).await.unwrap_err();
    assert!(is_timeout(&e), "watch: {e}");
}

/// `max_groups` counts the groups of every grouped statement: a retrieve GROUP BY and a
/// funnel's GROUP BY (its rows are groups × steps). With the cap at the number of groups each
/// answers; one below, `limit_exceeded max_groups`. The retrieve's groups are counted by a
/// second query; the funnel's are the distinct group values of its own uncapped answer (a
/// funnel's group is its counted chain's first event's, so no plain query counts them).
#[tokio::test]
async fn max_groups_caps_retrieve_and_funnel_groups() {
    let root = dataset();
    let engine60 = engine(root.path(), 60);
    let retrieve = "FROM events WHERE properties.path IS NOT NULL GROUP BY properties.path \
                    RETURN properties.path, count";
    let env = engine60
        .query(
            "FROM events WHERE properties.path IS NOT NULL RETURN count_distinct(properties.path)",
        )
        .await
        .unwrap();
    let retrieve_groups = env.rows[0][0].as_u64().unwrap();
    let funnel =
        r#"FUNNEL "page_view" -> "signup" FROM events WITHIN 1 d GROUP BY properties.path"#;
    let env = engine60.query(funnel).await.unwrap();
    let funnel_groups: std::collections::BTreeSet<String> =
        env.rows.iter().map(|r| r[0].to_string()).collect();
    assert_eq!(env.rows.len(), 2 * funnel_groups.len());
    let with_cap = |max_groups: u64| {
        let options = EngineOptions {
            limits: Limits {
                max_groups,
                ..Limits::default()
            },
            ..Default::default()
        };
        Engine::open_with(root.path(), options).unwrap()
    };
    for (q, n) in [
        (retrieve, retrieve_groups),
        (funnel, funnel_groups.len() as u64),
    ] {
        assert!(n > 2, "{q}: {n} groups");
        let ok = with_cap(n).answer(q).await;
        assert!(ok.is_ok(), "{q}: {:?}", ok.err());
        let e = with_cap(n - 1).answer(q).await.expect_err(q);
        assert!(
            matches!(&e.kind, ErrorKind::LimitExceeded { limit, .. } if limit == "max_groups"),
            "{q}: {e}"
        );
    }
}
