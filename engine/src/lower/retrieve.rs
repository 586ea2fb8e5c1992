//! Lowering of `FROM events …` retrieve queries into a DataFusion `LogicalPlan`, built with
//! `LogicalPlanBuilder` (never SQL text), in the plan order of the spec: filters → window →
//! bucketing → grouping → aggregation → (dense fill) → HAVING → ordering → limit → projection.

use std::sync::Arc;

use datafusion::common::DFSchemaRef;
use datafusion::logical_expr::{Expr, LogicalPlanBuilder, SortExpr};

use super::after::{
    AfterAggregate, BUCKET_KEY, Dense, Staged, aggregate_name, duplicate_column, span_at,
};
use super::aggregate::lower_measure;
use super::fields::{Resolved, field_text, resolve};
use super::scan::{Filtered, scan_filtered, scan_filtered_in};
use super::time::{Interval, bucket_series, bucket_start, micros};
use super::{LowerInput, Lowered, OutColumn, UnitSource, project};
use crate::error::{Error, Result};
use crate::syntax::ast::{Aggregate, Operand, OrderKey, RetrieveQuery, ReturnItem, Span};
use crate::syntax::walk::operands;

/// Does this query aggregate (as opposed to listing rows)?
fn aggregates(q: &RetrieveQuery) -> bool {
    q.bucket.is_some()
        || !q.group_by.is_empty()
        || q.having.is_some()
        || q.returns.iter().any(|r| !matches!(r, ReturnItem::Field(_)))
        || q.order_by
            .iter()
            .any(|o| !matches!(o.key, OrderKey::Field(_)))
}

/// Lower a retrieve query over its source.
pub fn lower_retrieve(q: &RetrieveQuery, input: &LowerInput) -> Result<Lowered> {
    let Filtered {
        builder: b,
        scan_schema,
        ts,
        window,
        as_of,
    } = scan_filtered(q, input)?;
    if q.trend.is_some() && !aggregates(q) {
        return Err(Error::type_error(
            "TREND follows the series of an aggregate: RETURN one (the first is the measure)",
        )
        .at(q.span));
    }
    let mut lowered = if aggregates(q) {
        lower_aggregating(q, input, b, &scan_schema, &ts, window)?
    } else {
        lower_listing(q, input, b, &scan_schema)?
    };
    lowered.as_of = as_of;
    lowered.window = window;
    Ok(lowered)
}

/// The effective row limit: the user's LIMIT if within the engine's cap, else the cap (and
/// one more row is fetched so truncation can be detected).
fn limit_plan(q: &RetrieveQuery, input: &LowerInput) -> (u64, usize, Option<u64>) {
    let cap = input.limits.max_result_rows;
    match q.limit {
        Some(n) if n <= cap => (n, n as usize, None),
        _ => (cap, cap as usize + 1, Some(cap)),
    }
}

/// RETURN of plain fields without grouping: one output row per event.
fn lower_listing(
    q: &RetrieveQuery,
    input: &LowerInput,
    mut b: LogicalPlanBuilder,
    schema: &DFSchemaRef,
) -> Result<Lowered> {
    let mut projection = Vec::new();
    let mut columns = Vec::new();
    let mut default_sort = Vec::new();
    for (i, item) in q.returns.iter().enumerate() {
        let ReturnItem::Field(f) = item else {
            return Err(Error::internal("aggregate in a listing query"));
        };
        let name = field_text(f);
        let r = resolve(f, schema, span_at(&q.return_spans, i, q.span))?;
        if columns.iter().any(|c: &OutColumn| c.name == name) {
            return Err(duplicate_column(&name, span_at(&q.return_spans, i, q.span)));
        }
        if r.data_type.is_primitive()
            || super::fields::is_text(&r.data_type)
            || r.data_type.is_temporal()
        {
            default_sort.push(r.expr.clone().sort(true, false));
        }
        projection.push(r.expr.alias(name.clone()));
        columns.push(OutColumn {
            name: name.clone(),
            unit: UnitSource::Field(name),
        });
    }
    let ordered = !q.order_by.is_empty();
    let mut sort: Vec<SortExpr> = Vec::new();
    for term in &q.order_by {
        let OrderKey::Field(f) = &term.key else {
            return Err(Error::internal("aggregate ORDER BY in a listing query"));
        };
        let r = resolve(f, schema, term.span)?;
        // A JSON property whose every value the query reads is a number sorts as one.
        let key = if input.numeric_keys.contains(f) {
            datafusion::logical_expr::try_cast(
                r.expr,
                datafusion::arrow::datatypes::DataType::Float64,
            )
        } else {
            r.expr
        };
        sort.push(key.sort(!term.descending, term.descending));
    }
    sort.extend(default_sort);
    let (limit_applied, fetch, row_cap) = limit_plan(q, input);
    if !sort.is_empty() {
        b = b.sort_with_limit(sort, Some(fetch))?;
    }
    let plan = project(b.limit(0, Some(fetch))?, projection)?.build()?;
    Ok(Lowered::new(plan, columns, ordered, limit_applied, row_cap))
}

