//! Statements run on a cluster of workers (docs/cluster.md): the same answers as in one
//! process, network boundaries in EXPLAIN, and clear errors for a worker that is not there.
//! The golden suite runs every case on two workers too (tests/golden.rs, `cluster/…`).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use signalql::{Answer, Engine, EngineOptions};

use crate::common::cluster::Workers;

fn options(workers: &[String]) -> EngineOptions {
    EngineOptions {
        now: Some("2026-06-13T00:00:00Z".parse().unwrap()),
        workers: workers.to_vec(),
        bytes_per_task: (!workers.is_empty()).then_some(1),
        ..Default::default()
    }
}

async fn envelope(root: &Path, workers: &[String], q: &str) -> Result<Value, signalql::Error> {
    let engine = Engine::open_with(root, options(workers))?;
    match engine.answer(q).await? {
        Answer::Envelope(e) => Ok(serde_json::to_value(&e.rows).unwrap()),
        other => panic!("{q}: not an envelope: {other:?}"),
    }
}

/// A free loopback port nothing listens on.
fn closed_port() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn context_for_gives_the_same_bundle_on_workers() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("objects");
    signalql::catalog::objects::generator::generate_objects(
        &signalql::catalog::objects::generator::ObjectGenOptions {
            seed: 7,
            ..signalql::catalog::objects::generator::ObjectGenOptions::new(&root, 300)
        },
    )
    .unwrap();
    let workers = Workers::start(2);
    let q = r#"CONTEXT FOR "parquet storage engine budget" BUDGET 2000 TOKENS"#;
    let bundle = |workers: Vec<String>| {
        let root = root.clone();
        async move {
            let engine = Engine::open_with(&root, options(&workers)).unwrap();
            match engine.answer(q).await.unwrap() {
                Answer::Bundle(b) => serde_json::to_value(&*b).unwrap(),
                other => panic!("not a bundle: {other:?}"),
            }
        }
    };
    let local = bundle(vec![]).await;
    let distributed = bundle(workers.addresses.clone()).await;
    assert!(!local["items"].as_array().unwrap().is_empty(), "{local}");
    assert_eq!(local["id"], distributed["id"]);
    assert_eq!(local["items"], distributed["items"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_shows_the_network_boundaries() {
    let workers = Workers::start(2);
    let engine =
        Engine::open_with(signalql::sample_dataset(), options(&workers.addresses)).unwrap();
    let q = r#"FROM events WHERE event_name = "purchase" DURING LAST 30 d RETURN count, sum(properties.amount)"#;
    let Answer::Plan(plan) = engine.answer(&format!("EXPLAIN {q}")).await.unwrap() else {
        panic!("EXPLAIN did not answer a plan");
    };
    let physical = serde_json::to_value(&*plan).unwrap()["physical_plan"].to_string();
    assert!(physical.contains("DistributedExec"), "{physical}");
    assert!(physical.contains("NetworkCoalesceExec"), "{physical}");
    // In one process there is none.
    let local = Engine::open_with(signalql::sample_dataset(), options(&[])).unwrap();
    let Answer::Plan(plan) = local.answer(&format!("EXPLAIN {q}")).await.unwrap() else {
        panic!("EXPLAIN did not answer a plan");
    };
    let physical = serde_json::to_value(&*plan).unwrap()["physical_plan"].to_string();
    assert!(!physical.contains("Network"), "{physical}");
    // And the answer is the one-process answer (sums alike up to their order).
    let (there, here) = (
        envelope(&signalql::sample_dataset(), &workers.addresses, q)
            .await
            .unwrap(),
        envelope(&signalql::sample_dataset(), &[], q).await.unwrap(),
    );
    assert!(
        crate::common::json_close(&there, &here),
        "{there} vs {here}"
    );
}

/// The physical plan of `EXPLAIN q` on the sample, over `workers`.
async fn physical_plan(workers: &[String], q: &str) -> String {
    let engine = Engine::open_with(signalql::sample_dataset(), options(workers)).unwrap();
    match engine.answer(&format!("EXPLAIN {q}")).await {
        Ok(Answer::Plan(plan)) => {
            serde_json::to_value(&*plan).unwrap()["physical_plan"].to_string()
        }
        other => panic!("{q}: EXPLAIN did not answer a plan: {other:?}"),
    }
}

/// Which statements send stages to the workers (docs/cluster.md, "What runs where"). The
/// answers are the same either way: the golden suite runs every case on workers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grouped_statements_run_on_the_workers_and_the_rest_here() {
    let workers = Workers::start(2);
    let distributed = [
        // Grouping: partial aggregates on the workers, the group cap over the final ones here.
        r#"FROM events DURING LAST 7 d GROUP BY properties.country HAVING count_distinct(user_id) >= 10 RETURN properties.country, count"#,
        // A dense series: the fill runs here, over the aggregate the workers made.
        r#"FROM events WHERE event_name = "error" DURING LAST 24 h BUCKET BY h RETURN timestamp, count, count_distinct(user_id)"#,
        // signalql's aggregates, whose parameters are arguments.
        r#"FROM events WHERE event_name = "purchase" DURING LAST 30 d GROUP BY properties.platform RETURN properties.platform, percentile(properties.amount, 0.95), stddev(properties.amount)"#,
        r#"FROM metric(analytics.error_rate) DURING LAST 14 d BUCKET BY d RETURN timestamp, metric_value"#,
        r#"FROM events WHERE event_name = "purchase" DURING LAST 2 d RETURN timestamp, user_id ORDER BY timestamp DESC LIMIT 5"#,
        "DESCRIBE events",
        // Funnels and sequences: the scan travels with its row index (the tie-break), the
        // file rank with its file list, the funnel aggregate with its settings as arguments.
        r#"FUNNEL "visit" -> "signup" -> "activated" FROM events DURING LAST 28 d WITHIN 7 d"#,
        r#"FUNNEL "session_start" -> "page_view" -> "click" FROM events DURING LAST 28 d WITHIN 1 h ORDER STRICT GROUP BY properties.platform"#,
        r#"FIND sequence WHERE "signup" -> "checkout" -> "purchase" WITHIN 2 d"#,
        // Entities: the window that keeps each one's latest version runs on the workers.
        "FROM entity(analytics.user) GROUP BY attributes.plan RETURN attributes.plan, count",
        r#"FROM events WHERE event_name = "purchase" DURING LAST 30 d GROUP BY signal(churn_risk) RETURN signal(churn_risk), count"#,
        r#"FROM entity(analytics.user) WHERE entity_id IN ("u000008", "u000009") RETURN entity_id, attributes.plan"#,
        // The traversal travels with its relation and depth, in a stage of one task.
        r#"FROM entity(analytics.account) WHERE attributes.region = "emea" TRAVERSE parent_of DEPTH <= 2 GROUP BY hops RETURN hops, count"#,
        // One entity by its id: the id is a constant under the latest-version window, which
        // the window's sort then sorts by first, so that a worker sees it ordered.
        r#"FROM entity(analytics.user) WHERE entity_id = "u000008" RETURN entity_id, attributes.plan"#,
        r#"FROM entity(analytics.account) WHERE entity_id = "a0000" TRAVERSE partner_of DEPTH <= 7 RETURN entity_id, hops ORDER BY hops ASC"#,
        // The text index's postings travel as a table joined on the representations; the
        // bundle packer runs here, over what the workers scored.
        r#"FIND OBJECT ABOUT "parquet storage" LIMIT 5"#,
        r#"CONTEXT FOR "parquet storage engine budget" BUDGET 2000 TOKENS"#,
    ];
    let here: [&str; 0] = [];
    for q in distributed {
        let plan = physical_plan(&workers.addresses, q).await;
        assert!(plan.contains("DistributedExec"), "{q}: {plan}");
        assert!(plan.contains("Network"), "{q}: {plan}");
    }
    for q in here {
        let plan = physical_plan(&workers.addresses, q).await;
        assert!(!plan.contains("DistributedExec"), "{q}: {plan}");
    }
    // Either way, the rows of one process.
    let sample = signalql::sample_dataset();
    for q in distributed.iter().chain(&here) {
        if q.starts_with("DESCRIBE") || q.starts_with("CONTEXT") {
            continue;
        }
        let (there, here) = (
            envelope(&sample, &workers.addresses, q).await.unwrap(),
            envelope(&sample, &[], q).await.unwrap(),
        );
        // Float sums alike up to their order (the workers and this process split the rows
        // differently).
        assert!(
            crate::common::json_close(&there, &here),
            "{q}: {there} vs {here}"
        );
    }
    // The group cap sits above the network boundary, in this process.
    let plan = physical_plan(&workers.addresses, distributed[0]).await;
    let cap = plan.find("GroupCapExec").expect("a group cap");
    let boundary = plan.find("NetworkShuffleExec").expect("a shuffle");
    assert!(cap < boundary, "{plan}");
}

/// `max_groups` counts the groups of every worker together: a cap each worker's share is
/// under still fails the statement, as it does in one process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_group_cap_counts_every_workers_groups() {
    let workers = Workers::start(2);
    let q = "FROM events DURING LAST 30 d GROUP BY user_id RETURN user_id, count";
    let groups = {
        let rows = envelope(&signalql::sample_dataset(), &[], q).await.unwrap();
        rows.as_array().unwrap().len() as u64
    };
    assert!(groups > 100, "{groups}");
    let capped = |workers: Vec<String>| async move {
        let mut o = options(&workers);
        // Fewer than all the groups, more than half of them: each worker alone holds fewer.
        o.limits.max_groups = groups * 3 / 4;
        let engine = Engine::open_with(signalql::sample_dataset(), o).unwrap();
        engine
            .answer(q)
            .await
            .expect_err("more groups than max_groups")
            .to_json()
    };
    let here = capped(vec![]).await;
    let there = capped(workers.addresses.clone()).await;
    assert_eq!(here["error"]["code"], "limit_exceeded", "{here}");
    assert_eq!(there["error"]["code"], "limit_exceeded", "{there}");
    assert_eq!(there["error"]["limit"], here["error"]["limit"], "{there}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_that_is_down_is_an_io_error_naming_it() {
    // Two, so that the scan is split (one worker alone would run it all in this process).
    let down = [closed_port(), closed_port()];
    let started = Instant::now();
    let err = envelope(
        &signalql::sample_dataset(),
        &down,
        "FROM events DURING LAST 30 d RETURN count",
    )
    .await
    .expect_err("no worker listens there");
    let json = err.to_json();
    assert_eq!(json["error"]["code"], "io_error", "{json}");
    let message = json["error"]["message"].as_str().unwrap();
    assert!(down.iter().any(|d| message.contains(d)), "{json}");
    assert!(started.elapsed() < Duration::from_secs(30));
}

#[test]
fn bad_worker_addresses_are_refused() {
    let err = match Engine::open_with(signalql::sample_dataset(), options(&["nowhere".into()])) {
        Err(e) => e,
        Ok(_) => panic!("an address without a port was accepted"),
    };
    assert_eq!(err.to_json()["error"]["code"], "io_error");
    assert!(err.to_string().contains("nowhere"), "{err}");
}

/// `signalql worker --listen 127.0.0.1:0` as a process with `env`, and its address.
fn spawn_worker(env: &[(&str, &str)]) -> (std::process::Child, String) {
    let env: Vec<(&str, String)> = env.iter().map(|(k, v)| (*k, v.to_string())).collect();
    spawn_worker_with(&env)
}

/// A worker process with exactly the AWS variables of `env` (and its other variables).
fn spawn_worker_with(env: &[(&str, String)]) -> (std::process::Child, String) {
    let mut worker = crate::common::s3::signalql_command(env);
    worker.args(["worker", "--listen", "127.0.0.1:0"]);
    started_worker(worker)
}

/// `worker` (a `signalql worker` command) started, once it says where it listens.
fn started_worker(mut worker: Command) -> (std::process::Child, String) {
    let mut child = worker
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let address = crate::common::announced(&mut child, "worker listening on ");
    (child, address)
}

/// What `command` prints on stdout, once it has succeeded.
fn success_stdout(command: &mut Command) -> String {
    let o = command.output().unwrap();
    assert!(o.status.success(), "{o:?}");
    String::from_utf8(o.stdout).unwrap()
}

/// The sample, copied, with its scans split however small they are.
fn split_sample(dir: &Path) -> std::path::PathBuf {
    let data = dir.join("sample");
    crate::common::copy_dir(&signalql::sample_dataset(), &data);
    let toml = data.join("signalql.toml");
    let text = std::fs::read_to_string(&toml).unwrap();
    std::fs::write(&toml, format!("{text}\n[cluster]\nbytes_per_task = 1\n")).unwrap();
    data
}

/// The statement on the split sample over a worker that holds its task (`hold_task`) and
/// another, with `fault` done to the holder by `kill` once its task has arrived (mid-statement,
/// not before it): it fails within `within` with an `io_error` naming the holder, and prints
/// no rows.
fn fault_mid_statement(fault: &str, within: Duration) {
    let (mut held, held_at) = spawn_worker(&[("SIGNALQL_FAILPOINT", "hold_task")]);
    let (mut other, other_at) = spawn_worker(&[]);
    let dir = tempfile::tempdir().unwrap();
    let data = split_sample(dir.path());
    let started = Instant::now();
    let query = Command::new(env!("CARGO_BIN_EXE_signalql"))
        .args(["query", "--format", "csv", "--data"])
        .arg(&data)
        .args(["--workers", &format!("{held_at},{other_at}")])
        .arg("FROM events DURING LAST 30 d GROUP BY event_name RETURN event_name, count")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::BufRead;
        let mut line = String::new();
        let mut stderr = std::io::BufReader::new(held.stderr.take().unwrap());
        while !line.contains("failpoint: holding a task") {
            line.clear();
            assert!(stderr.read_line(&mut line).unwrap() > 0, "the worker ended");
        }
    }
    let signalled = Command::new("kill")
        .args([fault, &held.id().to_string()])
        .status()
        .unwrap();
    assert!(signalled.success());
    let out = query.wait_with_output().unwrap();
    let elapsed = started.elapsed();
    for w in [&mut held, &mut other] {
        let _ = w.kill();
        let _ = w.wait();
    }
    assert!(!out.status.success(), "{out:?}");
    assert!(out.stdout.is_empty(), "rows were printed: {out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.starts_with("error: io_error: worker "), "{stderr}");
    assert!(stderr.contains(&held_at), "{stderr}");
    assert!(elapsed < within, "{elapsed:?}");
}

/// A worker killed mid-statement: its connection is reset at once.
#[test]
fn a_worker_killed_mid_statement_fails_it_with_an_io_error() {
    fault_mid_statement("-KILL", Duration::from_secs(30));
}

/// A worker that stops answering mid-statement (SIGSTOP: its connection stays open) is
/// noticed by the keep-alive pings, within about twice their interval, never a hang.
#[test]
fn a_worker_that_stops_answering_fails_the_statement_within_the_keepalive() {
    fault_mid_statement(
        "-STOP",
        signalql::distributed::KEEPALIVE * 2 + Duration::from_secs(10),
    );
}

/// A dataset on S3 runs on workers that read the bucket themselves (each worker process
/// given the same AWS environment as the coordinator): the same rows as in one process, and a
/// distributed plan.
#[test]
fn an_s3_dataset_runs_on_workers_that_read_the_bucket() {
    let s3 = crate::common::s3::S3Server::start();
    s3.create_bucket("lake");
    let env = s3.env();
    let dir = tempfile::tempdir().unwrap();
    s3.upload_dir(&split_sample(dir.path()), "lake", "sample");
    let (mut workers, addresses): (Vec<_>, Vec<_>) =
        (0..2).map(|_| spawn_worker_with(&env)).unzip();
    let list = addresses.join(",");
    let run = |extra: &[&str], q: &str| {
        success_stdout(
            crate::common::s3::signalql_command(&env)
                .args(["query", "--format", "csv", "--data", "s3://lake/sample"])
                .args(extra)
                .arg(q),
        )
    };
    let grouped = "FROM events DURING LAST 30 d GROUP BY event_name RETURN event_name, count, count_distinct(user_id)";
    let distributed = run(&["--workers", &list], grouped);
    let local = run(&[], grouped);
    let plan = {
        let o = crate::common::s3::signalql_command(&env)
            .args(["query", "--format", "json", "--data", "s3://lake/sample"])
            .args(["--workers", &list])
            .arg(format!("EXPLAIN {grouped}"))
            .output()
            .unwrap();
        String::from_utf8(o.stdout).unwrap()
    };
    for w in &mut workers {
        let _ = w.kill();
        let _ = w.wait();
    }
    assert!(plan.contains("DistributedExec"), "{plan}");
    // The stage the workers run scans the bucket's keys.
    assert!(plan.contains("sample/events/part-"), "{plan}");
    assert_eq!(distributed, local);
    assert!(local.lines().count() > 3, "{local}");
}

/// `line` split into words as a POSIX shell splits a line of plain words and '…' strings.
fn shell_words(line: &str) -> Vec<String> {
    let (mut words, mut word, mut quoted, mut started) = (Vec::new(), String::new(), false, false);
    for c in line.chars() {
        match c {
            '\'' => {
                quoted = !quoted;
                started = true;
            }
            ' ' if !quoted => {
                if started {
                    words.push(std::mem::take(&mut word));
                }
                started = false;
            }
            c => {
                word.push(c);
                started = true;
            }
        }
    }
    assert!(!quoted, "an unclosed quote in {line:?}");
    if started {
        words.push(word);
    }
    words
}

/// README.md's "Running on a cluster of workers" commands, run as they are written there
/// (their two ports replaced by free ones): the workers start, the query answers what it
/// answers without `--workers`, and `explain` shows a distributed plan.
#[test]
fn the_readme_cluster_commands_run_as_written() {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    let section = readme
        .split("## Running on a cluster of workers")
        .nth(1)
        .expect("README.md has the section");
    let block = section
        .split("```sh\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("the section has a sh block");
    let ports: Vec<String> = (0..2).map(|_| closed_port()).collect();
    let lines: Vec<Vec<String>> = block
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let l = l
                .replace("127.0.0.1:7979", &ports[0])
                .replace("127.0.0.1:7980", &ports[1]);
            shell_words(&l)
        })
        .collect();
    let command = |words: &[String]| {
        assert_eq!(words[0], "signalql", "{words:?}");
        let mut c = Command::new(env!("CARGO_BIN_EXE_signalql"));
        c.args(&words[1..]);
        c
    };
    let mut workers = Vec::new();
    let mut outputs = Vec::new();
    for words in &lines {
        if words.last().is_some_and(|w| w == "&") {
            workers.push(started_worker(command(&words[..words.len() - 1])).0);
        } else {
            outputs.push((words.clone(), command(words).output().unwrap()));
        }
    }
    // The same query in this process alone: the README's words without the cluster flags.
    let (query_words, query) = &outputs[0];
    let mut alone: Vec<String> = Vec::new();
    let mut skip = false;
    for w in query_words {
        if skip {
            skip = false;
        } else if w == "--workers" || w == "--bytes-per-task" {
            skip = true;
        } else {
            alone.push(w.clone());
        }
    }
    let local = command(&alone).output().unwrap();
    for w in &mut workers {
        let _ = w.kill();
        let _ = w.wait();
    }
    assert_eq!(workers.len(), 2);
    assert!(query.status.success(), "{query:?}");
    assert!(local.status.success(), "{local:?}");
    assert_eq!(query.stdout, local.stdout);
    assert!(String::from_utf8_lossy(&query.stdout).lines().count() > 3);
    let (_, explain) = &outputs[1];
    let plan = String::from_utf8_lossy(&explain.stdout);
    assert!(explain.status.success(), "{explain:?}");
    assert!(plan.contains("DistributedExec"), "{plan}");
    assert!(plan.contains("NetworkShuffleExec"), "{plan}");
}

