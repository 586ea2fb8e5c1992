//! `signalql serve` as its clients meet it: the binary serving tests/data/policy/root on
//! 127.0.0.1:0, driven by tests/it/serve_client.py with Python's own HTTP client and the
//! official MCP Python SDK (mcp 2.x) over streamable HTTP: tokens selecting principals, 401 for
//! a missing or unknown token, 413 for an oversize body, 429 beyond a principal's
//! concurrent-request limit while another principal is served, and the server still serving
//! after all of it.

use std::path::Path;
use std::process::{Child, Command, Stdio};

use serde_json::Value;

/// The server over a copy of the policy dataset, and its address. Every plan waits 1.5 s
/// (the `slow_execute` failpoint) so that concurrent requests overlap.
fn start(root: &Path) -> (Child, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_signalql"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data"])
        .arg(root)
        .env("SIGNALQL_FAILPOINT", "slow_execute")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let addr = crate::common::announced(&mut child, "listening on ");
    (child, addr)
}

fn rows(v: &Value) -> &Value {
    &v["body"]["rows"]
}

/// A copy of tests/data/policy/root.
fn policy_copy() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    crate::common::copy_dir(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/policy/root"),
        dir.path(),
    );
    dir
}

#[test]
fn served_callers_see_what_their_tokens_allow() {
    let dir = policy_copy();
    crate::common::python_package("mcp", "mcp>=2,<3");
    let (mut server, addr) = start(dir.path());
    let out = Command::new("python3")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/serve_client.py"))
        .arg(&addr)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    let still_running = server.try_wait().unwrap().is_none();
    let _ = server.kill();
    let _ = server.wait();
    assert!(out.status.success(), "the client failed: {stderr}");
    assert!(still_running, "the server stopped");
    let o: Value = serde_json::from_slice(&out.stdout).unwrap();

    // Who is calling.
    for k in ["no_token", "bad_token"] {
        assert_eq!(o[k]["status"], 401, "{k}: {}", o[k]);
        assert_eq!(o[k]["body"]["error"]["code"], "permission_denied");
    }
    assert_eq!(o["mcp_http_no_token"]["status"], 401);
    // Counts per tenant, from tests/data/policy: acme's 126 events in the window, and all three
    // tenants for admin (DuckDB over root/: 126, 156, 78).
    let per_tenant = serde_json::json!([["acme", 126], ["globex", 156], ["initech", 78]]);
    assert_eq!(rows(&o["acme"]), &serde_json::json!([["acme", 126]]));
    assert_eq!(o["acme"]["body"]["metadata"]["access_filtered"], true);
    assert_eq!(
        o["acme"]["body"]["metadata"]["limits"]["max_result_rows"],
        50
    );
    assert_eq!(rows(&o["admin"]), &per_tenant);
    assert_eq!(o["admin"]["body"]["metadata"]["access_filtered"], false);
    assert_eq!(
        rows(&o["masked"]),
        &serde_json::json!([[0]]),
        "user_id masked"
    );
    // Errors, each as the engine's JSON error with a status.
    assert_eq!(o["acme_denied"]["status"], 403);
    assert_eq!(
        o["acme_denied"]["body"]["error"]["code"],
        "permission_denied"
    );
    assert_eq!(o["acme_parse_error"]["status"], 400);
    assert_eq!(o["acme_parse_error"]["body"]["error"]["column"], 19);
    for k in ["bad_body", "not_json"] {
        assert_eq!(o[k]["status"], 400, "{k}");
    }
    for k in ["oversize_declared", "oversize_mcp"] {
        assert_eq!(o[k]["status"], 413, "{k}");
        assert_eq!(o[k]["body"]["error"]["limit"], "max_request_bytes");
        assert_eq!(o[k]["body"]["error"]["max"], 10 << 20);
    }
    // One plan cache for the server, keyed by principal: each caller's first COUNT is a miss,
    // admin's second a hit, with the same answer.
    let cache = |k: &str| o[k]["body"]["metadata"]["plan_cache"].clone();
    assert_eq!(cache("acme"), "miss");
    assert_eq!(cache("admin"), "miss");
    assert_eq!(cache("admin_again"), "hit");
    assert_eq!(o["admin_again"]["body"]["rows"], o["admin"]["body"]["rows"]);
    // A bundle over what acme may see: o_borealis (another project) is not in it.
    let bundle = &o["context"]["body"];
    assert!(bundle["id"].as_str().unwrap().starts_with("context://ctx_"));
    assert!(!bundle.to_string().contains("o_borealis"));
    // Four acme requests at once against its limit of two, and two of admin's beside them.
    let burst = o["burst"].as_array().unwrap();
    let statuses: Vec<u64> = burst
        .iter()
        .map(|r| r["status"].as_u64().unwrap())
        .collect();
    let acme_ok = statuses[..4].iter().filter(|s| **s == 200).count();
    let acme_429 = statuses[..4].iter().filter(|s| **s == 429).count();
    assert_eq!((acme_ok, acme_429), (2, 2), "{statuses:?}");
    for r in &burst[..4] {
        if r["status"] == 429 {
            assert_eq!(r["body"]["error"]["limit"], "max_concurrent_requests");
        } else {
            assert_eq!(rows(r), &serde_json::json!([["acme", 126]]));
        }
    }
    for r in &burst[4..] {
        assert_eq!(r["status"], 200);
        assert_eq!(rows(r), &per_tenant);
    }
    assert_eq!(o["after_burst"]["status"], 200);
    // The official MCP client over streamable HTTP.
    let acme = &o["mcp_acme"];
    assert_eq!(acme["tools"], serde_json::json!(crate::common::MCP_TOOLS));
    let r = &acme["results"];
    assert_eq!(r[0]["json"]["rows"], serde_json::json!([["acme", 126]]));
    let described = r[1]["json"].to_string();
    assert!(described.contains("properties.tenant"));
    assert!(
        !described.contains("session_id"),
        "a denied column is not described"
    );
    assert!(!r[2]["json"].to_string().contains("o_borealis"));
    assert_eq!(r[3]["is_error"], true);
    assert_eq!(r[3]["json"]["error"]["code"], "permission_denied");
    assert_eq!(o["mcp_admin"]["results"][0]["json"]["rows"], per_tenant);
    for k in ["mcp_bad_token", "mcp_no_token"] {
        assert!(o[k]["raised"].is_string(), "{k}: the session was refused");
    }
    assert_eq!(rows(&o["still_serving"]), &per_tenant);
}

