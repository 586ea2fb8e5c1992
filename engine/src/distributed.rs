//! Running a statement on a cluster of workers, through datafusion-distributed (docs/cluster.md).
//!
//! The coordinator is the engine's own session with the distributed planner on top of the
//! engine's planner: it plans every statement as it does locally, then cuts the physical plan
//! into stages at its network boundaries and sends the stages that read files to the workers.
//! A worker ([`worker`]) is a gRPC service whose sessions know every signalql function and
//! the signalql operators that travel ([`Codec`]: the scan of a split table, a scan with its
//! row index, the traversal, a Delta table's scan).
//!
//! The engine's operators that read every partition of their input at once (the bundle packer,
//! the traversal, the group cap) run in one task ([`single_task`]): the planner keeps them in
//! the coordinator's own stage, above the network boundaries, so that only their inputs are
//! read on the workers. datafusion-distributed 4 ships a function by its name only, so before
//! distributing a plan the [`Gate`] rewrites the functions whose instances hold a per-query
//! parameter (a table's file list, a column's name) into the form that carries it as an
//! argument, and wraps each file scan that reads `file_row_index()` so that it travels with
//! its row-index column ([`RowIndexScanExec`]). A statement whose worker stages would still
//! hold something that does not travel (one of those operators, or a Delta table's scan) runs
//! whole on the coordinator, as it would without workers.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use datafusion::catalog::Session;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::{DataFusionError, HashMap, Result as DfResult};
use datafusion::datasource::physical_plan::FileScanConfig;
use datafusion::datasource::source::DataSourceExec;
use datafusion::execution::context::QueryPlanner;
use datafusion::execution::object_store::{DefaultObjectStoreRegistry, ObjectStoreRegistry};
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::execution::{SessionState, SessionStateBuilder, TaskContext};
use datafusion::logical_expr::LogicalPlan;
use datafusion::physical_expr::ScalarFunctionExpr;
use datafusion::physical_plan::sorts::sort::SortExec;
use datafusion::physical_plan::windows::BoundedWindowAggExec;
use datafusion::physical_plan::{ExecutionPlan, PhysicalExpr};
use datafusion_distributed::grpc::{BoxCloneSyncChannel, create_worker_client};
use datafusion_distributed::{
    ChannelResolver, DesiredTaskCountEvent, DesiredTaskCountEventResponse, DistributedExec,
    DistributedExt, NetworkBoundaryExt, SessionStateBuilderExt, Worker, WorkerChannel,
    WorkerQueryContext, WorkerResolver,
};
use datafusion_proto::physical_plan::{PhysicalExtensionCodec, PhysicalProtoConverterExtension};
use signalql_catalog::delta::{DeltaSnapshot, DeltaSnapshotScanExec};
use signalql_catalog::parts::ScanPartsExec;
use signalql_catalog::{Root, StorageOptions};
use tonic::transport::{Endpoint, Server};
use url::Url;

use crate::error::{Error, Result};
use crate::lower::traverse::Traverse;
use crate::operator::TwoInputExec;

/// The version a coordinator and its workers must share: the plans and functions they
/// exchange are this build's.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The request header that carries the coordinator's [`VERSION`] to a worker.
const VERSION_HEADER: &str = "x-signalql-version";

/// How long the coordinator waits to connect to a worker.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How often an idle connection to a worker is probed, and how long an answer may take: a
/// worker that dies or drops off the network mid-query fails the query within about
/// `KEEPALIVE * 2`, never hangs it.
pub const KEEPALIVE: Duration = Duration::from_secs(5);

/// The functions whose instances can hold a per-query parameter, and how many arguments they
/// take when they carry it as an argument instead.
const PARAMETERISED: [(&str, usize); 2] = [
    (signalql_udfs::scalar::file_rank::NAME, 2),
    (signalql_udfs::scalar::text_time::NAME, 2),
];

/// The engine's operators that read every partition of their input at once: they run in one
/// task.
const SINGLE_TASK_OPERATORS: [&str; 3] = ["BundlePack", "Traverse", "GroupCapExec"];

/// Those of them that have no codec: a stage bound for the workers must not hold them (the
/// traversal's codec is its relation and depth).
const WITHOUT_CODEC: [&str; 2] = ["BundlePack", "GroupCapExec"];

/// The workers of a cluster, as `http://host:port` URLs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cluster {
    pub workers: Vec<Url>,
}

impl Cluster {
    /// The workers `addresses` name: `host:port` or `http://host:port`, at least one.
    pub fn parse(addresses: &[String]) -> Result<Cluster> {
        let mut workers = Vec::new();
        for a in addresses.iter().map(|a| a.trim()).filter(|a| !a.is_empty()) {
            // `host:port` needs its port; a URL may leave it to its scheme's default.
            let bare_has_port = a
                .rsplit_once(':')
                .is_some_and(|(_, port)| port.parse::<u16>().is_ok());
            let text = if a.contains("://") {
                a.to_string()
            } else if bare_has_port {
                format!("http://{a}")
            } else {
                String::new()
            };
            let url = Url::parse(&text)
                .ok()
                .filter(|u| u.scheme() == "http" && u.host_str().is_some_and(|h| !h.is_empty()))
                .ok_or_else(|| {
                    Error::io(format!(
                        "worker {a:?} is not an address: expected host:port or http://host:port"
                    ))
                })?;
            workers.push(url);
        }
        if workers.is_empty() {
            return Err(Error::io("no worker address given"));
        }
        Ok(Cluster { workers })
    }
}

