//! The one execution path: every plan the engine runs (analytics, funnels, DESCRIBE's scans,
//! FIND OBJECT, CONTEXT FOR's packing plan, content and evidence reads, the data span of a
//! bucketed query, entity-type checks) goes through [`Executor::run_in`], which applies the
//! timeout and the session's memory pool, maps their errors to `limit_exceeded`, and counts
//! what the scans read. The result-row cap of a lowered query is applied by
//! [`Executor::run_lowered`].

use std::sync::Arc;
use std::time::Duration;

use datafusion::arrow::array::RecordBatch;
use datafusion::common::tree_node::TreeNode;
use datafusion::datasource::{MemTable, provider_as_source};
use datafusion::execution::memory_pool::MemoryConsumer;
use datafusion::execution::runtime_env::RuntimeEnv;
use datafusion::execution::{SessionState, TaskContext};
use datafusion::logical_expr::{LogicalPlan, LogicalPlanBuilder};
use datafusion::physical_plan::{ExecutionPlan, collect};
use datafusion::prelude::{DataFrame, SessionContext};

use signalql_catalog::failpoint;

use crate::error::{Error, ErrorKind, Result};
use crate::kept::KeptPlan;
use crate::limits::Limits;
use crate::lower::{Lowered, Stage};
use crate::progress::scan_metrics;

/// The timeout of an [`Executor::untimed`] executor: tokio waits past the end of time
/// (`Instant` overflow) as for ever.
const UNTIMED: u64 = u64::MAX;

/// Runs plans in one session under one set of limits.
pub struct Executor {
    ctx: SessionContext,
    limits: Limits,
    /// The dataset root, to name a file that fails a scan relative to it.
    root: Option<signalql_catalog::Root>,
}

/// An executed plan: its batches, the physical plan that made them, and what its scans read.
pub struct Executed {
    pub batches: Vec<RecordBatch>,
    pub physical: Arc<dyn ExecutionPlan>,
    /// Rows and bytes read by the plan's scans.
    pub scanned: (u64, u64),
    /// Whether its scans ran on a cluster's workers (docs/cluster.md): what they read is
    /// counted there, not in `scanned`.
    pub on_workers: bool,
}

/// What an analytics answer carries: the envelope with its rows as JSON values, or (an
/// Arrow answer: `Engine::query_batches`) the envelope without them, its rows being the
/// batches alone (`envelope::with_rows` writes them when asked).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowsAs {
    Json,
    ArrowOnly,
}

/// An executed lowered query, cut to its row cap.
pub struct Capped {
    pub executed: Executed,
    /// The rows the envelope shows (at most the cap).
    pub rows: usize,
    /// More rows than the cap were produced.
    pub truncated: bool,
}

impl Executor {
    pub fn new(ctx: SessionContext, limits: Limits) -> Self {
        Executor {
            ctx,
            limits,
            root: None,
        }
    }

    /// Names files relative to `root` in errors.
    pub fn with_root(mut self, root: signalql_catalog::Root) -> Self {
        self.root = Some(root);
        self
    }

    pub fn session(&self) -> &SessionContext {
        &self.ctx
    }

