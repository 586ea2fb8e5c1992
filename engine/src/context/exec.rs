//! The packer as a DataFusion operator (DESIGN.md §5): the logical extension node
//! [`BundlePackNode`] over two inputs (the candidate representations with their lexical-v1
//! scores, and the graph edges of the selected revisions), planned by [`BundlePackPlanner`]
//! into [`BundlePackExec`], which decides eligibility, expands, boosts, ranks, applies MAX
//! OBJECTS and runs both packing passes, and emits one row per packed item (in rank order), one
//! per rejected object, and a summary row.

use std::cmp::Ordering;
use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{Array, AsArray, RecordBatch, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{DFSchema, DFSchemaRef, DataFusionError, Result as DfResult};
use datafusion::execution::context::QueryPlanner;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::{
    Expr, LogicalPlan, UserDefinedLogicalNode, UserDefinedLogicalNodeCore,
};
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    ChildrenPropertiesMode, DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning,
    PlanProperties, ReplaceChildrenOptions, collect,
};
use datafusion::physical_planner::{DefaultPhysicalPlanner, ExtensionPlanner, PhysicalPlanner};
use serde_json::{Value, json};

use super::select::{Edge, Reason};
use super::{Decisions, Item, PackParams, decide};

/// The output schema: `kind` (`item`, `rejected`, `summary`), `object`, `reason`, `item` (the
/// bundle item as JSON), `explain` (its explanation entry as JSON).
pub fn output_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("kind", DataType::Utf8, false),
        Field::new("object", DataType::Utf8, true),
        Field::new("reason", DataType::Utf8, true),
        Field::new("item", DataType::Utf8, true),
        Field::new("explain", DataType::Utf8, true),
    ]))
}

/// The logical node: inputs are the candidate rows and the edges.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BundlePackNode {
    pub candidates: LogicalPlan,
    pub edges: LogicalPlan,
    pub params: PackParams,
    schema: DFSchemaRef,
}

impl BundlePackNode {
    pub fn new(candidates: LogicalPlan, edges: LogicalPlan, params: PackParams) -> DfResult<Self> {
        let schema = Arc::new(DFSchema::try_from(output_schema().as_ref().clone())?);
        Ok(BundlePackNode {
            candidates,
            edges,
            params,
            schema,
        })
    }
}

impl PartialOrd for BundlePackNode {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        self.params
            .partial_cmp(&other.params)
            .filter(|o| *o != Ordering::Equal)
    }
}

impl UserDefinedLogicalNodeCore for BundlePackNode {
    fn name(&self) -> &str {
        "BundlePack"
    }

    fn inputs(&self) -> Vec<&LogicalPlan> {
        vec![&self.candidates, &self.edges]
    }

    fn schema(&self) -> &DFSchemaRef {
        &self.schema
    }

    fn expressions(&self) -> Vec<Expr> {
        Vec::new()
    }

    fn fmt_for_explain(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "BundlePack: budget={} max_objects={} max_depth={}",
            self.params.budget, self.params.max_objects, self.params.max_depth
        )
    }

    fn with_exprs_and_inputs(
        &self,
        _exprs: Vec<Expr>,
        mut inputs: Vec<LogicalPlan>,
    ) -> DfResult<Self> {
        if inputs.len() != 2 {
            return Err(DataFusionError::Internal(
                "BundlePack takes two inputs".into(),
            ));
        }
        let edges = inputs.pop().expect("two inputs");
        let candidates = inputs.pop().expect("two inputs");
        BundlePackNode::new(candidates, edges, self.params.clone())
    }
}

/// The physical operator.
#[derive(Debug)]
pub struct BundlePackExec {
    candidates: Arc<dyn ExecutionPlan>,
    edges: Arc<dyn ExecutionPlan>,
    params: PackParams,
    props: Arc<PlanProperties>,
}

impl BundlePackExec {
    pub fn new(
        candidates: Arc<dyn ExecutionPlan>,
        edges: Arc<dyn ExecutionPlan>,
        params: PackParams,
    ) -> Self {
        let props = PlanProperties::new(
            EquivalenceProperties::new(output_schema()),
            Partitioning::UnknownPartitioning(1),
            EmissionType::Final,
            Boundedness::Bounded,
        );
        BundlePackExec {
            candidates,
            edges,
            params,
            props: Arc::new(props),
        }
    }
}

impl DisplayAs for BundlePackExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "BundlePackExec: budget={} max_objects={} max_depth={}",
            self.params.budget, self.params.max_objects, self.params.max_depth
        )
    }
}

impl ExecutionPlan for BundlePackExec {
    fn name(&self) -> &str {
        "BundlePackExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.props
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.candidates, &self.edges]
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
        mut children: Vec<Arc<dyn ExecutionPlan>>,
        _options: ReplaceChildrenOptions,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        if children.len() != 2 {
            return Err(DataFusionError::Internal(
                "BundlePackExec takes two children".into(),
            ));
        }
        let edges = children.pop().expect("two children");
        let candidates = children.pop().expect("two children");
        Ok(Arc::new(BundlePackExec::new(
            candidates,
            edges,
            self.params.clone(),
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
                "BundlePackExec has one partition, not {partition}"
            )));
        }
        let (cands, edges, params) = (
            Arc::clone(&self.candidates),
            Arc::clone(&self.edges),
            self.params.clone(),
        );
        let fut = async move {
            let cand_batches = collect(cands, Arc::clone(&context)).await?;
            let edge_batches = collect(edges, context).await?;
            let candidates = super::load::candidates_from(&cand_batches, &params)
                .map_err(|e| DataFusionError::External(Box::new(e)))?;
            let edges = edges_from(&edge_batches)?;
            encode(&decide(&params, &candidates, &edges))
        };
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            output_schema(),
            futures::stream::once(fut),
        )))
    }
}

