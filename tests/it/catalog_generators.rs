//! Tests of the deterministic events generator: determinism, shape, ranges and realism.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use datafusion::arrow::array::{Array, AsArray, RecordBatch};
use datafusion::arrow::datatypes::{
    DataType, Field, Fields, Float64Type, Schema, TimeUnit, TimestampMicrosecondType,
};
use datafusion::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use signalql_catalog::generator::{GenOptions, Shape, default_end, generate_events};

/// 2026-06-13T00:00:00Z and 2026-03-15T00:00:00Z (90 days before), in microseconds.
const END_US: i64 = 1_781_308_800_000_000;
const BEGIN_US: i64 = 1_773_532_800_000_000;

fn opts(out: &Path, rows: u64, seed: u64) -> GenOptions {
    GenOptions {
        rows,
        seed,
        out: out.to_path_buf(),
        end: default_end(),
        days: 90,
        shape: Shape::Sessions,
        users: None,
    }
}

fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

fn read_all(paths: &[PathBuf]) -> Vec<RecordBatch> {
    let mut out = Vec::new();
    for p in paths {
        let reader = ParquetRecordBatchReaderBuilder::try_new(File::open(p).unwrap())
            .unwrap()
            .build()
            .unwrap();
        for b in reader {
            out.push(b.unwrap());
        }
    }
    out
}

fn expected_schema() -> Schema {
    let props = Fields::from(vec![
        Field::new("amount", DataType::Float64, true),
        Field::new("country", DataType::Utf8, true),
        Field::new("experiment_variant", DataType::Utf8, true),
        Field::new("path", DataType::Utf8, true),
        Field::new("plan", DataType::Utf8, true),
        Field::new("platform", DataType::Utf8, true),
    ]);
    Schema::new(vec![
        Field::new("event_name", DataType::Utf8, false),
        Field::new("user_id", DataType::Utf8, true),
        Field::new("session_id", DataType::Utf8, true),
        Field::new(
            "timestamp",
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            false,
        ),
        Field::new("properties", DataType::Struct(props), true),
    ])
}

#[test]
fn default_end_is_2026_06_13() {
    assert_eq!(default_end().timestamp_micros(), END_US);
    let o = GenOptions::new("x");
    assert_eq!((o.days, o.end), (90, default_end()));
}

#[test]
fn same_seed_same_bytes_other_seed_other_bytes() {
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    let c = tempfile::tempdir().unwrap();
    let sa = generate_events(&opts(a.path(), 20_000, 7), None).unwrap();
    let sb = generate_events(&opts(b.path(), 20_000, 7), None).unwrap();
    let sc = generate_events(&opts(c.path(), 20_000, 8), None).unwrap();
    assert_eq!((sa.files, sc.rows), (1, 20_000));
    assert_eq!(
        (sa.rows, sa.files, sa.users, sa.bytes),
        (sb.rows, sb.files, sb.users, sb.bytes)
    );
    let bytes = |dir: &Path| std::fs::read(dir.join("events/part-00000.parquet")).unwrap();
    assert_eq!(bytes(a.path()), bytes(b.path()));
    assert_ne!(bytes(a.path()), bytes(c.path()));
    assert_eq!(
        std::fs::read(a.path().join("signalql.toml")).unwrap(),
        std::fs::read(b.path().join("signalql.toml")).unwrap()
    );
}

