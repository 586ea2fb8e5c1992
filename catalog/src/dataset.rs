//! A dataset root: its `signalql.toml`, which tables it has, and their registration as
//! DataFusion listing tables over the Parquet files under `ROOT/<table>/`.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex};

use chrono::{DateTime, NaiveDate, Utc};
use datafusion::arrow::datatypes::{DataType, Schema, SchemaRef};
use datafusion::catalog::TableProvider;
use datafusion::datasource::file_format::parquet::ParquetFormat;
use datafusion::datasource::listing::{
    ListingOptions, ListingTable, ListingTableConfig, ListingTableUrl,
};
use datafusion::execution::SessionState;
use datafusion::prelude::SessionContext;
use futures::FutureExt;
use serde::Deserialize;

pub use crate::columns::{PropertiesEncoding, check_schema};
use crate::commit::Snapshot;
pub use crate::error::DatasetError;
pub use crate::limits::LimitsConfig;
use crate::mapping::{TableConfig, TableView};
use crate::storage::{ListedFile, Root, RootError, StorageOptions};
use signalql_udfs::scalar::token_estimate::Estimator;

/// Settings read from `ROOT/signalql.toml` (every key optional).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DatasetConfig {
    /// The default evaluation time `T` for queries without `AS OF` (RFC 3339).
    pub now: Option<String>,
    /// Units of result columns, keyed by a field path (`properties.amount`) or by a column
    /// name (`count_distinct(user_id)`).
    #[serde(default)]
    pub units: BTreeMap<String, String>,
    /// Free-form description shown by DESCRIBE.
    pub description: Option<String>,
    /// DataFusion settings for queries over this dataset, by their full key
    /// (`"datafusion.execution.parquet.pushdown_filters" = "false"`).
    #[serde(default)]
    pub datafusion: BTreeMap<String, String>,
    /// Read a table whose folder holds files that cannot be read (empty, a dangling link,
    /// corrupt) without them, listing them in the answer, instead of failing.
    #[serde(default)]
    pub skip_invalid_files: bool,
    /// The engine's limits for this dataset (DESIGN.md §4), each optional.
    #[serde(default)]
    pub limits: LimitsConfig,
    /// Where each table lives and how its columns map (`[tables.events.columns]`).
    #[serde(default)]
    pub tables: BTreeMap<String, TableConfig>,
    /// `[context]`: where bundles are kept.
    #[serde(default)]
    pub context: ContextConfig,
    /// `[serve]`: `signalql serve`'s settings.
    #[serde(default)]
    pub serve: ServeConfig,
    /// `[mcp]`: the MCP server's settings (`signalql mcp`, and `/mcp` of `serve`).
    #[serde(default)]
    pub mcp: McpConfig,
    #[serde(default)]
    pub trace: TraceConfig,
    #[serde(default)]
    pub cluster: ClusterConfig,
}

/// `[cluster]` of `signalql.toml` (docs/cluster.md).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterConfig {
    /// The workers statements run on (`host:port` or `http://host:port`), unless a command
    /// names its own (`--workers`). Empty: statements run in this process.
    #[serde(default)]
    pub workers: Vec<String>,
    /// Bytes of files per task of a scan stage (default 16 MiB): a scan of fewer bytes runs
    /// as one task.
    pub bytes_per_task: Option<u64>,
}

/// `[serve]` of `signalql.toml`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServeConfig {
    /// The largest request body `signalql serve` reads (default 10 MiB); beyond it, HTTP 413.
    pub max_request_bytes: Option<u64>,
}

/// `[mcp]` of `signalql.toml`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpConfig {
    /// The most characters of JSON one tool answer holds (default 50 000): a longer answer
    /// is cut to fit (rows, whole bundle items, rejected objects) and says so.
    pub max_result_chars: Option<u64>,
}

/// `[trace]` of `signalql.toml` (docs/runtime.md).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TraceConfig {
    /// Every run writes its trace (as `--trace` does).
    #[serde(default)]
    pub enabled: bool,
    /// Where traces are written: a local folder (default: `ROOT/traces/`).
    pub folder: Option<String>,
}

/// `[context]` of `signalql.toml`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContextConfig {
    /// The context store: a folder or `s3://bucket/prefix` (default: the dataset root, whose
    /// `contexts/` folder holds the bundles). For a root signalql may only read.
    pub store: Option<String>,
    /// The token estimator of bundles whose query names none (`USING ESTIMATOR`):
    /// `chars-div-4-v1` (the default) or `o200k_base` (docs/context.md, "Token counts").
    pub estimator: Option<String>,
}

