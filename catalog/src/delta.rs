//! Delta Lake tables: a table folder holding `_delta_log/` (or `[tables.T] format = "delta"`)
//! is read as its current snapshot through deltalake-core (docs/mapping.md). Only the
//! snapshot's files are read: files a later commit removed stay on disk and are not seen.

use std::sync::{Arc, Once};

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::common::{DataFusionError, Result as DfResult};
use datafusion::datasource::TableType;
use datafusion::execution::object_store::ObjectStoreUrl;
use datafusion::execution::{
    SendableRecordBatchStream, SessionState, SessionStateBuilder, TaskContext,
};
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown};
use datafusion::physical_expr::EquivalenceProperties;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    ChildrenPropertiesMode, DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning,
    PlanProperties, ReplaceChildrenOptions,
};
use datafusion::prelude::SessionContext;
use deltalake_core::logstore::{
    LogStore, LogStoreFactory, ObjectStoreRef, StorageConfig, default_logstore, logstore_factories,
};
use deltalake_core::{DeltaResult, DeltaTableBuilder, ensure_table_uri};
use futures::TryStreamExt;
use serde::{Deserialize, Serialize};
use url::Url;

use crate::error::DatasetError;
use crate::storage::Root;

/// The folder `rel` of `root` holds a Delta table (its `_delta_log/` has a commit or a
/// checkpoint).
pub fn is_delta(root: &Root, rel: &str) -> Result<bool, DatasetError> {
    Ok(root
        .list_names(&format!("{rel}/_delta_log"))?
        .iter()
        .any(|(name, _)| name.ends_with(".json") || name.ends_with(".parquet")))
}

/// deltalake-core reads a log on S3 only through the deltalake-aws crate's log store, which
/// brings its own S3 client and locking for writers. signalql only reads, through the dataset's
/// own S3 client: the default log store over that client is all it needs.
struct ReadOnlyLogStore;

impl LogStoreFactory for ReadOnlyLogStore {
    fn with_options(
        &self,
        prefixed_store: ObjectStoreRef,
        root_store: ObjectStoreRef,
        location: &Url,
        options: &StorageConfig,
    ) -> DeltaResult<Arc<dyn LogStore>> {
        Ok(default_logstore(
            prefixed_store,
            root_store,
            location,
            options,
        ))
    }
}

fn register_s3_log_store() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        if let Ok(key) = Url::parse("s3://") {
            logstore_factories()
                .entry(key)
                .or_insert_with(|| Arc::new(ReadOnlyLogStore));
        }
    });
}

/// The current snapshot of the Delta table in `rel`: its provider and the URIs of its files.
pub async fn open(
    ctx: &SessionContext,
    root: &Root,
    table: &str,
    rel: &str,
) -> Result<(Arc<dyn TableProvider>, Vec<String>), DatasetError> {
    let unreadable = |message: String| DatasetError::Unreadable {
        table: table.to_string(),
        message: format!("{} (a Delta table): {message}", root.display_of(rel)),
    };
    let (location, store) = root.folder_location(rel)?;
    let url = match store {
        None => ensure_table_uri(&location).map_err(|e| e.to_string()),
        Some(_) => Url::parse(&location).map_err(|e| e.to_string()),
    }
    .map_err(unreadable)?;
    let delta = table_builder(&url, store)
        .map_err(|e| unreadable(e.to_string()))?
        .load()
        .await
        .map_err(|e| unreadable(e.to_string()))?;
    root.register(ctx)?;
    let files: Vec<String> = delta
        .get_file_uris()
        .map_err(|e| unreadable(e.to_string()))?
        .collect();
    let provider = provider_in(&delta, ctx.state()).await.map_err(unreadable)?;
    let provider: Arc<dyn TableProvider> = match delta.version() {
        Some(version) if travels(&delta) => Arc::new(DeltaSource {
            inner: provider,
            url: url.to_string(),
            version,
        }),
        _ => provider,
    };
    Ok((provider, files))
}

/// The builder of the Delta table at `url`: read through `store` (an S3 bucket's, with the
/// read-only log store) when given, else through deltalake's own store for the URL.
fn table_builder(url: &Url, store: Option<ObjectStoreRef>) -> DeltaResult<DeltaTableBuilder> {
    let builder = DeltaTableBuilder::from_url(url.clone())?;
    Ok(match store {
        None => builder,
        Some(store) => {
            register_s3_log_store();
            builder.with_storage_backend(store, url.clone())
        }
    })
}

