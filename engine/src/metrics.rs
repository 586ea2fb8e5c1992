//! Governed metrics (docs/metrics.md): the registry of `metrics.toml`, parsed and checked (every
//! referenced metric exists, no cycle), and a metric's lowering into one DataFusion expression
//! over the source rows.
//!
//! A metric is an expression of aggregates, other metrics and numbers under `+ - * /`. Each
//! aggregate reads only the rows that pass the filter of the metric that names it, so a metric
//! means the same wherever it is used: `metric(b)` inside `a` keeps `b`'s filter, not `a`'s.
//! A query's own WHERE and window apply to every aggregate.

use std::collections::BTreeMap;

use datafusion::arrow::datatypes::DataType;
use datafusion::common::DFSchema;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::functions::core::expr_fn::nullif;
use datafusion::logical_expr::{Expr, cast, lit};
use serde::Serialize;
use signalql_catalog::metrics::{MetricDef, read_metrics};

use crate::error::{Error, ErrorKind, Result};
use crate::lower::aggregate::{LoweredAggregate, lower_aggregate};
use crate::lower::fields::{Resolved, resolve};
use crate::lower::predicate::lower_bool;
use crate::syntax::ast::{Aggregate, ArithOp, BoolExpr, MetricExpr, Operand, Source, Span};
use crate::syntax::{parse_metric_expression, parse_predicate};

/// A parsed registry record.
#[derive(Debug, Clone)]
pub struct Metric {
    pub def: MetricDef,
    pub expr: MetricExpr,
    pub filter: Option<BoolExpr>,
    pub source: Source,
}

/// What the envelope's `metadata.metrics` lists for each metric a query used.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct MetricInfo {
    pub name: String,
    pub version: String,
    pub unit: Option<String>,
    /// The expression as written in the registry.
    pub definition: String,
    pub filter: Option<String>,
    /// The expression with every metric replaced by its definition and every aggregate
    /// carrying its filter: what was computed.
    pub resolved_expression: String,
}

/// The parsed `metrics.toml` of a dataset.
#[derive(Debug, Clone, Default)]
pub struct Registry {
    metrics: BTreeMap<String, Metric>,
}

/// An error in a registry record, reported at `span` of the query that uses the registry.
fn record_error(name: &str, what: &str, text: &str, e: Error) -> Error {
    let at = e
        .span
        .map(|s| format!(" at column {}", s.column))
        .unwrap_or_default();
    Error::new(
        e.kind,
        format!(
            "metrics.toml, metric `{name}`: its {what} {text:?} is invalid{at}: {}",
            e.message
        ),
    )
}

fn parse_source(name: &str, text: Option<&str>) -> Result<Source> {
    let Some(text) = text.map(str::trim) else {
        return Ok(Source::Events);
    };
    if text == "events" {
        return Ok(Source::Events);
    }
    if let Some(inner) = text
        .strip_prefix("entity(")
        .and_then(|t| t.strip_suffix(')'))
    {
        let parts: Vec<String> = inner.trim().split('.').map(str::to_string).collect();
        if parts.iter().all(|p| {
            !p.is_empty()
                && p.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && !p.starts_with(|c: char| c.is_ascii_digit())
        }) {
            return Ok(Source::Entity(parts));
        }
    }
    Err(Error::type_error(format!(
        "metrics.toml, metric `{name}`: source {text:?} is neither `events` nor `entity(type)`"
    )))
}

/// The metrics an expression names directly, in order.
fn references(e: &MetricExpr, out: &mut Vec<String>) {
    match e {
        MetricExpr::Aggregate(Aggregate::Metric(name)) => out.push(name.join(".")),
        MetricExpr::Neg(x) => references(x, out),
        MetricExpr::Binary(_, l, r) => {
            references(l, out);
            references(r, out);
        }
        MetricExpr::Number(_) | MetricExpr::Aggregate(_) => {}
    }
}

