//! The SignalQL abstract syntax tree (v0.3 analytics, v0.1 desugared, v0.5 context forms).
//!
//! The AST is owned, serialisable to JSON, and compares equal ignoring source spans, so
//! `parse(format(q)) == q` can be asserted directly. v0.1 queries are desugared into these
//! v0.3 shapes by the parser; the only trace of the v0.1 spelling that survives is
//! [`RetrieveQuery::time_column`] (v0.1 `GROUP BY DAY` names its time column `day`).

use serde::{Deserialize, Serialize};

/// A byte range in the original (untrimmed) query text with the 1-based line and column
/// (in Unicode scalar values) of its start. Spans never take part in equality.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub struct Span {
    pub start: usize,
    pub end: usize,
    pub line: u32,
    pub column: u32,
}

impl PartialEq for Span {
    fn eq(&self, _other: &Self) -> bool {
        true
    }
}
impl Eq for Span {}

/// One parsed statement. Its variants differ in size (a retrieve query is the largest); a
/// statement is parsed once and moved little, so none is boxed.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Statement {
    Retrieve(RetrieveQuery),
    Funnel(FunnelQuery),
    Sequence(SequenceQuery),
    Watch(WatchQuery),
    Describe(DescribeQuery),
    ContextTask(ContextQuery),
    ExplainContext(ExplainContext),
    FindObject(FindObjectQuery),
    /// `EXPLAIN [ANALYZE] <query>`: execution-plan explain of an analytics query.
    Explain(ExplainQuery),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    Events,
    Entity(Vec<String>),
    Metric(Vec<String>),
}

/// A reference to a value of the current row: a dotted path or a field function.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FieldRef {
    /// `identifier ( "." identifier )*`, e.g. `["properties", "plan"]`.
    Path(Vec<String>),
    Signal(String),
    Probability(String),
    SemanticMatch(String),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", content = "value", rename_all = "snake_case")]