/// `delta`'s provider in the session `state`, whose runtime then knows the table's store;
/// the error as deltalake or DataFusion words it.
async fn provider_in(
    delta: &deltalake_core::DeltaTable,
    state: SessionState,
) -> Result<Arc<dyn TableProvider>, String> {
    delta
        .update_datafusion_session(&state)
        .map_err(|e| e.to_string())?;
    delta
        .table_provider()
        .with_session(Arc::new(state))
        .await
        .map_err(|e| e.to_string())
}

/// Whether a snapshot's scan can be re-created in another process (a cluster's worker) by
/// [`DeltaSnapshotScanExec`]: not when a file has a deletion vector, whose masks deltalake's
/// scan keeps per file in the process that planned it.
fn travels(delta: &deltalake_core::DeltaTable) -> bool {
    delta.snapshot().is_ok_and(|s| {
        !s.log_data()
            .iter()
            .any(|f| f.deletion_vector_descriptor().is_some())
    })
}

/// What re-creates a Delta table's scan in another process: the table, its version, and the
/// scan's columns.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeltaSnapshot {
    /// The table's folder as a URL (`file:///…/` or `s3://bucket/…/`).
    pub url: String,
    /// The version the coordinator read.
    pub version: u64,
    /// The columns of the table's schema the scan reads (`None`: all).
    pub projection: Option<Vec<usize>>,
}

/// A Delta table's provider whose scans are [`DeltaSnapshotScanExec`]s, so that they travel
/// to a cluster's workers. Its filters are pushed into deltalake's scan to skip files, and
/// applied again above it (inexact), so a worker's scan needs only the table, its version and
/// the columns.
#[derive(Debug)]
struct DeltaSource {
    inner: Arc<dyn TableProvider>,
    url: String,
    version: u64,
}

#[async_trait::async_trait]
impl TableProvider for DeltaSource {
    fn schema(&self) -> SchemaRef {
        self.inner.schema()
    }

    fn table_type(&self) -> TableType {
        self.inner.table_type()
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> DfResult<Vec<TableProviderFilterPushDown>> {
        Ok(vec![TableProviderFilterPushDown::Inexact; filters.len()])
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        let scan = self.inner.scan(state, projection, filters, limit).await?;
        if scan.name() != "DeltaScanExec" || scan.children().len() != 1 {
            return Ok(scan);
        }
        let snapshot = DeltaSnapshot {
            url: self.url.clone(),
            version: self.version,
            projection: projection.cloned(),
        };
        let input = Arc::clone(scan.children()[0]);
        let schema = scan.schema();
        Ok(Arc::new(DeltaSnapshotScanExec::new(
            snapshot,
            schema,
            input,
            Arc::new(futures::lock::Mutex::new(Some(scan))),
        )))
    }
}

/// A Delta table's scan (deltalake's `DeltaScanExec`) over its input, the Parquet scan of the
/// table's files, which it shows as its child. The coordinator holds deltalake's scan as it
/// planned it; a worker, which receives the input as the task's share of the files, re-opens
/// the table at the same version when the scan starts and reads the same columns, then runs
/// deltalake's scan over that input.
#[derive(Debug)]
pub struct DeltaSnapshotScanExec {
    snapshot: DeltaSnapshot,
    schema: SchemaRef,
    input: Arc<dyn ExecutionPlan>,
    /// deltalake's scan, as planned (its own input is replaced by `input` when it runs);
    /// `None` until a worker has re-opened the table.
    planned: Arc<futures::lock::Mutex<Option<Arc<dyn ExecutionPlan>>>>,
    properties: Arc<PlanProperties>,
}

impl DeltaSnapshotScanExec {
    fn new(
        snapshot: DeltaSnapshot,
        schema: SchemaRef,
        input: Arc<dyn ExecutionPlan>,
        planned: Arc<futures::lock::Mutex<Option<Arc<dyn ExecutionPlan>>>>,
    ) -> Self {
        let properties = PlanProperties::new(
            EquivalenceProperties::new(Arc::clone(&schema)),
            Partitioning::UnknownPartitioning(input.properties().partitioning.partition_count()),
            input.properties().emission_type,
            input.properties().boundedness,
        );
        DeltaSnapshotScanExec {
            snapshot,
            schema,
            input,
            planned,
            properties: Arc::new(properties),
        }
    }

