//! `Engine`: opens a dataset, parses, lowers and runs SignalQL, and builds the envelope.

use std::sync::Arc;
use std::time::Duration as StdDuration;

use chrono::{DateTime, Utc};
use datafusion::arrow::array::{Array, AsArray, RecordBatch};
use datafusion::arrow::datatypes::{SchemaRef, TimestampMicrosecondType};
use datafusion::datasource::{MemTable, provider_as_source};
use datafusion::execution::SessionStateBuilder;
use datafusion::execution::cache::cache_manager::CacheManagerConfig;
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::logical_expr::{LogicalPlan, LogicalPlanBuilder};
use datafusion::physical_plan::{ExecutionPlan, collect};
use datafusion::prelude::{SessionConfig, SessionContext};
use datafusion::sql::unparser::plan_to_sql;
use sha2::{Digest, Sha256};
use signalql_catalog::{Dataset, DatasetError, TableInfo};

use crate::context::{Bundle, Explanation, parse_object_uri};
use crate::envelope::{
    ColumnInfo, CostEstimate, Envelope, Metadata, SIGNALQL_VERSION, WindowInfo, limits_json, rows,
    type_name,
};
use crate::error::{Error, ErrorKind, Result};
use crate::lower::enrich::{reads_traits, signal_names};
use crate::lower::funnel::{funnel_view, lower_funnel, lower_sequence, sequence_view};
use crate::lower::retrieve::{Staged, data_span_plan, lower_retrieve};
use crate::lower::time::{parse_timestamp, rfc3339};
use crate::lower::{Interval, Limits, LowerInput, Lowered, UnitSource};
use crate::syntax::ast::{
    ContextQuery, DescribeQuery, DescribeTarget, RetrieveQuery, Source, Span, Statement,
};
use crate::syntax::parse;

/// How an engine evaluates queries.
#[derive(Debug, Clone, Default)]
pub struct EngineOptions {
    /// `T` for queries without AS OF (overrides the dataset's configured `now`).
    pub now: Option<DateTime<Utc>>,
    pub limits: Limits,
    /// Where S3 is (`--s3-endpoint`); the rest comes from the AWS environment variables.
    pub storage: signalql_catalog::StorageOptions,
}

/// What a statement returns.
#[derive(Debug, Clone)]
pub enum Answer {
    Envelope(Box<Envelope>),
    Bundle(Box<Bundle>),
    Explanation(Box<Explanation>),
}

/// A SignalQL engine over one dataset root.
pub struct Engine {
    dataset: Dataset,
    ctx: SessionContext,
    options: EngineOptions,
}

/// A compiled query: its AST, logical plan and the SQL DataFusion's unparser gives for it.
pub struct Compiled {
    pub statement: Statement,
    pub lowered: Lowered,
    pub sql: Result<String>,
}

impl From<DatasetError> for Error {
    fn from(e: DatasetError) -> Self {
        match &e {
            DatasetError::BadColumn { .. } => Error::type_error(e.to_string()),
            DatasetError::Unsupported(_) => Error::new(
                ErrorKind::Capability {
                    feature: "dataset root scheme".into(),
                    tier: "engine".into(),
                },
                e.to_string(),
            ),
            _ => Error::io(e.to_string()),
        }
    }
}

impl Engine {
    /// Open the dataset at `root` with default options.
    pub fn open(root: impl AsRef<std::path::Path>) -> Result<Engine> {
        Engine::open_with(root, EngineOptions::default())
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
        let dataset = Dataset::open_with(root, &options.storage)?.with_session_tables();
        signalql_udfs::register_all(&ctx);
        // The same catalog, runtime (object stores, memory pool) and settings, planned with
        // the engine's operators as well.
        let state = SessionStateBuilder::new_from_existing(ctx.state())
            .with_query_planner(Arc::new(crate::operator::EngineQueryPlanner))
            .build();
        Ok(Engine {
            dataset,
            ctx: SessionContext::new_with_state(state),
            options,
        })
    }

