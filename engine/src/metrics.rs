//! Governed metrics (docs/metrics.md): the registry of `metrics.toml`, parsed and checked (every
//! referenced metric exists, no cycle). A metric's lowering into one DataFusion expression is
//! in `lower/metric.rs`; `FROM metric(m)`'s desugaring in the bind pass.
//!
//! A metric is an expression of aggregates, other metrics and numbers under `+ - * /`. Each
//! aggregate reads only the rows that pass the filter of the metric that names it, so a metric
//! means the same wherever it is used: `metric(b)` inside `a` keeps `b`'s filter, not `a`'s.
//! A query's own WHERE and window apply to every aggregate.

use std::collections::BTreeMap;

use serde::Serialize;
use signalql_catalog::metrics::{MetricDef, read_metrics};

use crate::error::{Error, Result};
use crate::syntax::ast::{Aggregate, BoolExpr, MetricExpr, Source, Span};
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
        let defs = read_metrics(root)?;
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

    /// The fields `name` and the metrics it uses read (their aggregates and filters).
    pub fn fields(&self, name: &str) -> Vec<crate::syntax::ast::FieldRef> {
        fn walk(e: &MetricExpr, out: &mut Vec<crate::syntax::ast::FieldRef>) {
            match e {
                MetricExpr::Aggregate(
                    Aggregate::Standard(_, f) | Aggregate::Percentile(f, _) | Aggregate::Stats(f),
                ) => out.push(f.clone()),
                MetricExpr::Neg(x) => walk(x, out),
                MetricExpr::Binary(_, l, r) => {
                    walk(l, out);
                    walk(r, out);
                }
                _ => {}
            }
        }
        let mut out = Vec::new();
        for m in self.closure(name) {
            walk(&m.expr, &mut out);
            if let Some(f) = &m.filter {
                for (op, _) in crate::syntax::walk::operands(f) {
                    if let crate::syntax::ast::Operand::Field(f) = op {
                        out.push(f.clone());
                    }
                }
            }
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
}

/// The name of a metric source's value column.
pub const VALUE_COLUMN: &str = "metric_value";
