//! Lowering of aggregates: count, count_distinct, sum, avg, min, max, variance and stddev
//! (sample forms, n − 1), exact percentile (our `percentile` UDAF), and `stats` (our struct UDAF).

use datafusion::arrow::datatypes::DataType;
use datafusion::common::DFSchema;
use datafusion::functions_aggregate::count::count_all;
use datafusion::functions_aggregate::expr_fn::{
    avg, count, count_distinct, max, min, stddev, sum, var_sample,
};
use datafusion::logical_expr::{Expr, cast, try_cast};
use signalql_udfs::aggregate::count_distinct::count_distinct_text;
use signalql_udfs::aggregate::percentile::percentile;
use signalql_udfs::aggregate::stats::stats;

use super::fields::{Resolved, is_numeric, is_text, resolve};
use crate::error::{Error, Result};
use crate::syntax::ast::{AggFn, Aggregate, FieldRef, Span};

/// A lowered aggregate: its expression and whether it counts (counts are 0, not NULL, on
/// an empty bucket of a dense series).
pub struct LoweredAggregate {
    pub expr: Expr,
    pub counts: bool,
}

fn numeric_input(field: &FieldRef, schema: &DFSchema, span: Span, func: &str) -> Result<Expr> {
    let r = resolve(field, schema, span)?;
    if is_numeric(&r.data_type) {
        Ok(match r.data_type {
            DataType::Float64 => r.expr,
            _ if func == "sum" => r.expr,
            _ => cast(r.expr, DataType::Float64),
        })
    } else if r.dynamic && (is_text(&r.data_type) || r.data_type == DataType::Null) {
        // JSON or text values: numbers are read as numbers, anything else is NULL.
        Ok(try_cast(r.expr, DataType::Float64))
    } else {
        Err(Error::type_error(format!(
            "{func}() needs a numeric field, and {} has type {}",
            super::fields::field_text(field),
            r.data_type
        ))
        .at(span))
    }
}

/// A field an aggregate can compare or hash: anything but a struct, map or list.
fn scalar_input(field: &FieldRef, schema: &DFSchema, span: Span, func: &str) -> Result<Resolved> {
    let r = resolve(field, schema, span)?;
    if matches!(
        r.data_type,
        DataType::Struct(_) | DataType::Map(_, _) | DataType::List(_)
    ) {
        return Err(Error::type_error(format!(
            "{func}() needs a scalar field, and {} has type {}",
            super::fields::field_text(field),
            r.data_type
        ))
        .at(span));
    }
    Ok(r)
}

/// Lower one aggregate over rows of `schema`.
pub fn lower_aggregate(agg: &Aggregate, schema: &DFSchema, span: Span) -> Result<LoweredAggregate> {
    let counting = |expr| LoweredAggregate { expr, counts: true };
    let other = |expr| LoweredAggregate {
        expr,
        counts: false,
    };
    Ok(match agg {
        Aggregate::CountAll => counting(count_all()),
        Aggregate::Standard(AggFn::Count, f) => counting(count(resolve(f, schema, span)?.expr)),
        Aggregate::Standard(AggFn::CountDistinct, f) => {
            let input = scalar_input(f, schema, span, "count_distinct")?;
            // Text has our own distinct counter, whose memory the pool sees (udfs'
            // count_distinct.rs); DataFusion's serves the other types.
            counting(if is_text(&input.data_type) {
                count_distinct_text(input.expr)
            } else {
                count_distinct(input.expr)
            })
        }
        Aggregate::Standard(AggFn::Sum, f) => other(sum(numeric_input(f, schema, span, "sum")?)),
        Aggregate::Standard(AggFn::Avg, f) => other(avg(numeric_input(f, schema, span, "avg")?)),
        Aggregate::Standard(AggFn::Variance, f) => {
            other(var_sample(numeric_input(f, schema, span, "variance")?))
        }
        Aggregate::Standard(AggFn::Stddev, f) => {
            other(stddev(numeric_input(f, schema, span, "stddev")?))
        }
        Aggregate::Standard(AggFn::Min, f) => {
            other(min(scalar_input(f, schema, span, "min")?.expr))
        }
        Aggregate::Standard(AggFn::Max, f) => {
            other(max(scalar_input(f, schema, span, "max")?.expr))
        }
        Aggregate::Percentile(f, p) => {
            let input = numeric_input(f, schema, span, "percentile")?;
            other(percentile(input, *p))
        }
        Aggregate::Stats(f) => other(stats(numeric_input(f, schema, span, "stats")?)),
        Aggregate::Metric(_) => {
            return Err(Error::internal("metric() is lowered through the registry").at(span));
        }
    })
}

/// [`lower_aggregate`], with `metric(name)` lowered through the query's metric registry.
pub fn lower_measure(
    agg: &Aggregate,
    input: &super::LowerInput,
    source: &crate::syntax::ast::Source,
    schema: &DFSchema,
    span: Span,
) -> Result<LoweredAggregate> {
    match agg {
        Aggregate::Metric(name) => {
            let m = input.metrics.get(name, span)?;
            input.metrics.lower(m, source, schema, span)
        }
        Aggregate::Standard(func @ (AggFn::Min | AggFn::Max), f)
            if input.numeric_keys.contains(f) =>
        {
            // A JSON property whose every value the query reads is a number (bind pass).
            let x = try_cast(resolve(f, schema, span)?.expr, DataType::Float64);
            Ok(LoweredAggregate {
                expr: if *func == AggFn::Min { min(x) } else { max(x) },
                counts: false,
            })
        }
        _ => lower_aggregate(agg, schema, span),
    }
}
