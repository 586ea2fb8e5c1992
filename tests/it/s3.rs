//! S3 datasets end to end, against a real S3-compatible server (moto, tests/common/s3.rs):
//! the CLI configured by the AWS environment variables and `--s3-endpoint`; ingest and the
//! context store writing there; create-if-absent under concurrent writers; and clear, prompt
//! `io_error`s for a wrong bucket, missing credentials and unreachable or silent endpoints.
//! (Every golden case also runs over S3: tests/golden.rs, trials `s3/…`.)

use crate::common;

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::process::Output;
use std::time::{Duration, Instant};

use common::s3::S3Server;
use serde_json::Value;
use signalql::catalog::Root;

/// `signalql ARGS` with exactly the AWS variables given (none inherited).
fn signalql(env: &[(&str, String)], args: &[&str]) -> Output {
    common::s3::signalql_command(env)
        .args(args)
        .output()
        .unwrap()
}

fn ok_json(o: &Output) -> Value {
    assert!(
        o.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).unwrap()
}

/// `EXPLAIN CONTEXT id` over the dataset `data`, through the CLI.
fn explain_context(env: &[(&str, String)], data: &str, id: &str) -> Value {
    ok_json(&signalql(
        env,
        &[
            "query",
            "--format",
            "json",
            "--data",
            data,
            &format!("EXPLAIN CONTEXT {id}"),
        ],
    ))
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Events per name in a JSONL file, counted here (the independent side of the check).
fn count_by_name(jsonl: &str) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for line in jsonl.lines().filter(|l| !l.trim().is_empty()) {
        let v: Value = serde_json::from_str(line).unwrap();
        *out.entry(v["event_name"].as_str().unwrap().to_string())
            .or_default() += 1;
    }
    out
}

