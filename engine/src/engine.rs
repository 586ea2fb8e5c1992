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
use datafusion::sql::unparser::plan_to_sql;
use signalql_catalog::Dataset;

use crate::bind::Binder;
use crate::catalog::{ApplicationCatalog, Catalog, noting};
use crate::context::{Bundle, Explanation};
use crate::describe::Describer;
use crate::envelope::Envelope;
use crate::error::{Error, ErrorKind, Result};
use crate::execute::Executor;
use crate::lower::funnel::{lower_funnel, lower_sequence};
use crate::lower::retrieve::lower_retrieve;
use crate::lower::time::parse_timestamp;
use crate::lower::{Limits, Lowered};
use crate::syntax::ast::{ContextQuery, DescribeQuery, RetrieveQuery, Source, Statement};
use crate::syntax::parse;

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
}

/// A compiled query: its AST, logical plan and the SQL DataFusion's unparser gives for it.
pub struct Compiled {
    pub statement: Statement,
    pub lowered: Lowered,
    pub sql: Result<String>,
    /// Files the tables it reads were opened without (`skip_invalid_files`).
    pub skipped: Vec<signalql_catalog::SkippedFile>,
    /// A table it reads is filtered or masked for the caller (policy.toml).
    pub access_filtered: bool,
    /// The tables it reads: name, files, bytes.
    pub sources: Vec<(String, u64, u64)>,
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
        let dataset = Dataset::open_with(root, &options.storage)?;
        let (access, limits) = governed(&dataset, &options)?;
        let session = crate::session::from_application(&ctx);
        let root = dataset.root().clone();
        Ok(Engine {
            catalog: policed(Box::new(ApplicationCatalog::new(dataset)), access),
            exec: Executor::new(session, limits).with_root(root),
            now: options.now,
        })
    }

    pub fn open_with(root: impl AsRef<std::path::Path>, options: EngineOptions) -> Result<Engine> {
        let dataset = Dataset::open_with(root, &options.storage)?;
        let (access, limits) = governed(&dataset, &options)?;
        let session = crate::session::for_dataset(&dataset, &limits)?;
        let root = dataset.root().clone();
        Ok(Engine {
            catalog: policed(Box::new(dataset), access),
            exec: Executor::new(session, limits).with_root(root),
            now: options.now,
        })
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
        let (lowered, noted) = noting(self.lower_statement(&statement)).await;
        let lowered = lowered?;
        let sql = plan_sql(&lowered.plan);
        Ok(Compiled {
            statement,
            lowered,
            sql,
            skipped: noted.skipped,
            access_filtered: noted.access_filtered,
            sources: noted.opened,
        })
    }

    /// A parsed statement's DataFusion logical plan (binding the tables it reads), without
    /// running it and without unparsing it to SQL.
    pub async fn lower_statement(&self, statement: &Statement) -> Result<Lowered> {
        let limits = self.limits();
        Ok(match statement {
            Statement::Retrieve(q) => self.lower_retrieve(q).await?,
            Statement::Funnel(q) => {
                let bound = self.binder()?.funnel(q).await?;
                lower_funnel(q, &bound.view, &bound.input(limits))?
            }
            Statement::Sequence(q) => {
                let bound = self.binder()?.sequence(q).await?;
                lower_sequence(q, &bound.view, &bound.input(limits))?
            }
            Statement::FindObject(q) => {
                let t = match &q.as_of {
                    Some(ts) => parse_timestamp(ts)?,
                    None => self.now()?,
                };
                let mut l =
                    crate::context::find::plan(self.session(), self.catalog.as_ref(), q, t, limits)
                        .await
                        .map_err(|e| e.at(q.span))?;
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
        let bound = self.binder()?.retrieve(q).await?;
        let mut lowered = lower_retrieve(&bound.view, &bound.input(self.limits()))?;
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

    /// `EXPLAIN q`: the plan of the statement, nothing run (engine/src/explain.rs).
    pub async fn explain(
        &self,
        q: &crate::syntax::ast::ExplainQuery,
    ) -> Result<crate::explain::Explained> {
        use crate::explain::{Estimate, Explained, SourceInfo};
        if q.analyze {
            return Err(Error::capability("EXPLAIN ANALYZE", "engine"));
        }
        let statement = match q.statement.as_ref() {
            // A WATCH's plan is its query's.
            Statement::Watch(w) => Statement::Retrieve((*w.query).clone()),
            s => s.clone(),
        };
        let (plan, sql, sources, filtered, spec) = match &statement {
            Statement::Describe(_) | Statement::ExplainContext(_) | Statement::Explain(_) => {
                return Err(Error::type_error(
                    "EXPLAIN shows the plan of a query, FUNNEL, FIND or CONTEXT FOR; DESCRIBE \
                     and EXPLAIN CONTEXT read the catalog and the context store and have none",
                ));
            }
            Statement::ContextTask(c) => {
                let (plan, noted) = noting(self.lower_context(c)).await;
                (plan?, None, noted.opened, noted.access_filtered, "0.5")
            }
            s => {
                let spec = if matches!(s, Statement::FindObject(_)) {
                    "0.5"
                } else {
                    "0.3"
                };
                let c = self.compile_statement(s.clone()).await?;
                (
                    c.lowered.plan,
                    c.sql.ok(),
                    c.sources,
                    c.access_filtered,
                    spec,
                )
            }
        };
        let physical = crate::execute::physical_plan(&self.session().state(), &plan).await?;
        let stats = datafusion::physical_plan::StatisticsContext::default().compute(
            physical.as_ref(),
            &datafusion::physical_plan::StatisticsArgs::new(),
        )?;
        let known = |v: Option<&usize>| v.map(|n| *n as u64).filter(|_| !filtered);
        Ok(Explained {
            spec_version: spec.into(),
            canonical_query: statement.to_string(),
            sources: sources
                .into_iter()
                .map(|(table, files, bytes)| SourceInfo {
                    table,
                    files: Some(files).filter(|_| !filtered),
                    bytes: Some(bytes).filter(|_| !filtered),
                })
                .collect(),
            logical_plan: plan.display_indent().to_string(),
            physical_plan: datafusion::physical_plan::displayable(physical.as_ref())
                .indent(true)
                .to_string(),
            sql,
            estimate: Estimate {
                rows: known(stats.num_rows.get_value()),
                bytes: known(stats.total_byte_size.get_value()),
            },
            limits: self.limits().to_json(),
        })
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
        self.answer_statement(parse(text)?).await
    }

    /// [`Engine::answer`] for a parsed statement.
    pub async fn answer_statement(&self, statement: Statement) -> Result<Answer> {
        match statement {
            Statement::ContextTask(q) => Ok(Answer::Bundle(Box::new(self.context(&q).await?))),
            Statement::Explain(q) => Ok(Answer::Plan(Box::new(self.explain(&q).await?))),
            Statement::ExplainContext(e) => Ok(Answer::Explanation(Box::new(
                self.explain_context(&e.address)
                    .await
                    .map_err(|err| err.at(e.span))?,
            ))),
            statement => Ok(Answer::Envelope(Box::new(
                self.query_statement(statement).await?,
            ))),
        }
    }

    /// Compute the bundle for `CONTEXT FOR "task" …` and keep it in the context store (the first
    /// record for an address wins; the returned bundle is the one computed now).
    pub async fn context(&self, q: &ContextQuery) -> Result<Bundle> {
        let build =
            crate::context::build::bundle(self.catalog.as_ref(), &self.exec, q, self.now()?);
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
        let x = crate::context::store::get(self.dataset().context_store(), address)?.explanation;
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
        self.describer()?.all().await
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
        self.query_statement(parse(text)?).await
    }

    /// [`Engine::query`] for a parsed statement.
    pub async fn query_statement(&self, statement: Statement) -> Result<Envelope> {
        match statement {
            Statement::Describe(d) => self.describe_envelope(&d).await,
            statement => Ok(self.batches_of(statement).await?.0),
        }
    }

    /// Run a compiled query and build its envelope.
    pub async fn run(&self, compiled: &Compiled) -> Result<Envelope> {
        Ok(self.run_with_batches(compiled).await?.0)
    }

    /// Run one analytics query: its envelope and its rows as Arrow batches (at most the
    /// envelope's rows, columns named as in the envelope), for Parquet output.
    pub async fn query_batches(&self, text: &str) -> Result<(Envelope, Vec<RecordBatch>)> {
        self.batches_of(parse(text)?).await
    }

    async fn batches_of(&self, statement: Statement) -> Result<(Envelope, Vec<RecordBatch>)> {
        match statement {
            Statement::Watch(w) => Err(watch_is_a_loop().at(w.span)),
            statement => {
                self.run_with_batches(&self.compile_statement(statement).await?)
                    .await
            }
        }
    }

    async fn run_with_batches(&self, compiled: &Compiled) -> Result<(Envelope, Vec<RecordBatch>)> {
        let lowered = &compiled.lowered;
        let capped = match self.exec.run_lowered(lowered).await {
            Ok(c) => c,
            Err(e) => return Err(self.name_unreadable_file(e).await),
        };
        let (mut envelope, batches) = crate::envelope::analytics(
            lowered,
            &capped,
            compiled.sql.as_deref().ok(),
            &self.dataset().config().units,
            self.limits(),
        )?;
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

/// The SQL text DataFusion's unparser gives for a plan.
pub fn plan_sql(plan: &LogicalPlan) -> Result<String> {
    plan_to_sql(&crate::group_cap::strip(plan))
        .map(|s| s.to_string())
        .map_err(Error::from)
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
