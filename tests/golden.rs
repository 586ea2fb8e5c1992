//! Golden tests: every `tests/golden/**/*.case` file is a query in and an expected result out.
//!
//! A case file has a header of `key: value` lines (`data: sample|tiny|funnel|docs|segment|texttime|objects|hive|jsontext|drift|delta|policy`,
//! `now: RFC3339`, `principal: NAME` of the dataset's policy.toml), then
//! sections introduced by `--- name` lines:
//! - `--- query`: the SignalQL text (required);
//! - `--- oracle`: optional DuckDB SQL over a view `events` that computes the expectation
//!   independently; `python3 tests/golden/oracle.py` runs it and rewrites `--- expected`;
//! - `--- expected`: `{"columns": [names], "rows": [[...]]}` (hand-computed where there is no
//!   oracle), optionally with `"truncated"`/`"ordered"` to check those flags;
//! - `--- error`: instead of expected, `{"code": …, "line": …, "column": …}` (any subset);
//! - `--- plan`: the statement's DataFusion logical plan as DataFusion displays it (indented),
//!   pinned; `SIGNALQL_BLESS=1 cargo test --test golden` rewrites every `--- plan` section
//!   from the engine for a person to review in the diff. A CONTEXT FOR case pins its plan
//!   (the `BundlePack` node) and needs no `--- expected`.
//!
//! Numbers compare with a relative tolerance of 1e-9; everything else exactly.
//!
//! Each case also runs as `s3/<case>`: over a copy of its dataset in a real S3-compatible
//! server (moto, tests/common/s3.rs), where it must give the local folder's envelope; and as
//! `cluster/<case>` and `s3-cluster/<case>`: on two workers served in this process
//! (docs/cluster.md), over the local folder and over S3, where it must
//! give the envelope it gives in one process, and must have run where docs/cluster.md says:
//! every plan that reads a file in one process runs on the workers (EXPLAIN's physical plan is
//! the distributed one; a CONTEXT FOR's scans reach them), unless the header says
//! `cluster: here <why>` for a statement that document keeps on the coordinator. The run
//! prints how many trials went to the workers.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use std::sync::atomic::{AtomicUsize, Ordering};

use datafusion::physical_plan::ExecutionPlan;
use serde_json::Value;
use signalql::catalog::StorageOptions;
use signalql::{Engine, EngineOptions};
use signalql_engine::record::{Run, recording};

mod common;
use common::json_close as close;
use common::s3::S3Server;

/// The bucket the S3 trials read the datasets from (`s3://golden/<dataset>`).
const S3_BUCKET: &str = "golden";

struct Case {
    header: BTreeMap<String, String>,
    sections: BTreeMap<String, String>,
}

fn parse_case(path: &Path) -> Case {
    let text = std::fs::read_to_string(path).unwrap();
    let mut header = BTreeMap::new();
    let mut sections: BTreeMap<String, String> = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        if let Some(name) = line.strip_prefix("--- ") {
            current = Some(name.trim().to_string());
            sections.insert(name.trim().to_string(), String::new());
        } else if let Some(sec) = &current {
            let s = sections.get_mut(sec).unwrap();
            s.push_str(line);
            s.push('\n');
        } else if let Some((k, v)) = line.split_once(':')
            && !line.starts_with('#')
        {
            header.insert(k.trim().to_string(), v.trim().to_string());
        }
    }
    Case { header, sections }
}

fn case_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let p = entry.unwrap().path();
        if p.is_dir() {
            case_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "case") {
            out.push(p);
        }
    }
}

/// The hand-made datasets under `tests/data/`, each built in a temporary folder.
const BUILT: &[&str] = &["tiny", "funnel", "docs"];

/// The datasets other tools wrote (tests/data/foreign/make.py, pyarrow), each copied as it is
/// into a temporary folder.
const FOREIGN: &[&str] = &[
    "segment", "texttime", "objects", "hive", "jsontext", "drift", "delta",
];