pub enum Literal {
    String(String),
    Integer(i64),
    /// A decimal literal; the formatter always prints it with a `.`.
    Decimal(f64),
    Boolean(bool),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Comparator {
    #[serde(rename = "=")]
    Eq,
    #[serde(rename = "!=")]
    NotEq,
    #[serde(rename = ">")]
    Gt,
    #[serde(rename = "<")]
    Lt,
    #[serde(rename = ">=")]
    GtEq,
    #[serde(rename = "<=")]
    LtEq,
}

/// The left-hand side of a predicate. WHERE only allows `Field`; HAVING allows all three.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Operand {
    Field(FieldRef),
    Aggregate(Aggregate),
    /// Bare `count` in HAVING, shorthand for `count()`.
    CountShorthand,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PredicateOp {
    Compare(Comparator, Literal),
    In(Vec<Literal>),
    NotIn(Vec<Literal>),
    /// Inclusive, as in SQL.
    Between(Literal, Literal),
    /// Case-sensitive substring test.
    Contains(String),
    IsNull,
    IsNotNull,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Predicate {
    pub lhs: Operand,
    pub op: PredicateOp,
    #[serde(skip)]
    pub span: Span,
}

/// Boolean combination of predicates. Binary and left-associative as parsed
/// (`a AND b AND c` is `And(And(a, b), c)`); parentheses are not kept, the formatter
/// re-inserts those needed to preserve the tree.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BoolExpr {
    Or(Box<BoolExpr>, Box<BoolExpr>),
    And(Box<BoolExpr>, Box<BoolExpr>),
    Not(Box<BoolExpr>),
    Predicate(Predicate),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TimeUnit {
    Hour,
    Day,
    Week,
    Month,
}

/// `n unit`, e.g. `7 d`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Duration {
    pub n: u64,
    pub unit: TimeUnit,
}

/// An RFC 3339 instant, normalised by the parser to UTC with microsecond precision
/// and printed as `YYYY-MM-DDTHH:MM:SS[.ffffff]Z`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Timestamp(pub String);

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TimeWindow {
    /// `[T − n·unit, T)`.
    Last(Duration),
    /// `[start, end)`.
    Between { start: Timestamp, end: Timestamp },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Window {
    pub range: TimeWindow,
    pub as_of: Option<Timestamp>,
    #[serde(skip)]
    pub span: Span,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AggFn {
    Count,
    CountDistinct,
    Sum,
    Avg,
    Min,
    Max,
    Variance,
    Stddev,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Aggregate {
    /// `count()`.
    CountAll,
    /// `agg_fn(field)`.
    Standard(AggFn, FieldRef),
    /// `percentile(field, p)` with 0 <= p <= 1.
    Percentile(FieldRef, f64),
    /// `stats(field)`.
    Stats(FieldRef),
    /// `metric(name)`: a governed metric of the registry (docs/metrics.md).
    Metric(Vec<String>),
}

/// Arithmetic in metric definitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ArithOp {
    #[serde(rename = "+")]
    Add,
    #[serde(rename = "-")]
    Sub,
    #[serde(rename = "*")]
    Mul,
    #[serde(rename = "/")]
    Div,
}

/// A metric definition's expression: aggregates, other metrics and numbers under `+ - * /`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MetricExpr {
    Number(f64),
    /// An aggregate, or `metric(name)` (another metric).
    Aggregate(Aggregate),
    Neg(Box<MetricExpr>),
    Binary(ArithOp, Box<MetricExpr>, Box<MetricExpr>),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReturnItem {
    Field(FieldRef),
    /// Bare `count`.
    Count,
    Aggregate(Aggregate),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OrderKey {
    Field(FieldRef),
    /// Bare `count` (the column of `RETURN count`).
    Count,
    Aggregate(Aggregate),
}

/// One ORDER BY term. The canonical form always prints the direction.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OrderTerm {
    pub key: OrderKey,
    pub descending: bool,
    #[serde(skip)]
    pub span: Span,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Traverse {
    pub relation: String,
    pub depth: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TrendDir {
    Up,
    Down,
    Flat,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Trend {
    pub dir: TrendDir,
    pub over: Duration,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RetrieveQuery {
    pub source: Source,
    pub filter: Option<BoolExpr>,
    pub traverse: Option<Traverse>,
    pub window: Option<Window>,
    pub bucket: Option<TimeUnit>,
    pub group_by: Vec<FieldRef>,
    pub having: Option<BoolExpr>,
    pub returns: Vec<ReturnItem>,
    pub order_by: Vec<OrderTerm>,
    pub limit: Option<u64>,
    pub trend: Option<Trend>,
    /// Name of the bucketed time column when it is not `timestamp` (v0.1 `GROUP BY DAY`
    /// gives `day`). Not printed by the formatter: the canonical text is the v0.3 form.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub time_column: Option<String>,
    /// Span of the whole query (for errors that point at the query).
    #[serde(skip)]
    pub span: Span,
    /// Spans of the RETURN items, parallel to `returns` (for bind errors).
    #[serde(skip)]
    pub return_spans: Vec<Span>,
    /// Spans of the GROUP BY dims, parallel to `group_by`.
    #[serde(skip)]
    pub group_spans: Vec<Span>,
}

impl RetrieveQuery {
    /// `FROM source` with no clause yet (the parser fills it in; funnels build their scan
    /// from one).
    pub fn empty(source: Source, span: Span) -> Self {
        RetrieveQuery {
            source,
            filter: None,
            traverse: None,
            window: None,
            bucket: None,
            group_by: Vec::new(),
            having: None,
            returns: Vec::new(),
            order_by: Vec::new(),
            limit: None,
            trend: None,
            time_column: None,
            span,
            return_spans: Vec::new(),
            group_spans: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FunnelQuery {
    pub steps: Vec<String>,
    pub source: Source,
    pub filter: Option<BoolExpr>,
    pub window: Option<Window>,
    pub within: Duration,
    /// `ORDER STRICT` / `ORDER ANY` (signalql extension); the default is the ordered mode.
    #[serde(default, skip_serializing_if = "FunnelOrder::is_default")]
    pub order: FunnelOrder,
    /// `EXCLUDING "x", "y"` (signalql extension): event names that break a chain.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub excluding: Vec<String>,
    pub group_by: Vec<FieldRef>,
    #[serde(skip)]
    pub span: Span,
}

/// How a funnel's steps must be ordered (see docs/funnels.md).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FunnelOrder {
    /// Steps in order, other events may come between them (the default).
    #[default]
    Ordered,
    /// Steps in order with no other event of the user between consecutive steps.
    Strict,
    /// Steps in any order within the WITHIN span.
    Any,
}

impl FunnelOrder {
    pub fn is_default(&self) -> bool {
        *self == FunnelOrder::Ordered
    }

    /// The mode's name as the funnel UDF takes it.
    pub fn as_str(&self) -> &'static str {
        match self {
            FunnelOrder::Ordered => "ordered",
            FunnelOrder::Strict => "strict",
            FunnelOrder::Any => "any",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SequenceQuery {
    pub steps: Vec<String>,
    pub within: Duration,
    #[serde(skip)]
    pub span: Span,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WatchQuery {
    pub query: Box<RetrieveQuery>,
    pub when: BoolExpr,
    #[serde(skip)]
    pub span: Span,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DescribeTarget {
    Entities,
    Events,
    Signals,
    Metrics,
    Relationships,
    Entity(Vec<String>),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DescribeQuery {
    pub target: DescribeTarget,
    #[serde(skip)]
    pub span: Span,
}

/// Trust levels in their order (`untrusted < … < authoritative`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TrustLevel {
    Untrusted,
    Unknown,
    Inferred,
    Verified,
    Authoritative,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    Data,
    Instruction,
    Prompt,
    Policy,
    Executable,
    Secret,
    UntrustedExternal,
}

/// PREFER items; the derived order is the vocabulary order used by the canonical form.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PreferItem {
    Current,
    Trust(TrustLevel),
    Representation(String),
}

/// EXCLUDE items; the derived order is the vocabulary order used by the canonical form.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExcludeItem {
    Untrusted,
    Stale,
    Role { role: Role, from: Option<Role> },
}

/// `CONTEXT FOR "task" …`. PREFER/EXCLUDE items are merged, de-duplicated and sorted into
/// vocabulary order by the parser, so equal queries have equal ASTs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ContextQuery {
    /// The task text; empty for the entity form.
    pub task: String,
    /// `CONTEXT FOR entity(type, "id")` (the v0.4 form): the entity whose subgraph the
    /// bundle holds; `None` for the task form.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<EntityRef>,
    pub project: Option<String>,
    /// `USING KIND "k"` (signalql extension, the context-packets API's `kind`): only objects
    /// of that kind; others are out of scope, as for USING PROJECT.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    pub budget: Option<u64>,
    pub prefer: Vec<PreferItem>,
    pub exclude: Vec<ExcludeItem>,
    pub max_objects: Option<u64>,
    pub max_depth: Option<u64>,
    pub max_age: Option<Duration>,
    pub with_evidence: bool,
    /// `COMPRESS` (signalql extension, from context-packets.md): an item that does not fit is
    /// shrunk to its task-relevant sentences instead of dropped.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub compress: bool,
    /// `USING ESTIMATOR "name"` (signalql extension): the token estimator, by its recorded
    /// name (`chars-div-4-v1`, `o200k_base`); `None` leaves it to the dataset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimator: Option<String>,
    pub as_of: Option<Timestamp>,
    #[serde(skip)]
    pub span: Span,
}

/// An entity by type and id, as `entity(type, "id")` names it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct EntityRef {
    pub entity_type: String,
    pub entity_id: String,
}

impl EntityRef {
    /// Its graph node name, as links and relationships name entities: `type:id`.
    pub fn node(&self) -> String {
        format!("{}:{}", self.entity_type, self.entity_id)
    }
}

impl ContextQuery {
    /// `CONTEXT FOR "task"` with no clause yet (the parser and the CLI fill it in).
    pub fn for_task(task: String, span: Span) -> Self {
        ContextQuery {
            task,
            subject: None,
            project: None,
            kind: None,
            budget: None,
            prefer: Vec::new(),
            exclude: Vec::new(),
            max_objects: None,
            max_depth: None,
            max_age: None,
            with_evidence: false,
            compress: false,
            estimator: None,
            as_of: None,
            span,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExplainContext {
    /// The full address, `context://ctx_…`.
    pub address: String,
    #[serde(skip)]
    pub span: Span,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FindObjectQuery {
    pub name: Option<String>,
    pub about: Option<String>,
    pub representation: Option<String>,
    pub filter: Option<BoolExpr>,
    pub as_of: Option<Timestamp>,
    pub limit: Option<u64>,
    #[serde(skip)]
    pub span: Span,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExplainQuery {
    pub analyze: bool,
    pub statement: Box<Statement>,
}
