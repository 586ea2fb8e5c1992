//! The one error type of the engine: a kind (with its stable code), a message, an optional
//! source position and optional help, and the error it came from (its cause chain, kept for
//! `std::error::Error::source` and for telling causes apart without reading messages). The
//! conversions from the catalog's, storage's, Arrow's and DataFusion's errors are here.

use std::sync::Arc;

use serde::Serialize;
use serde_json::{Map, Value, json};
use signalql_catalog::{CatalogError, DatasetError, StorageError};

use crate::syntax::ast::Span;

/// What went wrong. Each kind has a stable snake_case `code` that agents program against.
#[derive(Debug, Clone, PartialEq)]
pub enum ErrorKind {
    /// The text is not a valid query (lexing or parsing).
    Parse,
    /// A field, table or column the query names does not exist.
    UnknownField,
    /// A value or column has a type the operation cannot take.
    Type,
    /// A construct that parses but this engine does not execute (yet).
    Capability {
        feature: String,
        tier: String,
    },
    /// A configured limit was exceeded.
    LimitExceeded {
        limit: String,
        max: u64,
        value: u64,
    },
    /// An address that is not in the context store.
    UnknownContext,
    /// Reading or writing data failed (missing dataset, corrupt file, ...).
    Io,
    PermissionDenied,
    /// A bug: something the engine should never do.
    Internal,
}

impl ErrorKind {
    pub fn code(&self) -> &'static str {
        match self {
            ErrorKind::Parse => "parse_error",
            ErrorKind::UnknownField => "unknown_field",
            ErrorKind::Type => "type_error",
            ErrorKind::Capability { .. } => "capability_error",
            ErrorKind::LimitExceeded { .. } => "limit_exceeded",
            ErrorKind::UnknownContext => "unknown_context",
            ErrorKind::Io => "io_error",
            ErrorKind::PermissionDenied => "permission_denied",
            ErrorKind::Internal => "internal_error",
        }
    }
}

#[derive(Debug, Clone)]
pub struct Error {
    pub kind: ErrorKind,
    pub message: String,
    pub span: Option<Span>,
    /// What most errors lack (help, a file location, a cause), boxed so that an `Error`, and
    /// every `Result` that carries one, stays small.
    extra: Option<Box<Extra>>,
}

#[derive(Debug, Clone, Default)]
struct Extra {
    help: Option<String>,
    /// The input file (and 1-based line) the error is about, when it is about a file: an
    /// ingest's bad line, a file that cannot be read.
    location: Option<FileLocation>,
    /// The error this one was made from.
    cause: Option<Arc<dyn std::error::Error + Send + Sync>>,
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.render())
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.cause()
            .map(|c| c as &(dyn std::error::Error + 'static))
    }
}

/// A place in an input file.
#[derive(Debug, Clone, PartialEq)]
pub struct FileLocation {
    pub file: String,
    /// 1-based; `None` when the error is about the whole file.
    pub line: Option<u64>,
}

/// Errors are equal when what they tell is equal (kind, message, position, help, file); their
/// causes are not compared.
impl PartialEq for Error {
    fn eq(&self, other: &Self) -> bool {
        (
            &self.kind,
            &self.message,
            &self.span,
            self.help(),
            self.location(),
        ) == (
            &other.kind,
            &other.message,
            &other.span,
            other.help(),
            other.location(),
        )
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Error {
            kind,
            message: message.into(),
            span: None,
            extra: None,
        }
    }

    fn extra_mut(&mut self) -> &mut Extra {
        self.extra.get_or_insert_with(Box::default)
    }

    /// The help, if any.
    pub fn help(&self) -> Option<&str> {
        self.extra.as_ref()?.help.as_deref()
    }

    /// The input file (and line) the error is about, if any.
    pub fn location(&self) -> Option<&FileLocation> {
        self.extra.as_ref()?.location.as_ref()
    }

    /// The error this one was made from, if any.
    pub fn cause(&self) -> Option<&(dyn std::error::Error + Send + Sync + 'static)> {
        self.extra.as_ref()?.cause.as_deref()
    }

    /// Name the input file (and line) the error is about.
    pub fn in_file(mut self, file: impl Into<String>, line: Option<u64>) -> Self {
        self.extra_mut().location = Some(FileLocation {
            file: file.into(),
            line,
        });
        self
    }

    /// Keep `cause` as the error this one came from.
    pub fn caused_by(mut self, cause: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.extra_mut().cause = Some(Arc::new(cause));
        self
    }