/// The flat shape: every one of the 500 users appears (20 000 rows, 40 per user on average:
/// the chance a given user is never drawn is (499/500)^20000 ≈ e^-40), the header names the
/// shape, times are in range and sorted, and the same seed gives the same bytes.
#[test]
fn flat_shape_draws_users_uniformly() {
    let flat = |dir: &Path| GenOptions {
        shape: Shape::Flat,
        users: Some(500),
        ..opts(dir, 20_000, 3)
    };
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    let summary = generate_events(&flat(a.path()), None).unwrap();
    generate_events(&flat(b.path()), None).unwrap();
    assert_eq!((summary.rows, summary.users), (20_000, 500));
    let bytes = |dir: &Path| std::fs::read(dir.join("events/part-00000.parquet")).unwrap();
    assert_eq!(bytes(a.path()), bytes(b.path()));
    let header = std::fs::read_to_string(a.path().join("signalql.toml")).unwrap();
    assert!(
        header.starts_with(
            "# Written by `signalql gen` (rows = 20000, seed = 3, days = 90, shape = flat, users = 500)."
        ),
        "{header}"
    );
    let mut users = BTreeSet::new();
    let mut names = BTreeSet::new();
    let mut last = i64::MIN;
    for batch in read_all(&summary.paths) {
        let name = batch.column(0).as_string::<i32>();
        let user = batch.column(1).as_string::<i32>();
        let ts = batch.column(3).as_primitive::<TimestampMicrosecondType>();
        for i in 0..batch.num_rows() {
            assert!((BEGIN_US..END_US).contains(&ts.value(i)));
            assert!(ts.value(i) >= last, "file not sorted by timestamp");
            last = ts.value(i);
            users.insert(user.value(i).to_string());
            names.insert(name.value(i).to_string());
        }
    }
    assert_eq!(users.len(), 500);
    assert_eq!(names.len(), 10, "{names:?}");
}

