//! Query fuzzing: 100 000 deterministic mutations of the golden and spec queries go through
//! parse, bind and lower, and a sample of them through execution on the tiny dataset. None may
//! crash, panic, fail with `internal_error` or an undocumented code, or (a parse error) lack
//! its true line:column, and every sampled execution finishes within its timeout.
//!
//! Before the mutations run the stress queries (long predicate lists, deep nesting, huge
//! literals and numbers) and the seeds themselves. Lowering is deterministic, so a statement
//! that prints as one lowered before reuses its result; every tenth plan is also unparsed to
//! SQL, and the first and every 50th lowered query of each statement kind is executed.
//!
//! The queries run in two child processes (this binary, re-run with only [`fuzz_child`]; query
//! N goes to child N mod 2), on a thread with a Tokio worker's 2 MiB stack: a stack overflow
//! aborts a process, and it must fail this test with its query, not abort every test of the
//! binary. The mutator is a SplitMix64 stream with a fixed seed (the root package has no `rand`
//! dev-dependency, and ten lines keep the corpus independent of rand's versions), so query N
//! is the same on every run: that is how a crashed child's query is found again, and where its
//! successor starts. Failures are grouped by kind, and each kind's shortest query is shrunk
//! before it is reported.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::os::unix::fs::FileExt;
use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use datafusion::logical_expr::LogicalPlan;
use signalql::ast::{BoolExpr, Span, Statement};
use signalql::watch::Watcher;
use signalql::{Answer, Engine, EngineOptions, Error, Limits};
use signalql_engine::syntax::keywords::is_reserved;

/// How many mutated queries go through parse, bind and lower.
const MUTATED: usize = 100_000;
/// How many child processes share the queries.
const WORKERS: usize = 2;
/// Every how-many-th query of a statement kind that lowers is also executed (and the first).
const EXECUTE_EVERY: usize = 50;
/// Every how-many-th plan is also unparsed to SQL (which costs more than lowering).
const UNPARSE_EVERY: usize = 10;
/// The mutator's seed.
const SEED: u64 = 0x5167_4c20_f022_2026;
/// The stack the queries run on: a Tokio worker thread's, where the MCP server runs them.
const STACK: usize = 2 << 20;
/// The engine's timeout for the sampled executions. An execution that takes longer than
/// [`FINISH_WITHIN`] (wall time, whatever it answers) has not kept to it.
const TIMEOUT_SECONDS: u64 = 2;
const FINISH_WITHIN: Duration = Duration::from_secs(TIMEOUT_SECONDS + 2);
/// A child that runs longer is killed (and its query reported).
const CHILD_DEADLINE: Duration = Duration::from_secs(600);
/// After this many crashed children no more are started.
const MAX_CRASHES: usize = 12;
/// How long a child may spend shrinking its failures.
const SHRINK_BUDGET: Duration = Duration::from_secs(10);
/// Edits stop growing a query beyond this many bytes (lexing is linear in it).
const MAX_LEN: usize = 10_000;
/// The error codes DESIGN.md §4 documents; `internal_error` is not one (it is a bug).
const DOCUMENTED: &[&str] = &[
    "parse_error",
    "unknown_field",
    "type_error",
    "capability_error",
    "limit_exceeded",
    "unknown_context",
    "io_error",
    "permission_denied",
];
/// What the parent tells a child: the dataset, the progress file, its share, its first query.
const ENV_ROOT: &str = "SIGNALQL_FUZZ_ROOT";
const ENV_PROGRESS: &str = "SIGNALQL_FUZZ_PROGRESS";
const ENV_WORKER: &str = "SIGNALQL_FUZZ_WORKER";
const ENV_START: &str = "SIGNALQL_FUZZ_START";
/// The prefix of a child's figures (key=value pairs), which the parent adds up.
const FIGURES: &str = "query_fuzz figures ";

#[test]
fn mutated_queries_never_panic_and_fail_only_with_documented_codes() {
    let started = Instant::now();
    let root = fuzz_dataset();
    let total = stress_queries().len() + seed_queries().len() + MUTATED;
    let (mut crashes, mut reports) = (Vec::new(), Vec::new());
    let mut figures: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
    // The children to start, (worker, first query): a crashed child's successor goes on
    // after the query it crashed on.
    let mut todo: Vec<(usize, usize)> = (0..WORKERS).map(|w| (w, 0)).collect();
    while !todo.is_empty() {
        let children: Vec<Child> = todo
            .drain(..)
            .map(|(w, start)| Child::start(root.path(), w, start))
            .collect();
        for child in children {
            let (worker, ended) = (child.worker, child.wait());
            for line in ended.stderr.lines() {
                let Some((what, pairs)) =
                    line.strip_prefix(FIGURES).and_then(|l| l.split_once(": "))
                else {
                    continue;
                };
                let sums = figures.entry(what.to_string()).or_default();
                for (k, v) in pairs.split_whitespace().filter_map(|kv| kv.split_once('=')) {
                    *sums.entry(k.to_string()).or_default() += v.parse::<u64>().unwrap_or(0);
                }
            }
            match ended.status {
                Some(0) => {}
                Some(101) => reports.push(failure_report(&ended.stderr)),
                status => {
                    let query = queries().nth(ended.at).unwrap_or_default();
                    let how = match status {
                        None => "crashed".to_string(),
                        Some(-1) => format!("was still running after {CHILD_DEADLINE:?}"),
                        Some(code) => format!("exited with {code}"),
                    };
                    let last: Vec<&str> = ended.stderr.lines().rev().take(2).collect();
                    crashes.push(format!(
                        "query {} {how} ({}); {} bytes: {:?}",
                        ended.at,
                        last.join(" / "),
                        query.len(),
                        preview(&query)
                    ));
                    if crashes.len() < MAX_CRASHES && ended.at + 1 < total {
                        todo.push((worker, ended.at + 1));
                    }
                }
            }
        }
    }
    for (what, sums) in &figures {
        print_figures(what, sums);
    }
    let mutations = figures.get("mutations").and_then(|f| f.get("queries"));
    if crashes.is_empty() {
        assert_eq!(
            mutations.copied(),
            Some(MUTATED as u64),
            "mutated queries run"
        );
    }
    eprintln!("query_fuzz: {:.1?} in all", started.elapsed());
    assert!(
        crashes.is_empty() && reports.is_empty(),
        "{} crashes{}:\n{}\n{}",
        crashes.len(),
        if crashes.len() >= MAX_CRASHES {
            " (no more children started)"
        } else {
            ""
        },
        crashes.join("\n"),
        reports.join("\n")
    );
}

/// One worker's share of the fuzzing, in a process the test above starts (run directly, it
/// does nothing).
#[test]
#[ignore = "a child process of the fuzz, which starts it: cargo test --test it -- query_fuzz::mutated_queries_never_panic_and_fail_only_with_documented_codes"]
fn fuzz_child() {
    let var = |name| std::env::var(name).ok();
    let (Some(root), Some(progress), Some(worker), Some(start)) = (
        var(ENV_ROOT),
        var(ENV_PROGRESS),
        var(ENV_WORKER).and_then(|s| s.parse().ok()),
        var(ENV_START).and_then(|s| s.parse().ok()),
    ) else {
        return;
    };
    let fuzz = move || fuzz(Path::new(&root), Path::new(&progress), worker, start);
    let thread = std::thread::Builder::new().stack_size(STACK).spawn(fuzz);
    if thread.unwrap().join().is_err() {
        panic!("the fuzzing failed (see above)");
    }
}

/// A running [`fuzz_child`], its stderr read (and passed on) as it comes.
struct Child {
    worker: usize,
    process: std::process::Child,
    progress: tempfile::NamedTempFile,
    stderr: std::thread::JoinHandle<String>,
    deadline: Instant,
}

/// How a child ended: its exit code (`None` for a signal, -1 when killed at its deadline),
/// its stderr, and the query it was at.
struct Ended {
    status: Option<i32>,
    stderr: String,
    at: usize,
}

