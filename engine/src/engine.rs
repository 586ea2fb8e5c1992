//! `Engine`: the facade over the engine's modules. A statement is parsed once ([`crate::syntax`]),
//! bound against the dataset's catalog ([`crate::bind`]), lowered to a DataFusion plan
//! ([`crate::lower`]), run on the one execution path ([`crate::execute`]) and answered as an
//! envelope ([`crate::envelope`]), a DESCRIBE ([`crate::describe`]) or a context bundle
//! ([`crate::context::build`]).

use std::sync::Arc;

use chrono::{DateTime, Utc};
use datafusion::arrow::array::RecordBatch;
use datafusion::logical_expr::{LogicalPlan, LogicalPlanBuilder};
use datafusion::prelude::SessionContext;
use signalql_catalog::Dataset;

use crate::bind::Binder;
use crate::catalog::{ApplicationCatalog, Catalog, noting};
use crate::context::{Bundle, Explanation};
use crate::describe::Describer;
use crate::envelope::{Envelope, RowsAs};
use crate::error::{Error, ErrorKind, Result};
use crate::execute::Executor;
use crate::lower::funnel::{lower_funnel, lower_sequence};
use crate::lower::retrieve::lower_retrieve;
use crate::lower::time::parse_timestamp;
use crate::lower::{Limits, Lowered};
use crate::plan_cache::{Outcome, PlanCacheKey, SourceFingerprint};
use crate::record::{staged, staged_sync};
use crate::syntax::ast::{ContextQuery, DescribeQuery, RetrieveQuery, Source, Statement};
use crate::syntax::{Params, parse, parse_with};

/// How an engine evaluates queries.
#[derive(Debug, Clone, Default)]
pub struct EngineOptions {
    /// `T` for queries without AS OF (overrides the dataset's configured `now`).
    pub now: Option<DateTime<Utc>>,
    pub limits: Limits,
    /// Where S3 is (`--s3-endpoint`); the rest comes from the AWS environment variables.
    pub storage: signalql_catalog::StorageOptions,
    /// The principal every statement runs as, when `policy.toml` governs the dataset
    /// (`--principal`; docs/policy.md). `None`: the policy's `default` principal.
    pub principal: Option<String>,
    /// The plan cache of a long-running server, shared by its engines; `None`: plans are made
    /// for every statement (docs/runtime.md).
    pub plan_cache: Option<Arc<PlanCache>>,
    /// Write a trace of every run (`--trace`; also `[trace] enabled` in signalql.toml).
    pub trace: bool,
    /// Where the engine answers, for its traces: `cli`, `shell`, `bench`, `mcp`, `serve`;
    /// empty: `api`.
    pub surface: &'static str,
    /// The workers statements run on (`--workers`; docs/cluster.md). Empty: `[cluster]
    /// workers` of signalql.toml, and without them this process.
    pub workers: Vec<String>,
    /// Bytes of files per task of a distributed scan stage; `None`: `[cluster] bytes_per_task`,
    /// else 16 MiB.
    pub bytes_per_task: Option<u64>,
    /// The resident context index of a long-running process, shared by its engines
    /// (engine/src/context/resident.rs; the one-shot CLI's reads snapshot files only);
    /// `None`: statements read the object tables each time.
    pub resident: Option<Arc<Resident>>,
}

/// What a statement returns.
#[derive(Debug, Clone)]
pub enum Answer {
    Envelope(Box<Envelope>),
    Bundle(Box<Bundle>),
    Explanation(Box<Explanation>),
    /// `EXPLAIN q`: the plan, nothing run.
    Plan(Box<crate::explain::Explained>),
}

/// A SignalQL engine over one dataset root.
pub struct Engine {
    catalog: Box<dyn Catalog>,
    exec: Executor,
    now: Option<DateTime<Utc>>,
    plan_cache: Option<Arc<PlanCache>>,
    resident: Option<Arc<Resident>>,
    runtime: Runtime,
}

pub use crate::context::resident::Resident;

/// The plan cache of a server's engines (engine/src/plan_cache.rs).
pub type PlanCache = crate::plan_cache::PlanCache<Compiled>;

/// A compiled query: its AST, logical plan and the SQL DataFusion's unparser gives for it.
pub struct Compiled {
    pub statement: Statement,
    pub lowered: Lowered,
    pub sql: Result<String>,
    /// Files the tables it reads were opened without (`skip_invalid_files`).
    pub skipped: Vec<signalql_catalog::SkippedFile>,
    /// Optional tables it looked for and the dataset does not have (its plan depends on
    /// their absence).
    pub absent: Vec<String>,
    /// A table it reads is filtered or masked for the caller (policy.toml).
    pub access_filtered: bool,
    /// The tables it reads: name, files, bytes.
    pub sources: Vec<crate::catalog::Opened>,
    /// Its physical plan, kept to run again while the plan cache holds it (engine/src/kept.rs).
    pub kept: crate::kept::KeptPlan,
}

impl Engine {
    /// Open the dataset at `root` with default options.
    pub fn open(root: impl AsRef<std::path::Path>) -> Result<Engine> {
        Engine::open_with(
            root,
            EngineOptions {
                resident: Some(Default::default()),
                ..Default::default()
            },
        )
    }

    /// Run SignalQL on a context the application built: its configuration, object stores and
    /// tables. A table registered in `ctx` under a SignalQL table name (`events`, `signals`,
    /// `entities`, …) is read instead of `root/<table>/`; `root` still holds `signalql.toml`,
    /// `metrics.toml` and the context store. signalql's functions are registered into `ctx`
    /// too, so the application's own SQL can call them.
    pub fn with_session(
        ctx: SessionContext,
        root: impl AsRef<std::path::Path>,
        options: EngineOptions,
    ) -> Result<Engine> {
        let dataset = Dataset::open_with(root, &options.storage)?;
        let (access, limits) = governed(&dataset, &options)?;
        let session = crate::session::from_application(&ctx);
        let root = dataset.root().clone();
        let runtime = Runtime::of(&dataset, &options, access.as_deref());
        Ok(Engine {
            catalog: policed(Box::new(ApplicationCatalog::new(dataset)), access),
            exec: Executor::new(session, limits).with_root(root),
            now: options.now,
            plan_cache: options.plan_cache,
            resident: options.resident,
            runtime,
        })
    }

