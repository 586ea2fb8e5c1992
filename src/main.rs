//! The `signalql` command line: query, bench, context, fmt, compile, explain, simulate, stats,
//! ingest, describe, watch, mcp, serve and gen; without a command, the shell (docs/shell.md).
//!
//! Exit status: 0 on success, 1 on any error (printed as `{"error": {...}}` on stdout with
//! `--format json`, as text on stderr otherwise), 2 on a usage error (from clap).

use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use clap::{Parser, Subcommand, ValueEnum};
use signalql::bench::bench;
use signalql::catalog::{Root, StorageOptions};
use signalql::parquet_out::write_parquet;
use signalql::plot::write_plot;
use signalql::request::{ContextRequest, DescribeRequest};
use signalql::stdout::{write as write_out, write_json};
use signalql::watch_loop::watch;
use signalql::{Answer, Engine, EngineOptions, Error, Params, render, runtime};

#[derive(Parser)]
#[command(
    name = "signalql",
    version,
    about = "SignalQL over Parquet on Apache DataFusion"
)]
struct Cli {
    /// Without a command: the interactive shell (docs/shell.md), or a script of statements
    /// read from standard input when it is not a terminal.
    #[command(subcommand)]
    command: Option<Command>,
    /// The shell's dataset root (defaults to the bundled sample dataset).
    #[arg(long)]
    data: Option<PathBuf>,
    /// The shell's evaluation time for statements without AS OF (RFC 3339); `\now` changes it.
    #[arg(long)]
    now: Option<String>,
    /// How an error is printed: `text` on stderr, or `json`, the `{"error": {...}}` object on
    /// stdout (with `code`, `message`, and `line`/`column` in the query or `file`/`line` of an
    /// input file). `query --format json` and `bench` always print JSON errors.
    #[arg(long, global = true, value_enum, default_value = "text")]
    error_format: ErrorFormat,
    /// The S3 endpoint for `--data s3://bucket/prefix` (an S3-compatible server); overrides
    /// AWS_ENDPOINT_URL. Credentials and region come from the AWS environment variables.
    #[arg(long, global = true, value_name = "URL")]
    s3_endpoint: Option<String>,
    /// The principal of the dataset's policy.toml the command reads as (docs/policy.md);
    /// without it, the policy's `default` principal. Ignored by datasets without a policy.
    #[arg(long, global = true, value_name = "NAME")]
    principal: Option<String>,
    /// A value for the statement's `$name` parameter (docs/params.md), repeatable:
    /// `--param event=page_view --param days=7`. A JSON number, `true`, `false` or a JSON
    /// string (`'"7"'`) is that value; any other text is a string. Read by query, bench,
    /// context (its clauses), explain, simulate, fmt and compile.
    #[arg(long = "param", global = true, value_name = "NAME=VALUE")]
    params: Vec<String>,
    /// Write a JSON trace of every statement run to ROOT/traces/ (or `[trace] folder`);
    /// `[trace] enabled = true` in signalql.toml does the same (docs/runtime.md).
    #[arg(long, global = true)]
    trace: bool,
    /// Run statements on these workers (`signalql worker`), comma-separated `host:port`;
    /// without it, `[cluster] workers` of signalql.toml, else this process (docs/cluster.md).
    #[arg(long, global = true, value_name = "ADDR,…", value_delimiter = ',')]
    workers: Vec<String>,
    /// With --workers: bytes of files per task of a scan stage (default `[cluster]
    /// bytes_per_task` of signalql.toml, else 16 MiB). A scan smaller than that is one task.
    #[arg(long, global = true, value_name = "BYTES", value_parser = clap::value_parser!(u64).range(1..))]
    bytes_per_task: Option<u64>,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum ErrorFormat {
    Text,
    Json,
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
    /// Time a query in this process: WARMUP uncounted runs, then RUNS counted ones, answered
    /// as `serve` and `mcp` answer them: with a plan cache, so a warm run parses the text and
    /// runs the plan it kept (--no-plan-cache binds, plans and optimises every run). Prints
    /// one JSON object: times_s (each counted run, seconds), median_s, rows and row_count of
    /// the last run.
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
        /// Plan every run anew: no plan cache.
        #[arg(long)]
        no_plan_cache: bool,
        /// Answer in Arrow (`Engine::query_batches`: the rows as batches, none made a JSON
        /// value), as Parquet output and Python's `to_arrow()` do; analytics only.
        #[arg(long)]
        arrow: bool,
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
        /// A PREFER item: `current`, a trust level (`verified`…) or `representation "NAME"`;
        /// repeat for more.
        #[arg(long, value_name = "ITEM")]
        prefer: Vec<String>,
        /// An EXCLUDE item: `untrusted`, `stale`, `role ROLE` or `role ROLE from ROLE`;
        /// repeat for more.
        #[arg(long, value_name = "ITEM")]
        exclude: Vec<String>,
        /// MAX OBJECTS n.
        #[arg(long, value_name = "N")]
        max_objects: Option<u64>,
        /// MAX DEPTH n (graph hops of expansion).
        #[arg(long, value_name = "N")]
        max_depth: Option<u64>,
        /// MAX AGE, as `N UNIT` (`30 d`, `12 h`).
        #[arg(long, value_name = "AGE")]
        max_age: Option<String>,
        /// Add the items' derivations and entities (WITH EVIDENCE).
        #[arg(long)]
        with_evidence: bool,
        /// Build the bundle as of this instant (AS OF, RFC 3339).
        #[arg(long, value_name = "TIMESTAMP")]
        as_of: Option<String>,
        /// The token estimator (USING ESTIMATOR): `chars-div-4-v1` or `o200k_base`;
        /// default: `[context] estimator` of signalql.toml, else chars-div-4-v1.
        #[arg(long, value_name = "NAME")]
        estimator: Option<String>,
        /// Further clauses in SignalQL syntax (the options above override them).
        #[arg(long, value_name = "SIGNALQL")]
        clauses: Option<String>,
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
    /// Print what a query would do without running it (`EXPLAIN QUERY`): the tables it reads,
    /// its logical and physical plans, the SQL, DataFusion's estimate and the limits; JSON by
    /// default, `--format table` for a person.
    Explain {
        #[arg(long)]
        data: Option<PathBuf>,
        #[arg(long, value_enum, default_value = "json")]
        format: Format,
        #[arg(long)]
        now: Option<String>,
        /// Also run it and report what it did (EXPLAIN ANALYZE).
        #[arg(long)]
        analyze: bool,
        /// The query text (with or without a leading EXPLAIN), or `-` to read it from stdin.
        query: String,
    },
    /// What a statement would read and how long it would take, from metadata only: files,
    /// row groups, rows and bytes after pruning, and a time interval learnt from traced runs.
    Simulate {
        #[arg(long)]
        data: Option<PathBuf>,
        #[arg(long, value_enum, default_value = "json")]
        format: Format,
        #[arg(long)]
        now: Option<String>,
        /// The query text, or `-` to read it from stdin.
        query: String,
    },
    /// The estimator's statistics over the traced runs: per estimated field the mean absolute
    /// error, the calibration and the sample count.
    Stats {
        #[arg(long)]
        data: Option<PathBuf>,
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
    /// Build the text index of the object tables (docs/index.md) for every `representations`
    /// file it does not cover yet, files other tools wrote included; `ingest objects` indexes
    /// what it writes itself. Committed all at once, like an ingest.
    Index {
        /// Dataset root (a folder or s3://bucket/prefix).
        #[arg(long)]
        data: PathBuf,
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
    /// explain_context, explain, simulate, stats, format and watch.
    Mcp {
        #[arg(long)]
        data: Option<PathBuf>,
        /// Evaluation time T (RFC 3339) for queries without AS OF.
        #[arg(long)]
        now: Option<String>,
    },
    /// Serve the dataset over HTTP: the MCP streamable-HTTP transport at /mcp and
    /// `POST /v1/query` with `{"query": "…"}`; `Authorization: Bearer TOKEN` selects the
    /// principal of the dataset's policy.toml (docs/serve.md). Runs until Ctrl-C.
    Serve {
        #[arg(long)]
        data: Option<PathBuf>,
        /// Address to listen on (loopback unless told otherwise; port 0 picks a free one,
        /// printed on stdout as `listening on http://ADDR`).
        #[arg(long, default_value = "127.0.0.1:7878")]
        listen: std::net::SocketAddr,
        /// Evaluation time T (RFC 3339) for queries without AS OF.
        #[arg(long)]
        now: Option<String>,
    },
    /// Serve a worker of a cluster: it runs the stages of statements planned by a coordinator
    /// (`--workers` on `query`, `context`, `mcp`, `serve`; docs/cluster.md). Prints
    /// `worker listening on ADDR`, then runs until Ctrl-C.
    Worker {
        /// Address to listen on (port 0 picks a free one).
        #[arg(long, default_value = "127.0.0.1:7979")]
        listen: std::net::SocketAddr,
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
        /// Do not write the resident context index's snapshot of the new commit (refreshed
        /// from the earlier snapshot with the new files' objects, else built from every
        /// object's content; without it the one-shot commands read the tables until the next
        /// `signalql index`).
        #[arg(long)]
        no_snapshot: bool,
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
        /// topical (1 024 words plus 16 topical ones drawn one word in ten, ~400-word bodies:
        /// a task of topical words matches nearly every object) or zipf (20 000 words with
        /// Zipf(1) frequencies, titles of 4-12 words, bodies of 100-1 500: a task of mid-rank
        /// words is selective).
        #[arg(long, default_value = "topical", value_parser = ["topical", "zipf"])]
        vocabulary: String,
        #[arg(long)]
        out: PathBuf,
    },
    /// A synthetic events table of any size under OUT/events/.
    Events {
        #[arg(long)]
        rows: u64,
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// sessions (bursts of one user's events, funnels in order) or flat (every row drawn
        /// on its own, users uniform: large distinct counts per group).
        #[arg(long, default_value = "sessions", value_parser = ["sessions", "flat"])]
        shape: String,
        /// Number of users (default one per 40 rows).
        #[arg(long)]
        users: Option<u64>,
        #[arg(long)]
        out: PathBuf,
    },
}

/// Makes glibc's malloc give large freed blocks back to the system. By default it raises its
/// mmap threshold after each large free (up to 32 MiB), so a query's big buffers come from
/// arenas that keep their pages after the query frees them. Under a 256 MiB limit one query
/// peaked at 1.31× the limit with at most 0.6× of it live on the heap; with a fixed 1 MiB
/// threshold, 0.83× (docs/semantics.md, "Memory").
///
/// And keeps 4 MiB at the top of each arena when it trims: by default an arena gives back
/// all but 128 KiB of its free top, so the next Parquet page's buffers fault their pages in
/// again, zeroed by the kernel (W3 over one pyarrow file: a third of its time in page
/// faults; 30.3 -> 20.5 ms with the pad, docs/semantics.md).
#[allow(unsafe_code)]
fn return_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets malloc parameters; it is called before any other thread
    // exists.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 20);
        libc::mallopt(libc::M_TOP_PAD, 4 << 20);
    }
}

/// Keeps one library panic off stderr: datafusion-distributed 4.0.0 drains a statement's
/// background tasks with tokio's `JoinSet::join_all`, which panics ("task N was cancelled")
/// when the runtime cancels one of them as a failed statement ends (a worker lost
/// mid-statement). The panic is caught by tokio in that background task; the statement's own
/// error is the answer. Every other panic is printed as before.
fn quiet_cancelled_background_tasks() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let in_join_all = info
            .location()
            .is_some_and(|l| l.file().ends_with("task/join_set.rs"));
        let message = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied());
        let cancelled =
            message.is_some_and(|m| m.starts_with("task ") && m.ends_with(" was cancelled"));
        if !(in_join_all && cancelled) {
            default(info);
        }
    }));
}

