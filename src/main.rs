//! The `signalql` command line: query, bench, context, fmt, compile, ingest, describe, watch,
//! mcp and gen.
//!
//! Exit status: 0 on success, 1 on any error (printed as `{"error": {...}}` on stdout with
//! `--format json`, as text on stderr otherwise), 2 on a usage error (from clap).

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use chrono::{DateTime, Utc};
use clap::{Parser, Subcommand, ValueEnum};
use signalql::catalog::{Root, StorageOptions};
use signalql::{Answer, Engine, EngineOptions, Error, render};

#[derive(Parser)]
#[command(
    name = "signalql",
    version,
    about = "SignalQL over Parquet on Apache DataFusion"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// The S3 endpoint for `--data s3://bucket/prefix` (an S3-compatible server); overrides
    /// AWS_ENDPOINT_URL. Credentials and region come from the AWS environment variables.
    #[arg(long, global = true, value_name = "URL")]
    s3_endpoint: Option<String>,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Format {
    Table,
    /// The result envelope (also `--format envelope`).
    #[value(alias = "envelope")]
    Json,
    Csv,
    /// The result rows as a Parquet file (`--out FILE`).
    Parquet,
}

#[derive(Subcommand)]
enum Command {
    /// Run a query and print its result.
    Query {
        /// Dataset root (defaults to the bundled sample dataset).
        #[arg(long)]
        data: Option<PathBuf>,
        #[arg(long, value_enum, default_value = "table")]
        format: Format,
        /// Evaluation time T for queries without AS OF (RFC 3339).
        #[arg(long)]
        now: Option<String>,
        /// Where `--format parquet` writes the rows.
        #[arg(long)]
        out: Option<PathBuf>,
        /// Also draw a bucketed result as an SVG line chart (one line per group).
        #[arg(long)]
        plot: Option<PathBuf>,
        /// The query text, or `-` to read it from stdin.
        query: String,
    },
    /// Time a query in this process: WARMUP uncounted runs, then RUNS counted ones (each
    /// parses, opens the tables, plans, executes and builds the answer). Prints one JSON
    /// object: times_s (each counted run, seconds), median_s, rows and row_count of the last run.
    Bench {
        #[arg(long)]
        data: Option<PathBuf>,
        /// Evaluation time T for queries without AS OF (RFC 3339).
        #[arg(long)]
        now: Option<String>,
        /// Counted runs.
        #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=10_000))]
        runs: u32,
        /// Uncounted runs first.
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(0..=10_000))]
        warmup: u32,
        /// The query text, or `-` to read it from stdin.
        query: String,
    },
    /// Build the context bundle for a task (`CONTEXT FOR "TASK"`) and print it as JSON, or
    /// with --render as the prompt text an agent pastes.
    Context {
        #[arg(long)]
        data: Option<PathBuf>,
        /// Token budget (BUDGET n TOKENS).
        #[arg(long)]
        budget: Option<u64>,
        /// Project (USING PROJECT).
        #[arg(long)]
        project: Option<String>,
        /// Print the prompt text instead of the JSON bundle.
        #[arg(long)]
        render: bool,
        /// Shrink items that do not fit to their task-relevant sentences (COMPRESS).
        #[arg(long)]
        compress: bool,
        /// Evaluation time T (RFC 3339) when the bundle has no AS OF.
        #[arg(long)]
        now: Option<String>,
        task: String,
    },
    /// Print the canonical text of a query.
    Fmt {
        /// The query text, or `-` to read it from stdin.
        query: String,
    },
    /// Print a query's AST (JSON), its DataFusion logical plan and the equivalent SQL.
    Compile {
        #[arg(long)]
        data: Option<PathBuf>,
        #[arg(long)]
        now: Option<String>,
        query: String,
    },
    /// Load data into a dataset.
    Ingest {
        #[command(subcommand)]
        what: IngestWhat,
    },
    /// Print the dataset's catalog records (DESCRIBE): TARGET is events, entities, signals,
    /// metrics, relationships or entity(TYPE); without it, every record the dataset has.
    Describe {
        #[arg(long)]
        data: Option<PathBuf>,
        #[arg(long, value_enum, default_value = "json")]
        format: Format,
        /// Evaluation time T (RFC 3339): entities and signals as of T.
        #[arg(long)]
        now: Option<String>,
        target: Option<String>,
    },
    /// Re-evaluate `WATCH (query) WHEN condition` every interval and print one JSON line per
    /// alert (when the condition becomes true); stops on Ctrl-C or after --max-polls.
    Watch {
        #[arg(long)]
        data: Option<PathBuf>,
        /// Seconds between polls.
        #[arg(long, default_value_t = 60.0)]
        interval: f64,
        /// Stop after this many polls.
        #[arg(long)]
        max_polls: Option<u64>,
        /// Evaluation time T (RFC 3339) for queries without AS OF.
        #[arg(long)]
        now: Option<String>,
        /// The WATCH statement, or `-` to read it from stdin.
        query: String,
    },
    /// Serve the dataset to an AI agent over MCP (stdio): tools query, describe, context,
    /// explain_context and format.
    Mcp {
        #[arg(long)]
        data: Option<PathBuf>,
        /// Evaluation time T (RFC 3339) for queries without AS OF.
        #[arg(long)]
        now: Option<String>,
    },
    /// Generate deterministic synthetic data.
    Gen {
        #[command(subcommand)]
        what: GenWhat,
    },
}