    pub fn open_with(root: impl AsRef<std::path::Path>, options: EngineOptions) -> Result<Engine> {
        let dataset = Dataset::open_with(root, &options.storage)?;
        let (access, limits) = governed(&dataset, &options)?;
        let session = crate::session::for_dataset(
            &dataset,
            &limits,
            &options.workers,
            options.bytes_per_task,
        )?;
        let root = dataset.root().clone();
        let runtime = Runtime::of(&dataset, &options, access.as_deref());
        Ok(Engine {
            catalog: policed(Box::new(dataset), access),
            exec: Executor::new(session, limits).with_root(root),
            now: options.now,
            plan_cache: options.plan_cache,
            resident: options.resident,
            runtime,
        })
    }

    /// Writes the resident context index's snapshot file of the object tables as they are
    /// now (docs/index.md), so a new process answers FIND OBJECT from it without reading the
    /// tables; `None` when no generation can stand for them (a mapped table, tied records, a
    /// restricted principal).
    pub async fn write_resident_snapshot(
        &self,
    ) -> Result<Option<crate::context::resident::Snapshot>> {
        let own = Resident::default();
        let resident = self.resident.as_deref().unwrap_or(&own);
        resident
            .write_snapshot(self.session(), self.catalog.as_ref(), &self.exec.untimed())
            .await
    }

    /// The principal statements run as, when a policy governs the dataset.
    pub fn principal(&self) -> Option<&str> {
        self.catalog.access().map(|a| a.principal.as_str())
    }

    pub fn dataset(&self) -> &Dataset {
        self.catalog.dataset()
    }

    pub fn session(&self) -> &SessionContext {
        self.exec.session()
    }

    pub fn limits(&self) -> &Limits {
        self.exec.limits()
    }

    /// `T` for a query without AS OF: `--now`, else the dataset's `now`, else the clock.
    pub fn now(&self) -> Result<DateTime<Utc>> {
        if let Some(t) = self.now {
            return Ok(t);
        }
        Ok(self.dataset().default_now()?.unwrap_or_else(Utc::now))
    }