/// The commands of docs/cluster.md: `signalql worker --listen` prints its address, and
/// `query --workers` answers as `query` does.
#[test]
fn the_cli_starts_workers_and_queries_them() {
    let (mut workers, addresses): (Vec<_>, Vec<_>) = (0..2).map(|_| spawn_worker(&[])).unzip();
    let dir = tempfile::tempdir().unwrap();
    let data = split_sample(dir.path());
    let q = r#"FROM events DURING LAST 7 d RETURN count, count_distinct(user_id), avg(properties.amount)"#;
    let run = |extra: &[&str]| {
        success_stdout(
            Command::new(env!("CARGO_BIN_EXE_signalql"))
                .args(["query", "--format", "csv", "--data"])
                .arg(&data)
                .args(extra)
                .arg(q),
        )
    };
    let list = addresses.join(",");
    let distributed = run(&["--workers", &list]);
    let local = run(&[]);
    for w in &mut workers {
        let _ = w.kill();
        let _ = w.wait();
    }
    assert_eq!(distributed, local);
    assert_eq!(local.lines().count(), 2, "{local}");
}

/// A Delta table's scan runs on the workers: each task carries the table, the version the
/// coordinator read and the columns, and the worker opens that version itself
/// (docs/cluster.md, "A Delta table's scan travels as its snapshot"). The table is the
/// deltalake-written fixture (tests/data/foreign/delta, version 3: one file of 46 rows) with a
/// fourth commit, written here, that adds two copies of that file: every count triples, the
/// distinct users stay as they were.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delta_table_is_scanned_on_the_workers() {
    let dir = tempfile::tempdir().unwrap();
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/foreign/delta");
    crate::common::copy_dir(&fixture, dir.path());
    let table = dir.path().join("events");
    let current = "part-00000-2a9ef97b-afed-440f-b250-63805dfb56c3-c000.zstd.parquet";
    let mut commit = String::new();
    for copy in ["copy-a.parquet", "copy-b.parquet"] {
        std::fs::copy(table.join(current), table.join(copy)).unwrap();
        let size = std::fs::metadata(table.join(copy)).unwrap().len();
        commit.push_str(&format!(
            "{{\"add\":{{\"path\":\"{copy}\",\"partitionValues\":{{}},\"size\":{size},\
             \"modificationTime\":1796142500000,\"dataChange\":true}}}}\n"
        ));
    }
    std::fs::write(table.join("_delta_log/00000000000000000004.json"), commit).unwrap();

    let workers = Workers::start(2);
    let options = |workers: &[String]| EngineOptions {
        now: Some("2026-06-08T00:00:00Z".parse().unwrap()),
        ..options(workers)
    };
    let q = "FROM events DURING LAST 7 d GROUP BY properties.plan RETURN properties.plan, count, count_distinct(user_id), sum(properties.amount)";
    let engine = Engine::open_with(dir.path(), options(&workers.addresses)).unwrap();
    let Ok(Answer::Plan(plan)) = engine.answer(&format!("EXPLAIN {q}")).await else {
        panic!("EXPLAIN did not answer a plan")
    };
    let plan = serde_json::to_value(&*plan).unwrap()["physical_plan"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(plan.starts_with("DistributedExec"), "{plan}");
    let boundary = plan.find("NetworkShuffleExec").expect("a shuffle");
    let scan = plan
        .find("DeltaSnapshotScanExec: version=4")
        .expect("the Delta scan at version 4");
    assert!(boundary < scan, "the scan is in a worker's stage: {plan}");
    assert!(!plan.contains("DeltaScanExec"), "{plan}");

    let rows = |engine: Engine| async move {
        match engine.answer(q).await.unwrap() {
            Answer::Envelope(e) => serde_json::to_value(&e.rows).unwrap(),
            other => panic!("not an envelope: {other:?}"),
        }
    };
    let distributed = rows(engine).await;
    let local = rows(Engine::open_with(dir.path(), options(&[])).unwrap()).await;
    assert_eq!(distributed, local);
    // tests/golden/foreign/delta_by_plan.case (DuckDB's answer over version 3), tripled.
    let want = [("free", 75, 8, 3.0 * 337.37), ("pro", 63, 8, 3.0 * 299.18)];
    let got = distributed.as_array().unwrap();
    assert_eq!(got.len(), want.len(), "{distributed}");
    for (row, (plan, count, users, sum)) in got.iter().zip(want) {
        assert_eq!(row[0], plan, "{distributed}");
        assert_eq!(row[1], count, "{distributed}");
        assert_eq!(row[2], users, "{distributed}");
        assert!(
            (row[3].as_f64().unwrap() - sum).abs() < 1e-6,
            "{distributed}"
        );
    }
}