#[derive(Subcommand)]
enum IngestWhat {
    /// JSONL or CSV event files into Parquet under ROOT/events/.
    Events {
        #[arg(required = true)]
        files: Vec<PathBuf>,
        #[arg(long)]
        data: PathBuf,
    },
    /// Files and folders (Markdown, text, code, JSON, JSONL messages) into the object tables
    /// under ROOT (objects, revisions, representations, links); see docs/objects.md.
    Objects {
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        #[arg(long)]
        data: PathBuf,
        /// Project label of the objects.
        #[arg(long)]
        project: Option<String>,
        /// Trust of the new revisions: untrusted, unknown, inferred, verified, authoritative.
        #[arg(long, default_value = "unknown")]
        trust: String,
        /// Origin of the new revisions: human, model, external, system, import, unknown.
        #[arg(long, default_value = "import")]
        origin: String,
        /// Role of the new revisions (repeatable; default data): data, instruction, prompt,
        /// policy, executable, secret, untrusted_external.
        #[arg(long = "role")]
        roles: Vec<String>,
        /// Do not give files that look like secrets (.env, private keys, credentials) the
        /// secret role.
        #[arg(long)]
        no_secret_detection: bool,
        /// The ingest time (RFC 3339), for reproducible stores; default now.
        #[arg(long)]
        now: Option<String>,
    },
}

#[derive(Subcommand)]
enum GenWhat {
    /// A synthetic object store (objects, revisions, representations, links, derivations)
    /// under OUT/: N objects with ~400-word bodies.
    Objects {
        #[arg(long)]
        objects: u64,
        #[arg(long, default_value_t = 1)]
        seed: u64,
        #[arg(long)]
        out: PathBuf,
    },
    /// A synthetic events table of any size under OUT/events/.
    Events {
        #[arg(long)]
        rows: u64,
        #[arg(long, default_value_t = 1)]
        seed: u64,
        #[arg(long)]
        out: PathBuf,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let json_errors = matches!(
        &cli.command,
        Command::Query {
            format: Format::Json,
            ..
        } | Command::Bench { .. }
    );
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            if json_errors {
                println!("{}", e.to_json());
            } else {
                eprintln!("error: {e}");
            }
            ExitCode::from(1)
        }
    }
}

/// Write `batches` to `path` as Parquet: into a temporary file beside it, then renamed over
/// it, so `path` is never half-written.
fn write_parquet(
    path: &std::path::Path,
    batches: &[datafusion::arrow::record_batch::RecordBatch],
) -> Result<(), Error> {
    let Some(first) = batches.first() else {
        return Err(Error::type_error("the query returned no rows to write"));
    };
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let io = |e: &dyn std::fmt::Display| Error::io(format!("{}: {e}", path.display()));
    let tmp = tempfile::NamedTempFile::new_in(&dir).map_err(|e| io(&e))?;
    let file = tmp.reopen().map_err(|e| io(&e))?;
    let mut w = datafusion::parquet::arrow::ArrowWriter::try_new(
        file,
        first.schema(),
        Some(signalql::catalog::write::writer_properties()),
    )
    .map_err(|e| io(&e))?;
    for b in batches {
        w.write(b).map_err(|e| io(&e))?;
    }
    w.close().map_err(|e| io(&e))?;
    tmp.persist(path).map_err(|e| io(&e))?;
    Ok(())
}