/// One `POST /v1/query` of `query` as acme (whose `max_concurrent_requests` is 2) on a new
/// connection, the connection returned unread.
fn send_as_acme(addr: &str, query: &str) -> std::net::TcpStream {
    use std::io::Write;
    let host = addr.trim_start_matches("http://");
    let mut conn = std::net::TcpStream::connect(host).unwrap();
    let body = serde_json::json!({ "query": query }).to_string();
    write!(
        conn,
        "POST /v1/query HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer acme-token\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    conn
}

/// The status of the answer on `conn`.
fn status_of(mut conn: std::net::TcpStream) -> u16 {
    use std::io::Read;
    conn.set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .unwrap();
    let mut answer = String::new();
    let _ = conn.read_to_string(&mut answer);
    answer
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no HTTP status in {answer:?}"))
}

/// A client that sends a statement and hangs up keeps its share of the principal's
/// `max_concurrent_requests` until the statement ends: the statement goes on (it runs on its
/// own task), and so does its permit. Two acme statements are held running (the
/// `hold_execute` failpoint) and their clients hang up; the next acme request is 429 while
/// they run, and answered once they have ended.
#[test]
fn a_client_that_hangs_up_keeps_its_share_until_its_statement_ends() {
    use std::io::BufRead;
    let dir = policy_copy();
    let hold = dir.path().join("hold");
    std::fs::write(&hold, b"").unwrap();
    let mut server = Command::new(env!("CARGO_BIN_EXE_signalql"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data"])
        .arg(dir.path())
        .env(
            "SIGNALQL_FAILPOINT",
            format!("hold_execute:{}", hold.display()),
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let addr = crate::common::announced(&mut server, "listening on ");
    let mut said = std::io::BufReader::new(server.stderr.take().unwrap()).lines();
    let count = "FROM events DURING LAST 30 d RETURN count";
    for _ in 0..2 {
        let conn = send_as_acme(&addr, count);
        // Its statement is running (held), then the client goes away.
        loop {
            let line = said.next().expect("the server's stderr ended").unwrap();
            if line.contains("failpoint: holding a statement") {
                break;
            }
        }
        conn.shutdown(std::net::Shutdown::Both).unwrap();
        drop(conn);
    }
    // Time for the server to see both connections closed.
    std::thread::sleep(std::time::Duration::from_millis(500));
    assert_eq!(
        status_of(send_as_acme(&addr, count)),
        429,
        "two hung-up statements still run: acme has no share left"
    );
    std::fs::remove_file(&hold).unwrap();
    // Once they end, acme is served again.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let served = loop {
        let status = status_of(send_as_acme(&addr, count));
        if status == 200 || std::time::Instant::now() > deadline {
            break status;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    let _ = server.kill();
    let _ = server.wait();
    assert_eq!(served, 200);
}

/// `POST /v1/query` in every form DESIGN.md §7 names, read by pyarrow: the Arrow IPC stream
/// and the Parquet file hold the JSON answer's rows and names (the envelope without its rows
/// in the schema's `signalql` metadata), CSV the same rows as text; a statement of no rows is
/// a stream of its schema and no rows; a bundle has no rows (400, type_error); an `Accept`
/// with none of the forms is 406; `GET /health` answers without a token.
#[test]
fn the_query_endpoint_answers_arrow_csv_and_parquet() {
    crate::common::python_package("pyarrow", "pyarrow>=20");
    let dir = tempfile::tempdir().unwrap();
    crate::common::copy_dir(&signalql::sample_dataset(), dir.path());
    let mut child = Command::new(env!("CARGO_BIN_EXE_signalql"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data"])
        .arg(dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let addr = crate::common::announced(&mut child, "listening on ");
    let out = Command::new("python3")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/serve_arrow.py"))
        .arg(&addr)
        .output()
        .unwrap();
    let _ = child.kill();
    let _ = child.wait();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "the client failed: {stderr}");
    let o: Value = serde_json::from_slice(&out.stdout).unwrap();

    let json = &o["json"]["body"];
    assert_eq!(o["json"]["status"], 200);
    let names: Vec<&Value> = json["columns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| &c["name"])
        .collect();
    assert_eq!(json["rows"].as_array().unwrap().len(), 5);
    for form in ["arrow", "parquet"] {
        let f = &o[form];
        assert_eq!(f["status"], 200, "{form}: {f}");
        assert_eq!(f["rows"], json["rows"], "{form}");
        let got: Vec<&Value> = f["names"].as_array().unwrap().iter().collect();
        assert_eq!(got, names, "{form}");
    }
    assert_eq!(o["arrow"]["media"], "application/vnd.apache.arrow.stream");
    assert_eq!(o["parquet"]["media"], "application/vnd.apache.parquet");
    assert_eq!(o["parquet"]["has_signalql"], true);
    assert_eq!(
        o["arrow"]["types"],
        serde_json::json!(["string", "int64", "double"])
    );
    // The envelope, rows apart, rides in the schema.
    let header = &o["arrow"]["signalql"];
    assert_eq!(header["columns"], json["columns"]);
    assert_eq!(header["metadata"]["row_count"], 5);
    assert_eq!(header["metadata"]["as_of"], json["metadata"]["as_of"]);

    // CSV: a header of the names, then each row as text (a null is empty).
    let csv = o["csv"]["rows"].as_array().unwrap();
    assert_eq!(o["csv"]["status"], 200);
    assert_eq!(
        csv[0],
        serde_json::json!(["properties.path", "count", "avg(properties.amount)"])
    );
    for (line, row) in csv[1..].iter().zip(json["rows"].as_array().unwrap()) {
        assert_eq!(line[0], row[0]);
        assert_eq!(line[1].as_str().unwrap(), row[1].to_string());
        assert_eq!(line[2], "");
    }

    // No matching event: one row of 0 distinct users; no group: the schema and no rows.
    assert_eq!(o["none"]["rows"], serde_json::json!([[0]]));
    assert_eq!(o["empty"]["status"], 200);
    assert_eq!(
        o["empty"]["names"],
        serde_json::json!(["properties.path", "count"])
    );
    assert_eq!(o["empty"]["rows"], serde_json::json!([]));
    assert_eq!(o["find"]["status"], 200, "{}", o["find"]);
    assert!(o["find"]["rows"].as_u64().is_some_and(|n| n > 0));
    assert_eq!(o["bundle_as_arrow"]["status"], 400);
    assert_eq!(o["bundle_as_arrow"]["body"]["error"]["code"], "type_error");
    assert_eq!(o["html"]["status"], 406);
    assert_eq!(o["listed"]["status"], 200);
    assert_eq!(o["listed"]["media"], "application/vnd.apache.arrow.stream");

    // With $name parameters, the same rows in either form; a missing one is a 400 naming it.
    assert_eq!(o["params_arrow"]["status"], 200);
    assert_eq!(o["params_arrow"]["rows"], o["arrow"]["rows"]);
    assert_eq!(o["params_json"]["body"]["rows"], json["rows"]);
    assert_eq!(o["params_missing"]["status"], 400);
    let missing = &o["params_missing"]["body"]["error"];
    assert_eq!(missing["code"], "parse_error");
    assert!(
        missing["message"].as_str().unwrap().contains("$n"),
        "{missing}"
    );

    assert_eq!(o["health"]["status"], 200);
    assert_eq!(o["health"]["body"]["status"], "ok");
    assert_eq!(o["health"]["body"]["version"], env!("CARGO_PKG_VERSION"));
    assert!(o["health"]["body"]["commit_position"].is_u64());
}
