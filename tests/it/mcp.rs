//! A real MCP client session (rmcp's client over a child process) against `signalql mcp`:
//! initialize, tools/list, tools/call of every tool, and errors as MCP tool errors carrying
//! our error code.

use crate::common;
use rmcp::ServiceExt;

use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::{RoleClient, RunningService};
use serde_json::{Value, json};
use std::path::Path;

/// A dataset with the sample's events (linked) and a small object store.
fn dataset() -> tempfile::TempDir {
    let root = common::sample_events_dataset();
    common::ingest_docs(
        root.path(),
        &[(
            "storage.md",
            "# Object storage\n\nObjects are Parquet revisions.\n",
        )],
    );
    root
}

async fn call(
    client: &rmcp::service::Peer<RoleClient>,
    tool: &'static str,
    args: Value,
) -> (bool, Value) {
    let Value::Object(args) = args else {
        panic!("arguments must be an object")
    };
    let r: CallToolResult = client
        .call_tool(CallToolRequestParams::new(tool).with_arguments(args))
        .await
        .unwrap();
    let v = serde_json::to_value(&r).unwrap();
    let text = v["content"][0]["text"].as_str().unwrap_or_default();
    let body = serde_json::from_str(text).unwrap_or_else(|e| panic!("{tool}: not JSON ({e}): {v}"));
    (r.is_error == Some(true), body)
}

/// `signalql mcp` on a child process's stdio, through rmcp's async read/write transport (its
/// child-process transport would turn on other tokio and libc features and so rebuild
/// DataFusion for the tests); `failpoint` goes into its environment.
async fn serve(
    root: &std::path::Path,
    failpoint: Option<&str>,
) -> (RunningService<RoleClient, ()>, tokio::process::Child) {
    serve_as(root, failpoint, None).await
}

/// [`serve`] with `--principal`.
async fn serve_as(
    root: &std::path::Path,
    failpoint: Option<&str>,
    principal: Option<&str>,
) -> (RunningService<RoleClient, ()>, tokio::process::Child) {
    serve_to((), root, failpoint, principal).await
}

/// [`serve_as`] to a client whose `handler` takes the server's notifications.
async fn serve_to<H: rmcp::ClientHandler>(
    handler: H,
    root: &std::path::Path,
    failpoint: Option<&str>,
    principal: Option<&str>,
) -> (RunningService<RoleClient, H>, tokio::process::Child) {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_signalql"));
    cmd.arg("mcp").arg("--data").arg(root);
    if let Some(p) = principal {
        cmd.arg("--principal").arg(p);
    }
    cmd.stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true);
    if let Some(f) = failpoint {
        cmd.env("SIGNALQL_FAILPOINT", f);
    }
    let mut child = cmd.spawn().unwrap();
    let transport = (child.stdout.take().unwrap(), child.stdin.take().unwrap());
    (handler.serve(transport).await.unwrap(), child)
}