/// `--plot FILE.svg`: the series of a bucketed retrieve query, one line per group.
fn write_plot(path: &std::path::Path, text: &str, env: &signalql::Envelope) -> Result<(), Error> {
    use signalql::ast::{ReturnItem, Statement};
    let not_bucketed =
        || Error::type_error("--plot draws a bucketed series: the query needs BUCKET BY");
    let Statement::Retrieve(q) = signalql::parse(text)? else {
        return Err(not_bucketed());
    };
    if q.bucket.is_none() {
        return Err(not_bucketed());
    }
    let time_name = q.time_column.clone().unwrap_or_else(|| "timestamp".into());
    let time = env
        .columns
        .iter()
        .position(|c| c.name == time_name)
        .ok_or_else(|| Error::type_error(format!("--plot needs `{time_name}` in RETURN")))?;
    let mut groups = Vec::new();
    let mut measure = None;
    for (i, (item, col)) in q.returns.iter().zip(&env.columns).enumerate() {
        match item {
            ReturnItem::Field(_) if i != time => groups.push(i),
            ReturnItem::Count | ReturnItem::Aggregate(_)
                if measure.is_none() && matches!(col.data_type.as_str(), "integer" | "number") =>
            {
                measure = Some(i)
            }
            _ => {}
        }
    }
    let measure =
        measure.ok_or_else(|| Error::type_error("--plot needs a numeric aggregate in RETURN"))?;
    let series = signalql::plot::series(env, time, &groups, measure);
    let svg = signalql::plot::svg(
        &series,
        &q.to_string().replace('\n', " "),
        &env.columns[measure].name,
    )
    .map_err(Error::io)?;
    let tmp_dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(std::path::Path::new("."));
    let io = |e: &dyn std::fmt::Display| Error::io(format!("{}: {e}", path.display()));
    let mut tmp = tempfile::NamedTempFile::new_in(tmp_dir).map_err(|e| io(&e))?;
    tmp.write_all(svg.as_bytes()).map_err(|e| io(&e))?;
    tmp.persist(path).map_err(|e| io(&e))?;
    Ok(())
}

fn write_envelope(envelope: &signalql::Envelope, format: Format) -> Result<(), Error> {
    let out = match format {
        Format::Json => {
            let mut s = serde_json::to_string_pretty(envelope)
                .map_err(|e| Error::internal(e.to_string()))?;
            s.push('\n');
            s
        }
        Format::Csv => render::csv(envelope),
        Format::Table => render::table(envelope),
        Format::Parquet => {
            return Err(Error::type_error(
                "--format parquet is for analytics queries with --out FILE",
            ));
        }
    };
    write_out(&out)
}

/// The `watch` loop: a poll, then a sleep that Ctrl-C ends, until --max-polls. The first poll
/// failing is an error (the statement is wrong); later failures are reported on stderr and the
/// loop goes on.
fn watch(engine: &Engine, text: &str, interval: f64, max_polls: Option<u64>) -> Result<(), Error> {
    let statement = signalql::parse(text)?;
    let signalql::ast::Statement::Watch(w) = statement else {
        return Err(Error::type_error(
            "signalql watch runs a WATCH (query) WHEN condition statement",
        ));
    };
    if !interval.is_finite() || interval < 0.0 {
        return Err(Error::type_error(
            "--interval must be a non-negative number of seconds",
        ));
    }
    let pause = std::time::Duration::from_secs_f64(interval);
    let rt = runtime()?;
    let mut watcher = signalql::watch::Watcher::new(w);
    rt.block_on(async {
        let mut interrupt = Interrupt::new()?;
        loop {
            match watcher.poll(engine).await {
                Ok(p) => {
                    eprintln!(
                        "poll {}: {}",
                        p.poll,
                        if p.holds { "true" } else { "false" }
                    );
                    if let Some(alert) = p.alert {
                        let line = serde_json::to_string(&serde_json::json!({ "alert": alert }))
                            .map_err(|e| Error::internal(e.to_string()))?;
                        write_out(&format!("{line}\n"))?;
                    }
                }
                Err(e) if watcher.polls() == 0 => return Err(e),
                Err(e) => eprintln!("poll failed: {e}"),
            }
            if max_polls.is_some_and(|m| watcher.polls() >= m) {
                return Ok(());
            }
            tokio::select! {
                _ = tokio::time::sleep(pause) => {}
                _ = interrupt.recv() => return Ok(()),
            }
        }
    })
}

