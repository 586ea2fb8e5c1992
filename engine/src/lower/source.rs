//! The rows a query starts from: the events table, or the entities of one type as of T
//! (`FROM entity(type)`), and the entities reached by `TRAVERSE` (docs/entities.md).

use chrono::{DateTime, Utc};
use datafusion::common::Column;
use datafusion::functions::core::expr_fn::{file_row_index, input_file_name};
use datafusion::functions_window::expr_fn::row_number;
use datafusion::logical_expr::ExprFunctionExt;
use datafusion::logical_expr::{Expr, JoinType, LogicalPlanBuilder, cast, lit};
use signalql_catalog::TableInfo;
use signalql_udfs::scalar::file_rank::{file_rank, rank_shift};

use super::fields::{column, ts_lit, ts_type};
use super::time::micros;
use super::traverse::Traverse;
use crate::error::{Error, Result};
use crate::operator::TwoInputNode;
use crate::syntax::ast::{Source, Traverse as TraverseClause};

/// A row's position in a table's files (file rank in path order, then row in file): the
/// tie-break of rows with equal timestamps. Only evaluable in a projection directly over the
/// table's scan; 0 for a table without a file list.
pub fn file_order(table: &TableInfo) -> Expr {
    // A table the user registered (Engine::with_session) has no file list: rows are ordered
    // by their timestamps only.
    if table.files.is_empty() {
        return lit(0i64);
    }
    let files = table.files.iter().map(|(p, _)| p.clone());
    file_rank(files, input_file_name()) * lit(rank_shift()) + file_row_index()
}

/// What a source is read as: its table alias, the column its signals join on, and its time
/// column (DURING and BUCKET BY).
pub struct SourceShape {
    pub alias: &'static str,
    pub entity_key: &'static str,
    pub time_column: &'static str,
}

pub fn shape(source: &Source) -> SourceShape {
    match source {
        Source::Entity(_) => SourceShape {
            alias: "entities",
            entity_key: "entity_id",
            time_column: "updated_at",
        },
        Source::Events | Source::Metric(_) => SourceShape {
            alias: "events",
            entity_key: "user_id",
            time_column: "timestamp",
        },
    }
}

/// The entity type named by `entity(a.b)`.
pub fn entity_type(name: &[String]) -> String {
    name.join(".")
}

/// Each entity's latest row with `updated_at <= t` (ties: the row later in the files), of type
/// `of_type` or of every type, as the table `entities` with every column of the table.
pub fn entities_as_of(
    table: &TableInfo,
    of_type: Option<&str>,
    t: DateTime<Utc>,
) -> Result<LogicalPlanBuilder> {
    let scan = crate::catalog::scan(
        table,
        "entities_raw",
        vec![file_order(table).alias("__ord")],
    )?;
    let updated = cast(column("updated_at"), ts_type());
    let mut filter = updated.clone().lt_eq(ts_lit(micros(t)));
    if let Some(ty) = of_type {
        filter = column("entity_type").eq(lit(ty)).and(filter);
    }
    // The latest row per entity by a window: rows sorted by entity, newest first, the first
    // kept. The sort is the memory pool's (and spills); `last_value` per column held each
    // group's values outside it, about 5 KB an entity with a struct of attributes.
    // Of one type, by the entity alone: the filter makes the type a constant, which DataFusion
    // then leaves out of the sort, and a window partitioned by it too is refused where that
    // is not known (a cluster's worker, docs/cluster.md).
    let keys: &[&str] = match of_type {
        Some(_) => &["entity_id"],
        None => &["entity_type", "entity_id"],
    };
    let newest = row_number()
        .partition_by(keys.iter().map(|k| column(k)).collect())
        .order_by(vec![
            updated.sort(false, false),
            column("__ord").sort(false, false),
        ])
        .build()?
        .alias("__rn");
    // The kept columns pass through internal names: DataFusion 55's leaf-projection push-down
    // otherwise meets the alias's qualified names and the window's unqualified ones together.
    let names: Vec<&str> = table
        .schema
        .fields()
        .iter()
        .map(|f| f.name().as_str())
        .collect();
    let inner: Vec<Expr> = names
        .iter()
        .map(|n| column(n).alias(format!("__e_{n}")))
        .collect();
    let out: Vec<Expr> = names
        .iter()
        .map(|n| column(&format!("__e_{n}")).alias(*n))
        .collect();
    Ok(scan
        .filter(filter)?
        .window(vec![newest])?
        .filter(column("__rn").eq(lit(1u64)))?
        .project(inner)?
        .project(out)?
        .alias("entities")?)
}

/// The entities reached from `start` (a plan with `entity_type` and `entity_id`) over
/// `relationships` edges of `clause.relation` created at or before `t`, each with `hops`, and
/// with the reached entity's columns as of `t` (NULL for an entity the entities table does
/// not have), as the table `entities`.
pub fn traverse(
    start: LogicalPlanBuilder,
    clause: &TraverseClause,
    relationships: &TableInfo,
    entities: &TableInfo,
    t: DateTime<Utc>,
) -> Result<LogicalPlanBuilder> {
    let start = start
        .project(vec![column("entity_type"), column("entity_id")])?
        .build()?;
    let edges = crate::catalog::scan(relationships, "relationships", vec![])?
        .filter(
            column("relation")
                .eq(lit(clause.relation.as_str()))
                .and(cast(column("created_at"), ts_type()).lt_eq(ts_lit(micros(t)))),
        )?
        .project(vec![
            column("src_type"),
            column("src_id"),
            column("dst_type"),
            column("dst_id"),
        ])?
        .build()?;
    let reached = TwoInputNode::new(
        start,
        edges,
        Traverse {
            relation: clause.relation.clone(),
            depth: clause.depth,
        },
    )?
    .into_plan();
    let state = entities_as_of(entities, None, t)?;
    let mut keep = vec![
        Expr::Column(Column::new(Some("reached"), "entity_type")),
        Expr::Column(Column::new(Some("reached"), "entity_id")),
    ];
    keep.extend(
        entities
            .schema
            .fields()
            .iter()
            .filter(|f| !matches!(f.name().as_str(), "entity_type" | "entity_id"))
            .map(|f| Expr::Column(Column::new(Some("entities"), f.name()))),
    );
    keep.push(Expr::Column(Column::new(Some("reached"), "hops")));
    Ok(LogicalPlanBuilder::from(reached)
        .alias("reached")?
        .join(
            state.build()?,
            JoinType::Left,
            (
                vec![
                    Column::new(Some("reached"), "entity_type"),
                    Column::new(Some("reached"), "entity_id"),
                ],
                vec![
                    Column::new(Some("entities"), "entity_type"),
                    Column::new(Some("entities"), "entity_id"),
                ],
            ),
            None,
        )?
        .project(keep)?
        .alias("entities")?)
}

/// A TRAVERSE depth must be 1 ..= `max`.
pub fn check_depth(depth: u64, max: u64) -> Result<()> {
    if depth == 0 {
        return Err(Error::type_error(
            "TRAVERSE … DEPTH <= 0 reaches nothing: the depth must be at least 1",
        ));
    }
    if depth > max {
        return Err(Error::limit("max_traverse_depth", max, depth)
            .with_help("traversals are bounded; ask for at most 16 hops"));
    }
    Ok(())
}
