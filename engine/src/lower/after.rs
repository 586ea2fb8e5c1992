//! Everything a grouped query does after its aggregate: the dense fill of a bucketed series,
//! HAVING, TREND's filter, ordering, the row limit and the final projection; and the split at
//! the aggregate ([`Staged`]) that lets the executor run the aggregate once.

use std::collections::BTreeSet;
use std::sync::Arc;

use datafusion::arrow::array::{Array, ListArray, RecordBatch, TimestampMicrosecondArray};
use datafusion::arrow::buffer::OffsetBuffer;
use datafusion::arrow::datatypes::Field;
use datafusion::common::{Column, NullEquality, ScalarValue};
use datafusion::functions::core::expr_fn::coalesce;
use datafusion::logical_expr::{JoinType, LogicalPlan, LogicalPlanBuilder, SortExpr, lit};

use super::fields::{Resolved, column, field_text};
use super::predicate::lower_bool;
use super::{Lowered, OutColumn, Stage, UnitSource, project};
use crate::error::{Error, Result};
use crate::syntax::ast::{
    AggFn, Aggregate, FieldRef, Operand, OrderKey, RetrieveQuery, ReturnItem, Span,
};
use crate::syntax::format::canonical_name;

/// The internal name of the bucket column until the final projection names it.
pub(super) const BUCKET_KEY: &str = "__bucket_start";

pub(super) fn timestamp_field() -> FieldRef {
    FieldRef::Path(vec!["timestamp".into()])
}

pub(super) fn aggregate_name(a: &Aggregate) -> String {
    canonical_name(&ReturnItem::Aggregate(a.clone()))
}

pub(super) fn unit_of_aggregate(a: &Aggregate) -> UnitSource {
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

pub(super) fn span_at(spans: &[Span], i: usize, fallback: Span) -> Span {
    spans.get(i).copied().unwrap_or(fallback)
}

pub(super) fn duplicate_column(name: &str, span: Span) -> Error {
    Error::type_error(format!("RETURN names the column `{name}` twice")).at(span)
}

/// A bucketed query's dense series: the bucket starts and which aggregates count.
#[derive(Debug, Clone)]
pub(super) struct Dense {
    pub(super) counted: Vec<(String, bool)>,
    pub(super) starts: Vec<i64>,
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
    pub(super) query: RetrieveQuery,
    pub(super) keys: Vec<String>,
    pub(super) dims: Vec<String>,
    pub(super) time_col: String,
    pub(super) dense: Option<Dense>,
    pub(super) trend: Option<super::trend::TrendPlan>,
    pub(super) limit: (u64, usize, Option<u64>),
}

impl Stage for Staged {
    fn aggregate(&self) -> &LogicalPlan {
        &self.aggregate
    }

    fn finish(&self, aggregate: LogicalPlan) -> Result<Lowered> {
        self.after.finish(aggregate)
    }

    /// A dense series has a row for every bucket and every group seen: that many groups
    /// count against `max_groups` before the series is built.
    fn check(&self, aggregate: &[RecordBatch], max_groups: u64) -> Result<()> {
        let Some(dense) = &self.after.dense else {
            return Ok(());
        };
        let groups = distinct_groups(aggregate, &self.after.dims)?;
        let rows = groups.saturating_mul(dense.starts.len() as u64);
        if rows > max_groups {
            return Err(crate::group_cap::too_many_groups(max_groups, rows));
        }
        Ok(())
    }
}

/// How many distinct values the `dims` columns have together in `batches`.
fn distinct_groups(batches: &[RecordBatch], dims: &[String]) -> Result<u64> {
    use datafusion::arrow::row::{RowConverter, SortField};
    let Some(first) = batches.first() else {
        return Ok(0);
    };
    let schema = first.schema();
    let mut indices = Vec::with_capacity(dims.len());
    for d in dims {
        indices.push(schema.index_of(d)?);
    }
    let converter = RowConverter::new(
        indices
            .iter()
            .map(|i| SortField::new(schema.field(*i).data_type().clone()))
            .collect(),
    )?;
    let mut seen = std::collections::HashSet::new();
    for b in batches {
        let cols: Vec<_> = indices.iter().map(|i| Arc::clone(b.column(*i))).collect();
        let rows = converter.convert_columns(&cols)?;
        for r in rows.iter() {
            seen.insert(r.owned());
        }
    }
    Ok(seen.len() as u64)
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
                    untyped: false,
                })
            };
            let pred = lower_bool(h, &|op: &Operand, span: Span| match op {
                Operand::Aggregate(a) => resolve_after(aggregate_name(a)),
                Operand::CountShorthand => resolve_after("count".into()),
                Operand::Field(f) => resolve_after(self.key_column(f, span, "HAVING")?),
            })?;
            b = super::plan::filter(b, pred)?;
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
        let groups = super::plan::aggregate(
            LogicalPlanBuilder::from(agg.clone()),
            dims.iter().map(|d| column(d)).collect(),
            Vec::new(),
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
    // The sparse aggregate is the join's build side and the grid (buckets × groups, up to
    // max_groups rows) streams past it: a hash table over the grid would hold all of it.
    let joined = LogicalPlanBuilder::from(right).join_detailed(
        grid.build()?,
        JoinType::Right,
        (right_keys, left_keys),
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
