//! A physical rule: a projection that computes `input_file_name()` or `file_row_index()` runs
//! inside the Parquet scan below it, also when DataFusion put a round-robin repartition
//! between the two.
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

use std::sync::Arc;

use datafusion::common::Result;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TransformedResult, TreeNode};
use datafusion::physical_expr::ScalarFunctionExpr;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::{ExecutionPlan, Partitioning};

/// See the module documentation.
#[derive(Debug, Default)]
pub struct FileExprsInScan;

impl PhysicalOptimizerRule for FileExprsInScan {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        plan.transform_up(|node| {
            Ok(into_scan(&node)?.map_or(Transformed::no(node), Transformed::yes))
        })
        .data()
    }

    fn name(&self) -> &str {
        "signalql_file_exprs_in_scan"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// Whether `projection` computes a file-dependent function.
fn reads_the_file(projection: &ProjectionExec) -> bool {
    projection.expr().iter().any(|p| {
        p.expr
            .exists(|e| {
                Ok(e.downcast_ref::<ScalarFunctionExpr>().is_some_and(|f| {
                    matches!(f.fun().name(), "input_file_name" | "file_row_index")
                }))
            })
            .unwrap_or(false)
    })
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
