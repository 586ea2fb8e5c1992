//! The plan cache (engine/src/plan_cache.rs, docs/runtime.md): a statement's plan is reused
//! while its key and its tables' files are the same, and made again when any part changes.
//! The expected counts are the sample's, by construction: each added file holds a known
//! number of rows.

use std::path::Path;
use std::sync::Arc;

use signalql::{Engine, EngineOptions, PlanCache};

const Q: &str = r#"FROM events WHERE event_name = "page_view" RETURN count"#;

/// A dataset whose events are a copy of the sample's (so files can be added), T fixed.
fn dataset() -> tempfile::TempDir {
    let root = tempfile::tempdir().unwrap();
    crate::common::copy_dir(
        &signalql::sample_dataset().join("events"),
        &root.path().join("events"),
    );
    std::fs::write(
        root.path().join("signalql.toml"),
        "now = \"2026-06-13T00:00:00Z\"\n",
    )
    .unwrap();
    root
}

fn engine(root: &Path, cache: &Arc<PlanCache>, options: EngineOptions) -> Engine {
    Engine::open_with(
        root,
        EngineOptions {
            plan_cache: Some(Arc::clone(cache)),
            ..options
        },
    )
    .unwrap()
}

async fn run(e: &Engine, q: &str) -> (String, i64) {
    let env = e.query(q).await.unwrap();
    (
        env.metadata.plan_cache.clone(),
        env.rows[0][0].as_i64().unwrap(),
    )
}

/// One page_view event file at `path` (its count is known: `n`).
fn page_views(path: &Path, n: usize) {
    use datafusion::arrow::array::{RecordBatch, StringArray, TimestampMicrosecondArray};
    use datafusion::arrow::datatypes::{DataType, Field, Schema, TimeUnit};
    let schema = Arc::new(Schema::new(vec![
        Field::new(
            "timestamp",
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            false,
        ),
        Field::new("event_name", DataType::Utf8, false),
        Field::new("user_id", DataType::Utf8, true),
    ]));
    let ts =
        TimestampMicrosecondArray::from(vec![1_781_000_000_000_000i64; n]).with_timezone("UTC");
    let batch = RecordBatch::try_new(
        Arc::clone(&schema),
        vec![
            Arc::new(ts),
            Arc::new(StringArray::from(vec!["page_view"; n])),
            Arc::new(StringArray::from(vec!["u_new"; n])),
        ],
    )
    .unwrap();
    let mut w = datafusion::parquet::arrow::ArrowWriter::try_new(
        std::fs::File::create(path).unwrap(),
        schema,
        None,
    )
    .unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
}

#[tokio::test]
async fn a_plan_is_reused_until_its_files_key_or_policy_change() {
    let root = dataset();
    let cache = Arc::new(PlanCache::default());
    let e = engine(root.path(), &cache, EngineOptions::default());
    let (first, base) = run(&e, Q).await;
    assert_eq!(first, "miss");
    assert_eq!(run(&e, Q).await, ("hit".into(), base));
    // Another spelling of the same statement has the same canonical text.
    let lower = r#"from events where event_name = "page_view" return count"#;
    assert_eq!(run(&e, lower).await, ("hit".into(), base));
    assert_eq!(cache.len(), 1);
    assert_eq!(cache.entries()[0].hits, 2);

    // A file added: a miss, and the answer counts its 5 rows.
    page_views(&root.path().join("events/part-new.parquet"), 5);
    assert_eq!(run(&e, Q).await, ("miss".into(), base + 5));
    assert_eq!(run(&e, Q).await, ("hit".into(), base + 5));
    // The same file written again (the same name and size) with a later modification
    // time: a miss.
    let f = root.path().join("events/part-new.parquet");
    std::fs::remove_file(&f).unwrap();
    page_views(&f, 5);
    let later = std::time::SystemTime::now() + std::time::Duration::from_secs(5);
    std::fs::File::options()
        .write(true)
        .open(&f)
        .unwrap()
        .set_modified(later)
        .unwrap();
    assert_eq!(run(&e, Q).await.0, "miss");
    // A file removed: a miss, and the count is the sample's again.
    std::fs::remove_file(&f).unwrap();
    assert_eq!(run(&e, Q).await, ("miss".into(), base));

    // Other limits, through another engine sharing the cache: a miss, then its own hit.
    let limited = engine(
        root.path(),
        &cache,
        EngineOptions {
            limits: signalql::Limits {
                max_result_rows: 7,
                ..Default::default()
            },
            ..Default::default()
        },
    );
    assert_eq!(run(&limited, Q).await, ("miss".into(), base));
    assert_eq!(run(&limited, Q).await, ("hit".into(), base));
    // Another T: a miss.
    let later = engine(
        root.path(),
        &cache,
        EngineOptions {
            now: Some("2026-06-20T00:00:00Z".parse().unwrap()),
            ..Default::default()
        },
    );
    assert_eq!(run(&later, Q).await.0, "miss");
    // The first engine still hits its own entry.
    assert_eq!(run(&e, Q).await, ("hit".into(), base));

    // Without a cache (the CLI): bypass.
    let plain = Engine::open(root.path()).unwrap();
    assert_eq!(run(&plain, Q).await, ("bypass".into(), base));
}