#[test]
fn shape_ranges_and_realism() {
    let dir = tempfile::tempdir().unwrap();
    let summary = generate_events(&opts(dir.path(), 40_001, 42), None).unwrap();
    assert_eq!(summary.rows, 40_001);
    assert_eq!(summary.files, 1);
    assert_eq!(
        listing(&dir.path().join("events")),
        vec!["part-00000.parquet"]
    );
    assert_eq!(
        listing(dir.path()),
        vec![
            "entities",
            "events",
            "metrics.toml",
            "relationships",
            "signalql.toml",
            "signals"
        ]
    );
    assert_eq!(
        listing(&dir.path().join("signals")),
        vec!["part-00000.parquet", "part-00001.parquet"]
    );
    let on_disk: u64 = summary
        .paths
        .iter()
        .map(|p| std::fs::metadata(p).unwrap().len())
        .sum();
    assert_eq!(summary.bytes, on_disk);

    let toml = std::fs::read_to_string(dir.path().join("signalql.toml")).unwrap();
    assert!(toml.contains("now = \"2026-06-13T00:00:00Z\""), "{toml}");
    assert!(
        toml.contains("[units]\n\"properties.amount\" = \"USD\""),
        "{toml}"
    );

    let batches = read_all(&summary.paths);
    assert_eq!(batches[0].schema().as_ref(), &expected_schema());
    let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
    assert_eq!(rows, 40_001);

    let mut names: BTreeMap<String, usize> = BTreeMap::new();
    let mut null_users = 0;
    let mut users = BTreeSet::new();
    let mut users_by_event: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut session_users: BTreeMap<String, BTreeSet<Option<String>>> = BTreeMap::new();
    let mut last_ts = i64::MIN;
    let mut hours = [0usize; 24];
    for b in &batches {
        let name = b.column(0).as_string::<i32>();
        let user = b.column(1).as_string::<i32>();
        let session = b.column(2).as_string::<i32>();
        let ts = b.column(3).as_primitive::<TimestampMicrosecondType>();
        let props = b.column(4).as_struct();
        assert_eq!(props.null_count(), 0);
        let amount = props
            .column_by_name("amount")
            .unwrap()
            .as_primitive::<Float64Type>();
        let path = props.column_by_name("path").unwrap().as_string::<i32>();
        let plan = props.column_by_name("plan").unwrap().as_string::<i32>();
        let platform = props.column_by_name("platform").unwrap().as_string::<i32>();
        let variant = props
            .column_by_name("experiment_variant")
            .unwrap()
            .as_string::<i32>();
        for i in 0..b.num_rows() {
            let t = ts.value(i);
            assert!(
                (BEGIN_US..END_US).contains(&t),
                "timestamp {t} out of range"
            );
            assert!(t >= last_ts, "file not sorted by timestamp");
            last_ts = t;
            hours[((t / 3_600_000_000) % 24) as usize] += 1;
            let n = name.value(i).to_string();
            *names.entry(n.clone()).or_default() += 1;
            assert!(session.is_valid(i));
            let s = session.value(i);
            assert!(s.starts_with('s') && s.len() >= 8, "{s}");
            let u = user.is_valid(i).then(|| user.value(i).to_string());
            session_users
                .entry(s.to_string())
                .or_default()
                .insert(u.clone());
            match &u {
                None => {
                    null_users += 1;
                    assert!(plan.is_null(i) && variant.is_null(i));
                }
                Some(u) => {
                    assert!(u.starts_with('u') && u.len() >= 7, "{u}");
                    assert!(["control", "treatment"].contains(&variant.value(i)));
                    users.insert(u.clone());
                    users_by_event
                        .entry(n.clone())
                        .or_default()
                        .insert(u.clone());
                }
            }
            if plan.is_valid(i) {
                assert!(["free", "pro", "team", "enterprise"].contains(&plan.value(i)));
            }
            assert!(["web", "ios", "android"].contains(&platform.value(i)));
            assert_eq!(path.is_valid(i), n == "page_view", "path only on page_view");
            if path.is_valid(i) {
                assert!(path.value(i).starts_with('/'));
            }
            let has_amount = n == "checkout" || n == "purchase";
            assert_eq!(
                amount.is_valid(i),
                has_amount,
                "amount only on checkout/purchase"
            );
            if has_amount {
                let a = amount.value(i);
                assert!((5.0..=500.0).contains(&a), "amount {a}");
                assert!(
                    ((a * 100.0).round() - a * 100.0).abs() < 1e-6,
                    "amount {a} has > 2 decimals"
                );
            }
        }
    }
    // A session belongs to one user (or is anonymous).
    assert!(session_users.values().all(|u| u.len() == 1));
    assert_eq!(summary.users, users.len() as u64);
    // ~40 events per user.
    assert!((500..=1100).contains(&users.len()), "{} users", users.len());
    // ~2% anonymous events.
    let share = null_users as f64 / 40_001.0;
    assert!((0.005..0.05).contains(&share), "null user share {share}");
    // page_view is the most frequent event; every event name appears.
    let top = names.iter().max_by_key(|(_, c)| **c).unwrap().0;
    assert_eq!(top, "page_view");
    for n in [
        "page_view",
        "session_start",
        "visit",
        "signup",
        "activated",
        "checkout",
        "purchase",
        "error",
        "click",
        "logout",
    ] {
        assert!(
            names.get(n).copied().unwrap_or(0) > 0,
            "no {n} events: {names:?}"
        );
    }
    // Funnels narrow: visit > signup > activated, checkout > purchase (in users).
    let u = |n: &str| users_by_event.get(n).map_or(0, |s| s.len());
    assert!(
        u("visit") > u("signup") && u("signup") > u("activated"),
        "{}",
        u("visit")
    );
    assert!(u("checkout") > u("purchase") && u("purchase") > 0);
    // Daily seasonality: the busiest hour has clearly more events than the quietest.
    let (lo, hi) = (hours.iter().min().unwrap(), hours.iter().max().unwrap());
    assert!(*hi > 2 * *lo, "{hours:?}");
}

#[test]
fn refuses_to_overwrite_and_keeps_existing_config() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("signalql.toml"),
        "now = \"2020-01-01T00:00:00Z\"\n",
    )
    .unwrap();
    let s = generate_events(&opts(dir.path(), 1_000, 1), None).unwrap();
    assert_eq!(s.rows, 1_000);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("signalql.toml")).unwrap(),
        "now = \"2020-01-01T00:00:00Z\"\n"
    );
    let before = std::fs::read(dir.path().join("events/part-00000.parquet")).unwrap();
    let err = generate_events(&opts(dir.path(), 1_000, 2), None).unwrap_err();
    assert!(
        err.to_string().contains("already holds generated data"),
        "{err}"
    );
    assert_eq!(
        listing(&dir.path().join("events")),
        vec!["part-00000.parquet"]
    );
    assert_eq!(
        std::fs::read(dir.path().join("events/part-00000.parquet")).unwrap(),
        before
    );
}