impl Child {
    fn start(root: &Path, worker: usize, start: usize) -> Child {
        let progress = tempfile::NamedTempFile::new().unwrap();
        // /proc/self/exe: this binary even if a build has replaced its file since.
        let exe = match Path::new("/proc/self/exe").exists() {
            true => "/proc/self/exe".into(),
            false => std::env::current_exe().unwrap(),
        };
        let mut process = Command::new(exe)
            .args([
                "--exact",
                "query_fuzz::fuzz_child",
                "--ignored",
                "--nocapture",
            ])
            .args(["--test-threads", "1"])
            .env(ENV_ROOT, root)
            .env(ENV_PROGRESS, progress.path())
            .env(ENV_WORKER, worker.to_string())
            .env(ENV_START, start.to_string())
            .env("RUST_BACKTRACE", "0")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut pipe = process.stderr.take().unwrap();
        // A spawned thread shares the test's output capture.
        let stderr = std::thread::spawn(move || {
            let mut all = String::new();
            for line in std::io::BufRead::lines(std::io::BufReader::new(&mut pipe)) {
                let line = line.unwrap_or_else(|e| format!("(unreadable: {e})"));
                if !line.starts_with(FIGURES) {
                    eprintln!("{line}");
                }
                all.push_str(&line);
                all.push('\n');
            }
            all
        });
        Child {
            worker,
            process,
            progress,
            stderr,
            deadline: Instant::now() + CHILD_DEADLINE,
        }
    }

