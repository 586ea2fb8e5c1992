//! The one shape of the engine's physical rules (engine/src/session.rs registers them): a
//! plan, or a filter's expression, rewritten bottom up node by node.

use std::sync::Arc;

use datafusion::common::Result;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TransformedResult, TreeNode};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::ExecutionPlan;

/// `node` rewritten bottom up by `rule`, the one shape of the engine's rules (over plans and
/// over expressions): a node `rule` gives a replacement for (`Some`) is replaced, the others
/// are kept as they are.
pub(crate) fn rewrite_up<N: TreeNode>(
    node: N,
    mut rule: impl FnMut(&N) -> Result<Option<N>>,
) -> Result<Transformed<N>> {
    node.transform_up(|n| Ok(rule(&n)?.map_or(Transformed::no(n), Transformed::yes)))
}

/// A physical rule that is one node rewrite applied bottom up ([`rewrite_up`]), DataFusion
/// checking the schema after it: the shape of the engine's plan rules but the string-view
/// equality (engine/src/session.rs registers them).
#[derive(Debug)]
pub(crate) struct NodeRule {
    /// The rule's name (in DataFusion's optimizer traces).
    pub(crate) name: &'static str,
    /// A node's replacement, if any.
    pub(crate) node: fn(&Plan) -> Result<Option<Plan>>,
}

type Plan = Arc<dyn ExecutionPlan>;

impl PhysicalOptimizerRule for NodeRule {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        rewrite_up(plan, self.node).data()
    }

    fn name(&self) -> &str {
        self.name
    }

    fn schema_check(&self) -> bool {
        true
    }
}