#[test]
fn the_cli_ingests_queries_and_stores_contexts_on_s3() {
    let s3 = S3Server::start();
    s3.create_bucket("lake");
    let env = s3.env();
    let data = "s3://lake/team/ds";

    // Events: two ingests, each one new object under events/ and its commit record, nothing
    // else (no pending marker is left).
    let tiny = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/tiny");
    let events = tiny.join("events.jsonl");
    for _ in 0..2 {
        let o = signalql(
            &env,
            &["ingest", "events", events.to_str().unwrap(), "--data", data],
        );
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert!(
            stdout(&o).contains("into s3://lake/team/ds/events/ingest-"),
            "{}",
            stdout(&o)
        );
    }
    let keys = s3.keys("lake", "team/ds/");
    assert_eq!(keys.len(), 4, "{keys:?}");
    let data_keys: Vec<&String> = keys
        .iter()
        .filter(|k| k.starts_with("team/ds/events/ingest-") && k.ends_with(".parquet"))
        .collect();
    assert_eq!(data_keys.len(), 2, "{keys:?}");
    for k in data_keys {
        let id = &k["team/ds/events/ingest-".len()..k.len() - ".parquet".len()];
        let commit = format!("team/ds/_signalql/commits/{id}.json");
        assert!(keys.contains(&commit), "{commit} in {keys:?}");
    }

    // Queries read them back: counts per event name, twice each.
    let want = count_by_name(&std::fs::read_to_string(&events).unwrap());
    let q = "FROM events DURING LAST 60 d GROUP BY event_name \
             RETURN event_name, count ORDER BY event_name";
    let now = "2026-02-01T00:00:00Z";
    let env_q = ok_json(&signalql(
        &env,
        &["query", "--now", now, "--format", "json", "--data", data, q],
    ));
    let got: BTreeMap<String, u64> = env_q["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r[0].as_str().unwrap().to_string(), r[1].as_u64().unwrap()))
        .collect();
    let doubled: BTreeMap<String, u64> = want.iter().map(|(k, v)| (k.clone(), 2 * v)).collect();
    assert_eq!(got, doubled);

    // `--s3-endpoint` stands in for AWS_ENDPOINT_URL.
    let mut no_endpoint = env.clone();
    no_endpoint.retain(|(k, _)| *k != "AWS_ENDPOINT_URL");
    let endpoint = s3.endpoint();
    let o = signalql(
        &no_endpoint,
        &[
            "query",
            "--s3-endpoint",
            &endpoint,
            "--now",
            now,
            "--format",
            "json",
            "--data",
            data,
            q,
        ],
    );
    assert_eq!(ok_json(&o)["rows"], env_q["rows"]);

    // Objects and the context store.
    let docs = tempfile::tempdir().unwrap();
    std::fs::write(
        docs.path().join("storage.md"),
        "# Object storage\n\nObjects are Parquet revisions.\n",
    )
    .unwrap();
    std::fs::write(
        docs.path().join("other.md"),
        "# Cooking\n\nBoil the pasta.\n",
    )
    .unwrap();
    let docs_s = docs.path().to_str().unwrap();
    let ingest = [
        "ingest",
        "objects",
        docs_s,
        "--data",
        data,
        "--now",
        "2026-01-01T00:00:00Z",
    ];
    let o = signalql(&env, &ingest);
    assert!(stdout(&o).contains("2 file(s): 2 new"), "{o:?}");
    let o = signalql(&env, &ingest);
    assert!(
        stdout(&o).contains("0 new, 0 revised, 2 unchanged"),
        "{o:?}"
    );

    let context = [
        "context",
        "--data",
        data,
        "--now",
        "2026-01-02T00:00:00Z",
        "object storage",
    ];
    let bundle = ok_json(&signalql(&env, &context));
    let items = bundle["items"].as_array().unwrap();
    assert_eq!(items.len(), 1, "{bundle}");
    assert!(
        items[0]["content"]
            .as_str()
            .unwrap()
            .contains("Parquet revisions")
    );
    let id = bundle["id"].as_str().unwrap();
    let key = format!(
        "team/ds/contexts/{}.json",
        id.trim_start_matches("context://")
    );
    let stored: Value = serde_json::from_slice(&s3.get("lake", &key).expect("stored")).unwrap();
    assert_eq!(stored["bundle"]["id"], id);
    // The same bundle again: the stored record stays as it was.
    let again = ok_json(&signalql(&env, &context));
    assert_eq!(again["id"], id);
    let x = explain_context(&env, data, id);
    assert_eq!(x["context"], id);
    assert_eq!(x, stored["explanation"]);
}

#[test]
fn exactly_one_of_concurrent_creators_wins_on_s3() {
    let s3 = S3Server::start();
    s3.create_bucket("race");
    let root = Root::parse("s3://race/p", &s3.storage()).unwrap();
    let handles: Vec<_> = (0..8)
        .map(|i| {
            let root = root.clone();
            std::thread::spawn(move || {
                root.put_new("contexts/x.json", format!("writer {i}").into_bytes())
                    .unwrap()
            })
        })
        .collect();
    let wrote: Vec<bool> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(wrote.iter().filter(|w| **w).count(), 1, "{wrote:?}");
    let winner = wrote.iter().position(|w| *w).unwrap();
    assert_eq!(
        s3.get("race", "p/contexts/x.json").unwrap(),
        format!("writer {winner}").into_bytes()
    );
    assert_eq!(root.read("contexts/missing.json").unwrap(), None);
}

/// The error a failing `query --format json` printed, and how long it took.
fn failure(env: &[(&str, String)], data: &str) -> (Value, Duration) {
    let start = Instant::now();
    let o = signalql(
        env,
        &[
            "query",
            "--format",
            "json",
            "--data",
            data,
            "FROM events RETURN count",
        ],
    );
    let took = start.elapsed();
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    eprintln!(
        "{data}: {} in {took:?}",
        String::from_utf8_lossy(&o.stdout).trim()
    );
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    (v["error"].clone(), took)
}

#[test]
fn s3_failures_are_prompt_clear_io_errors() {
    let s3 = S3Server::start();
    s3.create_bucket("present");
    s3.put("present", "ds/events/part-0.parquet", b"not parquet");
    let env = s3.env();
    // A bound far above the client's own (3 retries within 15 s, 1 s request timeout below),
    // far below a hang.
    let prompt = Duration::from_secs(60);
    let check = |env: &[(&str, String)], data: &str, needle: &str| {
        let (e, took) = failure(env, data);
        assert_eq!(e["code"], "io_error", "{e}");
        let message = e["message"].as_str().unwrap();
        assert!(message.contains(needle), "{needle:?} not in {message:?}");
        assert!(took < prompt, "took {took:?}: {e}");
    };

    check(&env, "s3://no-such-bucket/ds", "the bucket does not exist");
    // An empty prefix of a real bucket is a missing dataset, like a missing folder.
    check(&env, "s3://present/nothing-here", "does not exist");
    // A corrupt file is an io_error naming the table, not a panic or a partial answer.
    check(&env, "s3://present/ds", "events");

    let mut no_keys = env.clone();
    no_keys.retain(|(k, _)| !k.starts_with("AWS_ACCESS") && !k.starts_with("AWS_SECRET"));
    check(&no_keys, "s3://present/ds", "no S3 credentials");

    let mut https_only = env.clone();
    https_only.retain(|(k, _)| *k != "AWS_ALLOW_HTTP");
    check(&https_only, "s3://present/ds", "AWS_ALLOW_HTTP");

    // Nothing listens on this port.
    let closed = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let mut refused = env.clone();
    refused.retain(|(k, _)| *k != "AWS_ENDPOINT_URL");
    refused.push(("AWS_ENDPOINT_URL", format!("http://127.0.0.1:{port}")));
    check(&refused, "s3://present/ds", "cannot be reached");

    // Something accepts connections and never answers: the request timeout ends each try.
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port();
    let held = std::thread::spawn(move || {
        let mut open = Vec::new();
        for stream in silent.incoming().take(8) {
            open.push(stream);
        }
        std::thread::sleep(Duration::from_secs(60));
    });
    let mut mute = env.clone();
    mute.retain(|(k, _)| *k != "AWS_ENDPOINT_URL");
    mute.push(("AWS_ENDPOINT_URL", format!("http://127.0.0.1:{port}")));
    mute.push(("AWS_TIMEOUT", "1s".into()));
    check(&mute, "s3://present/ds", "did not answer in time");
    drop(held);

    // Other schemes are a capability error, not a folder named "gs:".
    let (e, _) = failure(&env, "gs://bucket/ds");
    assert_eq!(e["code"], "capability_error", "{e}");
    assert!(e["message"].as_str().unwrap().contains("gs://"), "{e}");
}

/// `signalql index` over object tables another tool wrote (pyarrow's, tests/data/foreign/objects)
/// in an S3 bucket: the index is written there under one commit, covers the file once, and the
/// bundle and FIND OBJECT's rows are the ones the scan gave before it, now through the index.
#[test]
fn the_text_index_is_built_and_read_on_s3() {
    let s3 = S3Server::start();
    s3.create_bucket("lake");
    let env = s3.env();
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/foreign/objects");
    s3.upload_dir(&src, "lake", "foreign");
    let data = "s3://lake/foreign";
    let context = ["context", "--data", data, "parquet storage columnar keys"];
    let find = [
        "query",
        "--format",
        "json",
        "--data",
        data,
        r#"FIND OBJECT ABOUT "storage keys window""#,
    ];
    let explain = |id: &str| explain_context(&env, data, id);
    let before = ok_json(&signalql(&env, &context));
    let found_before = ok_json(&signalql(&env, &find));
    let x = explain(before["id"].as_str().unwrap());
    assert_eq!(x["scoring"]["index"], 0, "{x}");
    assert!(x["scoring"]["scan"].as_u64().unwrap() > 0, "{x}");

    let o = signalql(&env, &["index", "--data", data]);
    assert!(
        stdout(&o).contains(
            "indexed 1 representations file(s) (3 representations, 3 with indexable text"
        ),
        "{o:?}"
    );
    // One file per index table, with one name, and one commit record (in sequence with the
    // object ingests: docs/index.md).
    let keys = s3.keys("lake", "foreign/");
    let names: std::collections::BTreeSet<&str> = ["index_terms", "index_reps", "index_files"]
        .iter()
        .flat_map(|t| {
            let prefix = format!("foreign/{t}/");
            let files: Vec<&str> = keys
                .iter()
                .filter_map(|k| k.strip_prefix(&prefix))
                .collect();
            assert_eq!(files.len(), 1, "{t}: {keys:?}");
            files
        })
        .collect();
    assert_eq!(names.len(), 1, "{keys:?}");
    let commits = keys
        .iter()
        .filter(|k| k.starts_with("foreign/_signalql/commits/"))
        .count();
    assert_eq!(commits, 1, "{keys:?}");
    let again = signalql(&env, &["index", "--data", data]);
    assert!(
        stdout(&again).contains("indexed 0 representations file(s)"),
        "{again:?}"
    );
    assert!(stdout(&again).contains("1 already covered"), "{again:?}");

    let after = ok_json(&signalql(&env, &context));
    assert_eq!(after["id"], before["id"]);
    assert_eq!(after["items"], before["items"]);
    assert_eq!(
        ok_json(&signalql(&env, &find))["rows"],
        found_before["rows"]
    );
    assert!(!found_before["rows"].as_array().unwrap().is_empty());
    // (Its record was stored by the first run, so a new task shows the path taken now.)
    let fresh = ok_json(&signalql(
        &env,
        &["context", "--data", data, "window storage"],
    ));
    let x = explain(fresh["id"].as_str().unwrap());
    assert_eq!(x["scoring"]["scan"], 0, "{x}");
    assert_eq!(x["scoring"]["index"], 3, "{x}");
}
