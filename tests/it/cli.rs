//! The `signalql` binary's contract, which outside checks rely on: subcommands, formats, exit
//! status, JSON errors, stdin, `--now`, ingest and gen.

use std::path::Path;
use std::process::{Command, Output, Stdio};

use serde_json::Value;

fn signalql(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_signalql"))
        .args(args)
        .output()
        .unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).unwrap()
}

fn json(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {}", stdout(o)))
}

#[test]
fn query_json_prints_exactly_the_envelope() {
    // 7 304 page views in [2026-06-06, 2026-06-13): the DuckDB oracle of golden spec/v01_count_events.
    let o = signalql(&[
        "query",
        "--format",
        "json",
        r#"FROM events WHERE event_name = "page_view" DURING LAST 7 d RETURN count"#,
    ]);
    assert!(o.status.success(), "{o:?}");
    let env = json(&o);
    assert_eq!(env["rows"], serde_json::json!([[7304]]));
    assert_eq!(
        env["columns"],
        serde_json::json!([{"name": "count", "type": "integer", "unit": "events"}])
    );
    let m = &env["metadata"];
    assert_eq!(m["as_of"], "2026-06-13T00:00:00Z");
    assert_eq!(m["row_count"], 1);
    assert_eq!(m["truncated"], false);
    assert_eq!(m["ordered"], false);
    assert_eq!(m["access_filtered"], false);
    assert_eq!(m["signalql_version"], "0.3");
    assert_eq!(m["cost_estimate"]["engine"], "datafusion");
    assert!(m["cost_estimate"]["scanned_rows"].as_u64().unwrap() > 0);
    assert!(
        m["compiled_sql_digest"]
            .as_str()
            .unwrap()
            .starts_with("sha256:")
    );
    assert_eq!(
        m["compiled_sql_digest"].as_str().unwrap().len(),
        "sha256:".len() + 64
    );
    assert_eq!(m["limit_applied"], 10_000);
}

