//! `max_groups` (DESIGN.md §4): a pass-through operator over a grouped aggregate that counts
//! the groups it emits, over all partitions, and fails with `limit_exceeded` as soon as they
//! are more than the limit, before anything above it (dense fill, sort, join) holds them.
//!
//! The logical node ([`GroupCap`]) shows in plans as `GroupCap: max_groups=N`; the SQL
//! unparser does not know it, so [`strip`] removes it before a plan is unparsed.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{DFSchemaRef, DataFusionError, Result as DfResult};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::{
    Expr, Extension, LogicalPlan, UserDefinedLogicalNode, UserDefinedLogicalNodeCore,
};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties, ReplaceChildrenOptions,
};
use datafusion::physical_planner::{ExtensionPlanner, PhysicalPlanner};
use futures::StreamExt;

use crate::error::Error;

/// The logical node: its input's rows, failing past `max` rows.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd)]
pub struct GroupCap {
    pub input: LogicalPlan,
    pub max: u64,
}

impl GroupCap {
    /// `input` under the cap, as a plan.
    pub fn plan(input: LogicalPlan, max: u64) -> LogicalPlan {
        LogicalPlan::Extension(Extension {
            node: Arc::new(GroupCap { input, max }),
        })
    }
}

impl UserDefinedLogicalNodeCore for GroupCap {
    fn name(&self) -> &str {
        "GroupCap"
    }

    fn inputs(&self) -> Vec<&LogicalPlan> {
        vec![&self.input]
    }

    fn schema(&self) -> &DFSchemaRef {
        self.input.schema()
    }

    fn expressions(&self) -> Vec<Expr> {
        Vec::new()
    }

    fn fmt_for_explain(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "GroupCap: max_groups={}", self.max)
    }

    fn with_exprs_and_inputs(&self, _exprs: Vec<Expr>, inputs: Vec<LogicalPlan>) -> DfResult<Self> {
        let input = inputs
            .into_iter()
            .next()
            .ok_or_else(|| DataFusionError::Internal("GroupCap takes one input".into()))?;
        Ok(GroupCap {
            input,
            max: self.max,
        })
    }

    fn supports_limit_pushdown(&self) -> bool {
        false
    }
}

/// `plan` without its [`GroupCap`] nodes (for the SQL unparser).
pub fn strip(plan: &LogicalPlan) -> LogicalPlan {
    plan.clone()
        .transform_up(|p| match &p {
            LogicalPlan::Extension(e) => match e.node.as_any().downcast_ref::<GroupCap>() {
                Some(cap) => Ok(Transformed::yes(cap.input.clone())),
                None => Ok(Transformed::no(p)),
            },
            _ => Ok(Transformed::no(p)),
        })
        .map(|t| t.data)
        .unwrap_or_else(|_| plan.clone())
}

/// The physical operator: the input's partitions, counted together.
#[derive(Debug)]
pub struct GroupCapExec {
    input: Arc<dyn ExecutionPlan>,
    max: u64,
    seen: Arc<AtomicU64>,
}

impl GroupCapExec {
    pub fn new(input: Arc<dyn ExecutionPlan>, max: u64) -> Self {
        GroupCapExec {
            input,
            max,
            seen: Arc::default(),
        }
    }
}

impl DisplayAs for GroupCapExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "GroupCapExec: max_groups={}", self.max)
    }
}

/// The error past the cap.
pub fn too_many_groups(max: u64, seen: u64) -> Error {
    Error::limit("max_groups", max, seen).with_help(
        "the query has more groups than max_groups; group by fewer or coarser keys, use a \
         coarser BUCKET BY, narrow the window, or filter with WHERE (a dense series has one \
         group per bucket and group)",
    )
}

impl ExecutionPlan for GroupCapExec {
    fn name(&self) -> &str {
        "GroupCapExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        self.input.properties()
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    fn maintains_input_order(&self) -> Vec<bool> {
        vec![true]
    }

    fn benefits_from_input_partitioning(&self) -> Vec<bool> {
        vec![false]
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> DfResult<TreeNodeRecursion>,
    ) -> DfResult<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    fn replace_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
        _options: ReplaceChildrenOptions,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let input = children
            .into_iter()
            .next()
            .ok_or_else(|| DataFusionError::Internal("GroupCapExec takes one input".into()))?;
        Ok(Arc::new(GroupCapExec::new(input, self.max)))
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        self.replace_children(
            children,
            ReplaceChildrenOptions::new(
                datafusion::physical_plan::ChildrenPropertiesMode::Recompute,
            ),
        )
    }

    fn with_new_children_and_same_properties(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        self.replace_children(
            children,
            ReplaceChildrenOptions::new(datafusion::physical_plan::ChildrenPropertiesMode::Keep),
        )
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> DfResult<SendableRecordBatchStream> {
        let input = self.input.execute(partition, context)?;
        let schema = input.schema();
        let (max, seen) = (self.max, Arc::clone(&self.seen));
        let counted = input.map(move |batch| {
            let batch = batch?;
            let n = batch.num_rows() as u64;
            let total = seen.fetch_add(n, Ordering::Relaxed) + n;
            if total > max {
                return Err(DataFusionError::External(Box::new(too_many_groups(
                    max, total,
                ))));
            }
            Ok(batch)
        });
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, counted)))
    }
}

/// Plans [`GroupCap`] into [`GroupCapExec`].
#[derive(Debug, Default)]
pub struct GroupCapPlanner;

#[async_trait]
impl ExtensionPlanner for GroupCapPlanner {
    async fn plan_extension(
        &self,
        _planner: &dyn PhysicalPlanner,
        node: &dyn UserDefinedLogicalNode,
        _logical_inputs: &[&LogicalPlan],
        physical_inputs: &[Arc<dyn ExecutionPlan>],
        _session: &dyn datafusion::catalog::Session,
        _ctx: &datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext,
    ) -> DfResult<Option<Arc<dyn ExecutionPlan>>> {
        let Some(cap) = node.as_any().downcast_ref::<GroupCap>() else {
            return Ok(None);
        };
        match physical_inputs {
            [input] => Ok(Some(Arc::new(GroupCapExec::new(
                Arc::clone(input),
                cap.max,
            )))),
            _ => Err(DataFusionError::Internal("GroupCap takes one input".into())),
        }
    }
}