    fn binder(&self) -> Result<Binder<'_>> {
        Ok(Binder {
            catalog: self.catalog.as_ref(),
            exec: &self.exec,
            now: self.now()?,
        })
    }

    fn describer(&self) -> Result<Describer<'_>> {
        Ok(Describer {
            catalog: self.catalog.as_ref(),
            exec: &self.exec,
            now: self.now()?,
        })
    }

    /// Parse and lower `text` without running it.
    pub async fn compile(&self, text: &str) -> Result<Compiled> {
        self.compile_statement(parse(text)?).await
    }

    /// Lower a parsed statement without running it, with the SQL the plan unparses to.
    pub async fn compile_statement(&self, statement: Statement) -> Result<Compiled> {
        // Boxed, as the statements of answer_statement are.
        let (lowered, noted) = noting(Box::pin(self.lower_statement(&statement))).await;
        let lowered = lowered?;
        let sql = crate::unparse::plan_sql(&lowered.plan);
        Ok(Compiled {
            statement,
            lowered,
            sql,
            skipped: noted.skipped,
            access_filtered: noted.access_filtered,
            sources: noted.opened,
            absent: noted.absent,
            kept: Default::default(),
        })
    }

    /// A parsed statement's DataFusion logical plan (binding the tables it reads), without
    /// running it and without unparsing it to SQL.
    pub async fn lower_statement(&self, statement: &Statement) -> Result<Lowered> {
        let limits = self.limits();
        Ok(match statement {
            Statement::Retrieve(q) => self.lower_retrieve(q).await?,
            Statement::Funnel(q) => {
                let bound = staged("bind", self.binder()?.funnel(q)).await?;
                staged_sync("lower", || {
                    lower_funnel(q, &bound.view, &bound.input(limits))
                })?
            }
            Statement::Sequence(q) => {
                let bound = staged("bind", self.binder()?.sequence(q)).await?;
                staged_sync("lower", || {
                    lower_sequence(q, &bound.view, &bound.input(limits))
                })?
            }
            Statement::FindObject(q) => {
                let t = match &q.as_of {
                    Some(ts) => parse_timestamp(ts)?,
                    None => self.now()?,
                };
                let resident = self.resident.as_deref().map(|r| (r, &self.exec));
                let find = crate::context::find::plan(
                    self.session(),
                    self.catalog.as_ref(),
                    resident,
                    q,
                    t,
                    limits,
                );
                let mut l = staged("bind", find).await.map_err(|e| e.at(q.span))?;
                l.as_of = t;
                l
            }
            Statement::ContextTask(q) => {
                return Err(not_an_envelope("CONTEXT FOR").at(q.span));
            }
            Statement::ExplainContext(q) => {
                return Err(not_an_envelope("EXPLAIN CONTEXT").at(q.span));
            }
            Statement::Describe(q) => {
                return Err(Error::type_error(
                    "DESCRIBE reads the catalog and has no DataFusion plan to show",
                )
                .with_help("run it with `signalql query` or `signalql describe`")
                .at(q.span));
            }
            Statement::Watch(q) => return Err(watch_is_a_loop().at(q.span)),
            Statement::Explain(_) => return Err(not_an_envelope("EXPLAIN")),
        })
    }

    /// A retrieve query; the metrics it names add their records to `metadata.metrics`, and
    /// `FROM metric(m)` names its value column `metric_value`.
    async fn lower_retrieve(&self, q: &RetrieveQuery) -> Result<Lowered> {
        let bound = staged("bind", self.binder()?.retrieve(q)).await?;
        let mut lowered = staged_sync("lower", || {
            lower_retrieve(&bound.view, &bound.input(self.limits()))
        })?;
        let registry = &bound.registry;
        for name in &bound.metrics {
            for m in registry.closure(name) {
                let info = registry.info(m);
                if !lowered.metrics.contains(&info) {
                    lowered.metrics.push(info);
                }
            }
        }
        if let Source::Metric(name) = &q.source {
            crate::lower::metric::rename_value_column(&mut lowered, name)?;
        }
        Ok(lowered)
    }

    /// `EXPLAIN q`: the plan of the statement, nothing run; `EXPLAIN ANALYZE q`: the plan, then
    /// the statement run, with what it did (engine/src/explain.rs).
    pub async fn explain(
        &self,
        q: &crate::syntax::ast::ExplainQuery,
    ) -> Result<crate::explain::Explained> {
        self.traced(&q.to_string(), self.explain_untraced(q)).await
    }

    async fn explain_untraced(
        &self,
        q: &crate::syntax::ast::ExplainQuery,
    ) -> Result<crate::explain::Explained> {
        let statement = planned(q.statement.as_ref());
        // Boxed, as the statements of answer_statement are.
        let mut explained = Box::pin(self.plan_of(&statement)).await?;
        if q.analyze {
            Box::pin(self.analyze(statement, &mut explained)).await?;
        }
        Ok(explained)
    }

    /// The EXPLAIN object of `statement`, made without running it.
    async fn plan_of(&self, statement: &Statement) -> Result<crate::explain::Explained> {
        use crate::explain::{Explained, sources_and_scan_estimate};
        let state = self.session().state();
        let show = |p: &LogicalPlan| p.display_indent().to_string();
        let (logical, physical, sql, noted) = match statement {
            Statement::ExplainContext(_) | Statement::Explain(_) => {
                return Err(Error::type_error(
                    "EXPLAIN shows the plan of a query, FUNNEL, FIND, DESCRIBE or CONTEXT FOR; \
                     EXPLAIN CONTEXT reads the context store and has none",
                ));
            }
            Statement::Describe(d) => {
                // DESCRIBE's plans are made, not run (each gives no rows); plans that depend
                // on the rows of an earlier one (the types of DESCRIBE entity(…)) are not shown.
                let dry = crate::record::Recording {
                    dry: true,
                    ..Default::default()
                };
                let ((described, noted), rec) =
                    crate::record::recording_with(dry, noting(Box::pin(self.describe_envelope(d))))
                        .await;
                // Dry plans give no rows, so DESCRIBE entity(T) cannot tell here whether T
                // exists; every other error is the statement's.
                if rec.runs.is_empty()
                    || !matches!(d.target, crate::syntax::ast::DescribeTarget::Entity(_))
                {
                    described?;
                }
                let logical = match rec.runs.len() {
                    0 => format!("{statement} reads the catalog's records and runs no plan"),
                    _ => rec
                        .runs
                        .iter()
                        .enumerate()
                        .map(|(i, r)| {
                            let text = r.logical.as_ref().map(show).unwrap_or_default();
                            format!("-- plan {i}\n{text}")
                        })
                        .collect::<Vec<_>>()
                        .join("\n\n"),
                };
                let physical = rec.runs.into_iter().map(|r| r.physical).collect();
                (logical, physical, None, noted)
            }
            Statement::ContextTask(c) => {
                let (plan, noted) = noting(Box::pin(self.lower_context(c))).await;
                let plan = plan?;
                let physical = crate::execute::physical_plan(&state, &plan).await?;
                (show(&plan), vec![physical], None, noted)
            }
            s => {
                let c = Box::pin(self.compile_statement(s.clone())).await?;
                let physical = crate::execute::physical_plan(&state, &c.lowered.plan).await?;
                let noted = crate::catalog::Noted {
                    skipped: c.skipped,
                    access_filtered: c.access_filtered,
                    opened: c.sources,
                    absent: c.absent,
                };
                (show(&c.lowered.plan), vec![physical], c.sql.ok(), noted)
            }
        };
        let filtered = noted.access_filtered;
        let (sources, mut estimate) =
            sources_and_scan_estimate(&state, &physical, &noted.opened, filtered).await?;
        if let [one] = physical.as_slice()
            && !filtered
        {
            (estimate.rows, estimate.bytes) = crate::explain::result_estimate(one.as_ref())?;
        }
        let physical_plan = physical
            .iter()
            .map(|p| {
                datafusion::physical_plan::displayable(p.as_ref())
                    .indent(true)
                    .to_string()
            })
            .collect::<Vec<_>>()
            .join("\n");
        Ok(Explained {
            spec_version: crate::forms::runtime_forms(),
            canonical_query: statement.to_string(),
            sources,
            logical_plan: logical,
            physical_plan,
            sql,
            estimate,
            limits: self.limits().to_json(),
            operators: None,
            pruning: None,
            actual: None,
            unknown: Default::default(),
        })
    }

    /// Runs `statement` and adds to its EXPLAIN object what the run did.
    async fn analyze(
        &self,
        statement: Statement,
        explained: &mut crate::explain::Explained,
    ) -> Result<()> {
        let peak = crate::record::PeakWatch::start(self.session());
        let start = std::time::Instant::now();
        // Boxed: answering a statement may be answering an EXPLAIN.
        let ((answer, noted), rec) =
            crate::record::recording(noting(Box::pin(self.answer_statement(statement)))).await;
        let answer = answer?;
        let elapsed_ms = start.elapsed().as_secs_f64() * 1e3;
        let rows = answer.rows();
        let filtered = noted.access_filtered;
        let scanned = crate::execute::scanned_by(&rec.runs);
        let known = |v: u64| Some(v).filter(|_| !filtered);
        explained.actual = Some(crate::explain::Actual {
            rows,
            bytes: rec.runs.iter().map(|r| r.bytes).sum(),
            scanned_rows: known(scanned.0),
            scanned_bytes: known(scanned.1),
            elapsed_ms,
            plan_ms: rec.runs.iter().map(|r| r.plan_ms).sum(),
            execute_ms: rec.runs.iter().map(|r| r.execute_ms).sum(),
            peak_memory_bytes: peak.peak(),
            unknown: Default::default(),
        });
        let mut operators = crate::explain::operators(&rec.runs);
        if filtered {
            // An operator below a policy's filter counts rows the caller may not see, and so
            // do the scans' pruning figures.
            for o in &mut operators {
                o.rows = None;
                o.bytes = None;
            }
        }
        explained.operators = Some(operators);
        explained.pruning = (!filtered).then(|| crate::explain::pruning(&rec.runs));
        Ok(())
    }

    /// The physical plan DataFusion makes for a compiled query, as indented text.
    pub async fn physical_plan_text(&self, compiled: &Compiled) -> Result<String> {
        let physical =
            crate::execute::physical_plan(&self.session().state(), &compiled.lowered.plan).await?;
        Ok(datafusion::physical_plan::displayable(physical.as_ref())
            .indent(true)
            .to_string())
    }

    /// The distinct `entity_type`s of an entities table, sorted.
    pub async fn entity_types(&self, table: &signalql_catalog::TableInfo) -> Result<Vec<String>> {
        crate::bind::entity_types(&self.exec, table).await
    }

    /// Run any statement: analytics give an envelope, `CONTEXT FOR` a bundle (computed and kept
    /// in the context store), `EXPLAIN CONTEXT` the stored explanation.
    pub async fn answer(&self, text: &str) -> Result<Answer> {
        self.answer_with(text, &Params::new()).await
    }

    /// [`Engine::answer`] of a statement whose `$name` parameters take their values from
    /// `params` (docs/params.md).
    pub async fn answer_with(&self, text: &str, params: &Params) -> Result<Answer> {
        self.traced_with(text, params, async {
            let statement = staged_sync("parse", || parse_with(text, params))?;
            self.answer_statement(statement).await
        })
        .await
    }

    /// [`Engine::answer`] for a parsed statement.
    pub async fn answer_statement(&self, statement: Statement) -> Result<Answer> {
        // Each kind's future is boxed: they are large, and a debug build's poll of a future
        // holding them inline takes a stack frame of their size (the 2 MiB of a test thread).
        match statement {
            Statement::ContextTask(q) => {
                Ok(Answer::Bundle(Box::new(Box::pin(self.bundle(&q)).await?)))
            }
            Statement::Explain(q) => Ok(Answer::Plan(Box::new(
                Box::pin(self.explain_untraced(&q)).await?,
            ))),
            Statement::ExplainContext(e) => Ok(Answer::Explanation(Box::new(
                Box::pin(self.stored_explanation(&e.address))
                    .await
                    .map_err(|err| err.at(e.span))?,
            ))),
            statement => Ok(Answer::Envelope(Box::new(
                Box::pin(self.query_statement(statement)).await?,
            ))),
        }
    }

    /// Compute the bundle for `CONTEXT FOR "task" …` and keep it in the context store (the first
    /// record for an address wins; the returned bundle is the one computed now).
    pub async fn context(&self, q: &ContextQuery) -> Result<Bundle> {
        self.traced(&q.to_string(), self.bundle(q)).await
    }

    async fn bundle(&self, q: &ContextQuery) -> Result<Bundle> {
        let build = crate::context::build::bundle(
            self.catalog.as_ref(),
            &self.exec,
            self.resident.as_deref(),
            q,
            self.now()?,
        );
        let (bundle, noted) = noting(build).await;
        let mut bundle = bundle?;
        bundle.metadata.skipped_files = noted.skipped;
        bundle.metadata.access_filtered = noted.access_filtered;
        Ok(bundle)
    }

    /// The logical plan behind `CONTEXT FOR` (opening the object tables; nothing is run): one
    /// plan whose result is the packing decisions. Bench W9 times this as W8's lowering.
    pub async fn lower_context(&self, q: &ContextQuery) -> Result<LogicalPlan> {
        let now = self.now()?;
        Ok(
            crate::context::build::plan(self.catalog.as_ref(), &self.exec, q, now)
                .await?
                .0,
        )
    }

    /// `EXPLAIN CONTEXT context://…` from the context store; `unknown_context` when absent.
    /// For a caller a policy restricts, only a bundle whose every item it may see, with the
    /// rejections it may see (docs/policy.md).
    pub async fn explain_context(&self, address: &str) -> Result<Explanation> {
        let text = format!("EXPLAIN CONTEXT {address}");
        self.traced(&text, self.stored_explanation(address)).await
    }

    /// The bundle stored at `address` (the `context://` resource of the MCP server), shown to
    /// the caller as EXPLAIN CONTEXT shows its explanation: for a caller a policy restricts,
    /// only when everything its items name is visible, else `unknown_context`.
    pub async fn stored_bundle(&self, address: &str) -> Result<Bundle> {
        let record = crate::context::store::get(self.dataset().context_store(), address)?;
        if self.catalog.access().is_some_and(|a| !a.sees_everything()) {
            let x = record.explanation.clone();
            crate::context::visible::explanation(self.catalog.as_ref(), &self.exec, address, x)
                .await?;
        }
        Ok(record.bundle)
    }

    async fn stored_explanation(&self, address: &str) -> Result<Explanation> {
        let record = crate::context::store::get(self.dataset().context_store(), address)?;
        let x = crate::context::build::explanation_at_pin(
            self.catalog.unpoliced(),
            &self.exec,
            self.resident.as_deref(),
            record,
        )
        .await?;
        if self.catalog.access().is_none_or(|a| a.sees_everything()) {
            return Ok(x);
        }
        crate::context::visible::explanation(self.catalog.as_ref(), &self.exec, address, x).await
    }

    /// The envelope of a DESCRIBE: one row per catalog record (docs/describe.md).
    pub async fn describe_envelope(&self, q: &DescribeQuery) -> Result<Envelope> {
        let describer = self.describer()?;
        let (envelope, noted) = noting(describer.envelope(&q.target)).await;
        let mut envelope = envelope.map_err(|e| e.at(q.span))?;
        envelope.metadata.skipped_files = noted.skipped;
        envelope.metadata.access_filtered = noted.access_filtered;
        Ok(envelope)
    }

    /// Every catalog record of the dataset: events, entities, relationships, signals and
    /// metrics, skipping the tables it does not have.
    pub async fn describe_all(&self) -> Result<Envelope> {
        self.traced("DESCRIBE", async { self.describer()?.all().await })
            .await
    }

    /// The catalog records of one DESCRIBE target.
    pub async fn describe(
        &self,
        target: &crate::syntax::ast::DescribeTarget,
    ) -> Result<Vec<crate::describe::Record>> {
        self.describer()?.describe(target).await
    }

    /// Run one query and return its envelope.
    pub async fn query(&self, text: &str) -> Result<Envelope> {
        self.traced(text, async {
            let statement = staged_sync("parse", || parse(text))?;
            self.query_statement(statement).await
        })
        .await
    }

    /// [`Engine::query_statement`], traced as [`Engine::query`] is (WATCH's polls).
    pub async fn query_parsed(&self, statement: Statement) -> Result<Envelope> {
        let text = statement.to_string();
        self.traced(&text, self.query_statement(statement)).await
    }

    /// [`Engine::query`] for a parsed statement.
    pub async fn query_statement(&self, statement: Statement) -> Result<Envelope> {
        match statement {
            Statement::Describe(d) => self.describe_envelope(&d).await,
            statement => Ok(self.batches_of(statement, RowsAs::Json).await?.0),
        }
    }

    /// Run a compiled query and build its envelope.
    pub async fn run(&self, compiled: &Compiled) -> Result<Envelope> {
        Ok(self
            .run_with_batches(compiled, false, RowsAs::Json)
            .await?
            .0)
    }

    /// Run one analytics query and answer in Arrow: its envelope and its rows as Arrow
    /// batches (the first `metadata.row_count` rows, `max_result_rows` at most, columns named
    /// as in the envelope). The envelope's `rows` are left empty: no row is made a JSON value
    /// (`envelope::with_rows` writes them from the batches). For Parquet, Arrow IPC and
    /// Python's `to_arrow()` (docs/python.md, "`query` and `Result`").
    pub async fn query_batches(&self, text: &str) -> Result<(Envelope, Vec<RecordBatch>)> {
        self.query_batches_with(text, &Params::new()).await
    }

    /// [`Engine::query_batches`] with bind parameters (docs/params.md).
    pub async fn query_batches_with(
        &self,
        text: &str,
        params: &Params,
    ) -> Result<(Envelope, Vec<RecordBatch>)> {
        self.traced_with(text, params, async {
            let statement = staged_sync("parse", || parse_with(text, params))?;
            self.batches_of(statement, RowsAs::ArrowOnly).await
        })
        .await
    }

    async fn batches_of(
        &self,
        statement: Statement,
        rows_as: RowsAs,
    ) -> Result<(Envelope, Vec<RecordBatch>)> {
        match statement {
            Statement::Watch(w) => Err(watch_is_a_loop().at(w.span)),
            statement => {
                let (compiled, outcome) = self.compile_cached(statement).await?;
                // A statement the cache holds keeps its physical plan.
                let cached = outcome != Outcome::Bypass;
                let (mut envelope, batches) =
                    self.run_with_batches(&compiled, cached, rows_as).await?;
                envelope.metadata.plan_cache = outcome.as_str().into();
                Ok((envelope, batches))
            }
        }
    }

    /// The compiled statement: from the plan cache when the engine has one and an entry for
    /// the statement whose sources are unchanged (docs/runtime.md), else compiled now.
    async fn compile_cached(&self, statement: Statement) -> Result<(Arc<Compiled>, Outcome)> {
        let Some(cache) = &self.plan_cache else {
            return Ok((
                Arc::new(Box::pin(self.compile_statement(statement)).await?),
                Outcome::Bypass,
            ));
        };
        let key = PlanCacheKey {
            canonical_query: statement.to_string(),
            policy_fingerprint: self.runtime.policy_fingerprint.clone(),
            principal: self.principal().map(str::to_string),
            limits: self.limits().to_json().to_string(),
            parser_version: crate::plan_cache::PARSER_VERSION.into(),
            planner_version: crate::plan_cache::PLANNER_VERSION.into(),
            t: crate::lower::time::rfc3339(self.now()?),
        };
        if let Some((compiled, sources)) = cache.get(&key) {
            let current = sources.iter().all(|s| {
                let now = match s.table.as_str() {
                    METRICS_FILE => Ok(Some(self.metrics_fingerprint())),
                    table => match self.dataset().fingerprint(table) {
                        Err(signalql_catalog::DatasetError::MissingTable { .. }) => {
                            Ok(Some(ABSENT.to_string()))
                        }
                        other => other,
                    },
                };
                now.is_ok_and(|f| f.as_deref() == Some(s.fingerprint.as_str()))
            });
            if current {
                cache.hit(&key);
                // What the statement would have noted opening its tables (access_filtered,
                // skipped files) holds for this run too.
                crate::catalog::note_cached(
                    &compiled.skipped,
                    compiled.access_filtered,
                    &compiled.sources,
                );
                return Ok((compiled, Outcome::Hit));
            }
            cache.remove(&key);
        }
        // Read before binding: a metrics.toml changed while the statement binds is then a
        // miss next time, never a plan over the old definitions kept as if current.
        let metrics = self.metrics_fingerprint();
        let compiled = Arc::new(Box::pin(self.compile_statement(statement)).await?);
        let uses_metrics = !compiled.lowered.metrics.is_empty();
        let sources: Option<Vec<SourceFingerprint>> = compiled
            .sources
            .iter()
            .map(|o| {
                o.fingerprint.clone().map(|fingerprint| SourceFingerprint {
                    table: o.table.clone(),
                    fingerprint,
                })
            })
            .collect();
        match sources {
            Some(mut sources) => {
                sources.extend(compiled.absent.iter().map(|table| SourceFingerprint {
                    table: table.clone(),
                    fingerprint: ABSENT.into(),
                }));
                if uses_metrics {
                    sources.push(SourceFingerprint {
                        table: METRICS_FILE.into(),
                        fingerprint: metrics,
                    });
                }
                cache.put(key, sources, Arc::clone(&compiled));
                Ok((compiled, Outcome::Miss))
            }
            None => Ok((compiled, Outcome::Bypass)),
        }
    }

    /// With `keep`, the statement's physical plan is kept in it and run again.
    async fn run_with_batches(
        &self,
        compiled: &Compiled,
        keep: bool,
        rows_as: RowsAs,
    ) -> Result<(Envelope, Vec<RecordBatch>)> {
        let lowered = &compiled.lowered;
        let kept = keep.then_some(&compiled.kept);
        let capped = match self.exec.run_lowered(lowered, kept, rows_as).await {
            Ok(c) => c,
            Err(e) => return Err(self.name_unreadable_file(e).await),
        };
        let (mut envelope, batches) = staged_sync("envelope", || {
            crate::envelope::analytics(
                lowered,
                &capped,
                compiled.sql.as_deref().ok(),
                &self.dataset().config().units,
                self.limits(),
                rows_as,
            )
        })?;
        envelope.metadata.skipped_files = compiled.skipped.clone();
        if compiled.access_filtered {
            envelope.metadata.access_filtered = true;
            // They would count the rows the caller may not see.
            envelope.metadata.cost_estimate.scanned_rows = None;
            envelope.metadata.cost_estimate.scanned_bytes = None;
        }
        Ok((envelope, batches))
    }
}

