//! The DataFusion session a query runs in: the runtime (memory pool, caches), the dataset's
//! `[datafusion]` settings, signalql's functions, and the query planner that knows the
//! engine's operators (the bundle packer, the traversal and the group cap).

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::common::Result as DfResult;
use datafusion::execution::SessionStateBuilder;
use datafusion::execution::cache::cache_manager::CacheManagerConfig;
use datafusion::execution::context::QueryPlanner;
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::logical_expr::LogicalPlan;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_planner::{DefaultPhysicalPlanner, PhysicalPlanner};
use datafusion::prelude::{SessionConfig, SessionContext};
use signalql_catalog::Dataset;

use crate::context::exec::BundlePack;
use crate::error::{Error, Result};
use crate::limits::Limits;
use crate::lower::traverse::Traverse;
use crate::operator::TwoInputPlanner;

/// The engine's query planner: DataFusion's, with a planner for each of the engine's operators.
#[derive(Debug, Default)]
pub struct EngineQueryPlanner;

#[async_trait]
impl QueryPlanner for EngineQueryPlanner {
    async fn create_physical_plan(
        &self,
        logical_plan: &LogicalPlan,
        session: &dyn datafusion::catalog::Session,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        DefaultPhysicalPlanner::with_extension_planners(vec![
            Arc::new(TwoInputPlanner::<BundlePack>::default()),
            Arc::new(TwoInputPlanner::<Traverse>::default()),
            Arc::new(crate::group_cap::GroupCapPlanner),
        ])
        .create_physical_plan(logical_plan, session)
        .await
    }
}

/// The share of `query_memory_bytes` given to DataFusion's memory pool, less
/// [`PROCESS_BYTES`]. The rest is headroom for what the pool does not account: the process
/// itself (about 80 MiB of a debug build before a query starts), decoded pages and batches in
/// flight, allocator slack. So the process's peak RSS stays within 1.25 × the limit
/// (DESIGN.md §4; docs/semantics.md, "Memory", has the measurements).
pub const POOL_SHARE: f64 = 0.8;

/// The part of the process no query can give back, taken from the pool before it is shared.
pub const PROCESS_BYTES: u64 = 80 << 20;

/// DataFusion's pool for a `query_memory_bytes` limit: 80 % of it less 80 MiB, and never
/// less than half of it.
pub fn pool_bytes(limit: u64) -> usize {
    let shared = (limit as f64 * POOL_SHARE) as u64;
    shared.saturating_sub(PROCESS_BYTES).max(limit / 2) as usize
}

/// DataFusion's pool for a memory limit (a greedy pool that names its largest consumers when
/// it is exhausted, as `RuntimeEnvBuilder::with_memory_limit` makes), wrapped in a recorder of
/// its peak reservation (EXPLAIN ANALYZE's and the traces' `peak_memory_bytes`).
fn recording_pool(bytes: usize) -> Arc<dyn datafusion::execution::memory_pool::MemoryPool> {
    use datafusion::execution::memory_pool::{
        GreedyMemoryPool, PeakRecordingPool, TrackConsumersPool,
    };
    let tracked = TrackConsumersPool::new(
        GreedyMemoryPool::new(bytes),
        std::num::NonZeroUsize::new(5).expect("5 is not zero"),
    );
    Arc::new(PeakRecordingPool::new(Arc::new(tracked)))
}