/// A dataset: its root (a local folder or an S3 prefix) and its `signalql.toml`.
#[derive(Debug, Clone)]
pub struct Dataset {
    root: Root,
    config: DatasetConfig,
    /// `policy.toml`, when the root has one.
    policy: Option<Arc<crate::policy::Policy>>,
    /// The context store's root: `[context] store`, or the dataset root.
    store: Root,
    /// How to reach S3 (for tables whose `[tables.T] path` is an `s3://` URL).
    options: StorageOptions,
    /// The roots of such tables, by URL, kept for the dataset's life: a root's S3 client runs
    /// on its own I/O runtime, which must outlive the scans that use it.
    table_roots: Arc<Mutex<HashMap<String, Root>>>,
    /// Tables opened before, by name, reused while their file list (locations and sizes) is
    /// unchanged: opening infers the schema from every file's footer, which a repeated query
    /// (WATCH, an agent's follow-ups, an MCP session) need not pay again.
    opened: Arc<Mutex<HashMap<String, Opened>>>,
    /// The schema and row count of each file read before, by (location, size).
    file_schemas: Arc<Mutex<HashMap<(String, u64), OpenedFile>>>,
    /// What each file answered to the bind pass's questions ([`TableInfo::counted`]).
    counted: FileCounts,
    /// The representations' files read by locator ([`Dataset::content_files`]).
    content_files: Arc<crate::objects::resident::locate::ContentFiles>,
}

/// A table opened before: the readable files listed and the files skipped at listing, then
/// what was opened over them.
type Opened = (Vec<(String, u64)>, Vec<SkippedFile>, TableInfo);

/// A file of a table as its footer describes it: its own columns, its rows, the footer.
#[derive(Debug, Clone)]
struct OpenedFile {
    schema: SchemaRef,
    rows: u64,
    metadata: Arc<datafusion::parquet::file::metadata::ParquetMetaData>,
}

/// Where a table's files are: a root (the dataset's, or the table's own `s3://` one) and a
/// folder under it.
#[derive(Clone)]
pub struct Place {
    pub root: Root,
    pub folder: String,
}

/// A registered table: its provider, the arrow schema, and the files behind it.
#[derive(Debug, Clone)]
pub struct TableInfo {
    pub name: String,
    /// The scan of the table's files, in their own schema.
    pub provider: Arc<dyn TableProvider>,
    /// The table as SignalQL reads it: the view's schema when there is one, else the files'.
    pub schema: SchemaRef,
    /// How the files' columns are read as the table's ([`crate::mapping`]); `None` when
    /// they are read as they are.
    pub view: Option<Arc<TableView>>,
    /// The hive partition column a DURING window prunes (`[tables.T.time] partition`): a
    /// date, or text starting with an ISO date.
    pub time_partition: Option<(String, DataType)>,
    /// (location, size) of each file read, sorted: see [`Dataset::table_files`].
    pub files: Vec<(String, u64)>,
    /// Files left out because they cannot be read (only with `skip_invalid_files`).
    pub skipped: Vec<SkippedFile>,
    /// What the calling principal may see of it (policy.toml); `None`: all of it.
    pub restriction: Option<Arc<Restriction>>,
    /// The fingerprint of the listing it was opened from ([`fingerprint`]); `None` for a
    /// Delta table or an application's own table.
    pub fingerprint: Option<String>,
    /// The rows of its files, from their footers; `None` when not read (a Delta or an
    /// application's table).
    pub rows: Option<u64>,
    /// What the bind pass decided of this table as opened (its files as listed, so once per
    /// table version): whether a JSON-text key holds only numbers (docs/mapping.md), by the
    /// caller's restriction and the key. Shared by the clones of one opened table.
    pub decided: Arc<std::sync::Mutex<HashMap<String, bool>>>,
    /// The same question asked of each file, kept by the dataset for every opening of its
    /// tables: by (caller restriction and key, file location, file size), the key's non-null
    /// values and how many of them are numbers (its distinct values when the file's
    /// dictionary pages were read instead of its rows: they decide alike). A table version
    /// that adds files asks only them (a file is named by its location and size, as in
    /// [`Dataset::opened_file_schema`]).
    pub counted: FileCounts,
}

/// Per (question, file location, file size): the counts a file gave ([`TableInfo::counted`]).
pub type FileCounts = Arc<std::sync::Mutex<HashMap<(String, String, u64), (i64, i64)>>>;

/// The fingerprint of a table's files as listed: a hash of each file's location, size and
/// version (modification time, or ETag on S3). Any file added, removed or rewritten changes it.
pub fn fingerprint(files: &[crate::storage::ListedFile]) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    for f in files {
        h.update(f.location.as_bytes());
        h.update([0]);
        h.update(f.size.to_le_bytes());
        h.update(f.version.as_deref().unwrap_or("").as_bytes());
        h.update([0]);
    }
    hex::encode(&h.finalize()[..16])
}

/// What a principal may see of a table (set by the engine from policy.toml; docs/policy.md).
/// Every scan of the table applies it: the filter over the table's SignalQL columns, then the
/// masks.
#[derive(Debug, Clone, Default)]
pub struct Restriction {
    /// Only rows for which this is true are read.
    pub filter: Option<datafusion::logical_expr::Expr>,
    /// Top-level columns read as NULL.
    pub masked: std::collections::BTreeSet<String>,
    /// Columns a query may not name (`permission_denied`); also read as NULL.
    pub denied: std::collections::BTreeSet<String>,
}

impl Restriction {
    /// Whether `column` is read as NULL.
    pub fn hides(&self, column: &str) -> bool {
        self.masked.contains(column) || self.denied.contains(column)
    }
}