impl Engine {
    /// An error about a time value a mapped table cannot read (docs/mapping.md), with the
    /// file holding it: each file of the table is read alone until one fails the same way.
    /// Any other error is returned as it is.
    async fn name_unreadable_file(&self, err: Error) -> Error {
        use signalql_udfs::scalar::text_time::{ERROR_PREFIX, text_time};
        let message = err.to_string();
        let Some(at) = message.find(ERROR_PREFIX) else {
            return err;
        };
        // "… in column timestamp of the events table (file column ts): …"
        let rest = &message[at + ERROR_PREFIX.len()..];
        let table = rest
            .split_once(" of the ")
            .and_then(|(_, r)| r.split_once(" table"))
            .map(|(t, _)| t.to_string());
        let Some(table) = table else {
            return err;
        };
        let ctx = self.exec.session();
        let Ok(info) = self.catalog.table(ctx, &table).await else {
            return err;
        };
        let Some(view) = &info.view else {
            return err;
        };
        let columns: Vec<(String, String)> = view
            .columns
            .iter()
            .filter_map(|c| match &c.read {
                signalql_catalog::mapping::Read::Time {
                    column,
                    encoding: signalql_catalog::mapping::TimeEncoding::Text,
                } => Some((c.name.clone(), column.clone())),
                _ => None,
            })
            .collect();
        for (location, _) in &info.files {
            let Ok((provider, file)) = self.dataset().file_provider(ctx, &table, location).await
            else {
                continue;
            };
            for (_, column) in &columns {
                let plan = LogicalPlanBuilder::scan(
                    "file",
                    datafusion::datasource::provider_as_source(Arc::clone(&provider)),
                    None,
                )
                .and_then(|b| {
                    b.project(vec![
                        text_time(crate::lower::fields::column(column), column).alias("t"),
                    ])
                })
                .and_then(|b| {
                    b.aggregate(
                        Vec::<datafusion::logical_expr::Expr>::new(),
                        vec![datafusion::functions_aggregate::expr_fn::count(
                            crate::lower::fields::column("t"),
                        )],
                    )
                })
                .and_then(|b| b.build());
                let Ok(plan) = plan else { continue };
                if self.exec.run(&plan).await.is_err() {
                    return err.in_file(file, None);
                }
            }
        }
        err
    }
}

