//! Side tables joined onto events before filtering: the `users` table's `traits` (v0.1
//! `traits.K`) and the latest `signals` per user (`signal(name)`, `probability(name)`). Which
//! joins a query needs is decided by the walks of [`crate::syntax::walk`].

use datafusion::common::Column;
use datafusion::logical_expr::{Expr, JoinType, LogicalPlan, LogicalPlanBuilder, lit};
use signalql_catalog::TableInfo;

use super::fields::{column, ts_lit};
use super::time::micros;
use crate::error::{Error, Result};

/// v0.1 `traits.K`: attach the `users` table's `traits` to each event by `user_id` (a left
/// join, so events of unknown or anonymous users keep NULL traits). Users are de-duplicated
/// by `user_id` first so the join can never multiply events.
pub fn join_traits(events: LogicalPlanBuilder, users: &TableInfo) -> Result<LogicalPlanBuilder> {
    use datafusion::functions_aggregate::expr_fn::first_value;
    require_columns(users, &["user_id", "traits"], "traits.*")?;
    let users = crate::catalog::scan(users, "users", vec![])?
        .aggregate(
            vec![column("user_id").alias("__traits_user_id")],
            vec![first_value(column("traits"), vec![]).alias("traits")],
        )?
        .build()?;
    attach(
        events,
        users,
        ("events", "user_id"),
        "__traits_user_id",
        &["traits".to_string()],
    )
}

/// `signal(name)` / `probability(name)` of a row for each of `names`: the latest `signals` row
/// named `name` for the row's entity (an event's `user_id`, an entity's `entity_id`) with
/// `computed_at <= T`, attached as the columns `signal(name)` and `probability(name)` by one
/// left join (rows without the signal read NULL). Ties at the same `computed_at` take the
/// greatest value. One join for all of them, each name's latest row picked by an aggregate
/// FILTER: stacked joins trip DataFusion 55's leaf-projection push-down.
pub fn join_signals(
    rows: LogicalPlanBuilder,
    signals: &TableInfo,
    names: &[String],
    as_of: chrono::DateTime<chrono::Utc>,
    shape: &super::source::SourceShape,
) -> Result<LogicalPlanBuilder> {
    use datafusion::functions_aggregate::expr_fn::last_value;
    use datafusion::logical_expr::ExprFunctionExt;
    if names.is_empty() {
        return Ok(rows);
    }
    require_columns(
        signals,
        &["entity_id", "name", "value", "probability", "computed_at"],
        "signal()",
    )?;
    let computed = datafusion::logical_expr::cast(column("computed_at"), super::fields::ts_type());
    let latest = |c: &str, name: &str| -> Result<Expr> {
        Ok(last_value(
            column(c),
            vec![
                computed.clone().sort(true, true),
                column("value").sort(true, true),
            ],
        )
        .filter(column("name").eq(lit(name)))
        .build()?)
    };
    let key = "__signal_entity";
    let mut aggs = Vec::new();
    let mut columns = Vec::new();
    for name in names {
        aggs.push(latest("value", name)?.alias(format!("signal({name})")));
        aggs.push(latest("probability", name)?.alias(format!("probability({name})")));
        columns.push(format!("signal({name})"));
        columns.push(format!("probability({name})"));
    }
    let wanted: Vec<Expr> = names.iter().map(|n| lit(n.as_str())).collect();
    let sub = crate::catalog::scan(signals, "signals", vec![])?
        .filter(
            column("name")
                .in_list(wanted, false)
                .and(computed.clone().lt_eq(ts_lit(micros(as_of)))),
        )?
        .aggregate(vec![column("entity_id").alias(key)], aggs)?
        .build()?;
    attach(rows, sub, (shape.alias, shape.entity_key), key, &columns)
}

/// Left-join `side` to `rows` on `alias.column = side.<key>` (`on`) and keep the row columns
/// plus `columns` of `side`, all re-qualified as `alias` so later stages see one flat table.
fn attach(
    rows: LogicalPlanBuilder,
    side: LogicalPlan,
    on: (&str, &str),
    key: &str,
    columns: &[String],
) -> Result<LogicalPlanBuilder> {
    let mut keep: Vec<Expr> = rows
        .schema()
        .columns()
        .into_iter()
        .map(Expr::Column)
        .collect();
    keep.extend(columns.iter().map(|c| column(c)));
    Ok(rows
        .join(
            side,
            JoinType::Left,
            (
                vec![Column::new(Some(on.0), on.1)],
                vec![Column::from_name(key)],
            ),
            None,
        )?
        .project(keep)?
        .alias(on.0)?)
}

/// A side table must have the columns its join reads.
fn require_columns(table: &TableInfo, columns: &[&str], feature: &str) -> Result<()> {
    match columns
        .iter()
        .find(|c| table.schema.field_with_name(c).is_err())
    {
        Some(missing) => Err(Error::unknown_field(format!(
            "{feature} reads the {} table, which has no `{missing}` column",
            table.name
        ))),
        None => Ok(()),
    }
}