/// A file a table was read without, and why.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, Deserialize)]
pub struct SkippedFile {
    /// Relative to the dataset root.
    pub file: String,
    pub reason: String,
}

impl TableInfo {
    pub fn total_bytes(&self) -> u64 {
        self.files.iter().map(|(_, s)| s).sum()
    }

    /// Whether it is read from a folder of Parquet files (not a Delta or an application's
    /// table).
    pub fn is_folder(&self) -> bool {
        self.provider
            .downcast_ref::<crate::folder::FolderTable>()
            .is_some()
    }

    /// The table with one more column, `name`: the position of each row's file in
    /// [`TableInfo::files`] (see [`crate::folder::FolderTable::with_file_column`]); `None` for
    /// a table read through a view or not a folder of Parquet files.
    pub fn with_file_ordinal(&self, name: &str) -> Option<TableInfo> {
        if self.view.is_some() {
            return None;
        }
        let folder = self.provider.downcast_ref::<crate::folder::FolderTable>()?;
        let provider: Arc<dyn TableProvider> = Arc::new(folder.with_file_column(name));
        Some(TableInfo {
            schema: provider.schema(),
            provider,
            fingerprint: None,
            ..self.clone()
        })
    }

    /// Per file of [`TableInfo::files`], in order, what tells it from a file rewritten in
    /// place ([`crate::folder::FolderTable::file_identities`]); `None` when the table is not
    /// a folder of Parquet files.
    pub fn file_identities(&self) -> Option<Vec<String>> {
        let folder = self.provider.downcast_ref::<crate::folder::FolderTable>()?;
        Some(folder.file_identities())
    }

    /// The table read from only the files for which `keep(location)` is true, with the same
    /// schema, view and restriction; `None` when it is not a folder of Parquet files (a Delta
    /// or an application's table) or when no file is kept.
    pub fn only_files(&self, keep: impl Fn(&str) -> bool) -> Option<TableInfo> {
        let folder = self.provider.downcast_ref::<crate::folder::FolderTable>()?;
        let kept: Vec<bool> = self.files.iter().map(|(l, _)| keep(l)).collect();
        if !kept.contains(&true) {
            return None;
        }
        Some(TableInfo {
            provider: Arc::new(folder.subset(&kept)),
            files: self
                .files
                .iter()
                .zip(&kept)
                .filter(|(_, k)| **k)
                .map(|(f, _)| f.clone())
                .collect(),
            fingerprint: None,
            rows: None,
            decided: Default::default(),
            counted: self.counted.clone(),
            ..self.clone()
        })
    }
}

impl Dataset {
    /// Open a dataset root: a local folder or `s3://bucket/prefix` (with the AWS environment).
    pub fn open(root: impl AsRef<Path>) -> Result<Self, DatasetError> {
        Dataset::open_with(root, &StorageOptions::default())
    }

    /// [`Dataset::open`] with storage options (`--s3-endpoint`).
    pub fn open_with(
        root: impl AsRef<Path>,
        options: &StorageOptions,
    ) -> Result<Self, DatasetError> {
        let text = root.as_ref().to_string_lossy();
        let root = Root::parse(&text, options).map_err(|e| match e {
            RootError::Unsupported(m) => DatasetError::Unsupported(m),
            RootError::Storage(e) => DatasetError::Storage(e),
        })?;
        if !root.exists()? {
            return Err(DatasetError::MissingRoot(root.display()));
        }
        let config = match root.read("signalql.toml")? {
            None => DatasetConfig::default(),
            Some(raw) => {
                let bad = |message: String| DatasetError::Config {
                    path: root.display_of("signalql.toml"),
                    message,
                };
                let raw = String::from_utf8(raw).map_err(|e| bad(e.to_string()))?;
                toml::from_str(&raw).map_err(|e| bad(e.to_string()))?
            }
        };
        let policy = match root.read("policy.toml")? {
            None => None,
            Some(raw) => {
                let bad = |message: String| DatasetError::Config {
                    path: root.display_of("policy.toml"),
                    message,
                };
                let raw = String::from_utf8(raw).map_err(|e| bad(e.to_string()))?;
                Some(Arc::new(crate::policy::Policy::parse(&raw).map_err(bad)?))
            }
        };
        let store = match &config.context.store {
            None => root.clone(),
            Some(text) => Root::parse(text, options).map_err(|e| {
                let message = match e {
                    RootError::Unsupported(m) => m,
                    RootError::Storage(e) => e.to_string(),
                };
                DatasetError::Config {
                    path: root.display_of("signalql.toml"),
                    message: format!("[context] store = {text:?}: {message}"),
                }
            })?,
        };
        if let Some(name) = &config.context.estimator
            && Estimator::from_name(name).is_none()
        {
            return Err(DatasetError::Config {
                path: root.display_of("signalql.toml"),
                message: format!(
                    "[context] estimator = {name:?} is not a token estimator (known: {})",
                    Estimator::names()
                ),
            });
        }
        Ok(Dataset {
            root,
            config,
            policy,
            store,
            options: options.clone(),
            table_roots: Arc::default(),
            opened: Arc::default(),
            file_schemas: Arc::default(),
            counted: Arc::default(),
            content_files: Arc::default(),
        })
    }