#[test]
fn tiny_and_invalid_options() {
    let dir = tempfile::tempdir().unwrap();
    let s = generate_events(&opts(dir.path(), 1, 3), None).unwrap();
    assert_eq!((s.rows, s.files), (1, 1));
    let batches = read_all(&s.paths);
    assert_eq!(batches.iter().map(|b| b.num_rows()).sum::<usize>(), 1);

    let empty = tempfile::tempdir().unwrap();
    assert!(generate_events(&opts(empty.path(), 0, 3), None).is_err());
    let mut o = opts(empty.path(), 10, 3);
    o.days = 0;
    assert!(generate_events(&o, None).is_err());
    assert!(!empty.path().join("events").exists());
}

#[test]
fn progress_counts_rows() {
    let dir = tempfile::tempdir().unwrap();
    let pb = indicatif::ProgressBar::hidden();
    generate_events(&opts(dir.path(), 5_000, 9), Some(&pb)).unwrap();
    assert_eq!(pb.position(), 5_000);
}

#[test]
fn schema_is_shared_with_library() {
    let schema = signalql_catalog::generator::generated_events_schema();
    assert_eq!(schema.as_ref(), &expected_schema());
    let _: Arc<Schema> = schema;
}

/// 2.2 M rows: slow unoptimised, so ignored in debug builds; a release test run runs it.
#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "slow in debug builds: cargo test --release --test it -- catalog_generators::large_runs_split_into_sorted_files"
)]
fn large_runs_split_into_sorted_files() {
    let dir = tempfile::tempdir().unwrap();
    let rows = 2 * 1_048_576 + 100_000;
    let s = generate_events(&opts(dir.path(), rows, 11), None).unwrap();
    assert_eq!((s.rows, s.files), (rows, 2));
    assert_eq!(
        listing(&dir.path().join("events")),
        vec!["part-00000.parquet", "part-00001.parquet"]
    );
    let mut total = 0;
    for p in &s.paths {
        let mut last = i64::MIN;
        for b in read_all(std::slice::from_ref(p)) {
            total += b.num_rows() as u64;
            let ts = b.column(3).as_primitive::<TimestampMicrosecondType>();
            for t in ts.values().iter() {
                assert!(*t >= last && (BEGIN_US..END_US).contains(t));
                last = *t;
            }
        }
    }
    assert_eq!(total, rows);
}

/// The signals table gives each user who appears in the events exactly the arm their events
/// carry in `properties.experiment_variant`, and nothing else.
#[tokio::test]
async fn signals_match_the_events_variants() {
    use datafusion::prelude::{ParquetReadOptions, SessionContext};
    let dir = tempfile::tempdir().unwrap();
    generate_events(&opts(dir.path(), 20_000, 5), None).unwrap();
    let ctx = SessionContext::new();
    let root = dir.path().display().to_string();
    ctx.register_parquet(
        "events",
        format!("{root}/events/"),
        ParquetReadOptions::default(),
    )
    .await
    .unwrap();
    ctx.register_parquet(
        "signals",
        format!("{root}/signals/"),
        ParquetReadOptions::default(),
    )
    .await
    .unwrap();
    let sql = "SELECT
        (SELECT count(*) FROM signals WHERE name = 'experiment_variant') AS n_signals,
        (SELECT count(DISTINCT user_id) FROM events) AS n_users,
        (SELECT count(*) FROM (SELECT DISTINCT user_id, properties['experiment_variant'] AS v FROM events WHERE user_id IS NOT NULL) e
           JOIN signals s ON e.user_id = s.entity_id AND e.v = s.value AND s.name = 'experiment_variant') AS matched";
    let batches = ctx.sql(sql).await.unwrap().collect().await.unwrap();
    let text = datafusion::arrow::util::pretty::pretty_format_batches(&batches)
        .unwrap()
        .to_string();
    let nums: Vec<i64> = text
        .lines()
        .nth(3)
        .unwrap()
        .split('|')
        .filter_map(|c| c.trim().parse().ok())
        .collect();
    assert_eq!(nums.len(), 3, "{text}");
    assert!(nums[0] > 100, "{text}");
    assert_eq!(nums[0], nums[1], "one signal per user: {text}");
    assert_eq!(
        nums[0], nums[2],
        "each signal matches the user's events: {text}"
    );
}

