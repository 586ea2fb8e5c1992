//! A physical rule: a projection that computes `input_file_name()` or `file_row_index()` runs
//! inside the Parquet scan below it, also when DataFusion put a round-robin repartition or a
//! filter between the two.
//!
//! Those functions can only be evaluated by the scan (DataFusion 55 pushes a projection into
//! a `DataSourceExec` only when it sits directly on it). A projection directly over a table
//! scan is planned that way, but `EnsureRequirements` then adds a round-robin repartition
//! under it when the scan has fewer partitions than the target (a small file) and the
//! projection benefits from more, and `ProjectionPushdown` does not move a projection that
//! widens its input below a repartition. A table that applies its time-window filter itself
//! (docs/scan.md, "Row groups a filter holds for") leaves no filter between the two, so a
//! funnel's or an entity read's order key met that case. Moving the projection below a
//! round-robin repartition never changes an answer: the repartition only deals batches.
//!
//! A table read through a view (docs/mapping.md: mapped columns, an epoch-ms time) keeps its
//! window's filter above the scan, as a `FilterExec`, because the filter is on the view's
//! casts. The file expressions (those of them that read no column, as the order key does)
//! then move below the filter: the scan computes them beside its columns, the filter passes
//! them on, and the projection above reads them as columns. A filter never changes a row's
//! file or its place in it.

use std::sync::Arc;

use datafusion::common::Result;
use datafusion::common::tree_node::TreeNode;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_expr::projection::ProjectionExpr;
use datafusion::physical_expr::utils::collect_columns;
use datafusion::physical_expr::{PhysicalExpr, ScalarFunctionExpr};
use datafusion::physical_plan::filter::{FilterExec, FilterExecBuilder};
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::{ExecutionPlan, Partitioning};

use crate::rewrite::NodeRule;

/// See the module documentation.
pub(crate) const RULE: NodeRule = NodeRule {
    name: "signalql_file_exprs_in_scan",
    node: |node| match into_scan(node)? {
        Some(moved) => Ok(Some(moved)),
        None => below_filter(node),
    },
};

/// Whether `projection` computes a file-dependent function.
fn reads_the_file(projection: &ProjectionExec) -> bool {
    projection.expr().iter().any(|p| file_dependent(&p.expr))
}

/// Whether `expr` calls a file-dependent function.
fn file_dependent(expr: &Arc<dyn PhysicalExpr>) -> bool {
    expr.exists(|e| {
        Ok(e.downcast_ref::<ScalarFunctionExpr>()
            .is_some_and(|f| matches!(f.fun().name(), "input_file_name" | "file_row_index")))
    })
    .unwrap_or(false)
}

/// `node`, a file-reading projection over a filter over a scan, as that projection over the
/// filter over the scan computing the file expressions (module documentation); `None` when a
/// file expression reads a column, or the scan does not take the projection.
fn below_filter(node: &Arc<dyn ExecutionPlan>) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    let Some(projection) = node.downcast_ref::<ProjectionExec>() else {
        return Ok(None);
    };
    let Some(filter) = projection.input().downcast_ref::<FilterExec>() else {
        return Ok(None);
    };
    if !reads_the_file(projection) {
        return Ok(None);
    }
    let input = filter.input();
    let width = input.schema().fields().len();
    // The scan's columns as they are, then the file expressions.
    let mut below: Vec<ProjectionExpr> = input
        .schema()
        .fields()
        .iter()
        .enumerate()
        .map(|(i, f)| ProjectionExpr::new(Arc::new(Column::new(f.name(), i)), f.name().clone()))
        .collect();
    // The filter's output: what it gave before, then the file expressions.
    let mut passed: Vec<usize> = match filter.projection() {
        Some(p) => p.to_vec(),
        None => (0..width).collect(),
    };
    let before = passed.len();
    let mut above = Vec::with_capacity(projection.expr().len());
    for p in projection.expr() {
        if !file_dependent(&p.expr) {
            above.push(p.clone());
            continue;
        }
        if !collect_columns(&p.expr).is_empty() {
            return Ok(None);
        }
        let name = format!("__signalql_file_expr_{}", below.len() - width);
        above.push(ProjectionExpr::new(
            Arc::new(Column::new(&name, before + (below.len() - width))),
            p.alias.clone(),
        ));
        passed.push(below.len());
        below.push(ProjectionExpr::new(Arc::clone(&p.expr), name));
    }
    let below = ProjectionExec::try_new(below, Arc::clone(input))?;
    let Some(scan) = input.try_swapping_with_projection(&below)? else {
        return Ok(None);
    };
    let filter = FilterExecBuilder::new(Arc::clone(filter.predicate()), scan)
        .with_default_selectivity(filter.default_selectivity())
        .with_batch_size(filter.batch_size())
        .with_fetch(filter.fetch())
        .apply_projection(Some(passed))?
        .build()?;
    Ok(Some(Arc::new(ProjectionExec::try_new(
        above,
        Arc::new(filter),
    )?)))
}

/// `node`, a file-reading projection over a round-robin repartition, as the repartition over
/// the projection pushed into the repartition's input (when that input takes it).
fn into_scan(node: &Arc<dyn ExecutionPlan>) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    let Some(projection) = node.downcast_ref::<ProjectionExec>() else {
        return Ok(None);
    };
    let Some(repartition) = projection.input().downcast_ref::<RepartitionExec>() else {
        return Ok(None);
    };
    let Partitioning::RoundRobinBatch(_) = repartition.partitioning() else {
        return Ok(None);
    };
    if !reads_the_file(projection) || repartition.preserve_order() {
        return Ok(None);
    }
    let below =
        ProjectionExec::try_new(projection.expr().to_vec(), Arc::clone(repartition.input()))?;
    let Some(scan) = repartition.input().try_swapping_with_projection(&below)? else {
        return Ok(None);
    };
    Ok(Some(Arc::new(RepartitionExec::try_new(
        scan,
        repartition.partitioning().clone(),
    )?)))
}