    pub fn open_with(root: impl AsRef<std::path::Path>, options: EngineOptions) -> Result<Engine> {
        let dataset = Dataset::open_with(root, &options.storage)?;
        // No list-files cache: DataFusion 55 keeps a table folder's listing for the life of
        // the runtime by default, so a long-lived engine (MCP server, WATCH) would never see
        // a file ingested after its first scan. The dataset lists each table per query anyway.
        let runtime = RuntimeEnvBuilder::new()
            .with_memory_limit(options.limits.query_memory_bytes as usize, 1.0)
            .with_cache_manager(CacheManagerConfig::default().with_list_files_cache_limit(0))
            .build_arc()?;
        // DataFusion's defaults, then the dataset's `[datafusion]` settings. (Parquet filter
        // pushdown was measured on 10M generated rows and did not help: top paths 155 ms on
        // vs 139 ms off, the other example workloads equal; see benches/README.md.)
        let mut config = SessionConfig::new().with_information_schema(false);
        for (key, value) in &dataset.config().datafusion {
            config.options_mut().set(key, value).map_err(|e| {
                Error::io(format!(
                    "{}: [datafusion] {key} = {value:?}: {e}",
                    dataset.root().display_of("signalql.toml")
                ))
            })?;
        }
        let state = SessionStateBuilder::new()
            .with_config(config)
            .with_runtime_env(runtime)
            .with_default_features()
            .with_query_planner(Arc::new(crate::operator::EngineQueryPlanner))
            .build();
        let ctx = SessionContext::new_with_state(state);
        signalql_udfs::register_all(&ctx);
        Ok(Engine {
            dataset,
            ctx,
            options,
        })
    }

    pub fn dataset(&self) -> &Dataset {
        &self.dataset
    }

    pub fn session(&self) -> &SessionContext {
        &self.ctx
    }

    pub fn limits(&self) -> &Limits {
        &self.options.limits
    }

    /// `T` for a query without AS OF: `--now`, else the dataset's `now`, else the clock.
    pub fn now(&self) -> Result<DateTime<Utc>> {
        if let Some(t) = self.options.now {
            return Ok(t);
        }
        Ok(self.dataset.default_now()?.unwrap_or_else(Utc::now))
    }

    /// Parse and lower `text` without running it.
    pub async fn compile(&self, text: &str) -> Result<Compiled> {
        self.compile_statement(parse(text)?).await
    }

    /// Lower a parsed statement without running it, with the SQL the plan unparses to.
    pub async fn compile_statement(&self, statement: Statement) -> Result<Compiled> {
        let lowered = self.lower_statement(&statement).await?;
        let sql = plan_sql(&lowered.plan);
        Ok(Compiled {
            statement,
            lowered,
            sql,
        })
    }

