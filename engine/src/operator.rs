//! One shape of custom DataFusion operator, shared by the engine's: a logical extension node
//! over two inputs that the physical operator turns into one output batch with a [`Kernel`]
//! (the context packer, the relationship traversal). The first input is folded into the
//! kernel's accumulator batch by batch as its scan streams; the second is read whole. The node shows in
//! `EXPLAIN` and `compile` output like any other; a [`TwoInputPlanner`] per kernel plans it,
//! handed to the query planner by whoever builds the session ([`crate::session`]).

use std::cmp::Ordering;
use std::fmt;
use std::hash::Hash;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{DFSchema, DFSchemaRef, DataFusionError, Result as DfResult};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::{
    Expr, LogicalPlan, UserDefinedLogicalNode, UserDefinedLogicalNodeCore,
};
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    ChildrenPropertiesMode, DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning,
    PlanProperties, ReplaceChildrenOptions, collect, execute_stream,
};
use datafusion::physical_planner::{ExtensionPlanner, PhysicalPlanner};
use futures::StreamExt;

/// What an operator does with its two inputs, read whole.
pub trait Kernel:
    fmt::Debug + Clone + PartialEq + Eq + Hash + PartialOrd + Send + Sync + 'static
{
    /// The operator's name (`BundlePack`; the physical one appends `Exec`).
    const NAME: &'static str;
    /// The output schema.
    fn schema(&self) -> SchemaRef;
    /// The parameters shown after the name in plans (`budget=8000 …`).
    fn params(&self) -> String;
    /// What the kernel keeps of the first input while it streams.
    type Acc: Send + 'static;
    /// The accumulator before the first batch.
    fn start(&self) -> Self::Acc;
    /// Folds one batch of the first input in (the batch is dropped afterwards).
    fn fold(&self, acc: &mut Self::Acc, batch: RecordBatch) -> DfResult<()>;
    /// The output from the folded first input and every batch of the second.
    fn finish(&self, acc: Self::Acc, second: &[RecordBatch]) -> DfResult<RecordBatch>;
}

/// The logical node: two inputs and a kernel.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TwoInputNode<K: Kernel> {
    pub first: LogicalPlan,
    pub second: LogicalPlan,
    pub kernel: K,
    schema: DFSchemaRef,
}

impl<K: Kernel> TwoInputNode<K> {
    pub fn new(first: LogicalPlan, second: LogicalPlan, kernel: K) -> DfResult<Self> {
        let schema = Arc::new(DFSchema::try_from(kernel.schema().as_ref().clone())?);
        Ok(TwoInputNode {
            first,
            second,
            kernel,
            schema,
        })
    }

    /// The node as a plan.
    pub fn into_plan(self) -> LogicalPlan {
        LogicalPlan::Extension(datafusion::logical_expr::Extension {
            node: Arc::new(self),
        })
    }
}

impl<K: Kernel> PartialOrd for TwoInputNode<K> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        self.kernel
            .partial_cmp(&other.kernel)
            .filter(|o| *o != Ordering::Equal)
    }
}

fn two<T>(mut v: Vec<T>, what: &str) -> DfResult<(T, T)> {
    match (v.pop(), v.pop(), v.is_empty()) {
        (Some(second), Some(first), true) => Ok((first, second)),
        _ => Err(DataFusionError::Internal(format!(
            "{what} takes two inputs"
        ))),
    }
}

impl<K: Kernel> UserDefinedLogicalNodeCore for TwoInputNode<K> {
    fn name(&self) -> &str {
        K::NAME
    }

    fn inputs(&self) -> Vec<&LogicalPlan> {
        vec![&self.first, &self.second]
    }

    fn schema(&self) -> &DFSchemaRef {
        &self.schema
    }

    fn expressions(&self) -> Vec<Expr> {
        Vec::new()
    }

    fn fmt_for_explain(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "{}: {}", K::NAME, self.kernel.params())
    }

    fn with_exprs_and_inputs(&self, _exprs: Vec<Expr>, inputs: Vec<LogicalPlan>) -> DfResult<Self> {
        let (first, second) = two(inputs, K::NAME)?;
        TwoInputNode::new(first, second, self.kernel.clone())
    }
}