    /// Where the dataset lives.
    pub fn root(&self) -> &Root {
        &self.root
    }

    /// The representations' files CONTEXT FOR has read packed content from by locator, kept
    /// for every opening of the table (a file is named by its location and size).
    pub fn content_files(&self) -> &crate::objects::resident::locate::ContentFiles {
        &self.content_files
    }

    /// The root of the context store (its `contexts/` folder holds the bundles).
    pub fn context_store(&self) -> &Root {
        &self.store
    }

    pub fn config(&self) -> &DatasetConfig {
        &self.config
    }

    /// The root's `policy.toml`, checked when the dataset opened; `None` without one.
    pub fn policy(&self) -> Option<&Arc<crate::policy::Policy>> {
        self.policy.as_ref()
    }

    /// The configured default `now`, parsed.
    pub fn default_now(&self) -> Result<Option<DateTime<Utc>>, DatasetError> {
        match &self.config.now {
            None => Ok(None),
            Some(s) => DateTime::parse_from_rfc3339(s)
                .map(|t| Some(t.with_timezone(&Utc)))
                .map_err(|e| DatasetError::Config {
                    path: self.root.display_of("signalql.toml"),
                    message: format!("`now` = {s:?} is not an RFC 3339 instant: {e}"),
                }),
        }
    }

    /// The files of a table a reader reads (recursively, so hive partitions work), sorted:
    /// every Parquet file but the uncommitted files of ingests ([`crate::commit`]); hidden
    /// names (starting with `.` or `_`) are skipped. Each is (location, size, why it cannot
    /// be read if it cannot: an empty file, a dangling link). The commit records are read
    /// before the folder is listed, so an ingest is seen whole or not at all.
    pub fn listed_files(
        &self,
        table: &str,
        place: &Place,
    ) -> Result<Vec<ListedFile>, DatasetError> {
        let unreadable = |message: String| DatasetError::Unreadable {
            table: table.to_string(),
            message,
        };
        let Place { root, folder } = place;
        let snapshot = Snapshot::read(root).map_err(|e| unreadable(e.to_string()))?;
        let listed = match root.parquet_files(folder) {
            Ok(files) => files.unwrap_or_default(),
            Err(e) => return Err(unreadable(e.to_string())),
        };
        let mut files: Vec<ListedFile> = listed
            .into_iter()
            .filter(|f| snapshot.visible(&f.location))
            .collect();
        for f in &mut files {
            if f.broken.is_none() && f.size == 0 {
                f.broken = Some("an empty file (0 bytes), not Parquet".into());
            }
        }
        if files.is_empty() {
            return Err(DatasetError::MissingTable {
                root: root.display(),
                table: table.to_string(),
            });
        }
        Ok(files)
    }

    /// Where `table` lives: `[tables.T] path` (a folder under the root, or an `s3://` URL of
    /// its own), or the folder of the table's name under the root.
    pub fn place(&self, table: &str) -> Result<Place, DatasetError> {
        let under_root = |folder: String| Place {
            root: self.root.clone(),
            folder,
        };
        let Some(config) = self.config.tables.get(table) else {
            return Ok(under_root(table.to_string()));
        };
        let bad = |message: String| DatasetError::Config {
            path: self.root.display_of("signalql.toml"),
            message: format!("[tables.{table}]: {message}"),
        };
        if let Some(f) = config.format.as_deref()
            && f != "parquet"
            && f != "delta"
        {
            return Err(bad(format!(
                "`format = {f:?}`: expected \"parquet\" or \"delta\""
            )));
        }
        let Some(path) = config.path.as_deref() else {
            return Ok(under_root(table.to_string()));
        };
        if path.contains("://") {
            // `s3://bucket/lake/tracks`: the table is the folder `tracks` of the root
            // `s3://bucket/lake`.
            let url = path.trim_end_matches('/');
            let (base, folder) = match url.rsplit_once('/') {
                Some((base, folder)) if !base.ends_with('/') && !folder.is_empty() => {
                    (base, folder)
                }
                _ => {
                    return Err(bad(format!(
                        "`path = {path:?}`: give the table's folder, as s3://bucket/folder"
                    )));
                }
            };
            let known = self
                .table_roots
                .lock()
                .ok()
                .and_then(|m| m.get(base).cloned());
            let root = match known {
                Some(root) => root,
                None => {
                    let root = Root::parse(base, &self.options).map_err(|e| match e {
                        RootError::Unsupported(m) => DatasetError::Unsupported(m),
                        RootError::Storage(e) => DatasetError::Storage(e),
                    })?;
                    if let Ok(mut m) = self.table_roots.lock() {
                        m.insert(base.to_string(), root.clone());
                    }
                    root
                }
            };
            return Ok(Place {
                root,
                folder: folder.to_string(),
            });
        }
        let path = path.trim_matches('/');
        if path.is_empty()
            || path
                .split('/')
                .any(|p| p == ".." || p == "." || p.is_empty())
        {
            return Err(bad(format!(
                "`path = {path:?}`: give a folder under the dataset root (no `..`)"
            )));
        }
        Ok(under_root(path.to_string()))
    }