/// The statement whose plan EXPLAIN and simulate show for `statement`: a WATCH's is its
/// query's.
fn planned(statement: &Statement) -> Statement {
    match statement {
        Statement::Watch(w) => Statement::Retrieve((*w.query).clone()),
        s => s.clone(),
    }
}

/// The source a plan that names governed metrics also depends on: metrics.toml, read anew by
/// every statement that names a metric.
const METRICS_FILE: &str = "metrics.toml";

/// The fingerprint of a table a plan was made without.
const ABSENT: &str = "absent";

impl Engine {
    /// A hash of the root's metrics.toml as it is now (`absent` without one, `unreadable` when
    /// it cannot be read: then no entry matches and the statement binds again, with the error).
    fn metrics_fingerprint(&self) -> String {
        use sha2::{Digest, Sha256};
        match self.dataset().root().read(METRICS_FILE) {
            Ok(Some(bytes)) => hex::encode(&Sha256::digest(&bytes)[..16]),
            Ok(None) => ABSENT.into(),
            Err(_) => "unreadable".into(),
        }
    }
}

/// What an engine needs beside its catalog and session for the runtime seams.
struct Runtime {
    /// A hash of the principal's rules (the plan cache's policy fingerprint).
    policy_fingerprint: String,
    /// The engine's trace folder: written when `tracing`, read for simulate and statistics.
    tracer: Arc<crate::trace::Tracer>,
    tracing: bool,
    /// Where the engine answers, for its traces.
    surface: &'static str,
}

