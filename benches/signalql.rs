//! Criterion benches: parse+format, lowering, UDF kernels called directly, end-to-end queries on generated Parquet.
//!
//! `cargo bench --bench signalql` (add `-- GROUP` to run one of `syntax`, `lowering`, `udf`,
//! `end_to_end`). The end-to-end dataset has `SIGNALQL_BENCH_ROWS` rows (default 1 000 000),
//! generated once per run into a temporary directory; each SignalQL query is paired with the
//! same query written as DataFusion SQL and run through the engine's own `SessionContext`, so
//! the two lines of a pair differ only by what SignalQL adds (parse, open the table, lower,
//! build the envelope). See `benches/README.md` for measured numbers.

use std::hint::black_box;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{BatchSize, Criterion, SamplingMode, Throughput, criterion_group, criterion_main};
use datafusion::arrow::array::{ArrayRef, Float64Array};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::logical_expr::Accumulator;
use datafusion::logical_expr::function::AccumulatorArgs;
use datafusion::physical_expr::expressions::{col, lit};
use signalql::Engine;
use signalql::catalog::generator::{GenOptions, generate_events};
use signalql::udfs::aggregate::percentile::percentile_udaf;
use signalql::udfs::aggregate::stats::StatsAccumulator;
use tokio::runtime::Runtime;

/// The v0.3 example queries that run, by bench name.
const DAILY_ACTIVE: &str = r#"FROM events
WHERE event_name = "session_start"
DURING LAST 30 d
BUCKET BY d
GROUP BY properties.platform
RETURN timestamp, properties.platform, count_distinct(user_id)
ORDER BY timestamp ASC"#;

const TOP_PATHS: &str = r#"FROM events
WHERE event_name = "page_view"
DURING LAST 7 d
GROUP BY properties.path
HAVING count > 1000
RETURN properties.path, count
ORDER BY count DESC
LIMIT 10"#;

/// The v0.3 A/B example with the variant read from `properties` (`signal()` is v0.3-extended).
const AB_STATS: &str = r#"FROM events
WHERE event_name = "purchase" AND properties.amount IS NOT NULL
DURING LAST 14 d
AS OF "2026-06-13T00:00:00Z"
GROUP BY properties.experiment_variant
RETURN properties.experiment_variant, count_distinct(user_id), stats(properties.amount)"#;

const BY_EVENT_NAME: &str = r#"FROM events
DURING LAST 30 d
GROUP BY event_name
RETURN event_name, count, count_distinct(user_id)"#;

/// Every v0.3 spec example (those that only parse, too), for the syntax group.
const SPEC_EXAMPLES: [(&str, &str); 7] = [
    ("daily_active", DAILY_ACTIVE),
    ("top_paths_having", TOP_PATHS),
    (
        "funnel",
        r#"FUNNEL "visit" -> "signup" -> "activated"
FROM events
DURING LAST 28 d
WITHIN 7 d
GROUP BY properties.plan"#,
    ),
    (
        "ab_signal",
        r#"FROM events
WHERE event_name = "purchase" AND properties.amount IS NOT NULL
DURING LAST 14 d
AS OF "2026-06-13T00:00:00Z"
GROUP BY signal(experiment_variant)
RETURN signal(experiment_variant), count_distinct(user_id), stats(properties.amount)"#,
    ),
    ("ab_properties", AB_STATS),
    (
        "metric",
        r#"FROM metric(analytics.weekly_active_users)
DURING LAST 12 w
BUCKET BY w
RETURN timestamp, metric_value"#,
    ),
    ("describe", "DESCRIBE entity(analytics.session)"),
];