#[tokio::test]
async fn a_changed_policy_is_a_miss() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/policy/root");
    let root = tempfile::tempdir().unwrap();
    crate::common::copy_dir(&src, root.path());
    let cache = Arc::new(PlanCache::default());
    let as_acme = || {
        engine(
            root.path(),
            &cache,
            EngineOptions {
                principal: Some("acme_agent".into()),
                ..Default::default()
            },
        )
    };
    let q = "FROM events DURING LAST 30 d RETURN count";
    let e = as_acme();
    let (first, acme) = run(&e, q).await;
    assert_eq!(first, "miss");
    assert_eq!(run(&as_acme(), q).await, ("hit".into(), acme));
    // Another principal is another key.
    let admin = engine(
        root.path(),
        &cache,
        EngineOptions {
            principal: Some("admin".into()),
            ..Default::default()
        },
    );
    let (outcome, all) = run(&admin, q).await;
    assert_eq!(outcome, "miss");
    assert!(all > acme);
    // acme's rules changed (its filter removed): the server's new engine for acme misses and
    // counts what acme may now see, everything.
    let policy = root.path().join("policy.toml");
    let text = std::fs::read_to_string(&policy).unwrap();
    let loosened: String = text
        .lines()
        .filter(|l| !l.trim_start().starts_with("events ="))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_ne!(loosened, text, "the fixture's acme has an events filter");
    std::fs::write(&policy, loosened).unwrap();
    assert_eq!(run(&as_acme(), q).await, ("miss".into(), all));
}