    /// Whether `table` (in `folder`) is a Delta table: `[tables.T] format`, or by default a
    /// folder holding `_delta_log/`.
    fn is_delta(&self, table: &str, place: &Place) -> Result<bool, DatasetError> {
        let found = crate::delta::is_delta(&place.root, &place.folder)?;
        match self
            .config
            .tables
            .get(table)
            .and_then(|c| c.format.as_deref())
        {
            Some("parquet") => Ok(false),
            Some(_) if !found => Err(DatasetError::Unreadable {
                table: table.to_string(),
                message: format!(
                    "the {table} table is configured as a Delta table, but {} has no \
                     _delta_log/",
                    place.root.display_of(&place.folder)
                ),
            }),
            _ => Ok(found),
        }
    }

    /// The current snapshot of a Delta table, read through its view.
    async fn delta_table(
        &self,
        ctx: &SessionContext,
        table: &str,
        place: &Place,
    ) -> Result<TableInfo, DatasetError> {
        let (provider, _files) = crate::delta::open(ctx, &place.root, table, &place.folder).await?;
        // Its rows are ordered by time only (no file order: docs/mapping.md).
        self.viewed(table, provider, None, Vec::new(), Vec::new())
    }

    /// The table `table` over `provider`, read through its view ([`Dataset::view`] of the
    /// provider's schema).
    fn viewed(
        &self,
        table: &str,
        provider: Arc<dyn TableProvider>,
        time_partition: Option<(String, DataType)>,
        files: Vec<(String, u64)>,
        skipped: Vec<SkippedFile>,
    ) -> Result<TableInfo, DatasetError> {
        let files_schema = provider.schema();
        let view = self.view(table, &files_schema)?.map(Arc::new);
        Ok(TableInfo {
            name: table.to_string(),
            provider,
            schema: match &view {
                Some(v) => Arc::new(v.schema()),
                None => files_schema,
            },
            view,
            time_partition,
            files,
            skipped,
            restriction: None,
            fingerprint: None,
            rows: None,
            decided: Default::default(),
            counted: self.counted.clone(),
        })
    }

    /// The hive partition columns of `table` (name, type), from the `key=value` folders of its
    /// files below `folder`, in the order first seen; typed by `[tables.T.partitions]`
    /// (default: text). None when no file is in such a folder.
    fn partitions(
        &self,
        table: &str,
        place: &Place,
        files: &[(String, u64)],
        file_schema: &Schema,
    ) -> Result<Vec<(String, DataType)>, DatasetError> {
        let prefix = format!("{}/", place.folder);
        let mut keys: Vec<String> = Vec::new();
        for (location, _) in files {
            let rel = place.root.relative(location);
            for (k, _) in crate::folder::partitions_of(rel.strip_prefix(&prefix).unwrap_or(&rel)) {
                if !keys.contains(&k) {
                    keys.push(k);
                }
            }
        }
        let config = self.config.tables.get(table);
        let bad = |message: String| DatasetError::Config {
            path: self.root.display_of("signalql.toml"),
            message: format!("[tables.{table}.partitions]: {message}"),
        };
        if let Some(c) = config {
            for k in c.partitions.keys() {
                if !keys.contains(k) {
                    return Err(bad(format!(
                        "`{k}`: no folder of the {table} table is named {k}=…"
                    )));
                }
            }
        }
        keys.into_iter()
            .map(|k| {
                if file_schema.field_with_name(&k).is_ok() {
                    return Err(DatasetError::Unreadable {
                        table: table.to_string(),
                        message: format!(
                            "the partition folders {k}=… name a column the files also have"
                        ),
                    });
                }
                let dt = match config.and_then(|c| c.partitions.get(&k)) {
                    None => DataType::Utf8,
                    Some(name) => crate::folder::partition_type(name).ok_or_else(|| {
                        bad(format!(
                            "`{k} = {name:?}`: expected string, date, int64, int32, float64 \
                             or boolean"
                        ))
                    })?,
                };
                Ok((k, dt))
            })
            .collect()
    }

    /// `[tables.T.time] partition`: the partition column a DURING window prunes, and its type.
    fn time_partition(
        &self,
        table: &str,
        partitions: &[(String, DataType)],
    ) -> Result<Option<(String, DataType)>, DatasetError> {
        let Some(key) = self
            .config
            .tables
            .get(table)
            .and_then(|c| c.time.partition.as_deref())
        else {
            return Ok(None);
        };
        match partitions.iter().find(|(k, _)| k == key) {
            Some((k, dt)) if matches!(dt, DataType::Utf8 | DataType::Date32) => {
                Ok(Some((k.clone(), dt.clone())))
            }
            Some((_, dt)) => Err(DatasetError::Config {
                path: self.root.display_of("signalql.toml"),
                message: format!(
                    "[tables.{table}.time] partition = {key:?}: a time partition is a date or \
                     ISO date text (YYYY-MM-DD…), not {dt}"
                ),
            }),
            None => Err(DatasetError::Config {
                path: self.root.display_of("signalql.toml"),
                message: format!(
                    "[tables.{table}.time] partition = {key:?}: the table has no {key}=… folders"
                ),
            }),
        }
    }