impl Runtime {
    fn of(
        dataset: &Dataset,
        options: &EngineOptions,
        access: Option<&crate::access::Access>,
    ) -> Runtime {
        let config = &dataset.config().trace;
        let (folder, rel) = match config.folder.as_deref() {
            Some(f) if std::path::Path::new(f).is_absolute() => {
                (signalql_catalog::Root::Local(f.into()), ".".to_string())
            }
            Some(f) => (dataset.root().clone(), f.trim_end_matches('/').to_string()),
            None => (dataset.root().clone(), crate::trace::FOLDER.to_string()),
        };
        Runtime {
            policy_fingerprint: access.map_or_else(|| "none".into(), |a| a.fingerprint()),
            tracer: Arc::new(crate::trace::Tracer::new(
                folder,
                rel,
                access.map(|a| a.principal.clone()),
            )),
            tracing: options.trace || config.enabled,
            surface: match options.surface {
                "" => "api",
                s => s,
            },
        }
    }
}

/// What a trace records of an answer.
pub trait Answered {
    /// Rows of the answer: the envelope's rows, the bundle's items, DESCRIBE's records.
    fn rows(&self) -> u64;
    /// Tokens of a bundle's items.
    fn tokens(&self) -> Option<u64> {
        None
    }
    /// The envelope's plan-cache outcome.
    fn plan_cache(&self) -> Option<&str> {
        None
    }
}