#[derive(Clone)]
struct Workers(Arc<Vec<Url>>);

impl WorkerResolver for Workers {
    fn get_urls(&self) -> DfResult<Vec<Url>> {
        Ok(self.0.as_ref().clone())
    }
}

/// The coordinator's session: `builder` (the engine's planner and settings already in it)
/// with the distributed planner over `cluster`, behind a [`Gate`] that plans with `local`
/// (the engine's planner) first.
pub fn coordinator(
    builder: SessionStateBuilder,
    cluster: &Cluster,
    local: Arc<dyn QueryPlanner + Send + Sync>,
) -> Result<SessionStateBuilder> {
    let mut headers = tonic::codegen::http::HeaderMap::new();
    headers.insert(
        VERSION_HEADER,
        tonic::codegen::http::HeaderValue::from_static(VERSION),
    );
    let df = |e: DataFusionError| Error::io(format!("cannot set up the cluster: {e}"));
    let mut builder = builder
        .with_distributed_planner()
        .with_distributed_worker_resolver(Workers(Arc::new(cluster.workers.clone())))
        .with_distributed_user_codec(Codec)
        .with_distributed_channel_resolver(Channels::default())
        .with_distributed_desired_task_count_handler(single_task)
        .with_distributed_passthrough_headers(headers)
        .map_err(df)?
        // Metrics are not collected from the workers: waiting for them has no time limit in
        // datafusion-distributed 4, so a worker lost after its data would hang the answer.
        .with_distributed_metrics_collection(false)
        .map_err(df)?;
    // The distributed planner `with_distributed_planner` set, behind the gate.
    let distributed = builder.query_planner().take();
    *builder.query_planner() =
        distributed.map(|distributed| Arc::new(Gate { local, distributed }) as _);
    Ok(builder)
}

/// The coordinator's query planner: the distributed planner (over the engine's), on the plan
/// with its functions in their travelling form ([`travelling`]); a statement whose worker
/// stages would hold a node that cannot travel ([`stays_on_coordinator`]) is planned by `local`
/// instead and runs whole in this process.
#[derive(Debug)]
struct Gate {
    local: Arc<dyn QueryPlanner + Send + Sync>,
    distributed: Arc<dyn QueryPlanner + Send + Sync>,
}

#[async_trait]
impl QueryPlanner for Gate {
    async fn create_physical_plan(
        &self,
        logical_plan: &LogicalPlan,
        session: &dyn Session,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let plan = self
            .distributed
            .create_physical_plan(&travelling(logical_plan)?, session)
            .await?;
        let plan = with_window_keys_sorted(with_row_index_scans(plan)?)?;
        // A plan with no network boundary left (every stage one task) runs here: as the
        // engine plans it, without the distributed planner's split of its scans.
        if !plan.is::<DistributedExec>() || holds_what_cannot_travel(&plan, session)? {
            return self.local.create_physical_plan(logical_plan, session).await;
        }
        Ok(plan)
    }
}

/// `plan` with each function that holds a per-query parameter in the form that carries it as
/// an argument (`signalql_file_rank(path, files)`, `signalql_text_time(text, column)`), and
/// every expression keeping its name.
fn travelling(plan: &LogicalPlan) -> DfResult<LogicalPlan> {
    use datafusion::common::tree_node::Transformed;
    use datafusion::logical_expr::Expr;
    use datafusion::logical_expr::expr_rewriter::NamePreserver;
    use signalql_udfs::scalar::{file_rank::FileRank, text_time::TextTime};

    let rewrite = |e: Expr| -> DfResult<Transformed<Expr>> {
        let Expr::ScalarFunction(call) = &e else {
            return Ok(Transformed::no(e));
        };
        let [arg] = call.args.as_slice() else {
            return Ok(Transformed::no(e));
        };
        let inner = call.func.inner();
        if let Some(f) = inner.downcast_ref::<FileRank>() {
            return Ok(Transformed::yes(f.travelling(arg.clone())));
        }
        if let Some(f) = inner.downcast_ref::<TextTime>() {
            return Ok(Transformed::yes(f.travelling(arg.clone())));
        }
        Ok(Transformed::no(e))
    };
    plan.clone()
        .transform_up_with_subqueries(|node| {
            let names = NamePreserver::new(&node);
            node.map_expressions(|e| {
                let name = names.save(&e);
                Ok(e.transform_up(rewrite)?.update_data(|e| name.restore(e)))
            })
        })
        .map(|t| t.data)
}

