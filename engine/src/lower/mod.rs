//! Lowering of bound SignalQL queries into DataFusion logical plans.

pub mod aggregate;
pub mod enrich;
pub mod fields;
pub mod funnel;
pub mod predicate;
pub mod retrieve;
pub mod source;
pub mod time;
pub mod traverse;
pub mod trend;

use std::sync::Arc;

use chrono::{DateTime, Utc};
use datafusion::logical_expr::{Expr, LogicalPlan, LogicalPlanBuilder, Projection, Sort, SortExpr};
use serde::Serialize;
use signalql_catalog::TableInfo;

pub use time::Interval;

/// `b.project(exprs)`, without DataFusion's column normalisation when the input has no
/// qualified column (aggregate outputs, aliases): normalising then changes nothing, yet it
/// walks the whole input plan once per expression (about 14 % of a funnel's lowering in a
/// profile of criterion `w9/W6`). With a qualified column in the input it is `project` itself.
pub(crate) fn project(
    b: LogicalPlanBuilder,
    exprs: Vec<Expr>,
) -> datafusion::error::Result<LogicalPlanBuilder> {
    let input = b.build()?;
    if input.schema().iter().any(|(q, _)| q.is_some()) {
        return LogicalPlanBuilder::from(input).project(exprs);
    }
    Ok(LogicalPlanBuilder::from(LogicalPlan::Projection(
        Projection::try_new(exprs, Arc::new(input))?,
    )))
}

/// `b.sort_with_limit(exprs, fetch)`, built directly when every key is a plain column of an
/// input without qualified columns: DataFusion's builder would then rewrite the keys through
/// the projection below and normalise them, both changing nothing (about 10 % of a funnel's
/// lowering in a profile of criterion `w9/W7`). Otherwise it is `sort_with_limit` itself.
pub(crate) fn sort(
    b: LogicalPlanBuilder,
    exprs: Vec<SortExpr>,
    fetch: Option<usize>,
) -> datafusion::error::Result<LogicalPlanBuilder> {
    let input = b.build()?;
    let schema = input.schema();
    let plain = schema.iter().all(|(q, _)| q.is_none())
        && exprs.iter().all(|s| match &s.expr {
            Expr::Column(c) => {
                c.relation.is_none() && schema.has_column_with_unqualified_name(&c.name)
            }
            _ => false,
        });
    if !plain {
        return LogicalPlanBuilder::from(input).sort_with_limit(exprs, fetch);
    }
    Ok(LogicalPlanBuilder::from(LogicalPlan::Sort(Sort {
        expr: exprs,
        input: Arc::new(input),
        fetch,
    })))
}

/// Engine limits (DESIGN.md §4), all configurable, reported in `metadata.limits`. Group
/// cardinality has no separate cap: it is bounded by the query memory pool, and what is
/// returned by `max_result_rows` (see docs/semantics.md).
#[derive(Debug, Clone, Serialize)]
pub struct Limits {
    pub max_window_days: u64,
    pub max_funnel_steps: u64,
    pub max_result_rows: u64,
    pub max_buckets: u64,
    pub max_traverse_depth: u64,
    pub query_memory_bytes: u64,
    pub timeout_seconds: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_window_days: 366,
            max_funnel_steps: 10,
            max_result_rows: 10_000,
            max_buckets: 10_000,
            max_traverse_depth: traverse::MAX_DEPTH,
            query_memory_bytes: 4 << 30,
            timeout_seconds: 60,
        }
    }
}

/// What lowering needs besides the query.
pub struct LowerInput<'a> {
    /// The source table: events, or entities for `FROM entity(type)`.
    pub table: &'a TableInfo,
    /// With TRAVERSE: the relationships table and the entities table.
    pub relationships: Option<&'a TableInfo>,
    pub entities: Option<&'a TableInfo>,
    /// The users table, when the query reads v0.1 `traits.K` and events has no `traits`.
    pub users: Option<&'a TableInfo>,
    /// The signals table, when the query reads `signal(name)` or `probability(name)`.
    pub signals: Option<&'a TableInfo>,
    /// The metric registry, when the query names a metric.
    pub metrics: Option<&'a crate::metrics::Registry>,
    /// The time column when it is not the source's (a metric's `time_column`).
    pub time_column: Option<String>,
    /// `T` for queries without AS OF.
    pub now: DateTime<Utc>,
    pub limits: &'a Limits,
    /// For a bucketed query without DURING: the span of the matching data, so the series
    /// can still be dense (computed by the engine before lowering).
    pub data_span: Option<Interval>,
}

/// Where a result column's unit comes from (units are configured per field or column name).
#[derive(Debug, Clone, PartialEq)]
pub enum UnitSource {
    /// The unit of this field path.
    Field(String),
    /// The square of a field's unit (variance).
    Squared(String),
    /// Counts of events.
    Count,
    /// A unit fixed by the column's meaning (`users`, `s`).
    Fixed(&'static str),
    /// The unit of a governed metric (its registry record).
    Metric(String),
    None,
}

#[derive(Debug, Clone)]
pub struct OutColumn {
    pub name: String,
    pub unit: UnitSource,
}

/// A lowered query: the plan and what the envelope needs to describe its result.
#[derive(Debug, Clone)]
pub struct Lowered {
    pub plan: LogicalPlan,
    pub columns: Vec<OutColumn>,
    pub ordered: bool,
    /// The row limit in force (the user's LIMIT or the engine cap).
    pub limit_applied: u64,
    /// When set, the plan fetches one row more than this cap; more rows means truncated.
    pub row_cap: Option<u64>,
    pub as_of: DateTime<Utc>,
    pub window: Option<Interval>,
    /// The same query split at its aggregate, when running the aggregate first saves work
    /// (`plan` is still the whole query, for compile output and the SQL digest).
    pub staged: Option<retrieve::Staged>,
    /// The governed metrics the query used (for `metadata.metrics`).
    pub metrics: Vec<crate::metrics::MetricInfo>,
}

impl Lowered {
    pub fn new(
        plan: LogicalPlan,
        columns: Vec<OutColumn>,
        ordered: bool,
        limit_applied: u64,
        row_cap: Option<u64>,
    ) -> Self {
        Lowered {
            plan,
            columns,
            ordered,
            limit_applied,
            row_cap,
            as_of: DateTime::<Utc>::UNIX_EPOCH,
            window: None,
            staged: None,
            metrics: Vec::new(),
        }
    }
}