impl Answered for Envelope {
    fn rows(&self) -> u64 {
        self.rows.len() as u64
    }
    fn plan_cache(&self) -> Option<&str> {
        Some(&self.metadata.plan_cache)
    }
}

impl Answered for (Envelope, Vec<RecordBatch>) {
    fn rows(&self) -> u64 {
        self.0.rows()
    }
    fn plan_cache(&self) -> Option<&str> {
        self.0.plan_cache()
    }
}

impl Answered for Bundle {
    fn rows(&self) -> u64 {
        self.items.len() as u64
    }
    fn tokens(&self) -> Option<u64> {
        Some(self.metadata.budget.used)
    }
}

impl Answered for Explanation {
    fn rows(&self) -> u64 {
        self.items.len() as u64
    }
}

impl Answered for crate::explain::Explained {
    fn rows(&self) -> u64 {
        self.actual.as_ref().map_or(0, |a| a.rows)
    }
}

impl Answered for Answer {
    fn rows(&self) -> u64 {
        match self {
            Answer::Envelope(e) => e.rows(),
            Answer::Bundle(b) => b.rows(),
            Answer::Explanation(x) => x.rows(),
            Answer::Plan(p) => p.rows(),
        }
    }
    fn tokens(&self) -> Option<u64> {
        match self {
            Answer::Bundle(b) => b.tokens(),
            _ => None,
        }
    }
    fn plan_cache(&self) -> Option<&str> {
        match self {
            Answer::Envelope(e) => e.plan_cache(),
            _ => None,
        }
    }
}

impl Engine {
    /// Runs `statement` (whose text is `text`) and, when the engine traces, writes its trace
    /// (engine/src/trace.rs); when the environment names an OTLP endpoint, exports the
    /// trace's spans there (engine/src/otlp.rs). A statement inside a traced one is not
    /// traced again.
    async fn traced<T: Answered>(
        &self,
        text: &str,
        statement: impl Future<Output = Result<T>>,
    ) -> Result<T> {
        // Boxed before it is handed on: inline, the statement's large future would sit in
        // both this future and traced_with's (a debug build's 2 MiB worker stack overflowed).
        self.traced_with(text, &Params::new(), Box::pin(statement))
            .await
    }

    /// [`Engine::traced`] of a statement whose `$name` parameters take their values from
    /// `params`: the trace shows it with its values bound (what ran).
    async fn traced_with<T: Answered>(
        &self,
        text: &str,
        params: &Params,
        statement: impl Future<Output = Result<T>>,
    ) -> Result<T> {
        // Boxed: a statement's future is large, and the CLI polls it on the main thread.
        let statement = Box::pin(statement);
        let otlp = crate::otlp::exporter();
        if (!self.runtime.tracing && otlp.is_none()) || crate::record::active() {
            return statement.await;
        }
        let tracer = self.runtime.tracer.as_ref();
        let peak = crate::record::PeakWatch::start(self.session());
        let started = Utc::now();
        let start = std::time::Instant::now();
        let ((out, noted), rec) = crate::record::recording(noting(statement)).await;
        let elapsed_ms = start.elapsed().as_secs_f64() * 1e3;
        let peak = peak.peak();
        let trace = Box::pin(self.trace_of(
            (text, params),
            started,
            elapsed_ms,
            &out,
            &noted,
            rec,
            peak,
            tracer,
        ))
        .await;
        if self.runtime.tracing {
            tracer.write(&trace);
        }
        if let Some(otlp) = otlp {
            otlp.export(&trace).await;
        }
        out
    }