/// The physical operator: one partition, emitted once both inputs are read.
#[derive(Debug)]
pub struct TwoInputExec<K: Kernel> {
    first: Arc<dyn ExecutionPlan>,
    second: Arc<dyn ExecutionPlan>,
    kernel: K,
    props: Arc<PlanProperties>,
}

impl<K: Kernel> TwoInputExec<K> {
    pub fn new(first: Arc<dyn ExecutionPlan>, second: Arc<dyn ExecutionPlan>, kernel: K) -> Self {
        let props = PlanProperties::new(
            EquivalenceProperties::new(kernel.schema()),
            Partitioning::UnknownPartitioning(1),
            EmissionType::Final,
            Boundedness::Bounded,
        );
        TwoInputExec {
            first,
            second,
            kernel,
            props: Arc::new(props),
        }
    }

    /// What the operator computes, with its parameters.
    pub fn kernel(&self) -> &K {
        &self.kernel
    }
}

impl<K: Kernel> DisplayAs for TwoInputExec<K> {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "{}Exec: {}", K::NAME, self.kernel.params())
    }
}

impl<K: Kernel> ExecutionPlan for TwoInputExec<K> {
    fn name(&self) -> &str {
        K::NAME
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.props
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.first, &self.second]
    }

    fn benefits_from_input_partitioning(&self) -> Vec<bool> {
        vec![false, false]
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
        let (first, second) = two(children, K::NAME)?;
        Ok(Arc::new(TwoInputExec::new(
            first,
            second,
            self.kernel.clone(),
        )))
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        self.replace_children(
            children,
            ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute),
        )
    }

    fn with_new_children_and_same_properties(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        self.replace_children(
            children,
            ReplaceChildrenOptions::new(ChildrenPropertiesMode::Keep),
        )
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> DfResult<SendableRecordBatchStream> {
        if partition != 0 {
            return Err(DataFusionError::Internal(format!(
                "{}Exec has one partition, not {partition}",
                K::NAME
            )));
        }
        let (first, second, kernel) = (
            Arc::clone(&self.first),
            Arc::clone(&self.second),
            self.kernel.clone(),
        );
        let fut = async move {
            // Both inputs at once: the first is folded as its batches arrive (its scan's
            // other partitions run meanwhile), the second is collected.
            let folded = async {
                let mut acc = kernel.start();
                let mut batches = execute_stream(first, Arc::clone(&context))?;
                while let Some(batch) = batches.next().await {
                    kernel.fold(&mut acc, batch?)?;
                }
                Ok::<_, DataFusionError>(acc)
            };
            let (acc, b) = futures::try_join!(folded, collect(second, Arc::clone(&context)))?;
            kernel.finish(acc, &b)
        };
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            self.kernel.schema(),
            futures::stream::once(fut),
        )))
    }
}

/// Plans every [`TwoInputNode`] with kernel `K` into a [`TwoInputExec`].
#[derive(Debug)]
pub struct TwoInputPlanner<K: Kernel>(std::marker::PhantomData<K>);

impl<K: Kernel> Default for TwoInputPlanner<K> {
    fn default() -> Self {
        TwoInputPlanner(std::marker::PhantomData)
    }
}

#[async_trait]
impl<K: Kernel> ExtensionPlanner for TwoInputPlanner<K> {
    async fn plan_extension(
        &self,
        _planner: &dyn PhysicalPlanner,
        node: &dyn UserDefinedLogicalNode,
        _logical_inputs: &[&LogicalPlan],
        physical_inputs: &[Arc<dyn ExecutionPlan>],
        _session: &dyn datafusion::catalog::Session,
        _ctx: &datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext,
    ) -> DfResult<Option<Arc<dyn ExecutionPlan>>> {
        let Some(n) = node.as_any().downcast_ref::<TwoInputNode<K>>() else {
            return Ok(None);
        };
        let (first, second) = two(physical_inputs.to_vec(), K::NAME)?;
        Ok(Some(Arc::new(TwoInputExec::new(
            first,
            second,
            n.kernel.clone(),
        ))))
    }
}