/// The queries that run, with the same semantics written as DataFusion SQL over the engine's
/// session (T = 2026-06-13T00:00:00Z, windows `[T - n, T)`, dense day × platform series).
const RUNNABLE: [(&str, &str, &str); 4] = [
    (
        "daily_active_by_platform",
        DAILY_ACTIVE,
        r#"WITH a AS (
  SELECT date_trunc('day', "timestamp") AS d, properties['platform'] AS p, count(DISTINCT user_id) AS n
  FROM events
  WHERE event_name = 'session_start'
    AND "timestamp" >= TIMESTAMP '2026-05-14 00:00:00+00:00' AND "timestamp" < TIMESTAMP '2026-06-13 00:00:00+00:00'
  GROUP BY 1, 2),
g AS (
  SELECT DISTINCT properties['platform'] AS p FROM events
  WHERE event_name = 'session_start'
    AND "timestamp" >= TIMESTAMP '2026-05-14 00:00:00+00:00' AND "timestamp" < TIMESTAMP '2026-06-13 00:00:00+00:00'),
b AS (SELECT unnest(generate_series(TIMESTAMP '2026-05-14 00:00:00+00:00', TIMESTAMP '2026-06-12 00:00:00+00:00', INTERVAL '1 day')) AS d)
SELECT b.d AS "timestamp", g.p AS "properties.platform", coalesce(a.n, 0) AS "count_distinct(user_id)"
FROM b CROSS JOIN g LEFT JOIN a ON a.d = b.d AND a.p IS NOT DISTINCT FROM g.p
ORDER BY 1, 2 NULLS LAST"#,
    ),
    (
        "top_paths_having",
        TOP_PATHS,
        r#"SELECT properties['path'] AS "properties.path", count(*) AS "count" FROM events
WHERE event_name = 'page_view'
  AND "timestamp" >= TIMESTAMP '2026-06-06 00:00:00+00:00' AND "timestamp" < TIMESTAMP '2026-06-13 00:00:00+00:00'
GROUP BY 1 HAVING count(*) > 1000 ORDER BY 2 DESC, 1 NULLS LAST LIMIT 10"#,
    ),
    (
        "ab_stats_by_variant",
        AB_STATS,
        r#"SELECT properties['experiment_variant'] AS "properties.experiment_variant",
  count(DISTINCT user_id) AS "count_distinct(user_id)", stats(properties['amount']) AS "stats(properties.amount)"
FROM events
WHERE event_name = 'purchase' AND properties['amount'] IS NOT NULL
  AND "timestamp" >= TIMESTAMP '2026-05-30 00:00:00+00:00' AND "timestamp" < TIMESTAMP '2026-06-13 00:00:00+00:00'
GROUP BY 1 ORDER BY 1 NULLS LAST"#,
    ),
    (
        "events_by_name_30d",
        BY_EVENT_NAME,
        r#"SELECT event_name, count(*) AS "count", count(DISTINCT user_id) AS "count_distinct(user_id)"
FROM events
WHERE "timestamp" >= TIMESTAMP '2026-05-14 00:00:00+00:00' AND "timestamp" < TIMESTAMP '2026-06-13 00:00:00+00:00'
GROUP BY 1"#,
    ),
];

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// Generate `rows` events (seed 42, data ending at 2026-06-13T00:00:00Z) under `dir`.
fn generate(dir: &Path, rows: u64) {
    let mut opts = GenOptions::new(dir);
    opts.rows = rows;
    opts.seed = 42;
    let t0 = Instant::now();
    let summary = generate_events(&opts, None).expect("generate events");
    eprintln!(
        "generated {} rows ({} files, {:.1} MB) in {:.1?} under {}",
        summary.rows,
        summary.files,
        summary.bytes as f64 / 1e6,
        t0.elapsed(),
        dir.display()
    );
}

fn bench_syntax(c: &mut Criterion) {
    let mut group = c.benchmark_group("syntax");
    group
        .sample_size(50)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(1));
    for (name, text) in SPEC_EXAMPLES {
        group.bench_function(format!("parse/{name}"), |b| {
            b.iter(|| signalql::parse(black_box(text)).expect("parse"))
        });
        let statement = signalql::parse(text).expect("parse");
        group.bench_function(format!("format/{name}"), |b| {
            b.iter(|| black_box(&statement).to_string())
        });
    }
    group.finish();
}

fn bench_lowering(c: &mut Criterion) {
    let rt = runtime();
    let dir = tempfile::tempdir().expect("temp dir");
    generate(dir.path(), 10_000);
    let engine = Engine::open(dir.path()).expect("open dataset");
    let mut group = c.benchmark_group("lowering");
    group
        .sample_size(30)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    // compile = parse + open the events table (list files, infer the schema) + lower + unparse.
    for (name, text, _) in RUNNABLE {
        group.bench_function(format!("compile/{name}"), |b| {
            b.to_async(&rt)
                .iter(|| async { engine.compile(black_box(text)).await.expect("compile") })
        });
    }
    // The part of compile that is not lowering: opening the table for each query.
    group.bench_function("open_events_table", |b| {
        b.to_async(&rt).iter(|| async {
            engine
                .dataset()
                .events(engine.session())
                .await
                .expect("events")
        })
    });
    group.finish();
}

