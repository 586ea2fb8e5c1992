//! Criterion benches: parse+format, lowering, UDF kernels called directly (stats, percentile,
//! the funnel's per-user search), end-to-end queries on generated Parquet (the v0.3 examples and
//! a 3-step funnel, ungrouped and grouped) and CONTEXT FOR over a generated 100k-object corpus
//! next to the same lexical scoring as plain DataFusion SQL (group `context`), and the extended
//! tier (entities, TRAVERSE, TREND, a governed metric, DESCRIBE; group `extended`), and issue
//! 7's W9: parse + format + lower of each of the workloads W1–W8 (group `w9`), and the fixed
//! cost of a statement by stage on the bundled sample, and whole with a plan cache that keeps
//! its physical plan (group `stages`). The workload
//! texts and the funnel's DataFusion SQL are `benches/workloads.toml`'s, shared with `compare.py`.
//!
//! `cargo bench --bench signalql` (add `-- GROUP` to run one of `syntax`, `lowering`, `udf`,
//! `end_to_end`, `context`, `extended`, `w9`, `stages`). The end-to-end dataset has `SIGNALQL_BENCH_ROWS` rows (default 1 000 000),
//! generated once per run into a temporary directory; each SignalQL query is paired with the
//! same query written as DataFusion SQL and run through the engine's own `SessionContext`, so
//! the two lines of a pair differ only by what SignalQL adds (parse, open the table, lower,
//! build the envelope). See `benches/README.md` for measured numbers.

use std::collections::BTreeMap;
use std::hint::black_box;
use std::path::Path;
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use criterion::{BatchSize, Criterion, SamplingMode, Throughput, criterion_group, criterion_main};
use datafusion::arrow::array::{ArrayRef, Float64Array};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::logical_expr::Accumulator;
use datafusion::logical_expr::function::AccumulatorArgs;
use datafusion::physical_expr::expressions::{col, lit};
use serde::Deserialize;
use signalql::Engine;
use signalql::ast::Statement;
use signalql::catalog::generator::{GenOptions, generate_events};
use signalql::catalog::objects::generator::{ObjectGenOptions, generate_objects};
use signalql::udfs::aggregate::funnel_chain::{Event, Mode, level, search, sort_events};
use signalql::udfs::aggregate::percentile::percentile_udaf;
use signalql::udfs::aggregate::stats::StatsAccumulator;
use tokio::runtime::Runtime;

/// `benches/workloads.toml`: the workload texts, CONTEXT FOR's task and budget and the funnel's
/// DataFusion SQL, the same file `benches/compare.py` reads.
#[derive(Deserialize)]
struct WorkloadFile {
    context: ContextTask,
    workload: Vec<Workload>,
    funnel: FunnelSql,
}

#[derive(Deserialize)]
struct ContextTask {
    task: String,
    selective_task: String,
    budget: u64,
}

/// One workload: `compare.py`'s name (`W2_daily_active_by_platform`), the `w9` bench name if it
/// is in that group, and the SignalQL text.
#[derive(Deserialize)]
struct Workload {
    name: String,
    w9: Option<String>,
    signalql: String,
}

/// The 3-step funnel as DataFusion SQL with window functions: `per_user`, then `rows`, with
/// `{group}`, `{select_group}` and `{order_group}` taken from `ungrouped` or `grouped`.
#[derive(Deserialize)]
struct FunnelSql {
    per_user: String,
    rows: String,
    ungrouped: BTreeMap<String, String>,
    grouped: BTreeMap<String, String>,
}

/// The workload file, each SignalQL text with `{task}` and `{budget}` filled from `[context]`.
static WORKLOADS: LazyLock<WorkloadFile> = LazyLock::new(|| {
    let mut file: WorkloadFile =
        toml::from_str(include_str!("workloads.toml")).expect("benches/workloads.toml");
    let task = file.context.task.clone();
    let selective = file.context.selective_task.clone();
    let budget = file.context.budget.to_string();
    for w in &mut file.workload {
        w.signalql = fill(
            &w.signalql,
            [
                ("task", task.as_str()),
                ("selective_task", selective.as_str()),
                ("budget", budget.as_str()),
            ],
        );
    }
    file
});