    /// The first error of the cause chain of type `E`.
    pub fn find_cause<E: std::error::Error + 'static>(&self) -> Option<&E> {
        let mut next: Option<&(dyn std::error::Error + 'static)> = self
            .cause()
            .map(|c| c as &(dyn std::error::Error + 'static));
        while let Some(e) = next {
            if let Some(found) = e.downcast_ref::<E>() {
                return Some(found);
            }
            next = e.source();
        }
        None
    }

    /// The dataset has no such table (as opposed to a table that could not be read).
    pub fn is_missing_table(&self) -> bool {
        matches!(
            self.find_cause::<DatasetError>(),
            Some(DatasetError::MissingTable { .. })
        )
    }
    pub fn parse(message: impl Into<String>, span: Span) -> Self {
        Error::new(ErrorKind::Parse, message).at(span)
    }
    pub fn unknown_field(message: impl Into<String>) -> Self {
        Error::new(ErrorKind::UnknownField, message)
    }
    pub fn type_error(message: impl Into<String>) -> Self {
        Error::new(ErrorKind::Type, message)
    }
    pub fn capability(feature: &str, tier: &str) -> Self {
        Error::new(
            ErrorKind::Capability {
                feature: feature.to_string(),
                tier: tier.to_string(),
            },
            format!("{feature} ({tier}) is not supported by this engine yet"),
        )
    }
    pub fn limit(limit: &str, max: u64, value: u64) -> Self {
        Error::new(
            ErrorKind::LimitExceeded {
                limit: limit.to_string(),
                max,
                value,
            },
            format!("{limit} is {value}, above the limit of {max}"),
        )
    }
    /// A context address that is not in the context store.
    pub fn unknown_context(address: &str) -> Self {
        Self::new(
            ErrorKind::UnknownContext,
            format!("no bundle {address} in this dataset's context store"),
        )
        .with_help(
            "run the CONTEXT FOR query again to compute and store it; a bundle computed where \
             the context store cannot be written is not stored (its metadata.not_stored says \
             why; [context] store in signalql.toml names a writable one)",
        )
    }

    pub fn io(message: impl Into<String>) -> Self {
        Error::new(ErrorKind::Io, message)
    }
    pub fn internal(message: impl Into<String>) -> Self {
        Error::new(ErrorKind::Internal, message)
    }
    /// Attach a position (kept if one is already set).
    pub fn at(mut self, span: Span) -> Self {
        if self.span.is_none() {
            self.span = Some(span);
        }
        self
    }
    pub fn with_help(mut self, help: impl Into<String>) -> Self {
        self.extra_mut().help = Some(help.into());
        self
    }
    pub fn code(&self) -> &'static str {
        self.kind.code()
    }

    fn render(&self) -> String {
        let mut s = format!("{}: {}", self.code(), self.message);
        if let Some(span) = &self.span {
            s.push_str(&format!(" at line {}, column {}", span.line, span.column));
        }
        if let Some(help) = self.help() {
            s.push_str(&format!(" (help: {help})"));
        }
        s
    }

    /// The JSON form `{"error": {code, message, line?, column?, ...}}`.
    pub fn to_json(&self) -> Value {
        let mut e = Map::new();
        e.insert("code".into(), json!(self.code()));
        e.insert("message".into(), json!(self.message));
        if let Some(span) = &self.span {
            e.insert("line".into(), json!(span.line));
            e.insert("column".into(), json!(span.column));
            e.insert("offset".into(), json!(span.start));
        } else if let Some(FileLocation { file, line }) = self.location() {
            e.insert("file".into(), json!(file));
            if let Some(line) = line {
                e.insert("line".into(), json!(line));
            }
        }
        match &self.kind {
            ErrorKind::Capability { feature, tier } => {
                e.insert("feature".into(), json!(feature));
                e.insert("tier".into(), json!(tier));
            }
            ErrorKind::LimitExceeded { limit, max, value } => {
                e.insert("limit".into(), json!(limit));
                e.insert("max".into(), json!(max));
                e.insert("value".into(), json!(value));
            }
            _ => {}
        }
        if let Some(help) = self.help() {
            e.insert("help".into(), json!(help));
        }
        json!({ "error": Value::Object(e) })
    }
}

impl Serialize for Error {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        self.to_json().serialize(s)
    }
}

impl From<DatasetError> for Error {
    fn from(e: DatasetError) -> Self {
        let message = e.to_string();
        let err = match &e {
            DatasetError::BadColumn { .. } => Error::type_error(message),
            DatasetError::BadFile { file, .. } => Error::io(message).in_file(file.clone(), None),
            DatasetError::Unsupported(_) => Error::new(
                ErrorKind::Capability {
                    feature: "dataset root scheme".into(),
                    tier: "engine".into(),
                },
                message,
            ),
            DatasetError::NotYet { feature, .. } => Error::new(
                ErrorKind::Capability {
                    feature: feature.to_string(),
                    tier: "engine".into(),
                },
                message,
            ),
            DatasetError::Denied(_) => Error::new(ErrorKind::PermissionDenied, message),
            _ => Error::io(message),
        };
        err.caused_by(e)
    }
}