/// Whether a stage of `plan` sent to the workers holds a node that cannot travel: one that
/// [`stays_on_coordinator`], or one no codec encodes (a Delta table's scan).
fn holds_what_cannot_travel(
    plan: &Arc<dyn ExecutionPlan>,
    session: &dyn Session,
) -> DfResult<bool> {
    use datafusion::common::tree_node::Transformed;
    use datafusion_distributed::DistributedLeafExec;
    use datafusion_proto::physical_plan::AsExecutionPlan;
    use datafusion_proto::protobuf::PhysicalPlanNode;
    let codec = datafusion_distributed::DistributedCodec::new_combined_with_user(session.config());
    let mut cannot = false;
    plan.apply(|node| {
        let Some(stage) = node
            .as_ref()
            .as_network_boundary()
            .and_then(|b| b.input_stage().local_plan())
        else {
            return Ok(TreeNodeRecursion::Continue);
        };
        // A split scan is sent as each task's own part of it, a plain scan.
        let sent = Arc::clone(stage)
            .transform_up(|n| {
                Ok(match n.downcast_ref::<DistributedLeafExec>() {
                    Some(leaf) => Transformed::yes(Arc::clone(leaf.original())),
                    None => Transformed::no(n),
                })
            })?
            .data;
        cannot = stage.exists(|n| Ok(stays_on_coordinator(n.as_ref())))?
            || PhysicalPlanNode::try_from_physical_plan(sent, &codec).is_err();
        // The stage holds the stages below it: they were encoded with it.
        Ok(if cannot {
            TreeNodeRecursion::Stop
        } else {
            TreeNodeRecursion::Jump
        })
    })?;
    Ok(cannot)
}

/// The one task of the operators that read every partition of their input at once: a stage
/// with one of them runs in one task, which the planner leaves on the coordinator when the
/// stage above it has one task too.
fn single_task(ev: DesiredTaskCountEvent<'_>) -> Option<DfResult<DesiredTaskCountEventResponse>> {
    SINGLE_TASK_OPERATORS
        .contains(&ev.plan.name())
        .then(|| Ok(DesiredTaskCountEventResponse::maximum(1)))
}

/// Bytes of files per task of a scan stage (datafusion-distributed's default, 16 MiB, unless
/// the dataset sets `[cluster] bytes_per_task`).
pub fn with_bytes_per_task(
    builder: SessionStateBuilder,
    bytes: usize,
) -> Result<SessionStateBuilder> {
    builder
        .with_distributed_file_scan_config_bytes_per_partition(bytes.max(1))
        .map_err(|e| Error::io(format!("[cluster] bytes_per_task = {bytes}: {e}")))
}

/// Whether `plan` (the node itself, not its inputs) cannot be sent to a worker.
pub fn stays_on_coordinator(plan: &dyn ExecutionPlan) -> bool {
    if WITHOUT_CODEC.contains(&plan.name())
        || window_needs_known_constants(plan)
        || reads_row_group_slices(plan)
    {
        return true;
    }
    let mut found = false;
    let _ = plan.apply_expressions(&mut |e: &Arc<dyn PhysicalExpr>| {
        e.apply(|node| {
            if let Some(f) = node.downcast_ref::<ScalarFunctionExpr>()
                && PARAMETERISED
                    .iter()
                    .any(|(name, carried)| f.name() == *name && *carried != f.args().len())
            {
                found = true;
                return Ok(TreeNodeRecursion::Stop);
            }
            Ok(TreeNodeRecursion::Continue)
        })
    });
    found
}

/// `plan` with the sort under each window that leaves out a partition key (a constant there,
/// [`window_needs_known_constants`]) sorting by that key first: a no-op on the rows, which lets
/// a worker see the window's input ordered as it requires.
fn with_window_keys_sorted(plan: Arc<dyn ExecutionPlan>) -> DfResult<Arc<dyn ExecutionPlan>> {
    use datafusion::common::tree_node::Transformed;
    use datafusion::physical_expr::{LexOrdering, PhysicalSortExpr};
    plan.transform_up(|node| {
        let Some(window) = node.downcast_ref::<BoundedWindowAggExec>() else {
            return Ok(Transformed::no(node));
        };
        let Some(sort) = window.input().downcast_ref::<SortExec>() else {
            return Ok(Transformed::no(node));
        };
        let missing = unsorted_partition_keys(window);
        if missing.is_empty() {
            return Ok(Transformed::no(node));
        }
        let keys = missing.into_iter().map(PhysicalSortExpr::new_default);
        let Some(ordering) = LexOrdering::new(keys.chain(sort.expr().iter().cloned())) else {
            return Ok(Transformed::no(node));
        };
        let sorted = SortExec::new(ordering, Arc::clone(sort.input()))
            .with_preserve_partitioning(sort.preserve_partitioning())
            .with_fetch(sort.fetch());
        let window = Arc::clone(&node).replace_children(
            vec![Arc::new(sorted)],
            datafusion::physical_plan::ReplaceChildrenOptions::new(
                datafusion::physical_plan::ChildrenPropertiesMode::Recompute,
            ),
        )?;
        Ok(Transformed::yes(window))
    })
    .map(|t| t.data)
}

/// Whether `plan` is a window whose input is sorted without one of its partition keys: the key
/// is a constant there (`WHERE entity_id = "x"` under an entity's latest-version window), which
/// the sort left out. A worker decodes the window without knowing the constant and refuses it
/// (datafusion-distributed 4: "Expects PARTITION BY expression to be ordered").
fn window_needs_known_constants(plan: &dyn ExecutionPlan) -> bool {
    plan.downcast_ref::<BoundedWindowAggExec>()
        .is_some_and(|window| !unsorted_partition_keys(window).is_empty())
}

