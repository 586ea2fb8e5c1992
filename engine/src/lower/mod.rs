//! Lowering of bound SignalQL queries into DataFusion logical plans.

pub mod after;
pub mod aggregate;
pub mod enrich;
pub mod fields;
pub mod funnel;
pub mod metric;
pub(crate) mod plan;
pub mod predicate;
pub mod retrieve;
pub mod scan;
pub mod source;
pub mod time;
pub mod traverse;
pub mod trend;

use std::sync::Arc;

use chrono::{DateTime, Utc};
use datafusion::logical_expr::LogicalPlan;
use signalql_catalog::TableInfo;

pub(crate) use plan::{project, sort};

pub use crate::limits::Limits;
pub use time::Interval;

/// The tables of a query's source, as the bind pass opened them ([`crate::bind`]).
pub enum SourceTables {
    /// `FROM events` (also a funnel's and a sequence's), with the users table when the query
    /// reads v0.1 `traits.K` and events has no `traits` of its own.
    Events {
        events: TableInfo,
        users: Option<TableInfo>,
    },
    /// `FROM entity(type)`, with TRAVERSE's relationships when the query has one.
    Entities {
        entity_type: String,
        entities: TableInfo,
        traversal: Option<Traversal>,
    },
}

impl SourceTables {
    /// The source table: events, or entities.
    pub fn table(&self) -> &TableInfo {
        match self {
            SourceTables::Events { events, .. } => events,
            SourceTables::Entities { entities, .. } => entities,
        }
    }
}

/// TRAVERSE, bound: the clause and the relationships table it walks.
pub struct Traversal {
    pub clause: crate::syntax::ast::Traverse,
    pub relationships: TableInfo,
}

/// `signal(name)` and `probability(name)`, bound: the signals table, the names joined before
/// WHERE (all of them, or with TRAVERSE only those WHERE reads) and those joined to the
/// entities TRAVERSE reaches.
pub struct Signals {
    pub table: TableInfo,
    pub before: Vec<String>,
    pub after: Vec<String>,
}

/// What lowering receives besides the query: what the bind pass opened and decided.
pub struct LowerInput<'a> {
    pub source: &'a SourceTables,
    /// The signals table and the names to join, when the query reads a signal.
    pub signals: Option<&'a Signals>,
    /// The metric registry (empty unless the query names a metric).
    pub metrics: &'a crate::metrics::Registry,
    /// The time column when it is not the source's (a metric's `time_column`).
    pub time_column: Option<&'a str>,
    /// `T` for queries without AS OF.
    pub now: DateTime<Utc>,
    pub limits: &'a Limits,
    /// For a bucketed query without DURING: the span of the matching data, so the series
    /// can still be dense (computed by the bind pass before lowering).
    pub data_span: Option<Interval>,
    /// Text-held properties read as numbers by min, max and ORDER BY (bind pass).
    pub numeric_keys: &'a [crate::syntax::ast::FieldRef],
}

impl LowerInput<'_> {
    /// The source table: events, or entities.
    pub fn table(&self) -> &TableInfo {
        self.source.table()
    }
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

/// A query split at its aggregate (see [`Lowered::staged`]): the aggregate's plan, and the
/// rest of the query built over the aggregate's materialised result.
pub trait Stage: std::fmt::Debug + Send + Sync {
    fn aggregate(&self) -> &LogicalPlan;
    /// The rest of the query over `aggregate` (a scan of the aggregate's result, whose columns
    /// are referenced by name).
    fn finish(&self, aggregate: LogicalPlan) -> crate::error::Result<Lowered>;
    /// Checks the aggregate's result before the rest runs over it (a dense series' size
    /// against `max_groups`).
    fn check(
        &self,
        _aggregate: &[datafusion::arrow::array::RecordBatch],
        _max_groups: u64,
    ) -> crate::error::Result<()> {
        Ok(())
    }
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
    pub staged: Option<Arc<dyn Stage>>,
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
