//! Lowering of `FROM events …` retrieve queries into a DataFusion `LogicalPlan`, built with
//! `LogicalPlanBuilder` (never SQL text), in the plan order of the spec: filters → window →
//! bucketing → grouping → aggregation → (dense fill) → HAVING → ordering → limit → projection.

use std::collections::BTreeSet;
use std::sync::Arc;

use datafusion::arrow::array::{Array, ListArray, TimestampMicrosecondArray};
use datafusion::arrow::buffer::OffsetBuffer;
use datafusion::arrow::datatypes::Field;
use datafusion::common::{Column, DFSchemaRef, NullEquality, ScalarValue};
use datafusion::functions::core::expr_fn::coalesce;
use datafusion::functions::datetime::expr_fn::date_trunc;
use datafusion::logical_expr::{Expr, JoinType, LogicalPlan, LogicalPlanBuilder, SortExpr, lit};

use super::aggregate::lower_measure;
use super::fields::{Resolved, column, field_text, resolve};
use super::predicate::lower_bool;
use super::scan::{Filtered, scan_filtered, scan_filtered_in};
use super::time::{Interval, bucket_series, micros, trunc_name};
use super::{LowerInput, Lowered, OutColumn, Stage, UnitSource, project};
use crate::error::{Error, Result};
use crate::syntax::ast::{
    AggFn, Aggregate, FieldRef, Operand, OrderKey, RetrieveQuery, ReturnItem, Span,
};
use crate::syntax::format::canonical_name;
use crate::syntax::walk::operands;

/// The internal name of the bucket column until the final projection names it.
const BUCKET_KEY: &str = "__bucket_start";

fn timestamp_field() -> FieldRef {
    FieldRef::Path(vec!["timestamp".into()])
}

fn aggregate_name(a: &Aggregate) -> String {
    canonical_name(&ReturnItem::Aggregate(a.clone()))
}

fn unit_of_aggregate(a: &Aggregate) -> UnitSource {
    match a {
        Aggregate::CountAll | Aggregate::Standard(AggFn::Count, _) => UnitSource::Count,
        Aggregate::Standard(AggFn::CountDistinct, _) => UnitSource::None,
        Aggregate::Standard(AggFn::Variance, f) => UnitSource::Squared(field_text(f)),
        Aggregate::Standard(_, f) | Aggregate::Percentile(f, _) | Aggregate::Stats(f) => {
            UnitSource::Field(field_text(f))
        }
        Aggregate::Metric(name) => UnitSource::Metric(name.join(".")),
    }
}

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

fn span_at(spans: &[Span], i: usize, fallback: Span) -> Span {
    spans.get(i).copied().unwrap_or(fallback)
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
        sort.push(r.expr.sort(!term.descending, term.descending));
    }
    sort.extend(default_sort);
    let (limit_applied, fetch, row_cap) = limit_plan(q, input);
    if !sort.is_empty() {
        b = b.sort_with_limit(sort, Some(fetch))?;
    }
    let plan = project(b.limit(0, Some(fetch))?, projection)?.build()?;
    Ok(Lowered::new(plan, columns, ordered, limit_applied, row_cap))
}