/// The partition keys of `window` its input is not sorted by: a sort's own keys (its output
/// ordering leaves out what is constant here, which a worker's copy of the plan may not
/// know), else the input's output ordering.
fn unsorted_partition_keys(window: &BoundedWindowAggExec) -> Vec<Arc<dyn PhysicalExpr>> {
    let input = window.input();
    let sorted: Vec<&Arc<dyn PhysicalExpr>> = match input.downcast_ref::<SortExec>() {
        Some(sort) => sort.expr().iter().map(|s| &s.expr).collect(),
        None => input
            .properties()
            .output_ordering()
            .map(|o| o.iter().map(|s| &s.expr).collect())
            .unwrap_or_default(),
    };
    window
        .partition_keys()
        .into_iter()
        .filter(|k| !sorted.iter().any(|s| s.as_ref() == k.as_ref()))
        .collect()
}

/// The files and settings of `plan` when it is a file scan.
fn file_scan(plan: &dyn ExecutionPlan) -> Option<&FileScanConfig> {
    plan.downcast_ref::<DataSourceExec>()
        .and_then(|scan| scan.data_source().downcast_ref::<FileScanConfig>())
}

/// Whether `plan` is a file scan of row-group slices (a file carrying a `ParquetAccessPlan`,
/// catalog/src/folder.rs `sliced`): datafusion-proto 55 drops a file's extensions, so on a
/// worker every slice would read its whole row group.
fn reads_row_group_slices(plan: &dyn ExecutionPlan) -> bool {
    row_group_slices(plan) > 0
}

/// How many files of `plan`, a file scan, read a slice of a row group (carry an extension;
/// 0 for any other node).
pub(crate) fn row_group_slices(plan: &dyn ExecutionPlan) -> usize {
    file_scan(plan).map_or(0, |files| {
        files
            .file_groups
            .iter()
            .flat_map(|g| g.files())
            .filter(|f| !f.extensions.is_empty())
            .count()
    })
}

/// Whether `plan` is a file scan with virtual columns (`file_row_index()`, the tie-break of
/// funnels, sequences and entity listings): datafusion-proto 55 does not encode them, so it
/// travels as a [`RowIndexScanExec`].
fn reads_virtual_columns(plan: &dyn ExecutionPlan) -> bool {
    file_scan(plan).is_some_and(|files| {
        !files
            .file_source
            .table_schema()
            .virtual_columns()
            .is_empty()
    })
}

/// The codec of the signalql operators that travel, each a tag byte then its parameters:
/// [`ScanPartsExec`] (its partition count; its parts arrive as its inputs), the traversal (its
/// depth and relation; its two inputs arrive decoded), [`RowIndexScanExec`] (the scan as
/// datafusion-proto encodes it) and [`DeltaSnapshotScanExec`] (the table, its version, the
/// columns and the output schema; the Parquet scan of its files arrives as its input).
#[derive(Debug)]
pub struct Codec;

impl PhysicalExtensionCodec for Codec {
    fn try_decode(
        &self,
        buf: &[u8],
        inputs: &[Arc<dyn ExecutionPlan>],
        ctx: &TaskContext,
        _converter: &dyn PhysicalProtoConverterExtension,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        match buf.split_first() {
            Some((&SCAN_PARTS, partitions)) => {
                let partitions: [u8; 8] = partitions.try_into().map_err(|_| {
                    DataFusionError::Internal(format!(
                        "a ScanPartsExec arrived as {} bytes, not 8",
                        partitions.len()
                    ))
                })?;
                Ok(Arc::new(ScanPartsExec::try_new(
                    inputs.to_vec(),
                    u64::from_le_bytes(partitions) as usize,
                )?))
            }
            Some((&TRAVERSE, traverse)) => {
                let (depth, relation) = traverse
                    .split_first_chunk::<8>()
                    .ok_or_else(|| DataFusionError::Internal("a Traverse arrived cut".into()))?;
                let relation = String::from_utf8(relation.to_vec()).map_err(|e| {
                    DataFusionError::Internal(format!("a Traverse's relation: {e}"))
                })?;
                match inputs {
                    [first, second] => Ok(Arc::new(TwoInputExec::new(
                        Arc::clone(first),
                        Arc::clone(second),
                        Traverse {
                            relation,
                            depth: u64::from_le_bytes(*depth),
                        },
                    ))),
                    _ => Err(DataFusionError::Internal(
                        "a Traverse arrived without its two inputs".into(),
                    )),
                }
            }
            Some((&ROW_INDEX_SCAN, scan)) => {
                use datafusion_proto::physical_plan::AsExecutionPlan;
                use datafusion_proto::protobuf::PhysicalPlanNode;
                PhysicalPlanNode::try_decode(scan)?.try_into_physical_plan(ctx, self)
            }
            Some((&DELTA_SCAN, delta)) => {
                let [input] = inputs else {
                    return Err(DataFusionError::Internal(
                        "a Delta scan arrived without its input".into(),
                    ));
                };
                let (snapshot, schema) = decode_delta_scan(delta)?;
                Ok(Arc::new(DeltaSnapshotScanExec::remote(
                    snapshot,
                    schema,
                    Arc::clone(input),
                )))
            }
            _ => Err(DataFusionError::Internal(
                "a plan node of another signalql version arrived".into(),
            )),
        }
    }

