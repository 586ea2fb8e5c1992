//! The one shape of the engine's physical rules (engine/src/session.rs registers them): a
//! plan, or a filter's expression, rewritten bottom up node by node.

use datafusion::common::Result;
use datafusion::common::tree_node::{Transformed, TreeNode};

/// `node` rewritten bottom up by `rule`, the one shape of the engine's rules (over plans and
/// over expressions): a node `rule` gives a replacement for (`Some`) is replaced, the others
/// are kept as they are.
pub(crate) fn rewrite_up<N: TreeNode>(
    node: N,
    mut rule: impl FnMut(&N) -> Result<Option<N>>,
) -> Result<Transformed<N>> {
    node.transform_up(|n| Ok(rule(&n)?.map_or(Transformed::no(n), Transformed::yes)))
}
