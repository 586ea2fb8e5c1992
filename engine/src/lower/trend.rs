//! `TREND UP|DOWN|FLAT OVER n unit` (DESIGN.md §4, docs/trend.md): keep the groups whose
//! least-squares slope over a bucketed series has that direction, and report the slope.
//!
//! The series of a group is the query's first aggregate in RETURN (its measure), computed per
//! bucket of one `unit` over the n buckets of `[T − n·unit, T)` (the query's WHERE applies;
//! its DURING does not). Count measures are dense (an empty bucket is 0); other measures use
//! the buckets that have a value. FLAT: |slope| < 1% of |mean per bucket| (or slope 0); UP and
//! DOWN: a positive or negative slope that is not flat. A group without a slope (fewer than
//! two points) has no direction.

use datafusion::arrow::datatypes::DataType;
use datafusion::common::NullEquality;
use datafusion::functions::core::expr_fn::{coalesce, get_field};
use datafusion::functions::math::expr_fn::abs;
use datafusion::logical_expr::{Expr, JoinType, LogicalPlan, LogicalPlanBuilder, cast, lit};
use signalql_udfs::aggregate::trend::trend_slope;

use super::LowerInput;
use super::aggregate::lower_measure;
use super::fields::{column, field_text, resolve};
use super::scan::Filtered;
use super::time::{Interval, anchor, micros, unit_seconds};
use crate::error::{Error, Result};
use crate::syntax::ast::{Aggregate, FieldRef, RetrieveQuery, ReturnItem, Trend, TrendDir};

/// The internal name of the slope column (`slope` in the result).
pub const SLOPE_KEY: &str = "__slope";
const MEAN_KEY: &str = "__mean";

/// `slope`, as ORDER BY may name it.
pub fn slope_field() -> FieldRef {
    FieldRef::Path(vec!["slope".into()])
}

/// The per-group slopes and means, and how to keep groups by them.
#[derive(Debug, Clone)]
pub struct TrendPlan {
    plan: LogicalPlan,
    dir: TrendDir,
    /// A count measure: a group without rows in the trend span has an all-zero series.
    fill: bool,
}

fn trend_key(i: usize) -> String {
    format!("__t{i}")
}

/// The query's measure: its first aggregate in RETURN.
fn measure(q: &RetrieveQuery) -> Result<Aggregate> {
    let found = q.returns.iter().find_map(|r| match r {
        ReturnItem::Count => Some(Aggregate::CountAll),
        ReturnItem::Aggregate(a) => Some(a.clone()),
        ReturnItem::Field(_) => None,
    });
    match found {
        Some(Aggregate::Stats(_)) => Err(Error::type_error(
            "TREND needs a numeric measure: the first aggregate in RETURN is stats(…), a struct",
        )
        .at(q.span)),
        Some(a) => Ok(a),
        None => Err(Error::type_error(
            "TREND follows the series of an aggregate: RETURN one (the first is the measure)",
        )
        .at(q.span)),
    }
}

/// Build the trend plan of `q`; `scan` gives the query's filtered rows over an interval.
pub(super) fn plan(
    q: &RetrieveQuery,
    t: &Trend,
    input: &LowerInput,
    scan: impl FnOnce(Interval) -> Result<Filtered>,
) -> Result<TrendPlan> {
    if t.over.n < 2 {
        return Err(Error::type_error(format!(
            "TREND … OVER {} buckets has no slope: use at least 2",
            t.over.n
        ))
        .at(q.span));
    }
    let bucket = unit_seconds(t.over.unit);
    let max = input.limits.max_window_days;
    let secs = i64::try_from(t.over.n)
        .ok()
        .and_then(|n| n.checked_mul(bucket))
        .filter(|s| *s <= max as i64 * 86_400)
        .ok_or_else(|| {
            Error::limit(
                "max_window_days",
                max,
                t.over.n.saturating_mul(bucket as u64) / 86_400,
            )
            .at(q.span)
        })?;
    let measure = measure(q)?;
    let end = anchor(q.window.as_ref(), input.now)?;
    let start = end - chrono::Duration::seconds(secs);
    let f = scan(Interval { start, end })?;

    let mut groups: Vec<Expr> = Vec::new();
    let mut names: Vec<String> = Vec::new();
    for (i, g) in q.group_by.iter().enumerate() {
        let name = field_text(g);
        if names.contains(&name) {
            continue;
        }
        let r = resolve(
            g,
            &f.scan_schema,
            q.group_spans.get(i).copied().unwrap_or(q.span),
        )?;
        groups.push(r.expr.alias(trend_key(names.len())));
        names.push(name);
    }
    let keys: Vec<Expr> = (0..names.len()).map(|i| column(&trend_key(i))).collect();
    let index =
        (cast(f.ts.expr.clone(), DataType::Int64) - lit(micros(start))) / lit(bucket * 1_000_000);
    let mut per_bucket = groups;
    per_bucket.push(index.alias("__x"));
    let lowered = lower_measure(&measure, input, &q.source, &f.scan_schema, q.span)?;
    let fill = lowered.counts;
    let fit = trend_slope(
        cast(column("__x"), DataType::Float64),
        cast(column("__y"), DataType::Float64),
        t.over.n as i64,
        fill,
    )
    .alias("__trend");
    let mut out = keys.clone();
    out.push(get_field(column("__trend"), "slope").alias("__slope_raw"));
    out.push(get_field(column("__trend"), "mean").alias("__mean_raw"));
    let plan = f
        .builder
        .aggregate(per_bucket, vec![lowered.expr.alias("__y")])?
        .aggregate(keys, vec![fit])?
        .project(out)?
        .build()?;
    Ok(TrendPlan {
        plan,
        dir: t.dir,
        fill,
    })
}

impl TrendPlan {
    /// Attach each group's slope (as [`SLOPE_KEY`]) to `b`, whose group columns are `dims`, and
    /// keep the groups that trend in the asked direction.
    pub fn apply(&self, b: LogicalPlanBuilder, dims: &[String]) -> Result<LogicalPlanBuilder> {
        let mut keep = super::plan::columns(&b);
        let joined = if dims.is_empty() {
            b.cross_join(self.plan.clone())?
        } else {
            let left: Vec<_> = dims
                .iter()
                .map(datafusion::common::Column::from_name)
                .collect();
            let right: Vec<_> = (0..dims.len())
                .map(|i| datafusion::common::Column::from_name(trend_key(i)))
                .collect();
            b.join_detailed(
                self.plan.clone(),
                JoinType::Left,
                (left, right),
                None,
                NullEquality::NullEqualsNull,
            )?
        };
        let filled = |c: &str| {
            if self.fill {
                coalesce(vec![column(c), lit(0.0)])
            } else {
                column(c)
            }
        };
        keep.push(filled("__slope_raw").alias(SLOPE_KEY));
        keep.push(filled("__mean_raw").alias(MEAN_KEY));
        let slope = column(SLOPE_KEY);
        let flat = slope
            .clone()
            .eq(lit(0.0))
            .or(abs(slope.clone()).lt(lit(0.01) * abs(column(MEAN_KEY))));
        let keep_dir = match self.dir {
            TrendDir::Flat => flat,
            TrendDir::Up => slope.gt(lit(0.0)).and(datafusion::logical_expr::not(flat)),
            TrendDir::Down => slope.lt(lit(0.0)).and(datafusion::logical_expr::not(flat)),
        };
        Ok(joined.project(keep)?.filter(keep_dir)?)
    }
}
