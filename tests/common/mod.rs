//! Helpers shared by integration tests (each test binary uses some of them).
#![allow(dead_code)]

pub mod cluster;
pub mod s3;

use std::path::Path;
use std::process::Command;

/// Makes sure python3 can import `module`, installing `spec` with pip (from the package
/// registry) once when it cannot, so `cargo test` sets up the Python test services it needs on
/// a fresh machine.
pub fn python_package(module: &str, spec: &str) {
    let mut check = Command::new("python3");
    check.args(["-c", &format!("import {module}")]);
    let mut pip = Command::new("python3");
    pip.args([
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
        spec,
    ]);
    installed(
        check,
        pip,
        &format!("python3 cannot import {module} and `pip install {spec}`"),
    );
}

/// Makes sure the program `program` of Debian's package `package` is installed: when it is
/// missing, installs it with apt-get (the machine's registries include Debian's packages; as
/// python_package does with pip on a fresh machine).
pub fn debian_package(program: &str, package: &str) {
    let mut check = Command::new(program);
    check.arg("-V");
    let mut apt = Command::new("sh");
    apt.args([
        "-c",
        &format!(
            "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq {package}"
        ),
    ]);
    installed(
        check,
        apt,
        &format!("{program} is missing and `apt-get install {package}`"),
    );
}

/// Runs `check`; when it fails, runs `install` and asserts that `check` then succeeds (`what`
/// says what was missing and how it was installed). Serialised: concurrent tests would race
/// the installers.
fn installed(mut check: Command, mut install: Command, what: &str) {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let mut passes = || check.output().is_ok_and(|o| o.status.success());
    if passes() {
        return;
    }
    let outcome = install.output();
    assert!(passes(), "{what} did not help: {outcome:?}");
}

/// The `signalql` binary run with `args` and `input` on its standard input (closed after
/// it), its output collected.
pub fn signalql_with_stdin(args: &[&str], input: &str) -> std::process::Output {
    use std::io::Write;
    use std::process::Stdio;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_signalql"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

/// The runtime the integration tests block on: two workers, as the machine has two cores.
pub fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// A dataset that links the sample's events and fixes T at 2026-06-13T00:00:00Z, to which a
/// test adds its own files.
pub fn sample_events_dataset() -> tempfile::TempDir {
    let root = tempfile::tempdir().unwrap();
    let events = std::fs::canonicalize(signalql::sample_dataset().join("events")).unwrap();
    std::os::unix::fs::symlink(events, root.path().join("events")).unwrap();
    std::fs::write(
        root.path().join("signalql.toml"),
        "now = \"2026-06-13T00:00:00Z\"\n",
    )
    .unwrap();
    root
}

/// Write `files` (name, text) to a temporary folder and ingest them as objects into `root`,
/// at 2026-01-01T00:00:00Z.
pub fn ingest_docs(root: &std::path::Path, files: &[(&str, &str)]) {
    let docs = tempfile::tempdir().unwrap();
    for (name, text) in files {
        std::fs::write(docs.path().join(name), text).unwrap();
    }
    let options = signalql::catalog::objects::ingest::ObjectIngestOptions {
        now: chrono::DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
            .unwrap()
            .with_timezone(&chrono::Utc),
        ..Default::default()
    };
    signalql::catalog::objects::ingest::ingest_objects(
        root,
        &[docs.path().to_path_buf()],
        &options,
    )
    .unwrap();
}

/// A table of the tiny dataset read from JSONL with a fixed schema and written as Parquet.
fn write_table(
    jsonl: &Path,
    root: &Path,
    table: &str,
    schema: datafusion::arrow::datatypes::SchemaRef,
) {
    let file = std::io::BufReader::new(std::fs::File::open(jsonl).unwrap());
    let reader = datafusion::arrow::json::ReaderBuilder::new(schema.clone())
        .build(file)
        .unwrap();
    let batches: Vec<_> = reader.collect::<Result<_, _>>().unwrap();
    signalql::catalog::write::write_parquet_atomic(&root.join(table), table, schema, &batches)
        .unwrap();
}

/// The tiny dataset's `users` (for v0.1 `traits.K`) and `signals` tables, from
/// `src/users.jsonl` and `src/signals.jsonl` (golden's `tiny` data and the query fuzz).
pub fn write_tiny_side_tables(src: &Path, root: &Path) {
    use datafusion::arrow::datatypes::{DataType, Field, Fields, Schema};
    use std::sync::Arc;
    let traits = Fields::from(vec![
        Field::new("company", DataType::Utf8, true),
        Field::new("plan", DataType::Utf8, true),
    ]);
    let users = Arc::new(Schema::new(vec![
        Field::new("user_id", DataType::Utf8, false),
        Field::new("traits", DataType::Struct(traits), true),
    ]));
    write_table(&src.join("users.jsonl"), root, "users", users);
    write_table(
        &src.join("signals.jsonl"),
        root,
        "signals",
        signalql::catalog::generator::signals_schema(),
    );
}

/// Copies the folder `from` and everything under it to `to`.
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), &target).unwrap();
        }
    }
}