/// Grouped and/or aggregated queries, with dense buckets when BUCKET BY is given.
fn lower_aggregating(
    q: &RetrieveQuery,
    input: &LowerInput,
    b: LogicalPlanBuilder,
    scan_schema: &DFSchemaRef,
    ts: &Resolved,
    window: Option<Interval>,
) -> Result<Lowered> {
    let time_col = q
        .time_column
        .clone()
        .unwrap_or_else(|| "timestamp".to_string());

    // Group keys: the bucket first, then the dims in their order.
    let mut group_exprs = Vec::new();
    let mut keys: Vec<String> = Vec::new();
    // The bucket key gets an internal name until the final projection: a group-by alias that
    // shadows the input column `timestamp` makes DataFusion 55.2 push the dense-fill join's
    // dynamic filter onto the raw column, dropping rows (tests: golden tiny/months).
    if let Some(unit) = q.bucket {
        group_exprs.push(bucket_start(unit, ts.expr.clone(), &ts.data_type).alias(BUCKET_KEY));
        keys.push(BUCKET_KEY.to_string());
    }
    let mut dims: Vec<String> = Vec::new();
    for (i, g) in q.group_by.iter().enumerate() {
        let name = field_text(g);
        if keys.contains(&name) {
            continue;
        }
        let r = resolve(g, scan_schema, span_at(&q.group_spans, i, q.span))?;
        group_exprs.push(r.expr.alias(name.clone()));
        keys.push(name.clone());
        dims.push(name);
    }

    // Every aggregate the query needs (RETURN, HAVING, ORDER BY), once each.
    let mut aggs: Vec<(String, Expr, bool)> = Vec::new();
    let mut need = |a: &Aggregate, span: Span| -> Result<()> {
        let name = aggregate_name(a);
        if !aggs.iter().any(|(n, _, _)| *n == name) {
            let l = lower_measure(a, input, &q.source, scan_schema, span)?;
            aggs.push((name.clone(), l.expr.alias(name), l.counts));
        }
        Ok(())
    };
    for (i, item) in q.returns.iter().enumerate() {
        let span = span_at(&q.return_spans, i, q.span);
        match item {
            ReturnItem::Count => need(&Aggregate::CountAll, span)?,
            ReturnItem::Aggregate(a) => need(a, span)?,
            ReturnItem::Field(_) => {}
        }
    }
    if let Some(h) = &q.having {
        for (op, span) in operands(h) {
            match op {
                Operand::Aggregate(a) => need(a, span)?,
                Operand::CountShorthand => need(&Aggregate::CountAll, span)?,
                Operand::Field(_) => {}
            }
        }
    }
    for term in &q.order_by {
        match &term.key {
            OrderKey::Count => need(&Aggregate::CountAll, term.span)?,
            OrderKey::Aggregate(a) => need(a, term.span)?,
            OrderKey::Field(_) => {}
        }
    }

    let agg_exprs: Vec<Expr> = aggs.iter().map(|(_, e, _)| e.clone()).collect();
    let aggregate = super::plan::aggregate(b, group_exprs, agg_exprs)?.build()?;
    // Every group counts against max_groups, as the aggregate emits it.
    let aggregate = if keys.is_empty() {
        aggregate
    } else {
        crate::group_cap::GroupCap::plan(aggregate, input.limits.max_groups)
    };

    let mut dense = None;
    if let Some(unit) = q.bucket
        && let Some(iv) = window.or(input.data_span)
    {
        let buckets = bucket_series(iv, unit, input.limits.max_buckets)?;
        // Without GROUP BY the series is its buckets, each a group (with it, the executor
        // checks buckets × groups seen: `Stage::check`).
        if dims.is_empty() && buckets.len() as u64 > input.limits.max_groups {
            return Err(crate::group_cap::too_many_groups(
                input.limits.max_groups,
                buckets.len() as u64,
            ));
        }
        if !buckets.is_empty() {
            dense = Some(Dense {
                counted: aggs.iter().map(|(n, _, c)| (n.clone(), *c)).collect(),
                starts: buckets.into_iter().map(micros).collect(),
            });
        }
    }
    let trend = match &q.trend {
        Some(t) => Some(super::trend::plan(q, t, input, |span| {
            scan_filtered_in(q, input, None, Some(span))
        })?),
        None => None,
    };
    let after = AfterAggregate {
        query: q.clone(),
        keys,
        dims,
        time_col,
        dense,
        trend,
        limit: limit_plan(q, input),
    };
    let mut lowered = after.finish(aggregate.clone())?;
    // A dense series per group reads the aggregate twice (for the groups seen and for the
    // values); DataFusion would compute it twice, so the engine may run it once first.
    if after.dense.is_some() && !after.dims.is_empty() {
        lowered.staged = Some(Arc::new(Staged { aggregate, after }));
    }
    Ok(lowered)
}
