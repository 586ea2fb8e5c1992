//! A dataset root: its `signalql.toml`, which tables it has, and their registration as
//! DataFusion listing tables over the Parquet files under `ROOT/<table>/`.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::catalog::TableProvider;
use datafusion::datasource::file_format::parquet::ParquetFormat;
use datafusion::datasource::listing::{
    ListingOptions, ListingTable, ListingTableConfig, ListingTableUrl,
};
use datafusion::prelude::SessionContext;
use serde::Deserialize;

use crate::storage::{Root, RootError, StorageError, StorageOptions};

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
}

/// Why a dataset or table could not be used. Each names the path involved.
#[derive(Debug, thiserror::Error)]
pub enum DatasetError {
    #[error("dataset root {0} does not exist or is not a folder")]
    MissingRoot(String),
    #[error("dataset {root} has no {table} table (expected Parquet files under {root}/{table}/)")]
    MissingTable { root: String, table: String },
    #[error("cannot read {path}: {message}")]
    Config { path: String, message: String },
    #[error("cannot read the {table} table: {message}")]
    Unreadable { table: String, message: String },
    #[error("column {column} of the {table} table has type {found}, expected {expected}")]
    BadColumn {
        table: String,
        column: String,
        found: String,
        expected: String,
    },
    #[error("{0}")]
    Unsupported(String),
    #[error("cannot read {0}")]
    Storage(#[from] StorageError),
}

/// A dataset: its root (a local folder or an S3 prefix) and its `signalql.toml`.
#[derive(Debug, Clone)]
pub struct Dataset {
    root: Root,
    config: DatasetConfig,
    /// Tables opened before, by name, reused while their file list (locations and sizes) is
    /// unchanged: opening infers the schema from every file's footer, which a repeated query
    /// (WATCH, an agent's follow-ups, an MCP session) need not pay again.
    opened: Arc<Mutex<HashMap<String, TableInfo>>>,
}

/// A registered table: its provider, the arrow schema, and the files behind it.
#[derive(Debug, Clone)]
pub struct TableInfo {
    pub name: String,
    pub provider: Arc<dyn TableProvider>,
    pub schema: SchemaRef,
    /// (location, size) of each file, sorted: see [`Dataset::table_files`].
    pub files: Vec<(String, u64)>,
}

impl TableInfo {
    pub fn total_bytes(&self) -> u64 {
        self.files.iter().map(|(_, s)| s).sum()
    }
}

/// How the `properties` (or `traits`, `attributes`) column encodes its keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PropertiesEncoding {
    Struct,
    Map,
    JsonText,
}

impl PropertiesEncoding {
    /// The encoding of a column of type `dt`, or None if it is none of the three.
    pub fn of(dt: &DataType) -> Option<Self> {
        match dt {
            DataType::Struct(_) => Some(Self::Struct),
            DataType::Map(_, _) => Some(Self::Map),
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => Some(Self::JsonText),
            _ => None,
        }
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
        Ok(Dataset {
            root,
            config,
            opened: Arc::default(),
        })
    }

    /// Where the dataset lives.
    pub fn root(&self) -> &Root {
        &self.root
    }