    fn try_encode(
        &self,
        node: Arc<dyn ExecutionPlan>,
        buf: &mut Vec<u8>,
        _converter: &dyn PhysicalProtoConverterExtension,
    ) -> DfResult<()> {
        if let Some(scan) = node.downcast_ref::<ScanPartsExec>() {
            let partitions = scan.properties().partitioning.partition_count() as u64;
            buf.push(SCAN_PARTS);
            buf.extend_from_slice(&partitions.to_le_bytes());
            return Ok(());
        }
        if let Some(traverse) = node.downcast_ref::<TwoInputExec<Traverse>>() {
            let Traverse { relation, depth } = traverse.kernel();
            buf.push(TRAVERSE);
            buf.extend_from_slice(&depth.to_le_bytes());
            buf.extend_from_slice(relation.as_bytes());
            return Ok(());
        }
        if let Some(scan) = node.downcast_ref::<RowIndexScanExec>() {
            buf.push(ROW_INDEX_SCAN);
            return scan.encode(self, buf);
        }
        if let Some(scan) = node.downcast_ref::<DeltaSnapshotScanExec>() {
            buf.push(DELTA_SCAN);
            return encode_delta_scan(scan.snapshot(), &scan.schema(), buf);
        }
        Err(DataFusionError::NotImplemented(format!(
            "{} cannot be sent to a worker",
            node.name()
        )))
    }
}

/// The first byte of an encoded [`ScanPartsExec`].
const SCAN_PARTS: u8 = 1;
/// The first byte of an encoded [`RowIndexScanExec`].
const ROW_INDEX_SCAN: u8 = 2;
/// The first byte of an encoded traversal (`TwoInputExec<Traverse>`).
const TRAVERSE: u8 = 3;
/// The first byte of an encoded Delta table scan ([`DeltaSnapshotScanExec`]).
const DELTA_SCAN: u8 = 4;

/// A Delta scan's parameters: the length of their JSON (4 bytes, little-endian), the JSON, then
/// the scan's output schema as an Arrow IPC stream with no batch.
fn encode_delta_scan(
    snapshot: &DeltaSnapshot,
    schema: &datafusion::arrow::datatypes::Schema,
    buf: &mut Vec<u8>,
) -> DfResult<()> {
    let json = serde_json::to_vec(snapshot)
        .map_err(|e| DataFusionError::Internal(format!("a Delta scan's parameters: {e}")))?;
    buf.extend_from_slice(&(json.len() as u32).to_le_bytes());
    buf.extend_from_slice(&json);
    datafusion::arrow::ipc::writer::StreamWriter::try_new(buf, schema)?.finish()?;
    Ok(())
}

fn decode_delta_scan(
    buf: &[u8],
) -> DfResult<(DeltaSnapshot, datafusion::arrow::datatypes::SchemaRef)> {
    let cut = || DataFusionError::Internal("a Delta scan arrived cut".into());
    let (len, rest) = buf.split_first_chunk::<4>().ok_or_else(cut)?;
    let len = u32::from_le_bytes(*len) as usize;
    let (json, schema) = (rest.get(..len).ok_or_else(cut)?, &rest[len..]);
    let snapshot: DeltaSnapshot = serde_json::from_slice(json)
        .map_err(|e| DataFusionError::Internal(format!("a Delta scan's parameters: {e}")))?;
    let reader =
        datafusion::arrow::ipc::reader::StreamReader::try_new(std::io::Cursor::new(schema), None)?;
    Ok((snapshot, reader.schema()))
}

/// The prefix of the virtual column a Parquet scan reads `file_row_index()` into.
const ROW_INDEX_COLUMN: &str = "__datafusion_file_row_index";

/// `plan` with each file scan that reads `file_row_index()` (a virtual column) wrapped in a
/// [`RowIndexScanExec`], split scans' tasks too, so that the scan travels with its row index.
fn with_row_index_scans(plan: Arc<dyn ExecutionPlan>) -> DfResult<Arc<dyn ExecutionPlan>> {
    use datafusion::common::tree_node::Transformed;
    use datafusion_distributed::DistributedLeafExec;
    // A split scan's parts read what the whole reads.
    let wrap = |p: &Arc<dyn ExecutionPlan>| -> Arc<dyn ExecutionPlan> {
        Arc::new(RowIndexScanExec(Arc::clone(p)))
    };
    plan.transform_up(|node| {
        if let Some(leaf) = node.downcast_ref::<DistributedLeafExec>()
            && reads_virtual_columns(leaf.original().as_ref())
        {
            let split = DistributedLeafExec::try_new(
                wrap(leaf.original()),
                leaf.variants().iter().map(wrap),
            )?;
            return Ok(Transformed::yes(Arc::new(split) as Arc<dyn ExecutionPlan>));
        }
        if reads_virtual_columns(node.as_ref()) {
            return Ok(Transformed::yes(wrap(&node)));
        }
        Ok(Transformed::no(node))
    })
    .map(|t| t.data)
}

/// A Parquet scan that reads `file_row_index()` (the tie-break of funnels, sequences and entity
/// listings), as it travels to a worker. datafusion-proto 55 encodes the scan's projection
/// but not the virtual column the row index is read into; this node sends the projection with
/// `file_row_index()` itself in place of that column, and the worker's decoding pushes it into
/// the scan again, which adds the column back. In this process it is the scan.
#[derive(Debug)]
struct RowIndexScanExec(Arc<dyn ExecutionPlan>);