/// Ctrl-C, listened for from creation on (so a SIGINT during the first poll is not lost).
struct Interrupt {
    #[cfg(unix)]
    signal: tokio::signal::unix::Signal,
}

impl Interrupt {
    fn new() -> Result<Self, Error> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            let signal = signal(SignalKind::interrupt())
                .map_err(|e| Error::io(format!("cannot listen for Ctrl-C: {e}")))?;
            Ok(Interrupt { signal })
        }
        #[cfg(not(unix))]
        Ok(Interrupt {})
    }

    async fn recv(&mut self) {
        #[cfg(unix)]
        self.signal.recv().await;
        #[cfg(not(unix))]
        let _ = tokio::signal::ctrl_c().await;
    }
}

fn read_query(q: String) -> Result<String, Error> {
    if q != "-" {
        return Ok(q);
    }
    let mut s = String::new();
    std::io::stdin()
        .read_to_string(&mut s)
        .map_err(|e| Error::io(format!("cannot read the query from stdin: {e}")))?;
    Ok(s)
}

fn parse_now(now: Option<String>) -> Result<Option<DateTime<Utc>>, Error> {
    now.map(|s| {
        DateTime::parse_from_rfc3339(&s)
            .map(|t| t.with_timezone(&Utc))
            .map_err(|e| Error::io(format!("--now {s:?} is not an RFC 3339 instant: {e}")))
    })
    .transpose()
}

fn open(
    data: Option<PathBuf>,
    now: Option<String>,
    storage: &StorageOptions,
) -> Result<Engine, Error> {
    let root = data.unwrap_or_else(signalql::sample_dataset);
    Engine::open_with(
        root,
        EngineOptions {
            now: parse_now(now)?,
            storage: storage.clone(),
            ..Default::default()
        },
    )
}

/// The dataset root an ingest writes to: a local folder or an S3 prefix.
fn ingest_root(data: &std::path::Path, storage: &StorageOptions) -> Result<Root, Error> {
    Root::parse(&data.to_string_lossy(), storage).map_err(|e| Error::io(e.to_string()))
}

fn runtime() -> Result<tokio::runtime::Runtime, Error> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::internal(format!("cannot start the runtime: {e}")))
}

fn write_json(v: &impl serde::Serialize) -> Result<(), Error> {
    let mut s = serde_json::to_string_pretty(v).map_err(|e| Error::internal(e.to_string()))?;
    s.push('\n');
    write_out(&s)
}