    /// A parsed statement's DataFusion logical plan (opening the tables it reads), without
    /// running it and without unparsing it to SQL.
    pub async fn lower_statement(&self, statement: &Statement) -> Result<Lowered> {
        Ok(match statement {
            Statement::Retrieve(q) => self.lower_retrieve(q).await?,
            Statement::Funnel(q) => {
                if q.source != Source::Events {
                    return Err(Error::type_error(format!(
                        "FUNNEL follows users through events: use FROM events, not FROM {}",
                        q.source
                    ))
                    .at(q.span));
                }
                let view = funnel_view(q);
                self.lower(&view, |i| lower_funnel(q, &view, i)).await?
            }
            Statement::Sequence(q) => {
                let view = sequence_view(q);
                self.lower(&view, |i| lower_sequence(q, &view, i)).await?
            }
            Statement::FindObject(q) => {
                let t = match &q.as_of {
                    Some(ts) => parse_timestamp(ts)?,
                    None => self.now()?,
                };
                let mut l = crate::context::find::plan(
                    &self.ctx,
                    &self.dataset,
                    q,
                    t,
                    &self.options.limits,
                )
                .await
                .map_err(|e| if e.span.is_none() { e.at(q.span) } else { e })?;
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
            other => return Err(unsupported(other)),
        })
    }

    /// The physical plan DataFusion makes for a compiled query, as indented text.
    pub async fn physical_plan_text(&self, compiled: &Compiled) -> Result<String> {
        let physical = self
            .ctx
            .state()
            .create_physical_plan(&compiled.lowered.plan)
            .await?;
        Ok(datafusion::physical_plan::displayable(physical.as_ref())
            .indent(true)
            .to_string())
    }

    async fn events(&self) -> Result<TableInfo> {
        Ok(self.dataset.events(&self.ctx).await?)
    }

    /// Lower `q` (or a funnel or sequence through its retrieve view `q`) with `build`, after
    /// opening the tables `q` reads.
    async fn lower(
        &self,
        q: &RetrieveQuery,
        build: impl FnOnce(&LowerInput) -> Result<Lowered>,
    ) -> Result<Lowered> {
        self.lower_with(q, None, None, build).await
    }

    /// A retrieve query; `FROM metric(m)` and `metric(m)` resolve through `metrics.toml`.
    async fn lower_retrieve(&self, q: &RetrieveQuery) -> Result<Lowered> {
        let names = crate::metrics::names_in(q);
        if names.is_empty() {
            return self.lower(q, |i| lower_retrieve(q, i)).await;
        }
        let registry =
            crate::metrics::Registry::load(self.dataset.root()).map_err(|e| e.at(q.span))?;
        let (view, time_column) = match &q.source {
            Source::Metric(name) => {
                let m = registry.get(name, q.span)?;
                (
                    crate::metrics::metric_view(q, name, &m.source),
                    m.def.time_column.clone(),
                )
            }
            _ => (q.clone(), None),
        };
        let mut lowered = self
            .lower_with(&view, Some(&registry), time_column, |i| {
                lower_retrieve(&view, i)
            })
            .await?;
        for name in &names {
            for m in registry.closure(name) {
                let info = registry.info(m);
                if !lowered.metrics.contains(&info) {
                    lowered.metrics.push(info);
                }
            }
        }
        if let Source::Metric(name) = &q.source {
            crate::metrics::rename_value_column(&mut lowered, name)?;
        }
        Ok(lowered)
    }

    /// [`Engine::lower`] with a metric registry and a time column other than the source's.
    async fn lower_with(
        &self,
        q: &RetrieveQuery,
        metrics: Option<&crate::metrics::Registry>,
        time_column: Option<String>,
        build: impl FnOnce(&LowerInput) -> Result<Lowered>,
    ) -> Result<Lowered> {
        let table = match &q.source {
            Source::Entity(name) => {
                let table = self
                    .dataset
                    .entities(&self.ctx)
                    .await
                    .map_err(|e| Error::from(e).at(q.span))?;
                self.check_entity_type(&table, name, q.span).await?;
                table
            }
            _ => self.events().await?,
        };
        // v0.1 `traits.K` reads the users table unless events carries its own `traits`.
        let users = if q.source == Source::Events
            && reads_traits(q)
            && table.schema.field_with_name("traits").is_err()
        {
            Some(self.dataset.table(&self.ctx, "users").await?)
        } else {
            None
        };
        let signals = if signal_names(q).is_empty() {
            None
        } else {
            Some(
                self.dataset
                    .table(&self.ctx, "signals")
                    .await
                    .map_err(|e| Error::from(e).at(q.span))?,
            )
        };
        let (relationships, entities) = match (&q.traverse, &q.source) {
            (Some(_), Source::Entity(_)) => (
                Some(
                    self.dataset
                        .relationships(&self.ctx)
                        .await
                        .map_err(|e| Error::from(e).at(q.span))?,
                ),
                Some(table.clone()),
            ),
            _ => (None, None),
        };
        let now = self.now()?;
        let mut input = LowerInput {
            table: &table,
            relationships: relationships.as_ref(),
            entities: entities.as_ref(),
            metrics,
            time_column,
            users: users.as_ref(),
            signals: signals.as_ref(),
            now,
            limits: &self.options.limits,
            data_span: None,
        };
        if q.bucket.is_some() && q.window.is_none() {
            input.data_span = self.data_span(q, &input).await?;
        }
        build(&input)
    }

    /// `entity(type)` must name a type the entities table has.
    async fn check_entity_type(
        &self,
        table: &TableInfo,
        name: &[String],
        span: Span,
    ) -> Result<()> {
        let wanted = crate::lower::source::entity_type(name);
        let types = self.entity_types(table).await?;
        if types.iter().any(|t| *t == wanted) {
            return Ok(());
        }
        Err(Error::unknown_field(format!(
            "unknown entity type `{wanted}`: the entities table has {}",
            if types.is_empty() {
                "no entities".to_string()
            } else {
                types.join(", ")
            }
        ))
        .at(span))
    }

    /// The distinct `entity_type`s of the entities table, sorted.
    pub async fn entity_types(&self, table: &TableInfo) -> Result<Vec<String>> {
        let plan =
            LogicalPlanBuilder::scan("entities", provider_as_source(table.provider.clone()), None)?
                .aggregate(
                    vec![crate::lower::fields::column("entity_type")],
                    Vec::<datafusion::logical_expr::Expr>::new(),
                )?
                .build()?;
        let (batches, _) = self.execute(&plan).await?;
        let mut out = Vec::new();
        for b in &batches {
            let c = datafusion::arrow::compute::cast(
                b.column(0),
                &datafusion::arrow::datatypes::DataType::Utf8,
            )
            .map_err(|e| Error::internal(e.to_string()))?;
            let c = c.as_string::<i32>();
            out.extend(
                (0..c.len())
                    .filter(|&i| c.is_valid(i))
                    .map(|i| c.value(i).to_string()),
            );
        }
        out.sort();
        Ok(out)
    }

    /// The span `[min, max]` of the rows a bucketed query without DURING reads.
    async fn data_span(
        &self,
        q: &RetrieveQuery,
        input: &LowerInput<'_>,
    ) -> Result<Option<Interval>> {
        let plan = data_span_plan(q, input)?;
        let (batches, _) = self.execute(&plan).await?;
        let Some(batch) = batches.first() else {
            return Ok(None);
        };
        let col = |i: usize| {
            batch
                .column(i)
                .as_primitive_opt::<TimestampMicrosecondType>()
                .cloned()
        };
        let (Some(lo), Some(hi)) = (col(0), col(1)) else {
            return Ok(None);
        };
        if lo.is_empty() || lo.is_null(0) || hi.is_null(0) {
            return Ok(None);
        }
        let at = |v: i64| DateTime::<Utc>::from_timestamp_micros(v);
        match (at(lo.value(0)), at(hi.value(0) + 1)) {
            (Some(start), Some(end)) => Ok(Some(Interval { start, end })),
            _ => Ok(None),
        }
    }

    /// Run a logical plan with the engine's timeout; returns the batches and the physical plan.
    async fn execute(
        &self,
        plan: &LogicalPlan,
    ) -> Result<(Vec<RecordBatch>, Arc<dyn ExecutionPlan>)> {
        let state = self.ctx.state();
        let physical = state.create_physical_plan(plan).await?;
        let task = self.ctx.task_ctx();
        let timeout = StdDuration::from_secs(self.options.limits.timeout_seconds);
        let batches =
            match tokio::time::timeout(timeout, collect(Arc::clone(&physical), task)).await {
                Ok(r) => r.map_err(|e| self.fill_limits(Error::from(e)))?,
                Err(_) => {
                    let secs = self.options.limits.timeout_seconds;
                    return Err(Error::limit("timeout_seconds", secs, secs + 1).with_help(
                        "the query ran longer than the timeout; narrow the window or filter",
                    ));
                }
            };
        Ok((batches, physical))
    }

    /// Run a query split at its aggregate: the aggregate once, then the rest of the plan over
    /// its materialised result. Returns the batches, the final physical plan and the rows and
    /// bytes the scans read.
    async fn execute_staged(
        &self,
        staged: &Staged,
    ) -> Result<(Vec<RecordBatch>, Arc<dyn ExecutionPlan>, (u64, u64))> {
        let (agg_batches, agg_physical) = self.execute(&staged.aggregate).await?;
        let scanned = scan_metrics(agg_physical.as_ref());
        let table = MemTable::try_new(agg_physical.schema(), vec![agg_batches])?;
        let scan =
            LogicalPlanBuilder::scan("aggregate", provider_as_source(Arc::new(table)), None)?
                .build()?;
        let rest = staged.after.finish(scan)?;
        let (batches, physical) = self.execute(&rest.plan).await?;
        Ok((batches, physical, scanned))
    }

    /// A memory-pool error names the configured pool size.
    fn fill_limits(&self, mut err: Error) -> Error {
        if let ErrorKind::LimitExceeded { limit, max, value } = &mut err.kind
            && limit == "query_memory_bytes"
        {
            *max = self.options.limits.query_memory_bytes;
            *value = max.saturating_add(1);
        }
        err
    }

    /// Run any statement: analytics give an envelope, `CONTEXT FOR` a bundle (computed and kept
    /// in the context store), `EXPLAIN CONTEXT` the stored explanation.
    pub async fn answer(&self, text: &str) -> Result<Answer> {
        match parse(text)? {
            Statement::ContextTask(q) => Ok(Answer::Bundle(Box::new(self.context(&q).await?))),
            Statement::ExplainContext(e) => Ok(Answer::Explanation(Box::new(
                self.explain_context(&e.address)
                    .map_err(|err| err.at(e.span))?,
            ))),
            _ => Ok(Answer::Envelope(Box::new(self.query(text).await?))),
        }
    }

    /// Compute the bundle for `CONTEXT FOR "task" …` and keep it in the context store (the first
    /// record for an address wins; the returned bundle is the one computed now).
    pub async fn context(&self, q: &ContextQuery) -> Result<Bundle> {
        let now = self.now()?;
        let as_of = q.as_of.as_ref().map(|ts| ts.0.clone());
        let (plan, t) = self.lower_context_at(q, now).await?;
        let (batches, _) = self.execute(&plan).await?;
        let decisions = crate::context::exec::decode(&batches)?;
        let graph = if q.with_evidence {
            let selected: std::collections::HashMap<String, i64> = decisions
                .items
                .iter()
                .filter_map(|i| {
                    let (id, rev) = parse_object_uri(&i.object)?;
                    Some((id.to_string(), rev))
                })
                .collect();
            Some(
                crate::context::load::graph(
                    &self.ctx,
                    &self.dataset,
                    &selected,
                    crate::lower::time::micros(t),
                )
                .await?,
            )
        } else {
            None
        };
        let evaluated_at = rfc3339(now);
        let (mut bundle, explanation) =
            crate::context::assemble(q, as_of, evaluated_at, decisions, graph.as_ref());
        // Only the packed representations' content is read, after packing.
        let keys: Vec<(String, i64, String)> = bundle
            .items
            .iter()
            .filter(|i| i.content.is_none() && i.content_ref.is_none())
            .filter_map(|i| {
                let (id, rev) = parse_object_uri(&i.object)?;
                Some((id.to_string(), rev, i.representation.clone()))
            })
            .collect();
        let mut texts = crate::context::load::contents(&self.ctx, &self.dataset, &keys).await?;
        for (item, key) in bundle
            .items
            .iter_mut()
            .filter(|i| i.content.is_none() && i.content_ref.is_none())
            .zip(&keys)
        {
            item.content = Some(texts.remove(key).ok_or_else(|| {
                Error::io(format!(
                    "the content of {} ({}) could not be read",
                    item.object, item.representation
                ))
            })?);
        }
        if q.compress {
            let (mut used, mut full) = (0u64, 0u64);
            for item in &bundle.items {
                let n = item
                    .content
                    .as_deref()
                    .map_or(0, |c| c.chars().count() as u64);
                used += n;
                full += item.compression.as_ref().map_or(n, |c| c.original_chars);
            }
            bundle.metadata.compression_ratio = Some(if full == 0 {
                1.0
            } else {
                used as f64 / full as f64
            });
        }
        let record = crate::context::store::Record {
            spec_version: "0.5".into(),
            bundle,
            explanation,
        };
        crate::context::store::put(self.dataset.root(), &record)?;
        crate::context::free_in_background(record.explanation);
        Ok(record.bundle)
    }

    /// The logical plan behind `CONTEXT FOR` (opening the object tables; nothing is run): one
    /// plan whose result is the packing decisions. Bench W9 times this as W8's lowering.
    pub async fn lower_context(&self, q: &ContextQuery) -> Result<LogicalPlan> {
        Ok(self.lower_context_at(q, self.now()?).await?.0)
    }

    /// [`Engine::lower_context`] with the evaluation time given; also returns the AS OF time.
    async fn lower_context_at(
        &self,
        q: &ContextQuery,
        now: DateTime<Utc>,
    ) -> Result<(LogicalPlan, DateTime<Utc>)> {
        crate::context::check_limits(q)?;
        let t = match &q.as_of {
            Some(ts) => parse_timestamp(ts)?,
            None => now,
        };
        let params = crate::context::PackParams::of(q, crate::lower::time::micros(t))?;
        let plan = crate::context::load::plan(&self.ctx, &self.dataset, q, t, &params).await?;
        Ok((plan, t))
    }

    /// `EXPLAIN CONTEXT context://…` from the context store; `unknown_context` when absent.
    pub fn explain_context(&self, address: &str) -> Result<Explanation> {
        Ok(crate::context::store::get(self.dataset.root(), address)?.explanation)
    }

    /// Run a logical plan with the engine's limits and timeout.
    pub(crate) async fn run_plan(&self, plan: &LogicalPlan) -> Result<Vec<RecordBatch>> {
        Ok(self.execute(plan).await?.0)
    }

    /// The envelope of a DESCRIBE: one row per catalog record (docs/describe.md).
    pub async fn describe_envelope(&self, q: &DescribeQuery) -> Result<Envelope> {
        let (records, metrics) = match &q.target {
            DescribeTarget::Metrics => self.metric_catalog().map_err(|e| e.at(q.span))?,
            target => (
                self.describe(target).await.map_err(|e| e.at(q.span))?,
                Vec::new(),
            ),
        };
        self.catalog_envelope(records, metrics)
    }

    /// Every catalog record of the dataset: events, entities, relationships, signals and
    /// metrics, skipping the tables it does not have.
    pub async fn describe_all(&self) -> Result<Envelope> {
        let mut records = Vec::new();
        for target in [
            DescribeTarget::Events,
            DescribeTarget::Entities,
            DescribeTarget::Relationships,
            DescribeTarget::Signals,
        ] {
            match self.describe(&target).await {
                Ok(r) => records.extend(r),
                Err(e) if e.kind == ErrorKind::Io && e.message.contains(" has no ") => {}
                Err(e) => return Err(e),
            }
        }
        let (metric_records, metrics) = self.metric_catalog()?;
        records.extend(metric_records);
        self.catalog_envelope(records, metrics)
    }

    fn catalog_envelope(
        &self,
        records: Vec<crate::describe::Record>,
        metrics: Vec<crate::metrics::MetricInfo>,
    ) -> Result<Envelope> {
        let rows: Vec<Vec<serde_json::Value>> = records.iter().map(|r| r.row()).collect();
        Ok(Envelope {
            columns: crate::describe::columns(),
            metadata: Metadata {
                row_count: rows.len() as u64,
                truncated: false,
                limit_applied: self.options.limits.max_result_rows,
                as_of: rfc3339(self.now()?),
                access_filtered: false,
                ordered: true,
                window: None,
                cost_estimate: CostEstimate {
                    scanned_rows: 0,
                    scanned_bytes: 0,
                    engine: "datafusion".into(),
                },
                compiled_sql_digest: None,
                metrics,
                signalql_version: SIGNALQL_VERSION.into(),
                engine_version: env!("CARGO_PKG_VERSION").into(),
                limits: limits_json(&self.options.limits),
            },
            rows,
        })
    }

    /// Run one query and return its envelope.
    pub async fn query(&self, text: &str) -> Result<Envelope> {
        match parse(text)? {
            Statement::Describe(d) => return self.describe_envelope(&d).await,
            Statement::Watch(w) => return Err(watch_is_a_loop().at(w.span)),
            statement => self.run(&self.compile_statement(statement).await?).await,
        }
    }

    /// Run a compiled query and build its envelope.
    pub async fn run(&self, compiled: &Compiled) -> Result<Envelope> {
        Ok(self.run_with_batches(compiled).await?.0)
    }

    /// Run one analytics query: its envelope and its rows as Arrow batches (at most the
    /// envelope's rows, columns named as in the envelope), for Parquet output.
    pub async fn query_batches(&self, text: &str) -> Result<(Envelope, Vec<RecordBatch>)> {
        match parse(text)? {
            Statement::Watch(w) => Err(watch_is_a_loop().at(w.span)),
            statement => {
                self.run_with_batches(&self.compile_statement(statement).await?)
                    .await
            }
        }
    }

    async fn run_with_batches(&self, compiled: &Compiled) -> Result<(Envelope, Vec<RecordBatch>)> {
        let lowered = &compiled.lowered;
        let (batches, physical, (scanned_rows, scanned_bytes)) = match &lowered.staged {
            None => {
                let (batches, physical) = self.execute(&lowered.plan).await?;
                let scanned = scan_metrics(physical.as_ref());
                (batches, physical, scanned)
            }
            Some(staged) => self.execute_staged(staged).await?,
        };
        let total: usize = batches.iter().map(|b| b.num_rows()).sum();
        let cap = lowered.row_cap.map(|c| c as usize).unwrap_or(usize::MAX);
        let truncated = total > cap;
        let rows = rows(&batches, cap)?;
        let columns = self.columns(lowered, physical.schema());
        let digest = compiled
            .sql
            .as_ref()
            .ok()
            .map(|sql| format!("sha256:{}", hex::encode(Sha256::digest(sql))));
        let batches = named_prefix(&batches, &columns, rows.len())?;
        let envelope = Envelope {
            columns,
            metadata: Metadata {
                row_count: rows.len() as u64,
                truncated,
                limit_applied: lowered.limit_applied,
                as_of: rfc3339(lowered.as_of),
                access_filtered: false,
                ordered: lowered.ordered,
                window: lowered.window.map(|w| WindowInfo {
                    start: rfc3339(w.start),
                    end: rfc3339(w.end),
                }),
                cost_estimate: CostEstimate {
                    scanned_rows,
                    scanned_bytes,
                    engine: "datafusion".into(),
                },
                compiled_sql_digest: digest,
                metrics: lowered.metrics.clone(),
                signalql_version: SIGNALQL_VERSION.into(),
                engine_version: env!("CARGO_PKG_VERSION").into(),
                limits: limits_json(&self.options.limits),
            },
            rows,
        };
        Ok((envelope, batches))
    }

    fn columns(&self, lowered: &Lowered, schema: SchemaRef) -> Vec<ColumnInfo> {
        let units = &self.dataset.config().units;
        lowered
            .columns
            .iter()
            .zip(schema.fields().iter())
            .map(|(c, f)| {
                let unit = units.get(&c.name).cloned().or_else(|| match &c.unit {
                    UnitSource::Field(p) => units.get(p).cloned(),
                    UnitSource::Squared(p) => units.get(p).map(|u| format!("{u}^2")),
                    UnitSource::Count => Some("events".into()),
                    UnitSource::Fixed(u) => Some(u.to_string()),
                    UnitSource::Metric(m) => lowered
                        .metrics
                        .iter()
                        .find(|i| i.name == *m)
                        .and_then(|i| i.unit.clone()),
                    UnitSource::None => None,
                });
                ColumnInfo {
                    name: c.name.clone(),
                    data_type: type_name(f.data_type()),
                    unit,
                }
            })
            .collect()
    }
}

/// The first `n` rows of `batches`, with the columns renamed to `columns`' names.
fn named_prefix(
    batches: &[RecordBatch],
    columns: &[ColumnInfo],
    n: usize,
) -> Result<Vec<RecordBatch>> {
    use datafusion::arrow::datatypes::{Field, Schema};
    let mut out = Vec::new();
    let mut left = n;
    for b in batches {
        if left == 0 {
            break;
        }
        let take = b.num_rows().min(left);
        left -= take;
        let fields: Vec<Field> = b
            .schema()
            .fields()
            .iter()
            .zip(columns)
            .map(|(f, c)| f.as_ref().clone().with_name(c.name.clone()))
            .collect();
        let schema = Arc::new(Schema::new(fields));
        out.push(
            RecordBatch::try_new(schema, b.slice(0, take).columns().to_vec())
                .map_err(|e| Error::internal(e.to_string()))?,
        );
    }
    Ok(out)
}

/// The SQL text DataFusion's unparser gives for a plan.
pub fn plan_sql(plan: &LogicalPlan) -> Result<String> {
    plan_to_sql(plan)
        .map(|s| s.to_string())
        .map_err(Error::from)
}

/// Rows and bytes read by the scans of an executed plan.
fn scan_metrics(plan: &dyn ExecutionPlan) -> (u64, u64) {
    let mut rows = 0u64;
    let mut bytes = 0u64;
    if plan.children().is_empty()
        && let Some(m) = plan.metrics()
    {
        rows += m.output_rows().unwrap_or(0) as u64;
        bytes += m
            .sum_by_name("bytes_scanned")
            .map(|v| v.as_usize() as u64)
            .unwrap_or(0);
    }
    for child in plan.children() {
        let (r, b) = scan_metrics(child.as_ref());
        rows += r;
        bytes += b;
    }
    (rows, bytes)
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

fn unsupported(s: &Statement) -> Error {
    let (feature, tier) = match s {
        Statement::Retrieve(_) => ("retrieve", "v0.3-core"),
        Statement::Funnel(_) => ("FUNNEL", "v0.3-core"),
        Statement::Sequence(_) => ("FIND sequence", "v0.3-core"),
        Statement::Watch(_) => ("WATCH", "v0.3-capability"),
        Statement::Describe(_) => ("DESCRIBE", "v0.3-capability"),
        Statement::ContextTask(_) => ("CONTEXT FOR", "v0.5"),
        Statement::ExplainContext(_) => ("EXPLAIN CONTEXT", "v0.5"),
        Statement::FindObject(_) => ("FIND OBJECT", "v0.5"),
        Statement::Explain(_) => ("EXPLAIN", "engine"),
    };
    let span = match s {
        Statement::Funnel(q) => Some(q.span),
        Statement::Sequence(q) => Some(q.span),
        Statement::Watch(q) => Some(q.span),
        Statement::Describe(q) => Some(q.span),
        Statement::ContextTask(q) => Some(q.span),
        Statement::ExplainContext(q) => Some(q.span),
        Statement::FindObject(q) => Some(q.span),
        _ => None,
    };
    let e = Error::capability(feature, tier);
    match span {
        Some(sp) => e.at(sp),
        None => e,
    }
}