impl RowIndexScanExec {
    /// The scan, as `datafusion-proto` encodes it, with its projection's row-index column
    /// written as `file_row_index()`.
    fn encode(&self, codec: &dyn PhysicalExtensionCodec, buf: &mut Vec<u8>) -> DfResult<()> {
        use datafusion::common::tree_node::Transformed;
        use datafusion::physical_expr::expressions::Column;
        use datafusion_proto::physical_plan::AsExecutionPlan;
        use datafusion_proto::physical_plan::to_proto::serialize_physical_expr;
        use datafusion_proto::protobuf::{self, physical_plan_node::PhysicalPlanType};

        let not_a_scan =
            || DataFusionError::Internal("RowIndexScanExec holds no Parquet scan".into());
        let files = file_scan(self.0.as_ref()).ok_or_else(not_a_scan)?;
        let projection = files.file_source.projection().ok_or_else(not_a_scan)?;
        let row_index = datafusion::functions::core::file_row_index();
        let config = Arc::new(datafusion::config::ConfigOptions::default());
        let projections = projection
            .iter()
            .map(|p| {
                let expr = Arc::clone(&p.expr)
                    .transform_up(|e| {
                        Ok(match e.downcast_ref::<Column>() {
                            Some(c) if c.name().starts_with(ROW_INDEX_COLUMN) => Transformed::yes(
                                Arc::new(ScalarFunctionExpr::new(
                                    row_index.name(),
                                    Arc::clone(&row_index),
                                    vec![],
                                    Arc::new(datafusion::arrow::datatypes::Field::new(
                                        row_index.name(),
                                        datafusion::arrow::datatypes::DataType::Int64,
                                        true,
                                    )),
                                    Arc::clone(&config),
                                )) as Arc<dyn PhysicalExpr>,
                            ),
                            _ => Transformed::no(e),
                        })
                    })?
                    .data;
                Ok(protobuf::ProjectionExpr {
                    alias: p.alias.to_string(),
                    expr: Some(serialize_physical_expr(&expr, codec)?),
                })
            })
            .collect::<DfResult<Vec<_>>>()?;
        let mut node =
            protobuf::PhysicalPlanNode::try_from_physical_plan(Arc::clone(&self.0), codec)?;
        match &mut node.physical_plan_type {
            Some(PhysicalPlanType::ParquetScan(scan)) => {
                let base = scan.base_conf.as_mut().ok_or_else(not_a_scan)?;
                base.projection_exprs = Some(protobuf::ProjectionExprs { projections });
            }
            _ => return Err(not_a_scan()),
        }
        node.try_encode(buf)
    }
}

impl datafusion::physical_plan::DisplayAs for RowIndexScanExec {
    fn fmt_as(
        &self,
        t: datafusion::physical_plan::DisplayFormatType,
        f: &mut std::fmt::Formatter,
    ) -> std::fmt::Result {
        write!(f, "RowIndexScanExec: ")?;
        match self.0.as_ref().downcast_ref::<DataSourceExec>() {
            Some(scan) => scan.fmt_as(t, f),
            None => write!(f, "{}", self.0.name()),
        }
    }
}

impl ExecutionPlan for RowIndexScanExec {
    fn name(&self) -> &str {
        "RowIndexScanExec"
    }

    fn properties(&self) -> &Arc<datafusion::physical_plan::PlanProperties> {
        self.0.properties()
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![]
    }

    fn apply_expressions(
        &self,
        f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> DfResult<TreeNodeRecursion>,
    ) -> DfResult<TreeNodeRecursion> {
        self.0.apply_expressions(f)
    }

    fn replace_children(
        self: Arc<Self>,
        _children: Vec<Arc<dyn ExecutionPlan>>,
        _options: datafusion::physical_plan::ReplaceChildrenOptions,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        Ok(self)
    }