impl Registry {
    /// Read and check `root/metrics.toml` (an empty registry when it is absent).
    pub fn load(root: &signalql_catalog::Root) -> Result<Registry> {
        let defs = read_metrics(root).map_err(|e| Error::io(e.to_string()))?;
        let mut metrics = BTreeMap::new();
        for def in defs {
            let expr = parse_metric_expression(&def.expression)
                .map_err(|e| record_error(&def.name, "expression", &def.expression, e))?;
            let filter = match &def.filter {
                Some(f) => {
                    Some(parse_predicate(f).map_err(|e| record_error(&def.name, "filter", f, e))?)
                }
                None => None,
            };
            let source = parse_source(&def.name, def.source.as_deref())?;
            metrics.insert(
                def.name.clone(),
                Metric {
                    def,
                    expr,
                    filter,
                    source,
                },
            );
        }
        let registry = Registry { metrics };
        for name in registry.metrics.keys() {
            registry.check_acyclic(name, &mut Vec::new())?;
        }
        Ok(registry)
    }

    /// Every metric `name` reaches exists and none reaches itself.
    fn check_acyclic(&self, name: &str, path: &mut Vec<String>) -> Result<()> {
        if let Some(i) = path.iter().position(|p| p == name) {
            let mut cycle = path[i..].to_vec();
            cycle.push(name.to_string());
            return Err(Error::type_error(format!(
                "metrics.toml: the metrics {} form a cycle",
                cycle.join(" → ")
            )));
        }
        let Some(m) = self.metrics.get(name) else {
            return Err(Error::unknown_field(format!(
                "metrics.toml: metric `{}` uses metric({name}), which is not defined",
                path.last().map(String::as_str).unwrap_or("?")
            )));
        };
        let mut refs = Vec::new();
        references(&m.expr, &mut refs);
        path.push(name.to_string());
        for r in refs {
            self.check_acyclic(&r, path)?;
        }
        path.pop();
        Ok(())
    }

    pub fn is_empty(&self) -> bool {
        self.metrics.is_empty()
    }

    /// All metrics, by name.
    pub fn all(&self) -> impl Iterator<Item = &Metric> {
        self.metrics.values()
    }

    /// The metric `name`, or `unknown_field` at `span`.
    pub fn get(&self, name: &[String], span: Span) -> Result<&Metric> {
        let key = name.join(".");
        self.metrics.get(&key).ok_or_else(|| {
            let known: Vec<&str> = self.metrics.keys().map(String::as_str).collect();
            Error::unknown_field(format!(
                "unknown metric `{key}`: {}",
                if known.is_empty() {
                    "the dataset has no metrics.toml or it defines none".to_string()
                } else {
                    format!("metrics.toml defines {}", known.join(", "))
                }
            ))
            .at(span)
        })
    }

    /// `name` and every metric it uses, each once, `name` first.
    pub fn closure(&self, name: &str) -> Vec<&Metric> {
        let mut out: Vec<&Metric> = Vec::new();
        let mut todo = vec![name.to_string()];
        while let Some(n) = todo.pop() {
            let Some(m) = self.metrics.get(&n) else {
                continue;
            };
            if out.iter().any(|o| o.def.name == n) {
                continue;
            }
            let mut refs = Vec::new();
            references(&m.expr, &mut refs);
            refs.reverse();
            todo.extend(refs);
            out.push(m);
        }
        out
    }

    /// The metadata record of a metric.
    pub fn info(&self, m: &Metric) -> MetricInfo {
        MetricInfo {
            name: m.def.name.clone(),
            version: m.def.version.clone(),
            unit: m.def.unit.clone(),
            definition: m.expr.to_string(),
            filter: m.filter.as_ref().map(|f| f.to_string()),
            resolved_expression: self.resolved(&m.expr, m.filter.as_ref()),
        }
    }

    /// `e` with metrics expanded and each aggregate followed by its filter.
    fn resolved(&self, e: &MetricExpr, filter: Option<&BoolExpr>) -> String {
        match e {
            MetricExpr::Aggregate(Aggregate::Metric(name)) => {
                match self.metrics.get(&name.join(".")) {
                    Some(m) => format!("({})", self.resolved(&m.expr, m.filter.as_ref())),
                    None => e.to_string(),
                }
            }
            MetricExpr::Aggregate(a) => match filter {
                Some(f) => format!("{a} FILTER (WHERE {f})"),
                None => a.to_string(),
            },
            MetricExpr::Number(_) => e.to_string(),
            MetricExpr::Neg(x) => format!("-({})", self.resolved(x, filter)),
            MetricExpr::Binary(op, l, r) => format!(
                "({} {op} {})",
                self.resolved(l, filter),
                self.resolved(r, filter)
            ),
        }
    }