fn duplicate_column(name: &str, span: Span) -> Error {
    Error::type_error(format!("RETURN names the column `{name}` twice")).at(span)
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
        group_exprs.push(date_trunc(lit(trunc_name(unit)), ts.expr.clone()).alias(BUCKET_KEY));
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
    let aggregate = b.aggregate(group_exprs, agg_exprs)?.build()?;

    let mut dense = None;
    if let Some(unit) = q.bucket
        && let Some(iv) = window.or(input.data_span)
    {
        let buckets = bucket_series(iv, unit, input.limits.max_buckets)?;
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

/// A bucketed query's dense series: the bucket starts and which aggregates count.
#[derive(Debug, Clone)]
struct Dense {
    counted: Vec<(String, bool)>,
    starts: Vec<i64>,
}

/// A grouped query split at its aggregate: the aggregate plan, and what follows it.
#[derive(Debug, Clone)]
pub struct Staged {
    /// The aggregate (scan, filters, grouping); its output feeds [`AfterAggregate::finish`].
    pub aggregate: LogicalPlan,
    pub after: AfterAggregate,
}

/// Everything after the aggregate: dense fill, HAVING, ordering, limit and projection.
#[derive(Debug, Clone)]
pub struct AfterAggregate {
    query: RetrieveQuery,
    keys: Vec<String>,
    dims: Vec<String>,
    time_col: String,
    dense: Option<Dense>,
    trend: Option<super::trend::TrendPlan>,
    limit: (u64, usize, Option<u64>),
}

impl Stage for Staged {
    fn aggregate(&self) -> &LogicalPlan {
        &self.aggregate
    }

    fn finish(&self, aggregate: LogicalPlan) -> Result<Lowered> {
        self.after.finish(aggregate)
    }
}

impl AfterAggregate {
    /// A grouped field referenced after aggregation resolves to its key column.
    fn key_column(&self, f: &FieldRef, span: Span, clause: &str) -> Result<String> {
        let name = if self.query.bucket.is_some() && *f == timestamp_field() {
            BUCKET_KEY.to_string()
        } else if self.trend.is_some() && *f == super::trend::slope_field() {
            super::trend::SLOPE_KEY.to_string()
        } else {
            field_text(f)
        };
        if self.keys.contains(&name) || name == super::trend::SLOPE_KEY {
            Ok(name)
        } else {
            Err(Error::type_error(format!(
                "`{}` in {clause} is neither in GROUP BY nor an aggregate",
                field_text(f)
            ))
            .at(span))
        }
    }

    /// Build the rest of the plan over `aggregate` (the aggregate itself, or a scan of its
    /// materialised result: columns are referenced by name).
    pub fn finish(&self, aggregate: LogicalPlan) -> Result<Lowered> {
        let q = &self.query;
        let mut b = match &self.dense {
            Some(d) => {
                LogicalPlanBuilder::from(densify(aggregate, &self.dims, &d.counted, &d.starts)?)
            }
            None => LogicalPlanBuilder::from(aggregate),
        };

        if let Some(h) = &q.having {
            let agg_schema = b.schema().clone();
            let resolve_after = |name: String| -> Result<Resolved> {
                let expr = column(&name);
                let data_type = super::fields::type_of(&expr, &agg_schema)?;
                Ok(Resolved {
                    expr,
                    data_type,
                    dynamic: false,
                })
            };
            let pred = lower_bool(h, &|op: &Operand, span: Span| match op {
                Operand::Aggregate(a) => resolve_after(aggregate_name(a)),
                Operand::CountShorthand => resolve_after("count".into()),
                Operand::Field(f) => resolve_after(self.key_column(f, span, "HAVING")?),
            })?;
            b = b.filter(pred)?;
        }
        if let Some(t) = &self.trend {
            b = t.apply(b, &self.dims)?;
        }

        let mut sort: Vec<SortExpr> = Vec::new();
        let mut sorted: BTreeSet<String> = BTreeSet::new();
        for term in &q.order_by {
            let name = match &term.key {
                OrderKey::Count => "count".to_string(),
                OrderKey::Aggregate(a) => aggregate_name(a),
                OrderKey::Field(f) => self.key_column(f, term.span, "ORDER BY")?,
            };
            sorted.insert(name.clone());
            sort.push(column(&name).sort(!term.descending, term.descending));
        }
        // Deterministic order: the group keys ascending (NULLs last), after any ORDER BY.
        for k in &self.keys {
            if !sorted.contains(k) {
                sort.push(column(k).sort(true, false));
            }
        }

        let (limit_applied, fetch, row_cap) = self.limit;
        if !sort.is_empty() {
            b = b.sort_with_limit(sort, Some(fetch))?;
        }
        b = b.limit(0, Some(fetch))?;

        let mut projection = Vec::new();
        let mut columns: Vec<OutColumn> = Vec::new();
        for (i, item) in q.returns.iter().enumerate() {
            let span = span_at(&q.return_spans, i, q.span);
            let (source, out, unit) = match item {
                ReturnItem::Count => ("count".to_string(), "count".to_string(), UnitSource::Count),
                ReturnItem::Aggregate(a) => {
                    let n = aggregate_name(a);
                    (n.clone(), n, unit_of_aggregate(a))
                }
                ReturnItem::Field(f) => {
                    let n = self.key_column(f, span, "RETURN")?;
                    if n == BUCKET_KEY {
                        (n, self.time_col.clone(), UnitSource::None)
                    } else {
                        (n.clone(), n.clone(), UnitSource::Field(n))
                    }
                }
            };
            if columns.iter().any(|c| c.name == out) {
                return Err(duplicate_column(&out, span));
            }
            projection.push(column(&source).alias(out.clone()));
            columns.push(OutColumn { name: out, unit });
        }
        if self.trend.is_some() {
            projection.push(column(super::trend::SLOPE_KEY).alias("slope"));
            columns.push(OutColumn {
                name: "slope".into(),
                unit: UnitSource::None,
            });
        }
        let plan = project(b, projection)?.build()?;
        Ok(Lowered::new(
            plan,
            columns,
            !q.order_by.is_empty(),
            limit_applied,
            row_cap,
        ))
    }
}

/// Make a bucketed aggregate dense: every bucket start in `starts`, crossed with every
/// group seen, left-joined to the aggregate (NULL keys match NULL keys); counts of empty
/// buckets are 0, other aggregates NULL.
fn densify(
    agg: LogicalPlan,
    dims: &[String],
    aggs: &[(String, bool)],
    starts: &[i64],
) -> Result<LogicalPlan> {
    // The series is an unnested array literal rather than VALUES, which DataFusion's
    // unparser cannot turn into SQL inside a join. One list literal, not `make_array` of one
    // literal per bucket: DataFusion names and types each argument when planning, which
    // formats every timestamp.
    let values = TimestampMicrosecondArray::from(starts.to_vec()).with_timezone("UTC");
    let series = lit(ScalarValue::List(Arc::new(ListArray::new(
        Arc::new(Field::new_list_field(values.data_type().clone(), true)),
        OffsetBuffer::from_lengths([starts.len()]),
        Arc::new(values),
        None,
    ))));
    let times = project(
        LogicalPlanBuilder::empty(true),
        vec![series.alias("__buckets")],
    )?
    .unnest_column("__buckets")?;
    let times = project(times, vec![column("__buckets").alias("__bucket")])?;
    let grid = if dims.is_empty() {
        times
    } else {
        let groups = LogicalPlanBuilder::from(agg.clone()).aggregate(
            dims.iter().map(|d| column(d)).collect::<Vec<_>>(),
            Vec::<Expr>::new(),
        )?;
        let groups = project(
            groups,
            dims.iter()
                .enumerate()
                .map(|(i, d)| column(d).alias(format!("__g{i}")))
                .collect(),
        )?
        .build()?;
        times.cross_join(groups)?
    };
    let mut right = vec![column(BUCKET_KEY).alias("__rb")];
    right.extend(
        dims.iter()
            .enumerate()
            .map(|(i, d)| column(d).alias(format!("__rg{i}"))),
    );
    right.extend(aggs.iter().map(|(n, _)| column(n).alias(n.clone())));
    let right = project(LogicalPlanBuilder::from(agg), right)?.build()?;

    let mut left_keys = vec![Column::from_name("__bucket")];
    let mut right_keys = vec![Column::from_name("__rb")];
    for i in 0..dims.len() {
        left_keys.push(Column::from_name(format!("__g{i}")));
        right_keys.push(Column::from_name(format!("__rg{i}")));
    }
    let joined = grid.join_detailed(
        right,
        JoinType::Left,
        (left_keys, right_keys),
        None,
        NullEquality::NullEqualsNull,
    )?;
    let mut out = vec![column("__bucket").alias(BUCKET_KEY)];
    out.extend(
        dims.iter()
            .enumerate()
            .map(|(i, d)| column(&format!("__g{i}")).alias(d.clone())),
    );
    out.extend(aggs.iter().map(|(n, counts)| {
        if *counts {
            coalesce(vec![column(n), lit(0i64)]).alias(n.clone())
        } else {
            column(n).alias(n.clone())
        }
    }));
    Ok(project(joined, out)?.build()?)
}