    pub fn config(&self) -> &DatasetConfig {
        &self.config
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

    /// The Parquet files of a table (recursively, so hive partitions work), sorted, as
    /// (location, size): the canonical local path or the object key, as a scan names them.
    /// Hidden files and in-progress temporaries (names starting with `.` or `_`) are skipped.
    pub fn table_files(&self, table: &str) -> Result<Vec<(String, u64)>, DatasetError> {
        match self.root.parquet_files(table) {
            Ok(Some(files)) => Ok(files),
            Ok(None) => Err(DatasetError::MissingTable {
                root: self.root.display(),
                table: table.to_string(),
            }),
            Err(e) => Err(DatasetError::Unreadable {
                table: table.to_string(),
                message: e.to_string(),
            }),
        }
    }

    /// Build a listing table over `ROOT/<table>/**/*.parquet` with the schema merged from
    /// every file (struct fields are unioned, so files written by separate ingests with
    /// different property keys read together; a key missing from a file reads as NULL).
    pub async fn table(
        &self,
        ctx: &SessionContext,
        table: &str,
    ) -> Result<TableInfo, DatasetError> {
        let files = self.table_files(table)?;
        if let Some(info) = self.opened_before(table, &files) {
            return Ok(info);
        }
        let unreadable = |message: String| DatasetError::Unreadable {
            table: table.to_string(),
            message,
        };
        self.root
            .register(ctx)
            .map_err(|e| unreadable(e.to_string()))?;
        let dir = self
            .root
            .table_url(table)
            .map_err(|e| unreadable(e.to_string()))?;
        let url = ListingTableUrl::parse(&dir).map_err(|e| unreadable(format!("{dir}: {e}")))?;
        let options =
            ListingOptions::new(Arc::new(ParquetFormat::default())).with_file_extension(".parquet");
        let state = ctx.state();
        let schema = options
            .infer_schema(&state, &url)
            .await
            .map_err(|e| unreadable(e.to_string()))?;
        let config = ListingTableConfig::new(url)
            .with_listing_options(options)
            .with_schema(Arc::clone(&schema));
        let provider = ListingTable::try_new(config).map_err(|e| unreadable(e.to_string()))?;
        let info = TableInfo {
            name: table.to_string(),
            provider: Arc::new(provider),
            schema,
            files,
        };
        if let Ok(mut opened) = self.opened.lock() {
            opened.insert(table.to_string(), info.clone());
        }
        Ok(info)
    }

    /// The table as opened before, if its files are the same ones (a file is named by its
    /// location and size; signalql never rewrites a file in place, it writes new ones).
    fn opened_before(&self, table: &str, files: &[(String, u64)]) -> Option<TableInfo> {
        let opened = self.opened.lock().ok()?;
        opened.get(table).filter(|t| t.files == files).cloned()
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

/// Check the columns the language relies on in `table`: `events`, `entities` and
/// `relationships` have required columns; the other tables are checked where they are read.
pub fn check_schema(table: &str, schema: &SchemaRef) -> Result<(), DatasetError> {
    match table {
        "events" => check_events_schema(schema),
        "entities" => check_entities_schema(schema),
        "relationships" => check_relationships_schema(schema),
        _ => Ok(()),
    }
}

/// What a column of a table must be.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Text,
    Timestamp,
}

/// Check that `schema` has the `required` columns of the right kinds, and that the optional
/// property-bag column `bag`, if present, is a struct, map or JSON text.
fn check_columns(
    table: &str,
    schema: &SchemaRef,
    required: &[(&str, Kind)],
    bag: Option<&str>,
) -> Result<(), DatasetError> {
    let bad = |column: &str, found: &DataType, expected: &str| DatasetError::BadColumn {
        table: table.into(),
        column: column.into(),
        found: found.to_string(),
        expected: expected.into(),
    };
    for (name, kind) in required {
        let f = schema
            .field_with_name(name)
            .map_err(|_| DatasetError::Unreadable {
                table: table.into(),
                message: format!("the {table} table has no `{name}` column"),
            })?;
        let dt = f.data_type();
        match kind {
            Kind::Text
                if !matches!(
                    dt,
                    DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
                ) =>
            {
                return Err(bad(name, dt, "utf8"));
            }
            Kind::Timestamp if !matches!(dt, DataType::Timestamp(_, _)) => {
                return Err(bad(name, dt, "timestamp"));
            }
            _ => {}
        }
    }
    if let Some(bag) = bag
        && let Ok(p) = schema.field_with_name(bag)
        && PropertiesEncoding::of(p.data_type()).is_none()
    {
        return Err(bad(
            bag,
            p.data_type(),
            "struct, map<utf8, utf8> or JSON utf8",
        ));
    }
    Ok(())
}

/// The `entities` table: `entity_type`, `entity_id` (text), `updated_at` (a timestamp) and,
/// if present, `attributes` as a struct, a map or JSON text.
pub fn check_entities_schema(schema: &SchemaRef) -> Result<(), DatasetError> {
    check_columns(
        "entities",
        schema,
        &[
            ("entity_type", Kind::Text),
            ("entity_id", Kind::Text),
            ("updated_at", Kind::Timestamp),
        ],
        Some("attributes"),
    )
}

/// The `relationships` table: `src_type`, `src_id`, `relation`, `dst_type`, `dst_id` (text)
/// and `created_at` (a timestamp).
pub fn check_relationships_schema(schema: &SchemaRef) -> Result<(), DatasetError> {
    check_columns(
        "relationships",
        schema,
        &[
            ("src_type", Kind::Text),
            ("src_id", Kind::Text),
            ("relation", Kind::Text),
            ("dst_type", Kind::Text),
            ("dst_id", Kind::Text),
            ("created_at", Kind::Timestamp),
        ],
        None,
    )
}

/// The `events` table must have `event_name` (text), `timestamp` (a timestamp) and, if
/// present, `properties` as a struct, a map or JSON text.
pub fn check_events_schema(schema: &SchemaRef) -> Result<(), DatasetError> {
    check_columns(
        "events",
        schema,
        &[("event_name", Kind::Text), ("timestamp", Kind::Timestamp)],
        Some("properties"),
    )
}