    /// This executor for a maintenance job rather than a statement (the resident context
    /// index's snapshot that `signalql index` and `ingest objects` write): its plans run
    /// without the statement timeout, which bounds what a caller waits for, not how long an
    /// index of a million objects takes to build on a busy machine (docs/index.md, "Snapshot
    /// files"). The memory pool still bounds them.
    pub fn untimed(&self) -> Executor {
        Executor {
            ctx: self.ctx.clone(),
            limits: Limits {
                timeout_seconds: UNTIMED,
                ..self.limits.clone()
            },
            root: self.root.clone(),
        }
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Run `plan` in the engine's session.
    pub async fn run(&self, plan: &LogicalPlan) -> Result<Executed> {
        self.run_in(&self.ctx.state(), plan).await
    }

    /// The batches of a data frame, run in its own session state (a copy of the engine's with
    /// other settings, such as CONTEXT FOR's content lookup with filter pushdown; same runtime
    /// and pool).
    pub async fn collect(&self, frame: DataFrame) -> Result<Vec<RecordBatch>> {
        let (state, plan) = frame.into_parts();
        Ok(self.run_in(&state, &plan).await?.batches)
    }

    /// The one function that runs a plan: plans it physically, runs it under the timeout in
    /// the state's runtime (whose memory pool bounds it) and counts what its scans read. A
    /// timeout of 0 seconds leaves no time at all: every plan fails with the timeout error.
    pub async fn run_in(&self, state: &SessionState, plan: &LogicalPlan) -> Result<Executed> {
        self.has_time()?;
        let planning = std::time::Instant::now();
        let physical = physical_plan(state, plan).await?;
        self.execute(state.task_ctx(), plan, physical, None, planning)
            .await
    }

    /// [`Executor::run`] for a statement with a [`KeptPlan`]: a copy of the kept physical
    /// plan when there is one, else the plan made now, kept for the next run when it can be
    /// (engine/src/kept.rs). A recorded run (a trace, EXPLAIN ANALYZE) is planned as always.
    pub async fn run_kept(&self, plan: &LogicalPlan, kept: &KeptPlan) -> Result<Executed> {
        if crate::record::active() {
            return self.run(plan).await;
        }
        self.has_time()?;
        let planning = std::time::Instant::now();
        if let Some(copy) = kept.copy() {
            return self
                .execute(self.ctx.task_ctx(), plan, copy, None, planning)
                .await;
        }
        let state = self.ctx.state();
        let physical = physical_plan(&state, plan).await?;
        let keep = (!kept.planned()).then_some(kept);
        self.execute(state.task_ctx(), plan, physical, keep, planning)
            .await
    }

    /// Runs `physical`, planned from `plan` since `planning`, in `task` (of the state it was
    /// planned in) under the timeout; keeps a copy in `keep` first.
    async fn execute(
        &self,
        task: Arc<TaskContext>,
        plan: &LogicalPlan,
        physical: Arc<dyn ExecutionPlan>,
        keep: Option<&KeptPlan>,
        planning: std::time::Instant,
    ) -> Result<Executed> {
        let plan_ms = planning.elapsed().as_secs_f64() * 1e3;
        crate::record::stage("plan", planning, Default::default());
        if crate::record::dry() {
            crate::record::run(crate::record::Run {
                physical: Arc::clone(&physical),
                plan_ms,
                execute_ms: 0.0,
                rows: 0,
                bytes: 0,
                logical: Some(plan.clone()),
            });
            return Ok(Executed {
                batches: Vec::new(),
                physical,
                scanned: (0, 0),
                on_workers: false,
            });
        }
        if let Some(kept) = keep {
            kept.keep(&physical);
        }
        crate::progress::started(&physical);
        failpoint_execute();
        failpoint_slow().await;
        let running = std::time::Instant::now();
        let runtime = task.runtime_env();
        let run = collect(Arc::clone(&physical), task);
        let secs = self.limits.timeout_seconds;
        let batches = match tokio::time::timeout(Duration::from_secs(secs), run).await {
            Ok(Ok(b)) => b,
            Ok(Err(e)) => return Err(self.failed(&runtime, physical.as_ref(), e).await),
            Err(_) => return Err(self.timed_out()),
        };
        let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
        let bytes: usize = batches.iter().map(RecordBatch::get_array_memory_size).sum();
        let scanned = record_run(&physical, plan_ms, running, rows as u64, bytes as u64, None);
        let on_workers = physical
            .exists(|n| Ok(n.is::<datafusion_distributed::DistributedExec>()))
            .unwrap_or(false);
        Ok(Executed {
            batches,
            physical,
            scanned,
            on_workers,
        })
    }

    /// The timeout error when the limits leave no time at all (`timeout_seconds = 0`): every
    /// plan fails with it, before it is planned.
    fn has_time(&self) -> Result<()> {
        match self.limits.timeout_seconds {
            0 => Err(self.timed_out()),
            _ => Ok(()),
        }
    }

    /// The error of a plan that ran past `timeout_seconds`.
    fn timed_out(&self) -> Error {
        let secs = self.limits.timeout_seconds;
        Error::limit("timeout_seconds", secs, secs.saturating_add(1))
            .with_help("the query ran longer than the timeout; narrow the window or filter")
    }

    /// Run `plan` in the engine's session and hand `f` each batch as it comes, under the
    /// timeout and with [`run_in`](Self::run_in)'s errors, for a reader that keeps less than
    /// the plan's rows (the resident context index's build). Not recorded as a run.
    pub async fn for_each_batch(
        &self,
        plan: &LogicalPlan,
        mut f: impl FnMut(&RecordBatch) -> Result<()>,
    ) -> Result<()> {
        let state = self.ctx.state();
        let physical = physical_plan(&state, plan).await?;
        self.stream_while(&state, &physical, |b| f(b).map(|()| true))
            .await
            .map(drop)
    }

    /// Run `plan` in the engine's session, handing `f` each batch as it comes until `f`
    /// answers `false`: then the plan's streams are dropped and its scans read no further.
    /// Recorded as a run with what was read (EXPLAIN ANALYZE shows it). Returns whether every
    /// batch was read; a dry recording (plans made, not run) reads none and returns `false`.
    pub async fn run_while(
        &self,
        plan: &LogicalPlan,
        f: impl FnMut(&RecordBatch) -> Result<bool>,
    ) -> Result<bool> {
        let state = self.ctx.state();
        let planning = std::time::Instant::now();
        let physical = physical_plan(&state, plan).await?;
        let plan_ms = planning.elapsed().as_secs_f64() * 1e3;
        crate::record::stage("plan", planning, Default::default());
        let running = std::time::Instant::now();
        let (whole, rows, bytes) = match crate::record::dry() {
            true => (false, 0, 0),
            false => self.stream_while(&state, &physical, f).await?,
        };
        let logical = crate::record::dry().then(|| plan.clone());
        record_run(&physical, plan_ms, running, rows, bytes, logical);
        Ok(whole)
    }

    /// Stream `physical` under the timeout, handing `f` each batch until it answers `false`;
    /// whether every batch was read, and the rows and Arrow bytes handed.
    async fn stream_while(
        &self,
        state: &SessionState,
        physical: &Arc<dyn ExecutionPlan>,
        mut f: impl FnMut(&RecordBatch) -> Result<bool>,
    ) -> Result<(bool, u64, u64)> {
        use futures::StreamExt;
        self.has_time()?;
        let secs = self.limits.timeout_seconds;
        crate::progress::started(physical);
        let run = async {
            let mut stream =
                datafusion::physical_plan::execute_stream(Arc::clone(physical), state.task_ctx())?;
            let (mut rows, mut bytes) = (0u64, 0u64);
            while let Some(batch) = stream.next().await {
                match batch {
                    Ok(b) => {
                        rows += b.num_rows() as u64;
                        bytes += b.get_array_memory_size() as u64;
                        if !f(&b)? {
                            return Ok((false, rows, bytes));
                        }
                    }
                    Err(e) => {
                        return Err(self.failed(state.runtime_env(), physical.as_ref(), e).await);
                    }
                }
            }
            Ok((true, rows, bytes))
        };
        match tokio::time::timeout(Duration::from_secs(secs), run).await {
            Ok(r) => r,
            Err(_) => Err(self.timed_out()),
        }
    }

    /// The error of a plan that failed while running: a file's bad data names the file, a
    /// memory-pool error the configured limit.
    async fn failed(
        &self,
        runtime: &RuntimeEnv,
        physical: &dyn ExecutionPlan,
        e: datafusion::error::DataFusionError,
    ) -> Error {
        match is_file_data_error(&e) {
            true => self.name_bad_file(runtime, physical, e).await,
            false => self.fill_limits(Error::from(e)),
        }
    }

    /// Run a lowered query (staged when it says so) and cut it to its row cap.
    /// With `kept`, a statement the plan cache holds: its physical plan is kept and run
    /// again ([`Executor::run_kept`]).
    pub async fn run_lowered(
        &self,
        lowered: &Lowered,
        kept: Option<&KeptPlan>,
        rows_as: RowsAs,
    ) -> Result<Capped> {
        let executed = match (&lowered.staged, kept) {
            (None, Some(kept)) => self.run_kept(&lowered.plan, kept).await?,
            (None, None) => self.run(&lowered.plan).await?,
            (Some(staged), _) => self.run_staged(staged.as_ref()).await?,
        };
        let total: usize = executed.batches.iter().map(|b| b.num_rows()).sum();
        let cap = lowered.row_cap.map_or(usize::MAX, |c| c as usize);
        let rows = total.min(cap);
        self.check_answer_size(&executed.batches, rows, rows_as)?;
        Ok(Capped {
            executed,
            rows,
            truncated: total > cap,
        })
    }

    /// The answer is built and printed in this process: its first `rows` rows as JSON values
    /// in the envelope, then as text (an Arrow answer: the batches alone). With
    /// `max_result_rows` raised that can be far more than the plan held, so it must fit in
    /// the pool too, or the query is `limit_exceeded`.
    fn check_answer_size(
        &self,
        batches: &[RecordBatch],
        rows: usize,
        rows_as: RowsAs,
    ) -> Result<()> {
        let bytes = answer_bytes(batches, rows, rows_as);
        let pool = &self.ctx.runtime_env().memory_pool;
        let gate = MemoryConsumer::new("answer").register(pool);
        if gate.try_grow(bytes).is_ok() {
            return Ok(());
        }
        let max = self.limits.query_memory_bytes;
        let mut e = Error::limit("query_memory_bytes", max, bytes as u64)
            .with_help("add a LIMIT, return fewer columns, or lower max_result_rows");
        e.message = format!(
            "the answer's {rows} rows need about {} MB to return, more than \
             query_memory_bytes ({max} bytes) allows",
            bytes >> 20
        );
        Err(e)
    }

    /// Run a query split at its aggregate: the aggregate once, then the rest of the plan over
    /// its materialised result. What was scanned is the aggregate's scans.
    async fn run_staged(&self, staged: &dyn Stage) -> Result<Executed> {
        let aggregate = self.run(staged.aggregate()).await?;
        staged.check(&aggregate.batches, self.limits.max_groups)?;
        // The materialised aggregate is held in the session's memory pool while the rest runs.
        let bytes: usize = aggregate
            .batches
            .iter()
            .map(RecordBatch::get_array_memory_size)
            .sum();
        let pool = &self.ctx.runtime_env().memory_pool;
        let held = MemoryConsumer::new("staged aggregate").register(pool);
        held.try_grow(bytes)
            .map_err(|e| self.fill_limits(Error::from(e)))?;
        let table = MemTable::try_new(aggregate.physical.schema(), vec![aggregate.batches])?;
        let scan =
            LogicalPlanBuilder::scan("aggregate", provider_as_source(Arc::new(table)), None)?
                .build()?;
        let rest = staged.finish(scan)?;
        let mut executed = self.run(&rest.plan).await?;
        executed.scanned = aggregate.scanned;
        executed.on_workers = aggregate.on_workers;
        drop(held);
        Ok(executed)
    }

    /// A memory-pool error names the configured limit and what to narrow; DataFusion's
    /// account of the pool stays in its cause.
    fn fill_limits(&self, mut err: Error) -> Error {
        if let ErrorKind::LimitExceeded { limit, max, value } = &mut err.kind
            && limit == "query_memory_bytes"
        {
            *max = self.limits.query_memory_bytes;
            *value = max.saturating_add(1);
            err.message = format!(
                "the query needs more memory than query_memory_bytes ({} bytes) allows",
                self.limits.query_memory_bytes
            );
            err = err.with_help(
                "narrow the window, filter with WHERE, group by fewer keys or a coarser \
                 BUCKET BY, or raise memory_bytes in [limits] of signalql.toml",
            );
        }
        err
    }
}

impl Executor {
    /// A scan failed on a file's data (a corrupt page, a bad encoding): find the file, by
    /// reading each file the plan scans until one fails the same way, and name it.
    async fn name_bad_file(
        &self,
        runtime: &RuntimeEnv,
        physical: &dyn ExecutionPlan,
        e: datafusion::error::DataFusionError,
    ) -> Error {
        for (url, meta) in scanned_files(physical) {
            let Ok(store) = runtime.object_store(&url) else {
                continue;
            };
            let read = std::panic::AssertUnwindSafe(read_whole(store, meta.clone()));
            let failed = match futures::FutureExt::catch_unwind(read).await {
                Ok(Ok(())) => continue,
                Ok(Err(message)) => message,
                Err(payload) => crate::error::panic_message(payload.as_ref()),
            };
            let location = format!("/{}", meta.location);
            let file = match &self.root {
                Some(root) if root.local().is_some() => root.relative(&location),
                Some(root) => root.relative(meta.location.as_ref()),
                None => location,
            };
            return Error::io(format!("cannot read {file}: {failed}"))
                .in_file(file.clone(), None)
                .caused_by(e);
        }
        // No file fails on its own: not a problem of one file's data.
        self.fill_limits(Error::from(e))
    }
}

/// Whether `e` may come from decoding a file's data: a Parquet or Arrow decoding error, or a
/// panic in a scan's task (the Parquet reader panics on some corrupt metadata).
fn is_file_data_error(e: &datafusion::error::DataFusionError) -> bool {
    use datafusion::arrow::error::ArrowError;
    use datafusion::error::DataFusionError as D;
    use datafusion::parquet::errors::ParquetError;
    let mut at: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = at {
        if err.downcast_ref::<ParquetError>().is_some()
            || matches!(err.downcast_ref::<D>(), Some(D::ParquetError(_)))
            || matches!(
                err.downcast_ref::<ArrowError>(),
                Some(ArrowError::ParquetError(_))
            )
            || matches!(err.downcast_ref::<D>(), Some(D::ExecutionJoin(_)))
            || err
                .downcast_ref::<tokio::task::JoinError>()
                .is_some_and(|j| j.is_panic())
            || err.to_string().contains("panicked")
        {
            return true;
        }
        at = err.source();
    }
    false
}

/// The files the scans of `plan` read: (store, object).
fn scanned_files(
    plan: &dyn ExecutionPlan,
) -> Vec<(
    datafusion::execution::object_store::ObjectStoreUrl,
    object_store::ObjectMeta,
)> {
    crate::footprint::file_scans(plan)
        .into_iter()
        .flat_map(|config| {
            config.file_groups.iter().flat_map(move |group| {
                group
                    .iter()
                    .map(move |f| (config.object_store_url.clone(), f.object_meta.clone()))
            })
        })
        .collect()
}

/// Reads every row of a Parquet file; the error is why it cannot be read. (parquet 59
/// deprecates `ParquetObjectReader` for hand-written readers; on this error path, reading a
/// file once, it is still the simplest correct one.)
#[allow(deprecated)]
async fn read_whole(
    store: Arc<dyn object_store::ObjectStore>,
    meta: object_store::ObjectMeta,
) -> std::result::Result<(), String> {
    use datafusion::parquet::arrow::ParquetRecordBatchStreamBuilder;
    use datafusion::parquet::arrow::arrow_reader::ArrowReaderOptions;
    use datafusion::parquet::arrow::async_reader::ParquetObjectReader;
    use datafusion::parquet::file::metadata::PageIndexPolicy;
    use futures::StreamExt;
    let reader = ParquetObjectReader::new(store, meta.location).with_file_size(meta.size);
    // With its page index, which the scans read (not when the table is opened: the
    // footer alone is read then, `read_footer_alone`), so a damaged one is found here too.
    let options = ArrowReaderOptions::new().with_page_index_policy(PageIndexPolicy::Optional);
    let mut stream = ParquetRecordBatchStreamBuilder::new_with_options(reader, options)
        .await
        .map_err(|e| e.to_string())?
        .build()
        .map_err(|e| e.to_string())?;
    while let Some(batch) = stream.next().await {
        batch.map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Records a run of `physical` (planned in `plan_ms`, running since `running`) that handed
/// `rows` rows of `bytes` Arrow bytes: the `execute` stage with what its scans read, and the
/// run. Returns the rows and bytes its scans read.
fn record_run(
    physical: &Arc<dyn ExecutionPlan>,
    plan_ms: f64,
    running: std::time::Instant,
    rows: u64,
    bytes: u64,
    logical: Option<LogicalPlan>,
) -> (u64, u64) {
    let scanned = scan_metrics(physical.as_ref());
    let mut attrs = serde_json::Map::new();
    attrs.insert("rows".into(), rows.into());
    attrs.insert("scanned_rows".into(), scanned.0.into());
    attrs.insert("scanned_bytes".into(), scanned.1.into());
    crate::record::stage("execute", running, attrs);
    crate::record::run(crate::record::Run {
        physical: Arc::clone(physical),
        plan_ms,
        execute_ms: running.elapsed().as_secs_f64() * 1e3,
        rows,
        bytes,
        logical,
    });
    scanned
}

/// Rows and bytes the scans of every plan in `runs` read.
pub(crate) fn scanned_by(runs: &[crate::record::Run]) -> (u64, u64) {
    runs.iter()
        .map(|r| scan_metrics(r.physical.as_ref()))
        .fold((0, 0), |(a, b), (c, d)| (a + c, b + d))
}

/// DataFusion 55's optimizer rule that moves field accesses (`get_field`) down to the scans.
/// On some plans it fails ("Schema contains qualified field name events.__datafusion_extracted_2
/// and unqualified field name __datafusion_extracted_2"): a filter and a grouping reading
/// struct fields of a table joined twice (v0.1 `traits.K` with `signal()`), found by
/// tests/it/query_fuzz.rs. The plan builders dodge the shapes known to trip it (views, kept
/// columns, the numeric-key probe pass through internal names); any other plan it fails on is
/// planned again without the rule, which only moves work, never changes an answer.
const LEAF_PUSHDOWN: &str = "push_down_leaf_projections";

/// The physical plan of `plan` in `state`: DataFusion's, or when its [`LEAF_PUSHDOWN`] rule
/// fails on the plan, the one made without that rule.
pub(crate) async fn physical_plan(
    state: &SessionState,
    plan: &LogicalPlan,
) -> Result<Arc<dyn datafusion::physical_plan::ExecutionPlan>> {
    match state.create_physical_plan(plan).await {
        Ok(p) => Ok(p),
        Err(e) if e.to_string().contains(LEAF_PUSHDOWN) => {
            // Boxed: a deeply nested statement plans near the thread's stack limit, and this
            // rare second planning must not grow every run's future.
            Box::pin(plan_without_leaf_pushdown(state, plan)).await
        }
        Err(e) => Err(e.into()),
    }
}

/// `plan` planned in `state` without [`LEAF_PUSHDOWN`].
async fn plan_without_leaf_pushdown(
    state: &SessionState,
    plan: &LogicalPlan,
) -> Result<Arc<dyn datafusion::physical_plan::ExecutionPlan>> {
    let rules: Vec<_> = state
        .optimizers()
        .iter()
        .filter(|r| r.name() != LEAF_PUSHDOWN)
        .cloned()
        .collect();
    let state = datafusion::execution::SessionStateBuilder::new_from_existing(state.clone())
        .with_optimizer_rules(rules)
        .build();
    Ok(state.create_physical_plan(plan).await?)
}

/// A test hook ([`signalql_catalog::failpoint`]): with `SIGNALQL_FAILPOINT=execute` the
/// process's first query panics here, after planning. Tests use it to see a panic inside a
/// query caught at the engine's boundary: the CLI exits 1 with `internal_error`, the MCP server
/// answers the call with it and serves the next one.
fn failpoint_execute() {
    static FIRED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if failpoint::is("execute") && !FIRED.swap(true, std::sync::atomic::Ordering::SeqCst) {
        panic!("failpoint execute");
    }
}

/// Test hooks ([`signalql_catalog::failpoint`]): with `SIGNALQL_FAILPOINT=slow_execute` every
/// plan waits a second and a half before it runs, so a test can have requests overlap; with
/// `hold_execute:PATH` every plan waits while the file PATH exists (at most a minute), so that
/// a test can interrupt a statement that is running (the shell's Ctrl-C, a client hanging up).
async fn failpoint_slow() {
    if failpoint::is("slow_execute") {
        tokio::time::sleep(Duration::from_millis(1500)).await;
    }
    if let Some(path) = failpoint::argument("hold_execute") {
        eprintln!("failpoint: holding a statement");
        let until = std::time::Instant::now() + Duration::from_secs(60);
        while std::path::Path::new(path).exists() && std::time::Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// What returning the first `rows` rows of `batches` takes, estimated: the Arrow data three
/// times (the batches, the envelope's strings, the printed text) and 96 bytes a cell for the
/// envelope's JSON values (measured: 2 M rows × 6 columns took about 1.4 GB in all); for an
/// Arrow answer, the batches' share alone (nothing else is made of them).
fn answer_bytes(batches: &[RecordBatch], rows: usize, rows_as: RowsAs) -> usize {
    let total: usize = batches.iter().map(RecordBatch::num_rows).sum();
    if total == 0 {
        return 0;
    }
    let arrow: usize = batches.iter().map(RecordBatch::get_array_memory_size).sum();
    let columns = batches.first().map_or(0, RecordBatch::num_columns);
    let share = (arrow as f64 * rows as f64 / total as f64) as usize;
    match rows_as {
        RowsAs::ArrowOnly => share,
        RowsAs::Json => share.saturating_mul(3) + rows.saturating_mul(columns).saturating_mul(96),
    }
}