fn main() -> ExitCode {
    return_freed_memory();
    quiet_cancelled_background_tasks();
    let cli = Cli::parse();
    // `signalql --data X query …` would read the sample: the shell's options before a command
    // are a usage error, not silently ignored.
    if cli.command.is_some() && (cli.data.is_some() || cli.now.is_some()) {
        use clap::CommandFactory;
        Cli::command()
            .error(
                clap::error::ErrorKind::ArgumentConflict,
                "--data and --now before a command are the shell's; give them after the command \
                 (signalql query --data ROOT …)",
            )
            .exit();
    }
    let json_errors = cli.error_format == ErrorFormat::Json
        || matches!(
            &cli.command,
            Some(
                Command::Query {
                    format: Format::Json,
                    ..
                } | Command::Bench { .. }
            )
        );
    // A panic is a bug, but it still ends as an error with a code (exit 1), not exit 101.
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(cli)))
        .unwrap_or_else(|payload| Err(signalql_engine::error::from_panic(payload.as_ref())));
    match outcome {
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

/// `signalql query`'s answer to `text`, written to stdout (or `out` for Parquet).
fn answer_query(
    engine: &Engine,
    text: &str,
    params: &Params,
    format: Format,
    out: Option<PathBuf>,
    plot: Option<PathBuf>,
) -> Result<(), Error> {
    let rt = runtime()?;
    // The plot reads the statement with its parameters bound: its canonical text.
    let plotted = |env: &signalql::Envelope, path: &std::path::Path| {
        let bound = signalql::parse_with(text, params)?.to_string();
        write_plot(path, &bound, env)
    };
    if format == Format::Parquet {
        let Some(out) = out else {
            return Err(Error::type_error(
                "--format parquet writes a file: add --out FILE",
            ));
        };
        let (envelope, batches) = rt.block_on(engine.query_batches_with(text, params))?;
        write_parquet(&out, &batches)?;
        let rows = envelope.metadata.row_count;
        if let Some(p) = plot {
            plotted(&signalql::envelope::with_rows(envelope, &batches)?, &p)?;
        }
        return write_out(&format!("wrote {rows} row(s) to {}\n", out.display()));
    }
    let envelope = match rt.block_on(engine.answer_with(text, params))? {
        Answer::Envelope(e) => *e,
        Answer::Bundle(b) => return write_json(&*b),
        Answer::Explanation(x) => return write_json(&*x),
        Answer::Plan(p) if format == Format::Table => {
            return write_out(&signalql_engine::explain::render(&p));
        }
        Answer::Plan(p) => return write_json(&*p),
    };
    if let Some(p) = plot {
        plotted(&envelope, &p)?;
    }
    write_envelope(&envelope, format)
}

fn write_envelope(envelope: &signalql::Envelope, format: Format) -> Result<(), Error> {
    let out = match format {
        Format::Json => signalql::stdout::json_text(envelope)?,
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

/// A progress bar drawn on stderr when it is a terminal (indicatif hides it otherwise), in
/// `template`'s style.
fn progress_bar(template: &str) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(0);
    bar.set_style(
        indicatif::ProgressStyle::with_template(template)
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    bar
}

/// How the command reaches the data: S3 and the caller's principal.
struct Reach {
    storage: StorageOptions,
    principal: Option<String>,
    trace: bool,
    workers: Vec<String>,
    bytes_per_task: Option<u64>,
}

impl Reach {
    /// The engine options of a command answering on `surface` at `now`.
    fn engine_options(
        &self,
        surface: &'static str,
        now: Option<String>,
    ) -> Result<EngineOptions, Error> {
        Ok(EngineOptions {
            now: parse_now(now)?,
            storage: self.storage.clone(),
            principal: self.principal.clone(),
            trace: self.trace,
            surface,
            workers: self.workers.clone(),
            bytes_per_task: self.bytes_per_task,
            // A long-running surface keeps the resident context index; a one-shot command
            // would build it for one answer, so it uses a snapshot file or none.
            resident: Some(Arc::new(match surface {
                "cli" => signalql::Resident::snapshots_only(),
                _ => signalql::Resident::default(),
            })),
            ..Default::default()
        })
    }
}

/// Writes the resident context index's snapshot file of the object tables under `data` as
/// they are now (`signalql index`, `ingest objects`; docs/index.md, "Snapshot files") and
/// says what was written, or why nothing was.
fn resident_snapshot(data: PathBuf, reach: &Reach) -> Result<String, Error> {
    let engine = open(Some(data), None, reach)?;
    Ok(
        match runtime()?.block_on(engine.write_resident_snapshot())? {
            Some(snap) => format!(
                "resident index snapshot: {} objects, {} terms, {:.1} MB ({}){}\n",
                snap.objects,
                snap.terms,
                snap.bytes as f64 / 1e6,
                snap.name,
                match snap.refreshed {
                    true => "; refreshed from the earlier snapshot, reading only the new files",
                    false => "",
                }
            ),
            None => "no resident index snapshot: the object tables are mapped, restricted, hold \
                 tied records or need more than [limits] resident_memory_bytes (docs/index.md)\n"
                .to_string(),
        },
    )
}

fn open(data: Option<PathBuf>, now: Option<String>, reach: &Reach) -> Result<Engine, Error> {
    let root = data.unwrap_or_else(signalql::sample_dataset);
    Engine::open_with(root, reach.engine_options("cli", now)?)
}

/// The dataset root an ingest writes to: a local folder or an S3 prefix.
fn ingest_root(data: &std::path::Path, storage: &StorageOptions) -> Result<Root, Error> {
    Root::parse(&data.to_string_lossy(), storage).map_err(|e| Error::io(e.to_string()))
}

fn run(cli: Cli) -> Result<(), Error> {
    let storage = StorageOptions {
        s3_endpoint: cli.s3_endpoint,
        ..Default::default()
    };
    let params = signalql_engine::syntax::params::from_pairs(&cli.params)?;
    let reach = Reach {
        storage: storage.clone(),
        principal: cli.principal,
        trace: cli.trace,
        workers: cli.workers,
        bytes_per_task: cli.bytes_per_task,
    };
    let reads_params = matches!(
        cli.command,
        Some(
            Command::Query { .. }
                | Command::Bench { .. }
                | Command::Context { .. }
                | Command::Explain { .. }
                | Command::Simulate { .. }
                | Command::Fmt { .. }
                | Command::Compile { .. }
        )
    );
    if !params.is_empty() && !reads_params {
        return Err(Error::type_error(
            "--param gives a statement's $name values: query, bench, context, explain, \
             simulate, fmt and compile read them",
        ));
    }
    let Some(command) = cli.command else {
        let root = cli.data.unwrap_or_else(signalql::sample_dataset);
        let options = reach.engine_options("shell", cli.now)?;
        return signalql::shell::Shell::open(root, options)?.run();
    };
    match command {
        Command::Query {
            data,
            format,
            now,
            out,
            plot,
            query,
        } => {
            let text = read_query(query)?;
            let engine = open(data, now, &reach)?;
            let result = answer_query(&engine, &text, &params, format, out, plot);
            // The process ends after this answer: what the engine holds (a resident
            // generation's structures) is left to the system instead of freed piece by piece.
            std::mem::forget(engine);
            result
        }
        Command::Bench {
            data,
            now,
            runs,
            warmup,
            no_plan_cache,
            arrow,
            query,
        } => {
            let text = read_query(query)?;
            // Warm answers in one process: as a server gives them, with the resident index
            // and a plan cache.
            let root = data.unwrap_or_else(signalql::sample_dataset);
            let options = EngineOptions {
                plan_cache: (!no_plan_cache).then(Default::default),
                ..reach.engine_options("bench", now)?
            };
            let engine = Engine::open_with(root, options)?;
            let answer = match arrow {
                true => signalql::bench::Answering::Arrow,
                false => signalql::bench::Answering::Whole,
            };
            write_json(&bench(&engine, &text, &params, (warmup, runs), answer)?)
        }
        Command::Describe {
            data,
            format,
            now,
            target,
        } => {
            let engine = open(data, now, &reach)?;
            let envelope = runtime()?.block_on(DescribeRequest { target }.run(&engine))?;
            write_envelope(&envelope, format)
        }
        Command::Mcp { data, now } => {
            let root = data.unwrap_or_else(signalql::sample_dataset);
            let engine = Engine::open_with(
                root,
                EngineOptions {
                    plan_cache: Some(Default::default()),
                    ..reach.engine_options("mcp", now)?
                },
            )?;
            runtime()?.block_on(signalql::mcp::serve_stdio(engine))
        }
        Command::Worker { listen } => runtime()?.block_on(async move {
            let listener = tokio::net::TcpListener::bind(listen)
                .await
                .map_err(|e| Error::io(format!("worker: cannot listen on {listen}: {e}")))?;
            let addr = listener
                .local_addr()
                .map_err(|e| Error::io(format!("worker: {e}")))?;
            println!("worker listening on {addr}");
            signalql::distributed::serve(listener, reach.storage.clone(), async {
                let _ = tokio::signal::ctrl_c().await;
            })
            .await
        }),
        Command::Serve { data, listen, now } => {
            let root = data.unwrap_or_else(signalql::sample_dataset);
            let options = EngineOptions {
                // Each request's bearer token picks its principal (docs/serve.md).
                principal: None,
                // One cache for the engines of every principal (the key holds the principal).
                plan_cache: Some(Default::default()),
                ..reach.engine_options("serve", now)?
            };
            runtime()?.block_on(signalql::serve::serve(root, options, listen, |addr| {
                println!("listening on http://{addr}");
            }))
        }
        Command::Watch {
            data,
            interval,
            max_polls,
            now,
            query,
        } => {
            let text = read_query(query)?;
            let engine = open(data, now, &reach)?;
            watch(&engine, &text, interval, max_polls)
        }
        Command::Context {
            data,
            budget,
            project,
            render,
            compress,
            prefer,
            exclude,
            max_objects,
            max_depth,
            max_age,
            with_evidence,
            as_of,
            estimator,
            clauses,
            now,
            task,
        } => {
            let q = ContextRequest {
                task,
                budget,
                project,
                // USING KIND through the clauses (docs/context.md).
                kind: None,
                clauses,
                compress: compress.then_some(true),
                prefer,
                exclude,
                max_objects,
                max_depth,
                max_age,
                with_evidence: with_evidence.then_some(true),
                as_of,
                estimator,
                params,
            }
            .query()?;
            let engine = open(data, now, &reach)?;
            let bundle = runtime()?.block_on(engine.context(&q))?;
            if render {
                write_out(&signalql::render_bundle(&bundle))
            } else {
                write_json(&bundle)
            }
        }
        Command::Fmt { query } => {
            let text = read_query(query)?;
            let stmt = signalql::parse_with(&text, &params)?;
            write_out(&format!("{stmt}\n"))
        }
        Command::Explain {
            data,
            format,
            now,
            analyze,
            query,
        } => {
            let text = read_query(query)?;
            let statement = signalql::request::explain_query(&text, &params, analyze)?;
            let engine = open(data, now, &reach)?;
            let plan = runtime()?.block_on(engine.explain(&statement))?;
            match format {
                Format::Table => write_out(&signalql_engine::explain::render(&plan)),
                _ => write_json(&plan),
            }
        }
        Command::Simulate {
            data,
            format,
            now,
            query,
        } => {
            let text = read_query(query)?;
            let statement = signalql::parse_with(&text, &params)?;
            let engine = open(data, now, &reach)?;
            let sim = runtime()?.block_on(engine.simulate(&statement))?;
            match format {
                Format::Table => write_out(&signalql_engine::explain::render_simulation(&sim)),
                _ => write_json(&sim),
            }
        }
        Command::Stats { data } => {
            let engine = open(data, None, &reach)?;
            write_json(&runtime()?.block_on(engine.statistics()))
        }
        Command::Compile { data, now, query } => {
            let text = read_query(query)?;
            let engine = open(data, now, &reach)?;
            let rt = runtime()?;
            let statement = signalql::parse_with(&text, &params)?;
            let compiled = rt.block_on(engine.compile_statement(statement))?;
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
            let bar = progress_bar(
                "{spinner} {bar:40} {bytes}/{total_bytes} read twice ({bytes_per_sec}, eta {eta})",
            );
            let summary = signalql::catalog::ingest::ingest_events_with_progress(
                ingest_root(&data, &storage)?,
                &files,
                Some(&bar),
            );
            match &summary {
                Ok(_) => bar.finish(),
                Err(_) => bar.abandon(),
            }
            let summary = summary.map_err(Error::from)?;
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
                    no_snapshot,
                },
        } => {
            use signalql::catalog::objects::ingest::{
                ObjectIngestOptions, ingest_objects_with_progress,
            };
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
            let bar = progress_bar("{spinner} {bar:40} {pos}/{len} file(s) {msg}");
            let s = ingest_objects_with_progress(
                ingest_root(&data, &storage)?,
                &paths,
                &opts,
                Some(&bar),
            );
            match &s {
                Ok(_) => bar.finish_with_message("read and written"),
                Err(_) => bar.abandon(),
            }
            let s = s.map_err(Error::from)?;
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
            // The resident context index's snapshot of the commit just made, so the next
            // one-shot FIND OBJECT or CONTEXT FOR maps it instead of reading the tables.
            if !no_snapshot {
                out.push_str(&resident_snapshot(data, &reach)?);
            }
            write_out(&out)
        }
        Command::Index { data } => {
            let s = signalql::catalog::objects::index::index_root(&ingest_root(&data, &storage)?)
                .map_err(Error::from)?;
            let mut out = format!(
                "indexed {} representations file(s) ({} representations, {} with indexable text, {} postings); {} already covered, {} waiting for their revisions; under {}\n",
                s.files,
                s.representations,
                s.indexed,
                s.postings,
                s.already,
                s.waiting,
                data.display()
            );
            // The resident context index's snapshot, for the one-shot commands' FIND OBJECT.
            out.push_str(&resident_snapshot(data, &reach)?);
            write_out(&out)
        }
        Command::Gen {
            what:
                GenWhat::Objects {
                    objects,
                    seed,
                    vocabulary,
                    out,
                },
        } => {
            use signalql::catalog::objects::generator::{ObjectGenOptions, generate_objects};
            let opts = ObjectGenOptions {
                seed,
                vocabulary: vocabulary.parse().map_err(Error::type_error)?,
                ..ObjectGenOptions::new(&out, objects)
            };
            let s = generate_objects(&opts).map_err(Error::from)?;
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
            what:
                GenWhat::Events {
                    rows,
                    seed,
                    shape,
                    users,
                    out,
                },
        } => {
            let bar = progress_bar("{spinner} {bar:40} {pos}/{len} rows ({per_sec}, eta {eta})");
            bar.set_length(rows);
            use signalql::catalog::generator::Shape;
            let opts = signalql::catalog::generator::GenOptions {
                rows,
                seed,
                shape: if shape == "flat" {
                    Shape::Flat
                } else {
                    Shape::Sessions
                },
                users,
                ..signalql::catalog::generator::GenOptions::new(&out)
            };
            let summary = signalql::catalog::generator::generate_events(&opts, Some(&bar))
                .map_err(Error::from)?;
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