    /// How the files of `table` (merged schema `files`) are read as the SignalQL table.
    pub fn view(&self, table: &str, files: &Schema) -> Result<Option<TableView>, DatasetError> {
        crate::mapping::view(
            table,
            files,
            self.config.tables.get(table),
            &self.root.display_of("signalql.toml"),
        )
    }

    /// The readable files of a table as (location, size), and those left out with
    /// `skip_invalid_files`; without it, an unreadable file is [`DatasetError::BadFile`].
    /// The third is the listing's fingerprint ([`fingerprint`]).
    pub fn table_files(&self, table: &str, place: &Place) -> Result<Listing, DatasetError> {
        let mut files = Vec::new();
        let mut skipped = Vec::new();
        let mut modified = HashMap::new();
        let listed = self.listed_files(table, place)?;
        let print = fingerprint(&listed);
        for f in listed {
            match f.broken {
                None => {
                    if let Some(t) = f.modified {
                        modified.insert(f.location.clone(), t);
                    }
                    files.push((f.location, f.size))
                }
                Some(reason) => {
                    self.invalid(table, &place.root, &f.location, reason, &mut skipped)?
                }
            }
        }
        Ok(Listing {
            files,
            skipped,
            print,
            modified,
        })
    }

    /// The fingerprint of `table`'s files as they are listed now ([`fingerprint`]), the one
    /// [`TableInfo::fingerprint`] has when nothing changed since it was opened; `None` for a
    /// Delta table (not fingerprinted: plans over it are not cached).
    pub fn fingerprint(&self, table: &str) -> Result<Option<String>, DatasetError> {
        let place = self.place(table)?;
        if self.is_delta(table, &place)? {
            return Ok(None);
        }
        Ok(Some(fingerprint(&self.listed_files(table, &place)?)))
    }

    /// A file that cannot be read: skipped (with `skip_invalid_files`) or the error.
    fn invalid(
        &self,
        table: &str,
        root: &Root,
        location: &str,
        reason: String,
        skipped: &mut Vec<SkippedFile>,
    ) -> Result<(), DatasetError> {
        let file = root.relative(location);
        if self.config.skip_invalid_files {
            skipped.push(SkippedFile { file, reason });
            Ok(())
        } else {
            Err(DatasetError::BadFile {
                table: table.to_string(),
                file,
                message: reason,
            })
        }
    }

    /// A listing table over the table's readable files, with their schemas merged by the
    /// widening rule of [`crate::drift`] (files written by separate ingests with different
    /// property keys or types read together; a key missing from a file reads as NULL). Each
    /// file's footer is checked before DataFusion reads it, so a corrupt file is an error
    /// naming it, not a panic.
    pub async fn table(
        &self,
        ctx: &SessionContext,
        table: &str,
    ) -> Result<TableInfo, DatasetError> {
        self.table_for_days(ctx, table, None).await
    }