/// A new session for `dataset`: the query memory pool of `limits`, the dataset's
/// `[datafusion]` settings over DataFusion's defaults, signalql's functions and planner.
///
/// With workers (`workers`, else `[cluster] workers`), the distributed planner runs over the
/// engine's and sends the stages that read files to them (engine/src/distributed.rs).
pub fn for_dataset(
    dataset: &Dataset,
    limits: &Limits,
    workers: &[String],
    bytes_per_task: Option<u64>,
) -> Result<SessionContext> {
    // No list-files cache: DataFusion 55 keeps a table folder's listing for the life of
    // the runtime by default, so a long-lived engine (MCP server, WATCH) would never see
    // a file ingested after its first scan. The dataset lists each table per query anyway.
    let runtime = RuntimeEnvBuilder::new()
        .with_memory_pool(recording_pool(pool_bytes(limits.query_memory_bytes)))
        .with_cache_manager(CacheManagerConfig::default().with_list_files_cache_limit(0))
        .build_arc()?;
    // DataFusion's defaults, then the dataset's `[datafusion]` settings. (Parquet filter
    // pushdown was measured on 10M generated rows and did not help: top paths 155 ms on
    // vs 139 ms off, the other example workloads equal; see benches/README.md.)
    let mut config = SessionConfig::new().with_information_schema(false);
    // A folder table's scan is narrowed to the row groups its window keeps (catalog::folder),
    // often a few MB of one file; DataFusion splits a scan over the cores only above
    // `repartition_file_min_size`. DataFusion 55's session default is 1 MiB too (its
    // FileGroupPartitioner's own default is 10 MB); it is set here so that the engine's
    // default stays 1 MiB whatever DataFusion's becomes.
    config.options_mut().optimizer.repartition_file_min_size = 1 << 20;
    for (key, value) in &dataset.config().datafusion {
        config.options_mut().set(key, value).map_err(|e| {
            Error::io(format!(
                "{}: [datafusion] {key} = {value:?}: {e}",
                dataset.root().display_of("signalql.toml")
            ))
        })?;
    }
    let cluster = &dataset.config().cluster;
    let workers = if workers.is_empty() {
        &cluster.workers[..]
    } else {
        workers
    };
    let distributed = !workers.is_empty();
    if distributed {
        // A row-group slice is a file extension, which datafusion-proto does not carry.
        config = config.with_extension(Arc::new(signalql_catalog::folder::WholeRowGroups));
    }
    let defaults = datafusion::physical_optimizer::optimizer::PhysicalOptimizer::new().rules;
    let mut builder = SessionStateBuilder::new()
        .with_config(config)
        .with_runtime_env(runtime)
        .with_default_features()
        .with_query_planner(Arc::new(EngineQueryPlanner))
        .with_physical_optimizer_rules(with_engine_rules(defaults, distributed));
    // After the engine's planner and settings: the distributed planner wraps them.
    if distributed {
        let cluster_of = crate::distributed::Cluster::parse(workers)?;
        builder =
            crate::distributed::coordinator(builder, &cluster_of, Arc::new(EngineQueryPlanner))?;
        if let Some(bytes) = bytes_per_task.or(cluster.bytes_per_task) {
            builder = crate::distributed::with_bytes_per_task(builder, bytes as usize)?;
        }
    }
    let state = builder.build();
    let ctx = SessionContext::new_with_state(state);
    signalql_udfs::register_all(&ctx);
    Ok(ctx)
}

/// The application's session `ctx` (its catalog, runtime and settings) planned with the
/// engine's operators too; signalql's functions are registered into `ctx` itself, so the
/// application's own SQL can call them.
pub fn from_application(ctx: &SessionContext) -> SessionContext {
    signalql_udfs::register_all(ctx);
    let existing = ctx.state();
    let rules = with_engine_rules(existing.physical_optimizers().to_vec(), false);
    let state = SessionStateBuilder::new_from_existing(existing)
        .with_query_planner(Arc::new(EngineQueryPlanner))
        .with_physical_optimizer_rules(rules)
        .build();
    SessionContext::new_with_state(state)
}

/// `rules`, then the engine's own physical rules (the one-phase funnel aggregate, a whole
/// sort under a limit for a large fetch, file expressions inside the scans, each conjunct of
/// a scan's predicate once, string-view equality in filters). A `distributed` session
/// has no string-view equality: its expression has no codec, so a filter using it could not
/// be sent to a worker (the filter it replaces gives the same rows).
fn with_engine_rules(
    mut rules: Vec<Arc<dyn PhysicalOptimizerRule + Send + Sync>>,
    distributed: bool,
) -> Vec<Arc<dyn PhysicalOptimizerRule + Send + Sync>> {
    rules.push(Arc::new(crate::funnel_phase::RULE));
    rules.push(Arc::new(crate::large_fetch::RULE));
    rules.push(Arc::new(crate::file_exprs::RULE));
    rules.push(Arc::new(crate::scan_predicate::RULE));
    if !distributed {
        rules.push(Arc::new(crate::view_eq::ViewEquality));
    }
    rules
}