    #[allow(clippy::too_many_arguments)]
    async fn trace_of<T: Answered>(
        &self,
        (text, params): (&str, &Params),
        started: DateTime<Utc>,
        elapsed_ms: f64,
        out: &Result<T>,
        noted: &crate::catalog::Noted,
        rec: crate::record::Recording,
        peak_memory_bytes: Option<u64>,
        tracer: &crate::trace::Tracer,
    ) -> crate::trace::Trace {
        use crate::trace::{Span, Trace, TraceActual, TraceEstimate};
        let state = self.session().state();
        let physical: Vec<_> = rec.runs.iter().map(|r| Arc::clone(&r.physical)).collect();
        // The estimate is made from the plans' metadata (their files' footers) as EXPLAIN
        // makes it; a footer that cannot be read leaves it unknown.
        let (_, scan) =
            crate::explain::sources_and_scan_estimate(&state, &physical, &noted.opened, false)
                .await
                .unwrap_or_default();
        let rows = match physical.as_slice() {
            [one] => crate::explain::result_estimate(one.as_ref())
                .ok()
                .and_then(|(rows, _)| rows),
            _ => None,
        };
        let (interval, samples) = tracer.predict(scan.scanned_rows);
        let scanned = crate::execute::scanned_by(&rec.runs);
        let end = |start: DateTime<Utc>, ms: f64| {
            crate::lower::time::rfc3339(start + chrono::Duration::microseconds((ms * 1e3) as i64))
        };
        let mut spans = vec![Span {
            id: "s0".into(),
            parent_id: None,
            name: "statement".into(),
            start: crate::lower::time::rfc3339(started),
            end: end(started, elapsed_ms),
            elapsed_ms,
            attrs: Default::default(),
            unknown: Default::default(),
        }];
        for (i, st) in rec.stages.into_iter().enumerate() {
            spans.push(Span {
                id: format!("s{}", i + 1),
                parent_id: Some("s0".into()),
                name: st.name.into(),
                start: crate::lower::time::rfc3339(st.start),
                end: end(st.start, st.elapsed_ms),
                elapsed_ms: st.elapsed_ms,
                attrs: st.attrs,
                unknown: Default::default(),
            });
        }
        let (answer_rows, tokens, plan_cache, error) = match out {
            Ok(a) => (
                a.rows(),
                a.tokens(),
                a.plan_cache().unwrap_or("bypass").to_string(),
                None,
            ),
            Err(e) => (0, None, "bypass".into(), Some(e.to_json()["error"].clone())),
        };
        spans[0].attrs.insert("rows".into(), answer_rows.into());
        if let Some(t) = tokens {
            spans[0].attrs.insert("tokens".into(), t.into());
        }
        Trace {
            spec_version: crate::forms::runtime_forms(),
            id: crate::trace::new_id(started),
            statement: parse_with(text, params)
                .map_or_else(|_| text.to_string(), |s| s.to_string()),
            surface: self.runtime.surface.into(),
            principal: self.principal().map(str::to_string),
            started_at: crate::lower::time::rfc3339(started),
            elapsed_ms,
            plan_cache,
            spans,
            estimate: TraceEstimate {
                rows,
                scanned_rows: scan.scanned_rows,
                scanned_bytes: scan.scanned_bytes,
                elapsed_ms: interval,
                based_on_samples: samples,
                unknown: Default::default(),
            },
            actual: TraceActual {
                rows: answer_rows,
                scanned_rows: scanned.0,
                scanned_bytes: scanned.1,
                elapsed_ms,
                tokens,
                peak_memory_bytes,
                unknown: Default::default(),
            },
            error,
            unknown: Default::default(),
        }
    }

    /// The estimator statistics over the traces in the engine's trace folder (`signalql
    /// stats`); every field with zero samples when nothing was traced yet. With a resident
    /// context index (a long-running process), what it holds and its memory.
    pub async fn statistics(&self) -> crate::trace::Statistics {
        let mut stats = crate::trace::statistics(&self.runtime.tracer.traces());
        if let Some(r) = self.resident.as_deref() {
            let content_files = self.dataset().content_files().memory_bytes() as u64;
            stats.resident = Some(r.report(content_files).await);
        }
        stats
    }

    /// simulate: what `statement` would read and how long it would take, from metadata only
    /// (docs/runtime.md).
    pub async fn simulate(&self, statement: &Statement) -> Result<crate::explain::Simulation> {
        let statement = match statement {
            Statement::Explain(q) => planned(&q.statement),
            s => planned(s),
        };
        let plan = self.plan_of(&statement).await?;
        let (elapsed_ms, samples) = self.runtime.tracer.predict(plan.estimate.scanned_rows);
        Ok(crate::explain::Simulation::new(plan, elapsed_ms, samples))
    }
}

/// The caller's access to `dataset` (policy.toml) and the limits it runs under: the
/// options', then the dataset's `[limits]`, then the principal's.
fn governed(
    dataset: &Dataset,
    options: &EngineOptions,
) -> Result<(Option<Arc<crate::access::Access>>, Limits)> {
    let access = crate::access::Access::resolve(dataset, options.principal.as_deref())?;
    let mut limits = options.limits.clone().with_config(&dataset.config().limits);
    if let Some(a) = &access {
        limits = limits.with_config(a.limits());
    }
    Ok((access, limits))
}

/// `catalog` as the caller of `access` may see it.
fn policed(
    catalog: Box<dyn Catalog>,
    access: Option<Arc<crate::access::Access>>,
) -> Box<dyn Catalog> {
    match access {
        Some(a) => Box::new(crate::policed::PolicedCatalog::new(catalog, a)),
        None => catalog,
    }
}

/// WATCH asked for as a one-shot query.
fn watch_is_a_loop() -> Error {
    Error::new(
        ErrorKind::Capability {
            feature: "WATCH".into(),
            tier: "v0.3-capability".into(),
        },
        "WATCH is a poll loop, not a one-shot query",
    )
    .with_help(
        "run it with `signalql watch`, which re-evaluates the query every interval and prints \
         an alert when the condition becomes true",
    )
}

/// A context statement asked for through the analytics API.
fn not_an_envelope(what: &str) -> Error {
    Error::type_error(format!(
        "{what} returns a context bundle, not a result envelope and has no DataFusion plan to show"
    ))
    .with_help("run it with `signalql query`, `signalql context` or Engine::answer")
}
