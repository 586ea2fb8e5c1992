//! The catalog's error type: I/O, bad input lines, Arrow/Parquet/DataFusion failures.

use datafusion::arrow::error::ArrowError;
use datafusion::error::DataFusionError;
use datafusion::parquet::errors::ParquetError;

use crate::storage::StorageError;

/// Everything that can go wrong while reading, writing or generating a dataset.
#[derive(thiserror::Error, Debug)]
pub enum CatalogError {
    /// A file or folder could not be read, written, created or renamed.
    #[error("cannot read/write {path}: {source}")]
    Io {
        /// The path involved (as the user gave it, or as built from the dataset root).
        path: String,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// A line (1-based; for CSV, the line where the record starts) of an input file is invalid.
    #[error("{file}:{line}: {message}")]
    BadInput {
        /// The input file.
        file: String,
        /// 1-based line number.
        line: u64,
        /// What is wrong with it.
        message: String,
    },
    /// An Arrow error (building arrays or batches).
    #[error("arrow error: {0}")]
    Arrow(#[from] ArrowError),
    /// A Parquet error (encoding or decoding a file).
    #[error("parquet error: {0}")]
    Parquet(#[from] ParquetError),
    /// A DataFusion error.
    #[error("datafusion error: {0}")]
    DataFusion(#[from] DataFusionError),
    /// A dataset root's storage (a local folder or S3) failed.
    #[error("cannot read/write {0}")]
    Storage(#[from] crate::storage::StorageError),
    /// A request that cannot be carried out (bad option, existing target, empty input, ...).
    #[error("{0}")]
    Invalid(String),
}

impl CatalogError {
    /// An [`CatalogError::Io`] for `path`.
    pub fn io(path: impl AsRef<std::path::Path>, source: std::io::Error) -> Self {
        CatalogError::Io {
            path: path.as_ref().display().to_string(),
            source,
        }
    }
}

/// The catalog's result type.
pub type Result<T> = std::result::Result<T, CatalogError>;

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
    /// One file of a table cannot be read (named relative to the root).
    #[error("cannot read {file} (a file of the {table} table): {message}")]
    BadFile {
        table: String,
        file: String,
        message: String,
    },
    /// The table's files disagree on a column's type in a way no widening reconciles.
    #[error("cannot read the {table} table: {source}")]
    Drift {
        table: String,
        #[source]
        source: Box<crate::drift::Irreconcilable>,
    },
    #[error("column {column} of the {table} table has type {found}, expected {expected}")]
    BadColumn {
        table: String,
        column: String,
        found: String,
        expected: String,
    },
    #[error("{0}")]
    Unsupported(String),
    /// A dataset layout signalql does not read yet (`capability_error` naming `feature`).
    #[error("{message}")]
    NotYet {
        feature: &'static str,
        message: String,
    },
    #[error("cannot read {0}")]
    Storage(#[from] StorageError),
    /// The calling principal may not read it (policy.toml): `permission_denied`.
    #[error("{0}")]
    Denied(String),
}
