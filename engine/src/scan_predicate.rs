//! A physical rule: a Parquet scan's predicate without repeated conjuncts.
//!
//! DataFusion 55 pushes filters into scans twice (its `FilterPushdown` rule runs before and
//! after the others), and a filter the scan does not apply itself (Parquet filter pushdown is
//! off) stays above the scan and is pushed into it each time. So a statement's scan held
//! `a AND b AND a AND b`. The scan's predicate only prunes (files, row groups, pages): each
//! time a scan opens a file it builds its pruning predicates from it, so every conjunct
//! repeated doubled that work on every run of the plan (a tenth of a warm funnel on the
//! sample). Dropping a repeat never changes what is pruned: `a AND a` is `a`. A conjunct that
//! holds a dynamic filter is never dropped: two dynamic filters that print alike now may
//! differ once their producers update them.

use std::sync::Arc;

use datafusion::common::tree_node::TreeNode;
use datafusion::datasource::physical_plan::{FileScanConfig, FileSource, ParquetSource};
use datafusion::datasource::source::DataSourceExec;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::expressions::DynamicFilterPhysicalExpr;
use datafusion::physical_expr::utils::{conjunction, split_conjunction};
use datafusion::physical_plan::ExecutionPlan;

use crate::rewrite::NodeRule;

/// See the module documentation.
pub(crate) const RULE: NodeRule = NodeRule {
    name: "signalql_scan_predicate_once",
    node: |node| Ok(without_repeats(node)),
};

/// `node`, a Parquet scan whose predicate repeats a conjunct, with each conjunct once.
fn without_repeats(node: &Arc<dyn ExecutionPlan>) -> Option<Arc<dyn ExecutionPlan>> {
    let exec = node.downcast_ref::<DataSourceExec>()?;
    let (config, source) = exec.downcast_to_file_source::<ParquetSource>()?;
    let predicate = FileSource::filter(source)?;
    let parts = split_conjunction(&predicate);
    let mut kept: Vec<Arc<dyn PhysicalExpr>> = Vec::with_capacity(parts.len());
    for part in &parts {
        let repeat = !dynamic(part) && kept.iter().any(|k| k.as_ref() == part.as_ref());
        if !repeat {
            kept.push(Arc::clone(part));
        }
    }
    if kept.len() == parts.len() {
        return None;
    }
    let source = source.with_predicate(conjunction(kept));
    Some(Arc::new(reading_through(exec, config, source)))
}

/// `exec`, a Parquet scan planned with `config`, reading through `source` instead of its own
/// (its properties recomputed for it).
pub(crate) fn reading_through(
    exec: &DataSourceExec,
    config: &FileScanConfig,
    source: ParquetSource,
) -> DataSourceExec {
    let mut config = config.clone();
    config.file_source = Arc::new(source);
    exec.clone().with_data_source(Arc::new(config))
}

fn dynamic(expr: &Arc<dyn PhysicalExpr>) -> bool {
    expr.exists(|e| Ok(e.downcast_ref::<DynamicFilterPhysicalExpr>().is_some()))
        .unwrap_or(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use datafusion::common::config::ConfigOptions;
    use datafusion::datasource::physical_plan::FileScanConfigBuilder;
    use datafusion::execution::object_store::ObjectStoreUrl;
    use datafusion::logical_expr::Operator;
    use datafusion::physical_expr::expressions::{binary, col, lit};
    use datafusion::physical_optimizer::PhysicalOptimizerRule;

    fn scan(predicate: Arc<dyn PhysicalExpr>) -> Arc<dyn ExecutionPlan> {
        let schema = Arc::new(Schema::new(vec![Field::new("a", DataType::Int64, true)]));
        let source = ParquetSource::new(Arc::clone(&schema)).with_predicate(predicate);
        let config =
            FileScanConfigBuilder::new(ObjectStoreUrl::local_filesystem(), Arc::new(source))
                .build();
        DataSourceExec::from_data_source(config)
    }

    fn predicate_of(plan: &Arc<dyn ExecutionPlan>) -> String {
        let exec = plan.downcast_ref::<DataSourceExec>().unwrap();
        let (_, source) = exec.downcast_to_file_source::<ParquetSource>().unwrap();
        FileSource::filter(source).unwrap().to_string()
    }

    #[test]
    fn a_repeated_conjunct_is_kept_once_and_order_is_kept() {
        let schema = Schema::new(vec![Field::new("a", DataType::Int64, true)]);
        let a = col("a", &schema).unwrap();
        let gt = binary(Arc::clone(&a), Operator::Gt, lit(1i64), &schema).unwrap();
        let lt = binary(a, Operator::Lt, lit(9i64), &schema).unwrap();
        let twice = conjunction([
            Arc::clone(&gt),
            Arc::clone(&lt),
            Arc::clone(&gt),
            Arc::clone(&lt),
        ]);
        let plan = RULE
            .optimize(scan(twice), &ConfigOptions::default())
            .unwrap();
        assert_eq!(predicate_of(&plan), "a@0 > 1 AND a@0 < 9");
        // Nothing repeated: the scan is left as it is.
        let once = scan(conjunction([gt, lt]));
        let same = RULE
            .optimize(Arc::clone(&once), &ConfigOptions::default())
            .unwrap();
        assert!(Arc::ptr_eq(&once, &same));
    }
}