#[test]
fn gen_objects_is_deterministic() {
    use signalql_catalog::objects::generator::{ObjectGenOptions, generate_objects};
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    let sa = generate_objects(&ObjectGenOptions::new(a.path(), 300)).unwrap();
    let sb = generate_objects(&ObjectGenOptions::new(b.path(), 300)).unwrap();
    assert_eq!(sa, sb);
    assert_eq!((sa.objects, sa.representations), (300, 600));
    for t in [
        "objects",
        "revisions",
        "representations",
        "links",
        "derivations",
    ] {
        let f = |root: &std::path::Path| {
            std::fs::read(root.join(t).join("part-00000.parquet")).unwrap()
        };
        assert_eq!(f(a.path()), f(b.path()), "{t} differs");
    }
    // A second run into the same root refuses rather than mixing stores.
    assert!(generate_objects(&ObjectGenOptions::new(a.path(), 300)).is_err());
}

/// `--vocabulary zipf`: the same seed gives the same bytes, and the words follow Zipf(1),
/// counted here from the written bodies with a tokenizer of the test's own (runs of ASCII
/// letters, lower-cased): thousands of distinct words, the most frequent about ten times as
/// frequent as the tenth, and mid-rank words in under 5 % of the objects while the most
/// frequent is in most of them.
#[test]
fn gen_objects_zipf_vocabulary_is_zipfian_and_deterministic() {
    use signalql_catalog::objects::generator::{ObjectGenOptions, Vocabulary, generate_objects};
    let gen_into = |dir: &Path| {
        generate_objects(&ObjectGenOptions {
            vocabulary: Vocabulary::Zipf,
            ..ObjectGenOptions::new(dir, 2_000)
        })
        .unwrap()
    };
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    assert_eq!(gen_into(a.path()), gen_into(b.path()));
    let file =
        |root: &Path| std::fs::read(root.join("representations/part-00000.parquet")).unwrap();
    assert_eq!(file(a.path()), file(b.path()));

    let batches = read_all(&[a.path().join("representations/part-00000.parquet")]);
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    let mut objects_with: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut body_words = Vec::new();
    for batch in &batches {
        let ids = batch
            .column_by_name("object_id")
            .unwrap()
            .as_string::<i32>();
        let names = batch.column_by_name("name").unwrap().as_string::<i32>();
        let content = batch.column_by_name("content").unwrap().as_string::<i64>();
        for row in 0..batch.num_rows() {
            if names.value(row) != "text" {
                continue;
            }
            let words: Vec<String> = content
                .value(row)
                .split(|c: char| !c.is_ascii_alphabetic())
                .filter(|w| !w.is_empty())
                .map(str::to_ascii_lowercase)
                .collect();
            body_words.push(words.len());
            for w in words {
                *counts.entry(w.clone()).or_default() += 1;
                objects_with
                    .entry(w)
                    .or_default()
                    .insert(ids.value(row).to_string());
            }
        }
    }
    assert_eq!(body_words.len(), 2_000);
    assert!(
        body_words.iter().all(|n| (100..=1_530).contains(n)),
        "body lengths"
    );
    let mean = body_words.iter().sum::<usize>() as f64 / body_words.len() as f64;
    assert!((400.0..700.0).contains(&mean), "mean body {mean}");
    let mut by_count: Vec<(u64, &String)> = counts.iter().map(|(w, c)| (*c, w)).collect();
    by_count.sort_by(|x, y| y.cmp(x));
    assert!(by_count.len() > 15_000, "{} distinct words", by_count.len());
    let ratio = by_count[0].0 as f64 / by_count[9].0 as f64;
    assert!((7.0..14.0).contains(&ratio), "rank 1 / rank 10 = {ratio}");
    let share = |w: &String| objects_with[w].len() as f64 / 2_000.0;
    assert!(
        share(by_count[0].1) > 0.9,
        "the most frequent word is in most objects"
    );
    for rank in [2_000, 5_000, 10_000] {
        let w = by_count[rank].1;
        assert!(
            share(w) < 0.05,
            "rank {rank} ({w}) in {} of the objects",
            share(w)
        );
    }
}