/// `signalql bench`: the query answered `warmup + runs` times on one engine, the counted runs
/// timed one by one. The rows are the envelope's (a bundle's items, for CONTEXT FOR).
fn bench(engine: &Engine, text: &str, warmup: u32, runs: u32) -> Result<serde_json::Value, Error> {
    let rt = runtime()?;
    let mut times = Vec::with_capacity(runs as usize);
    let mut last = None;
    for i in 0..warmup + runs {
        let start = std::time::Instant::now();
        let answer = rt.block_on(engine.answer(text))?;
        let took = start.elapsed().as_secs_f64();
        if i >= warmup {
            times.push(took);
        }
        last = Some(answer);
    }
    let (columns, rows) = match last {
        Some(Answer::Envelope(e)) => (
            serde_json::to_value(&e.columns).map_err(|e| Error::internal(e.to_string()))?,
            e.rows
                .into_iter()
                .map(serde_json::Value::Array)
                .collect::<Vec<_>>(),
        ),
        Some(Answer::Bundle(b)) => (
            serde_json::Value::Null,
            b.items
                .iter()
                .map(|i| serde_json::to_value(i).map_err(|e| Error::internal(e.to_string())))
                .collect::<Result<_, _>>()?,
        ),
        Some(Answer::Explanation(x)) => (
            serde_json::Value::Null,
            vec![serde_json::to_value(&*x).map_err(|e| Error::internal(e.to_string()))?],
        ),
        None => (serde_json::Value::Null, Vec::new()),
    };
    let mut sorted = times.clone();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    let median = if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
    };
    Ok(serde_json::json!({
        "query": text,
        "warmup": warmup,
        "runs": runs,
        "times_s": times,
        "median_s": median,
        "row_count": rows.len(),
        "columns": columns,
        "rows": rows,
    }))
}

fn write_out(text: &str) -> Result<(), Error> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
        // A closed pipe (`signalql query … | head`) is not an error of ours.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other.map_err(|e| Error::io(e.to_string())),
    }
}

