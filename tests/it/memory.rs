//! The memory pool bounds the process (DESIGN.md §4): the hourly-by-user dense series over
//! 200 000 generated events, run by the CLI: refused by `max_groups` by default; with it
//! lifted, answered within 1.25 × a 256 MiB pool (peak RSS of the child); under a pool too
//! small for it, `limit_exceeded` naming the limit.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

/// 200 000 generated events under `dir/ds` (4 618 users, 30 726 sessions).
fn generated(dir: &Path) -> std::path::PathBuf {
    let root = dir.join("ds");
    let o = Command::new(env!("CARGO_BIN_EXE_signalql"))
        .args(["gen", "events", "--rows", "200000", "--out"])
        .arg(&root)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    root
}

const QUERY: &str =
    "FROM events DURING LAST 366 d BUCKET BY h GROUP BY user_id RETURN timestamp, user_id, count";

/// Runs the query's CLI child; its JSON error and the peak RSS (VmHWM) seen while it ran.
fn run(root: &Path) -> (serde_json::Value, u64) {
    run_query(root, QUERY)
}

/// Runs `query` in a CLI child; its JSON answer and the peak RSS (VmHWM) seen while it ran.
fn run_query(root: &Path, query: &str) -> (serde_json::Value, u64) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_signalql"))
        .args(["query", "--format", "json", "--data"])
        .arg(root)
        .arg(query)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Read the answer while the child runs: a 10 000-row envelope is more than a pipe holds.
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut out = Vec::new();
        std::io::Read::read_to_end(&mut stdout, &mut out).unwrap();
        out
    });
    let status = format!("/proc/{}/status", child.id());
    let mut peak_kib = 0u64;
    while child.try_wait().unwrap().is_none() {
        if let Ok(s) = std::fs::read_to_string(&status)
            && let Some(line) = s.lines().find(|l| l.starts_with("VmHWM:"))
        {
            let kib: u64 = line
                .split_whitespace()
                .nth(1)
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            peak_kib = peak_kib.max(kib);
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let out = reader.join().unwrap();
    let json = serde_json::from_slice(&out).unwrap();
    (json, peak_kib * 1024)
}

#[test]
fn the_hourly_by_user_query_stays_within_the_pool() {
    let tmp = tempfile::tempdir().unwrap();
    let root = generated(tmp.path());

    // Default limits: buckets × users is far above max_groups, refused before the series is built.
    std::fs::write(
        root.join("signalql.toml"),
        "now = \"2026-06-13T00:00:00Z\"\n",
    )
    .unwrap();
    let (json, rss) = run(&root);
    assert_eq!(json["error"]["code"], "limit_exceeded", "{json}");
    assert_eq!(json["error"]["limit"], "max_groups", "{json}");
    assert_eq!(json["error"]["max"], 100_000);
    eprintln!("default limits: {} MiB peak RSS", rss >> 20);

    // max_groups lifted, a 256 MiB pool: the 40 million-row series streams past the sparse
    // aggregate into the top-10 000 cut, so it answers (truncated) within the pool.
    let pool: u64 = 256 << 20;
    let config = |memory: u64| {
        format!(
            "now = \"2026-06-13T00:00:00Z\"\n[limits]\nmemory_bytes = {memory}\n\
             max_groups = 1000000000\n"
        )
    };
    std::fs::write(root.join("signalql.toml"), config(pool)).unwrap();
    let (json, rss) = run(&root);
    assert_eq!(json["metadata"]["row_count"], 10_000, "{json}");
    assert_eq!(json["metadata"]["truncated"], true);
    eprintln!(
        "256 MiB pool: {} MiB peak RSS ({:.2} x the pool)",
        rss >> 20,
        rss as f64 / pool as f64
    );
    assert!(rss > 0, "the child's RSS was read");
    assert!(
        rss as f64 <= 1.25 * pool as f64,
        "peak RSS {rss} above 1.25 x {pool}"
    );

    // A pool the aggregate cannot fit in: limit_exceeded naming the limit, not internal_error.
    std::fs::write(root.join("signalql.toml"), config(1 << 20)).unwrap();
    let (json, _) = run(&root);
    assert_eq!(json["error"]["code"], "limit_exceeded", "{json}");
    assert_eq!(json["error"]["limit"], "query_memory_bytes", "{json}");
    assert_eq!(json["error"]["max"], 1 << 20);
}

/// Distinct counts of text and `stats()` per session (30 726 groups) under a 256 MiB limit.
/// DataFusion's own distinct counter gave every group an 8 KiB buffer the pool did not see
/// (2.2 GB peak on 500 000 events); signalql's counts pairs in one set. The answer agrees
/// with plain DataFusion SQL over the same files (`count(DISTINCT …)`, `avg`, `min`, `max`).
#[test]
fn distinct_counts_and_stats_by_session_stay_within_the_pool() {
    let tmp = tempfile::tempdir().unwrap();
    let root = generated(tmp.path());
    let pool: u64 = 256 << 20;
    std::fs::write(
        root.join("signalql.toml"),
        format!(
            "now = \"2026-06-13T00:00:00Z\"\n[limits]\nmemory_bytes = {pool}\n\
             max_result_rows = 100000\n"
        ),
    )
    .unwrap();
    let (json, rss) = run_query(
        &root,
        "FROM events GROUP BY session_id RETURN session_id, count_distinct(event_name), \
         count_distinct(properties.path), stats(properties.amount)",
    );
    eprintln!(
        "distinct counts by session, 256 MiB pool: {} MiB peak RSS ({:.2} x)",
        rss >> 20,
        rss as f64 / pool as f64
    );
    assert_eq!(json["metadata"]["truncated"], false, "{json}");
    assert!(
        rss > 0 && rss as f64 <= 1.25 * pool as f64,
        "peak RSS {rss}"
    );

    // The same by plain DataFusion SQL on the files: per session, both distinct counts and
    // stats' n, sum, min and max (the sum to 1e-9 relative).
    type Row = (String, i64, i64, i64, Option<f64>, Option<f64>, Option<f64>);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let expected: Vec<Row> = rt.block_on(async {
        use datafusion::arrow::array::{Array, AsArray};
        use datafusion::arrow::datatypes::{Float64Type, Int64Type};
        let ctx = datafusion::prelude::SessionContext::new();
        let events = root.join("events");
        ctx.register_parquet("events", events.to_str().unwrap(), Default::default())
            .await
            .unwrap();
        let df = ctx
            .sql(
                "SELECT session_id AS sid, count(DISTINCT event_name), \
                 count(DISTINCT properties['path']), \
                 count(properties['amount']), sum(CAST(properties['amount'] AS DOUBLE)), \
                 min(CAST(properties['amount'] AS DOUBLE)), \
                 max(CAST(properties['amount'] AS DOUBLE)) \
                 FROM events GROUP BY session_id ORDER BY sid",
            )
            .await
            .unwrap();
        let mut rows = Vec::new();
        for b in df.collect().await.unwrap() {
            let b = datafusion::arrow::compute::cast(
                b.column(0),
                &datafusion::arrow::datatypes::DataType::Utf8,
            )
            .map(|ids| (ids, b))
            .unwrap();
            let (ids, b) = b;
            let ids = ids.as_string::<i32>();
            let int = |c: usize| b.column(c).as_primitive::<Int64Type>().clone();
            let float = |c: usize| b.column(c).as_primitive::<Float64Type>().clone();
            let (c1, c2, n) = (int(1), int(2), int(3));
            let (sum, min, max) = (float(4), float(5), float(6));
            let opt = |a: &datafusion::arrow::array::Float64Array, i: usize| {
                a.is_valid(i).then(|| a.value(i))
            };
            for i in 0..b.num_rows() {
                rows.push((
                    ids.value(i).to_string(),
                    c1.value(i),
                    c2.value(i),
                    n.value(i),
                    opt(&sum, i),
                    opt(&min, i),
                    opt(&max, i),
                ));
            }
        }
        rows
    });
    let got: Vec<Row> = json["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let st = &r[3];
            (
                r[0].as_str().unwrap().to_string(),
                r[1].as_i64().unwrap(),
                r[2].as_i64().unwrap(),
                st["n"].as_i64().unwrap(),
                st["sum"].as_f64(),
                st["min"].as_f64(),
                st["max"].as_f64(),
            )
        })
        .collect();
    assert_eq!(got.len(), 30_726);
    assert_eq!(got.len(), expected.len());
    for (g, e) in got.iter().zip(&expected) {
        assert_eq!(
            (&g.0, g.1, g.2, g.3, g.5, g.6),
            (&e.0, e.1, e.2, e.3, e.5, e.6)
        );
        match (g.4, e.4) {
            (Some(a), Some(b)) => assert!((a - b).abs() <= 1e-9 * b.abs().max(1.0), "{g:?} {e:?}"),
            (a, b) => assert_eq!(a, b, "{g:?}"),
        }
    }
}

