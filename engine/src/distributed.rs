//! Running a statement on a cluster of workers, through datafusion-distributed (docs/cluster.md).
//!
//! The coordinator is the engine's own session with the distributed planner on top of the
//! engine's planner: it plans every statement as it does locally, then cuts the physical plan
//! into stages at its network boundaries and sends the stages that read files to the workers.
//! A worker ([`worker`]) is a gRPC service whose sessions know every signalql function and
//! the one signalql operator that travels (the scan of a split table, [`ScanPartsExec`]).
//!
//! A statement whose plan holds something that does not travel runs whole on the coordinator
//! ([`Gate`]): the engine's two-input operators (the bundle packer, the traversal), the group
//! cap, and the expressions of functions that hold per-query parameters (datafusion-distributed
//! 4 ships a function by its name only, so the worker's copy would lose them).

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use datafusion::catalog::Session;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::{DataFusionError, HashMap, Result as DfResult};
use datafusion::execution::context::QueryPlanner;
use datafusion::execution::{SessionState, SessionStateBuilder, TaskContext};
use datafusion::logical_expr::LogicalPlan;
use datafusion::physical_expr::ScalarFunctionExpr;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::PhysicalExpr;
use datafusion_distributed::grpc::{BoxCloneSyncChannel, create_worker_client};
use datafusion_distributed::{
    ChannelResolver, DistributedExt, SessionStateBuilderExt, Worker, WorkerChannel,
    WorkerQueryContext, WorkerResolver,
};
use datafusion_proto::physical_plan::{PhysicalExtensionCodec, PhysicalProtoConverterExtension};
use signalql_catalog::parts::ScanPartsExec;
use tonic::transport::{Endpoint, Server};
use url::Url;

use crate::error::{Error, Result};

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

/// The functions whose instances hold per-query parameters (a file list, a column name, the
/// text index's hits): they cannot be shipped by name, so the nodes that evaluate them stay
/// on the coordinator.
const PARAMETERISED: [&str; 3] = [
    signalql_udfs::scalar::file_rank::NAME,
    signalql_udfs::scalar::text_time::NAME,
    "signalql_index_weights",
];

/// The engine's operators that read every partition of their input at once and have no
/// codec.
const SINGLE_TASK_OPERATORS: [&str; 3] = ["BundlePack", "Traverse", "GroupCapExec"];

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

/// The coordinator's query planner: a statement whose plan has a node that cannot travel
/// ([`stays_on_coordinator`]) runs whole in this process, as it would without workers; any
/// other is planned again by the distributed planner (over the engine's).
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
        let local = self
            .local
            .create_physical_plan(logical_plan, session)
            .await?;
        let stays = local.exists(|node| Ok(stays_on_coordinator(node.as_ref())))?;
        if stays {
            return Ok(local);
        }
        self.distributed
            .create_physical_plan(logical_plan, session)
            .await
    }
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
    if SINGLE_TASK_OPERATORS.contains(&plan.name()) {
        return true;
    }
    let mut found = false;
    let _ = plan.apply_expressions(&mut |e: &Arc<dyn PhysicalExpr>| {
        e.apply(|node| {
            if let Some(f) = node.downcast_ref::<ScalarFunctionExpr>()
                && PARAMETERISED.contains(&f.name())
            {
                found = true;
                return Ok(TreeNodeRecursion::Stop);
            }
            Ok(TreeNodeRecursion::Continue)
        })
    });
    found
}

/// The codec of the one signalql operator that travels: [`ScanPartsExec`], whose parts
/// arrive as its inputs; its own parameter is its partition count.
#[derive(Debug)]
pub struct Codec;

impl PhysicalExtensionCodec for Codec {
    fn try_decode(
        &self,
        buf: &[u8],
        inputs: &[Arc<dyn ExecutionPlan>],
        _ctx: &TaskContext,
        _converter: &dyn PhysicalProtoConverterExtension,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let partitions: [u8; 8] = buf.try_into().map_err(|_| {
            DataFusionError::Internal(format!(
                "a ScanPartsExec arrived as {} bytes, not 8",
                buf.len()
            ))
        })?;
        Ok(Arc::new(ScanPartsExec::try_new(
            inputs.to_vec(),
            u64::from_le_bytes(partitions) as usize,
        )?))
    }

    fn try_encode(
        &self,
        node: Arc<dyn ExecutionPlan>,
        buf: &mut Vec<u8>,
        _converter: &dyn PhysicalProtoConverterExtension,
    ) -> DfResult<()> {
        match node.downcast_ref::<ScanPartsExec>() {
            Some(scan) => {
                let partitions = scan.properties().partitioning.partition_count() as u64;
                buf.extend_from_slice(&partitions.to_le_bytes());
                Ok(())
            }
            None => Err(DataFusionError::NotImplemented(format!(
                "{} cannot be sent to a worker",
                node.name()
            ))),
        }
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
            return Ok(create_worker_client(channel));
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
        Ok(create_worker_client(channel))
    }
}

/// An error and its sources, one line (tonic's transport error says only "transport error").
fn source_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// A worker: sessions with every signalql function and the signalql codec, that refuse a
/// coordinator of another version.
pub fn worker() -> Worker {
    Worker::from_session_builder(worker_session).with_version(VERSION)
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

/// Serve a [`worker`] on `listener` until `shutdown` completes.
pub async fn serve(
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<()> {
    let addr = listener
        .local_addr()
        .map_err(|e| Error::io(format!("worker: {e}")))?;
    Server::builder()
        .add_service(worker().into_worker_server())
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
