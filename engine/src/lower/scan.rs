//! The filtered scan every retrieve-shaped query starts from (retrieve, funnels, sequences,
//! TREND's series, the data span): the source table, the traits and signals joins, the window
//! and WHERE, and TRAVERSE from the entities that pass them.

use datafusion::common::DFSchemaRef;
use datafusion::logical_expr::utils::conjunction;
use datafusion::logical_expr::{Expr, LogicalPlan, LogicalPlanBuilder};

use super::enrich::{join_signals as join_signals_of, join_traits};
use super::fields::{Resolved, resolve, ts_lit};
use super::predicate::lower_bool;
use super::source;
use super::time::{Interval, anchor, micros, window_interval};
use super::{LowerInput, Signals, SourceTables};
use crate::error::{Error, Result};
use crate::syntax::ast::{FieldRef, Operand, RetrieveQuery, Span};

/// The events scan with the query's joins, window and WHERE applied.
pub struct Filtered {
    pub builder: LogicalPlanBuilder,
    pub scan_schema: DFSchemaRef,
    pub ts: Resolved,
    pub window: Option<Interval>,
    pub as_of: chrono::DateTime<chrono::Utc>,
}

pub fn scan_filtered(q: &RetrieveQuery, input: &LowerInput) -> Result<Filtered> {
    scan_filtered_with(q, input, None)
}

/// [`scan_filtered`], with `extra` (an expression and its name) computed right over the scan,
/// before any join: file-dependent functions (`input_file_name()`, `file_row_index()`) are only
/// evaluated inside the Parquet scan, which DataFusion does only for a projection directly on it.
pub fn scan_filtered_with(
    q: &RetrieveQuery,
    input: &LowerInput,
    extra: Option<(Expr, &str)>,
) -> Result<Filtered> {
    scan_filtered_in(q, input, extra, None)
}

/// [`scan_filtered_with`], reading the interval `span` instead of the query's window when given.
pub fn scan_filtered_in(
    q: &RetrieveQuery,
    input: &LowerInput,
    extra: Option<(Expr, &str)>,
    span: Option<Interval>,
) -> Result<Filtered> {
    let as_of = anchor(q.window.as_ref(), input.now)?;
    let shape = source::shape(&q.source);
    let mut b = match input.source {
        SourceTables::Entities {
            entity_type,
            entities,
            ..
        } => source::entities_as_of(entities, Some(entity_type), as_of)?,
        SourceTables::Events { events, users } => {
            let extra = extra
                .map(|(expr, name)| expr.alias(name))
                .into_iter()
                .collect();
            let mut b = crate::catalog::scan(events, "events", extra)?;
            if let Some(users) = users {
                b = join_traits(b, users)?;
            }
            b
        }
    };
    // Signals read by WHERE are joined before it; with TRAVERSE, the others are joined to
    // the reached entities after it (the bind pass split them).
    if let Some(signals) = input.signals {
        b = join_signals(b, signals, &signals.before, &shape, as_of)?;
    }
    let scan_schema = b.schema().clone();
    let window = match (&q.window, span) {
        (_, Some(span)) => Some(span),
        (Some(w), None) => Some(window_interval(w, as_of, input.limits.max_window_days)?),
        (None, None) => None,
    };
    let time_field = FieldRef::Path(vec![
        input.time_column.unwrap_or(shape.time_column).to_string(),
    ]);
    let ts = resolve(&time_field, &scan_schema, q.span)?;

    let mut filters = Vec::new();
    if let Some(i) = window {
        filters.push(ts.expr.clone().gt_eq(ts_lit(micros(i.start))));
        filters.push(ts.expr.clone().lt(ts_lit(micros(i.end))));
        if let SourceTables::Events { events, .. } = input.source
            && let Some((key, dt)) = &events.time_partition
        {
            filters.push(partition_window(key, dt, i));
        }
    }
    if let Some(w) = &q.filter {
        filters.push(lower_bool(w, &|op: &Operand, span: Span| match op {
            Operand::Field(f) => resolve(f, &scan_schema, span),
            _ => Err(Error::parse(
                "aggregates are not allowed in WHERE; use HAVING",
                span,
            )),
        })?);
    }
    if let Some(f) = conjunction(filters) {
        b = super::plan::filter(b, f)?;
    }
    let traversal = match input.source {
        SourceTables::Entities { traversal, .. } => traversal.as_ref(),
        SourceTables::Events { .. } => None,
    };
    let (b, scan_schema, ts) = match traversal {
        None => (b, scan_schema, ts),
        Some(t) => {
            source::check_depth(t.clause.depth, input.limits.max_traverse_depth)
                .map_err(|e| e.at(q.span))?;
            let b = source::traverse(b, &t.clause, &t.relationships, input.table(), as_of)?;
            let b = match input.signals {
                Some(signals) => join_signals(b, signals, &signals.after, &shape, as_of)?,
                None => b,
            };
            let schema = b.schema().clone();
            let ts = resolve(&time_field, &schema, q.span)?;
            (b, schema, ts)
        }
    };
    Ok(Filtered {
        builder: b,
        scan_schema,
        ts,
        window,
        as_of,
    })
}

/// The days of the window `i` as a filter on a date partition column (`[tables.T.time]
/// partition`, docs/mapping.md): the folders of days the window does not touch are not read.
/// Files outside any such folder (NULL) are always read.
fn partition_window(key: &str, dt: &datafusion::arrow::datatypes::DataType, i: Interval) -> Expr {
    use datafusion::arrow::datatypes::DataType;
    use datafusion::common::ScalarValue;
    let first = i.start.date_naive();
    let last = (i.end - chrono::Duration::microseconds(1)).date_naive();
    let after = last.succ_opt().unwrap_or(last);
    let epoch = chrono::NaiveDate::from_ymd_opt(1970, 1, 1).unwrap_or_default();
    let day = |d: chrono::NaiveDate| match dt {
        DataType::Date32 => Expr::Literal(
            ScalarValue::Date32(Some((d - epoch).num_days() as i32)),
            None,
        ),
        _ => datafusion::logical_expr::lit(d.format("%Y-%m-%d").to_string()),
    };
    let c = super::fields::column(key);
    c.clone()
        .is_null()
        .or(c.clone().gt_eq(day(first)).and(c.lt(day(after))))
}

/// For a bucketed query without DURING: a plan giving `min(timestamp)` and `max(timestamp)`
/// of the rows the query reads, from which the engine derives the dense series' span.
pub fn data_span_plan(q: &RetrieveQuery, input: &LowerInput) -> Result<LogicalPlan> {
    use datafusion::functions_aggregate::expr_fn::{max, min};
    let f = scan_filtered(q, input)?;
    Ok(f.builder
        .aggregate(
            Vec::<Expr>::new(),
            vec![
                min(f.ts.expr.clone()).alias("lo"),
                max(f.ts.expr).alias("hi"),
            ],
        )?
        .build()?)
}

/// Join the latest value of each signal in `names` to the rows of `b` by their entity key.
fn join_signals(
    b: LogicalPlanBuilder,
    signals: &Signals,
    names: &[String],
    shape: &source::SourceShape,
    as_of: chrono::DateTime<chrono::Utc>,
) -> Result<LogicalPlanBuilder> {
    join_signals_of(b, &signals.table, names, as_of, shape)
}