    fn with_new_children(
        self: Arc<Self>,
        _children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        Ok(self)
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> DfResult<datafusion::execution::SendableRecordBatchStream> {
        self.0.execute(partition, context)
    }
}

/// Connections to the workers: one channel per worker, opened within [`CONNECT_TIMEOUT`] and
/// kept alive with HTTP/2 pings ([`KEEPALIVE`]). A worker that cannot be reached is an
/// `io_error` naming it.
#[derive(Clone, Default)]
struct Channels(Arc<Mutex<HashMap<Url, BoxCloneSyncChannel>>>);

#[async_trait]
impl ChannelResolver for Channels {
    async fn get_worker_client_for_url(&self, url: &Url) -> DfResult<Box<dyn WorkerChannel>> {
        if let Some(channel) = self.0.lock().expect("channel map").get(url).cloned() {
            return Ok(Named::client(url, channel));
        }
        let unreachable = |e: &dyn std::fmt::Display| {
            DataFusionError::External(Box::new(Error::io(format!(
                "worker {url} cannot be reached: {e}"
            ))))
        };
        let channel = Endpoint::from_shared(url.to_string())
            .map_err(|e| unreachable(&e))?
            .connect_timeout(CONNECT_TIMEOUT)
            .http2_keep_alive_interval(KEEPALIVE)
            .keep_alive_timeout(KEEPALIVE)
            .keep_alive_while_idle(true)
            .tcp_keepalive(Some(KEEPALIVE))
            .connect()
            .await
            .map_err(|e| unreachable(&source_chain(&e)))?;
        let channel = BoxCloneSyncChannel::new(channel);
        self.0
            .lock()
            .expect("channel map")
            .insert(url.clone(), channel.clone());
        Ok(Named::client(url, channel))
    }
}

/// A worker's client whose failures to reach it (a connection reset, a stream cut: the worker
/// ended or dropped off the network mid-statement) are `io_error`s naming it. What the worker
/// itself answered (its DataFusion errors) passes unchanged.
struct Named {
    url: Url,
    inner: Box<dyn WorkerChannel>,
}

impl Named {
    fn client(url: &Url, channel: BoxCloneSyncChannel) -> Box<dyn WorkerChannel> {
        Box::new(Named {
            url: url.clone(),
            inner: create_worker_client(channel),
        })
    }
}

/// `e`, as an `io_error` naming the worker at `url` when it is a failure to talk to it: a gRPC
/// status that is not an error the worker sent (those arrive decoded).
fn name_worker(url: &Url, e: DataFusionError) -> DataFusionError {
    // Wherever it sits in the error's chain (a Flight decoder's error, an Arrow error).
    let transport = error_chain(&e).find_map(|e| e.downcast_ref::<tonic::Status>());
    match transport {
        Some(status) => DataFusionError::External(Box::new(Error::io(format!(
            "worker {url} was lost mid-statement: {}",
            source_chain(status)
        )))),
        None => e,
    }
}

#[async_trait]
impl WorkerChannel for Named {
    async fn coordinator_channel(
        &mut self,
        headers: tonic::codegen::http::HeaderMap,
        set_plan_request: datafusion_distributed::SetPlanRequest,
        c2w_stream: futures::stream::BoxStream<
            'static,
            datafusion_distributed::CoordinatorToWorkerMsg,
        >,
        metrics: datafusion::physical_plan::metrics::ExecutionPlanMetricsSet,
        task_ctx: &Arc<TaskContext>,
    ) -> DfResult<
        futures::stream::BoxStream<
            'static,
            DfResult<datafusion_distributed::WorkerToCoordinatorMsg>,
        >,
    > {
        use futures::StreamExt;
        let url = self.url.clone();
        let stream = self
            .inner
            .coordinator_channel(headers, set_plan_request, c2w_stream, metrics, task_ctx)
            .await
            .map_err(|e| name_worker(&url, e))?;
        Ok(stream
            .map(move |m| m.map_err(|e| name_worker(&url, e)))
            .boxed())
    }

    async fn execute_task(
        &mut self,
        headers: tonic::codegen::http::HeaderMap,
        request: datafusion_distributed::ExecuteTaskRequest,
        metrics: datafusion::physical_plan::metrics::ExecutionPlanMetricsSet,
        task_ctx: &Arc<TaskContext>,
    ) -> DfResult<
        Vec<
            futures::stream::BoxStream<
                'static,
                DfResult<datafusion::arrow::record_batch::RecordBatch>,
            >,
        >,
    > {
        use futures::StreamExt;
        let streams = self
            .inner
            .execute_task(headers, request, metrics, task_ctx)
            .await
            .map_err(|e| name_worker(&self.url, e))?;
        Ok(streams
            .into_iter()
            .map(|s| {
                let url = self.url.clone();
                s.map(move |b| b.map_err(|e| name_worker(&url, e))).boxed()
            })
            .collect())
    }

    async fn get_worker_info(
        &mut self,
        request: datafusion_distributed::GetWorkerInfoRequest,
    ) -> DfResult<datafusion_distributed::GetWorkerInfoResponse> {
        self.inner
            .get_worker_info(request)
            .await
            .map_err(|e| name_worker(&self.url, e))
    }
}

/// `e`, then its source, its source's source, and so on.
fn error_chain<'a>(
    e: &'a (dyn std::error::Error + 'static),
) -> impl Iterator<Item = &'a (dyn std::error::Error + 'static)> {
    std::iter::successors(Some(e), |e| e.source())
}

