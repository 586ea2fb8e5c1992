//! Traces (engine/src/trace.rs, docs/runtime.md): one JSON trace per statement run with
//! `--trace` or `[trace] enabled`, its stages as spans, estimates beside actuals; simulate and
//! `signalql stats` learn from them; a folder that cannot be written never fails a query.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

const Q: &str = r#"FROM events WHERE event_name = "page_view" DURING LAST 7 d RETURN count"#;

fn signalql(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_signalql"))
        .args(args)
        .output()
        .unwrap()
}

fn traces(folder: &Path) -> Vec<Value> {
    let mut names: Vec<_> = std::fs::read_dir(folder)
        .map(|d| d.map(|e| e.unwrap().path()).collect())
        .unwrap_or_default();
    names.sort();
    names
        .iter()
        .map(|p| {
            let t: Value = serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap();
            assert_eq!(
                t["id"].as_str().unwrap(),
                p.file_stem().unwrap().to_str().unwrap(),
                "a trace is named by its id"
            );
            t
        })
        .collect()
}

#[test]
fn every_run_writes_one_trace_with_its_stages_estimates_and_actuals() {
    let root = crate::common::sample_events_dataset();
    let data = root.path().to_str().unwrap();
    // Without --trace nothing is written.
    assert!(signalql(&["query", "--data", data, Q]).status.success());
    assert!(!root.path().join("traces").exists());

    let o = signalql(&["--trace", "query", "--format", "json", "--data", data, Q]);
    assert!(o.status.success());
    let env: Value = serde_json::from_slice(&o.stdout).unwrap();
    let t = traces(&root.path().join("traces"));
    assert_eq!(t.len(), 1);
    let t = &t[0];
    assert_eq!(t["spec_version"], "0.1");
    assert_eq!(t["surface"], "cli");
    assert_eq!(t["plan_cache"], "bypass");
    assert_eq!(t["error"], Value::Null);
    assert_eq!(
        t["statement"],
        "FROM events\nWHERE event_name = \"page_view\"\nDURING LAST 7 d\nRETURN count"
    );
    let names: Vec<&str> = t["spans"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    for stage in [
        "statement",
        "parse",
        "bind",
        "lower",
        "plan",
        "execute",
        "envelope",
    ] {
        assert!(names.contains(&stage), "no {stage} span in {names:?}");
    }
    for s in &t["spans"].as_array().unwrap()[1..] {
        assert_eq!(s["parent_id"], "s0");
    }
    assert_eq!(t["actual"]["rows"], env["rows"].as_array().unwrap().len());
    // The scan read what the envelope says it read.
    assert_eq!(
        t["actual"]["scanned_rows"],
        env["metadata"]["cost_estimate"]["scanned_rows"]
    );
    assert!(
        t["estimate"]["scanned_rows"].as_u64().unwrap()
            >= t["actual"]["scanned_rows"].as_u64().unwrap()
    );
    // No run before it: no time estimate.
    assert_eq!(t["estimate"]["elapsed_ms"], Value::Null);
    assert_eq!(t["estimate"]["based_on_samples"], 0);

    // A failed statement is traced with its error.
    let o = signalql(&["--trace", "query", "--data", data, "FROM events RETURN"]);
    assert!(!o.status.success());
    let t = traces(&root.path().join("traces"));
    assert_eq!(t.len(), 2);
    let failed = t.iter().find(|t| t["error"] != Value::Null).unwrap();
    assert_eq!(failed["error"]["code"], "parse_error");
    assert_eq!(failed["statement"], "FROM events RETURN");

    // A context bundle records its tokens, its pack stage and its item count.
    let copy = tempfile::tempdir().unwrap();
    crate::common::copy_dir(&signalql::sample_dataset(), copy.path());
    let o = signalql(&[
        "--trace",
        "context",
        "--data",
        copy.path().to_str().unwrap(),
        "--budget",
        "300",
        "how are funnels counted",
    ]);
    assert!(o.status.success());
    let bundle: Value = serde_json::from_slice(&o.stdout).unwrap();
    let t = traces(&copy.path().join("traces"));
    assert_eq!(t.len(), 1);
    assert_eq!(
        t[0]["actual"]["tokens"],
        bundle["metadata"]["budget"]["used"]
    );
    assert_eq!(
        t[0]["actual"]["rows"],
        bundle["items"].as_array().unwrap().len()
    );
    let pack = t[0]["spans"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "pack")
        .unwrap();
    assert_eq!(
        pack["attrs"]["tokens"],
        bundle["metadata"]["budget"]["used"]
    );
}

/// The time model and the statistics learn from the traced runs: simulate says there are no
/// samples before any, and gives an interval after; `stats` counts the samples.
#[test]
fn simulate_and_stats_learn_from_traced_runs() {
    let root = crate::common::sample_events_dataset();
    let data = root.path().to_str().unwrap();
    let sim = |args: &[&str]| -> Value {
        let mut all = vec!["simulate", "--data", data];
        all.extend_from_slice(args);
        all.push(Q);
        let o = signalql(&all);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        serde_json::from_slice(&o.stdout).unwrap()
    };
    let before = sim(&[]);
    assert_eq!(before["based_on_samples"], 0);
    assert_eq!(before["expected_elapsed_ms"], Value::Null);
    assert!(
        before["note"]
            .as_str()
            .unwrap()
            .contains("no measured runs")
    );
    assert!(before["rows"].as_u64().unwrap() > 0);
    let stats = |root: &str| -> Value {
        serde_json::from_slice(&signalql(&["stats", "--data", root]).stdout).unwrap()
    };
    let zero = stats(data);
    for f in zero["fields"].as_array().unwrap() {
        assert_eq!(f["sample_count"], 0, "{f}");
        assert_eq!(f["mean_absolute_error"], 0.0);
    }
    // [trace] enabled in signalql.toml traces without the flag.
    let config = root.path().join("signalql.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, format!("{text}[trace]\nenabled = true\n")).unwrap();
    for _ in 0..3 {
        assert!(signalql(&["query", "--data", data, Q]).status.success());
    }
    assert_eq!(traces(&root.path().join("traces")).len(), 3);
    let after = sim(&[]);
    assert_eq!(after["based_on_samples"], 3);
    let i = &after["expected_elapsed_ms"];
    assert!(i["low"].as_f64().unwrap() <= i["point"].as_f64().unwrap());
    assert!(i["point"].as_f64().unwrap() <= i["high"].as_f64().unwrap());
    let s = stats(data);
    let field = |name: &str| {
        s["fields"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["field"] == name)
            .unwrap()
            .clone()
    };
    assert_eq!(field("scanned_rows")["sample_count"], 3);
    // The second and third runs carried a time interval (from the runs before them).
    assert_eq!(field("elapsed_ms")["sample_count"], 2);
    let c = field("elapsed_ms")["calibration"].as_f64().unwrap();
    assert!((0.0..=1.0).contains(&c));
}

/// A trace folder that cannot be written never fails a query, and is reported once.
#[test]
fn an_unwritable_trace_folder_is_reported_once_and_queries_still_run() {
    let root = crate::common::sample_events_dataset();
    let blocker = root.path().join("not-a-folder");
    std::fs::write(&blocker, "a file").unwrap();
    let config = root.path().join("signalql.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &config,
        format!(
            "{text}[trace]\nenabled = true\nfolder = \"{}\"\n",
            blocker.join("traces").display()
        ),
    )
    .unwrap();
    let o = signalql(&[
        "watch",
        "--data",
        root.path().to_str().unwrap(),
        "--interval",
        "0",
        "--max-polls",
        "3",
        "WATCH (FROM events RETURN count) WHEN count > 1",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(stderr.matches("cannot write traces").count(), 1, "{stderr}");
}

/// A statement run with bind parameters (docs/params.md) is traced as the statement that ran:
/// its canonical text with the values bound, the same trace statement as the literal one's.
#[test]
fn a_parameterised_statement_is_traced_with_its_values() {
    let root = crate::common::sample_events_dataset();
    let data = root.path().to_str().unwrap();
    let with_params = "FROM events WHERE event_name = $event DURING LAST $days d RETURN count";
    let args = [
        "--trace",
        "query",
        "--data",
        data,
        "--param",
        "event=page_view",
    ];
    let o = signalql(&[&args[..], &["--param", "days=7", with_params]].concat());
    assert!(o.status.success(), "{o:?}");
    let t = traces(&root.path().join("traces"));
    assert_eq!(t.len(), 1);
    assert_eq!(
        t[0]["statement"],
        "FROM events\nWHERE event_name = \"page_view\"\nDURING LAST 7 d\nRETURN count"
    );
}

/// The spans an OTLP receiver (tests/it/otlp_receiver.py) has written to `out`, once it has
/// `n` of them.
fn received(out: &Path, n: usize) -> Vec<Value> {
    let started = std::time::Instant::now();
    loop {
        let text = std::fs::read_to_string(out).unwrap_or_default();
        let spans: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        if spans.len() >= n || started.elapsed().as_secs() > 30 {
            return spans;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// The span named `name` of `spans`.
fn span<'a>(spans: &'a [Value], name: &str) -> &'a Value {
    spans
        .iter()
        .find(|s| s["name"] == name)
        .unwrap_or_else(|| panic!("no {name} span in {spans:?}"))
}

/// OpenTelemetry (docs/runtime.md): with OTEL_EXPORTER_OTLP_ENDPOINT set, a statement's span
/// tree goes to the receiver over OTLP/HTTP protobuf, decoded by the OpenTelemetry project's
/// own Python classes: `statement` the root, its stages (parse, bind, plan, execute, …) its
/// children in one trace, with the trace's attributes, and no JSON trace written. Through
/// `signalql serve`, a W3C `traceparent` header parents the statement's span (its trace id,
/// its parent span id), as `_meta.traceparent` does on an MCP tool call.
#[tokio::test]
async fn statements_are_exported_over_otlp_with_their_parent() {
    crate::common::python_package("opentelemetry.proto", "opentelemetry-proto>=1.20");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("spans.jsonl");
    let mut receiver = Command::new("python3")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/otlp_receiver.py"))
        .arg(&out)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let endpoint = crate::common::announced(&mut receiver, "listening on ");
    let data = dir.path().join("data");
    crate::common::copy_dir(&signalql::sample_dataset(), &data);

    let o = Command::new(env!("CARGO_BIN_EXE_signalql"))
        .args(["query", "--format", "json", "--data"])
        .arg(&data)
        .arg(Q)
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
    let spans = received(&out, 2);
    let root = span(&spans, "statement");
    assert_eq!(root["parent_span_id"], "", "a root");
    assert_eq!(root["path"], "/v1/traces");
    assert_eq!(root["content_type"], "application/x-protobuf");
    assert_eq!(root["service"], "signalql");
    assert_eq!(root["scope"], "signalql");
    assert_eq!(root["attributes"]["signalql.rows"], 1);
    assert_eq!(root["attributes"]["signalql.surface"], "cli");
    assert!(
        root["attributes"]["signalql.statement"]
            .as_str()
            .unwrap()
            .contains("page_view")
    );
    for name in ["parse", "bind", "plan", "execute"] {
        let s = span(&spans, name);
        assert_eq!(s["parent_span_id"], root["span_id"], "{name}");
        assert_eq!(s["trace_id"], root["trace_id"], "{name}");
        assert!(s["start"].as_u64() >= root["start"].as_u64(), "{name}");
        assert!(s["end"].as_u64() <= root["end"].as_u64(), "{name}");
    }
    assert!(span(&spans, "execute")["attributes"]["signalql.scanned_rows"].as_i64() > Some(0));
    assert!(
        !data.join("traces").exists(),
        "no JSON trace without [trace]"
    );

    // Through serve, parented by the request's traceparent.
    let before = spans.len();
    let mut server = Command::new(env!("CARGO_BIN_EXE_signalql"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data"])
        .arg(&data)
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let addr = crate::common::announced(&mut server, "listening on ");
    let (trace_id, parent) = ("0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331");
    let post = Command::new("python3")
        .arg("-c")
        .arg(format!(
            "import json, urllib.request; r = urllib.request.Request('{addr}/v1/query', \
             data=json.dumps({{'query': {Q:?}}}).encode(), method='POST', headers={{\
             'Content-Type': 'application/json', 'traceparent': '00-{trace_id}-{parent}-01'}}); \
             print(urllib.request.urlopen(r).status)"
        ))
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&post.stdout).trim(),
        "200",
        "{post:?}"
    );
    let spans = received(&out, before + 2);
    let served: Vec<Value> = spans[before..].to_vec();
    let root = span(&served, "statement");
    assert_eq!(root["trace_id"], trace_id);
    assert_eq!(root["parent_span_id"], parent);
    assert_eq!(root["kind"], 2, "SPAN_KIND_SERVER");
    assert_eq!(span(&served, "execute")["trace_id"], trace_id);

    // Through the MCP server, parented by the tool call's _meta.traceparent.
    use rmcp::ServiceExt;
    let before = spans.len();
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_signalql"));
    cmd.arg("mcp").arg("--data").arg(&data);
    cmd.env("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true);
    let mut child = cmd.spawn().unwrap();
    let transport = (child.stdout.take().unwrap(), child.stdin.take().unwrap());
    let client = ().serve(transport).await.unwrap();
    let Value::Object(args) = serde_json::json!({ "query": Q }) else {
        unreachable!()
    };
    let request = rmcp::model::ClientRequest::CallToolRequest(rmcp::model::CallToolRequest::new(
        rmcp::model::CallToolRequestParams::new("query").with_arguments(args),
    ));
    let mut meta = rmcp::model::RequestMetaObject::new();
    let mcp_trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    meta.insert(
        "traceparent".into(),
        format!("00-{mcp_trace}-00f067aa0ba902b7-01").into(),
    );
    let options = rmcp::service::PeerRequestOptions::no_options().with_meta(meta);
    let handle = client
        .peer()
        .send_cancellable_request(request, options)
        .await
        .unwrap();
    handle.await_response().await.unwrap();
    let spans = received(&out, before + 2);
    let root = span(&spans[before..], "statement");
    assert_eq!(root["trace_id"], mcp_trace);
    assert_eq!(root["parent_span_id"], "00f067aa0ba902b7");

    let _ = server.kill();
    let _ = server.wait();
    let _ = receiver.kill();
    let _ = receiver.wait();
}