/// A Parquet file of `columns` (each a name and an array, all nullable) at `path`, written by
/// the Parquet writer with `properties` (row-group sizes, say).
pub fn write_parquet(
    path: &Path,
    columns: Vec<(&str, datafusion::arrow::array::ArrayRef)>,
    properties: Option<datafusion::parquet::file::properties::WriterProperties>,
) {
    use datafusion::arrow::array::RecordBatch;
    use datafusion::arrow::datatypes::{Field, Schema};
    use std::sync::Arc;
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let schema = Arc::new(Schema::new(
        columns
            .iter()
            .map(|(n, a)| Field::new(*n, a.data_type().clone(), true))
            .collect::<Vec<_>>(),
    ));
    let batch = RecordBatch::try_new(
        Arc::clone(&schema),
        columns.into_iter().map(|(_, a)| a).collect(),
    )
    .unwrap();
    let file = std::fs::File::create(path).unwrap();
    let mut w = datafusion::parquet::arrow::ArrowWriter::try_new(file, schema, properties).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
}

/// The tools `signalql mcp` and `signalql serve`'s `/mcp` list, sorted.
pub const MCP_TOOLS: [&str; 9] = [
    "context",
    "describe",
    "explain",
    "explain_context",
    "format",
    "query",
    "simulate",
    "stats",
    "watch",
];

/// Rows of `q` run by plain DataFusion SQL (not the engine, not the catalog's reader) over the
/// table folders `tables` of `root` that exist, each value as text.
pub async fn folder_sql(root: &Path, tables: &[&str], q: &str) -> Vec<Vec<String>> {
    let ctx = datafusion::prelude::SessionContext::new();
    for t in tables {
        let dir = root.join(t);
        if dir.is_dir() {
            ctx.register_parquet(*t, dir.to_str().unwrap(), Default::default())
                .await
                .unwrap();
        }
    }
    let batches = ctx.sql(q).await.unwrap().collect().await.unwrap();
    let mut out = Vec::new();
    for b in batches {
        for r in 0..b.num_rows() {
            out.push(
                b.columns()
                    .iter()
                    .map(|c| datafusion::arrow::util::display::array_value_to_string(c, r).unwrap())
                    .collect(),
            );
        }
    }
    out
}

/// What `child` (a server started with its stdout piped) says after `prefix` on its first line
/// of output: where it listens.
pub fn announced(child: &mut std::process::Child, prefix: &str) -> String {
    use std::io::BufRead;
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().expect("its stdout piped"))
        .read_line(&mut line)
        .unwrap();
    line.trim()
        .strip_prefix(prefix)
        .unwrap_or_else(|| panic!("no {prefix:?} in its first line {line:?}"))
        .to_string()
}

/// Two JSON answers alike: the same structure, strings and booleans, and numbers equal within
/// a relative 1e-9 (a float sum or mean taken in another order, as a query split over other
/// partitions or workers takes it).
pub fn json_close(a: &serde_json::Value, b: &serde_json::Value) -> bool {
    use serde_json::Value;
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_f64(), y.as_f64()) {
            (Some(x), Some(y)) => {
                x == y || (x - y).abs() <= 1e-9 * x.abs().max(y.abs()).max(1e-300)
            }
            _ => x == y,
        },
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| json_close(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| json_close(v, w)))
        }
        _ => a == b,
    }
}

/// A `roles` column (a list of strings per row), as the object tables have it.
pub fn roles(v: &[Vec<&str>]) -> datafusion::arrow::array::ArrayRef {
    use datafusion::arrow::array::{ListBuilder, StringBuilder};
    let mut b = ListBuilder::new(StringBuilder::new());
    for r in v {
        for x in r {
            b.values().append_value(x);
        }
        b.append(true);
    }
    std::sync::Arc::new(b.finish())
}