    fn wait(mut self) -> Ended {
        let status = loop {
            if let Some(status) = self.process.try_wait().unwrap() {
                break status.code();
            }
            if Instant::now() > self.deadline {
                self.process.kill().unwrap();
                self.process.wait().unwrap();
                break Some(-1);
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut at = [0; 8];
        self.progress.as_file().read_at(&mut at, 0).unwrap();
        Ended {
            status,
            stderr: self.stderr.join().unwrap_or_default(),
            at: u64::from_le_bytes(at) as usize,
        }
    }
}

/// The figures of one part of the run (stress queries, seeds, mutations), added up over the
/// children.
fn print_figures(what: &str, f: &BTreeMap<String, u64>) {
    let n = |k: &str| f.get(k).copied().unwrap_or(0);
    eprintln!(
        "query_fuzz: {what}: {} queries, {} parsed ({} of {} canonical texts sampled did not \
         parse again), {} bound, {} lowered ({} lowerings run, the rest printed as a statement \
         lowered before), {} unparsed to SQL, {} executed",
        n("queries"),
        n("parsed"),
        n("reparse_failed"),
        n("reparsed"),
        n("bound"),
        n("lowered"),
        n("distinct"),
        n("unparsed"),
        n("executed")
    );
    let group = |prefix: &str| -> Vec<String> {
        let items = f
            .iter()
            .filter_map(|(k, v)| Some((k.strip_prefix(prefix)?, v)));
        items.map(|(k, v)| format!("{k} {v}")).collect()
    };
    eprintln!(
        "query_fuzz:   lowered by kind: {}",
        group("kind.").join(", ")
    );
    for (k, v) in f
        .iter()
        .filter_map(|(k, v)| Some((k.strip_prefix("error.")?, v)))
    {
        let spanned = n(&format!("spanned.{k}"));
        eprintln!(
            "query_fuzz:   {}: {v} ({spanned} with a position)",
            k.replace('.', " ")
        );
    }
    let ms = group("ms.").join(" ms, ");
    eprintln!("query_fuzz:   time per stage, over all children: {ms} ms");
}

/// The part of a failed child's stderr that reports its failures.
fn failure_report(stderr: &str) -> String {
    let lines: Vec<&str> = stderr.lines().collect();
    let start = lines.iter().position(|l| l.contains("kinds of failure:"));
    let Some(start) = start else {
        return lines[lines.len().saturating_sub(20)..].join("\n");
    };
    let rest = lines[start + 1..].iter();
    let end = rest.take_while(|l| !l.starts_with("note: ") && !l.starts_with("thread '"));
    lines[start..=start]
        .iter()
        .chain(end)
        .copied()
        .collect::<Vec<_>>()
        .join("\n")
}

/// The first 300 characters of `q`, and its last 100 when it is longer.
fn preview(q: &str) -> String {
    let chars: Vec<char> = q.chars().collect();
    if chars.len() <= 400 {
        return q.to_string();
    }
    let head: String = chars[..300].iter().collect();
    let tail: String = chars[chars.len() - 100..].iter().collect();
    format!("{head} … {tail}")
}

// ---------------------------------------------------------------------------------------------
// The corpus.

/// Spec examples and statement kinds the golden cases do not hold (they are read from
/// tests/golden/**/*.case too).
const SPEC_QUERIES: &[&str] = &[
    "FROM events\nWHERE event_name = \"checkout\"\nDURING LAST 14 d\nAS OF \"2026-06-13T00:00:00Z\"\nGROUP BY signal(experiment_variant)\nRETURN signal(experiment_variant), count_distinct(user_id), stats(order_value)",
    "FROM metric(analytics.weekly_active_users)\nDURING LAST 12 w\nBUCKET BY w\nRETURN timestamp, metric_value",
    "FROM events\nWHERE event_name = \"session_start\"\nDURING LAST 30 d\nBUCKET BY d\nGROUP BY properties.platform\nRETURN timestamp, properties.platform, count_distinct(user_id)\nORDER BY timestamp ASC",
    "FROM events\nWHERE event_name = \"page_view\"\nDURING LAST 7 d\nGROUP BY properties.path\nHAVING count > 1000\nRETURN properties.path, count\nORDER BY count DESC\nLIMIT 10",
    "FUNNEL \"visit\" -> \"signup\" -> \"activated\"\nFROM events\nDURING LAST 28 d\nWITHIN 7 d\nGROUP BY properties.plan",
    "FROM events WHERE event_name = \"x\" RETURN count()",
    "FROM entity(analytics.user) WHERE probability(churn_risk) > 0.5 OR NOT (properties.a IN (1, 2) AND properties.b NOT IN (\"x\")) TRAVERSE referred DEPTH <= 2 DURING BETWEEN \"2026-01-01T00:00:00+01:00\" AND \"2026-02-01T00:00:00Z\" RETURN entity_id, semantic_match(\"refund \\\"now\\\"\")",
    "FROM entity(analytics.account) TRAVERSE partner_of DEPTH <= 2 RETURN entity_id, hops",
    "FROM entity(analytics.account) GROUP BY signal(account_health) RETURN signal(account_health), count",
    "FROM events DURING LAST 30 d BUCKET BY d GROUP BY properties.platform RETURN timestamp, properties.platform, count TREND UP OVER 30 d",
    "FIND sequence WHERE \"page_view\" -> checkout -> \"purchase\" WITHIN 2 HOURS",
    "from events where properties.amount between -1.5 and 10 and properties.path contains \"a\\\\b\" during last 7 days return percentile(properties.amount, 0.95), avg(properties.amount), min(properties.amount), max(properties.amount), sum(properties.amount), variance(properties.amount), stddev(properties.amount), count(properties.amount) order by avg(properties.amount) desc, count() limit 5",
    "FROM events WHERE properties.signal = true AND properties.d = false AND properties.from IS NULL RETURN count",
    "WATCH (\n  FROM events\n  WHERE event_name = \"purchase\"\n  DURING LAST 7 d\n  RETURN count\n) WHEN count > 1",
    "WATCH (FROM events DURING LAST 7 d GROUP BY properties.platform RETURN properties.platform, count) WHEN count > 0 AND properties.platform = \"web\"",
    "DESCRIBE entities",
    "DESCRIBE events",
    "DESCRIBE signals",
    "DESCRIBE metrics",
    "DESCRIBE relationships",
    "DESCRIBE entity(analytics.user)",
    "EXPLAIN FROM events RETURN count",
    "EXPLAIN ANALYZE FUNNEL page_view -> purchase FROM events WITHIN 1 m",
    "CONTEXT FOR \"design SignalQL object storage\"\nUSING PROJECT \"SignalQL\"\nBUDGET 32000 TOKENS\nPREFER CURRENT, VERIFIED\nWITH EVIDENCE",
    "CONTEXT FOR \"parquet storage engine\" USING PROJECT \"main\" BUDGET 100 TOKENS EXCLUDE UNTRUSTED, STALE, ROLE INSTRUCTION MAX OBJECTS 2 MAX DEPTH 2 MAX AGE 60 d",
    "CONTEXT FOR \"t\" AS OF \"2026-06-13T00:00:00Z\" MAX AGE 30 DAYS EXCLUDE ROLE SECRET, STALE PREFER REPRESENTATION summary MAX OBJECTS 5 EXCLUDE ROLE INSTRUCTION FROM UNTRUSTED_EXTERNAL, UNTRUSTED MAX DEPTH 2 PREFER AUTHORITATIVE, CURRENT COMPRESS",
    "EXPLAIN CONTEXT context://ctx_d73247c8d934cd364f4d22f2c10b3cea",
    "EXPLAIN CONTEXT \"context://ctx_abc\"",
    "FIND OBJECT ABOUT \"pricing strategy\" USING REPRESENTATION \"transcript\"",
    "FIND OBJECT (document) ABOUT \"parquet\" WHERE project = \"main\" AS OF \"2026-06-13T00:00:00Z\" LIMIT 3",
    "FIND OBJECT WHERE trust = \"untrusted\" OR state = \"stale\"",
    "FIND OBJECT",
    "COUNT events FROM events WHERE event_name = \"signup\" DURING LAST 7 DAYS",
    "COUNT users FROM events WHERE event_name = \"signup\" AND properties.plan = \"pro\" DURING LAST 30 DAYS GROUP BY DAY",
    "count distinct users from Events where traits.plan = \"free\" during between \"2026-01-01T00:00:00Z\" and \"2026-02-01T00:00:00Z\"",
    "COUNT DISTINCT EVENTS FROM events WHERE event_name = \"a\\\" DURING LAST 7DAYS",
    "FUNNEL \"visit\" THEN \"signup\" THEN \"purchase\" FROM events DURING LAST 14 DAYS",
];

/// The `--- query` section of every golden case, then [`SPEC_QUERIES`], without duplicates.
fn seed_queries() -> Vec<String> {
    fn cases(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let p = entry.unwrap().path();
            if p.is_dir() {
                cases(&p, out);
            } else if p.extension().is_some_and(|e| e == "case") {
                out.push(p);
            }
        }
    }
    let mut files = Vec::new();
    cases(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden"),
        &mut files,
    );
    files.sort();
    let golden = files.iter().filter_map(|f| {
        let text = std::fs::read_to_string(f).unwrap();
        let start = text.find("--- query\n")? + "--- query\n".len();
        let end = text[start..]
            .find("\n--- ")
            .map_or(text.len(), |i| start + i);
        Some(text[start..end].trim_end().to_string())
    });
    let mut seen = BTreeSet::new();
    golden
        .chain(SPEC_QUERIES.iter().map(|s| s.to_string()))
        .filter(|q| seen.insert(q.clone()))
        .collect()
}

/// Queries at and beyond the sizes mutations reach (long predicate lists, deep nesting, huge
/// literals, names and numbers), run as they are.
fn stress_queries() -> Vec<String> {
    let list = |n: usize, item: &dyn Fn(usize) -> String, sep: &str| {
        (0..n).map(item).collect::<Vec<_>>().join(sep)
    };
    let or = |n: usize, p: &str| list(n, &|_| p.to_string(), " OR ");
    let and = |n: usize, p: &str| list(n, &|_| p.to_string(), " AND ");
    let nested = |n: usize| format!("{}event_name = \"x\"{}", "(".repeat(n), ")".repeat(n));
    let names = |n: usize, f: &str| list(n, &|i| f.replace('#', &i.to_string()), ", ");
    let steps = list(1000, &|i| format!("\"e{i}\""), " -> ");
    let big = "18446744073709551615";
    let mut q = vec![
        format!(
            "FROM events WHERE {} RETURN count",
            or(250, "event_name = \"signup\"")
        ),
        format!(
            "FROM events WHERE {} RETURN count",
            and(2_000, "user_id IS NOT NULL")
        ),
        format!(
            "FROM events WHERE {} RETURN count",
            or(20_000, "event_name = \"x\"")
        ),
        format!(
            "FROM events GROUP BY event_name HAVING {} RETURN event_name, count",
            and(250, "count > 0")
        ),
        format!(
            "WATCH (FROM events RETURN count) WHEN {}",
            or(250, "count > 0")
        ),
        format!(
            "FROM entity(analytics.user) WHERE {} RETURN entity_id",
            or(250, "attributes.plan = \"pro\"")
        ),
        format!("FIND OBJECT WHERE {}", or(250, "trust = \"untrusted\"")),
        format!("FROM events WHERE {} RETURN count", nested(64)),
        format!("FROM events WHERE {} RETURN count", nested(65)),
        format!("FROM events WHERE {} RETURN count", nested(100_000)),
        format!(
            "FROM events WHERE {}event_name = \"x\" RETURN count",
            "NOT ".repeat(64)
        ),
        format!(
            "FROM events WHERE {}event_name = \"x\" RETURN count",
            "NOT ".repeat(65)
        ),
        format!(
            "FROM events WHERE event_name IN ({}) RETURN count",
            names(10_000, "\"e#\"")
        ),
        format!(
            "FROM events WHERE event_name = \"{}\" RETURN count",
            "x".repeat(1 << 20)
        ),
        format!(
            "FROM events WHERE properties.{} = 1 RETURN count",
            "a".repeat(100_000)
        ),
        format!(
            "FROM events WHERE properties.{} = 1 RETURN count",
            list(30, &|_| "a".into(), ".")
        ),
        format!(
            "FROM events WHERE properties.{} = 1 RETURN count",
            list(300, &|_| "a".into(), ".")
        ),
        format!(
            "FROM events WHERE properties.{} = 1 RETURN count",
            list(10_000, &|_| "a".into(), ".")
        ),
        format!(
            "FROM events GROUP BY {} RETURN count",
            names(300, "properties.p#")
        ),
        format!("FROM events RETURN {}", names(1000, "max(properties.p#)")),
        format!("FUNNEL {steps} FROM events WITHIN 1 d"),
        format!("FIND sequence WHERE {steps} WITHIN 1 d"),
        format!("CONTEXT FOR \"{}\"", "storage ".repeat(100_000)),
        format!(
            "CONTEXT FOR \"x\" PREFER {}",
            list(10_000, &|_| "CURRENT".into(), ", ")
        ),
        format!("{}FROM evnts RETURN count", "\n".repeat(100_000)),
        format!(
            "FROM events DURING LAST {big} h AS OF \"9999-12-31T23:59:59Z\" BUCKET BY h RETURN timestamp, count"
        ),
        format!("FROM events DURING LAST {big} m RETURN count"),
        format!("FROM events RETURN properties.amount ORDER BY properties.amount LIMIT {big}"),
        format!(
            "FROM entity(analytics.account) TRAVERSE partner_of DEPTH <= {big} RETURN entity_id"
        ),
        format!("FROM events BUCKET BY d RETURN timestamp, count TREND UP OVER {big} d"),
        format!("FUNNEL a -> b FROM events WITHIN {big} m"),
        format!("CONTEXT FOR \"x\" BUDGET {big} TOKENS MAX AGE {big} m MAX OBJECTS {big}"),
    ];
    q.extend(
        [
            "FROM events DURING BETWEEN \"-262143-01-01T00:00:00Z\" AND \"+262142-12-31T23:59:59Z\" RETURN count",
            "FROM events DURING LAST 1 d AS OF \"+262142-12-31T23:59:59Z\" BUCKET BY m RETURN timestamp, count",
            "FROM events DURING LAST 366 d AS OF \"0001-01-01T00:00:00Z\" BUCKET BY w RETURN timestamp, count",
            "FROM events WHERE properties.amount > 1e308 OR properties.amount < -99999999999999999999 RETURN count",
            "FROM events RETURN percentile(properties.amount, 99999999999999999999.5)",
        ]
        .map(String::from),
    );
    q
}

/// Every query of the run, numbered from 0: the stress queries, the seeds, then [`MUTATED`]
/// mutations of the seeds.
fn queries() -> impl Iterator<Item = String> {
    let seeds = seed_queries();
    let mut mutator = Mutator {
        seeds: seeds.iter().map(|q| tokenize(q)).collect(),
        rng: Rng(SEED),
    };
    let mutations = (0..MUTATED).map(move |_| mutator.next());
    stress_queries().into_iter().chain(seeds).chain(mutations)
}

// ---------------------------------------------------------------------------------------------
// The mutator.

/// SplitMix64: small, fast, and the same stream everywhere.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// A number in `0..n` (`n > 0`).
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len())]
    }
    fn word(&mut self, words: &'static str) -> &'static str {
        let words = split(words);
        words[self.below(words.len())]
    }
    fn char(&mut self) -> char {
        let n = self.below(CHARS.chars().count());
        CHARS.chars().nth(n).unwrap_or('?')
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    Space,
    Word,
    Number,
    Str,
    Punct,
}

/// A token of the mutator's own tokenizer (deliberately not the engine's); the text is the
/// concatenation of the tokens, whitespace included.
#[derive(Debug, Clone)]
struct Tok {
    kind: Kind,
    text: String,
}

fn tok(kind: Kind, text: impl Into<String>) -> Tok {
    Tok {
        kind,
        text: text.into(),
    }
}

fn tokenize(s: &str) -> Vec<Tok> {
    let chars: Vec<(usize, char)> = s.char_indices().collect();
    let at = |j: usize| chars.get(j).map(|&(_, c)| c);
    let (mut out, mut i) = (Vec::new(), 0);
    while i < chars.len() {
        let (start, c) = chars[i];
        let mut j = i + 1;
        let kind = if c.is_whitespace() {
            while at(j).is_some_and(char::is_whitespace) {
                j += 1;
            }
            Kind::Space
        } else if c == '"' {
            while let Some(d) = at(j) {
                j += 1;
                match d {
                    '\\' => j += 1,
                    '"' => break,
                    _ => {}
                }
            }
            Kind::Str
        } else if c.is_ascii_digit() {
            while at(j).is_some_and(|d| d.is_ascii_digit() || d == '.') {
                j += 1;
            }
            Kind::Number
        } else if c.is_alphabetic() || c == '_' {
            while at(j).is_some_and(|d| d.is_alphanumeric() || d == '_') {
                j += 1;
            }
            Kind::Word
        } else {
            let pair: String = [Some(c), at(j)].into_iter().flatten().collect();
            if ["->", "<=", ">=", "!=", "--"].contains(&pair.as_str()) {
                j += 1;
            }
            Kind::Punct
        };
        let j = j.min(chars.len());
        let end = chars.get(j).map_or(s.len(), |&(o, _)| o);
        out.push(tok(kind, &s[start..end]));
        i = j;
    }
    out
}

fn join(toks: &[Tok]) -> String {
    toks.iter().map(|t| t.text.as_str()).collect()
}

const NUMBERS: &str = "99999999999999999999 18446744073709551615 18446744073709551616 \
    9223372036854775807 9223372036854775808 4294967296 2147483648 -1 -0 0 00 1 2 366 367 \
    10000 10001 10000001 1e308 1e-308 1.7976931348623157e309 0.0 0.5 1.0 1. .5 -1.5 \
    -99999999999999999999 12345678901234567890.12345678901234567890 \
    0.000000000000000000000000000001 NaN inf -inf 1_000 0x10";

/// String bodies, separated by `|`: empty, Unicode, escapes, bad and extreme timestamps,
/// tricks.
const STRINGS: &str = "| |\u{0}|é|e\u{301}|日本語|🦀🚀|\u{202E}evil|\u{FEFF}|\u{200B}|İstanbul ß ǅ|\
    \\\"|\\\\|\\n|\n|\r\n|\t|2026-02-30T00:00:00Z|2026-13-01T00:00:00Z|2026-01-01T24:00:00Z|\
    2026-01-01T23:59:60Z|2026-01-01T00:00:00.999999999Z|2026-01-01T00:00:00+23:59|\
    2026-01-01T00:00:00-23:59|2026-01-01|1970-01-01T00:00:00Z|0000-01-01T00:00:00Z|\
    9999-12-31T23:59:59Z|+262143-12-31T23:59:59Z|-0001-01-01T00:00:00Z|\
    2262-04-11T23:47:16.854775807Z|2262-04-12T00:00:00Z|1677-09-21T00:12:43Z|\
    2026-01-10T00:00:00Z|context://ctx_0123456789abcdef0123456789abcdef|\
    context://../../etc/passwd|'; DROP TABLE events; --|%s%n%x|${HOME}|page_view|purchase|web|\
    u1|true|49";

/// Words: grammar keywords, the dataset's names, and names it does not have.
const WORDS: &str = "FROM WHERE TRAVERSE DURING AS OF BUCKET BY GROUP HAVING RETURN ORDER LIMIT \
    TREND UP DOWN FLAT OVER FUNNEL WITHIN FIND sequence WATCH WHEN DESCRIBE entity metric events \
    entities signals metrics relationships signal probability semantic_match count \
    count_distinct sum avg min max variance stddev percentile stats AND OR NOT IN BETWEEN \
    CONTAINS IS NULL true false LAST h d w m HOUR HOURS DAY DAYS WEEK WEEKS MONTH MONTHS ASC DESC \
    DEPTH entity_id timestamp metric_value hops event_name user_id session_id properties \
    properties.amount properties.plan properties.nope traits.plan traits signal(churn_risk) \
    probability(churn_risk) signal(nope) semantic_match(\"x\") metric(analytics.revenue) \
    metric(analytics.nope) entity(analytics.user) entity(nope) analytics analytics.user \
    partner_of referred member_of CONTEXT USING PROJECT BUDGET TOKENS PREFER CURRENT VERIFIED \
    AUTHORITATIVE EXCLUDE UNTRUSTED STALE ROLE SECRET INSTRUCTION MAX OBJECTS AGE WITH EVIDENCE \
    COMPRESS REPRESENTATION summary EXPLAIN ANALYZE OBJECT ABOUT COUNT USERS DISTINCT THEN \
    select _ x ß İ ǅ ﬁ Ω";

const PUNCTS: &str =
    "= != < > <= >= -> ( ) , . ; * + / - <> == => ' ` # @ $ \\ -- \" :: .. [ ] { }";

/// Characters to insert anywhere: ASCII, control characters, multi-byte and odd Unicode.
const CHARS: &str = "aZ09_.,()\"\\-><=! \t\n\r\0\x0b\x1b\x7féß中🦀\u{200B}\u{FEFF}\u{202E}\u{301}\
    \u{FFFF}\u{10FFFF}\u{2028}\u{85}\u{A0}İ";

/// Interchangeable words and operators: a grammatical edit replaces one by another of its class.
const CLASSES: &[&str] = &[
    "count count_distinct sum avg min max variance stddev stats",
    "h d w m HOUR HOURS DAY DAYS WEEK WEEKS MONTH MONTHS",
    "= != > < >= <=",
    "UP DOWN FLAT",
    "ASC DESC",
    "AND OR",
    "true false NULL",
    "UNTRUSTED UNKNOWN INFERRED VERIFIED AUTHORITATIVE CURRENT STALE",
    "DATA INSTRUCTION PROMPT POLICY EXECUTABLE SECRET UNTRUSTED_EXTERNAL",
    "OBJECTS DEPTH AGE",
    "entities events signals metrics relationships",
];

/// Field paths, the dataset's and others.
const FIELDS: &str = "event_name user_id session_id timestamp entity_id entity_type hops \
    metric_value properties properties.amount properties.plan properties.platform properties.path \
    properties.nope properties.amount.x properties.d properties.timestamp traits.plan \
    traits.company traits.nope traits attributes.plan attributes.country attributes.region \
    attributes updated_at signal(churn_risk) probability(churn_risk) signal(account_health) \
    probability(nope) semantic_match(\"parquet\") semantic_match(\"\") x a.b.c.d.e.f.g.h project \
    trust state kind title";

/// Sources after FROM.
const SOURCES: &str = "events entity(analytics.user) entity(analytics.account) \
    entity(analytics.session) entity(analytics.nope) entity(x) metric(analytics.revenue) \
    metric(analytics.weekly_active_users) metric(analytics.error_rate) \
    metric(analytics.revenue_per_purchaser) metric(analytics.nope)";

/// Words that start a clause (or a part of a statement).
const CLAUSES: &str = "FROM WHERE TRAVERSE DURING BUCKET GROUP HAVING RETURN ORDER LIMIT TREND \
    WITHIN WHEN USING BUDGET PREFER EXCLUDE MAX WITH ABOUT AS";

const PREDICATES: &str = "WHERE HAVING WHEN";

/// The words of one of the lists above, split once.
fn split(list: &'static str) -> &'static [&'static str] {
    thread_local! {
                static SPLIT: RefCell<HashMap<(usize, usize), &'static [&'static str]>> =
            RefCell::default();
    }
    SPLIT.with(|m| {
        let mut m = m.borrow_mut();
        let words = m.entry((list.as_ptr() as usize, list.len()));
        *words.or_insert_with(|| Vec::leak(list.split_whitespace().collect()))
    })
}

fn is_word(t: &Tok, words: &'static str) -> bool {
    t.kind == Kind::Word && split(words).iter().any(|w| w.eq_ignore_ascii_case(&t.text))
}

struct Mutator {
    seeds: Vec<Vec<Tok>>,
    rng: Rng,
}

impl Mutator {
    /// A mutation of a random seed: one to three edits, which in half the mutations keep to
    /// the grammar (so that they reach binding and lowering). Edits stop once the text is
    /// [`MAX_LEN`] bytes long.
    fn next(&mut self) -> String {
        let mut toks = self.rng.pick(&self.seeds).clone();
        let grammatical = self.rng.chance(50);
        for _ in 0..1 + self.rng.below(3) {
            match grammatical {
                true => self.grammatical_edit(&mut toks),
                false => self.edit(&mut toks),
            }
            if toks.iter().map(|t| t.text.len()).sum::<usize>() > MAX_LEN {
                break;
            }
        }
        join(&toks)
    }

    /// A random index of a token of `kind` (of any non-space token for `None`), else of any
    /// token, else 0.
    fn index(&mut self, toks: &[Tok], kind: Option<Kind>) -> usize {
        let of = |k: Option<Kind>| -> Vec<usize> {
            (0..toks.len())
                .filter(|&i| k.map_or(toks[i].kind != Kind::Space, |k| toks[i].kind == k))
                .collect()
        };
        let mut at = of(kind);
        if at.is_empty() {
            at = of(None);
        }
        if at.is_empty() {
            0
        } else {
            *self.rng.pick(&at)
        }
    }

    /// A random clause starting at one of `words`: its keyword's index and its end (the next
    /// clause word or closing parenthesis outside its own parentheses).
    fn clause(&mut self, toks: &[Tok], words: &'static str) -> Option<(usize, usize)> {
        let starts: Vec<usize> = (0..toks.len())
            .filter(|&i| is_word(&toks[i], words))
            .collect();
        if starts.is_empty() {
            return None;
        }
        let i = *self.rng.pick(&starts);
        let mut depth = 0i32;
        let end = (i + 1..toks.len())
            .find(|&j| {
                depth += toks[j].text.matches('(').count() as i32;
                depth -= toks[j].text.matches(')').count() as i32;
                depth < 0 || (depth == 0 && is_word(&toks[j], CLAUSES))
            })
            .unwrap_or(toks.len());
        Some((i, end))
    }

    fn number(&mut self) -> String {
        match self.rng.below(4) {
            0 => self.rng.next().to_string(),
            1 => (0..1 + self.rng.below(60))
                .map(|_| char::from(b'0' + self.rng.below(10) as u8))
                .collect(),
            _ => self.rng.word(NUMBERS).to_string(),
        }
    }

    fn string(&mut self) -> String {
        let body = match self.rng.below(6) {
            0 => "a".repeat(*self.rng.pick(&[100, 300, 3_000, 10_000])),
            1 => (0..1 + self.rng.below(20))
                .map(|_| self.rng.char())
                .collect(),
            _ => {
                let bodies: Vec<&str> = STRINGS.split('|').collect();
                self.rng.pick(&bodies).to_string()
            }
        };
        match self.rng.chance(5) {
            true => format!("\"{body}"), // unterminated
            false => format!("\"{body}\""),
        }
    }

    fn word(&mut self) -> String {
        if self.rng.chance(85) {
            return self.rng.word(WORDS).to_string();
        }
        let len = *self.rng.pick(&[1, 2, 8, 64, 300, 5000]);
        let alphabet: Vec<char> = "abcxyz_019ßé".chars().collect();
        let w: String = (0..len).map(|_| *self.rng.pick(&alphabet)).collect();
        format!("q{w}")
    }

    /// An edit that (mostly) keeps to the grammar: a value, name or operator for another of
    /// its class, a predicate nested or chained, the statement wrapped.
    fn grammatical_edit(&mut self, toks: &mut Vec<Tok>) {
        match self.rng.below(10) {
            0..=4 => self.swap_in_class(toks),
            5 => {
                let i = self.index(toks, Some(Kind::Number));
                if toks.get(i).is_some_and(|t| t.kind == Kind::Number) {
                    toks[i] = tok(Kind::Number, self.number());
                }
            }
            6 => {
                let i = self.index(toks, Some(Kind::Str));
                if toks.get(i).is_some_and(|t| t.kind == Kind::Str) {
                    toks[i] = tok(Kind::Str, self.string());
                }
            }
            7 => self.nest(toks, &[2, 8, 63, 64]),
            8 => self.chain(toks),
            _ => self.wrap(toks),
        }
    }

    /// Replace a name, function, unit, operator, keyword or source by another of its class.
    fn swap_in_class(&mut self, toks: &mut Vec<Tok>) {
        // Twelve tokens at random are candidates (looking at all of them is slow).
        let solid = (0..toks.len()).filter(|&i| toks[i].kind != Kind::Space);
        let solid: Vec<usize> = solid.collect();
        let mut spots: Vec<(usize, usize, &'static str)> = Vec::new();
        for _ in 0..solid.len().min(12) {
            let i = *self.rng.pick(&solid);
            let t = &toks[i];
            let prev = toks[..i].iter().rev().find(|t| t.kind != Kind::Space);
            let class = CLASSES.iter().find(|c| {
                is_word(t, c) || (t.kind == Kind::Punct && split(c).contains(&t.text.as_str()))
            });
            if let Some(class) = class {
                spots.push((i, i + 1, class));
            } else if is_word(t, "entity metric") && prev.is_some_and(|p| is_word(p, "FROM")) {
                let end = (i..toks.len()).find(|&j| toks[j].text == ")");
                spots.push((i, end.map_or(toks.len(), |j| j + 1), SOURCES));
            } else if t.kind == Kind::Word
                && !is_reserved(&t.text)
                && !prev.is_some_and(|p| p.text == "." || p.text == "(")
            {
                // a field path: word ( "." word )*
                let mut end = i + 1;
                while end + 1 < toks.len()
                    && toks[end].text == "."
                    && toks[end + 1].kind == Kind::Word
                {
                    end += 2;
                }
                spots.push((i, end, FIELDS));
            }
        }
        if spots.is_empty() {
            return;
        }
        let (start, end, class) = *self.rng.pick(&spots);
        let kind = toks[start].kind;
        toks.splice(start..end, [tok(kind, self.rng.word(class))]);
    }

    /// Nest the predicate of a WHERE, HAVING or WHEN `depth` parentheses or NOTs deep.
    fn nest(&mut self, toks: &mut Vec<Tok>, depths: &[usize]) {
        let depth = *self.rng.pick(depths);
        let Some((i, end)) = self.clause(toks, PREDICATES) else {
            let at = self.rng.below(toks.len() + 1);
            toks.insert(at, tok(Kind::Punct, "(".repeat(depth)));
            return;
        };
        if self.rng.chance(70) {
            toks.insert(end, tok(Kind::Punct, format!("{} ", ")".repeat(depth))));
            toks.insert(i + 1, tok(Kind::Punct, format!(" {}", "(".repeat(depth))));
        } else {
            toks.insert(i + 1, tok(Kind::Word, " NOT".repeat(depth)));
        }
    }

    /// Chain the predicate of a WHERE, HAVING or WHEN with itself by AND or OR.
    fn chain(&mut self, toks: &mut Vec<Tok>) {
        let Some((i, end)) = self.clause(toks, PREDICATES) else {
            return;
        };
        let size: usize = toks[i + 1..end].iter().map(|t| t.text.len() + 5).sum();
        let times = (*self.rng.pick(&[2, 3, 10, 30]))
            .min(MAX_LEN / size.max(1))
            .max(1);
        let link = tok(Kind::Word, *self.rng.pick(&[" AND ", " OR "]));
        let mut chained = vec![toks[i].clone(), tok(Kind::Space, " ")];
        for k in 0..times {
            if k > 0 {
                chained.push(link.clone());
            }
            chained.extend_from_slice(&toks[i + 1..end]);
        }
        chained.push(tok(Kind::Space, " "));
        toks.splice(i..end, chained);
    }

    /// Wrap the statement in WATCH or EXPLAIN.
    fn wrap(&mut self, toks: &mut Vec<Tok>) {
        let (before, after) = *self.rng.pick(&[
            ("WATCH (", ") WHEN count > 0"),
            (
                "WATCH (",
                ") WHEN count >= 1 AND properties.platform = \"web\"",
            ),
            (
                "WATCH (",
                ") WHEN sum(properties.amount) > 10 OR NOT count < 2",
            ),
            ("EXPLAIN ", ""),
            ("EXPLAIN ANALYZE ", ""),
            ("EXPLAIN EXPLAIN ", ""),
        ]);
        toks.insert(0, tok(Kind::Punct, before));
        toks.push(tok(Kind::Punct, after));
    }

    /// Any edit, most of which break the grammar.
    fn edit(&mut self, toks: &mut Vec<Tok>) {
        let len = toks.len();
        if len == 0 {
            toks.push(tok(Kind::Word, self.word()));
            return;
        }
        match self.rng.below(100) {
            // delete one to three tokens
            0..=9 => {
                let i = self.index(toks, None);
                let n = (1 + self.rng.below(3)).min(len - i);
                toks.drain(i..i + n);
            }
            // duplicate a token
            10..=15 => {
                let i = self.index(toks, None);
                let copy = toks[i].clone();
                toks.splice(i + 1..i + 1, [tok(Kind::Space, " "), copy]);
            }
            // swap two tokens
            16..=21 => {
                let (a, b) = (self.index(toks, None), self.index(toks, None));
                toks.swap(a, b);
            }
            // splice tokens from another seed, inserted or replacing some
            22..=31 => {
                let other = self.rng.pick(&self.seeds).clone();
                if other.is_empty() {
                    return;
                }
                let a = self.rng.below(other.len());
                let b = (a + 1 + self.rng.below(8)).min(other.len());
                let at = self.rng.below(len + 1);
                let cut = match self.rng.chance(50) {
                    true => (1 + self.rng.below(4)).min(len - at),
                    false => 0,
                };
                let mut piece = vec![tok(Kind::Space, " ")];
                piece.extend_from_slice(&other[a..b]);
                piece.push(tok(Kind::Space, " "));
                toks.splice(at..at + cut, piece);
            }
            // a number becomes huge, negative, zero, fractional or not a number
            32..=43 => {
                let i = self.index(toks, Some(Kind::Number));
                toks[i] = tok(Kind::Number, self.number());
            }
            // a string becomes empty, Unicode, very long, a bad timestamp or unterminated
            44..=55 => {
                let i = self.index(toks, Some(Kind::Str));
                toks[i] = tok(Kind::Str, self.string());
            }
            // a word becomes another word, keyword or name
            56..=67 => {
                let i = self.index(toks, Some(Kind::Word));
                toks[i] = tok(Kind::Word, self.word());
            }
            // an operator becomes another one
            68..=72 => {
                let i = self.index(toks, Some(Kind::Punct));
                toks[i] = tok(Kind::Punct, self.rng.word(PUNCTS));
            }
            // random characters, inside a token or between tokens
            73..=80 => {
                let i = self.rng.below(len);
                let s: String = (0..1 + self.rng.below(8))
                    .map(|_| self.rng.char())
                    .collect();
                let cuts: Vec<usize> = toks[i].text.char_indices().map(|(o, _)| o).collect();
                let at = if cuts.is_empty() {
                    0
                } else {
                    *self.rng.pick(&cuts)
                };
                toks[i].text.insert_str(at, &s);
            }
            // truncate at a random character
            81..=86 => {
                let i = self.rng.below(len);
                toks.truncate(i + 1);
                let cuts: Vec<usize> = toks[i].text.char_indices().map(|(o, _)| o).collect();
                if !cuts.is_empty() {
                    let at = *self.rng.pick(&cuts);
                    toks[i].text.truncate(at);
                }
            }
            // nest a predicate deeply, or chain it with itself
            87..=90 => self.nest(toks, &[2, 8, 63, 64, 65, 300, 2_000]),
            91 | 92 => self.chain(toks),
            // repeat a clause
            93..=95 => {
                let Some((i, end)) = self.clause(toks, CLAUSES) else {
                    return;
                };
                let clause: Vec<Tok> = toks[i..end].to_vec();
                let size: usize = clause.iter().map(|t| t.text.len() + 1).sum();
                let times = (*self.rng.pick(&[1, 1, 2, 30]))
                    .min(MAX_LEN / size.max(1))
                    .max(1);
                let mut copies = Vec::new();
                for _ in 0..times {
                    copies.push(tok(Kind::Space, " "));
                    copies.extend_from_slice(&clause);
                }
                toks.splice(end..end, copies);
            }
            96 | 97 => self.wrap(toks),
            // change a word's case
            _ => {
                let i = self.index(toks, Some(Kind::Word));
                let t = &toks[i].text;
                toks[i].text = match self.rng.below(3) {
                    0 => t.to_uppercase(),
                    1 => t.to_lowercase(),
                    _ => t
                        .chars()
                        .enumerate()
                        .map(|(k, c)| match k % 2 {
                            0 => c.to_ascii_uppercase(),
                            _ => c.to_ascii_lowercase(),
                        })
                        .collect(),
                };
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The dataset: the tiny one (built as tests/golden.rs builds it), with the sample's entities,
// relationships and metrics and a small object store, so that every statement kind can bind.

fn fuzz_dataset() -> tempfile::TempDir {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path();
    let tiny = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/tiny");
    std::fs::copy(tiny.join("signalql.toml"), dir.join("signalql.toml")).unwrap();
    signalql::catalog::ingest::ingest_events(dir, &[tiny.join("events.jsonl")]).unwrap();
    crate::common::write_tiny_side_tables(&tiny, dir);
    let sample = signalql::sample_dataset();
    for table in ["entities", "relationships"] {
        let src = std::fs::canonicalize(sample.join(table)).unwrap();
        std::os::unix::fs::symlink(src, dir.join(table)).unwrap();
    }
    std::fs::copy(sample.join("metrics.toml"), dir.join("metrics.toml")).unwrap();
    crate::common::ingest_docs(
        dir,
        &[
            (
                "storage.md",
                "# Object storage\n\nObjects are Parquet revisions. See [notes](notes.md).\n",
            ),
            (
                "notes.md",
                "# Notes\n\nParquet footers and pricing strategy.\n",
            ),
        ],
    );
    root
}

// ---------------------------------------------------------------------------------------------
// The stages and their checks.

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Stage {
    Parse,
    Format,
    Bind,
    Lower,
    Unparse,
    Execute,
}

/// Bind and lower a statement as far as the engine plans it without running it: an analytics
/// statement to its DataFusion plan (a WATCH: its query with its condition, as each poll
/// plans it; an EXPLAIN: the statement it explains), CONTEXT FOR to its packing plan, EXPLAIN
/// CONTEXT to its store lookup, DESCRIBE to its catalog records.
async fn lower(engine: &Engine, statement: Statement) -> signalql::Result<Option<LogicalPlan>> {
    Ok(match statement {
        Statement::ContextTask(q) => Some(engine.lower_context(&q).await?),
        Statement::ExplainContext(q) => {
            let explained = engine.answer_statement(Statement::ExplainContext(q)).await;
            explained.map(|_| None)?
        }
        Statement::Describe(q) => engine.describe_envelope(&q).await.map(|_| None)?,
        Statement::Watch(w) => {
            let mut q = *w.query;
            q.having = Some(match q.having.take() {
                Some(h) => BoolExpr::And(Box::new(h), Box::new(w.when)),
                None => w.when,
            });
            let retrieve = Statement::Retrieve(q);
            Some(engine.lower_statement(&retrieve).await?.plan)
        }
        Statement::Explain(e) => Box::pin(lower(engine, *e.statement)).await?,
        other => Some(engine.lower_statement(&other).await?.plan),
    })
}

/// Run a statement as the CLI does (a WATCH: one poll). `Ok(Some(problem))` is an envelope
/// that breaks its own shape.
async fn execute(
    engine: &Engine,
    text: &str,
    statement: Statement,
) -> signalql::Result<Option<String>> {
    let envelope = match statement {
        Statement::Watch(w) => Watcher::new(w)
            .poll(engine)
            .await?
            .alert
            .map(|a| a.envelope),
        _ => match engine.answer(text).await? {
            Answer::Envelope(e) => Some(*e),
            Answer::Bundle(_) | Answer::Explanation(_) | Answer::Plan(_) => None,
        },
    };
    let Some(env) = envelope else {
        return Ok(None);
    };
    let width = env.columns.len();
    if let Some(row) = env.rows.iter().find(|r| r.len() != width) {
        return Ok(Some(format!(
            "a row of {} values under {width} columns",
            row.len()
        )));
    }
    if env.rows.len() as u64 > engine.limits().max_result_rows {
        return Ok(Some(format!(
            "{} rows, above max_result_rows",
            env.rows.len()
        )));
    }
    Ok(None)
}

/// Why `span` is not where it says it is in `text` (columns count characters), if it is not.
fn span_problem(text: &str, span: &Span) -> Option<String> {
    if span.start > span.end || span.end > text.len() {
        let len = text.len();
        return Some(format!(
            "span {}..{} outside {len} bytes",
            span.start, span.end
        ));
    }
    if !text.is_char_boundary(span.start) || !text.is_char_boundary(span.end) {
        return Some(format!(
            "span {}..{} splits a character",
            span.start, span.end
        ));
    }
    let before = &text[..span.start];
    let line = before.matches('\n').count() as u32 + 1;
    let column = before.rsplit('\n').next().unwrap_or("").chars().count() as u32 + 1;
    ((span.line, span.column) != (line, column)).then(|| {
        let (l, c, b) = (span.line, span.column, span.start);
        format!("says {l}:{c} but byte {b} is at {line}:{column}")
    })
}

/// What is wrong with an error a stage returned, if anything: an undocumented code, or a
/// parse error without a position or (from the parser) at a wrong one.
fn error_problem(stage: Stage, text: &str, e: &Error) -> Option<String> {
    let code = e.code();
    if !DOCUMENTED.contains(&code) {
        return Some(format!("{code}: {}", e.message));
    }
    if code != "parse_error" {
        return None;
    }
    let Some(span) = &e.span else {
        return Some(format!("parse_error without a position: {}", e.message));
    };
    let wrong = span_problem(text, span).filter(|_| stage == Stage::Parse)?;
    Some(format!(
        "parse_error position wrong ({wrong}): {}",
        e.message
    ))
}

/// The last panic on the fuzzing thread, with its location (a payload has none).
static LAST_PANIC: Mutex<Option<String>> = Mutex::new(None);

/// Panics on this thread are recorded in [`LAST_PANIC`] instead of printed (there may be
/// thousands); other threads' go to the hook there was.
fn record_panics_of_this_thread() {
    let me = std::thread::current().id();
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if std::thread::current().id() != me {
            return previous(info);
        }
        let payload = info.payload();
        let message = (payload.downcast_ref::<&str>().map(|s| s.to_string()))
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a non-string payload".into());
        let at = info
            .location()
            .map(|l| format!("{}:{}", l.file(), l.line()));
        let text = format!("{message} at {}", at.unwrap_or_default());
        *LAST_PANIC.lock().unwrap_or_else(|e| e.into_inner()) = Some(text);
    }));
}

/// `f()`, or the panic it raised.
fn guarded<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    std::panic::catch_unwind(AssertUnwindSafe(f)).map_err(|_| {
        let last = LAST_PANIC.lock().unwrap_or_else(|e| e.into_inner()).take();
        last.unwrap_or_else(|| "a panic".into())
    })
}

/// A failure: its stage, a kind that groups failures of one cause, and the detail.
#[derive(Debug, Clone)]
struct Failure {
    stage: Stage,
    kind: String,
    detail: String,
}

impl Failure {
    fn panic(stage: Stage, p: String) -> Failure {
        // Grouped by where it happened, without the message's query-specific values.
        let kind = match p.rsplit_once(" at ") {
            Some((_, at)) => format!("panic at {at}"),
            None => format!("panic: {p}"),
        };
        Failure {
            stage,
            kind,
            detail: p,
        }
    }
    fn problem(stage: Stage, p: String) -> Failure {
        let kind = p.split_whitespace().take(4).collect::<Vec<_>>().join(" ");
        Failure {
            stage,
            kind,
            detail: p,
        }
    }
}

#[derive(Default)]
struct Counts {
    queries: usize,
    parsed: usize,
    reparsed: usize,
    reparse_failed: usize,
    bound: usize,
    lowered: usize,
    /// The lowerings run (the other statements printed as one lowered before).
    distinct: usize,
    unparsed: usize,
    executed: usize,
    /// Successful lowerings per statement kind (for the execution sample).
    lowered_kind: BTreeMap<&'static str, usize>,
    errors: BTreeMap<(Stage, &'static str), usize>,
    spanned: BTreeMap<(Stage, &'static str), usize>,
    time: BTreeMap<Stage, Duration>,
}

impl Counts {
    fn error(&mut self, stage: Stage, e: &Error) {
        *self.errors.entry((stage, e.code())).or_default() += 1;
        if e.span.is_some() {
            *self.spanned.entry((stage, e.code())).or_default() += 1;
        }
    }

    /// The figures as one line of `key=value` pairs for the parent to add up.
    fn print(&self, what: &str) {
        let mut line = format!(
            "{FIGURES}{what}: queries={} parsed={} reparsed={} reparse_failed={} bound={} \
             lowered={} distinct={} unparsed={} executed={}",
            self.queries,
            self.parsed,
            self.reparsed,
            self.reparse_failed,
            self.bound,
            self.lowered,
            self.distinct,
            self.unparsed,
            self.executed,
        );
        for (kind, n) in &self.lowered_kind {
            line.push_str(&format!(" kind.{}={n}", kind.replace(' ', "_")));
        }
        for ((stage, code), n) in &self.errors {
            let spanned = self.spanned.get(&(*stage, code)).copied().unwrap_or(0);
            line.push_str(&format!(
                " error.{stage:?}.{code}={n} spanned.{stage:?}.{code}={spanned}"
            ));
        }
        for (stage, t) in &self.time {
            line.push_str(&format!(" ms.{stage:?}={}", t.as_millis()));
        }
        eprintln!("{line}");
    }
}

fn kind_name(s: &Statement) -> &'static str {
    match s {
        Statement::Retrieve(_) => "retrieve",
        Statement::Funnel(_) => "funnel",
        Statement::Sequence(_) => "sequence",
        Statement::Watch(_) => "watch",
        Statement::Describe(_) => "describe",
        Statement::ContextTask(_) => "context",
        Statement::ExplainContext(_) => "explain context",
        Statement::FindObject(_) => "find object",
        Statement::Explain(_) => "explain",
    }
}

struct Fuzzer {
    engine: Engine,
    rt: tokio::runtime::Runtime,
    /// What lowering gave for each canonical text so far: lowering is deterministic, so a
    /// statement printed as one before is not lowered again.
    lowered: HashMap<String, Result<(), Error>>,
}

impl Fuzzer {
    /// Parse, bind and lower `text`, and execute it when `sample` says so for the how-many-th
    /// query of its kind that lowers; the first failure ends it.
    fn run(
        &mut self,
        text: &str,
        counts: &mut Counts,
        sample: impl Fn(usize) -> bool,
    ) -> Result<(), Failure> {
        counts.queries += 1;

        let mut clock = Instant::now();
        let mut lap = |counts: &mut Counts, stage| {
            *counts.time.entry(stage).or_default() += clock.elapsed();
            clock = Instant::now();
        };
        let parsed = guarded(|| signalql::parse(text));
        lap(counts, Stage::Parse);
        let statement = match parsed.map_err(|p| Failure::panic(Stage::Parse, p))? {
            Ok(s) => s,
            Err(e) => {
                counts.error(Stage::Parse, &e);
                return match error_problem(Stage::Parse, text, &e) {
                    Some(p) => Err(Failure::problem(Stage::Parse, p)),
                    None => Ok(()),
                };
            }
        };
        counts.parsed += 1;
        let canonical = guarded(|| statement.to_string());
        let canonical = canonical.map_err(|p| Failure::panic(Stage::Format, p))?;
        // Every tenth canonical text is parsed again (the round-trip tests hold the rest).
        if counts.parsed.is_multiple_of(10) {
            counts.reparsed += 1;
            if !matches!(guarded(|| signalql::parse(&canonical)), Ok(Ok(_))) {
                counts.reparse_failed += 1;
            }
        }
        lap(counts, Stage::Format);
        // The binder's static part (what the statement reads); the rest binds as it lowers.
        guarded(|| signalql_engine::needs(&statement))
            .map_err(|p| Failure::panic(Stage::Bind, p))?;
        counts.bound += 1;
        lap(counts, Stage::Bind);
        let kind = kind_name(&statement);
        let lowered = match self.lowered.get(&canonical) {
            Some(done) => done.clone().map(|()| None),
            None => {
                let lowered = guarded(|| self.rt.block_on(lower(&self.engine, statement.clone())));
                let lowered = lowered.map_err(|p| Failure::panic(Stage::Lower, p))?;
                let done = lowered.as_ref().map(drop).map_err(Error::clone);
                self.lowered.insert(canonical, done);
                counts.distinct += 1;
                lowered
            }
        };
        lap(counts, Stage::Lower);
        let plan = match lowered {
            Ok(plan) => plan,
            Err(e) => {
                counts.error(Stage::Lower, &e);
                return match error_problem(Stage::Lower, text, &e) {
                    Some(p) => Err(Failure::problem(Stage::Lower, p)),
                    None => Ok(()),
                };
            }
        };
        counts.lowered += 1;
        if let Some(plan) = plan.filter(|_| counts.lowered.is_multiple_of(UNPARSE_EVERY)) {
            let sql = guarded(|| signalql_engine::plan_sql(&plan));
            sql.map_err(|p| Failure::panic(Stage::Unparse, p))?.ok();
            counts.unparsed += 1;
            lap(counts, Stage::Unparse);
        }
        let n = counts.lowered_kind.entry(kind).or_default();
        *n += 1;
        if !sample(*n) {
            return Ok(());
        }
        counts.executed += 1;
        let started = Instant::now();
        let run = guarded(|| {
            let run = execute(&self.engine, text, statement);
            self.rt
                .block_on(async { tokio::time::timeout(FINISH_WITHIN, run).await })
        });
        let took = started.elapsed();
        lap(counts, Stage::Execute);
        // Tokio's timeout ends only a run that yields; one that does not is timed here.
        let answered = match run.map_err(|p| Failure::panic(Stage::Execute, p))? {
            Ok(answered) if took <= FINISH_WITHIN => answered,
            _ => {
                let detail = format!("ran {took:.1?} under timeout_seconds = {TIMEOUT_SECONDS}");
                return Err(Failure::problem(Stage::Execute, detail));
            }
        };
        match answered {
            Ok(None) => Ok(()),
            Ok(Some(p)) => Err(Failure::problem(Stage::Execute, p)),
            Err(e) => {
                counts.error(Stage::Execute, &e);
                match error_problem(Stage::Execute, text, &e) {
                    Some(p) => Err(Failure::problem(Stage::Execute, p)),
                    None => Ok(()),
                }
            }
        }
    }

    /// The shortest query found by deleting tokens from `text` that still fails so, before
    /// `deadline`.
    fn shrink(&mut self, text: &str, failure: &Failure, deadline: Instant) -> String {
        let mut still_fails = |t: &str| {
            let execute = failure.stage == Stage::Execute;
            let mut scratch = Counts::default();
            matches!(self.run(t, &mut scratch, |_| execute),
                Err(f) if f.stage == failure.stage && f.kind == failure.kind)
        };
        // Units: each token with the whitespace after it (so that what is left stays spaced).
        let mut units: Vec<String> = Vec::new();
        for t in tokenize(text) {
            match units.last_mut() {
                Some(last) if t.kind == Kind::Space => last.push_str(&t.text),
                _ => units.push(t.text),
            }
        }
        // Runs of n/2, n/4, …, 4, 3, 2, 1 units, at every position, until none can go.
        let mut chunks: Vec<usize> = std::iter::successors(Some(units.len() / 2), |c| Some(c / 2))
            .take_while(|&c| c > 3)
            .chain([3, 2, 1])
            .collect();
        chunks.dedup();
        let mut removed = true;
        while removed && Instant::now() < deadline {
            removed = false;
            for &chunk in &chunks {
                let mut i = 0;
                while i + chunk <= units.len() && Instant::now() < deadline {
                    let mut candidate = units.clone();
                    candidate.drain(i..i + chunk);
                    if still_fails(&candidate.concat()) {
                        (units, removed) = (candidate, true);
                    } else {
                        i += 1;
                    }
                }
            }
        }
        units.concat().trim_end().to_string()
    }
}

/// A child's work: the queries `i >= start` with `i % WORKERS == worker`, over the dataset at
/// `root`, the number of the one in progress kept in the file `progress`.
fn fuzz(root: &Path, progress: &Path, worker: usize, start: usize) {
    let options = EngineOptions {
        limits: Limits {
            timeout_seconds: TIMEOUT_SECONDS,
            ..Limits::default()
        },
        ..Default::default()
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut fuzzer = Fuzzer {
        engine: Engine::open_with(root, options).unwrap(),
        rt,
        lowered: HashMap::new(),
    };
    let progress = std::fs::OpenOptions::new()
        .write(true)
        .open(progress)
        .unwrap();
    record_panics_of_this_thread();

    let (stress, seeds) = (stress_queries().len(), seed_queries().len());
    assert!(seeds >= 150, "only {seeds} seed queries");
    let [mut stress_counts, mut seed_counts, mut counts] = Default::default();
    // Per (stage, kind): how many queries failed so, the shortest of them and its failure.
    let mut failures: BTreeMap<(Stage, String), (usize, String, Failure)> = BTreeMap::new();
    let mine = queries().enumerate().skip(start);
    for (i, q) in mine.filter(|(i, _)| i % WORKERS == worker) {
        progress.write_at(&(i as u64).to_le_bytes(), 0).unwrap();
        let result = match i {
            _ if i < stress => fuzzer.run(&q, &mut stress_counts, |_| q.len() < 10_000),
            _ if i < stress + seeds => fuzzer.run(&q, &mut seed_counts, |_| false),
            _ => fuzzer.run(&q, &mut counts, |n| n % EXECUTE_EVERY == 1),
        };
        if let Err(f) = result {
            let entry = failures.entry((f.stage, f.kind.clone()));
            let entry = entry.or_insert_with(|| (0, q.clone(), f.clone()));
            entry.0 += 1;
            if q.len() < entry.1.len() {
                (entry.1, entry.2) = (q, f);
            }
        }
    }
    stress_counts.print("stress queries");
    seed_counts.print("seeds");
    counts.print("mutations");

    let (seen, parsed) = (seed_counts.queries, seed_counts.parsed);
    let mut report = String::new();
    let deadline = Instant::now() + SHRINK_BUDGET;
    for ((stage, kind), (n, shortest, failure)) in failures.iter().take(20) {
        // A query that ran too long is not shrunk: each try would run as long.
        let minimal = match failure.detail.starts_with("ran ") {
            true => shortest.clone(),
            false => fuzzer.shrink(shortest, failure, deadline),
        };
        report.push_str(&format!(
            "\n{stage:?}: {kind} ({n} queries)\n  minimal: {:?}\n  shortest: {:?}\n  {}\n",
            preview(&minimal),
            preview(shortest),
            failure.detail
        ));
    }
    let _ = std::panic::take_hook(); // the default hook again, for the verdict
    assert!(
        failures.is_empty(),
        "worker {worker}: {} kinds of failure:{report}",
        failures.len()
    );
    assert!(
        parsed * 10 >= seen * 9,
        "only {parsed} of {seen} seeds parse"
    );
}
