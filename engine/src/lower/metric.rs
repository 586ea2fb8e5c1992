//! A governed metric's lowering (docs/metrics.md): the metric as one aggregate expression over
//! the source rows, each aggregate with the filter of the metric that names it, and the
//! `metric_value` column of a lowered `FROM metric(m)` query.

use datafusion::arrow::datatypes::DataType;
use datafusion::common::DFSchema;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::functions::core::expr_fn::nullif;
use datafusion::logical_expr::{Expr, LogicalPlanBuilder, cast, lit};

use super::Lowered;
use super::aggregate::{LoweredAggregate, lower_aggregate};
use super::fields::{Resolved, column, resolve};
use super::predicate::lower_bool;
use crate::error::{Error, ErrorKind, Result};
use crate::metrics::{Metric, Registry, VALUE_COLUMN};
use crate::syntax::ast::{Aggregate, ArithOp, BoolExpr, MetricExpr, Operand, Source, Span};

impl Registry {
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
        check_source(m, source, span)?;
        self.lower_expr(m, &m.expr, schema, span)
    }

    /// An error binding metric `m`'s own expression, named as such. (Errors of the metrics `m`
    /// uses are named by their own metric, where they arise.)
    fn in_metric(&self, m: &Metric, e: Error, span: Span) -> Error {
        if e.kind == ErrorKind::Internal {
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
                let inner = self
                    .get(name, span)
                    .and_then(|inner| check_source(inner, &m.source, span).map(|()| inner))
                    .map_err(|e| self.in_metric(m, e, span))?;
                self.lower_expr(inner, &inner.expr, schema, span)?
            }
            MetricExpr::Aggregate(a) => {
                let lowered = lower_aggregate(a, schema, span).and_then(|l| match &m.filter {
                    None => Ok(l),
                    Some(f) => Ok(LoweredAggregate {
                        expr: with_filter(l.expr, lower_filter(f, schema)?)?,
                        counts: l.counts,
                    }),
                });
                lowered.map_err(|e| self.in_metric(m, e, span))?
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

/// A metric defined over `m.source` is read by a query over `source`: they must be the same.
fn check_source(m: &Metric, source: &Source, span: Span) -> Result<()> {
    let same = match (&m.source, source) {
        (Source::Entity(a), Source::Entity(b)) => a == b,
        (Source::Entity(_), _) | (_, Source::Entity(_)) => false,
        _ => true,
    };
    if same {
        return Ok(());
    }
    Err(Error::type_error(format!(
        "metric `{}` is defined over {}, but the query reads {source}",
        m.def.name, m.source
    ))
    .at(span))
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

/// Name the column of `metric(m)` `metric_value` in a lowered `FROM metric(m)` query.
pub fn rename_value_column(lowered: &mut Lowered, name: &[String]) -> Result<()> {
    let from = format!("metric({})", name.join("."));
    let mut projection = Vec::new();
    for c in &mut lowered.columns {
        let col = column(&c.name);
        if c.name == from {
            c.name = VALUE_COLUMN.to_string();
            projection.push(col.alias(VALUE_COLUMN));
        } else {
            projection.push(col);
        }
    }
    lowered.plan = LogicalPlanBuilder::from(lowered.plan.clone())
        .project(projection)?
        .build()?;
    Ok(())
}