fn edges_from(batches: &[RecordBatch]) -> DfResult<Vec<Edge>> {
    let mut out = Vec::new();
    for b in batches {
        let col = |i: usize| -> DfResult<StringArray> {
            let c = datafusion::arrow::compute::cast(b.column(i), &DataType::Utf8)?;
            Ok(c.as_string::<i32>().clone())
        };
        let (a, bb, rel) = (col(0)?, col(1)?, col(2)?);
        for i in 0..b.num_rows() {
            if a.is_null(i) || bb.is_null(i) {
                continue;
            }
            out.push(Edge {
                a: a.value(i).to_string(),
                b: bb.value(i).to_string(),
                relation: if rel.is_null(i) {
                    String::new()
                } else {
                    rel.value(i).to_string()
                },
            });
        }
    }
    out.sort();
    out.dedup();
    Ok(out)
}

/// The decisions as the operator's rows.
fn encode(d: &Decisions) -> DfResult<RecordBatch> {
    let mut kind = Vec::new();
    let mut object: Vec<Option<String>> = Vec::new();
    let mut reason: Vec<Option<&str>> = Vec::new();
    let mut item: Vec<Option<String>> = Vec::new();
    let mut explain: Vec<Option<String>> = Vec::new();
    for (it, ex) in d.items.iter().zip(&d.explained) {
        kind.push("item");
        object.push(Some(it.object.clone()));
        reason.push(None);
        item.push(Some(
            serde_json::to_string(it).map_err(|e| DataFusionError::External(Box::new(e)))?,
        ));
        explain.push(Some(ex.to_string()));
    }
    for (o, r) in &d.rejected {
        kind.push("rejected");
        object.push(Some(o.clone()));
        reason.push(Some(r.as_str()));
        item.push(None);
        explain.push(None);
    }
    kind.push("summary");
    object.push(None);
    reason.push(None);
    item.push(Some(
        json!({"used": d.used, "considered": d.considered, "seeds": d.seeds, "expanded": d.expanded}).to_string(),
    ));
    explain.push(None);
    Ok(RecordBatch::try_new(
        output_schema(),
        vec![
            Arc::new(StringArray::from(kind)),
            Arc::new(StringArray::from(object)),
            Arc::new(StringArray::from(reason)),
            Arc::new(StringArray::from(item)),
            Arc::new(StringArray::from(explain)),
        ],
    )?)
}

/// The decisions back from the operator's rows.
pub fn decode(batches: &[RecordBatch]) -> crate::error::Result<Decisions> {
    let bad = |m: &str| crate::error::Error::internal(format!("BundlePackExec output: {m}"));
    let mut d = Decisions::default();
    for b in batches {
        let s = |i: usize| b.column(i).as_string::<i32>();
        let (kind, object, reason, item, explain) = (s(0), s(1), s(2), s(3), s(4));
        for i in 0..b.num_rows() {
            match kind.value(i) {
                "item" => {
                    let it: Item =
                        serde_json::from_str(item.value(i)).map_err(|e| bad(&e.to_string()))?;
                    let ex: Value =
                        serde_json::from_str(explain.value(i)).map_err(|e| bad(&e.to_string()))?;
                    d.items.push(it);
                    d.explained.push(ex);
                }
                "rejected" => {
                    let r = Reason::ALL
                        .iter()
                        .find(|r| r.as_str() == reason.value(i))
                        .ok_or_else(|| bad("unknown reason"))?;
                    d.rejected.push((object.value(i).to_string(), *r));
                }
                "summary" => {
                    let v: Value =
                        serde_json::from_str(item.value(i)).map_err(|e| bad(&e.to_string()))?;
                    let n = |k: &str| v[k].as_u64().unwrap_or(0);
                    d.used = n("used");
                    d.considered = n("considered");
                    d.seeds = n("seeds");
                    d.expanded = n("expanded");
                }
                other => return Err(bad(&format!("unknown row kind {other}"))),
            }
        }
    }
    Ok(d)
}

/// Plans [`BundlePackNode`] into [`BundlePackExec`].
#[derive(Debug, Default)]
pub struct BundlePackPlanner;

#[async_trait]
impl ExtensionPlanner for BundlePackPlanner {
    async fn plan_extension(
        &self,
        _planner: &dyn PhysicalPlanner,
        node: &dyn UserDefinedLogicalNode,
        _logical_inputs: &[&LogicalPlan],
        physical_inputs: &[Arc<dyn ExecutionPlan>],
        _session: &dyn datafusion::catalog::Session,
        _ctx: &datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext,
    ) -> DfResult<Option<Arc<dyn ExecutionPlan>>> {
        let Some(n) = node.as_any().downcast_ref::<BundlePackNode>() else {
            return Ok(None);
        };
        if physical_inputs.len() != 2 {
            return Err(DataFusionError::Internal(
                "BundlePack takes two inputs".into(),
            ));
        }
        Ok(Some(Arc::new(BundlePackExec::new(
            Arc::clone(&physical_inputs[0]),
            Arc::clone(&physical_inputs[1]),
            n.params.clone(),
        ))))
    }
}

/// The engine's query planner: DataFusion's, with [`BundlePackPlanner`].
#[derive(Debug, Default)]
pub struct ContextQueryPlanner;

#[async_trait]
impl QueryPlanner for ContextQueryPlanner {
    async fn create_physical_plan(
        &self,
        logical_plan: &LogicalPlan,
        session: &dyn datafusion::catalog::Session,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        DefaultPhysicalPlanner::with_extension_planners(vec![Arc::new(BundlePackPlanner)])
            .create_physical_plan(logical_plan, session)
            .await
    }
}
