//! `EXPLAIN q` (engine/src/explain.rs): the plan object, with nothing executed.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

/// The fields DESIGN.md §7 names for EXPLAIN's object.
const FIELDS: [&str; 8] = [
    "spec_version",
    "canonical_query",
    "sources",
    "logical_plan",
    "physical_plan",
    "sql",
    "estimate",
    "limits",
];

fn signalql(args: &[&str], failpoint: bool) -> std::process::Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_signalql"));
    c.args(args);
    if failpoint {
        // The `execute` failpoint (catalog/src/failpoint.rs): the process's first execution
        // panics. EXPLAIN runs none.
        c.env("SIGNALQL_FAILPOINT", "execute");
    }
    c.output().unwrap()
}

#[test]
fn explain_answers_the_plan_without_running_it() {
    let q = r#"EXPLAIN FROM events WHERE event_name = "page_view" DURING LAST 7 d GROUP BY properties.path RETURN properties.path, count"#;
    let o = signalql(&["query", "--format", "json", q], true);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stdout));
    let x: Value = serde_json::from_slice(&o.stdout).unwrap();
    for k in FIELDS {
        assert!(x.get(k).is_some(), "no {k} in {x}");
    }
    assert_eq!(x["spec_version"], "0.1");
    assert!(
        x["canonical_query"]
            .as_str()
            .unwrap()
            .starts_with("FROM events")
    );
    // The sample's events: its Parquet files and their sizes, as the file system says.
    let folder = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/sample/events");
    let sizes: Vec<u64> = std::fs::read_dir(&folder)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "parquet"))
        .map(|p| std::fs::metadata(p).unwrap().len())
        .collect();
    assert_eq!(x["sources"][0]["table"], "events");
    assert_eq!(x["sources"][0]["files"], sizes.len());
    assert_eq!(x["sources"][0]["bytes"], sizes.iter().sum::<u64>());
    assert!(x["logical_plan"].as_str().unwrap().contains("Aggregate"));
    assert!(
        x["physical_plan"]
            .as_str()
            .unwrap()
            .contains("DataSourceExec")
    );
    assert!(x["sql"].as_str().unwrap().starts_with("SELECT"));
    assert_eq!(x["limits"]["max_result_rows"], 10000);
    // The table form is for a person: the header and both plans.
    let o = signalql(&["query", q], true);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("-- sources:\n--   events: ") && text.contains("-- physical plan"),
        "{text}"
    );
    // `signalql explain` answers the same object for the statement without EXPLAIN.
    let plain = q.trim_start_matches("EXPLAIN ");
    let o = signalql(&["explain", plain], true);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let y: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(y, x);
    // The sample's 150 000 events, one file: its rows from the footer (`signalql gen` wrote
    // them, 150000 rows, as its signalql.toml says).
    assert_eq!(x["sources"][0]["rows"], 150000);
}

/// For a caller whose policy filters the tables, the sizes (which count hidden rows) are null.
#[test]
fn explain_hides_sizes_from_a_restricted_caller() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/policy/root");
    let root = root.to_str().unwrap();
    let q = "EXPLAIN FROM events DURING LAST 30 d RETURN count";
    let run = |p: &str| -> Value {
        let o = signalql(
            &[
                "query",
                "--format",
                "json",
                "--data",
                root,
                "--principal",
                p,
                q,
            ],
            false,
        );
        serde_json::from_slice(&o.stdout).unwrap()
    };
    let acme = run("acme_agent");
    assert_eq!(acme["sources"][0]["bytes"], Value::Null);
    assert_eq!(acme["estimate"]["rows"], Value::Null);
    assert!(acme["logical_plan"].as_str().unwrap().contains("acme"));
    let admin = run("admin");
    assert_eq!(admin["sources"][0]["files"], 2);
}

/// Ten days of 100 events each, one row group per day (rows in time order), written by the
/// Parquet writer directly; T is the end of the tenth day.
fn ten_days() -> tempfile::TempDir {
    use datafusion::arrow::array::{ArrayRef, StringArray, StructArray, TimestampMicrosecondArray};
    use datafusion::arrow::datatypes::{DataType, Field};
    use datafusion::parquet::file::properties::WriterProperties;
    use std::sync::Arc;
    let root = tempfile::tempdir().unwrap();
    let day0 = 1_767_225_600_000_000i64; // 2026-01-01T00:00:00Z
    let (mut ts, mut users, mut paths) = (Vec::new(), Vec::new(), Vec::new());
    for d in 0..10i64 {
        for i in 0..100i64 {
            ts.push(day0 + d * 86_400_000_000 + 43_200_000_000 + i * 1_000_000);
            users.push(format!("u{}", i % 7));
            paths.push(format!("/p{}", i % 3));
        }
    }
    let paths: ArrayRef = Arc::new(StringArray::from(paths));
    let properties = StructArray::from(vec![(
        Arc::new(Field::new("path", DataType::Utf8, true)),
        paths,
    )]);
    let columns: Vec<(&str, ArrayRef)> = vec![
        (
            "timestamp",
            Arc::new(TimestampMicrosecondArray::from(ts).with_timezone("UTC")),
        ),
        (
            "event_name",
            Arc::new(StringArray::from(vec!["view"; 1000])),
        ),
        ("user_id", Arc::new(StringArray::from(users))),
        ("properties", Arc::new(properties)),
    ];
    let props = WriterProperties::builder()
        .set_max_row_group_row_count(Some(100))
        .build();
    crate::common::write_parquet(
        &root.path().join("events/part-0.parquet"),
        columns,
        Some(props),
    );
    std::fs::write(
        root.path().join("signalql.toml"),
        "now = \"2026-01-11T00:00:00Z\"\n",
    )
    .unwrap();
    root
}