#[test]
fn errors_exit_1_with_a_json_error() {
    let o = signalql(&[
        "query",
        "--format",
        "json",
        "FROM events\nWHERE event_name = \"x\" RETURN",
    ]);
    assert_eq!(o.status.code(), Some(1));
    let e = &json(&o)["error"];
    assert_eq!(e["code"], "parse_error");
    assert_eq!(e["line"], 2);
    assert_eq!(e["column"], 30);
    assert!(e["message"].as_str().unwrap().contains("expected"), "{e}");

    let o = signalql(&[
        "query",
        "--format",
        "json",
        "WATCH (FROM events RETURN count) WHEN count > 1",
    ]);
    assert_eq!(o.status.code(), Some(1));
    let e = &json(&o)["error"];
    assert_eq!(e["code"], "capability_error");
    assert_eq!(e["feature"], "WATCH");
    assert_eq!(e["tier"], "v0.3-capability");

    // Without --format json the error goes to stderr as text.
    let o = signalql(&["query", "FROM events RETURN nope"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(o.stdout.is_empty());
    assert!(String::from_utf8_lossy(&o.stderr).contains("unknown_field"));

    let o = signalql(&[
        "query",
        "--data",
        "/no/such/dataset",
        "FROM events RETURN count",
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("io_error"));
}

/// A panic inside a query (the `execute` failpoint) ends as `internal_error`, exit 1, with
/// the panic's message, as JSON too: not exit 101 and a backtrace.
#[test]
fn a_panic_inside_a_query_is_internal_error_exit_1() {
    let o = Command::new(env!("CARGO_BIN_EXE_signalql"))
        .args([
            "query",
            "--error-format",
            "json",
            "FROM events RETURN count",
        ])
        .env("SIGNALQL_FAILPOINT", "execute")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    let e = json(&o);
    assert_eq!(e["error"]["code"], "internal_error", "{e}");
    assert!(
        e["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("failpoint execute")),
        "{e}"
    );
}

#[test]
fn now_fixes_t_and_as_of_wins() {
    let o = signalql(&[
        "query",
        "--format",
        "json",
        "--now",
        "2026-06-01T00:00:00Z",
        "FROM events DURING LAST 1 d RETURN count",
    ]);
    assert!(o.status.success(), "{o:?}");
    let env = json(&o);
    assert_eq!(env["metadata"]["as_of"], "2026-06-01T00:00:00Z");
    assert_eq!(env["metadata"]["window"]["start"], "2026-05-31T00:00:00Z");
    let o = signalql(&[
        "query",
        "--format",
        "json",
        "--now",
        "2026-06-01T00:00:00Z",
        r#"FROM events DURING LAST 1 d AS OF "2026-05-01T00:00:00Z" RETURN count"#,
    ]);
    assert_eq!(json(&o)["metadata"]["as_of"], "2026-05-01T00:00:00Z");
    let o = signalql(&["query", "--now", "yesterday", "FROM events RETURN count"]);
    assert_eq!(o.status.code(), Some(1));
}

#[test]
fn query_from_stdin_and_csv_and_table() {
    let o = crate::common::signalql_with_stdin(
        &["query", "--format", "csv", "-"],
        "FROM events WHERE event_name = \"page_view\"\nDURING LAST 7 d\nRETURN count",
    );
    assert!(o.status.success());
    assert_eq!(stdout(&o), "count\r\n7304\r\n");
}

#[test]
fn table_is_the_default_format() {
    let o = signalql(&[
        "query",
        r#"FROM events WHERE event_name = "page_view" DURING LAST 7 d RETURN count"#,
    ]);
    assert!(o.status.success());
    let text = stdout(&o);
    assert!(text.starts_with("count\n-----\n7304\n"), "{text}");
    assert!(
        text.contains("(1 row; as of 2026-06-13T00:00:00Z)"),
        "{text}"
    );
}

#[test]
fn fmt_prints_canonical_text() {
    let o = signalql(&[
        "fmt",
        r#"from events where event_name="x" and (properties.plan="a" or properties.plan="b") during last 7 days return count order by count desc"#,
    ]);
    assert!(o.status.success(), "{o:?}");
    assert_eq!(
        stdout(&o),
        "FROM events\nWHERE event_name = \"x\" AND (properties.plan = \"a\" OR properties.plan = \"b\")\nDURING LAST 7 d\nRETURN count\nORDER BY count DESC\n"
    );
    let o = signalql(&[
        "fmt",
        r#"COUNT users FROM events WHERE event_name = "signup" DURING LAST 30 DAYS"#,
    ]);
    assert_eq!(
        stdout(&o),
        "FROM events\nWHERE event_name = \"signup\"\nDURING LAST 30 d\nRETURN count_distinct(user_id)\n"
    );
    let o = signalql(&["fmt", "FROM events RETURN"]);
    assert_eq!(o.status.code(), Some(1));
}

#[test]
fn compile_prints_ast_plan_and_sql() {
    let o = signalql(&[
        "compile",
        "FROM events DURING LAST 7 d GROUP BY event_name RETURN event_name, count",
    ]);
    assert!(o.status.success(), "{o:?}");
    let text = stdout(&o);
    for part in [
        "-- AST",
        "\"kind\": \"retrieve\"",
        "-- logical plan",
        "Aggregate:",
        "TableScan: events",
        "-- SQL",
        "SELECT",
    ] {
        assert!(text.contains(part), "missing {part:?} in:\n{text}");
    }
}

/// The per-user funnel aggregate is planned in one phase (engine/src/funnel_phase.rs): its
/// Partial phase would keep every event; the golden funnel cases check the answers.
#[test]
fn the_funnel_aggregate_runs_in_one_phase() {
    let o = signalql(&[
        "compile",
        r#"FUNNEL "page_view" -> "signup" FROM events WITHIN 1 d GROUP BY properties.path"#,
    ]);
    assert!(o.status.success(), "{o:?}");
    let text = stdout(&o);
    let physical = &text[text.find("-- physical plan").expect("a physical plan")..];
    let funnel_lines: Vec<&str> = physical.lines().filter(|l| l.contains("funnel(")).collect();
    assert_eq!(funnel_lines.len(), 1, "{physical}");
    assert!(
        funnel_lines[0].contains("mode=SinglePartitioned"),
        "{physical}"
    );
}

fn events_files(root: &Path) -> Vec<String> {
    match std::fs::read_dir(root.join("events")) {
        Ok(rd) => rd
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect(),
        Err(_) => vec![],
    }
}

fn ingest(file: &Path, root: &Path) -> Output {
    signalql(&[
        "ingest",
        "events",
        file.to_str().unwrap(),
        "--data",
        root.to_str().unwrap(),
    ])
}

#[test]
fn ingest_is_all_or_nothing_then_queryable() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("ds");
    let bad = dir.path().join("bad.jsonl");
    std::fs::write(
        &bad,
        "{\"event_name\":\"a\",\"timestamp\":\"2026-01-01T00:00:00Z\"}\n{\"event_name\":\"b\",\"timestamp\":\"not a time\"}\n",
    )
    .unwrap();
    let o = ingest(&bad, &root);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains(":2"), "the line number is reported: {err}");
    assert!(
        events_files(&root).is_empty(),
        "nothing written: {:?}",
        events_files(&root)
    );

    let good = dir.path().join("good.csv");
    std::fs::write(
        &good,
        "event_name,user_id,session_id,timestamp,properties\nview,u1,s1,2026-01-01T10:00:00Z,\"{\"\"plan\"\": \"\"pro\"\"}\"\nview,u2,,2026-01-01T11:00:00Z,\n",
    )
    .unwrap();
    let o = ingest(&good, &root);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = signalql(&[
        "query",
        "--data",
        root.to_str().unwrap(),
        "--format",
        "json",
        r#"FROM events GROUP BY properties.plan RETURN properties.plan, count, count(session_id)"#,
    ]);
    assert_eq!(
        json(&o)["rows"],
        serde_json::json!([["pro", 1, 1], [null, 1, 0]])
    );
}

#[test]
fn gen_is_deterministic_and_queryable() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a");
    let b = dir.path().join("b");
    for out in [&a, &b] {
        let o = signalql(&[
            "gen",
            "events",
            "--rows",
            "5000",
            "--seed",
            "7",
            "--out",
            out.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let read = |p: &Path| std::fs::read(p.join("events/part-00000.parquet")).unwrap();
    assert_eq!(read(&a), read(&b));
    let o = signalql(&[
        "query",
        "--data",
        a.to_str().unwrap(),
        "--format",
        "json",
        "FROM events RETURN count",
    ]);
    assert_eq!(json(&o)["rows"], serde_json::json!([[5000]]));
}

#[test]
fn ingest_objects_then_context_and_explain() {
    let tmp = tempfile::tempdir().unwrap();
    let docs = tmp.path().join("docs");
    std::fs::create_dir_all(&docs).unwrap();
    std::fs::write(
        docs.join("storage.md"),
        "# Object storage\n\nObjects are Parquet revisions.\n",
    )
    .unwrap();
    std::fs::write(docs.join(".env"), "TOKEN=storage\n").unwrap();
    let root = tmp.path().join("store");
    let root_s = root.to_str().unwrap();
    let docs_s = docs.to_str().unwrap();
    let args = [
        "ingest",
        "objects",
        docs_s,
        "--data",
        root_s,
        "--project",
        "p",
        "--now",
        "2026-01-01T00:00:00Z",
    ];
    let o = signalql(&args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(stdout(&o).contains("2 file(s): 2 new"), "{}", stdout(&o));
    // Again: nothing new.
    assert!(stdout(&signalql(&args)).contains("0 new, 0 revised, 2 unchanged"));

    let o = signalql(&["context", "--data", root_s, "object storage"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let b = json(&o);
    let items = b["items"].as_array().unwrap();
    assert_eq!(items.len(), 1, "the .env secret is never packed: {b}");
    // "object storage": title has both (3 + 3) / 6.
    assert_eq!(items[0]["score"], 1_000_000);
    let id = b["id"].as_str().unwrap().to_string();

    let o = signalql(&["context", "--data", root_s, "--render", "object storage"]);
    let text = stdout(&o);
    assert!(text.starts_with("# Context for: object storage"), "{text}");
    assert!(text.contains(&id));
    assert!(text.contains("Objects are Parquet revisions."));

    let o = signalql(&[
        "query",
        "--data",
        root_s,
        "--format",
        "json",
        &format!("EXPLAIN CONTEXT {id}"),
    ]);
    let x = json(&o);
    assert_eq!(x["context"], id);
    assert_eq!(x["rejected"][0]["reason"], "excluded_secret");

    // Every clause as an option: the bundle of the statement written by hand (run by
    // `query`, through the parser only).
    let by_hand = r#"CONTEXT FOR "object storage" USING PROJECT "p" USING ESTIMATOR "o200k_base" BUDGET 900 TOKENS PREFER CURRENT, VERIFIED EXCLUDE UNTRUSTED, ROLE INSTRUCTION MAX OBJECTS 3 MAX DEPTH 0 MAX AGE 3650 d WITH EVIDENCE AS OF "2026-06-01T00:00:00Z""#;
    let o = signalql(&[
        "context",
        "--data",
        root_s,
        "--project",
        "p",
        "--estimator",
        "o200k",
        "--budget",
        "900",
        "--prefer",
        "current",
        "--prefer",
        "verified",
        "--exclude",
        "untrusted",
        "--exclude",
        "role instruction",
        "--max-objects",
        "3",
        "--max-depth",
        "0",
        "--max-age",
        "3650 d",
        "--with-evidence",
        "--as-of",
        "2026-06-01T00:00:00Z",
        "object storage",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let b = json(&o);
    assert_eq!(b["metadata"]["canonical_query"], by_hand);
    assert_eq!(b["items"][0]["estimator"], "o200k_base");
    assert!(b["evidence"].is_array(), "{b}");
    let q = json(&signalql(&[
        "query", "--data", root_s, "--format", "json", by_hand,
    ]));
    assert_eq!(b["id"], q["id"]);
    // A bad option names itself, with a code, and ends with a newline.
    let o = signalql(&[
        "context",
        "--data",
        root_s,
        "--max-age",
        "3 fortnights",
        "x",
    ]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("max_age:"), "{err}");
    assert!(err.ends_with('\n'), "{err:?}");
}

#[test]
fn describe_prints_catalog_records() {
    let o = signalql(&["describe"]);
    assert!(o.status.success(), "{o:?}");
    let env = json(&o);
    let kinds: std::collections::BTreeSet<String> = env["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r[1].as_str().unwrap().to_string())
        .collect();
    let want = [
        "entity_type",
        "event",
        "metric",
        "relationship",
        "signal",
        "table",
    ];
    assert_eq!(kinds, want.iter().map(|s| s.to_string()).collect());
    let o = signalql(&["describe", "entity(analytics.account)", "--format", "csv"]);
    assert!(o.status.success(), "{o:?}");
    assert!(stdout(&o).starts_with("identifier,kind,"), "{}", stdout(&o));
    assert!(stdout(&o).contains("analytics.account,entity_type"));
    let o = signalql(&["describe", "entity(analytics.nope)"]);
    assert_eq!(o.status.code(), Some(1));
}

#[test]
fn watch_prints_one_alert_while_the_condition_stays_true() {
    let q = r#"WATCH (FROM events WHERE event_name = "error" DURING LAST 1 d RETURN count) WHEN count > 10"#;
    let o = signalql(&["watch", "--interval", "0", "--max-polls", "3", q]);
    assert!(o.status.success(), "{o:?}");
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 1, "{out}");
    let alert: Value = serde_json::from_str(lines[0]).unwrap();
    assert_eq!(alert["alert"]["poll"], 1);
    // 29 errors on 2026-06-12 in the sample (DuckDB: count(*) WHERE event_name = 'error'
    // AND timestamp in [2026-06-12, 2026-06-13)).
    assert_eq!(
        alert["alert"]["envelope"]["rows"],
        serde_json::json!([[29]])
    );
    assert_eq!(
        String::from_utf8_lossy(&o.stderr).matches("poll ").count(),
        3
    );

    // Never true: no alert line, exit 0 after the polls.
    let never = q.replace("> 10", "> 1000");
    let o = signalql(&["watch", "--interval", "0", "--max-polls", "2", &never]);
    assert!(o.status.success() && o.stdout.is_empty(), "{o:?}");

    // A bad statement fails on the first poll; WATCH through `query` points to `watch`.
    let o = signalql(&["watch", "--max-polls", "1", "FROM events RETURN count"]);
    assert_eq!(o.status.code(), Some(1));
    let o = signalql(&["query", "--format", "json", q]);
    assert_eq!(o.status.code(), Some(1));
    let err = json(&o);
    assert_eq!(err["error"]["code"], "capability_error");
    assert!(
        err["error"]["help"]
            .as_str()
            .unwrap()
            .contains("signalql watch")
    );
}

#[test]
fn watch_stops_cleanly_on_ctrl_c() {
    use std::io::{BufRead, BufReader};
    let q = r#"WATCH (FROM events DURING LAST 1 d RETURN count) WHEN count > 1000000"#;
    let mut child = Command::new(env!("CARGO_BIN_EXE_signalql"))
        .args(["watch", "--interval", "30", "--max-polls", "4", q])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    err.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "poll 1: false");
    let status = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let status = child.wait().unwrap();
    assert_eq!(
        status.code(),
        Some(0),
        "Ctrl-C ends the watch with status 0"
    );
}

#[test]
fn parquet_out_writes_the_rows_and_plot_draws_one_line_per_group() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r.parquet");
    let q = r#"FROM events DURING LAST 7 d GROUP BY properties.platform RETURN properties.platform, count"#;
    let o = signalql(&[
        "query",
        "--format",
        "parquet",
        "--out",
        out.to_str().unwrap(),
        q,
    ]);
    assert!(o.status.success(), "{o:?}");
    let file = std::fs::File::open(&out).unwrap();
    let reader =
        datafusion::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
            .unwrap()
            .build()
            .unwrap();
    let batches: Vec<_> = reader.map(|b| b.unwrap()).collect();
    let schema = batches[0].schema();
    let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
    assert_eq!(names, ["properties.platform", "count"]);
    // Events per platform in [2026-06-06, 2026-06-13), by DuckDB: android 1882, ios 3378,
    // web 8525.
    let counts = datafusion::arrow::util::pretty::pretty_format_batches(&batches)
        .unwrap()
        .to_string();
    for (p, n) in [("android", "1882"), ("ios", "3378"), ("web", "8525")] {
        assert!(
            counts.lines().any(|l| l.contains(p) && l.contains(n)),
            "{counts}"
        );
    }
    let o = signalql(&["query", "--format", "parquet", q]);
    assert_eq!(o.status.code(), Some(1), "parquet needs --out");

    // Three platforms, 30 daily buckets each: three series lines of 30 points.
    let svg = dir.path().join("p.svg");
    let o = signalql(&[
        "query",
        "--plot",
        svg.to_str().unwrap(),
        r#"FROM events WHERE event_name = "session_start" DURING LAST 30 d BUCKET BY d GROUP BY properties.platform RETURN timestamp, properties.platform, count_distinct(user_id)"#,
    ]);
    assert!(o.status.success(), "{o:?}");
    let text = std::fs::read_to_string(&svg).unwrap();
    let lines: Vec<&str> = text
        .split("<polyline")
        .skip(1)
        .filter(|p| p.contains(r#"stroke-width="2""#))
        .collect();
    assert_eq!(lines.len(), 3, "one line per group");
    for l in &lines {
        let points = l
            .split("points=\"")
            .nth(1)
            .unwrap()
            .split('"')
            .next()
            .unwrap();
        assert_eq!(points.split_whitespace().count(), 30);
    }
    for p in ["android", "ios", "web"] {
        assert!(text.lines().any(|l| l.trim() == p), "legend {p}");
    }
    let o = signalql(&[
        "query",
        "--plot",
        svg.to_str().unwrap(),
        "FROM events RETURN count",
    ]);
    assert_eq!(o.status.code(), Some(1), "--plot needs BUCKET BY");
}

#[test]
fn bench_times_each_counted_run_and_returns_the_rows() {
    // 7 304 page views in [2026-06-06, 2026-06-13): the DuckDB oracle of golden spec/v01_count_events.
    let q = r#"FROM events WHERE event_name = "page_view" DURING LAST 7 d RETURN count"#;
    let o = signalql(&["bench", "--runs", "3", "--warmup", "2", q]);
    assert!(o.status.success(), "{o:?}");
    let b = json(&o);
    let times = b["times_s"].as_array().unwrap();
    assert_eq!(times.len(), 3, "{b}");
    assert!(times.iter().all(|t| t.as_f64().unwrap() > 0.0), "{b}");
    let mut sorted: Vec<f64> = times.iter().map(|t| t.as_f64().unwrap()).collect();
    sorted.sort_by(f64::total_cmp);
    assert_eq!(b["median_s"].as_f64().unwrap(), sorted[1]);
    assert_eq!(b["rows"], serde_json::json!([[7304]]));
    assert_eq!(b["row_count"], 1);
    assert_eq!(b["columns"][0]["name"], "count");

    // A failing query is a JSON error; zero counted runs is a usage error.
    let o = signalql(&["bench", "FROM events WHERE"]);
    assert_eq!(o.status.code(), Some(1));
    let e = json(&o);
    assert_eq!(e["error"]["code"], "parse_error", "{e}");
    assert_eq!(e["error"]["line"], 1, "{e}");
    let o = signalql(&["bench", "--runs", "0", q]);
    assert_eq!(o.status.code(), Some(2));
}

/// A bad input line keeps its file and line number up to the CLI's JSON error.
#[test]
fn an_ingest_bad_line_is_reported_with_its_file_and_line() {
    let root = tempfile::tempdir().unwrap();
    let input = root.path().join("bad.jsonl");
    std::fs::write(
        &input,
        "{\"event_name\": \"a\", \"timestamp\": \"2026-01-01T00:00:00Z\"}\nnot json\n",
    )
    .unwrap();
    let data = root.path().join("ds");
    let o = signalql(&[
        "ingest",
        "events",
        input.to_str().unwrap(),
        "--data",
        data.to_str().unwrap(),
        "--error-format",
        "json",
    ]);
    assert_eq!(o.status.code(), Some(1));
    let e = &json(&o)["error"];
    assert_eq!(e["code"], "io_error");
    assert_eq!(e["file"], input.to_str().unwrap());
    assert_eq!(e["line"], 2);
    assert!(e.get("column").is_none(), "{e}");
    // As text on stderr, by default.
    let o = signalql(&[
        "ingest",
        "events",
        input.to_str().unwrap(),
        "--data",
        data.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("bad.jsonl:2:"), "{err}");
    assert!(
        !data.join("events").exists(),
        "nothing is written when a line is bad"
    );
}

/// Every error the commands print as text is one `error: …` line (or more) ending with a
/// newline on stderr, with exit status 1 and nothing on stdout.
#[test]
fn every_text_error_ends_with_a_newline() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing");
    let missing = missing.to_str().unwrap();
    let cases: Vec<Vec<&str>> = vec![
        vec!["context", "how are funnels counted", "--budget", "0"],
        vec!["context", "--data", missing, "how are funnels counted"],
        vec!["context", "x", "--clauses", "BUDGET"],
        vec!["query", "FROM events DURING LAST 7 x"],
        vec!["query", "--data", missing, "FROM events RETURN count"],
        vec!["describe", "nothing_of_that_name"],
        vec!["explain", "FROM"],
        vec!["fmt", "FROM"],
        vec!["ingest", "events", missing, "--data", missing],
        vec!["ingest", "objects", missing, "--data", missing],
    ];
    for args in cases {
        let o = signalql(&args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
        assert!(o.stdout.is_empty(), "{args:?}: {}", stdout(&o));
        assert!(err.starts_with("error: "), "{args:?}: {err:?}");
        assert!(err.ends_with('\n'), "{args:?}: {err:?}");
    }
}

/// `--param name=value` (docs/params.md): the statement with `$name` placeholders answers as
/// the one written with the literals; text that is not JSON is a string, a JSON number a
/// number; a placeholder without a value is a JSON error at its position, and `--param` on a
/// command that reads no statement is refused.
#[test]
fn param_flags_bind_the_statements_placeholders() {
    let o = signalql(&[
        "query",
        "--format",
        "json",
        "--param",
        "event=page_view",
        "--param",
        "days=7",
        "FROM events WHERE event_name = $event DURING LAST $days d RETURN count",
    ]);
    assert!(o.status.success(), "{o:?}");
    // The DuckDB oracle of golden spec/v01_count_events.
    assert_eq!(json(&o)["rows"], serde_json::json!([[7304]]));

    let o = signalql(&[
        "fmt",
        "--param",
        "n=5",
        "--param",
        "path=/home",
        "FROM events WHERE properties.path = $path RETURN count LIMIT $n",
    ]);
    assert!(o.status.success(), "{o:?}");
    let by_hand = signalql(&[
        "fmt",
        r#"FROM events WHERE properties.path = "/home" RETURN count LIMIT 5"#,
    ]);
    assert_eq!(stdout(&o), stdout(&by_hand));
    assert!(stdout(&o).contains(r#""/home""#), "{}", stdout(&o));

    let o = signalql(&[
        "query",
        "--format",
        "json",
        "FROM events\nWHERE event_name = $event RETURN count",
    ]);
    assert!(!o.status.success());
    let e = &json(&o)["error"];
    assert_eq!(e["code"], "parse_error");
    assert_eq!(
        (e["line"].as_u64(), e["column"].as_u64()),
        (Some(2), Some(20))
    );

    let o = signalql(&["stats", "--param", "a=1"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("--param"));
}
