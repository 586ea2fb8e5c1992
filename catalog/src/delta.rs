//! Delta Lake tables: a table folder holding `_delta_log/` (or `[tables.T] format = "delta"`)
//! is read as its current snapshot through deltalake-core (docs/mapping.md). Only the
//! snapshot's files are read: files a later commit removed stay on disk and are not seen.

use std::sync::{Arc, Once};

use datafusion::catalog::TableProvider;
use datafusion::prelude::SessionContext;
use deltalake_core::logstore::{
    LogStore, LogStoreFactory, ObjectStoreRef, StorageConfig, default_logstore, logstore_factories,
};
use deltalake_core::{DeltaResult, DeltaTableBuilder, ensure_table_uri};
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
    let builder = match store {
        None => {
            let url = ensure_table_uri(&location).map_err(|e| unreadable(e.to_string()))?;
            DeltaTableBuilder::from_url(url).map_err(|e| unreadable(e.to_string()))?
        }
        Some(store) => {
            register_s3_log_store();
            let url = Url::parse(&location).map_err(|e| unreadable(e.to_string()))?;
            DeltaTableBuilder::from_url(url.clone())
                .map_err(|e| unreadable(e.to_string()))?
                .with_storage_backend(store, url)
        }
    };
    let delta = builder
        .load()
        .await
        .map_err(|e| unreadable(e.to_string()))?;
    root.register(ctx)?;
    let state = ctx.state();
    delta
        .update_datafusion_session(&state)
        .map_err(|e| unreadable(e.to_string()))?;
    let files: Vec<String> = delta
        .get_file_uris()
        .map_err(|e| unreadable(e.to_string()))?
        .collect();
    let provider = delta
        .table_provider()
        .with_session(Arc::new(state))
        .await
        .map_err(|e| unreadable(e.to_string()))?;
    Ok((provider, files))
}