/// An error and its sources, one line (tonic's transport error says only "transport error").
fn source_chain(e: &(dyn std::error::Error + 'static)) -> String {
    error_chain(e)
        .map(|e| e.to_string())
        .collect::<Vec<_>>()
        .join(": ")
}

/// A worker: sessions with every signalql function and the signalql codec, that refuse a
/// coordinator of another version, and read S3 with `storage` ([`WorkerStores`]).
pub fn worker(storage: StorageOptions) -> Result<Worker> {
    let runtime = RuntimeEnvBuilder::new()
        .with_object_store_registry(Arc::new(WorkerStores {
            storage,
            known: DefaultObjectStoreRegistry::new(),
            opened: Mutex::default(),
        }))
        .build_arc()
        .map_err(|e| Error::io(format!("worker: {e}")))?;
    Ok(Worker::from_session_builder(worker_session)
        .with_runtime_env(runtime)
        .with_version(VERSION))
}

/// A worker's object stores: DataFusion's (local files), and each S3 bucket a plan names,
/// opened on first use as the coordinator opens it: from the worker's `AWS_*` environment and
/// `--s3-endpoint`. Every worker must reach the dataset where the coordinator does.
#[derive(Debug)]
struct WorkerStores {
    storage: StorageOptions,
    known: DefaultObjectStoreRegistry,
    /// The S3 roots opened: each owns the runtime its store's requests run on.
    opened: Mutex<Vec<Root>>,
}

impl ObjectStoreRegistry for WorkerStores {
    fn register_store(
        &self,
        url: &Url,
        store: Arc<dyn object_store::ObjectStore>,
    ) -> Option<Arc<dyn object_store::ObjectStore>> {
        self.known.register_store(url, store)
    }

    fn deregister_store(&self, url: &Url) -> DfResult<Arc<dyn object_store::ObjectStore>> {
        self.known.deregister_store(url)
    }

    fn get_store(&self, url: &Url) -> DfResult<Arc<dyn object_store::ObjectStore>> {
        let known = self.known.get_store(url);
        let bucket = match url.host_str() {
            Some(bucket) if known.is_err() && url.scheme() == "s3" => bucket,
            _ => return known,
        };
        let root = Root::parse(&format!("s3://{bucket}"), &self.storage).map_err(|e| {
            DataFusionError::External(Box::new(Error::io(format!("worker: s3://{bucket}: {e}"))))
        })?;
        let store = root
            .object_store()
            .ok_or_else(|| DataFusionError::Internal(format!("s3://{bucket} is not on S3")))?;
        self.known.register_store(url, Arc::clone(&store));
        self.opened.lock().expect("opened roots").push(root);
        Ok(store)
    }
}

async fn worker_session(mut ctx: WorkerQueryContext) -> DfResult<SessionState> {
    let theirs = ctx
        .headers
        .get(VERSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("unknown");
    if theirs != VERSION {
        return Err(DataFusionError::External(Box::new(Error::io(format!(
            "this worker runs signalql {VERSION} and the coordinator signalql {theirs}: \
             coordinator and workers must run the same version"
        )))));
    }
    failpoint_hold_task().await;
    // Appended to DataFusion's own functions (`with_scalar_functions` would replace them).
    ctx.builder
        .scalar_functions()
        .get_or_insert_with(Vec::new)
        .extend(signalql_udfs::all_udfs());
    ctx.builder
        .aggregate_functions()
        .get_or_insert_with(Vec::new)
        .extend(signalql_udfs::all_udafs());
    Ok(ctx
        .builder
        .with_distributed_user_codec(Codec)
        .with_distributed_channel_resolver(Channels::default())
        .build())
}

/// A test hook ([`signalql_catalog::failpoint`]): with `SIGNALQL_FAILPOINT=hold_task`, a
/// worker says `failpoint: holding a task` on stderr when a task arrives and holds it for 5
/// seconds, so that a test can kill it mid-statement.
async fn failpoint_hold_task() {
    if signalql_catalog::failpoint::is("hold_task") {
        eprintln!("failpoint: holding a task");
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
}

/// Serve a [`worker`] reading S3 with `storage` on `listener` until `shutdown` completes.
pub async fn serve(
    listener: tokio::net::TcpListener,
    storage: StorageOptions,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<()> {
    let addr = listener
        .local_addr()
        .map_err(|e| Error::io(format!("worker: {e}")))?;
    Server::builder()
        .add_service(worker(storage)?.into_worker_server())
        .serve_with_incoming_shutdown(
            tonic::transport::server::TcpIncoming::from(listener),
            shutdown,
        )
        .await
        .map_err(|e| Error::io(format!("worker on {addr}: {}", source_chain(&e))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::codegen::http::HeaderValue;

    fn request(version: &'static str) -> WorkerQueryContext {
        let mut ctx = WorkerQueryContext {
            builder: SessionStateBuilder::new().with_default_features(),
            ..Default::default()
        };
        ctx.headers
            .insert(VERSION_HEADER, HeaderValue::from_static(version));
        ctx
    }

    #[tokio::test]
    async fn a_coordinator_of_another_version_is_refused() {
        let err = worker_session(request("0.0.0-other")).await.unwrap_err();
        assert!(err.to_string().contains("0.0.0-other"), "{err}");
        assert!(err.to_string().contains(VERSION), "{err}");
        let state = worker_session(request(VERSION)).await.unwrap();
        // signalql's functions beside DataFusion's own.
        for f in signalql_udfs::all_udfs() {
            assert!(
                state.scalar_functions().contains_key(f.name()),
                "{}",
                f.name()
            );
        }
        for f in signalql_udfs::all_udafs() {
            assert!(
                state.aggregate_functions().contains_key(f.name()),
                "{}",
                f.name()
            );
        }
        assert!(state.scalar_functions().contains_key("lower"));
    }

    #[test]
    fn worker_addresses() {
        let c = Cluster::parse(&["127.0.0.1:7979".into(), " http://w2:80 ".into()]).unwrap();
        let urls: Vec<String> = c.workers.iter().map(|u| u.to_string()).collect();
        assert_eq!(urls, ["http://127.0.0.1:7979/", "http://w2/"]);
        for bad in ["w1", "https://w1:1", "http://:1", ""] {
            assert!(Cluster::parse(&[bad.to_string()]).is_err(), "{bad}");
        }
    }
}
