//! [`ScanPartsExec`]: one table scan made of several Parquet scans over disjoint row groups of
//! the table's files, each with its own filter. A folder table splits its scan this way when
//! the row groups' statistics prove a filter true for every row of some row groups (a time
//! window that covers them): those are read without the filter, and without the columns only
//! the filter needed; the others apply it (docs/scan.md, "Row groups a filter holds for").
//!
//! The node has as many partitions as the session's target (or as its parts have, if more):
//! the parts' partitions are dealt to them in turn, and each reads its share one after the
//! other. So the plan above sees the partitions a single scan would have given it, and
//! DataFusion adds no round-robin repartition between the node and a projection over it. Such
//! a projection is pushed into every part (so file-dependent expressions such as
//! `file_row_index()` still run inside the Parquet scans), and repartitioning splits every
//! part.

use std::fmt;
use std::sync::Arc;

use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{DataFusionError, Result, Statistics};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::{EquivalenceProperties, Partitioning, PhysicalExpr};
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    ChildStats, ChildrenPropertiesMode, DisplayAs, DisplayFormatType, ExecutionPlan,
    ExecutionPlanProperties, PlanProperties, ReplaceChildrenOptions, StatisticsArgs,
};
use futures::{StreamExt, TryStreamExt};

/// The parts of one table scan, read one after the other in each output partition.
#[derive(Debug)]
pub struct ScanPartsExec {
    parts: Vec<Arc<dyn ExecutionPlan>>,
    /// Per output partition: the (part, partition of the part) it reads, in order.
    shares: Vec<Vec<(usize, usize)>>,
    properties: Arc<PlanProperties>,
}

impl ScanPartsExec {
    /// The scan made of `parts` (at least one; all with the same schema), in `partitions`
    /// output partitions (at least; more if the parts have more).
    pub fn try_new(parts: Vec<Arc<dyn ExecutionPlan>>, partitions: usize) -> Result<Self> {
        let Some(first) = parts.first() else {
            return Err(DataFusionError::Internal(
                "ScanPartsExec takes at least one part".into(),
            ));
        };
        let schema = first.schema();
        if let Some(other) = parts
            .iter()
            .find(|p| p.schema().fields() != schema.fields())
        {
            return Err(DataFusionError::Internal(format!(
                "ScanPartsExec parts differ in schema: {schema} and {}",
                other.schema()
            )));
        }
        let widest = parts
            .iter()
            .map(|p| p.output_partitioning().partition_count())
            .max()
            .unwrap_or(1);
        let partitions = partitions.max(widest).max(1);
        let mut shares = vec![Vec::new(); partitions];
        let pieces = parts
            .iter()
            .enumerate()
            .flat_map(|(i, p)| (0..p.output_partitioning().partition_count()).map(move |j| (i, j)));
        for (k, piece) in pieces.enumerate() {
            shares[k % partitions].push(piece);
        }
        let properties = PlanProperties::new(
            EquivalenceProperties::new(schema),
            Partitioning::UnknownPartitioning(partitions),
            // Parquet scans: incremental and bounded, as the parts are.
            first.properties().emission_type,
            first.properties().boundedness,
        );
        Ok(ScanPartsExec {
            parts,
            shares,
            properties: Arc::new(properties),
        })
    }

    /// The parts, in the order each partition reads them.
    pub fn parts(&self) -> &[Arc<dyn ExecutionPlan>] {
        &self.parts
    }
}

impl DisplayAs for ScanPartsExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "ScanPartsExec: parts={}", self.parts.len())
    }
}

impl ExecutionPlan for ScanPartsExec {
    fn name(&self) -> &str {
        "ScanPartsExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        self.parts.iter().collect()
    }

    fn maintains_input_order(&self) -> Vec<bool> {
        vec![false; self.parts.len()]
    }

    fn benefits_from_input_partitioning(&self) -> Vec<bool> {
        vec![false; self.parts.len()]
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }

    /// The parts replaced, their partitions dealt again (whatever `_options` says: the deal
    /// depends on the parts' partitions).
    fn replace_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
        _options: ReplaceChildrenOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(Arc::new(ScanPartsExec::try_new(
            children,
            self.shares.len(),
        )?))
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        self.replace_children(
            children,
            ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute),
        )
    }

    fn with_new_children_and_same_properties(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        self.replace_children(
            children,
            ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute),
        )
    }

    /// Every part split into `target` partitions where it can be (a part that cannot is kept).
    fn repartitioned(
        &self,
        target: usize,
        config: &ConfigOptions,
    ) -> Result<Option<Arc<dyn ExecutionPlan>>> {
        let mut changed = false;
        let mut parts = Vec::with_capacity(self.parts.len());
        for p in &self.parts {
            match p.repartitioned(target, config)? {
                Some(split) => {
                    changed = true;
                    parts.push(split);
                }
                None => parts.push(Arc::clone(p)),
            }
        }
        Ok(changed
            .then(|| ScanPartsExec::try_new(parts, target.max(self.shares.len())))
            .transpose()?
            .map(|e| Arc::new(e) as Arc<dyn ExecutionPlan>))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let Some(share) = self.shares.get(partition) else {
            return Err(DataFusionError::Internal(format!(
                "ScanPartsExec has no partition {partition}"
            )));
        };
        // Each piece's stream is opened only when the one before it ends.
        let pieces: Vec<(Arc<dyn ExecutionPlan>, usize)> = share
            .iter()
            .map(|(i, j)| (Arc::clone(&self.parts[*i]), *j))
            .collect();
        let stream = futures::stream::iter(pieces)
            .map(move |(p, j)| p.execute(j, Arc::clone(&context)))
            .try_flatten();
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            self.schema(),
            stream,
        )))
    }

    /// Overall statistics only: a partition's share spans several parts' partitions.
    fn child_stats_requests(&self, _partition: Option<usize>) -> Vec<ChildStats> {
        self.parts.iter().map(|_| ChildStats::At(None)).collect()
    }

    /// The parts' statistics added up (inexact: a part's file statistics describe whole files).
    fn statistics_from_inputs(
        &self,
        input_stats: &[Arc<Statistics>],
        _args: &StatisticsArgs,
    ) -> Result<Arc<Statistics>> {
        let schema = self.schema();
        let merged = Statistics::try_merge_iter(input_stats.iter().map(|s| s.as_ref()), &schema)?;
        Ok(Arc::new(merged.to_inexact()))
    }

    /// The projection pushed into every part, when every part takes it (a Parquet scan takes
    /// column selections and the expressions it evaluates itself, such as `file_row_index()`).
    fn try_swapping_with_projection(
        &self,
        projection: &ProjectionExec,
    ) -> Result<Option<Arc<dyn ExecutionPlan>>> {
        let mut parts = Vec::with_capacity(self.parts.len());
        for p in &self.parts {
            let over = ProjectionExec::try_new(projection.expr().to_vec(), Arc::clone(p))?;
            match p.try_swapping_with_projection(&over)? {
                Some(swapped) => parts.push(swapped),
                None => return Ok(None),
            }
        }
        Ok(Some(Arc::new(ScanPartsExec::try_new(
            parts,
            self.shares.len(),
        )?)))
    }
}