/// The multi-tenant dataset with a policy.toml (tests/data/policy/make.py): its `root/`.
const POLICY: &str = "policy";

/// The datasets cases can name: the bundled sample, and the built ones (by name, in `built`).
fn dataset(name: &str, built: &Path) -> PathBuf {
    match name {
        "sample" => signalql::sample_dataset(),
        other if BUILT.contains(&other) || FOREIGN.contains(&other) || other == POLICY => {
            built.join(other)
        }
        other => panic!("unknown dataset {other}"),
    }
}

/// Builds `tests/data/<name>` into `root/<name>`: every `events*.jsonl` ingested in name order,
/// one ingest (so one Parquet file) each, and the `users`/`signals` tables where present.
fn build(name: &str, root: &Path) {
    let dir = root.join(name);
    if FOREIGN.contains(&name) {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/foreign");
        common::copy_dir(&src.join(name), &dir);
        return;
    }
    if name == POLICY {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/policy/root");
        common::copy_dir(&src, &dir);
        return;
    }
    std::fs::create_dir_all(&dir).unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name);
    std::fs::copy(src.join("signalql.toml"), dir.join("signalql.toml")).unwrap();
    if name == "docs" {
        // An object store: the Markdown files under `tests/data/docs/files`, ingested at a
        // fixed time.
        let options = signalql::catalog::objects::ingest::ObjectIngestOptions {
            now: chrono::DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
                .unwrap()
                .with_timezone(&chrono::Utc),
            ..Default::default()
        };
        signalql::catalog::objects::ingest::ingest_objects(&dir, &[src.join("files")], &options)
            .unwrap();
        return;
    }
    let mut inputs: Vec<PathBuf> = std::fs::read_dir(&src)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let n = p.file_name().unwrap().to_string_lossy();
            n.starts_with("events") && n.ends_with(".jsonl")
        })
        .collect();
    inputs.sort();
    for input in inputs {
        signalql::catalog::ingest::ingest_events(&dir, &[input]).unwrap();
    }
    if src.join("users.jsonl").exists() {
        common::write_tiny_side_tables(&src, &dir);
    }
}

/// The engine options of a case: its `now`, and where S3 is.
fn options(case: &Case, storage: StorageOptions) -> EngineOptions {
    options_on(case, storage, &[])
}

/// The engine options of a case run on `workers` (none: in this process). Every scan of more
/// than a byte is split over the workers.
fn options_on(case: &Case, storage: StorageOptions, workers: &[String]) -> EngineOptions {
    let now = case.header.get("now").map(|s| {
        chrono::DateTime::parse_from_rfc3339(s)
            .unwrap()
            .with_timezone(&chrono::Utc)
    });
    EngineOptions {
        now,
        storage,
        principal: case.header.get("principal").cloned(),
        workers: workers.to_vec(),
        bytes_per_task: (!workers.is_empty()).then_some(1),
        ..Default::default()
    }
}

/// A CONTEXT FOR case without `--- error` pins its plan only (its bundles are tested in
/// tests/it/context.rs).
fn is_context(case: &Case) -> bool {
    !case.sections.contains_key("error")
        && case
            .sections
            .get("query")
            .is_some_and(|q| q.trim_start().starts_with("CONTEXT FOR"))
}

/// The case's query on the dataset at `root` (a folder or `s3://…`).
async fn evaluate(
    case: &Case,
    root: &Path,
    storage: StorageOptions,
) -> Result<Result<signalql::Envelope, signalql::Error>, String> {
    evaluate_with(case, root, options(case, storage)).await
}

/// The case's query on the dataset at `root`, opened with `options`.
async fn evaluate_with(
    case: &Case,
    root: &Path,
    options: EngineOptions,
) -> Result<Result<signalql::Envelope, signalql::Error>, String> {
    let query = case.sections.get("query").ok_or("no --- query section")?;
    Ok(match Engine::open_with(root, options) {
        Ok(engine) => match engine.answer(query).await {
            Ok(signalql::Answer::Envelope(env)) => Ok(*env),
            Ok(_) => return Err("a golden case must give a result envelope or an error".into()),
            Err(e) => Err(e),
        },
        Err(e) => Err(e),
    })
}

