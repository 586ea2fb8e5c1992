//! A physical rule: a sort keeping many rows sorts, then limits.
//!
//! DataFusion plans a sort with a fetch as a TopK: a heap of the best `fetch` rows, each new
//! row compared with the heap's worst. That is fast while the fetch is small next to the
//! input. A listing's fetch is `max_result_rows + 1` (its default order is every returned
//! column, for a deterministic cut); with `max_result_rows` raised to hand a large answer to
//! Arrow (Python's `to_arrow()`, Parquet output), every row enters the heap: 10M rows of
//! three columns took 25.9 s, nearly all of it the heap's comparisons. Past [`TOP_K_MAX`]
//! rows the rule sorts the partition whole and keeps its first `fetch` rows
//! (`LocalLimitExec`, per partition as the TopK was): the same rows.

use std::sync::Arc;

use datafusion::common::Result;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::limit::LocalLimitExec;
use datafusion::physical_plan::sorts::sort::SortExec;

use crate::rewrite::NodeRule;

/// The largest fetch a sort keeps as a TopK (the default `max_result_rows` is 10 000).
pub(crate) const TOP_K_MAX: usize = 100_000;

/// See the module documentation.
pub(crate) const RULE: NodeRule = NodeRule {
    name: "signalql_large_fetch_sort",
    node: sort_then_limit,
};

/// `node` as a whole sort under a per-partition limit, when it is a sort whose fetch is over
/// [`TOP_K_MAX`].
fn sort_then_limit(node: &Arc<dyn ExecutionPlan>) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    let Some(sort) = node.downcast_ref::<SortExec>() else {
        return Ok(None);
    };
    let Some(fetch) = sort.fetch().filter(|&f| f > TOP_K_MAX) else {
        return Ok(None);
    };
    let whole = sort.with_fetch(None);
    Ok(Some(Arc::new(LocalLimitExec::new(Arc::new(whole), fetch))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Int64Array, RecordBatch};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use datafusion::common::config::ConfigOptions;
    use datafusion::datasource::memory::MemorySourceConfig;
    use datafusion::physical_expr::expressions::col;
    use datafusion::physical_expr::{LexOrdering, PhysicalSortExpr};
    use datafusion::physical_optimizer::PhysicalOptimizerRule;
    use datafusion::physical_plan::collect;
    use datafusion::prelude::SessionContext;

    /// The rows of a descending sort of 0..n with `fetch`, with and without the rule.
    async fn sorted(n: i64, fetch: usize, rule: bool) -> (Vec<i64>, String) {
        let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, false)]));
        // Two partitions, values interleaved, so each partition's cut matters.
        let part = |odd: i64| {
            let values: Vec<i64> = (0..n).filter(|v| v % 2 == odd).collect();
            RecordBatch::try_new(
                Arc::clone(&schema),
                vec![Arc::new(Int64Array::from(values))],
            )
            .unwrap()
        };
        let input =
            MemorySourceConfig::try_new_exec(&[vec![part(0)], vec![part(1)]], schema.clone(), None)
                .unwrap();
        let order = LexOrdering::new(vec![PhysicalSortExpr::new(
            col("x", &schema).unwrap(),
            datafusion::arrow::compute::SortOptions {
                descending: true,
                nulls_first: false,
            },
        )])
        .unwrap();
        let mut plan: Arc<dyn ExecutionPlan> = Arc::new(
            SortExec::new(order, input)
                .with_preserve_partitioning(true)
                .with_fetch(Some(fetch)),
        );
        if rule {
            plan = RULE.optimize(plan, &ConfigOptions::default()).unwrap();
        }
        let shape = datafusion::physical_plan::displayable(plan.as_ref())
            .indent(false)
            .to_string();
        let batches = collect(plan, SessionContext::new().task_ctx())
            .await
            .unwrap();
        let mut rows: Vec<i64> = batches
            .iter()
            .flat_map(|b| {
                let a = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
                a.values().to_vec()
            })
            .collect();
        rows.sort_unstable();
        (rows, shape)
    }

    #[tokio::test]
    async fn a_large_fetch_sorts_then_limits_the_same_rows() {
        let n = 2 * TOP_K_MAX as i64 + 10;
        for fetch in [10, TOP_K_MAX, TOP_K_MAX + 1, TOP_K_MAX + 7] {
            let (plain, _) = sorted(n, fetch, false).await;
            let (ruled, shape) = sorted(n, fetch, true).await;
            // Each partition keeps its `fetch` largest values: computed by hand.
            let mut want: Vec<i64> = (0..2)
                .flat_map(|odd| {
                    let mut p: Vec<i64> = (0..n).filter(|v| v % 2 == odd).collect();
                    p.sort_unstable_by(|a, b| b.cmp(a));
                    p.truncate(fetch);
                    p
                })
                .collect();
            want.sort_unstable();
            assert_eq!(plain, want, "fetch {fetch}");
            assert_eq!(ruled, want, "fetch {fetch}");
            assert_eq!(
                shape.contains("LocalLimitExec"),
                fetch > TOP_K_MAX,
                "{shape}"
            );
        }
    }
}