/// A panic inside a query (the `execute` failpoint fires on the first one) is that call's
/// `internal_error`; the server goes on serving, and the next query answers.
#[tokio::test]
async fn the_mcp_server_survives_a_panic_inside_a_query() {
    let root = dataset();
    let (client, mut child) = serve(root.path(), Some("execute")).await;
    let q = json!({"query": r#"FROM events WHERE event_name = "page_view" DURING LAST 7 d RETURN count"#});
    let (err, e) = call(&client, "query", q.clone()).await;
    assert!(err, "{e}");
    assert_eq!(e["error"]["code"], "internal_error", "{e}");
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("failpoint execute"),
        "{e}"
    );
    let (err, env) = call(&client, "query", q).await;
    assert!(!err, "{env}");
    assert_eq!(env["rows"], json!([[7304]]));
    assert!(
        child.try_wait().unwrap().is_none(),
        "the server is still running"
    );
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn an_mcp_client_session_uses_every_tool() {
    let root = dataset();
    // Every tool call is traced (docs/runtime.md).
    let config = root.path().join("signalql.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, format!("{text}[trace]\nenabled = true\n")).unwrap();
    let (client, _child) = serve(root.path(), None).await;

    let info = client.peer_info().unwrap();
    assert_eq!(info.server_info.as_ref().unwrap().name, "signalql");

    let tools = client.list_all_tools().await.unwrap();
    let mut names: Vec<String> = tools.iter().map(|t| t.name.to_string()).collect();
    names.sort();
    assert_eq!(names, common::MCP_TOOLS);
    for t in &tools {
        let schema = serde_json::to_value(&*t.input_schema).unwrap();
        assert_eq!(schema["type"], "object", "{}", t.name);
        assert!(t.description.as_deref().is_some_and(|d| !d.is_empty()));
        let props = schema["properties"].as_object().unwrap();
        for p in props.values() {
            assert!(p.get("description").is_some(), "{}: {p}", t.name);
        }
    }

    // 7 304 page views in [2026-06-06, 2026-06-13), as the DuckDB oracle of golden
    // spec/v01_count_events says.
    let (err, env) = call(
        &client,
        "query",
        json!({"query": r#"FROM events WHERE event_name = "page_view" DURING LAST 7 d RETURN count"#}),
    )
    .await;
    assert!(!err);
    assert_eq!(env["rows"], json!([[7304]]));
    assert_eq!(env["metadata"]["as_of"], "2026-06-13T00:00:00Z");
    // The server keeps the plan: the same statement again (in another spelling of it) reuses
    // it, and answers the same.
    assert_eq!(env["metadata"]["plan_cache"], "miss");
    let (err, again) = call(
        &client,
        "query",
        json!({"query": r#"from events where event_name = "page_view" during last 7 d return count"#}),
    )
    .await;
    assert!(!err);
    assert_eq!(again["metadata"]["plan_cache"], "hit");
    assert_eq!(again["rows"], env["rows"]);

    // EXPLAIN ANALYZE through the explain tool: its actual rows are the answer's.
    let (err, x) = call(
        &client,
        "explain",
        json!({"query": r#"FROM events WHERE event_name = "page_view" DURING LAST 7 d RETURN count"#, "analyze": true}),
    )
    .await;
    assert!(!err, "{x}");
    assert_eq!(x["actual"]["rows"], 1);
    assert!(x["operators"].as_array().is_some_and(|o| !o.is_empty()));
    let (err, sim) = call(
        &client,
        "simulate",
        json!({"query": r#"FROM events WHERE event_name = "page_view" RETURN count"#}),
    )
    .await;
    assert!(!err, "{sim}");
    assert!(sim["rows"].as_u64().is_some_and(|r| r > 0), "{sim}");
    let (err, st) = call(&client, "stats", json!({"field": "elapsed_ms"})).await;
    assert!(!err, "{st}");
    assert_eq!(st["fields"][0]["field"], "elapsed_ms");

    let (err, env) = call(&client, "describe", json!({"target": "events"})).await;
    assert!(!err);
    assert_eq!(env["rows"][0][0], "events");
    assert_eq!(env["rows"][0][1], "table");

    let (err, bundle) = call(
        &client,
        "context",
        json!({"task": "object storage", "budget": 500, "clauses": "PREFER current"}),
    )
    .await;
    assert!(!err, "{bundle}");
    assert_eq!(bundle["items"].as_array().unwrap().len(), 1);
    assert_eq!(bundle["metadata"]["budget"]["limit"], 500);
    let id = bundle["id"].as_str().unwrap().to_string();
    assert!(id.starts_with("context://ctx_"));

    let (err, x) = call(&client, "explain_context", json!({"address": id})).await;
    assert!(!err);
    assert_eq!(x["context"], id);

    let (err, f) = call(
        &client,
        "format",
        json!({"query": "from events return count"}),
    )
    .await;
    assert!(!err);
    assert_eq!(f["canonical"], "FROM events\nRETURN count");

    // Errors are tool errors with our code and position.
    let (err, e) = call(&client, "query", json!({"query": "FROM events RETURN"})).await;
    assert!(err);
    assert_eq!(e["error"]["code"], "parse_error");
    assert_eq!(e["error"]["line"], 1);
    let (err, e) = call(&client, "describe", json!({"target": "entities"})).await;
    assert!(err);
    assert_eq!(e["error"]["code"], "io_error");
    let (err, e) = call(
        &client,
        "explain_context",
        json!({"address": "context://ctx_00000000000000000000000000000000"}),
    )
    .await;
    assert!(err);
    assert_eq!(e["error"]["code"], "unknown_context");

    // One trace per call that ran a statement, each from the MCP surface; the failed ones
    // carry their error.
    let traces: Vec<Value> = std::fs::read_dir(root.path().join("traces"))
        .unwrap()
        .map(|e| serde_json::from_slice(&std::fs::read(e.unwrap().path()).unwrap()).unwrap())
        .collect();
    assert_eq!(
        traces.len(),
        9,
        "query ×2, explain, describe ×2, context, explain_context ×2, the parse error"
    );
    assert!(traces.iter().all(|t| t["surface"] == "mcp"));
    assert!(
        traces
            .iter()
            .any(|t| t["error"]["code"] == "unknown_context")
    );
    assert!(traces.iter().any(|t| t["plan_cache"] == "hit"));

    client.cancel().await.unwrap();
}

/// The `watch` tool answers at the first poll where the condition holds, with the alert, or
/// after `max_polls` polls without one; its wait is bounded. The `context` tool takes every
/// clause as a field and gives the bundle of the statement written by hand.
#[tokio::test]
async fn the_watch_tool_waits_and_the_context_tool_takes_every_clause() {
    let root = dataset();
    let (client, _child) = serve(root.path(), None).await;
    // 7 304 page views in the last 7 days (the DuckDB oracle of golden spec/v01_count_events).
    let views = r#"FROM events WHERE event_name = "page_view" DURING LAST 7 d RETURN count"#;
    let (err, w) = call(
        &client,
        "watch",
        json!({"watch": format!("WATCH ({views}) WHEN count > 7000"), "max_polls": 3, "interval_seconds": 0.05}),
    )
    .await;
    assert!(!err, "{w}");
    assert_eq!(
        (w["polls"].clone(), w["holds"].clone()),
        (json!(1), json!(true))
    );
    assert_eq!(w["alert"]["poll"], 1);
    assert_eq!(w["alert"]["condition"], "count > 7000");
    assert_eq!(w["alert"]["envelope"]["rows"], json!([[7304]]));
    let (err, w) = call(
        &client,
        "watch",
        json!({"watch": format!("WATCH ({views}) WHEN count > 7304"), "max_polls": 2, "interval_seconds": 0.05}),
    )
    .await;
    assert!(!err, "{w}");
    assert_eq!(w, json!({"polls": 2, "holds": false, "alert": null}));
    let (err, e) = call(
        &client,
        "watch",
        json!({"watch": format!("WATCH ({views}) WHEN count > 1"), "max_polls": 1000, "interval_seconds": 60}),
    )
    .await;
    assert!(err);
    assert_eq!(e["error"]["code"], "limit_exceeded", "{e}");
    let (err, e) = call(&client, "watch", json!({"watch": views})).await;
    assert!(err);
    assert_eq!(e["error"]["code"], "type_error", "{e}");

    let fields = json!({
        "task": "object storage",
        "budget": 900,
        "prefer": ["current", "verified"],
        "exclude": ["untrusted", "role instruction"],
        "max_objects": 3,
        "max_depth": 0,
        "max_age": "3650 d",
        "with_evidence": true,
        "as_of": "2026-06-01T00:00:00Z",
        "estimator": "o200k",
    });
    let by_hand = r#"CONTEXT FOR "object storage" USING ESTIMATOR "o200k_base" BUDGET 900 TOKENS PREFER CURRENT, VERIFIED EXCLUDE UNTRUSTED, ROLE INSTRUCTION MAX OBJECTS 3 MAX DEPTH 0 MAX AGE 3650 d WITH EVIDENCE AS OF "2026-06-01T00:00:00Z""#;
    let (err, b) = call(&client, "context", fields).await;
    assert!(!err, "{b}");
    assert_eq!(b["metadata"]["canonical_query"], by_hand);
    assert_eq!(b["items"][0]["estimator"], "o200k_base");
    assert!(b["evidence"].is_array(), "{b}");
    let (err, q) = call(&client, "query", json!({"query": by_hand})).await;
    assert!(!err, "{q}");
    assert_eq!(b["id"], q["id"]);
    let (err, e) = call(
        &client,
        "context",
        json!({"task": "x", "exclude": ["role wizard"]}),
    )
    .await;
    assert!(err);
    assert_eq!(e["error"]["code"], "parse_error", "{e}");
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("exclude:"),
        "{e}"
    );
    client.cancel().await.unwrap();
}

/// `signalql mcp --principal NAME`: one principal for the process (docs/policy.md), over
/// tests/data/policy/root: acme's 126 events in the window (DuckDB over
/// tests/data/policy/as_acme_agent), its denied column refused.
#[tokio::test]
async fn the_stdio_server_answers_as_its_principal() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/policy/root");
    let (client, _child) = serve_as(&root, None, Some("acme_agent")).await;
    let q =
        "FROM events DURING LAST 30 d GROUP BY properties.tenant RETURN properties.tenant, count";
    let (err, env) = call(&client, "query", json!({ "query": q })).await;
    assert!(!err, "{env}");
    assert_eq!(env["rows"], json!([["acme", 126]]));
    assert_eq!(env["metadata"]["access_filtered"], true);
    let (err, env) = call(
        &client,
        "query",
        json!({"query": "FROM events RETURN count_distinct(session_id)"}),
    )
    .await;
    assert!(err);
    assert_eq!(env["error"]["code"], "permission_denied");
    let _ = client.cancel().await;
}

/// The official MCP Python SDK (mcp 2.x) over stdio, as an agent's client: every tool is
/// annotated read-only, not destructive, closed-world and (but `watch`) idempotent, and
/// declares an object `outputSchema` that an empty object does not satisfy; every answer is
/// `structuredContent` that the SDK and jsonschema both find valid against its tool's schema,
/// with the same JSON as its text; a failure is a tool error carrying the engine's error.
#[test]
fn the_official_python_client_validates_every_tool_result() {
    crate::common::python_package("mcp", "mcp>=2,<3");
    let root = dataset();
    let out = std::process::Command::new("python3")
        .arg(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/mcp_client.py"))
        .arg(env!("CARGO_BIN_EXE_signalql"))
        .arg(root.path())
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("server.json"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the client failed: {stderr}");
    let o: Value = serde_json::from_slice(&out.stdout).unwrap();
    // Started as server.json says.
    assert_eq!(o["args"], json!(["mcp", "--data", root.path()]));

    let tools = o["tools"].as_object().unwrap();
    let mut names: Vec<&str> = tools.keys().map(String::as_str).collect();
    names.sort();
    assert_eq!(names, common::MCP_TOOLS);
    for (name, t) in tools {
        assert_eq!(t["read_only"], true, "{name}");
        assert_eq!(t["destructive"], false, "{name}");
        assert_eq!(t["open_world"], false, "{name}");
        assert_eq!(t["idempotent"], name != "watch", "{name}");
        assert_eq!(t["output_schema_type"], "object", "{name}");
        assert_eq!(t["rejects_empty"], true, "{name}");
    }

    assert_eq!(o["resources"][0], "signalql://grammar");
    assert!(
        o["grammar"]["examples"].as_u64().unwrap() >= 15,
        "{}",
        o["grammar"]
    );
    assert_eq!(
        o["prompts"],
        json!([{"name": "signalql-primer", "arguments": ["question"]}])
    );
    for k in ["has_reference", "has_question", "has_catalogue"] {
        assert_eq!(o["primer"][k], true, "{k}");
    }

    let calls = o["calls"].as_array().unwrap();
    let keys = |c: &Value| -> Vec<String> {
        let k = c["keys"].as_array().unwrap_or_else(|| panic!("{c}"));
        k.iter().map(|k| k.as_str().unwrap().to_string()).collect()
    };
    let (last, answers) = calls.split_last().unwrap();
    for c in answers {
        assert_eq!(c["is_error"], false, "{c}");
        assert_eq!(c["valid"], true, "{c}");
        assert_eq!(c["text_is_structured"], true, "{c}");
    }
    // What each answered with, by the fields the schemas require.
    let has = |i: usize, fields: &[&str]| {
        let k = keys(&answers[i]);
        for f in fields {
            assert!(k.iter().any(|x| x == f), "call {i} lacks {f}: {k:?}");
        }
    };
    let envelope = ["columns", "rows", "metadata"];
    let bundle = ["id", "task", "items", "metadata"];
    let explanation = ["context", "phases", "rejected"];
    let plan = ["logical_plan", "physical_plan", "sources"];
    for (i, fields) in [
        &envelope[..],
        &envelope,
        &envelope,
        &bundle,
        &explanation,
        &plan,
        &envelope,
        &bundle,
        &explanation,
        &["operators", "actual"],
        &["based_on_samples"],
        &["fields"],
        &["canonical"],
        &["polls", "holds", "alert"],
    ]
    .into_iter()
    .enumerate()
    {
        has(i, fields);
    }
    assert_eq!(answers.len(), 14);
    assert_eq!(last["is_error"], true, "{last}");
    assert_eq!(last["structured"], false, "{last}");
    let error: Value = serde_json::from_str(last["text"].as_str().unwrap()).unwrap();
    assert_eq!(error["error"]["code"], "parse_error");
}

/// `[mcp] max_result_chars` caps every answer: a grouped count over the sample's users keeps
/// the rows that fit, says how many of how many and how to narrow; a bundle keeps whole
/// items, the first ones of the same bundle answered in full by the CLI.
#[tokio::test]
async fn answers_are_cut_to_max_result_chars() {
    let root = dataset();
    let long = |w: &str| {
        format!(
            "# {w} storage\n\n{}\n",
            format!("{w} storage notes. ").repeat(60)
        )
    };
    let docs: Vec<(String, String)> = ["alpha", "beta", "gamma", "delta"]
        .iter()
        .map(|w| (format!("{w}.md"), long(w)))
        .collect();
    let docs: Vec<(&str, &str)> = docs.iter().map(|(n, t)| (n.as_str(), t.as_str())).collect();
    common::ingest_docs(root.path(), &docs);
    let config = root.path().join("signalql.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, format!("{text}[mcp]\nmax_result_chars = 2000\n")).unwrap();
    let (client, _child) = serve(root.path(), None).await;

    let per_user =
        "FROM events DURING LAST 30 d GROUP BY user_id RETURN user_id, count ORDER BY user_id";
    let (err, env) = call(&client, "query", json!({ "query": per_user })).await;
    assert!(!err, "{env}");
    assert!(env.to_string().chars().count() <= 2000);
    let rows = env["rows"].as_array().unwrap().len();
    let meta = &env["metadata"];
    assert!(rows > 0);
    assert_eq!(meta["truncated"], true);
    assert_eq!(meta["row_count"], rows);
    // The whole answer, from the CLI (no cap): the rows kept are its first.
    let cli = |q: &str| -> Value {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_signalql"))
            .args(["query", "--format", "json", "--data"])
            .arg(root.path())
            .arg(q)
            .output()
            .unwrap();
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let all = cli(per_user);
    let all = all["rows"].as_array().unwrap();
    let total = all.len();
    assert!(total > rows);
    assert_eq!(env["rows"].as_array().unwrap()[..], all[..rows]);
    assert_eq!(meta["rows_total"], total);
    let narrow = meta["narrow"].as_str().unwrap();
    assert!(
        narrow.contains(&format!("{rows} of {total} rows")),
        "{narrow}"
    );
    assert!(narrow.contains("LIMIT"), "{narrow}");

    // A bundle over the cap keeps whole items: the first of the whole bundle the CLI gives.
    let task = "CONTEXT FOR \"storage notes\" BUDGET 4000 TOKENS";
    let (err, capped) = call(&client, "query", json!({ "query": task })).await;
    assert!(!err, "{capped}");
    let whole = cli(task);
    let (kept, all) = (
        capped["items"].as_array().unwrap(),
        whole["items"].as_array().unwrap(),
    );
    assert_eq!(capped["id"], whole["id"]);
    assert!(kept.len() < all.len(), "{} of {}", kept.len(), all.len());
    assert_eq!(kept[..], all[..kept.len()]);
    assert_eq!(capped["metadata"]["items_total"], all.len());
    assert_eq!(capped["metadata"]["truncated"], true);
}

/// Every example of the `signalql://grammar` reference parses and runs on the bundled sample
/// dataset (a WATCH through one poll of the watch loop, as the `watch` tool runs it).
#[tokio::test]
async fn every_example_of_the_grammar_runs_on_the_sample() {
    let tmp = tempfile::tempdir().unwrap();
    common::copy_dir(&signalql::sample_dataset(), tmp.path());
    let engine = signalql::Engine::open(tmp.path()).unwrap();
    let examples = signalql::mcp::grammar::examples();
    assert!(examples.len() >= 15);
    for text in &examples {
        match signalql::parse(text) {
            Ok(signalql::ast::Statement::Watch(w)) => {
                let mut watcher = signalql::watch::Watcher::new(w);
                let poll = watcher.poll(&engine).await;
                assert!(poll.is_ok(), "{text}: {:?}", poll.err());
            }
            Ok(_) => {
                let answer = engine.answer(text).await;
                assert!(answer.is_ok(), "{text}: {:?}", answer.err());
            }
            Err(e) => panic!("{text}: {e}"),
        }
    }
}

/// The language through a real client: the grammar resource listed and read, the primer
/// prompt with its optional question holding the reference, the served dataset's catalogue
/// and the question.
#[tokio::test]
async fn the_grammar_resource_and_the_primer_prompt_teach_the_language() {
    use rmcp::model::{GetPromptRequestParams, ReadResourceRequestParams, ResourceContents};
    let root = dataset();
    let (client, _child) = serve(root.path(), None).await;

    let resources = client.list_all_resources().await.unwrap();
    let uris: Vec<&str> = resources.iter().map(|r| r.uri.as_str()).collect();
    assert_eq!(uris[0], "signalql://grammar");
    let read = client
        .read_resource(ReadResourceRequestParams::new("signalql://grammar"))
        .await
        .unwrap();
    let ResourceContents::TextResourceContents { text, .. } = &read.contents[0] else {
        panic!("not text: {read:?}");
    };
    assert_eq!(*text, signalql::mcp::grammar::reference());
    for part in [
        "## Clauses of a retrieve query",
        "## Examples",
        "CONTEXT FOR",
        "`stats(f)`",
    ] {
        assert!(text.contains(part), "{part}");
    }
    let missing = client
        .read_resource(ReadResourceRequestParams::new("signalql://nothing"))
        .await;
    assert!(missing.is_err());

    let prompts = client.list_all_prompts().await.unwrap();
    assert_eq!(prompts.len(), 1);
    assert_eq!(prompts[0].name, "signalql-primer");
    let args = prompts[0].arguments.as_ref().unwrap();
    assert_eq!(args[0].name, "question");
    assert_eq!(args[0].required, Some(false));

    let mut q = serde_json::Map::new();
    q.insert("question".into(), json!("How many page views last week?"));
    let primer = client
        .get_prompt(GetPromptRequestParams::new("signalql-primer").with_arguments(q))
        .await
        .unwrap();
    let body = serde_json::to_value(&primer.messages[0]).unwrap();
    let text = body["content"]["text"].as_str().unwrap();
    assert!(text.contains("## Examples"));
    // The served dataset's catalogue: its events table with its fields, and its event names.
    assert!(text.contains("- events (table)"), "{text}");
    assert!(text.contains("properties.path string"));
    assert!(text.contains("- page_view (event)"));
    assert!(text.contains("How many page views last week?"));
    // Without the question, the same teaching and no question section.
    let plain = client
        .get_prompt(GetPromptRequestParams::new("signalql-primer"))
        .await
        .unwrap();
    let body = serde_json::to_value(&plain.messages[0]).unwrap();
    assert!(
        !body["content"]["text"]
            .as_str()
            .unwrap()
            .contains("# The question")
    );
}

/// DESCRIBE records and stored bundles as resources: each DESCRIBE target listed and read as
/// the envelope the describe tool gives; the two templates listed; a bundle CONTEXT FOR
/// stored read back by its address as the bundle the context tool answered; an address never
/// stored is "resource not found".
#[tokio::test]
async fn describe_records_and_stored_bundles_are_resources() {
    use rmcp::model::{ReadResourceRequestParams, ResourceContents};
    let root = dataset();
    let (client, _child) = serve(root.path(), None).await;
    let read = |uri: String| {
        let client = &client;
        async move {
            let r = client
                .read_resource(ReadResourceRequestParams::new(uri))
                .await?;
            let ResourceContents::TextResourceContents {
                text, mime_type, ..
            } = &r.contents[0]
            else {
                panic!("not text: {r:?}");
            };
            assert_eq!(mime_type.as_deref(), Some("application/json"));
            Ok::<Value, rmcp::ServiceError>(serde_json::from_str(text).unwrap())
        }
    };

    let uris: Vec<String> = client
        .list_all_resources()
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.uri.to_string())
        .collect();
    for t in ["events", "entities", "signals", "metrics", "relationships"] {
        assert!(
            uris.contains(&format!("signalql://describe/{t}")),
            "{t}: {uris:?}"
        );
    }
    let templates: Vec<String> = client
        .list_all_resource_templates()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.uri_template.to_string())
        .collect();
    assert_eq!(
        templates,
        [
            "signalql://describe/{target}",
            "context://{id}",
            "signalql://watch/{statement}"
        ]
    );

    let (_, described) = call(&client, "describe", json!({"target": "events"})).await;
    let resource = read("signalql://describe/events".into()).await.unwrap();
    assert_eq!(resource["rows"], described["rows"]);
    assert_eq!(resource["rows"][0][0], "events");

    let (err, bundle) = call(
        &client,
        "context",
        json!({"task": "object storage", "budget": 500}),
    )
    .await;
    assert!(!err, "{bundle}");
    let id = bundle["id"].as_str().unwrap().to_string();
    let stored = read(id.clone()).await.unwrap();
    assert_eq!(stored["id"], bundle["id"]);
    assert_eq!(stored["items"], bundle["items"]);
    assert!(!stored["items"].as_array().unwrap().is_empty());

    let never = read("context://ctx_00000000000000000000000000000000".into()).await;
    assert!(never.is_err());
    let typo = read("signalql://describe/nothing".into()).await;
    assert!(typo.is_err());
}

/// server.json (the MCP registry's format) describes the server that runs: its version is the
/// crate's, its name and description keep the registry's limits, and each named argument is a
/// flag `signalql mcp` accepts (the official client test starts the server from it).
#[test]
fn server_json_describes_the_server_that_runs() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let server: Value =
        serde_json::from_str(&std::fs::read_to_string(root.join("server.json")).unwrap()).unwrap();
    assert_eq!(server["version"], env!("CARGO_PKG_VERSION"));
    let name = server["name"].as_str().unwrap();
    let (namespace, local) = name.split_once('/').unwrap();
    let allowed = |s: &str, extra: &str| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || ".-".contains(c) || extra.contains(c))
    };
    assert!(allowed(namespace, "") && allowed(local, "_"), "{name}");
    let description = server["description"].as_str().unwrap();
    assert!((1..=100).contains(&description.chars().count()));
    let package = &server["packages"][0];
    assert_eq!(package["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(package["transport"]["type"], "stdio");
    let help = std::process::Command::new(env!("CARGO_BIN_EXE_signalql"))
        .args(["mcp", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8(help.stdout).unwrap();
    for a in package["packageArguments"].as_array().unwrap() {
        if a["type"] == "named" {
            let flag = a["name"].as_str().unwrap();
            assert!(help.contains(&format!("{flag} ")), "{flag} not in:\n{help}");
        }
    }
}

/// `$name` parameters (docs/params.md) through the MCP tools: bound as literals after
/// tokenizing, so the statement is the one written with the literals by hand (same rows, the
/// same cached plan, the same bundle address), a value holding quotes stays one string, and a
/// missing or unused parameter is an error.
#[tokio::test]
async fn parameters_are_bound_as_literals() {
    let root = dataset();
    let (client, _child) = serve(root.path(), None).await;
    let literal = r#"FROM events WHERE event_name = "page_view" DURING LAST 7 d RETURN count"#;
    let with_params = "FROM events WHERE event_name = $event DURING LAST $days d RETURN count";
    let (err, by_hand) = call(&client, "query", json!({ "query": literal })).await;
    assert!(!err, "{by_hand}");
    // The DuckDB oracle of golden spec/v01_count_events.
    assert_eq!(by_hand["rows"], json!([[7304]]));
    let (err, bound) = call(
        &client,
        "query",
        json!({"query": with_params, "params": {"event": "page_view", "days": 7}}),
    )
    .await;
    assert!(!err, "{bound}");
    assert_eq!(bound["rows"], by_hand["rows"]);
    assert_eq!(
        bound["metadata"]["plan_cache"], "hit",
        "the same statement's plan"
    );
    assert_eq!(
        bound["metadata"]["compiled_sql_digest"],
        by_hand["metadata"]["compiled_sql_digest"]
    );

    // A value that would close the string and add a condition if it were spliced.
    let (err, injected) = call(
        &client,
        "query",
        json!({"query": with_params,
               "params": {"event": "x\" OR event_name != \"", "days": 7}}),
    )
    .await;
    assert!(!err, "{injected}");
    assert_eq!(injected["rows"], json!([[0]]));

    let (err, missing) = call(
        &client,
        "query",
        json!({"query": with_params, "params": {"event": "page_view"}}),
    )
    .await;
    assert!(err);
    assert_eq!(missing["error"]["code"], "parse_error");
    assert_eq!(missing["error"]["line"], 1);
    assert_eq!(missing["error"]["column"], 51, "{missing}");
    let (err, extra) = call(
        &client,
        "query",
        json!({"query": literal, "params": {"limit": 5}}),
    )
    .await;
    assert!(err);
    assert_eq!(extra["error"]["code"], "parse_error");
    assert!(
        extra["error"]["message"]
            .as_str()
            .unwrap()
            .contains("$limit")
    );

    let (err, canonical) = call(
        &client,
        "format",
        json!({"query": with_params, "params": {"event": "page_view", "days": 7}}),
    )
    .await;
    assert!(!err);
    let (_, by_hand_canonical) = call(&client, "format", json!({ "query": literal })).await;
    assert_eq!(canonical, by_hand_canonical);

    let (err, a) = call(
        &client,
        "context",
        json!({"task": "object storage", "clauses": "MAX OBJECTS $k", "params": {"k": 1}}),
    )
    .await;
    assert!(!err, "{a}");
    let (_, b) = call(
        &client,
        "context",
        json!({"task": "object storage", "clauses": "MAX OBJECTS 1"}),
    )
    .await;
    assert_eq!(a["id"], b["id"]);
    assert!(a["id"].as_str().unwrap().starts_with("context://"));
}

/// A client that keeps the progress notifications it is sent.
#[derive(Clone, Default)]
struct Progressed(std::sync::Arc<std::sync::Mutex<Vec<rmcp::model::ProgressNotificationParam>>>);

impl rmcp::ClientHandler for Progressed {
    async fn on_progress(
        &self,
        params: rmcp::model::ProgressNotificationParam,
        _: rmcp::service::NotificationContext<RoleClient>,
    ) {
        self.0.lock().unwrap().push(params);
    }
}

/// Progress and cancellation (docs/runtime.md): a statement held running (the `hold_execute`
/// failpoint) reports progress to the request's token once its plan has started, and holds
/// the caller's one share of `max_concurrent_requests` (another call is refused); once the
/// client cancels it, the statement is dropped with its share, and the next call answers at
/// once while the failpoint still holds any plan that would run.
#[tokio::test]
async fn a_cancelled_call_is_dropped_and_a_running_one_reports_progress() {
    use rmcp::model::{CallToolRequest, ClientRequest};
    let root = dataset();
    let config = root.path().join("signalql.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &config,
        format!("{text}\n[limits]\nmax_concurrent_requests = 1\n"),
    )
    .unwrap();
    let hold = root.path().join("hold");
    std::fs::write(&hold, b"").unwrap();
    let seen = Progressed::default();
    let failpoint = format!("hold_execute:{}", hold.display());
    let (client, _child) = serve_to(seen.clone(), root.path(), Some(&failpoint), None).await;

    let statement = r#"FROM events WHERE event_name = "page_view" DURING LAST 7 d RETURN count"#;
    let Value::Object(args) = json!({ "query": statement }) else {
        unreachable!()
    };
    let request = ClientRequest::CallToolRequest(CallToolRequest::new(
        CallToolRequestParams::new("query").with_arguments(args),
    ));
    let handle = client
        .peer()
        .send_cancellable_request(request, Default::default())
        .await
        .unwrap();
    let token = handle.progress_token.clone();
    let started = std::time::Instant::now();
    while seen.0.lock().unwrap().is_empty() {
        assert!(started.elapsed().as_secs() < 30, "no progress notification");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    {
        let notes = seen.0.lock().unwrap();
        assert_eq!(notes[0].progress_token, token);
        assert_eq!(notes[0].progress, 0.0, "the plan is held before it reads");
        let message = notes[0].message.as_deref().unwrap_or_default();
        assert!(message.contains("rows read by 1 plan"), "{message}");
    }
    // The held statement has the caller's one share: EXPLAIN (which runs no plan) is refused.
    let (err, busy) = call(&client, "explain", json!({ "query": statement })).await;
    assert!(err, "{busy}");
    assert_eq!(busy["error"]["code"], "limit_exceeded", "{busy}");

    handle
        .cancel(Some("the test cancels it".into()))
        .await
        .unwrap();
    let cancelled = std::time::Instant::now();
    loop {
        let (err, plan) = call(&client, "explain", json!({ "query": statement })).await;
        if !err {
            assert!(plan.get("physical_plan").is_some(), "{plan}");
            break;
        }
        assert_eq!(plan["error"]["code"], "limit_exceeded", "{plan}");
        // The failpoint would hold the statement a minute; its share comes back at once.
        assert!(
            cancelled.elapsed().as_secs() < 10,
            "the share was not freed"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(hold.exists(), "the statement was dropped, not let go");
}

/// A client that keeps the URIs of the `notifications/resources/updated` it is sent.
#[derive(Clone, Default)]
struct Updated(std::sync::Arc<std::sync::Mutex<Vec<String>>>);

impl rmcp::ClientHandler for Updated {
    async fn on_resource_updated(
        &self,
        params: rmcp::model::ResourceUpdatedNotificationParam,
        _: rmcp::service::NotificationContext<RoleClient>,
    ) {
        self.0.lock().unwrap().push(params.uri);
    }
}

/// WATCH as a resource (docs/watch.md): `signalql://watch/{statement}` read gives one poll;
/// subscribed, it is polled until unsubscribed and the subscriber is told at each alert (when
/// the condition becomes true, so once for a condition that holds at every poll), after which
/// reading it gives the last poll and its alert; a condition that never holds sends nothing.
#[tokio::test]
// rmcp 3.11 marks resources/subscribe legacy-only (the 2026-07-28 protocol listens instead);
// the issue and DESIGN.md name it, and clients of the earlier versions send it.
#[allow(deprecated)]
async fn a_watch_resource_tells_its_subscriber_of_each_alert() {
    use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};
    use rmcp::model::{ReadResourceRequestParams, SubscribeRequestParams};
    let root = dataset();
    let updated = Updated::default();
    let (client, _child) = serve_to(updated.clone(), root.path(), None, None).await;
    let info = client.peer_info().unwrap();
    let resources = info.capabilities.resources.as_ref().unwrap();
    assert_eq!(resources.subscribe, Some(true));
    let templates = client.list_all_resource_templates().await.unwrap();
    assert!(
        templates
            .iter()
            .any(|t| t.uri_template == "signalql://watch/{statement}")
    );

    // 7 304 page views in the last 7 days (the DuckDB oracle of golden spec/v01_count_events).
    let count = r#"FROM events WHERE event_name = "page_view" DURING LAST 7 d RETURN count"#;
    let uri = |when: &str| {
        let statement = format!("WATCH ({count}) WHEN {when}");
        format!(
            "signalql://watch/{}?interval_seconds=0.2",
            utf8_percent_encode(&statement, NON_ALPHANUMERIC)
        )
    };
    let read = |uri: String| {
        let client = &client;
        async move {
            let r = client
                .read_resource(ReadResourceRequestParams::new(uri))
                .await
                .unwrap();
            let v = serde_json::to_value(&r).unwrap();
            let text = v["contents"][0]["text"].as_str().unwrap().to_string();
            serde_json::from_str::<Value>(&text).unwrap()
        }
    };
    let holds = uri("count > 7000");
    let once = read(holds.clone()).await;
    assert_eq!((&once["polls"], &once["holds"]), (&json!(1), &json!(true)));
    assert_eq!(once["alert"]["envelope"]["rows"], json!([[7304]]));

    client
        .subscribe(SubscribeRequestParams::new(holds.clone()))
        .await
        .unwrap();
    let started = std::time::Instant::now();
    while updated.0.lock().unwrap().is_empty() {
        assert!(started.elapsed().as_secs() < 30, "no resources/updated");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    // Three more polls at least: the condition still holds, which is no new alert.
    tokio::time::sleep(std::time::Duration::from_millis(1000)).await;
    let last = read(holds.clone()).await;
    assert!(last["polls"].as_u64().unwrap() >= 3, "{last}");
    assert_eq!(last["holds"], true);
    assert_eq!(last["alert"]["envelope"]["rows"], json!([[7304]]));
    assert_eq!(*updated.0.lock().unwrap(), vec![holds.clone()]);

    client
        .unsubscribe(rmcp::model::UnsubscribeRequestParams::new(holds.clone()))
        .await
        .unwrap();
    // Unsubscribed, a read polls once again.
    assert_eq!(read(holds.clone()).await["polls"], 1);

    let never = uri("count > 8000");
    client
        .subscribe(SubscribeRequestParams::new(never.clone()))
        .await
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(1000)).await;
    let quiet = read(never.clone()).await;
    assert!(quiet["polls"].as_u64().unwrap() >= 2, "{quiet}");
    assert_eq!(
        (&quiet["holds"], &quiet["alert"]),
        (&json!(false), &Value::Null)
    );
    assert_eq!(updated.0.lock().unwrap().len(), 1, "no alert, no update");

    // A URI that names no WATCH is refused.
    let bad = format!(
        "signalql://watch/{}",
        utf8_percent_encode(count, NON_ALPHANUMERIC)
    );
    assert!(
        client
            .subscribe(SubscribeRequestParams::new(bad))
            .await
            .is_err()
    );
}