fn run(cli: Cli) -> Result<(), Error> {
    let storage = StorageOptions {
        s3_endpoint: cli.s3_endpoint,
        ..Default::default()
    };
    match cli.command {
        Command::Query {
            data,
            format,
            now,
            out,
            plot,
            query,
        } => {
            let text = read_query(query)?;
            let engine = open(data, now, &storage)?;
            let rt = runtime()?;
            if format == Format::Parquet {
                let Some(out) = out else {
                    return Err(Error::type_error(
                        "--format parquet writes a file: add --out FILE",
                    ));
                };
                let (envelope, batches) = rt.block_on(engine.query_batches(&text))?;
                write_parquet(&out, &batches)?;
                if let Some(p) = plot {
                    write_plot(&p, &text, &envelope)?;
                }
                return write_out(&format!(
                    "wrote {} row(s) to {}\n",
                    envelope.rows.len(),
                    out.display()
                ));
            }
            let envelope = match rt.block_on(engine.answer(&text))? {
                Answer::Envelope(e) => *e,
                Answer::Bundle(b) => return write_json(&*b),
                Answer::Explanation(x) => return write_json(&*x),
            };
            if let Some(p) = plot {
                write_plot(&p, &text, &envelope)?;
            }
            write_envelope(&envelope, format)
        }
        Command::Bench {
            data,
            now,
            runs,
            warmup,
            query,
        } => {
            let text = read_query(query)?;
            let engine = open(data, now, &storage)?;
            write_json(&bench(&engine, &text, warmup, runs)?)
        }
        Command::Describe {
            data,
            format,
            now,
            target,
        } => {
            let engine = open(data, now, &storage)?;
            let rt = runtime()?;
            let envelope = match target {
                Some(t) => rt.block_on(engine.query(&format!("DESCRIBE {t}")))?,
                None => rt.block_on(engine.describe_all())?,
            };
            write_envelope(&envelope, format)
        }
        Command::Mcp { data, now } => {
            let engine = open(data, now, &storage)?;
            runtime()?.block_on(signalql::mcp::serve_stdio(engine))
        }
        Command::Watch {
            data,
            interval,
            max_polls,
            now,
            query,
        } => {
            let text = read_query(query)?;
            let engine = open(data, now, &storage)?;
            watch(&engine, &text, interval, max_polls)
        }
        Command::Context {
            data,
            budget,
            project,
            render,
            compress,
            now,
            task,
        } => {
            let mut q = signalql::ast::ContextQuery::for_task(task, Default::default());
            q.project = project;
            q.budget = budget;
            q.compress = compress;
            // The canonical text round-trips, so the bundle is the one the query text gives.
            if let signalql::ast::Statement::ContextTask(parsed) = signalql::parse(&q.to_string())?
            {
                q = parsed;
            }
            let engine = open(data, now, &storage)?;
            let bundle = runtime()?.block_on(engine.context(&q))?;
            if render {
                write_out(&signalql::render_bundle(&bundle))
            } else {
                write_json(&bundle)
            }
        }
        Command::Fmt { query } => {
            let text = read_query(query)?;
            let stmt = signalql::parse(&text)?;
            write_out(&format!("{stmt}\n"))
        }
        Command::Compile { data, now, query } => {
            let text = read_query(query)?;
            let engine = open(data, now, &storage)?;
            let rt = runtime()?;
            let compiled = rt.block_on(engine.compile(&text))?;
            let physical = rt.block_on(engine.physical_plan_text(&compiled))?;
            let ast = serde_json::to_string_pretty(&compiled.statement)
                .map_err(|e| Error::internal(e.to_string()))?;
            let sql = match &compiled.sql {
                Ok(s) => s.clone(),
                Err(e) => format!("-- the unparser cannot express this plan: {e}"),
            };
            write_out(&format!(
                "-- AST\n{ast}\n\n-- logical plan\n{}\n\n-- physical plan\n{physical}\n-- SQL\n{sql}\n",
                compiled.lowered.plan.display_indent()
            ))
        }
        Command::Ingest {
            what: IngestWhat::Events { files, data },
        } => {
            let summary =
                signalql::catalog::ingest::ingest_events(ingest_root(&data, &storage)?, &files)
                    .map_err(|e| Error::io(e.to_string()))?;
            write_out(&format!(
                "ingested {} events from {} file(s) into {}\n",
                summary.rows,
                summary.files_read,
                summary.written.display()
            ))
        }
        Command::Ingest {
            what:
                IngestWhat::Objects {
                    paths,
                    data,
                    project,
                    trust,
                    origin,
                    roles,
                    no_secret_detection,
                    now,
                },
        } => {
            use signalql::catalog::objects::ingest::{ObjectIngestOptions, ingest_objects};
            let opts = ObjectIngestOptions {
                project,
                trust,
                origin,
                roles: if roles.is_empty() {
                    vec!["data".into()]
                } else {
                    roles
                },
                detect_secrets: !no_secret_detection,
                now: parse_now(now)?.unwrap_or_else(chrono::Utc::now),
            };
            let s = ingest_objects(ingest_root(&data, &storage)?, &paths, &opts)
                .map_err(|e| Error::io(e.to_string()))?;
            let mut out = format!(
                "{} file(s): {} new, {} revised, {} unchanged, {} restored, {} tombstoned, {} secret; {} Parquet file(s) written under {}\n",
                s.files_seen,
                s.added,
                s.revised,
                s.unchanged,
                s.restored,
                s.tombstoned,
                s.secrets,
                s.written.len(),
                data.display()
            );
            for (path, why) in &s.skipped {
                out.push_str(&format!("skipped {}: {why}\n", path.display()));
            }
            write_out(&out)
        }
        Command::Gen {
            what: GenWhat::Objects { objects, seed, out },
        } => {
            use signalql::catalog::objects::generator::{ObjectGenOptions, generate_objects};
            let opts = ObjectGenOptions {
                seed,
                ..ObjectGenOptions::new(&out, objects)
            };
            let s = generate_objects(&opts).map_err(|e| Error::io(e.to_string()))?;
            write_out(&format!(
                "wrote {} objects ({} representations, {} links, {} derivations) under {}\n",
                s.objects,
                s.representations,
                s.links,
                s.derivations,
                out.display()
            ))
        }
        Command::Gen {
            what: GenWhat::Events { rows, seed, out },
        } => {
            let bar = indicatif::ProgressBar::new(rows);
            bar.set_style(
                indicatif::ProgressStyle::with_template(
                    "{spinner} {bar:40} {pos}/{len} rows ({per_sec}, eta {eta})",
                )
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
            );
            let opts = signalql::catalog::generator::GenOptions {
                rows,
                seed,
                ..signalql::catalog::generator::GenOptions::new(&out)
            };
            let summary = signalql::catalog::generator::generate_events(&opts, Some(&bar))
                .map_err(|e| Error::io(e.to_string()))?;
            bar.finish_and_clear();
            write_out(&format!(
                "wrote {} events in {} file(s) under {}\n",
                summary.rows,
                summary.files,
                out.join("events").display()
            ))
        }
    }
}
