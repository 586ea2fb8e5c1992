//! The memory pool bounds the process (DESIGN.md §4): the hourly-by-user dense series over
//! 200 000 generated events, run by the CLI: refused by `max_groups` by default; with it
//! lifted, answered within 1.25 × a 256 MiB pool (peak RSS of the child); under a pool too
//! small for it, `limit_exceeded` naming the limit.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

const QUERY: &str =
    "FROM events DURING LAST 366 d BUCKET BY h GROUP BY user_id RETURN timestamp, user_id, count";

/// Runs the query's CLI child; its JSON error and the peak RSS (VmHWM) seen while it ran.
fn run(root: &Path) -> (serde_json::Value, u64) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_signalql"))
        .args(["query", "--format", "json", "--data"])
        .arg(root)
        .arg(QUERY)
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
    let root = tmp.path().join("ds");
    let o = Command::new(env!("CARGO_BIN_EXE_signalql"))
        .args(["gen", "events", "--rows", "200000", "--out"])
        .arg(&root)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));

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