    /// [`Dataset::table`] for a statement that reads only the days `[first, after)` of the
    /// table's time partition (`[tables.T.time] partition`): the files of other days'
    /// folders are left out before any is opened. Files outside such folders stay.
    pub async fn table_for_days(
        &self,
        ctx: &SessionContext,
        table: &str,
        days: Option<(NaiveDate, NaiveDate)>,
    ) -> Result<TableInfo, DatasetError> {
        let place = self.place(table)?;
        if self.is_delta(table, &place)? {
            return self.delta_table(ctx, table, &place).await;
        }
        let Listing {
            files: mut candidates,
            skipped: listing_skipped,
            print,
            modified,
        } = self.table_files(table, &place)?;
        let root = &place.root;
        let key = self
            .config
            .tables
            .get(table)
            .and_then(|c| c.time.partition.clone());
        if let (Some((first, after)), Some(key)) = (days, key) {
            let prefix = format!("{}/", place.folder);
            let day_of = |location: &str| {
                let rel = root.relative(location);
                crate::folder::partitions_of(rel.strip_prefix(&prefix).unwrap_or(&rel))
                    .into_iter()
                    .find(|(k, _)| *k == key)
                    .and_then(|(_, v)| NaiveDate::parse_from_str(v.get(..10)?, "%Y-%m-%d").ok())
            };
            let kept: Vec<(String, u64)> = candidates
                .iter()
                .filter(|(l, _)| day_of(l).is_none_or(|d| d >= first && d < after))
                .cloned()
                .collect();
            // With no file left, one stays, so the table still has its schema (its rows
            // are outside the window).
            candidates = if kept.is_empty() {
                candidates.into_iter().take(1).collect()
            } else {
                kept
            };
        }
        if let Some(info) = self.opened_before(table, &candidates, &listing_skipped)
            && info.fingerprint.as_deref() == Some(print.as_str())
        {
            return Ok(info);
        }
        let unreadable = |message: String| DatasetError::Unreadable {
            table: table.to_string(),
            message,
        };
        root.register(ctx).map_err(|e| unreadable(e.to_string()))?;
        let state = ctx.state();
        let mut skipped = listing_skipped.clone();
        let mut files = Vec::new();
        let mut schemas = Vec::new();
        let mut footers = Vec::new();
        let mut urls = Vec::new();
        let mut rows = 0;
        for (location, size) in &candidates {
            let url_text = root.location_url(location);
            let url = ListingTableUrl::parse(&url_text)
                .map_err(|e| unreadable(format!("{url_text}: {e}")))?;
            let modified = modified.get(location).copied();
            match self
                .file_schema(&state, &url, location, *size, modified)
                .await
            {
                Ok(opened) => {
                    rows += opened.rows;
                    schemas.push((root.relative(location), opened.schema));
                    footers.push(opened.metadata);
                    files.push((location.clone(), *size));
                    urls.push(url);
                }
                Err(reason) => self.invalid(table, root, location, reason, &mut skipped)?,
            }
        }
        if urls.is_empty() {
            return Err(unreadable(format!(
                "none of its files can be read ({} skipped)",
                skipped.len()
            )));
        }
        let schema =
            Arc::new(
                crate::drift::merge(&schemas).map_err(|source| DatasetError::Drift {
                    table: table.to_string(),
                    source: Box::new(source),
                })?,
            );
        let partitions = self.partitions(table, &place, &files, &schema)?;
        let prefix = format!("{}/", place.folder);
        let folder_files = files
            .iter()
            .zip(&schemas)
            .zip(&footers)
            .map(|(((location, size), (_, file_schema)), metadata)| {
                let rel = root.relative(location);
                let found = crate::folder::partitions_of(rel.strip_prefix(&prefix).unwrap_or(&rel));
                crate::folder::FolderFile {
                    path: location.clone(),
                    size: *size,
                    modified: modified.get(location).copied(),
                    schema: Arc::clone(file_schema),
                    values: partitions
                        .iter()
                        .map(|(k, _)| found.iter().find(|(fk, _)| fk == k).map(|(_, v)| v.clone()))
                        .collect(),
                    metadata: Some(Arc::clone(metadata)),
                }
            })
            .collect();
        let provider: Arc<dyn TableProvider> = Arc::new(
            crate::folder::FolderTable::try_new(
                Arc::clone(&schema),
                partitions.clone(),
                urls[0].object_store(),
                folder_files,
            )
            .map_err(unreadable)?,
        );
        let time_partition = self.time_partition(table, &partitions)?;
        let mut info = self.viewed(table, provider, time_partition, files, skipped)?;
        info.fingerprint = Some(print);
        info.rows = Some(rows);
        if let Ok(mut opened) = self.opened.lock() {
            opened.insert(
                table.to_string(),
                (candidates, listing_skipped, info.clone()),
            );
        }
        Ok(info)
    }

    /// A scan of one file of a table (a location from [`TableInfo::files`]), in the file's
    /// own schema: for naming the file that holds a value the table cannot read.
    pub async fn file_provider(
        &self,
        ctx: &SessionContext,
        table: &str,
        location: &str,
    ) -> Result<(Arc<dyn TableProvider>, String), String> {
        let place = self.place(table).map_err(|e| e.to_string())?;
        let url_text = place.root.location_url(location);
        let url = ListingTableUrl::parse(&url_text).map_err(|e| e.to_string())?;
        let options =
            ListingOptions::new(Arc::new(ParquetFormat::default())).with_file_extension(".parquet");
        let config = ListingTableConfig::new(url)
            .with_listing_options(options)
            .infer_schema(&ctx.state())
            .await
            .map_err(|e| e.to_string())?;
        let provider = ListingTable::try_new(config).map_err(|e| e.to_string())?;
        Ok((Arc::new(provider), place.root.relative(location)))
    }

    /// The Arrow schema of one file (as DataFusion reads it) and its rows, after checking its
    /// footer; the error is why the file cannot be read. The file is named by its listing
    /// (size and modification time: no request of its own), and its footer lands in
    /// DataFusion's file-metadata cache under that name, where the scans find it.
    async fn file_schema(
        &self,
        state: &SessionState,
        url: &ListingTableUrl,
        location: &str,
        size: u64,
        modified: Option<DateTime<Utc>>,
    ) -> Result<OpenedFile, String> {
        let key = (location.to_string(), size);
        if let Some(s) = self
            .file_schemas
            .lock()
            .ok()
            .and_then(|m| m.get(&key).cloned())
        {
            return Ok(s);
        }
        let store = state
            .runtime_env()
            .object_store(url.object_store())
            .map_err(|e| e.to_string())?;
        let path = url.prefix().clone();
        let read = async {
            use object_store::ObjectStoreExt;
            let meta = match modified {
                Some(last_modified) => object_store::ObjectMeta {
                    location: path,
                    last_modified,
                    size,
                    e_tag: None,
                    version: None,
                },
                None => store.head(&path).await.map_err(|e| e.to_string())?,
            };
            check_footer(store.as_ref(), &meta).await?;
            let unreadable = |e: datafusion::error::DataFusionError| {
                format!("not a readable Parquet file: {}", e.strip_backtrace())
            };
            // The footer without its page index (the scans read it when they use it), and
            // the schema DataFusion's ParquetFormat infers from it.
            let metadata =
                crate::folder::read_footer_alone(state.runtime_env(), store.as_ref(), &meta)
                    .await
                    .map_err(unreadable)?;
            let schema = Arc::new(crate::folder::footer_schema(&metadata).map_err(unreadable)?);
            let rows = metadata
                .row_groups()
                .iter()
                .map(|g| g.num_rows().max(0) as u64)
                .sum::<u64>();
            Ok::<_, String>(OpenedFile {
                schema,
                rows,
                metadata,
            })
        };
        let read = std::panic::AssertUnwindSafe(read)
            .catch_unwind()
            .await
            .unwrap_or_else(
                |_| Err("not a readable Parquet file (its footer is corrupt)".into()),
            )?;
        if let Ok(mut m) = self.file_schemas.lock() {
            m.insert(key, read.clone());
        }
        Ok(read)
    }