/// `text` with each `{key}` replaced by its value.
fn fill<'a>(text: &str, values: impl IntoIterator<Item = (&'a str, &'a str)>) -> String {
    values.into_iter().fold(text.to_string(), |t, (k, v)| {
        t.replace(&format!("{{{k}}}"), v)
    })
}

/// The SignalQL text of workload `number` (`W1` … `W8`, `X1`).
fn workload(number: &str) -> &'static str {
    WORKLOADS
        .workload
        .iter()
        .find(|w| w.name.split('_').next() == Some(number))
        .map(|w| w.signalql.as_str())
        .unwrap_or_else(|| panic!("no workload {number} in benches/workloads.toml"))
}

/// The task of CONTEXT FOR (W8, the `context` group, the lexical kernel bench).
fn context_task() -> &'static str {
    &WORKLOADS.context.task
}

/// Issue 7's workloads W1–W8 by `w9` bench name; W9 times parse + format + lower of each.
fn workloads() -> Vec<(&'static str, &'static str)> {
    WORKLOADS
        .workload
        .iter()
        .filter_map(|w| Some((w.w9.as_deref()?, w.signalql.as_str())))
        .collect()
}

/// The 3-step funnel as DataFusion SQL with window functions (the same text as
/// `benches/compare.py`'s): per visit, the first signup after it and the first activated after
/// that signup; per user the deepest level; per step the chain ending earliest, latest start.
fn funnel_sql(grouped: bool) -> String {
    let funnel = &WORKLOADS.funnel;
    let values = if grouped {
        &funnel.grouped
    } else {
        &funnel.ungrouped
    };
    fill(
        &format!("{},\n{}", funnel.per_user, funnel.rows),
        values.iter().map(|(k, v)| (k.as_str(), v.as_str())),
    )
}

/// Every v0.3 spec example (those that only parse, too), for the syntax group; four are workloads.
fn spec_examples() -> [(&'static str, &'static str); 7] {
    [
        ("daily_active", workload("W2")),
        ("top_paths_having", workload("W3")),
        ("funnel", workload("W7")),
        (
            "ab_signal",
            r#"FROM events
WHERE event_name = "purchase" AND properties.amount IS NOT NULL
DURING LAST 14 d
AS OF "2026-06-13T00:00:00Z"
GROUP BY signal(experiment_variant)
RETURN signal(experiment_variant), count_distinct(user_id), stats(properties.amount)"#,
        ),
        ("ab_properties", workload("W4")),
        (
            "metric",
            r#"FROM metric(analytics.weekly_active_users)
DURING LAST 12 w
BUCKET BY w
RETURN timestamp, metric_value"#,
        ),
        ("describe", "DESCRIBE entity(analytics.session)"),
    ]
}

/// The retrieve queries that run, by bench name and workload number, with the same semantics
/// written as DataFusion SQL over the engine's session (T = 2026-06-13T00:00:00Z, windows
/// `[T - n, T)`, dense day × platform series).
const RUNNABLE: [(&str, &str, &str); 4] = [
    (
        "daily_active_by_platform",
        "W2",
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
        "W3",
        r#"SELECT properties['path'] AS "properties.path", count(*) AS "count" FROM events
WHERE event_name = 'page_view'
  AND "timestamp" >= TIMESTAMP '2026-06-06 00:00:00+00:00' AND "timestamp" < TIMESTAMP '2026-06-13 00:00:00+00:00'
GROUP BY 1 HAVING count(*) > 1000 ORDER BY 2 DESC, 1 NULLS LAST LIMIT 10"#,
    ),
    (
        "ab_stats_by_variant",
        "W4",
        r#"SELECT properties['experiment_variant'] AS "properties.experiment_variant",
  count(DISTINCT user_id) AS "count_distinct(user_id)", stats(properties['amount']) AS "stats(properties.amount)"
FROM events
WHERE event_name = 'purchase' AND properties['amount'] IS NOT NULL
  AND "timestamp" >= TIMESTAMP '2026-05-30 00:00:00+00:00' AND "timestamp" < TIMESTAMP '2026-06-13 00:00:00+00:00'
GROUP BY 1 ORDER BY 1 NULLS LAST"#,
    ),
    (
        "events_by_name_30d",
        "X1",
        r#"SELECT event_name, count(*) AS "count", count(DISTINCT user_id) AS "count_distinct(user_id)"
FROM events
WHERE "timestamp" >= TIMESTAMP '2026-05-14 00:00:00+00:00' AND "timestamp" < TIMESTAMP '2026-06-13 00:00:00+00:00'
GROUP BY 1"#,
    ),
];