/// 1M deterministic f64 values in [0, 1000), with every `null_every`-th value NULL (0: none).
fn values(null_every: usize) -> ArrayRef {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let v: Float64Array = (0..1_000_000usize)
        .map(|i| {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            let f = (x >> 11) as f64 / (1u64 << 53) as f64 * 1000.0;
            (null_every == 0 || i % null_every != 0).then_some(f)
        })
        .collect();
    Arc::new(v)
}

fn percentile_accumulator(p: f64) -> Box<dyn Accumulator> {
    let schema = Schema::new(vec![Field::new("x", DataType::Float64, true)]);
    let exprs = [col("x", &schema).expect("column x"), lit(p)];
    let expr_fields = [
        Arc::new(Field::new("x", DataType::Float64, true)),
        Arc::new(Field::new("p", DataType::Float64, false)),
    ];
    let args = AccumulatorArgs {
        return_field: Arc::new(Field::new("percentile", DataType::Float64, true)),
        schema: &schema,
        ignore_nulls: false,
        order_bys: &[],
        is_reversed: false,
        name: "percentile(x, p)",
        is_distinct: false,
        exprs: &exprs,
        expr_fields: &expr_fields,
    };
    percentile_udaf()
        .accumulator(args)
        .expect("percentile accumulator")
}

fn bench_udf(c: &mut Criterion) {
    let mut group = c.benchmark_group("udf");
    group
        .sample_size(20)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .throughput(Throughput::Elements(1_000_000));
    for (label, input) in [("dense", values(0)), ("nulls10", values(10))] {
        let batch = [input];
        group.bench_function(format!("stats/update_batch/{label}"), |b| {
            b.iter_batched_ref(
                StatsAccumulator::default,
                |acc| acc.update_batch(black_box(&batch)).expect("update"),
                BatchSize::SmallInput,
            )
        });
        group.bench_function(format!("percentile/update_batch/{label}"), |b| {
            b.iter_batched_ref(
                || percentile_accumulator(0.95),
                |acc| acc.update_batch(black_box(&batch)).expect("update"),
                BatchSize::LargeInput,
            )
        });
        group.bench_function(format!("percentile/update+evaluate/{label}"), |b| {
            b.iter_batched_ref(
                || percentile_accumulator(0.95),
                |acc| {
                    acc.update_batch(black_box(&batch)).expect("update");
                    acc.evaluate().expect("evaluate")
                },
                BatchSize::LargeInput,
            )
        });
    }
    group.finish();
}

fn bench_end_to_end(c: &mut Criterion) {
    let rows: u64 = std::env::var("SIGNALQL_BENCH_ROWS")
        .ok()
        .and_then(|s| s.replace('_', "").parse().ok())
        .unwrap_or(1_000_000);
    let rt = runtime();
    let dir = tempfile::tempdir().expect("temp dir");
    generate(dir.path(), rows);
    let engine = Engine::open(dir.path()).expect("open dataset");
    // The SQL side gets the same listing table the engine builds, registered once.
    let table = rt
        .block_on(engine.dataset().events(engine.session()))
        .expect("events table");
    engine
        .session()
        .register_table("events", Arc::clone(&table.provider))
        .expect("register events");

    // Both sides must give the same number of rows before they are timed.
    for (name, text, sql) in RUNNABLE {
        let (q, s) = rt.block_on(async {
            let envelope = engine.query(text).await.expect("signalql query");
            let batches = engine
                .session()
                .sql(sql)
                .await
                .expect("sql plan")
                .collect()
                .await
                .expect("sql run");
            let n: usize = batches.iter().map(|b| b.num_rows()).sum();
            (envelope.rows.len(), n)
        });
        assert_eq!(q, s, "{name}: signalql gave {q} rows, SQL gave {s}");
    }

    let mut group = c.benchmark_group("end_to_end");
    group
        .sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4))
        .throughput(Throughput::Elements(rows));
    for (name, text, sql) in RUNNABLE {
        group.bench_function(format!("{name}/signalql"), |b| {
            b.to_async(&rt)
                .iter(|| async { engine.query(black_box(text)).await.expect("query") })
        });
        group.bench_function(format!("{name}/datafusion_sql"), |b| {
            b.to_async(&rt).iter(|| async {
                engine
                    .session()
                    .sql(black_box(sql))
                    .await
                    .expect("sql plan")
                    .collect()
                    .await
                    .expect("sql run")
            })
        });
    }
    group.finish();
}

criterion_group!(
    benches,
    bench_syntax,
    bench_lowering,
    bench_udf,
    bench_end_to_end
);
criterion_main!(benches);