    /// The values of the text column `column` in a file of `table` opened before (by its
    /// location and size), read from the file's dictionary pages alone
    /// ([`crate::dictionary::text_dictionary`]): `Ok(None)` when they do not hold every value,
    /// or the file was not opened through this dataset. The error is a read that failed.
    pub async fn file_text_dictionary(
        &self,
        state: &SessionState,
        table: &str,
        (location, size): (&str, u64),
        column: &str,
    ) -> Result<Option<datafusion::arrow::array::StringArray>, String> {
        let metadata = match self.file_schemas.lock() {
            Ok(m) => match m.get(&(location.to_string(), size)) {
                Some(f) => Arc::clone(&f.metadata),
                None => return Ok(None),
            },
            Err(_) => return Ok(None),
        };
        let place = self.place(table).map_err(|e| e.to_string())?;
        let url =
            ListingTableUrl::parse(place.root.location_url(location)).map_err(|e| e.to_string())?;
        let store = state
            .runtime_env()
            .object_store(url.object_store())
            .map_err(|e| e.to_string())?;
        crate::dictionary::text_dictionary(store.as_ref(), url.prefix(), &metadata, column).await
    }

    /// The Arrow schema of a file of a table opened before, by its location and size, as
    /// its footer gave it (no request; `None` for a file not opened through this dataset).
    pub fn opened_file_schema(&self, location: &str, size: u64) -> Option<SchemaRef> {
        let m = self.file_schemas.lock().ok()?;
        m.get(&(location.to_string(), size))
            .map(|f| f.schema.clone())
    }

    /// The table as opened before, if its files are the same ones (a file is named by its
    /// location and size; signalql never rewrites a file in place, it writes new ones).
    fn opened_before(
        &self,
        table: &str,
        files: &[(String, u64)],
        skipped: &[SkippedFile],
    ) -> Option<TableInfo> {
        let opened = self.opened.lock().ok()?;
        let (listed, listed_skipped, info) = opened.get(table)?;
        (listed == files && listed_skipped == skipped).then(|| info.clone())
    }

    /// Open `table` and check the columns the language relies on (see [`check_schema`]).
    pub async fn checked(
        &self,
        ctx: &SessionContext,
        table: &str,
    ) -> Result<TableInfo, DatasetError> {
        let info = self.table(ctx, table).await?;
        check_schema(table, &info.schema)?;
        Ok(info)
    }

    /// Open the `entities` table and check its columns.
    pub async fn entities(&self, ctx: &SessionContext) -> Result<TableInfo, DatasetError> {
        self.checked(ctx, "entities").await
    }

    /// Open the `relationships` table and check its columns.
    pub async fn relationships(&self, ctx: &SessionContext) -> Result<TableInfo, DatasetError> {
        self.checked(ctx, "relationships").await
    }

    /// Open the `events` table and check the columns the language relies on.
    pub async fn events(&self, ctx: &SessionContext) -> Result<TableInfo, DatasetError> {
        self.checked(ctx, "events").await
    }
}

/// Checks the end of a Parquet file before its footer is decoded: the `PAR1` magic, and a
/// footer length that fits in the file.
async fn check_footer(
    store: &dyn object_store::ObjectStore,
    meta: &object_store::ObjectMeta,
) -> Result<(), String> {
    use object_store::ObjectStoreExt;
    if meta.size < 12 {
        return Err(format!(
            "not a Parquet file: {} bytes is too short",
            meta.size
        ));
    }
    let tail = store
        .get_range(&meta.location, meta.size - 8..meta.size)
        .await
        .map_err(|e| e.to_string())?;
    match &tail[4..8] {
        b"PAR1" => {}
        b"PARE" => return Err("an encrypted Parquet file, which signalql cannot read".into()),
        _ => return Err("not a Parquet file (no PAR1 magic at its end)".into()),
    }
    let footer = u64::from(u32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]]));
    if footer + 12 > meta.size {
        return Err(format!(
            "corrupt Parquet footer: its length field says {footer} bytes, but the file has {}",
            meta.size
        ));
    }
    Ok(())
}

/// A table's files as listed: (location, size) of the readable ones, sorted; the unreadable
/// ones; the listing's fingerprint; each file's modification time.
pub struct Listing {
    pub files: Vec<(String, u64)>,
    pub skipped: Vec<SkippedFile>,
    pub print: String,
    pub modified: HashMap<String, DateTime<Utc>>,
}