/// Every runnable workload: the retrieve examples and the funnels.
fn runnable() -> Vec<(&'static str, &'static str, String)> {
    let mut all: Vec<(&'static str, &'static str, String)> = RUNNABLE
        .iter()
        .map(|(n, w, s)| (*n, workload(w), s.to_string()))
        .collect();
    all.push(("funnel_3step", workload("W6"), funnel_sql(false)));
    all.push(("funnel_3step_by_plan", workload("W7"), funnel_sql(true)));
    all
}

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

/// Run DataFusion SQL on the engine's own context.
async fn run_sql(engine: &Engine, sql: &str) -> Vec<datafusion::arrow::array::RecordBatch> {
    engine
        .session()
        .sql(sql)
        .await
        .expect("sql plan")
        .collect()
        .await
        .expect("sql run")
}

/// `SIGNALQL_BENCH_ROWS` rows (default 1 000 000) generated into a temporary directory (kept
/// alive by the returned guard) and an engine over them.
fn generated_engine() -> (u64, Runtime, tempfile::TempDir, Engine) {
    let rows: u64 = std::env::var("SIGNALQL_BENCH_ROWS")
        .ok()
        .and_then(|s| s.replace('_', "").parse().ok())
        .unwrap_or(1_000_000);
    let rt = runtime();
    let dir = tempfile::tempdir().expect("temp dir");
    generate(dir.path(), rows);
    let engine = Engine::open(dir.path()).expect("open dataset");
    (rows, rt, dir, engine)
}

fn bench_syntax(c: &mut Criterion) {
    let mut group = c.benchmark_group("syntax");
    group
        .sample_size(50)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(1));
    for (name, text) in spec_examples() {
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
    for (name, text, _) in runnable() {
        group.bench_function(format!("compile/{name}"), |b| {
            b.to_async(&rt)
                .iter(|| async { engine.compile(black_box(text)).await.expect("compile") })
        });
    }
    // The part of compile that is not lowering: opening the table for each query.
    bench_open_events(&mut group, &rt, &engine, "open_events_table");
    group.finish();
}