fn data_name(case: &Case) -> &str {
    case.header
        .get("data")
        .map(String::as_str)
        .unwrap_or("sample")
}

/// The case over the copy of its dataset on S3 gives what it gives over the local folder: the
/// same envelope (numbers within 1e-9), or an error with the same code and position.
async fn run_case_on_s3(case: &Case, tiny: &Path, s3: &S3Server) -> Result<(), String> {
    let name = data_name(case);
    if case.sections.contains_key("explain") || is_context(case) {
        // EXPLAIN, and CONTEXT FOR's packing plan, over S3 are the local ones.
        let local = plan_view(case, &dataset(name, tiny), StorageOptions::default()).await?;
        let remote = plan_view(
            case,
            Path::new(&format!("s3://{S3_BUCKET}/{name}")),
            s3.storage(),
        )
        .await?;
        return match remote == local {
            true => Ok(()),
            false => Err(format!("plans differ\n local: {local}\n    s3: {remote}")),
        };
    }
    let local = evaluate(case, &dataset(name, tiny), StorageOptions::default()).await?;
    let remote = evaluate(
        case,
        Path::new(&format!("s3://{S3_BUCKET}/{name}")),
        s3.storage(),
    )
    .await?;
    same_answer(local, remote, "s3")
}

/// The case run on the workers gives what it gives in this process over the local folder: the
/// same envelope (numbers within 1e-9), or an error with the same code and position. With
/// `s3`, the coordinator and the workers read the copy of the dataset on S3.
async fn run_case_on_cluster(
    case: &Case,
    tiny: &Path,
    workers: &[String],
    s3: Option<&S3Server>,
) -> Result<(), String> {
    let root = dataset(data_name(case), tiny);
    let (remote_root, storage) = match s3 {
        Some(s3) => (
            std::path::PathBuf::from(format!("s3://{S3_BUCKET}/{}", data_name(case))),
            s3.storage(),
        ),
        None => (root.clone(), StorageOptions::default()),
    };
    if case.sections.contains_key("explain") {
        // EXPLAIN's physical_plan is the distributed plan (docs/cluster.md, "EXPLAIN").
        let local = explain_with(case, &root, options(case, StorageOptions::default())).await?;
        let remote = explain_with(case, &remote_root, options_on(case, storage, workers)).await?;
        let files: u64 = local["sources"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s["files"].as_u64())
            .sum();
        let plan = remote["physical_plan"].as_str().unwrap_or_default();
        let want = files > 0 && !runs_here(case);
        if plan.contains("DistributedExec") != want {
            return Err(format!(
                "EXPLAIN on the workers: distributed {want} expected ({files} files)\n{plan}"
            ));
        }
        return tally(want);
    }
    if is_context(case) {
        // The bundle is the one of one process, and its scans ran on the workers (the packer
        // and the content reads stay here).
        let query = case.sections.get("query").ok_or("no --- query section")?;
        let (local, _) =
            answer_recorded(&root, options(case, StorageOptions::default()), query).await;
        let (remote, runs) =
            answer_recorded(&remote_root, options_on(case, storage, workers), query).await;
        let bundle = |a: Result<signalql::Answer, signalql::Error>| match a {
            Ok(signalql::Answer::Bundle(b)) => Ok(serde_json::to_value(&*b).unwrap()),
            other => Err(format!("not a bundle: {other:?}")),
        };
        let (l, r) = (bundle(local)?, bundle(remote)?);
        if (&l["id"], &l["items"]) != (&r["id"], &r["items"]) {
            return Err(format!("bundles differ\n  local: {l}\ncluster: {r}"));
        }
        let on = runs.iter().any(|r| r.physical.name() == "DistributedExec");
        if on == runs_here(case) {
            return Err(format!(
                "CONTEXT FOR on the workers: {on}, expected {}",
                !on
            ));
        }
        return tally(on);
    }
    let (local, local_runs) = recording(evaluate(case, &root, StorageOptions::default())).await;
    let (mut local, local_runs) = (local?, local_runs.runs);
    let (distributed, remote_runs) = recording(evaluate_with(
        case,
        &remote_root,
        options_on(case, storage, workers),
    ))
    .await;
    let (mut distributed, remote_runs) = (distributed?, remote_runs.runs);
    // What the scans read is known where they ran: on the workers it is null here. The bytes
    // also count Parquet footers, which the coordinator may have read while it planned.
    if let (Ok(l), Ok(d)) = (&mut local, &mut distributed) {
        if d.metadata.cost_estimate.scanned_rows.is_none() {
            l.metadata.cost_estimate.scanned_rows = None;
        }
        l.metadata.cost_estimate.scanned_bytes = None;
        d.metadata.cost_estimate.scanned_bytes = None;
    }
    same_answer(local, distributed, "cluster")?;
    ran_where_documented(case, &local_runs, &remote_runs)
}

