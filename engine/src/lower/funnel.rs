//! Lowering of `FUNNEL …` and `FIND sequence …` (docs/funnels.md).
//!
//! Both read the events once: filter (DURING, WHERE, user_id present and, unless the order is
//! STRICT, only the step and excluded event names), then `GROUP BY user_id` with the
//! `funnel(...)` UDAF, which walks each user's events once and returns the deepest step
//! reached and the chains behind it. A funnel then counts users per step (per group); a
//! sequence keeps the users who reached the last step.

use datafusion::arrow::datatypes::DataType;
use datafusion::common::ScalarValue;
use datafusion::functions::core::expr_fn::{get_field, named_struct, nullif};
use datafusion::functions_aggregate::expr_fn::count;
use datafusion::functions_nested::expr_fn::{array_element, make_array};
use datafusion::logical_expr::{Expr, LogicalPlanBuilder, SortExpr, cast, lit, when};
use signalql_udfs::aggregate::funnel::{FunnelSpec, MAX_STEPS, funnel};
use signalql_udfs::aggregate::funnel_chain::Mode;
use signalql_udfs::aggregate::percentile::percentile;

use super::fields::{column, field_text, resolve};
use super::scan::{Filtered, scan_filtered_with};
use super::time::duration_seconds;
use super::{LowerInput, Lowered, OutColumn, UnitSource, plan, project};
use crate::error::{Error, Result};
use crate::syntax::ast::{FunnelOrder, FunnelQuery, RetrieveQuery, SequenceQuery, Span};

fn mode(order: FunnelOrder) -> Mode {
    match order {
        FunnelOrder::Ordered => Mode::Ordered,
        FunnelOrder::Strict => Mode::Strict,
        FunnelOrder::Any => Mode::Any,
    }
}

/// Step counts outside 2..=max are `limit_exceeded` (the UDAF itself takes at most 10).
fn check_steps(n: usize, input: &LowerInput, span: Span) -> Result<()> {
    let max = input.limits.max_funnel_steps.min(MAX_STEPS as u64);
    if n as u64 > max {
        return Err(Error::limit("max_funnel_steps", max, n as u64)
            .with_help("split the funnel, or raise max_funnel_steps (at most 10)")
            .at(span));
    }
    Ok(())
}

/// The order key of events with equal timestamps, computed over the scan.
const SEQ: &str = "__seq";

/// The events scan, filtered by the view, with [`SEQ`]: the event's position in the files
/// (file rank in path order, then row in file), so ties keep their order in the files.
fn scan(view: &RetrieveQuery, input: &LowerInput) -> Result<Filtered> {
    scan_filtered_with(
        view,
        input,
        Some((super::source::file_order(input.table()), SEQ)),
    )
}

/// `WITHIN n unit` in seconds. A span too long for an `i64` admits every chain, as the longest
/// representable one does (docs/semantics.md).
fn within_seconds(d: &crate::syntax::ast::Duration) -> i64 {
    duration_seconds(d).unwrap_or(i64::MAX)
}

/// The per-user aggregate shared by funnels and sequences: scan → filter → `GROUP BY user_id`
/// with `funnel(...)` as column `f`.
fn per_user(
    f: Filtered,
    steps: &[String],
    excluding: &[String],
    order: FunnelOrder,
    within_seconds: i64,
    group: Expr,
) -> Result<LogicalPlanBuilder> {
    let name = column("event_name");
    let mut b = plan::filter(f.builder, column("user_id").is_not_null())?;
    if order != FunnelOrder::Strict {
        let names: Vec<Expr> = steps
            .iter()
            .chain(excluding)
            .map(|s| lit(s.as_str()))
            .collect();
        b = plan::filter(b, name.clone().in_list(names, false))?;
    }
    let seq = column(SEQ);
    let excluded = if excluding.is_empty() {
        lit(false)
    } else {
        name.clone()
            .in_list(excluding.iter().map(|s| lit(s.as_str())).collect(), false)
    };
    let step_exprs = steps
        .iter()
        .map(|s| name.clone().eq(lit(s.as_str())))
        .collect();
    let spec = FunnelSpec {
        within_seconds,
        mode: mode(order),
    };
    let agg = funnel(f.ts.expr, seq, spec, excluded, group, step_exprs).alias("f");
    Ok(plan::aggregate(b, vec![column("user_id")], vec![agg])?)
}