/// A statement naming a governed metric depends on metrics.toml too: a changed definition is a
/// miss, and the new definition answers (the count of page_view events, by the filter).
#[tokio::test]
async fn a_changed_metric_definition_is_a_miss() {
    let root = dataset();
    let metrics = |filter: &str| {
        format!(
            "[[metric]]\nname = \"views\"\nversion = \"1.0.0\"\ndescription = \"d\"\n\
             unit = \"events\"\nexpression = \"count\"\nfilter = '{filter}'\n"
        )
    };
    let file = root.path().join("metrics.toml");
    std::fs::write(&file, metrics(r#"event_name = "page_view""#)).unwrap();
    let cache = Arc::new(PlanCache::default());
    let e = engine(root.path(), &cache, EngineOptions::default());
    let q = "FROM metric(views) RETURN metric_value";
    let (first, views) = run(&e, q).await;
    assert_eq!(first, "miss");
    assert_eq!(run(&e, Q).await.1, views, "the metric counts page views");
    assert_eq!(run(&e, q).await, ("hit".into(), views));
    std::fs::write(&file, metrics(r#"event_name = "purchase""#)).unwrap();
    let (outcome, purchases) = run(&e, q).await;
    assert_eq!(outcome, "miss");
    let direct = run(
        &e,
        r#"FROM events WHERE event_name = "purchase" RETURN count"#,
    )
    .await
    .1;
    assert_eq!(purchases, direct);
    assert_ne!(purchases, views);
}

/// A plan made while an optional table was missing depends on its absence: acme's signals are
/// read through a filter over the entities it may see, and with no entities table there is
/// none. Once the table lands, the cached plan is not reused, and the answer is the by-hand
/// copy tests/data/policy/as_acme_agent's.
#[tokio::test]
async fn a_table_that_lands_after_planning_is_a_miss() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/policy");
    let root = tempfile::tempdir().unwrap();
    crate::common::copy_dir(&src.join("root"), root.path());
    let entities = root.path().join("entities");
    let aside = root.path().join("entities-aside");
    std::fs::rename(&entities, &aside).unwrap();
    let cache = Arc::new(PlanCache::default());
    let acme = engine(
        root.path(),
        &cache,
        EngineOptions {
            principal: Some("acme_agent".into()),
            ..Default::default()
        },
    );
    let q = r#"FROM events WHERE signal(churn_risk) = "high" DURING LAST 30 d RETURN count"#;
    let (first, before) = run(&acme, q).await;
    assert_eq!(first, "miss");
    assert_eq!(run(&acme, q).await, ("hit".into(), before));
    std::fs::rename(&aside, &entities).unwrap();
    let (outcome, after) = run(&acme, q).await;
    assert_eq!(outcome, "miss", "the entities table landed");
    let copy = Engine::open(src.join("as_acme_agent")).unwrap();
    assert_eq!(
        after,
        copy.query(q).await.unwrap().rows[0][0].as_i64().unwrap()
    );

    // EXPLAIN ANALYZE as acme, planned anew and then from the cache, shows no figure that
    // counts hidden rows.
    for _ in 0..2 {
        let answer = acme
            .answer("EXPLAIN ANALYZE FROM events DURING LAST 30 d RETURN count")
            .await
            .unwrap();
        let signalql::Answer::Plan(x) = answer else {
            panic!("not a plan")
        };
        let a = x.actual.as_ref().unwrap();
        assert_eq!((a.scanned_rows, a.scanned_bytes), (None, None));
        assert!(x.pruning.is_none());
        assert!(
            x.operators
                .as_ref()
                .unwrap()
                .iter()
                .all(|o| o.rows.is_none())
        );
    }
}

/// A statement the cache holds keeps its physical plan (engine/src/kept.rs): each hit runs a
/// copy with its own metrics and state, so the rows and the scan counts of every run are those
/// of the statement planned afresh (the bypassing engine's). A plan with a dynamic filter (a
/// TopK over the scan) is run as planned every time, never kept.
#[tokio::test]
async fn a_kept_physical_plan_answers_each_hit_as_a_new_plan_would() {
    let root = dataset();
    let fresh = Engine::open(root.path()).unwrap();
    let statements = [
        (Q, true),
        (
            "FROM events DURING LAST 30 d BUCKET BY d RETURN timestamp, count ORDER BY timestamp ASC",
            true,
        ),
        (
            r#"FUNNEL "page_view" -> "signup" -> "purchase" FROM events DURING LAST 28 d WITHIN 7 d"#,
            true,
        ),
        (
            "FROM events GROUP BY event_name RETURN event_name, count_distinct(user_id) ORDER BY event_name ASC",
            true,
        ),
        (
            "FROM events RETURN timestamp, user_id ORDER BY timestamp DESC, user_id ASC LIMIT 3",
            false,
        ),
    ];
    for (q, keeps) in statements {
        let cache = Arc::new(PlanCache::default());
        let e = engine(root.path(), &cache, EngineOptions::default());
        let want = fresh.query(q).await.unwrap();
        assert_eq!(want.metadata.plan_cache, "bypass");
        let scanned = want.metadata.cost_estimate.scanned_rows;
        assert!(scanned.is_some_and(|n| n > 0), "{q}: {scanned:?}");
        for run in 0..3 {
            let got = e.query(q).await.unwrap();
            let outcome = if run == 0 { "miss" } else { "hit" };
            assert_eq!(got.metadata.plan_cache, outcome, "{q}");
            assert_eq!(got.rows, want.rows, "{q}, run {run}");
            assert_eq!(
                got.metadata.cost_estimate.scanned_rows, scanned,
                "{q}, run {run}"
            );
            assert_eq!(
                got.metadata.cost_estimate.scanned_bytes, want.metadata.cost_estimate.scanned_bytes,
                "{q}, run {run}"
            );
        }
        assert_eq!(cache.plans()[0].kept.is_kept(), keeps, "{q}");
    }
}