/// An answer is built in the process: with `max_result_rows` raised, 200 000 rows of four
/// columns do not fit a 128 MiB limit, although the plan does, and the query says so
/// instead of building them; under 256 MiB they are returned.
#[test]
fn an_answer_too_large_for_the_pool_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let root = generated(tmp.path());
    let q = "FROM events RETURN user_id, session_id, event_name, timestamp";
    let config = |memory: u64| {
        format!(
            "now = \"2026-06-13T00:00:00Z\"\n[limits]\nmemory_bytes = {memory}\n\
             max_result_rows = 1000000\n"
        )
    };
    std::fs::write(root.join("signalql.toml"), config(128 << 20)).unwrap();
    let (json, _) = run_query(&root, q);
    assert_eq!(json["error"]["code"], "limit_exceeded", "{json}");
    assert_eq!(json["error"]["limit"], "query_memory_bytes", "{json}");
    assert!(
        json["error"]["message"]
            .as_str()
            .unwrap()
            .contains("200000 rows"),
        "{json}"
    );
    let pool: u64 = 256 << 20;
    std::fs::write(root.join("signalql.toml"), config(pool)).unwrap();
    let (json, rss) = run_query(&root, q);
    assert_eq!(json["metadata"]["row_count"], 200_000, "{json}");
    eprintln!(
        "200 000 rows under 256 MiB: {} MiB peak RSS ({:.2} x)",
        rss >> 20,
        rss as f64 / pool as f64
    );
    assert!(rss as f64 <= 1.25 * pool as f64, "peak RSS {rss}");
}