/// The generated entity graph agrees with the events: one `analytics.user` per user seen (its
/// first row carrying the events' plan and variant), one `member_of` edge per user to an
/// existing account, referrals only from earlier users, and each user's `churn_risk` twice.
#[tokio::test]
async fn entity_graph_matches_the_events() {
    use datafusion::prelude::{ParquetReadOptions, SessionContext};
    let dir = tempfile::tempdir().unwrap();
    generate_events(&opts(dir.path(), 20_000, 5), None).unwrap();
    let ctx = SessionContext::new();
    let root = dir.path().display().to_string();
    for t in ["events", "signals", "entities", "relationships"] {
        ctx.register_parquet(t, format!("{root}/{t}/"), ParquetReadOptions::default())
            .await
            .unwrap();
    }
    let one = |sql: &'static str| {
        let ctx = ctx.clone();
        async move {
            let b = ctx.sql(sql).await.unwrap().collect().await.unwrap();
            let v = datafusion::arrow::compute::cast(b[0].column(0), &DataType::Int64).unwrap();
            v.as_any()
                .downcast_ref::<datafusion::arrow::array::Int64Array>()
                .unwrap()
                .value(0)
        }
    };
    let users = one("SELECT count(DISTINCT user_id) FROM events").await;
    assert!(users > 100);
    let user_entities =
        one("SELECT count(DISTINCT entity_id) FROM entities WHERE entity_type = 'analytics.user'")
            .await;
    assert_eq!(users, user_entities);
    // The first row of each user agrees with the events' plan and variant.
    let mismatched = one(
        "WITH first AS (SELECT entity_id, attributes['plan'] AS plan,
                attributes['experiment_variant'] AS v,
                row_number() OVER (PARTITION BY entity_id ORDER BY updated_at) AS rn
              FROM entities WHERE entity_type = 'analytics.user'),
         ev AS (SELECT DISTINCT user_id, properties['plan'] AS plan,
                properties['experiment_variant'] AS v FROM events WHERE user_id IS NOT NULL)
         SELECT count(*) FROM first f JOIN ev e ON f.entity_id = e.user_id
         WHERE f.rn = 1 AND ((f.plan IS DISTINCT FROM e.plan) OR (f.v IS DISTINCT FROM e.v))",
    )
    .await;
    assert_eq!(mismatched, 0);
    let upgrades = one(
        "SELECT count(*) FROM (SELECT entity_id FROM entities WHERE entity_type = 'analytics.user'
         GROUP BY entity_id HAVING count(*) > 1)",
    )
    .await;
    assert!(upgrades > 0, "some users have a newer row");
    let member = one("SELECT count(*) FROM relationships r JOIN entities a
           ON a.entity_type = 'analytics.account' AND a.entity_id = r.dst_id
         WHERE r.relation = 'member_of'")
    .await;
    assert_eq!(member, users, "one member_of edge per user, to an account");
    let backwards =
        one("SELECT count(*) FROM relationships WHERE relation = 'referred' AND src_id >= dst_id")
            .await;
    assert_eq!(backwards, 0, "referrals come from earlier users");
    let churn = one("SELECT count(*) FROM signals WHERE name = 'churn_risk'").await;
    assert_eq!(churn, 2 * users);
}