    /// The metric as one aggregate expression over rows of `schema` (the query's source, which
    /// must be the metric's). A lone aggregate keeps its type and counts as a count when it is
    /// one; arithmetic is in Float64 with x / 0 giving NULL.
    pub fn lower(
        &self,
        m: &Metric,
        source: &Source,
        schema: &DFSchema,
        span: Span,
    ) -> Result<LoweredAggregate> {
        let same = match (&m.source, source) {
            (Source::Entity(a), Source::Entity(b)) => a == b,
            (Source::Entity(_), _) | (_, Source::Entity(_)) => false,
            _ => true,
        };
        if !same {
            return Err(Error::type_error(format!(
                "metric `{}` is defined over {}, but the query reads {source}",
                m.def.name, m.source
            ))
            .at(span));
        }
        self.lower_expr(m, &m.expr, schema, span)
            .map_err(|e| self.in_metric(m, e, span))
    }

    fn in_metric(&self, m: &Metric, e: Error, span: Span) -> Error {
        if e.message.starts_with("metrics.toml") || e.kind == ErrorKind::Internal {
            return e;
        }
        Error::new(
            e.kind,
            format!(
                "metrics.toml, metric `{}` does not bind: {}",
                m.def.name, e.message
            ),
        )
        .at(span)
    }

    fn lower_expr(
        &self,
        m: &Metric,
        e: &MetricExpr,
        schema: &DFSchema,
        span: Span,
    ) -> Result<LoweredAggregate> {
        let float = |x: LoweredAggregate| cast(x.expr, DataType::Float64);
        let arith = |expr| LoweredAggregate {
            expr,
            counts: false,
        };
        Ok(match e {
            MetricExpr::Number(x) => arith(lit(*x)),
            MetricExpr::Aggregate(Aggregate::Metric(name)) => {
                let inner = self.get(name, span)?;
                self.lower(inner, &m.source, schema, span)?
            }
            MetricExpr::Aggregate(a) => {
                let l = lower_aggregate(a, schema, span)?;
                match &m.filter {
                    None => l,
                    Some(f) => LoweredAggregate {
                        expr: with_filter(l.expr, lower_filter(f, schema)?)?,
                        counts: l.counts,
                    },
                }
            }
            MetricExpr::Neg(x) => arith(-float(self.lower_expr(m, x, schema, span)?)),
            MetricExpr::Binary(op, l, r) => {
                let l = float(self.lower_expr(m, l, schema, span)?);
                let r = float(self.lower_expr(m, r, schema, span)?);
                arith(match op {
                    ArithOp::Add => l + r,
                    ArithOp::Sub => l - r,
                    ArithOp::Mul => l * r,
                    ArithOp::Div => l / nullif(r, lit(0.0)),
                })
            }
        })
    }
}

/// A metric filter as a predicate over the source rows.
fn lower_filter(f: &BoolExpr, schema: &DFSchema) -> Result<Expr> {
    lower_bool(f, &|op: &Operand, span: Span| -> Result<Resolved> {
        match op {
            Operand::Field(field) => resolve(field, schema, span),
            _ => Err(Error::type_error(
                "a metric filter compares fields of the source rows, not aggregates",
            )),
        }
    })
}

/// Give every aggregate call in `expr` the `FILTER (WHERE filter)` clause.
fn with_filter(expr: Expr, filter: Expr) -> Result<Expr> {
    Ok(expr
        .transform_up(|e| match e {
            Expr::AggregateFunction(mut af) => {
                af.params.filter = Some(Box::new(match af.params.filter.take() {
                    Some(existing) => existing.as_ref().clone().and(filter.clone()),
                    None => filter.clone(),
                }));
                Ok(Transformed::yes(Expr::AggregateFunction(af)))
            }
            other => Ok(Transformed::no(other)),
        })?
        .data)
}