fn json_of(o: &std::process::Output) -> Value {
    assert!(
        o.status.success(),
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).unwrap()
}

/// The estimate prunes row groups by their statistics as the scan does: a 2-day window over
/// ten one-day row groups reads 2 of them (200 rows, by construction), and EXPLAIN ANALYZE
/// reports the 8 others pruned, its actual rows equal to the answer's.
#[test]
fn explain_estimates_after_pruning_and_analyze_reports_what_ran() {
    let root = ten_days();
    let data = root.path().to_str().unwrap();
    let q = "FROM events DURING LAST 2 d GROUP BY properties.path RETURN properties.path, count";
    let x = json_of(&signalql(&["explain", "--data", data, q], false));
    assert_eq!(x["sources"][0]["rows"], 1000);
    assert_eq!(x["estimate"]["scanned_files"], 1);
    assert_eq!(x["estimate"]["scanned_row_groups"], 2, "{}", x["estimate"]);
    assert_eq!(x["estimate"]["scanned_rows"], 200);
    assert!(x.get("actual").is_none() && x.get("operators").is_none());

    let answer = json_of(&signalql(
        &["query", "--format", "json", "--data", data, q],
        false,
    ));
    // 200 events in the window, paths /p0, /p1, /p2 by i % 3 over i in 0..100, each day.
    assert_eq!(answer["rows"].as_array().unwrap().len(), 3);
    let total: i64 = answer["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r[1].as_i64().unwrap())
        .sum();
    assert_eq!(total, 200);

    let a = json_of(&signalql(
        &["explain", "--analyze", "--data", data, q],
        false,
    ));
    assert_eq!(a["actual"]["rows"], 3);
    assert_eq!(a["pruning"]["row_groups"], 10, "{}", a["pruning"]);
    assert_eq!(a["pruning"]["row_groups_pruned_statistics"], 8);
    assert!(a["actual"]["scanned_rows"].as_u64().unwrap() <= 200);
    assert!(a["actual"]["peak_memory_bytes"].as_u64().is_some());
    let ops = a["operators"].as_array().unwrap();
    assert_eq!(ops[0]["depth"], 0);
    assert_eq!(
        ops[0]["rows"], 3,
        "the root operator returns the answer's rows"
    );
    assert!(ops.iter().any(|o| o["name"] == "DataSourceExec"));
    // EXPLAIN ANALYZE through `query` answers the same shape.
    let through_query = json_of(&signalql(
        &[
            "query",
            "--format",
            "json",
            "--data",
            data,
            &format!("EXPLAIN ANALYZE {q}"),
        ],
        false,
    ));
    assert_eq!(through_query["actual"]["rows"], 3);
    assert_eq!(through_query["estimate"], a["estimate"]);
}

/// EXPLAIN of every statement kind is one object with the fields DESIGN.md §7 names.
#[test]
fn explain_answers_every_statement_kind() {
    let sample = signalql::sample_dataset();
    let data = sample.to_str().unwrap();
    for (q, table) in [
        ("FROM events RETURN count", "events"),
        (
            r#"FUNNEL "page_view" -> "purchase" FROM events DURING LAST 7 d WITHIN 1 d"#,
            "events",
        ),
        (
            r#"FIND sequence WHERE "page_view" -> "purchase" WITHIN 1 d"#,
            "events",
        ),
        ("WATCH (FROM events RETURN count) WHEN count > 1", "events"),
        ("FIND OBJECT ABOUT \"funnels\" LIMIT 3", "objects"),
        (
            "CONTEXT FOR \"how are funnels counted\" BUDGET 400 TOKENS",
            "objects",
        ),
        ("DESCRIBE events", "events"),
    ] {
        let x = json_of(&signalql(&["explain", "--data", data, q], true));
        for k in FIELDS {
            assert!(x.get(k).is_some(), "{q}: no {k}");
        }
        let sources: Vec<&str> = x["sources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["table"].as_str().unwrap())
            .collect();
        assert!(sources.contains(&table), "{q}: {sources:?}");
        assert!(
            !x["physical_plan"].as_str().unwrap().is_empty(),
            "{q}: no physical plan"
        );
    }
    // DESCRIBE metrics reads metrics.toml and runs no plan.
    let x = json_of(&signalql(
        &["explain", "--data", data, "DESCRIBE metrics"],
        true,
    ));
    assert_eq!(x["sources"], serde_json::json!([]));
}