/// Opening the events table as a statement opens it.
fn bench_open_events(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    rt: &Runtime,
    engine: &Engine,
    name: &str,
) {
    group.bench_function(name, |b| {
        b.to_async(rt).iter(|| async {
            engine
                .dataset()
                .events(engine.session())
                .await
                .expect("events")
        })
    });
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

/// 1M events over 50 000 users (20 each, sorted), each matching one of 3 steps or none, with
/// timestamps spread over 28 days: the per-user input of the funnel search.
fn funnel_users() -> Vec<Vec<Event>> {
    let mut x: u64 = 0x2545_F491_4F6C_DD1D;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    (0..50_000)
        .map(|_| {
            let mut events: Vec<Event> = (0..20)
                .map(|i| {
                    let r = next();
                    Event {
                        ts: (r % (28 * 86_400_000_000)) as i64,
                        seq: i,
                        steps: [0u16, 1, 2, 4][(r >> 50) as usize % 4],
                        excluded: false,
                    }
                })
                .collect();
            sort_events(&mut events);
            events
        })
        .collect()
}

/// The `text` bodies of `n` generated objects.
fn lexical_docs(n: u64) -> Vec<String> {
    use datafusion::arrow::array::AsArray;
    use datafusion::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    let dir = tempfile::tempdir().expect("temp dir");
    generate_objects(&ObjectGenOptions::new(dir.path(), n)).expect("generate objects");
    let file =
        std::fs::File::open(dir.path().join("representations/part-00000.parquet")).expect("file");
    let mut out = Vec::new();
    for batch in ParquetRecordBatchReaderBuilder::try_new(file)
        .expect("reader")
        .build()
        .expect("build")
    {
        let batch = batch.expect("batch");
        let names = batch
            .column_by_name("name")
            .expect("name")
            .as_string::<i32>()
            .clone();
        let content = batch
            .column_by_name("content")
            .expect("content")
            .as_string::<i64>()
            .clone();
        for i in 0..batch.num_rows() {
            if names.value(i) == "text" {
                out.push(content.value(i).to_string());
            }
        }
    }
    out
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
    let users = funnel_users();
    let within = 7 * 86_400 * 1_000_000;
    for (label, mode) in [
        ("ordered", Mode::Ordered),
        ("strict", Mode::Strict),
        ("any", Mode::Any),
    ] {
        group.bench_function(format!("funnel_chain/search/{label}"), |b| {
            b.iter(|| {
                users
                    .iter()
                    .map(|ev| level(&search(black_box(ev), 3, within, mode)))
                    .sum::<usize>()
            })
        });
    }
    // lexical-v1 over 10 000 generated ~400-word bodies (the context corpus's text).
    let docs = lexical_docs(10_000);
    let matcher = signalql::udfs::scalar::lexical::Matcher::new(
        signalql::udfs::scalar::lexical::terms(context_task()),
    );
    group.bench_function("lexical/weights/10k_docs", |b| {
        b.iter(|| {
            docs.iter()
                .map(|d| matcher.weights("Title words", "", black_box(d)).len())
                .sum::<usize>()
        })
    });
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
    let (rows, rt, _dir, engine) = generated_engine();
    // The SQL side gets the same listing table the engine builds, registered once.
    let table = rt
        .block_on(engine.dataset().events(engine.session()))
        .expect("events table");
    engine
        .session()
        .register_table("events", Arc::clone(&table.provider))
        .expect("register events");

    // Both sides must give the same number of rows before they are timed.
    let workloads = runnable();
    for (name, text, sql) in &workloads {
        let (q, s) = rt.block_on(async {
            let envelope = engine.query(text).await.expect("signalql query");
            let batches = run_sql(&engine, sql).await;
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
    for (name, text, sql) in &workloads {
        let text: &str = text;
        group.bench_function(format!("{name}/signalql"), |b| {
            b.to_async(&rt)
                .iter(|| async { engine.query(black_box(text)).await.expect("query") })
        });
        group.bench_function(format!("{name}/datafusion_sql"), |b| {
            b.to_async(&rt)
                .iter(|| async { run_sql(&engine, black_box(sql.as_str())).await })
        });
    }
    group.finish();
}

/// W9: parse + format (the canonical text) + lower (open the tables the query reads and build
/// its logical plan; no SQL unparse, no execution) of each workload query, on the generated
/// dataset. W8's lowering is `Engine::lower_context`: the one plan whose result is CONTEXT FOR's
/// packing decisions, over the generated object tables.
fn bench_w9(c: &mut Criterion) {
    let (rows, rt, dir, _) = generated_engine();
    // W8 lowers over object tables: generate them beside the events (planning reads footers
    // only, so their number matters little).
    let objects = bench_objects(2_000);
    generate_objects(&ObjectGenOptions::new(dir.path(), objects)).expect("generate objects");
    let engine = Engine::open(dir.path()).expect("open dataset");
    let mut group = c.benchmark_group("w9");
    group
        .sample_size(50)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    eprintln!("w9 over {rows} generated rows and {objects} objects");
    for (name, text) in workloads() {
        group.bench_function(name, |b| {
            b.to_async(&rt).iter(|| async {
                let statement = signalql::parse(black_box(text)).expect("parse");
                let canonical = statement.to_string();
                if let Statement::ContextTask(q) = &statement {
                    black_box(engine.lower_context(q).await.expect("lower"));
                } else {
                    black_box(engine.lower_statement(&statement).await.expect("lower"));
                }
                black_box(canonical)
            })
        });
    }
    group.finish();
}

/// The same lexical-v1 scoring as plain DataFusion SQL: whole-token matches as regular
/// expressions over the lower-cased fields (the generated corpus is ASCII), the heaviest field
/// per term, floor(sum × 1e6 / 12) (the task's 4 terms make lexical-v1's denominator 12), top
/// 20. It skips what CONTEXT FOR adds (revision and tombstone selection at T, secrets, expansion,
/// packing), so it is the scoring floor.
fn lexical_sql() -> String {
    let term = |t: &str| {
        let re = format!("'(^|[^a-z0-9]){t}([^a-z0-9]|$)'");
        format!(
            "CASE WHEN regexp_like(lower(title), {re}) THEN 3 \
             WHEN regexp_like(lower(summary), {re}) THEN 2 \
             WHEN regexp_like(lower(other), {re}) THEN 1 ELSE 0 END"
        )
    };
    let sum: Vec<String> = context_task().split(' ').map(term).collect();
    format!(
        "WITH r AS (\
           SELECT o.object_id, o.title, \
             max(CASE WHEN p.name = 'summary' THEN p.content END) AS summary, \
             string_agg(CASE WHEN p.name <> 'summary' THEN p.content END, '\n') AS other \
           FROM objects o JOIN representations p ON p.object_id = o.object_id \
           GROUP BY o.object_id, o.title) \
         SELECT object_id, CAST(floor(({}) * 1000000 / 12) AS BIGINT) AS score \
         FROM r ORDER BY score DESC, object_id LIMIT 20",
        sum.join(" + ")
    )
}

/// `SIGNALQL_BENCH_OBJECTS`, or `default`.
fn bench_objects(default: u64) -> u64 {
    std::env::var("SIGNALQL_BENCH_OBJECTS")
        .ok()
        .and_then(|s| s.replace('_', "").parse().ok())
        .unwrap_or(default)
}

fn bench_context(c: &mut Criterion) {
    let objects = bench_objects(100_000);
    let rt = runtime();
    let dir = tempfile::tempdir().expect("temp dir");
    let t0 = Instant::now();
    let opts = ObjectGenOptions::new(dir.path(), objects);
    generate_objects(&opts).expect("generate objects");
    eprintln!("generated {objects} objects in {:.1?}", t0.elapsed());
    let engine = Engine::open(dir.path()).expect("open dataset");
    for t in ["objects", "representations"] {
        let info = rt
            .block_on(engine.dataset().table(engine.session(), t))
            .expect("object table");
        engine
            .session()
            .register_table(t, Arc::clone(&info.provider))
            .expect("register");
    }
    let query = workload("W8");
    let sql = lexical_sql();
    // Both must run; the bundle must hold items.
    rt.block_on(async {
        match engine.answer(query).await.expect("context") {
            signalql::Answer::Bundle(b) => assert!(!b.items.is_empty()),
            _ => panic!("not a bundle"),
        }
        let n: usize = run_sql(&engine, &sql)
            .await
            .iter()
            .map(|b| b.num_rows())
            .sum();
        assert_eq!(n, 20);
    });
    let mut group = c.benchmark_group("context");
    group
        .sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(10))
        .throughput(Throughput::Elements(objects));
    group.bench_function("context_for/signalql", |b| {
        b.to_async(&rt)
            .iter(|| async { engine.answer(black_box(query)).await.expect("context") })
    });
    group.bench_function("lexical_scoring/datafusion_sql", |b| {
        b.to_async(&rt)
            .iter(|| async { run_sql(&engine, black_box(&sql)).await })
    });
    group.finish();
}

/// The extended tier on generated data: entity state as of T, TRAVERSE, TREND, a governed
/// metric and DESCRIBE. Each that has one is paired with a DataFusion SQL formulation (for
/// TRAVERSE a recursive CTE) run on the engine's own context over the same tables; the metric
/// is paired with the same aggregate written without the registry.
fn bench_extended(c: &mut Criterion) {
    let (_, rt, _dir, engine) = generated_engine();
    for table in ["events", "entities", "relationships"] {
        let info = rt
            .block_on(engine.dataset().table(engine.session(), table))
            .expect("table");
        engine
            .session()
            .register_table(table, Arc::clone(&info.provider))
            .expect("register");
    }
    // The SQL side reads the same listing tables the engine builds, registered once.
    const LATEST: &str = "SELECT entity_id, last_value(attributes ORDER BY updated_at) AS attributes \
        FROM entities WHERE entity_type = 'analytics.user' \
        AND updated_at <= TIMESTAMP '2026-06-13 00:00:00+00:00' GROUP BY entity_id";
    let pairs: Vec<(&str, &str, Option<String>)> = vec![
        (
            "entity_users_by_plan",
            "FROM entity(analytics.user) GROUP BY attributes.plan RETURN attributes.plan, count",
            Some(format!(
                "SELECT attributes['plan'] AS plan, count(*) FROM ({LATEST}) GROUP BY 1 ORDER BY 1 NULLS LAST"
            )),
        ),
        (
            "traverse_referred_3",
            r#"FROM entity(analytics.user) WHERE attributes.country = "US" TRAVERSE referred DEPTH <= 3 RETURN count"#,
            Some(format!(
                "WITH RECURSIVE s AS (SELECT entity_id FROM ({LATEST}) WHERE attributes['country'] = 'US'), \
                 e AS (SELECT src_id, dst_id FROM relationships WHERE relation = 'referred' \
                   AND src_type = 'analytics.user' AND dst_type = 'analytics.user' \
                   AND created_at <= TIMESTAMP '2026-06-13 00:00:00+00:00'), \
                 w(id, hops) AS (SELECT e.dst_id, 1 FROM s JOIN e ON e.src_id = s.entity_id \
                   UNION ALL SELECT e.dst_id, w.hops + 1 FROM w JOIN e ON e.src_id = w.id WHERE w.hops < 3) \
                 SELECT count(DISTINCT id) AS count FROM w"
            )),
        ),
        (
            "trend_purchases_by_country",
            r#"FROM events WHERE event_name = "purchase" DURING LAST 28 d GROUP BY properties.country RETURN properties.country, count TREND UP OVER 8 w"#,
            None,
        ),
        (
            "metric_weekly_active_users",
            "FROM metric(analytics.weekly_active_users) DURING LAST 12 w BUCKET BY w RETURN timestamp, metric_value",
            Some(String::new()),
        ),
        ("describe_entities", "DESCRIBE entities", None),
    ];
    const WAU_PLAIN: &str = r#"FROM events WHERE event_name = "session_start" DURING LAST 12 w BUCKET BY w RETURN timestamp, count_distinct(user_id)"#;
    for (name, text, sql) in &pairs {
        let q = rt.block_on(engine.query(text)).expect("signalql query");
        let peer_rows = match sql.as_deref() {
            Some("") => rt
                .block_on(engine.query(WAU_PLAIN))
                .expect("plain")
                .rows
                .len(),
            Some(sql) => rt.block_on(async {
                let b = run_sql(&engine, sql).await;
                let n: usize = b.iter().map(|b| b.num_rows()).sum();
                n
            }),
            None => q.rows.len(),
        };
        assert_eq!(q.rows.len(), peer_rows, "{name}");
        if *name == "traverse_referred_3" {
            let sql = sql.as_deref().unwrap_or_default();
            let b = rt.block_on(async { run_sql(&engine, sql).await });
            let want = datafusion::arrow::util::display::array_value_to_string(b[0].column(0), 0)
                .expect("count");
            assert_eq!(q.rows[0][0].to_string(), want, "traversal counts agree");
        }
    }
    let mut group = c.benchmark_group("extended");
    group
        .sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4));
    for (name, text, sql) in &pairs {
        let text: &str = text;
        group.bench_function(format!("{name}/signalql"), |b| {
            b.to_async(&rt)
                .iter(|| async { engine.query(black_box(text)).await.expect("query") })
        });
        match sql.as_deref() {
            Some("") => {
                group.bench_function(format!("{name}/plain_signalql"), |b| {
                    b.to_async(&rt)
                        .iter(|| async { engine.query(black_box(WAU_PLAIN)).await.expect("query") })
                });
            }
            Some(sql) => {
                group.bench_function(format!("{name}/datafusion_sql"), |b| {
                    b.to_async(&rt)
                        .iter(|| async { run_sql(&engine, black_box(sql)).await })
                });
            }
            None => {}
        }
    }
    group.finish();
}

/// The fixed cost of a statement by stage, on the bundled sample (`data/sample`, 150 000 events
/// in one 1.4 MB file), warm in one process (issue 45, point 6). Each stage is timed alone:
/// `open_table` (the events table opened as a statement opens it), `parse`, `bind_lower` (the
/// tables bound, the logical plan built), `sql` (the plan unparsed to SQL and digested for the
/// envelope), `optimize` (DataFusion's analyzer and logical optimizer), `physical` (the physical
/// planner and physical optimizer), `execute` (the physical plan run to its last batch), and
/// `whole` (`Engine::query`: all of them, plus the envelope). CONTEXT FOR over the sample's 12
/// documents is timed whole.
fn bench_stages(c: &mut Criterion) {
    use datafusion::execution::session_state::SessionState;
    let rt = runtime();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/sample");
    let engine = Engine::open(&root).expect("open the sample");
    // As `serve` and `mcp` answer: with a plan cache, whose hits run the kept physical plan.
    let cached = Engine::open_with(
        &root,
        signalql::EngineOptions {
            plan_cache: Some(Default::default()),
            resident: Some(Default::default()),
            ..Default::default()
        },
    )
    .expect("open the sample");
    let statements = [
        ("count", workload("W1")),
        (
            "daily_series",
            "FROM events DURING LAST 30 d BUCKET BY d RETURN timestamp, count ORDER BY timestamp ASC",
        ),
        ("funnel", workload("W6")),
    ];
    let mut group = c.benchmark_group("stages");
    group
        .sample_size(50)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    bench_open_events(&mut group, &rt, &engine, "open_table");
    let state = || -> SessionState { engine.session().state() };
    for (name, text) in statements {
        let statement = signalql::parse(text).expect("parse");
        let lowered = rt
            .block_on(engine.lower_statement(&statement))
            .expect("lower");
        let optimized = state().optimize(&lowered.plan).expect("optimize");
        group.bench_function(format!("{name}/parse"), |b| {
            b.iter(|| signalql::parse(black_box(text)).expect("parse"))
        });
        group.bench_function(format!("{name}/bind_lower"), |b| {
            b.to_async(&rt)
                .iter(|| async { engine.lower_statement(&statement).await.expect("lower") })
        });
        group.bench_function(format!("{name}/sql"), |b| {
            b.iter(|| {
                // A funnel's plan has no SQL text (the unparser cannot write it back).
                signalql::plan_sql(black_box(&lowered.plan))
                    .map(|sql| signalql::envelope::sql_digest(&sql))
                    .ok()
            })
        });
        group.bench_function(format!("{name}/optimize"), |b| {
            b.iter(|| {
                state()
                    .optimize(black_box(&lowered.plan))
                    .expect("optimize")
            })
        });
        group.bench_function(format!("{name}/physical"), |b| {
            b.to_async(&rt).iter(|| async {
                let s = state();
                s.query_planner()
                    .create_physical_plan(black_box(&optimized), &s)
                    .await
                    .expect("physical plan")
            })
        });
        // A fresh physical plan per run (planned untimed): a plan's operators keep state.
        group.bench_function(format!("{name}/execute"), |b| {
            b.to_async(&rt).iter_custom(|iters| {
                let optimized = &optimized;
                async move {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        let s = state();
                        let plan = s
                            .query_planner()
                            .create_physical_plan(optimized, &s)
                            .await
                            .expect("physical plan");
                        let started = Instant::now();
                        black_box(
                            datafusion::physical_plan::collect(plan, s.task_ctx())
                                .await
                                .expect("run"),
                        );
                        total += started.elapsed();
                    }
                    total
                }
            })
        });
        group.bench_function(format!("{name}/whole"), |b| {
            b.to_async(&rt)
                .iter(|| async { engine.query(black_box(text)).await.expect("query") })
        });
        group.bench_function(format!("{name}/whole_cached"), |b| {
            b.to_async(&rt)
                .iter(|| async { cached.query(black_box(text)).await.expect("query") })
        });
    }
    let context = "CONTEXT FOR \"parquet storage engine budget\" BUDGET 2000 TOKENS";
    group.bench_function("context_for/whole", |b| {
        b.to_async(&rt).iter(|| async {
            engine
                .answer(black_box(context))
                .await
                .expect("context for")
        })
    });
    group.finish();
}

criterion_group!(
    benches,
    bench_syntax,
    bench_lowering,
    bench_udf,
    bench_end_to_end,
    bench_context,
    bench_extended,
    bench_w9,
    bench_stages
);
criterion_main!(benches);