/// `FUNNEL "a" -> "b" … [WHERE] [DURING] WITHIN n unit [ORDER …] [EXCLUDING …] [GROUP BY …]`.
pub fn lower_funnel(q: &FunnelQuery, view: &RetrieveQuery, input: &LowerInput) -> Result<Lowered> {
    check_steps(q.steps.len(), input, q.span)?;
    let within = within_seconds(&q.within);
    let f = scan(view, input)?;
    let (as_of, window) = (f.as_of, f.window);

    // The group value travels with each event; the UDAF returns the one of the counted
    // chain's first event. Several dims travel as one struct.
    let dims: Vec<String> = q.group_by.iter().map(field_text).collect();
    for (i, d) in dims.iter().enumerate() {
        if dims[..i].contains(d) {
            return Err(Error::type_error(format!("GROUP BY names `{d}` twice")).at(q.span));
        }
    }
    let mut dim_exprs = Vec::new();
    for g in &q.group_by {
        dim_exprs.push(resolve(g, &f.scan_schema, q.span)?.expr);
    }
    let group = match dim_exprs.len() {
        0 => lit(ScalarValue::Null),
        1 => dim_exprs[0].clone(),
        _ => named_struct(
            dim_exprs
                .iter()
                .enumerate()
                .flat_map(|(i, e)| [lit(format!("g{i}")), e.clone()])
                .collect(),
        ),
    };
    let n = q.steps.len();
    let users = per_user(f, &q.steps, &q.excluding, q.order, within, group)?;

    // Per user: level, seconds to each step, group dims.
    let fcol = column("f");
    let mut per_user_cols = vec![get_field(fcol.clone(), "level").alias("level")];
    for k in 2..=n {
        per_user_cols.push(
            array_element(get_field(fcol.clone(), "seconds_to_step"), lit(k as i64))
                .alias(format!("s{k}")),
        );
    }
    let g = get_field(fcol.clone(), "group");
    for (i, d) in dims.iter().enumerate() {
        let e = if dims.len() == 1 {
            g.clone()
        } else {
            get_field(g.clone(), format!("g{i}"))
        };
        per_user_cols.push(e.alias(d.clone()));
    }
    let users = plan::filter(
        project(users, per_user_cols)?,
        column("level").gt_eq(lit(1i32)),
    )?;

    // Per group: users at each step (reached it or a later one: a count, 0 and never NULL
    // for no such user) and median seconds.
    let mut aggs = Vec::new();
    for k in 1..=n {
        let reached = when(column("level").gt_eq(lit(k as i32)), lit(1i64)).end()?;
        aggs.push(count(reached).alias(format!("u{k}")));
    }
    for k in 2..=n {
        aggs.push(percentile(column(&format!("s{k}")), 0.5).alias(format!("m{k}")));
    }
    let grouped = plan::aggregate(users, dims.iter().map(|d| column(d)).collect(), aggs)?;
    // Each group of GROUP BY counts against max_groups, as for retrieve queries.
    let grouped = if dims.is_empty() {
        grouped
    } else {
        LogicalPlanBuilder::from(crate::group_cap::GroupCap::plan(
            grouped.build()?,
            input.limits.max_groups,
        ))
    };

    // One row per step: cross with the step numbers and pick each step's columns.
    let steps = project(
        LogicalPlanBuilder::empty(true),
        vec![make_array((1..=n as i64).map(lit).collect()).alias("__steps")],
    )?
    .unnest_column("__steps")?;
    let steps = project(steps, vec![column("__steps").alias("step")])?.build()?;
    let long = grouped.cross_join(steps)?;
    let pick = |value: &dyn Fn(usize) -> Expr, first: Expr| -> Result<Expr> {
        let mut c = when(column("step").eq(lit(1i64)), first);
        for k in 2..=n {
            c = c.when(column("step").eq(lit(k as i64)), value(k));
        }
        Ok(c.end()?)
    };
    let users_at = |k: usize| column(&format!("u{k}"));
    let ratio = |num: Expr, den: Expr| {
        cast(num, DataType::Float64) / nullif(cast(den, DataType::Float64), lit(0f64))
    };
    let mut out: Vec<Expr> = dims.iter().map(|d| column(d)).collect();
    out.push(column("step"));
    out.push(pick(&|k| lit(q.steps[k - 1].as_str()), lit(q.steps[0].as_str()))?.alias("event"));
    out.push(pick(&users_at, users_at(1))?.alias("users"));
    out.push(
        pick(
            &|k| ratio(users_at(k), users_at(1)),
            ratio(users_at(1), users_at(1)),
        )?
        .alias("conversion_rate"),
    );
    out.push(
        pick(
            &|k| ratio(users_at(k), users_at(k - 1)),
            ratio(users_at(1), users_at(1)),
        )?
        .alias("step_conversion_rate"),
    );
    out.push(
        pick(
            &|k| column(&format!("m{k}")),
            lit(ScalarValue::Float64(None)),
        )?
        .alias("median_seconds_to_convert"),
    );

    let mut sort: Vec<SortExpr> = dims.iter().map(|d| column(d).sort(true, false)).collect();
    sort.push(column("step").sort(true, false));
    let cap = input.limits.max_result_rows;
    let plan = super::sort(project(long, out)?, sort, Some(cap as usize + 1))?
        .limit(0, Some(cap as usize + 1))?
        .build()?;

    let mut columns: Vec<OutColumn> = dims
        .iter()
        .map(|d| OutColumn {
            name: d.clone(),
            unit: UnitSource::Field(d.clone()),
        })
        .collect();
    for (name, unit) in [
        ("step", UnitSource::None),
        ("event", UnitSource::None),
        ("users", UnitSource::Fixed("users")),
        ("conversion_rate", UnitSource::None),
        ("step_conversion_rate", UnitSource::None),
        ("median_seconds_to_convert", UnitSource::Fixed("s")),
    ] {
        columns.push(OutColumn {
            name: name.to_string(),
            unit,
        });
    }
    let mut lowered = Lowered::new(plan, columns, true, cap, Some(cap));
    lowered.as_of = as_of;
    lowered.window = window;
    Ok(lowered)
}

