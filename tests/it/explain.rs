//! `EXPLAIN q` (engine/src/explain.rs): the plan object, with nothing executed.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

fn signalql(args: &[&str], failpoint: bool) -> std::process::Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_signalql"));
    c.args(args);
    if failpoint {
        // The debug builds' hook: the process's first execution panics. EXPLAIN runs none.
        c.env("SIGNALQL_FAILPOINT", "execute");
    }
    c.output().unwrap()
}

#[cfg(debug_assertions)]
#[test]
fn explain_answers_the_plan_without_running_it() {
    let q = r#"EXPLAIN FROM events WHERE event_name = "page_view" DURING LAST 7 d GROUP BY properties.path RETURN properties.path, count"#;
    let o = signalql(&["query", "--format", "json", q], true);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stdout));
    let x: Value = serde_json::from_slice(&o.stdout).unwrap();
    for k in [
        "spec_version",
        "canonical_query",
        "sources",
        "logical_plan",
        "physical_plan",
        "sql",
        "estimate",
        "limits",
    ] {
        assert!(x.get(k).is_some(), "no {k} in {x}");
    }
    assert_eq!(x["spec_version"], "0.3");
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
        text.contains("-- sources: events (") && text.contains("-- physical plan"),
        "{text}"
    );
    // `signalql explain` answers the same object for the statement without EXPLAIN.
    let plain = q.trim_start_matches("EXPLAIN ");
    let o = signalql(&["explain", plain], true);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let y: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(y, x);
    // ANALYZE would run it: not built yet, and said so.
    let o = signalql(
        &[
            "query",
            "--format",
            "json",
            "EXPLAIN ANALYZE FROM events RETURN count",
        ],
        false,
    );
    let e: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(e["error"]["code"], "capability_error");
    assert_eq!(e["error"]["feature"], "EXPLAIN ANALYZE");
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