/// A catalog failure (ingest, generation, writing) is an `io_error` with the catalog's message;
/// a bad input line also names its file and line, an unreadable path its path.
impl From<CatalogError> for Error {
    fn from(e: CatalogError) -> Self {
        let err = Error::io(e.to_string());
        let err = match &e {
            CatalogError::BadInput { file, line, .. } => err.in_file(file.clone(), Some(*line)),
            CatalogError::Io { path, .. } => err.in_file(path.clone(), None),
            _ => err,
        };
        err.caused_by(e)
    }
}

/// Storage (a local folder or S3) failed: an `io_error` naming the path.
impl From<StorageError> for Error {
    fn from(e: StorageError) -> Self {
        Error::io(e.to_string()).caused_by(e)
    }
}

impl From<datafusion::arrow::error::ArrowError> for Error {
    fn from(e: datafusion::arrow::error::ArrowError) -> Self {
        Error::from(datafusion::error::DataFusionError::ArrowError(
            Box::new(e),
            None,
        ))
    }
}

impl From<datafusion::error::DataFusionError> for Error {
    fn from(e: datafusion::error::DataFusionError) -> Self {
        let cause = Arc::new(e);
        let mut err = Error::from_datafusion(&cause);
        err.extra_mut().cause = Some(cause);
        err
    }
}

impl Error {
    /// Our error for a DataFusion error (without the cause; [`From`] adds it).
    fn from_datafusion(e: &datafusion::error::DataFusionError) -> Error {
        use datafusion::error::DataFusionError as D;
        // A memory-pool error or one of ours may come wrapped (in an Arrow error from a
        // stream, a shared error from a repartition, a context): what counts is the root.
        let root = e.find_root();
        if !std::ptr::eq(root, e) {
            match root {
                D::ResourcesExhausted(_) => return Error::from_datafusion(root),
                D::External(ext) if ext.downcast_ref::<Error>().is_some() => {
                    return Error::from_datafusion(root);
                }
                D::Execution(m) if unreadable_value(m) => return Error::from_datafusion(root),
                _ => {}
            }
        }
        match e {
            // A value in the data the view cannot read (docs/mapping.md): the data's problem.
            D::Execution(m) if unreadable_value(m) => Error::io(m.clone()),
            D::ArrowError(a, _)
                if matches!(**a, datafusion::arrow::error::ArrowError::IoError(..)) =>
            {
                Error::io(a.to_string())
            }
            D::IoError(io) => Error::io(io.to_string()),
            D::ParquetError(p) => Error::io(format!("cannot read Parquet data: {p}")),
            D::ObjectStore(o) => Error::io(o.to_string()),
            // The executor fills in the configured pool size (`Executor::fill_limits`).
            D::ResourcesExhausted(m) => Error::new(
                ErrorKind::LimitExceeded {
                    limit: "query_memory_bytes".into(),
                    max: 0,
                    value: 0,
                },
                m.clone(),
            ),
            D::Context(ctx, inner) => {
                let mut err = Error::from_datafusion(inner);
                err.message = format!("{ctx}: {}", err.message);
                err
            }
            D::External(ext) => match ext.downcast_ref::<Error>() {
                Some(ours) => ours.clone(),
                None => Error::internal(ext.to_string()),
            },
            other => Error::internal(other.to_string()),
        }
    }
}

/// Whether an execution error is a value of a mapped table that cannot be read.
fn unreadable_value(message: &str) -> bool {
    message.starts_with(signalql_udfs::scalar::text_time::ERROR_PREFIX)
}

/// The text of a panic's payload.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into())
}

/// The `internal_error` for a panic caught at the engine's boundary.
pub fn from_panic(payload: &(dyn std::any::Any + Send)) -> Error {
    Error::internal(format!(
        "the engine panicked (a bug; please report it): {}",
        panic_message(payload)
    ))
}

/// Runs `request` and turns a panic inside it into an `internal_error`, so a server keeps
/// serving and a CLI exits with an error (the boundary of every request: CLI, MCP).
pub async fn catch_panics<T>(request: impl std::future::Future<Output = Result<T>>) -> Result<T> {
    use futures::FutureExt;
    match std::panic::AssertUnwindSafe(request).catch_unwind().await {
        Ok(r) => r,
        Err(payload) => Err(from_panic(payload.as_ref())),
    }
}