/// `FIND sequence WHERE "a" -> "b" … WITHIN n unit`: one row per user who completed it.
pub fn lower_sequence(
    q: &SequenceQuery,
    view: &RetrieveQuery,
    input: &LowerInput,
) -> Result<Lowered> {
    check_steps(q.steps.len(), input, q.span)?;
    let within = within_seconds(&q.within);
    let f = scan(view, input)?;
    let as_of = f.as_of;
    let users = per_user(
        f,
        &q.steps,
        &[],
        FunnelOrder::Ordered,
        within,
        lit(ScalarValue::Null),
    )?;
    let fcol = column("f");
    let cap = input.limits.max_result_rows;
    let done = plan::filter(
        users,
        get_field(fcol.clone(), "level").eq(lit(q.steps.len() as i32)),
    )?;
    let plan = project(
        done,
        vec![
            column("user_id"),
            get_field(fcol.clone(), "started_at").alias("started_at"),
            get_field(fcol, "completed_at").alias("completed_at"),
        ],
    )?
    .sort_with_limit(
        vec![column("user_id").sort(true, false)],
        Some(cap as usize + 1),
    )?
    .limit(0, Some(cap as usize + 1))?
    .build()?;
    let columns = vec![
        OutColumn {
            name: "user_id".into(),
            unit: UnitSource::None,
        },
        OutColumn {
            name: "started_at".into(),
            unit: UnitSource::None,
        },
        OutColumn {
            name: "completed_at".into(),
            unit: UnitSource::None,
        },
    ];
    let mut lowered = Lowered::new(plan, columns, true, cap, Some(cap));
    lowered.as_of = as_of;
    Ok(lowered)
}