/// The metrics a query names (its `FROM metric(…)` source and `metric(…)` aggregates), each once.
pub fn names_in(q: &crate::syntax::ast::RetrieveQuery) -> Vec<String> {
    use crate::syntax::ast::{OrderKey, ReturnItem};
    let mut out: Vec<String> = Vec::new();
    let mut add = |a: &Aggregate| {
        if let Aggregate::Metric(n) = a {
            let n = n.join(".");
            if !out.contains(&n) {
                out.push(n);
            }
        }
    };
    if let Source::Metric(n) = &q.source {
        add(&Aggregate::Metric(n.clone()));
    }
    for r in &q.returns {
        if let ReturnItem::Aggregate(a) = r {
            add(a);
        }
    }
    if let Some(h) = &q.having {
        for (op, _) in crate::lower::enrich::operands(h) {
            if let Operand::Aggregate(a) = op {
                add(a);
            }
        }
    }
    for o in &q.order_by {
        if let OrderKey::Aggregate(a) = &o.key {
            add(a);
        }
    }
    out
}

/// The name of a metric source's value column.
pub const VALUE_COLUMN: &str = "metric_value";

/// `FROM metric(m) …` as a query over the metric's source, where `metric_value` (in RETURN,
/// HAVING and ORDER BY) is the aggregate `metric(m)`.
pub fn metric_view(
    q: &crate::syntax::ast::RetrieveQuery,
    name: &[String],
    source: &Source,
) -> crate::syntax::ast::RetrieveQuery {
    use crate::syntax::ast::{FieldRef, OrderKey, Predicate, ReturnItem};
    let is_value =
        |f: &FieldRef| matches!(f, FieldRef::Path(p) if p.len() == 1 && p[0] == VALUE_COLUMN);
    let metric = Aggregate::Metric(name.to_vec());
    fn having(e: &BoolExpr, is_value: &dyn Fn(&FieldRef) -> bool, metric: &Aggregate) -> BoolExpr {
        match e {
            BoolExpr::Or(l, r) => BoolExpr::Or(
                Box::new(having(l, is_value, metric)),
                Box::new(having(r, is_value, metric)),
            ),
            BoolExpr::And(l, r) => BoolExpr::And(
                Box::new(having(l, is_value, metric)),
                Box::new(having(r, is_value, metric)),
            ),
            BoolExpr::Not(x) => BoolExpr::Not(Box::new(having(x, is_value, metric))),
            BoolExpr::Predicate(p) => BoolExpr::Predicate(Predicate {
                lhs: match &p.lhs {
                    Operand::Field(f) if is_value(f) => Operand::Aggregate(metric.clone()),
                    other => other.clone(),
                },
                op: p.op.clone(),
                span: p.span,
            }),
        }
    }
    let mut v = q.clone();
    v.source = source.clone();
    for r in &mut v.returns {
        if let ReturnItem::Field(f) = r
            && is_value(f)
        {
            *r = ReturnItem::Aggregate(metric.clone());
        }
    }
    v.having = q.having.as_ref().map(|h| having(h, &is_value, &metric));
    for o in &mut v.order_by {
        if let OrderKey::Field(f) = &o.key
            && is_value(f)
        {
            o.key = OrderKey::Aggregate(metric.clone());
        }
    }
    v
}

/// Name the column of `metric(m)` `metric_value` in a lowered `FROM metric(m)` query.
pub fn rename_value_column(lowered: &mut crate::lower::Lowered, name: &[String]) -> Result<()> {
    let from = format!("metric({})", name.join("."));
    let mut projection = Vec::new();
    for c in &mut lowered.columns {
        let col = crate::lower::fields::column(&c.name);
        if c.name == from {
            c.name = VALUE_COLUMN.to_string();
            projection.push(col.alias(VALUE_COLUMN));
        } else {
            projection.push(col);
        }
    }
    lowered.plan = datafusion::logical_expr::LogicalPlanBuilder::from(lowered.plan.clone())
        .project(projection)?
        .build()?;
    Ok(())
}