    /// The scan as a worker receives it: `snapshot` over `input`, giving `schema`; the table
    /// is opened when the scan starts.
    pub fn remote(
        snapshot: DeltaSnapshot,
        schema: SchemaRef,
        input: Arc<dyn ExecutionPlan>,
    ) -> Self {
        Self::new(snapshot, schema, input, Arc::default())
    }

    pub fn snapshot(&self) -> &DeltaSnapshot {
        &self.snapshot
    }
}

/// deltalake's scan of `snapshot`, opened in this process with `task`'s session and object
/// stores (an S3 bucket's from the worker's own registry).
async fn reopen(snapshot: &DeltaSnapshot, task: &TaskContext) -> DfResult<Arc<dyn ExecutionPlan>> {
    let failed = |e: &dyn std::fmt::Display| {
        DataFusionError::Execution(format!(
            "cannot open the Delta table {} at version {}: {e}",
            snapshot.url, snapshot.version
        ))
    };
    let url = Url::parse(&snapshot.url).map_err(|e| failed(&e))?;
    let store = match url.scheme() {
        "s3" => {
            let bucket = format!("s3://{}", url.host_str().unwrap_or_default());
            Some(
                task.runtime_env()
                    .object_store(ObjectStoreUrl::parse(bucket)?)?,
            )
        }
        _ => None,
    };
    let delta = table_builder(&url, store)
        .map_err(|e| failed(&e))?
        .with_version(snapshot.version)
        .load()
        .await
        .map_err(|e| failed(&e))?;
    let state = SessionStateBuilder::new()
        .with_config(task.session_config().clone())
        .with_runtime_env(task.runtime_env())
        .with_default_features()
        .build();
    let provider = provider_in(&delta, state.clone())
        .await
        .map_err(|e| failed(&e))?;
    provider
        .scan(&state, snapshot.projection.as_ref(), &[], None)
        .await
}

fn recompute() -> ReplaceChildrenOptions {
    ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute)
}

impl DisplayAs for DeltaSnapshotScanExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(
            f,
            "DeltaSnapshotScanExec: version={}",
            self.snapshot.version
        )
    }
}

impl ExecutionPlan for DeltaSnapshotScanExec {
    fn name(&self) -> &'static str {
        "DeltaSnapshotScanExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.properties
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
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
        if children.len() != 1 {
            return Err(DataFusionError::Internal(
                "DeltaSnapshotScanExec has one input".into(),
            ));
        }
        Ok(Arc::new(Self::new(
            self.snapshot.clone(),
            Arc::clone(&self.schema),
            children.remove(0),
            Arc::clone(&self.planned),
        )))
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        self.replace_children(children, recompute())
    }

    fn with_new_children_and_same_properties(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> DfResult<Arc<dyn ExecutionPlan>> {
        self.replace_children(children, recompute())
    }

    fn execute(
        &self,
        partition: usize,
        task: Arc<TaskContext>,
    ) -> DfResult<SendableRecordBatchStream> {
        let snapshot = self.snapshot.clone();
        let input = Arc::clone(&self.input);
        let planned = Arc::clone(&self.planned);
        let opened = async move {
            let scan = {
                let mut planned = planned.lock().await;
                match planned.as_ref() {
                    Some(scan) => Arc::clone(scan),
                    None => {
                        let scan = reopen(&snapshot, &task).await?;
                        *planned = Some(Arc::clone(&scan));
                        scan
                    }
                }
            };
            // The input must be what deltalake's scan of these columns reads, as planned.
            let expected = scan.children().first().map(|c| c.schema());
            if expected.as_ref() != Some(&input.schema()) {
                return Err(DataFusionError::Execution(format!(
                    "the Delta table {} at version {} reads other columns here than where the \
                     statement was planned",
                    snapshot.url, snapshot.version
                )));
            }
            scan.replace_children(vec![input], recompute())?
                .execute(partition, task)
        };
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            Arc::clone(&self.schema),
            futures::stream::once(opened).try_flatten(),
        )))
    }
}