/// Trials whose statement ran on the workers, and those that read no file and ran here.
static ON_WORKERS: AtomicUsize = AtomicUsize::new(0);
static HERE: AtomicUsize = AtomicUsize::new(0);

fn tally(on_workers: bool) -> Result<(), String> {
    let count = if on_workers { &ON_WORKERS } else { &HERE };
    count.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

/// A case that docs/cluster.md says runs whole on the coordinator (`cluster: here <why>`).
fn runs_here(case: &Case) -> bool {
    case.header
        .get("cluster")
        .is_some_and(|v| v.starts_with("here"))
}

/// Whether `plan` scans a file; with `above_network`, only in the coordinator's own stage.
fn reads_files(plan: &dyn ExecutionPlan, above_network: bool) -> bool {
    use datafusion::datasource::physical_plan::FileScanConfig;
    use datafusion::datasource::source::DataSourceExec;
    if above_network && plan.name().starts_with("Network") {
        return false;
    }
    plan.downcast_ref::<DataSourceExec>()
        .and_then(|s| s.data_source().downcast_ref::<FileScanConfig>())
        .is_some_and(|c| c.file_groups.iter().any(|g| !g.is_empty()))
        || plan
            .children()
            .iter()
            .any(|c| reads_files(c.as_ref(), above_network))
}

/// docs/cluster.md, "What runs where": every plan that read a file in one process ran on the
/// workers (one distributed plan for each), and none reads a file in the coordinator's own
/// stage; a case marked `cluster: here` ran whole here.
fn ran_where_documented(case: &Case, local: &[Run], remote: &[Run]) -> Result<(), String> {
    let reading = local
        .iter()
        .filter(|r| reads_files(r.physical.as_ref(), false))
        .count();
    let want = if runs_here(case) { 0 } else { reading };
    let distributed: Vec<&Run> = remote
        .iter()
        .filter(|r| r.physical.name() == "DistributedExec")
        .collect();
    let show = |r: &Run| {
        datafusion::physical_plan::displayable(r.physical.as_ref())
            .indent(false)
            .to_string()
    };
    if distributed.len() != want {
        return Err(format!(
            "{} of {} plans ran on the workers, expected {want} ({reading} read files in one process)\n{}",
            distributed.len(),
            remote.len(),
            remote.iter().map(show).collect::<Vec<_>>().join("--\n")
        ));
    }
    if let Some(r) = distributed
        .iter()
        .find(|r| reads_files(r.physical.as_ref(), true))
    {
        return Err(format!(
            "a file scan in the coordinator's stage\n{}",
            show(r)
        ));
    }
    tally(want > 0)
}

/// The answer to `query` over `root`, and the plans it ran.
async fn answer_recorded(
    root: &Path,
    options: EngineOptions,
    query: &str,
) -> (Result<signalql::Answer, signalql::Error>, Vec<Run>) {
    let (answer, recorded) = recording(async {
        let engine = Engine::open_with(root, options)?;
        engine.answer(query).await
    })
    .await;
    (answer, recorded.runs)
}

/// `local` and `remote` (the answer on S3 or on the workers, named `label`) are the same
/// envelope (numbers within 1e-9), or errors with the same code and position.
fn same_answer(
    local: Result<signalql::Envelope, signalql::Error>,
    remote: Result<signalql::Envelope, signalql::Error>,
    label: &str,
) -> Result<(), String> {
    match (local, remote) {
        (Ok(a), Ok(b)) => {
            let (a, b) = (
                serde_json::to_value(&a).unwrap(),
                serde_json::to_value(&b).unwrap(),
            );
            if close(&a, &b) {
                Ok(())
            } else {
                Err(format!("envelopes differ\n local: {a}\n {label:>6}: {b}"))
            }
        }
        (Err(a), Err(b)) => {
            let (a, b) = (a.to_json()["error"].clone(), b.to_json()["error"].clone());
            for k in ["code", "line", "column"] {
                if a.get(k) != b.get(k) {
                    return Err(format!("errors differ\n local: {a}\n {label:>6}: {b}"));
                }
            }
            Ok(())
        }
        (a, b) => Err(format!(
            "one side failed\n local: {:?}\n {label:>6}: {:?}",
            a.map(|e| e.rows.len()),
            b.map(|e| e.rows.len())
        )),
    }
}

/// The statement's logical plan over the dataset at `root` (a folder or `s3://…`), displayed
/// indented (CONTEXT FOR: its packing plan).
async fn plan_text(case: &Case, root: &Path, storage: StorageOptions) -> Result<String, String> {
    let query = case.sections.get("query").ok_or("no --- query section")?;
    let engine = Engine::open_with(root, options(case, storage)).map_err(|e| e.to_string())?;
    let statement = signalql::parse(query).map_err(|e| e.to_string())?;
    let plan = match &statement {
        signalql::ast::Statement::ContextTask(q) => engine.lower_context(q).await,
        _ => engine
            .compile_statement(statement)
            .await
            .map(|c| c.lowered.plan),
    }
    .map_err(|e| format!("lowering failed: {e}"))?;
    Ok(plan.display_indent().to_string())
}

/// The `--- plan` section, if the case has one, is the plan the engine builds now; with
/// `SIGNALQL_BLESS=1` it is rewritten instead.
async fn check_plan(case: &Case, file: &Path, root: &Path) -> Result<(), String> {
    let Some(want) = case.sections.get("plan") else {
        return Ok(());
    };
    let got = plan_text(case, root, StorageOptions::default()).await?;
    matches_or_bless(file, "plan", want, &got)
}

/// The `--- explain` section, if the case has one, is `EXPLAIN query`'s object as the engine
/// answers it now, without its physical plan (which depends on the machine's cores) and its
/// limits; with `SIGNALQL_BLESS=1` it is rewritten instead.
async fn check_explain(case: &Case, file: &Path, root: &Path) -> Result<(), String> {
    let Some(want) = case.sections.get("explain") else {
        return Ok(());
    };
    let got = explain_value(case, root, StorageOptions::default()).await?;
    let got = serde_json::to_string_pretty(&got).map_err(|e| e.to_string())?;
    matches_or_bless(file, "explain", want, &got)
}

/// What a case that is not evaluated shows of its plan: EXPLAIN's object for an `--- explain`
/// case, else the logical plan.
async fn plan_view(case: &Case, root: &Path, storage: StorageOptions) -> Result<String, String> {
    match case.sections.contains_key("explain") {
        true => Ok(explain_value(case, root, storage).await?.to_string()),
        false => plan_text(case, root, storage).await,
    }
}

/// `EXPLAIN query` over `root`, without its physical plan and limits.
async fn explain_value(case: &Case, root: &Path, storage: StorageOptions) -> Result<Value, String> {
    let mut got = explain_with(case, root, options(case, storage)).await?;
    let object = got.as_object_mut().ok_or("not an object")?;
    object.shift_remove("physical_plan");
    object.shift_remove("limits");
    Ok(got)
}

/// The EXPLAIN object of the case's query over `root`, opened with `options`.
async fn explain_with(case: &Case, root: &Path, options: EngineOptions) -> Result<Value, String> {
    let query = case.sections.get("query").ok_or("no --- query section")?;
    let engine = Engine::open_with(root, options).map_err(|e| e.to_string())?;
    let answer = engine
        .answer(&format!("EXPLAIN {query}"))
        .await
        .map_err(|e| format!("EXPLAIN failed: {e}"))?;
    let signalql::Answer::Plan(plan) = answer else {
        return Err("EXPLAIN did not answer a plan".into());
    };
    serde_json::to_value(&*plan).map_err(|e| e.to_string())
}

/// `want` (the section `section` of `file`) is `got`; with `SIGNALQL_BLESS=1` a difference
/// rewrites the section instead.
fn matches_or_bless(file: &Path, section: &str, want: &str, got: &str) -> Result<(), String> {
    if want.trim_end() == got.trim_end() {
        return Ok(());
    }
    if std::env::var_os("SIGNALQL_BLESS").is_some() {
        let text = std::fs::read_to_string(file).map_err(|e| e.to_string())?;
        let head = format!("--- {section}\n");
        let start = text.find(&head).ok_or(format!("no {head:?} line"))? + head.len();
        let end = text[start..]
            .find("\n--- ")
            .map_or(text.len(), |i| start + i + 1);
        let blessed = format!("{}{}\n{}", &text[..start], got.trim_end(), &text[end..]);
        std::fs::write(file, blessed).map_err(|e| e.to_string())?;
        return Ok(());
    }
    Err(format!(
        "{section} differs (SIGNALQL_BLESS=1 rewrites it)\nexpected:\n{}\n     got:\n{}",
        want.trim_end(),
        got.trim_end()
    ))
}

async fn run_case(case: &Case, file: &Path, tiny: &Path) -> Result<(), String> {
    let root = dataset(data_name(case), tiny);
    check_plan(case, file, &root).await?;
    check_explain(case, file, &root).await?;
    if is_context(case) || case.sections.contains_key("explain") {
        return Ok(());
    }
    let result = evaluate(case, &root, StorageOptions::default()).await?;
    if let Some(err) = case.sections.get("error") {
        let want: Value =
            serde_json::from_str(err).map_err(|e| format!("bad --- error JSON: {e}"))?;
        let got = match result {
            Ok(env) => return Err(format!("expected an error, got {} rows", env.rows.len())),
            Err(e) => e.to_json()["error"].clone(),
        };
        for (k, v) in want.as_object().ok_or("--- error must be an object")? {
            if got.get(k) != Some(v) {
                return Err(format!(
                    "error {k}: expected {v}, got {:?}\nfull error: {got}",
                    got.get(k)
                ));
            }
        }
        return Ok(());
    }
    let want: Value = serde_json::from_str(
        case.sections
            .get("expected")
            .ok_or("no --- expected section")?,
    )
    .map_err(|e| format!("bad --- expected JSON: {e}"))?;
    let env = result.map_err(|e| format!("query failed: {e}"))?;
    let names: Vec<Value> = env
        .columns
        .iter()
        .map(|c| Value::String(c.name.clone()))
        .collect();
    if want["columns"] != Value::Array(names.clone()) {
        return Err(format!(
            "columns: expected {}, got {}",
            want["columns"],
            Value::Array(names)
        ));
    }
    let rows = Value::Array(env.rows.iter().map(|r| Value::Array(r.clone())).collect());
    if !close(&want["rows"], &rows) {
        return Err(format!(
            "rows differ\nexpected: {}\n     got: {}",
            want["rows"], rows
        ));
    }
    for flag in ["truncated", "ordered", "row_count"] {
        if let Some(w) = want.get(flag) {
            let got = serde_json::to_value(&env.metadata).unwrap()[flag].clone();
            if *w != got {
                return Err(format!("metadata.{flag}: expected {w}, got {got}"));
            }
        }
    }
    Ok(())
}

/// The trial `name`: `run` on the case of `file`, on a runtime of its own; a failure names
/// the file.
fn trial(
    name: String,
    file: PathBuf,
    run: impl AsyncFnOnce(&Case, &Path) -> Result<(), String> + Send + 'static,
) -> libtest_mimic::Trial {
    libtest_mimic::Trial::test(name, move || {
        let case = parse_case(&file);
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
            .block_on(run(&case, &file))
            .map_err(|msg| format!("{}:\n{msg}", file.display()).into())
    })
}

/// Each case file is its own test (so failures and counts are per case); `cargo test --test
/// golden -- <filter>` runs a subset.
fn main() {
    let args = libtest_mimic::Arguments::from_args();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden");
    let mut files = Vec::new();
    case_files(&root, &mut files);
    files.sort();
    assert!(
        files.len() >= 20,
        "expected the golden corpus, found {} cases",
        files.len()
    );
    let tiny = tempfile::tempdir().unwrap();
    for name in BUILT.iter().chain(FOREIGN).chain([&POLICY]) {
        build(name, tiny.path());
    }
    let tiny_path = tiny.path().to_path_buf();
    // Every case runs twice: on the local folders, and on copies of them in a real
    // S3-compatible server (trials named `s3/…`).
    let s3 = std::sync::Arc::new(S3Server::start());
    s3.create_bucket(S3_BUCKET);
    s3.upload_dir(&signalql::sample_dataset(), S3_BUCKET, "sample");
    for name in BUILT.iter().chain(FOREIGN).chain([&POLICY]) {
        s3.upload_dir(&tiny_path.join(name), S3_BUCKET, name);
    }
    // And on two workers of a cluster, in this process, which read S3 as the engine does:
    // over the local folders (trials named `cluster/…`) and over S3 (`s3-cluster/…`).
    let workers = std::sync::Arc::new(common::cluster::Workers::start_with(2, s3.storage()));
    let mut trials = Vec::new();
    for f in files {
        let name = f
            .strip_prefix(&root)
            .unwrap_or(&f)
            .with_extension("")
            .display()
            .to_string();
        let tiny = tiny_path.clone();
        trials.push(trial(name.clone(), f.clone(), async move |case, file| {
            run_case(case, file, &tiny).await
        }));
        let (tiny, cluster) = (tiny_path.clone(), workers.addresses.clone());
        trials.push(trial(
            format!("cluster/{name}"),
            f.clone(),
            async move |case, _| run_case_on_cluster(case, &tiny, &cluster, None).await,
        ));
        let (tiny, cluster, on_s3) = (
            tiny_path.clone(),
            workers.addresses.clone(),
            std::sync::Arc::clone(&s3),
        );
        trials.push(trial(
            format!("s3-cluster/{name}"),
            f.clone(),
            async move |case, _| run_case_on_cluster(case, &tiny, &cluster, Some(&on_s3)).await,
        ));
        let (tiny, s3) = (tiny_path.clone(), std::sync::Arc::clone(&s3));
        trials.push(trial(format!("s3/{name}"), f, async move |case, _| {
            run_case_on_s3(case, &tiny, &s3).await
        }));
    }
    let conclusion = libtest_mimic::run(&args, trials);
    eprintln!(
        "cluster trials: {} ran on the workers, {} read no file and ran here",
        ON_WORKERS.load(Ordering::Relaxed),
        HERE.load(Ordering::Relaxed)
    );
    drop(workers);
    drop(s3);
    drop(tiny);
    conclusion.exit();
}
